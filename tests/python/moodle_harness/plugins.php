<?php
// Load both plugins the way Moodle does (version.php, lang, settings.php, privacy providers, the
// classes through the component loader, the store's lib.php and form) and print what was found.
require __DIR__ . '/bootstrap.php';

$out = [];
foreach (['local_gradus', 'cachestore_gradus'] as $component) {
    $plugin = new stdClass();
    include(harness_component_dir($component) . '/version.php');
    $out[$component]['version'] = (array) $plugin;
    $out[$component]['pluginname'] = get_string('pluginname', $component);
}

// local_gradus: settings.php under an admin tree, with the handler and factory configured.
$CFG->session_handler_class = '\local_gradus\session\handler';
$CFG->lock_factory = '\local_gradus\lock\gradus_lock_factory';
$hassiteconfig = true;
$ADMIN = new harness_admin_root();
include(harness_component_dir('local_gradus') . '/settings.php');
$page = $ADMIN->pages['localplugins'][0];
$out['local_gradus']['settings'] = array_map(fn($s) => $s->description, $page->settings);

// cachestore_gradus: settings.php is included with $settings set, as for every cache store.
$settings = new admin_settingpage('cachestoresettinggradus', 'Gradus');
include(harness_component_dir('cachestore_gradus') . '/settings.php');
$out['cachestore_gradus']['settings'] = array_keys($settings->settings);

// Classes.
$handlerclass = $CFG->session_handler_class;
$factoryclass = $CFG->lock_factory;
$out['classes'] = [
    'handler' => is_subclass_of($handlerclass, \core\session\handler::class),
    'lock_factory' => in_array(\core\lock\lock_factory::class, class_implements($factoryclass)),
    'privacy_local' => in_array(\core_privacy\local\metadata\null_provider::class,
        class_implements(\local_gradus\privacy\provider::class)),
    'privacy_local_reason' => get_string(\local_gradus\privacy\provider::get_reason(), 'local_gradus'),
];
$collection = \cachestore_gradus\privacy\provider::get_metadata(new \core_privacy\local\metadata\collection());
$out['classes']['privacy_cachestore'] = $collection->items;

// The store: cache/classes/factory.php requires lib.php, the admin UI the form.
require_once($CFG->dirroot . '/cache/stores/gradus/lib.php');
require_once($CFG->dirroot . '/cache/stores/gradus/addinstanceform.php');
$out['store'] = [
    'is_store' => is_subclass_of('cachestore_gradus', 'cache_store'),
    'interfaces' => array_values(array_intersect(
        ['cache_is_configurable', 'cache_is_key_aware', 'cache_is_searchable'], class_implements('cachestore_gradus'))),
    'modes' => cachestore_gradus::get_supported_modes(),
    'application' => cachestore_gradus::is_supported_mode(cache_store::MODE_APPLICATION),
    'session' => cachestore_gradus::is_supported_mode(cache_store::MODE_SESSION),
    'request' => cachestore_gradus::is_supported_mode(cache_store::MODE_REQUEST),
    'native_ttl' => (bool) (cachestore_gradus::get_supported_features() & cache_store::SUPPORTS_NATIVE_TTL),
    'requirements' => cachestore_gradus::are_requirements_met(),
];
$form = new cachestore_gradus_addinstance_form();
$out['form'] = $form->fields();
$data = (object) ['server' => ' 127.0.0.1:6379 ', 'username' => 'alpha', 'password' => 'pw', 'database' => '1',
    'prefix' => 'mdl_', 'leasems' => '5000', 'leasewaitms' => '500'];
$config = cachestore_gradus::config_get_configuration_array($data);
cachestore_gradus::config_set_edit_form_data($form, $config);
$out['config'] = $config;
$out['form_data'] = $form->data;
$unready = new cachestore_gradus('unreachable', ['server' => '127.0.0.1:1']);
$out['unreachable'] = ['ready' => $unready->is_ready(), 'warnings' => $unready->get_warnings()];
echo json_encode($out, JSON_PRETTY_PRINT), "\n";
