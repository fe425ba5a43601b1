<?php
// CLI: open a Moodle session with the Gradus handler (taking its lock), say so, hang until killed.
require __DIR__ . '/bootstrap.php';
$settings = json_decode(file_get_contents(getenv('GRADUS_TEST_SETTINGS')), true);
$CFG->session_gradus_server = $settings['server'];
$handler = new \local_gradus\session\handler();
$handler->init();
session_id($argv[1]);
$handler->start();
echo "locked\n";
sleep(60);
