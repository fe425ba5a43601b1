"""phpredis itself (php-cli + php-redis) as the PHP session handler against Gradus, with
`redis.session.locking_enabled=1`: concurrent requests on one session serialize and every write
lands. This is the unchanged client path (SET NX PX polling, GET, SETEX, EVALSHA/EVAL unlock)."""
import json
import shutil
import subprocess
import threading

import pytest

PHP_REQUEST = r"""<?php
ini_set('session.save_handler', 'redis');
ini_set('session.save_path', 'tcp://127.0.0.1:' . $argv[1]);
ini_set('redis.session.locking_enabled', '1');
ini_set('redis.session.lock_retries', '1000');
ini_set('redis.session.lock_wait_time', '20000');
ini_set('session.use_cookies', '0');
ini_set('session.cache_limiter', '');
session_id($argv[2]);
$asked = microtime(true);
session_start();
$got = microtime(true);
$_SESSION['n'] = ($_SESSION['n'] ?? 0) + 1;
$_SESSION['who'][] = $argv[3];
usleep(300000);
$_SESSION['essay'] = str_repeat('x', 2048);
$released = microtime(true);
session_write_close();
echo json_encode(['asked' => $asked, 'got' => $got, 'released' => $released, 'n' => $_SESSION['n']]);
"""


def php_available() -> bool:
    if shutil.which("php") is None:
        return False
    out = subprocess.run(["php", "-m"], capture_output=True, text=True).stdout.lower()
    return "redis" in out.split()


pytestmark = pytest.mark.skipif(
    not php_available(), reason="php-cli with php-redis not installed (scripts/install-deps.sh installs them)"
)


def run_requests(port, tmp_path, sid, count):
    script = tmp_path / "request.php"
    script.write_text(PHP_REQUEST)
    results = [None] * count

    def one(i):
        proc = subprocess.run(["php", str(script), str(port), sid, f"req{i}"],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr + proc.stdout
        results[i] = json.loads(proc.stdout)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    return results


def test_concurrent_php_requests_on_one_session_serialize_and_both_writes_land(gradus, tmp_path):
    results = run_requests(gradus.port, tmp_path, "phpsess1", 2)
    assert all(results), results
    # Critical sections (lock held from session_start to session_write_close) never overlap.
    spans = sorted((r["got"], r["released"]) for r in results)
    assert spans[0][1] <= spans[1][0], f"sessions overlapped: {spans}"
    # Both increments landed: the later request saw the earlier one's write.
    assert sorted(r["n"] for r in results) == [1, 2]
    import redis
    c = redis.Redis(host=gradus.host, port=gradus.port)
    data = c.get("PHPREDIS_SESSION:phpsess1")
    assert data is not None and b"req0" in data and b"req1" in data
    # No lock is left behind.
    assert c.get("PHPREDIS_SESSION:phpsess1_LOCK") is None
    c.close()


def test_php_session_survives_a_restart(gradus, tmp_path):
    results = run_requests(gradus.port, tmp_path, "phpsess2", 1)
    assert results[0]["n"] == 1
    gradus.restart()
    results = run_requests(gradus.port, tmp_path, "phpsess2", 1)
    assert results[0]["n"] == 2, "the session written before the restart was lost"
