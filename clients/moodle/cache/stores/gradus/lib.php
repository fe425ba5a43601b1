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

/**
 * Gradus cache store.
 *
 * @package    cachestore_gradus
 * @copyright  2026 Gradus contributors
 * @license    http://www.gnu.org/copyleft/gpl.html GNU GPL v3 or later
 */

/**
 * Moodle cache store on Gradus: the application and session cache modes.
 *
 * Every item is a string key "<prefix><definition hash>-<key>" holding the serialised value, with
 * the definition's TTL as its native expiry. Multi-gets are one MGET. Purging a definition is one
 * server-side PURGE of its prefix; purging the store (an instance not bound to a definition, or
 * instance_deleted) is FLUSHDB of its keyspace, which Gradus scopes to the store user's tenant,
 * so one site's purge never empties another site's cache. A miss takes a lease (GETLEASE): one
 * request regenerates the value and stores it (SETLEASE), the others wait up to leasewaitms for
 * it instead of all regenerating it at once.
 *
 * @package    cachestore_gradus
 * @copyright  2026 Gradus contributors
 * @license    http://www.gnu.org/copyleft/gpl.html GNU GPL v3 or later
 */
class cachestore_gradus extends cache_store implements cache_is_configurable, cache_is_key_aware, cache_is_searchable {
    /** Default lease on a miss, ms. */
    const DEFAULT_LEASE_MS = 10000;

    /** Default wait for another request's value, ms. */
    const DEFAULT_LEASE_WAIT_MS = 1000;

    /** @var string the store instance's name */
    protected $name;

    /** @var array the instance configuration */
    protected $config;

    /** @var Redis|null the connection */
    protected $redis = null;

    /** @var string|null key prefix of the definition this instance serves */
    protected $keyprefix = null;

    /** @var cache_definition|null the definition */
    protected $definition = null;

    /** @var int seconds of TTL (0: none) */
    protected $ttl = 0;

    /** @var int[] lease tokens of misses this request won, by key: set() stores with them */
    protected $leases = [];

    /** @var string|null why the connection failed */
    protected $error = null;

    /**
     * Are the requirements met (phpredis)?
     *
     * @return bool
     */
    public static function are_requirements_met() {
        return class_exists('Redis');
    }

    /**
     * Application and session caches.
     *
     * @param int $mode one of cache_store::MODE_*
     * @return bool
     */
    public static function is_supported_mode($mode) {
        return $mode === self::MODE_APPLICATION || $mode === self::MODE_SESSION;
    }

    /**
     * Native TTL, searchable, and values come back as copies (serialised).
     *
     * @param array $configuration
     * @return int
     */
    public static function get_supported_features(array $configuration = []) {
        return self::SUPPORTS_NATIVE_TTL + self::IS_SEARCHABLE + self::DEREFERENCES_OBJECTS;
    }

    /**
     * The supported modes.
     *
     * @param array $configuration
     * @return int
     */
    public static function get_supported_modes(array $configuration = []) {
        return self::MODE_APPLICATION + self::MODE_SESSION;
    }

    /**
     * Create the store instance and connect.
     *
     * @param string $name the store instance's name
     * @param array $configuration server, username, password, database, prefix, leasems, leasewaitms
     */
    public function __construct($name, array $configuration = []) {
        $this->name = $name;
        $this->config = $configuration + [
            'server' => '', 'username' => '', 'password' => '', 'database' => 0, 'prefix' => 'mdl_',
            'leasems' => self::DEFAULT_LEASE_MS, 'leasewaitms' => self::DEFAULT_LEASE_WAIT_MS,
        ];
        if ($this->config['server'] === '' || !self::are_requirements_met()) {
            return;
        }
        try {
            \local_gradus\connection::load_library();
            [$conn] = \Gradus\Connection::parse($this->config['server']);
            if ($this->config['password'] !== '') {
                $conn['auth'] = $this->config['password'];
                if ($this->config['username'] !== '') {
                    $conn['user'] = $this->config['username'];
                }
            }
            $conn['database'] = (int) $this->config['database'];
            $this->redis = \Gradus\Connection::connect($conn);
            // Values are PHP-serialised by phpredis (set, setex, pipelines); raw replies
            // (GETLEASE, MGET) and SETLEASE go through the same serialiser by hand.
            $this->redis->setOption(Redis::OPT_SERIALIZER, Redis::SERIALIZER_PHP);
        } catch (\Throwable $e) {
            $this->error = $e->getMessage();
            $this->redis = null;
        }
    }

    /**
     * The store instance's name.
     *
     * @return string
     */
    public function my_name() {
        return $this->name;
    }

    /**
     * Bind the instance to a definition.
     *
     * @param cache_definition $definition
     */
    public function initialise(cache_definition $definition) {
        $this->definition = $definition;
        $this->keyprefix = $this->config['prefix'] . $definition->generate_definition_hash() . '-';
        $this->ttl = max(0, (int) $definition->get_ttl());
    }

    /**
     * Has initialise() run?
     *
     * @return bool
     */
    public function is_initialised() {
        return $this->keyprefix !== null;
    }

    /**
     * Is the connection up?
     *
     * @return bool
     */
    public function is_ready() {
        return $this->redis !== null;
    }

    /**
     * Warnings for the admin (the connection failed).
     *
     * @return string[]
     */
    public function get_warnings() {
        return $this->error === null ? [] : [get_string('unreachable', 'cachestore_gradus', $this->error)];
    }

    /**
     * The full key of an item.
     *
     * @param string $key
     * @return string
     */
    protected function key($key) {
        return $this->keyprefix . $key;
    }

    /**
     * Decode a stored value; the empty placeholder of a lease is a miss.
     *
     * @param string|false|null $data
     * @return mixed the value or false
     */
    protected function decode($data) {
        if ($data === false || $data === null || $data === '') {
            return false;
        }
        return $this->redis->_unserialize($data);
    }

    /**
     * Get an item; on a miss, take the lease to regenerate it or wait for the request that has it.
     *
     * @param string $key
     * @return mixed the value, or false
     */
    public function get($key) {
        $full = $this->key($key);
        $leasems = (int) $this->config['leasems'];
        if ($leasems <= 0) {
            return $this->decode($this->redis->get($full));
        }
        $deadline = microtime(true) + ((int) $this->config['leasewaitms']) / 1000;
        $pause = 5000;
        while (true) {
            [$value, $token] = $this->redis->rawCommand('GETLEASE', $full, $leasems);
            if ($token !== false && $token !== null) {
                // Ours to regenerate (a miss, or a stale value): set() stores with the token.
                $this->leases[$key] = (int) $token;
                return $this->decode($value);
            }
            if ($value !== false && $value !== null && $value !== '') {
                return $this->decode($value);
            }
            if (microtime(true) >= $deadline) {
                return false;
            }
            usleep($pause);
            $pause = min($pause * 2, 100000);
        }
    }

    /**
     * Get several items in one MGET (missing ones are false).
     *
     * @param array $keys
     * @return array
     */
    public function get_many($keys) {
        if (!$keys) {
            return [];
        }
        $keys = array_values($keys);
        $values = $this->redis->rawCommand('MGET', ...array_map([$this, 'key'], $keys));
        $result = [];
        foreach ($keys as $i => $key) {
            $result[$key] = $this->decode($values[$i] ?? false);
        }
        return $result;
    }

    /**
     * Store an item with the definition's TTL (with the lease token when this request won the miss).
     *
     * @param string $key
     * @param mixed $data
     * @return bool
     */
    public function set($key, $data) {
        $full = $this->key($key);
        if (isset($this->leases[$key])) {
            $token = $this->leases[$key];
            unset($this->leases[$key]);
            $args = ['SETLEASE', $full, $token, $this->redis->_serialize($data)];
            if ($this->ttl > 0) {
                array_push($args, 'EX', $this->ttl);
            }
            if ($this->redis->rawCommand(...$args) !== false) {
                return true;
            }
            // The lease was no longer current (it ran out): store plainly.
        }
        if ($this->ttl > 0) {
            return (bool) $this->redis->setex($full, $this->ttl, $data);
        }
        return (bool) $this->redis->set($full, $data);
    }

    /**
     * Store several items in one pipeline.
     *
     * @param array $keyvaluearray items of ['key' => ..., 'value' => ...]
     * @return int how many were stored
     */
    public function set_many(array $keyvaluearray) {
        if (!$keyvaluearray) {
            return 0;
        }
        $pipe = $this->redis->multi(Redis::PIPELINE);
        foreach ($keyvaluearray as $pair) {
            unset($this->leases[$pair['key']]);
            if ($this->ttl > 0) {
                $pipe->setex($this->key($pair['key']), $this->ttl, $pair['value']);
            } else {
                $pipe->set($this->key($pair['key']), $pair['value']);
            }
        }
        return count(array_filter($pipe->exec()));
    }

    /**
     * Delete an item.
     *
     * @param string $key
     * @return bool
     */
    public function delete($key) {
        return $this->redis->del($this->key($key)) > 0;
    }

    /**
     * Delete several items.
     *
     * @param array $keys
     * @return int how many were deleted
     */
    public function delete_many(array $keys) {
        if (!$keys) {
            return 0;
        }
        return (int) $this->redis->del(array_map([$this, 'key'], array_values($keys)));
    }

    /**
     * Purge: this definition's items (one PURGE of its prefix) when bound to a definition, else the
     * store's whole keyspace (FLUSHDB: this tenant's keyspace only, in O(1)).
     *
     * @return bool
     */
    public function purge() {
        if ($this->keyprefix !== null) {
            $this->redis->rawCommand('PURGE', $this->keyprefix);
        } else {
            $this->redis->flushDB();
        }
        $this->leases = [];
        return true;
    }

    /**
     * The store instance is being deleted: empty its keyspace.
     */
    public function instance_deleted() {
        if ($this->redis !== null) {
            $this->redis->flushDB();
        }
    }

    /**
     * Is there a value for the key (a lease's empty placeholder is not one)?
     *
     * @param string $key
     * @return bool
     */
    public function has($key) {
        return $this->redis->strlen($this->key($key)) > 0;
    }

    /**
     * Is there a value for any of the keys?
     *
     * @param array $keys
     * @return bool
     */
    public function has_any(array $keys) {
        foreach ($this->get_many($keys) as $value) {
            if ($value !== false) {
                return true;
            }
        }
        return false;
    }

    /**
     * Is there a value for all of the keys?
     *
     * @param array $keys
     * @return bool
     */
    public function has_all(array $keys) {
        foreach ($this->get_many($keys) as $value) {
            if ($value === false) {
                return false;
            }
        }
        return true;
    }

    /**
     * Every key of this definition.
     *
     * @return array
     */
    public function find_all() {
        return $this->find_by_prefix('');
    }

    /**
     * The keys of this definition that start with a prefix (SCAN).
     *
     * @param string $prefix
     * @return array
     */
    public function find_by_prefix($prefix) {
        $pattern = str_replace(['\\', '*', '?', '['], ['\\\\', '\\*', '\\?', '\\['], $this->keyprefix . $prefix) . '*';
        $found = [];
        $iterator = null;
        $cut = strlen($this->keyprefix);
        do {
            $keys = $this->redis->scan($iterator, $pattern, 1000);
            if (!$keys) {
                continue;
            }
            // A lease's empty placeholder (a miss being regenerated) is not an item.
            $pipe = $this->redis->multi(Redis::PIPELINE);
            foreach ($keys as $key) {
                $pipe->strlen($key);
            }
            foreach ($pipe->exec() as $i => $length) {
                if ($length > 0) {
                    $found[] = substr($keys[$i], $cut);
                }
            }
        } while ($iterator > 0);
        return $found;
    }

    /**
     * The configuration from the add-instance form's data.
     *
     * @param stdClass $data
     * @return array
     */
    public static function config_get_configuration_array($data) {
        return [
            'server' => trim((string) $data->server),
            'username' => trim((string) ($data->username ?? '')),
            'password' => (string) ($data->password ?? ''),
            'database' => (int) ($data->database ?? 0),
            'prefix' => (string) ($data->prefix ?? 'mdl_'),
            'leasems' => (int) ($data->leasems ?? self::DEFAULT_LEASE_MS),
            'leasewaitms' => (int) ($data->leasewaitms ?? self::DEFAULT_LEASE_WAIT_MS),
        ];
    }

    /**
     * Fill the edit form from a configuration.
     *
     * @param moodleform $editform
     * @param array $config
     */
    public static function config_set_edit_form_data(moodleform $editform, array $config) {
        $data = [];
        foreach (['server', 'username', 'password', 'database', 'prefix', 'leasems', 'leasewaitms'] as $field) {
            if (array_key_exists($field, $config)) {
                $data[$field] = $config[$field];
            }
        }
        $editform->set_data($data);
    }

    /**
     * An instance for testing, on the test server from the admin settings.
     *
     * @param cache_definition $definition
     * @return cachestore_gradus|false
     */
    public static function initialise_test_instance(cache_definition $definition) {
        if (!self::are_requirements_met()) {
            return false;
        }
        $config = get_config('cachestore_gradus');
        if (empty($config->test_server)) {
            return false;
        }
        $store = new self('Gradus test', self::unit_test_configuration());
        if (!$store->is_ready()) {
            return false;
        }
        $store->initialise($definition);
        return $store;
    }

    /**
     * The configuration the unit tests use (admin settings, or TEST_CACHESTORE_GRADUS_TESTSERVER).
     *
     * @return array
     */
    public static function unit_test_configuration() {
        $config = get_config('cachestore_gradus');
        $server = defined('TEST_CACHESTORE_GRADUS_TESTSERVER') ? TEST_CACHESTORE_GRADUS_TESTSERVER
            : ($config->test_server ?? '');
        return [
            'server' => $server,
            'username' => $config->test_username ?? '',
            'password' => $config->test_password ?? '',
            'database' => (int) ($config->test_database ?? 1),
            'prefix' => 'phpunit_',
        ];
    }
}
