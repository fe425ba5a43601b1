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

namespace local_gradus\lock;

use core\lock\lock;
use core\lock\lock_factory;
use local_gradus\connection;

/**
 * Moodle lock factory on Gradus' native locks (LOCK / UNLOCK), for cron and scheduled tasks.
 *
 * Waiting is server-side and FIFO (no polling); a lock is released when the process that holds it
 * ends (its connection closes) or when $maxlifetime runs out. Configured in config.php:
 *
 *     $CFG->lock_factory = '\local_gradus\lock\gradus_lock_factory';
 *     $CFG->local_gradus_lock_server = 'tcp://127.0.0.1:6379?user=moodle&auth=secret&database=0';
 *
 * (without local_gradus_lock_server, $CFG->session_gradus_server is used).
 *
 * @package    local_gradus
 * @copyright  2026 Gradus contributors
 * @license    http://www.gnu.org/copyleft/gpl.html GNU GPL v3 or later
 */
class gradus_lock_factory implements lock_factory {
    /** @var string the lock type (cron, cache, ...): the prefix of lock names */
    protected $type;

    /** @var string the server URL */
    protected $server;

    /** @var \Redis|null the connection that holds this process' locks */
    protected $redis = null;

    /**
     * Create the factory for one lock type.
     *
     * @param string $type the type this lock is used for (e.g. cron, cache)
     */
    public function __construct($type) {
        global $CFG;
        $this->type = $type;
        $this->server = $CFG->local_gradus_lock_server ?? ($CFG->session_gradus_server ?? 'tcp://127.0.0.1:6379');
    }

    /**
     * Locks can wait with a timeout (server-side).
     *
     * @return bool
     */
    public function supports_timeout() {
        return true;
    }

    /**
     * Locks are released when the process ends: its connection closes.
     *
     * @return bool
     */
    public function supports_auto_release() {
        return true;
    }

    /**
     * Is Gradus reachable?
     *
     * @return bool
     */
    public function is_available() {
        try {
            return (bool) $this->connection()->ping();
        } catch (\Throwable $e) {
            return false;
        }
    }

    /**
     * Get a lock within the timeout, or false.
     *
     * @param string $resource the identifier of the lock (frankenstyle prefix)
     * @param int $timeout seconds to wait
     * @param int $maxlifetime seconds after which a lock still held is taken back (a hung process)
     * @return lock|bool the lock, or false if it could not be had in time
     */
    public function get_lock($resource, $timeout, $maxlifetime = 86400) {
        $name = $this->type . '_' . $resource;
        $redis = $this->connection();
        $lock = new \Gradus\Lock($redis, $name, max(0, (int) $maxlifetime) * 1000);
        try {
            if (!$lock->acquire(max(0, (int) $timeout) * 1000)) {
                return false;
            }
        } catch (\Gradus\GradusException $e) {
            debugging($e->getMessage(), DEBUG_DEVELOPER);
            return false;
        }
        return new lock($name . '|' . $lock->token(), $this);
    }

    /**
     * Release a lock.
     *
     * @param lock $lock the lock to release
     * @return bool true if it is no longer held (including if its lease had already run out)
     */
    public function release_lock(lock $lock) {
        $key = (string) $lock->get_key();
        $bar = strrpos($key, '|');
        if ($bar === false) {
            return true;
        }
        try {
            $this->connection()->rawCommand('UNLOCK', substr($key, 0, $bar), (int) substr($key, $bar + 1));
        } catch (\RedisException $e) {
            // NOLOCK / WRONGTOKEN: already released (lease ran out); a lost connection released it too.
            return true;
        }
        return true;
    }

    /**
     * The connection holding this factory's locks (made on first use).
     *
     * @return \Redis
     */
    protected function connection(): \Redis {
        if ($this->redis === null) {
            [$this->redis] = connection::connect($this->server);
        }
        return $this->redis;
    }
}
