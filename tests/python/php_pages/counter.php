<?php
// Increment the session counter: read, think a little (so unlocked requests would interleave), write.
require __DIR__ . '/config.php';
test_session_setup();
if (!session_start()) {
    http_response_code(503);
    echo "session_start failed\n";
    exit;
}
$n = ($_SESSION['n'] ?? 0);
usleep(15000);
$_SESSION['n'] = $n + 1;
echo $_SESSION['n'];
