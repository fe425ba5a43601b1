<?php
// gradus-bench php-lms: fill every cache definition's keys before the run.
$cfg = json_decode($argv[1], true);
$r = new Redis();
$r->connect($cfg['host'], $cfg['port']);
foreach ($cfg['definitions'] as $def) {
    $fields = [];
    for ($i = 0; $i < $cfg['cache_keys']; $i++) {
        $fields['k' . $i] = str_repeat('v', $cfg['value_size']);
    }
    $r->hMSet($def, $fields);
}
echo "ok\n";
