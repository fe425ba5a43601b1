<?php
// Moodle's namespaced API declarations (4.0-4.4 signatures) the plugins implement or extend.
namespace core\session {
    /** lib/classes/session/handler.php */
    abstract class handler {
        public function start() {
            return session_start();
        }
        abstract public function init();
        abstract public function session_exists($sid);
        abstract public function kill_all_sessions();
        abstract public function kill_session($sid);
    }

    /** lib/classes/session/exception.php */
    class exception extends \moodle_exception {
    }
}

namespace core\lock {
    /** lib/classes/lock/lock_factory.php */
    interface lock_factory {
        public function __construct($type);
        public function supports_timeout();
        public function supports_auto_release();
        public function is_available();
        public function get_lock($resource, $timeout, $maxlifetime = 86400);
        public function release_lock(lock $lock);
    }

    /** lib/classes/lock/lock.php */
    class lock {
        protected $key = '';
        protected $factory;
        protected $released;
        protected $caller = 'unknown';

        public function __construct($key, $factory) {
            $this->factory = $factory;
            $this->key = $key;
            $this->released = false;
            $this->caller = format_backtrace(debug_backtrace(), true);
        }
        public function get_key() {
            return $this->key;
        }
        public function release() {
            $this->released = true;
            if (empty($this->factory)) {
                return false;
            }
            $result = $this->factory->release_lock($this);
            unset($this->factory);
            $this->factory = null;
            $this->key = '';
            return $result;
        }
        public function __destruct() {
            if (!$this->released) {
                $this->release();
            }
        }
    }
}

namespace core_privacy\local\metadata {
    interface null_provider {
        public static function get_reason(): string;
    }
    interface provider {
        public static function get_metadata(collection $collection): collection;
    }
    class collection {
        public $items = [];

        public function add_external_location_link(string $name, array $privacyfields, string $summary = ''): collection {
            get_string($summary, 'cachestore_gradus');
            foreach ($privacyfields as $field) {
                get_string($field, 'cachestore_gradus');
            }
            $this->items[] = $name;
            return $this;
        }
    }
}

namespace {
    /** cache/classes/store.php */
    interface cache_store_interface {
        public static function are_requirements_met();
        public static function is_supported_mode($mode);
        public static function get_supported_features(array $configuration = array());
        public static function get_supported_modes(array $configuration = array());
        public static function initialise_test_instance(cache_definition $definition);
        public static function unit_test_configuration();
    }

    abstract class cache_store implements cache_store_interface {
        const SUPPORTS_MULTIPLE_IDENTIFIERS = 1;
        const SUPPORTS_DATA_GUARANTEE = 2;
        const SUPPORTS_NATIVE_TTL = 4;
        const IS_SEARCHABLE = 8;
        const DEREFERENCES_OBJECTS = 16;
        const MODE_APPLICATION = 1;
        const MODE_SESSION = 2;
        const MODE_REQUEST = 4;

        abstract public function __construct($name, array $configuration = array());
        abstract public function my_name();
        abstract public function initialise(cache_definition $definition);
        abstract public function is_initialised();
        public function is_ready() {
            return forward_static_call(array($this, 'are_requirements_met'));
        }
        abstract public function get($key);
        abstract public function get_many($keys);
        abstract public function set($key, $data);
        abstract public function set_many(array $keyvaluearray);
        abstract public function delete($key);
        abstract public function delete_many(array $keys);
        abstract public function purge();
        public function instance_created() {
        }
        public function instance_deleted() {
        }
        public static function can_add_instance() {
            return true;
        }
        public function supports_native_ttl() {
            return $this::get_supported_features() & self::SUPPORTS_NATIVE_TTL;
        }
        public function get_warnings() {
            return array();
        }
        public function create_clone(array $details = array()) {
            return clone($this);
        }
    }

    /** cache/classes/interfaces.php */
    interface cache_is_key_aware {
        public function has($key);
        public function has_any(array $keys);
        public function has_all(array $keys);
    }
    interface cache_is_searchable {
        public function find_all();
        public function find_by_prefix($prefix);
    }
    interface cache_is_configurable {
        public static function config_get_configuration_array($data);
        public static function config_set_edit_form_data(moodleform $editform, array $config);
    }

    /** cache/classes/definition.php, reduced to what a store reads. */
    class cache_definition {
        protected $id;
        protected $ttl;
        protected $mode;

        public function __construct(string $id, int $ttl = 0, int $mode = cache_store::MODE_APPLICATION) {
            [$this->id, $this->ttl, $this->mode] = [$id, $ttl, $mode];
        }
        public function get_id() {
            return $this->id;
        }
        public function get_ttl() {
            return $this->ttl;
        }
        public function get_mode() {
            return $this->mode;
        }
        public function generate_definition_hash() {
            return md5($this->id);
        }
    }

    require_once($CFG->dirroot . '/cache/forms.php');
}
