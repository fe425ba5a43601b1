<?php
// CLI: session_regenerate_id, read_and_close and session_abort with Gradus\SessionHandler;
// prints what the store holds afterwards (as JSON). argv: port, old session id.
require __DIR__ . '/../../../clients/php/autoload.php';
ini_set('session.use_cookies', '0');
ini_set('session.use_strict_mode', '0');
ini_set('session.cache_limiter', '');
$redis = new Redis();
$redis->connect('127.0.0.1', (int) $argv[1]);
$handler = new Gradus\SessionHandler($redis, ['lock_wait' => 2000]);
session_set_save_handler($handler, true);
$old = $argv[2];
$out = [];

session_id($old);
session_start();
$_SESSION['user'] = 'alice';
session_regenerate_id(true);          // login: a new id, the old session destroyed
$new = session_id();
$_SESSION['logged_in'] = true;
session_write_close();
$out['old_exists'] = (bool) $redis->exists("PHPREDIS_SESSION:$old");
$out['new_data'] = $redis->get("PHPREDIS_SESSION:$new");
$out['locks_after_regenerate'] = count($redis->rawCommand('LOCKS.LIST'));

session_id($new);
session_start(['read_and_close' => true]);
$out['read_and_close'] = $_SESSION;
$out['locks_after_read_and_close'] = count($redis->rawCommand('LOCKS.LIST'));

session_id($new);
session_start();
$_SESSION['discarded'] = 1;
session_abort();
$out['locks_after_abort'] = count($redis->rawCommand('LOCKS.LIST'));
$out['after_abort'] = $redis->get("PHPREDIS_SESSION:$new");

session_id($new);
session_start();
session_destroy();
$out['destroyed'] = !$redis->exists("PHPREDIS_SESSION:$new");
$out['locks_after_destroy'] = count($redis->rawCommand('LOCKS.LIST'));
echo json_encode($out), "\n";
