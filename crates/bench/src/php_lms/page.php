<?php
// gradus-bench php-lms: one LMS page, as a PHP application with a session handler and a
// Moodle-style application cache does it. Generated settings: __SETTINGS__ (a JSON object).
$cfg = json_decode('__SETTINGS__', true);
ini_set('session.use_strict_mode', '0');
ini_set('session.cache_limiter', '');
ini_set('session.gc_probability', '0');
if ($cfg['backend'] === 'gradus') {
    require $cfg['autoload'];
    $sessions = new Redis();
    $sessions->connect($cfg['host'], $cfg['port']);
    session_set_save_handler(new Gradus\SessionHandler($sessions, ['lock_wait' => 30000, 'lease' => 60000]), true);
} else {
    // phpredis' stock handler with its lock (SET NX polling) turned on.
    ini_set('session.save_handler', 'redis');
    ini_set('session.save_path', "tcp://{$cfg['host']}:{$cfg['port']}");
    ini_set('redis.session.locking_enabled', '1');
    ini_set('redis.session.lock_wait_time', (string) $cfg['stock_lock_wait_us']);
    ini_set('redis.session.lock_retries', (string) intdiv(30000000, max(1, $cfg['stock_lock_wait_us'])));
}
if (!session_start()) {
    http_response_code(503);
    exit;
}
// The application cache: one hash per definition (as Moodle's Redis store), on its own connection.
$cache = new Redis();
$cache->connect($cfg['host'], $cfg['port']);
$reads = (int) $_GET['reads'];
mt_srand((int) $_GET['seed']);
$defs = $cfg['definitions'];
$done = 0;
while ($done < $reads) {
    $def = $defs[mt_rand(0, count($defs) - 1)];
    if (mt_rand() / mt_getrandmax() < $cfg['multiget_share']) {
        $keys = [];
        for ($i = 0; $i < 10; $i++) {
            $keys[] = 'k' . mt_rand(0, $cfg['cache_keys'] - 1);
        }
        $values = $cache->hMGet($def, $keys);
        $done += 10;
        $missed = array_keys(array_filter($values, fn($v) => $v === false));
    } else {
        $key = 'k' . mt_rand(0, $cfg['cache_keys'] - 1);
        $missed = $cache->hGet($def, $key) === false ? [$key] : [];
        $done += 1;
    }
    if (mt_rand() / mt_getrandmax() >= $cfg['hit_ratio']) {
        $missed[] = 'k' . mt_rand(0, $cfg['cache_keys'] - 1);
    }
    foreach ($missed as $key) {
        // A miss: regenerate (burn CPU) and store.
        $until = hrtime(true) + $cfg['regen_us'] * 1000;
        while (hrtime(true) < $until) {
        }
        $cache->hSet($def, $key, str_repeat('v', $cfg['value_size']));
    }
}
if (($_GET['ajax'] ?? '0') === '1') {
    // An AJAX request reads the session and leaves it unchanged (lazy_write: only touched).
    echo $_SESSION['pages'] ?? 0;
} else {
    $_SESSION['pages'] = ($_SESSION['pages'] ?? 0) + 1;
    $_SESSION['data'] = str_repeat(chr(97 + $_SESSION['pages'] % 26), (int) $_GET['size']);
    echo $_SESSION['pages'];
}
