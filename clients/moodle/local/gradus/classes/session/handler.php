<?php
// This file is part of Moodle - http://moodle.org/
//
// Moodle is free software: you can redistribute it and/or modify
// it under the terms of the GNU General Public License as published by
// the Free Software Foundation, either version 3 of the License, or
// (at your option) any later version.
//
// Moodle is distributed in the hope that it will be useful,
// but WITHOUT ANY WARRANTY; without even the implied warranty of
// MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
// GNU General Public License for more details.
//
// You should have received a copy of the GNU General Public License
// along with Moodle.  If not, see <http://www.gnu.org/licenses/>.

namespace local_gradus\session;

use local_gradus\connection;

/**
 * Moodle session handler on Gradus' native session commands.
 *
 * Each page locks and reads its session in one round trip (SESSION.OPEN, waiting server-side in
 * FIFO order while another request of the same session holds it) and writes and unlocks it in
 * another (SESSION.CLOSE). A page that dies frees the lock when its connection closes; a hung
 * one loses it when the lease runs out. Configured in config.php:
 *
 *     $CFG->session_handler_class = '\local_gradus\session\handler';
 *     $CFG->session_gradus_server = 'tcp://127.0.0.1:6379?user=moodle&auth=secret&database=0';
 *     $CFG->session_gradus_prefix = 'mdl_sess:';                // optional
 *     $CFG->session_gradus_acquire_lock_timeout = 120;          // seconds a page waits for its session
 *     $CFG->session_gradus_lock_expire = 7200;                  // seconds before a hung page's lock is taken back
 *     $CFG->session_gradus_max_waiters = 0;                     // > 0: the next waiting page fails at once
 *
 * @package    local_gradus
 * @copyright  2026 Gradus contributors
 * @license    http://www.gnu.org/copyleft/gpl.html GNU GPL v3 or later
 */
class handler extends \core\session\handler {
    /** @var string the server URL */
    protected $server;

    /** @var string key prefix of session data */
    protected $prefix;

    /** @var int seconds a page waits for its session lock */
    protected $acquiretimeout;

    /** @var int seconds after which a held session lock is taken back */
    protected $lockexpire;

    /** @var int|null waiting pages allowed per session (null: no cap) */
    protected $maxwaiters;

    /** @var \Redis|null the connection (it holds this request's session lock) */
    protected $redis = null;

    /** @var \Gradus\SessionHandler|null the PHP save handler */
    protected $savehandler = null;

    /**
     * Read the configuration from $CFG.
     */
    public function __construct() {
        global $CFG;
        $this->server = $CFG->session_gradus_server ?? 'tcp://127.0.0.1:6379';
        $this->prefix = $CFG->session_gradus_prefix ?? 'mdl_sess:';
        $this->acquiretimeout = (int) ($CFG->session_gradus_acquire_lock_timeout ?? 120);
        $this->lockexpire = (int) ($CFG->session_gradus_lock_expire ?? 7200);
        $max = (int) ($CFG->session_gradus_max_waiters ?? 0);
        $this->maxwaiters = $max > 0 ? $max : null;
    }

    /**
     * Connect to Gradus and register the save handler.
     *
     * @throws \core\session\exception when phpredis is missing or Gradus is unreachable
     */
    public function init() {
        global $CFG;
        if (!extension_loaded('redis')) {
            throw new \core\session\exception(
                'sessionhandlerproblem',
                'error',
                '',
                null,
                'The Gradus session handler needs the redis PHP extension (phpredis).'
            );
        }
        try {
            [$this->redis] = connection::connect($this->server);
        } catch (\Gradus\GradusException $e) {
            throw new \core\session\exception('sessionhandlerproblem', 'error', '', null, $e->getMessage());
        }
        $this->savehandler = new \Gradus\SessionHandler($this->redis, [
            'prefix' => $this->prefix,
            'lock_wait' => $this->acquiretimeout * 1000,
            'lease' => $this->lockexpire * 1000,
            'max_waiters' => $this->maxwaiters,
            'ttl' => (int) ($CFG->sessiontimeout ?? 7200),
            'errors' => 'throw',
        ]);
        // Moodle writes and closes the session itself (manager::write_close at shutdown).
        session_set_save_handler($this->savehandler, false);
    }

    /**
     * Start the session: lock and read it.
     *
     * @return bool success
     * @throws \core\session\exception when the lock cannot be had in time or Gradus fails
     */
    public function start() {
        try {
            return parent::start();
        } catch (\Gradus\GradusException $e) {
            $code = strpos($e->getMessage(), 'stayed locked') !== false || strpos($e->getMessage(), 'too many') !== false
                ? 'sessioncannotobtainlock' : 'sessionhandlerproblem';
            throw new \core\session\exception($code, 'error', '', null, $e->getMessage());
        }
    }

    /**
     * Does Gradus hold data for this session?
     *
     * @param string $sid
     * @return bool
     */
    public function session_exists($sid) {
        if (!$this->redis) {
            return false;
        }
        try {
            return (bool) $this->redis->exists($this->prefix . $sid);
        } catch (\RedisException $e) {
            return false;
        }
    }

    /**
     * Kill every session: one server-side PURGE of the session prefix.
     */
    public function kill_all_sessions() {
        if ($this->redis) {
            $this->redis->rawCommand('PURGE', $this->prefix);
        }
    }

    /**
     * Kill one session (its data; a request holding its lock then finds nothing to write to).
     *
     * @param string $sid
     */
    public function kill_session($sid) {
        if ($this->redis) {
            $this->redis->rawCommand('SESSION.DESTROY', $this->prefix . $sid);
        }
    }
}
