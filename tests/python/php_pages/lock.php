<?php
// CLI: Gradus\Lock: take the lock named $argv[2], print the token, hold it $argv[3] ms, release.
require __DIR__ . '/../../../clients/php/autoload.php';
$redis = new Redis();
$redis->connect('127.0.0.1', (int)$argv[1]);
$lock = new Gradus\Lock($redis, $argv[2], 10000);
$t0 = microtime(true);
$got = $lock->acquire(5000);
$t1 = microtime(true);
usleep((int)$argv[3] * 1000);
$t2 = microtime(true);
$token = $lock->token();
$released = $got ? $lock->release() : false;
echo json_encode(['got' => $got, 'token' => $token, 'asked' => $t0, 'granted' => $t1, 'released_at' => $t2,
    'released' => $released]), "\n";
