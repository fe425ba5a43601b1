<?php
// cachestore_gradus through the cache API's calls: php cache.php SCENARIO SETTINGS.json
//   basic      set/get/get_many/set_many/has*/delete*/find*/TTL, printed as JSON
//   purge      definition purge vs. another definition; store purge (FLUSHDB) vs. another tenant
//   stampede   one cache miss of many processes: get(); on false count a regeneration, sleep, set()
require __DIR__ . '/bootstrap.php';
require_once($CFG->dirroot . '/cache/stores/gradus/lib.php');

$scenario = $argv[1];
$settings = json_decode(file_get_contents($argv[2]), true);

function store_for(array $settings, string $tenant, cache_definition $definition = null): cachestore_gradus {
    $store = new cachestore_gradus("gradus-$tenant", $settings['stores'][$tenant]);
    if (!$store->is_ready()) {
        throw new RuntimeException(implode('; ', $store->get_warnings()));
    }
    if ($definition) {
        $store->initialise($definition);
    }
    return $store;
}

$out = [];
if ($scenario === 'basic') {
    $def = new cache_definition('core/coursemodinfo', 2);
    $store = store_for($settings, 'alpha', $def);
    $out['initialised'] = $store->is_initialised();
    $out['miss'] = $store->get('nothing');
    $out['set'] = $store->set('course1', ['name' => 'Maths', 'sections' => [1, 2, 3]]);
    $out['get'] = $store->get('course1');
    $out['set_many'] = $store->set_many([['key' => 'a', 'value' => 1], ['key' => 'b', 'value' => 'two'],
        ['key' => 'c', 'value' => (object) ['x' => 3]]]);
    $out['get_many'] = $store->get_many(['a', 'b', 'c', 'missing']);
    $out['has'] = [$store->has('a'), $store->has('missing'), $store->has_any(['missing', 'b']), $store->has_all(['a', 'missing'])];
    $found = $store->find_all();
    sort($found);
    $out['find_all'] = $found;
    $out['find_by_prefix'] = $store->find_by_prefix('cour');
    $out['delete'] = [$store->delete('a'), $store->delete('a')];
    $out['delete_many'] = $store->delete_many(['b', 'c', 'missing']);
    $out['ttl'] = $store->get('course1') !== false;
    sleep(3);
    $out['expired'] = $store->get('course1');
    $session = store_for($settings, 'alpha', new cache_definition('core/navigation', 0, cache_store::MODE_SESSION));
    $session->set('u1', 'nav');
    $out['session_mode'] = $session->get('u1');
} elseif ($scenario === 'purge') {
    $defs = [new cache_definition('core/string'), new cache_definition('core/config')];
    foreach (['alpha', 'beta'] as $tenant) {
        foreach ($defs as $def) {
            $store = store_for($settings, $tenant, $def);
            $store->set('k1', "$tenant-{$def->get_id()}-1");
            $store->set('k2', "$tenant-{$def->get_id()}-2");
        }
    }
    // Purging one definition leaves the other definition and the other tenant.
    store_for($settings, 'alpha', $defs[0])->purge();
    $read = function () use ($settings, $defs) {
        $r = [];
        foreach (['alpha', 'beta'] as $tenant) {
            foreach ($defs as $def) {
                $r[$tenant][$def->get_id()] = store_for($settings, $tenant, $def)->get_many(['k1', 'k2']);
            }
        }
        return $r;
    };
    $out['after_definition_purge'] = $read();
    // Purging the whole store (not bound to a definition): FLUSHDB of alpha's keyspace only.
    store_for($settings, 'alpha')->purge();
    $out['after_store_purge'] = $read();
} elseif ($scenario === 'stampede') {
    $def = new cache_definition('core/langmenu', 300);
    $store = store_for($settings, 'alpha', $def);
    $counter = new Redis();
    $counter->connect($settings['host'], $settings['port']);
    $counter->auth(['alpha', 'alpha-pass']);
    $value = $store->get('menu');
    if ($value === false) {
        $counter->incr('regenerations');
        usleep(400000);
        $value = 'rendered menu';
        $store->set('menu', $value);
    }
    $out['value'] = $value;
}
echo json_encode($out), "\n";
