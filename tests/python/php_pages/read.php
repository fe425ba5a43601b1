<?php
// Read the session without changing it (session.lazy_write: the handler should only touch it).
require __DIR__ . '/config.php';
test_session_setup();
if (!session_start()) {
    http_response_code(503);
    echo "session_start failed\n";
    exit;
}
echo $_SESSION['n'] ?? 0;
