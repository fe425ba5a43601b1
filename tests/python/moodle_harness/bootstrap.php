<?php
// A harness that stands in for the parts of Moodle the Gradus plugins use: the base classes and
// interfaces with Moodle 4.0-4.4's own signatures (lib/classes/session/handler.php,
// lib/classes/lock/lock_factory.php and lock.php, cache/classes/store.php and interfaces.php),
// a core_component-style class loader for plugin classes/, get_string() over the plugins' lang
// files, and get_config(). PHP itself checks that the plugin classes are compatible with these
// declarations when it loads them.

define('MOODLE_INTERNAL', true);
define('MATURITY_BETA', 100);
define('PARAM_TEXT', 'text');
define('PARAM_INT', 'int');
define('PARAM_RAW', 'raw');
define('DEBUG_DEVELOPER', 32767);
define('PHPUNIT_TEST', false);
define('IGNORE_MISSING', 0);

global $CFG;
$CFG = new stdClass();
$CFG->dirroot = __DIR__ . '/moodle';
$CFG->debugdeveloper = false;
$CFG->sessiontimeout = 7200;
$CFG->forced_plugin_settings = [];

// core_component: frankenstyle namespaces map to a plugin's classes/ directory.
spl_autoload_register(static function ($class) {
    global $CFG;
    $types = ['local' => 'local', 'cachestore' => 'cache/stores'];
    $parts = explode('\\', ltrim($class, '\\'));
    $first = array_shift($parts);
    if (!$parts || strpos($first, '_') === false) {
        return;
    }
    [$type, $name] = explode('_', $first, 2);
    if (!isset($types[$type])) {
        return;
    }
    $file = "{$CFG->dirroot}/{$types[$type]}/{$name}/classes/" . implode('/', $parts) . '.php';
    if (is_file($file)) {
        require_once($file);
    }
});

/** Component name to directory, as core_component::get_component_directory(). */
function harness_component_dir(string $component): string {
    global $CFG;
    [$type, $name] = explode('_', $component, 2);
    return $CFG->dirroot . '/' . ['local' => 'local', 'cachestore' => 'cache/stores'][$type] . '/' . $name;
}

/** The plugin's lang/en strings, as the string manager loads them. */
function harness_strings(string $component): array {
    static $cache = [];
    if (!isset($cache[$component])) {
        $string = [];
        $file = harness_component_dir($component) . "/lang/en/{$component}.php";
        if (is_file($file)) {
            include($file);
        }
        $cache[$component] = $string;
    }
    return $cache[$component];
}

function get_string($identifier, $component = '', $a = null) {
    $strings = $component === '' || $component === 'moodle' ? ['required' => 'Required'] : harness_strings($component);
    if (!array_key_exists($identifier, $strings)) {
        throw new coding_exception("Invalid get_string() identifier: '{$identifier}' in '{$component}'");
    }
    $text = $strings[$identifier];
    if ($a !== null) {
        if (is_object($a) || is_array($a)) {
            foreach ((array) $a as $k => $v) {
                $text = str_replace('{$a->' . $k . '}', (string) $v, $text);
            }
        } else {
            $text = str_replace('{$a}', (string) $a, $text);
        }
    }
    return $text;
}

function get_config($plugin, $name = null) {
    global $CFG;
    $config = (object) ($CFG->forced_plugin_settings[$plugin] ?? []);
    return $name === null ? $config : ($config->$name ?? false);
}

function debugging($message = '', $level = DEBUG_DEVELOPER) {
    fwrite(STDERR, "debugging: $message\n");
    return true;
}

function format_backtrace($callers, $plaintext = false) {
    return 'harness';
}

class lang_string {
    protected $identifier;
    protected $component;
    protected $a;

    public function __construct($identifier, $component = '', $a = null) {
        get_string($identifier, $component, $a); // Moodle checks string existence in developer mode.
        [$this->identifier, $this->component, $this->a] = [$identifier, $component, $a];
    }
    public function out() {
        return get_string($this->identifier, $this->component, $this->a);
    }
    public function __toString() {
        return $this->out();
    }
}

class moodle_exception extends Exception {
    public $errorcode;
    public $module;
    public $a;
    public $link;
    public $debuginfo;

    public function __construct($errorcode, $module = '', $link = '', $a = null, $debuginfo = null) {
        [$this->errorcode, $this->module, $this->link, $this->a, $this->debuginfo] = [$errorcode, $module, $link, $a, $debuginfo];
        parent::__construct("$module/$errorcode" . ($debuginfo ? " ($debuginfo)" : ''));
    }
}

class coding_exception extends moodle_exception {
    public function __construct($hint, $debuginfo = null) {
        parent::__construct('codingerror', 'debug', '', $hint, $debuginfo);
        $this->message = $hint;
    }
}

// Admin settings (lib/adminlib.php), reduced to what settings.php files call.
class admin_setting {
    public $name;
    public $visiblename;
    public $description;
    public $defaultsetting;

    public function __construct($name, $visiblename, $description, $defaultsetting = '') {
        $this->name = $name;
        $this->visiblename = (string) $visiblename;
        $this->description = (string) $description;
        $this->defaultsetting = $defaultsetting;
    }
}
class admin_setting_heading extends admin_setting {
    public function __construct($name, $heading, $information) {
        parent::__construct($name, $heading, $information, '');
    }
}
class admin_setting_configtext extends admin_setting {
    public $paramtype;

    public function __construct($name, $visiblename, $description, $defaultsetting, $paramtype = PARAM_RAW, $size = null) {
        parent::__construct($name, $visiblename, $description, $defaultsetting);
        $this->paramtype = $paramtype;
    }
}
class admin_setting_configpasswordunmask extends admin_setting_configtext {
    public function __construct($name, $visiblename, $description, $defaultsetting) {
        parent::__construct($name, $visiblename, $description, $defaultsetting, PARAM_RAW);
    }
}
class admin_settingpage {
    public $name;
    public $visiblename;
    public $settings = [];

    public function __construct($name, $visiblename) {
        $this->name = $name;
        $this->visiblename = (string) $visiblename;
    }
    public function add($setting) {
        $this->settings[$setting->name] = $setting;
        return true;
    }
}
class harness_admin_root {
    public $pages = [];

    public function add($parent, $page) {
        $this->pages[$parent][] = $page;
        return true;
    }
}
require_once(__DIR__ . '/stubs_namespaced.php');
