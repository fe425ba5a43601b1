<?php
// A request that dies with a fatal error while it holds the session lock.
require __DIR__ . '/config.php';
test_session_setup();
session_start();
$_SESSION['fatal'] = 1;
echo "about to die\n";
flush();
gradus_test_undefined_function();
