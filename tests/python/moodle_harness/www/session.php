<?php
// A Moodle page's session life, as lib/setup.php and \core\session\manager drive the handler:
// new $CFG->session_handler_class, init(), start(), then write_close at the end of the page.
require __DIR__ . '/../bootstrap.php';
$settings = json_decode(file_get_contents(getenv('GRADUS_TEST_SETTINGS')), true);
$CFG->session_handler_class = '\local_gradus\session\handler';
$CFG->session_gradus_server = $settings['server'];
$CFG->session_gradus_acquire_lock_timeout = (int) ($_GET['timeout'] ?? 20);
$CFG->session_gradus_lock_expire = 60;

ini_set('session.use_strict_mode', '0');
ini_set('session.cache_limiter', '');
session_name('MoodleSession');
$class = $CFG->session_handler_class;
$handler = new $class();
try {
    $handler->init();
    $handler->start();
} catch (\core\session\exception $e) {
    http_response_code(503);
    echo json_encode(['error' => $e->errorcode, 'debuginfo' => $e->debuginfo]);
    exit;
}
if (($_GET['op'] ?? 'incr') === 'incr') {
    $n = $_SESSION['n'] ?? 0;
    usleep(15000);
    $_SESSION['n'] = $n + 1;
}
$out = ['n' => $_SESSION['n'] ?? 0, 'exists' => $handler->session_exists(session_id())];
session_write_close();
echo json_encode($out);
