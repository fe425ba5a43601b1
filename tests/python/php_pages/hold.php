<?php
// CLI: open the session (taking its lock), say so, then hang until killed.
$_GET = ['handler' => $argv[1]];
require __DIR__ . '/config.php';
test_session_setup();
session_id($argv[2]);
session_start();
echo "locked\n";
flush();
sleep(60);
