<?php
// The lock factory as Moodle's lock_config instantiates it: php lock.php SCENARIO SETTINGS.json [resource] [timeout]
//   hold       get the lock, print "locked", sleep until killed
//   get        get_lock(resource, timeout) and release it; print the outcome and timings
//   basic      availability, flags, try-lock against itself, release twice
require __DIR__ . '/bootstrap.php';
$settings = json_decode(file_get_contents($argv[2]), true);
$CFG->lock_factory = '\local_gradus\lock\gradus_lock_factory';
$CFG->local_gradus_lock_server = $settings['server'];
$class = $CFG->lock_factory;
$factory = new $class('cron');

$scenario = $argv[1];
if ($scenario === 'hold') {
    $lock = $factory->get_lock($argv[3], 5);
    echo $lock ? "locked\n" : "not locked\n";
    sleep(60);
} elseif ($scenario === 'get') {
    $t0 = microtime(true);
    $lock = $factory->get_lock($argv[3], (int) $argv[4]);
    $t1 = microtime(true);
    $out = ['got' => $lock !== false, 'waited' => $t1 - $t0];
    if ($lock) {
        $out['released'] = $lock->release();
    }
    echo json_encode($out), "\n";
} elseif ($scenario === 'basic') {
    $other = new $class('cron');
    $lock = $factory->get_lock('\core\task\send_mail', 0, 60);
    $out = [
        'available' => $factory->is_available(),
        'timeout' => $factory->supports_timeout(),
        'auto_release' => $factory->supports_auto_release(),
        'got' => $lock instanceof \core\lock\lock,
        'second' => $other->get_lock('\core\task\send_mail', 1),
        'other_resource' => $other->get_lock('\core\task\other', 0) instanceof \core\lock\lock,
        'released' => $lock->release(),
        'after_release' => ($third = $other->get_lock('\core\task\send_mail', 0)) instanceof \core\lock\lock,
    ];
    $out['released_third'] = $third->release();
    $CFG->local_gradus_lock_server = 'tcp://127.0.0.1:1';
    $out['unreachable_available'] = (new $class('cron'))->is_available();
    echo json_encode($out), "\n";
}
