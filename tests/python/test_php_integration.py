"""clients/php (Gradus\\SessionHandler, Gradus\\Lock) under a real PHP web server.

`php -S` with 8 workers serves tests/python/php_pages; 20 concurrent requests of one browser
session each increment a session counter. With Gradus\\SessionHandler (SESSION.OPEN/CLOSE) and
with phpredis' stock handler (locking enabled) on Gradus, the counter ends at exactly 20; a
request that dies holding the session lock frees it for the next request at once."""
from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
import uuid

import pytest
import redis

from php_server import PAGES, PhpServer, php_with_redis
from servers import redis_client

pytestmark = pytest.mark.skipif(
    not php_with_redis(), reason="php-cli with php-redis not installed (scripts/install-deps.sh installs them)")

CONCURRENT = 20


@pytest.fixture
def php_gradus(gradus, tmp_path):
    server = PhpServer(tmp_path, {"host": gradus.host, "port": gradus.port})
    yield server
    server.stop()


def concurrent_gets(php: PhpServer, page: str, sid: str, count: int = CONCURRENT):
    results = [None] * count
    start = threading.Barrier(count)

    def one(i):
        start.wait()
        results[i] = php.get(page, sid)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    return results


def assert_counter_reaches(php: PhpServer, handler: str, client: redis.Redis, key_prefix: str):
    sid = "s" + uuid.uuid4().hex
    results = concurrent_gets(php, f"counter.php?handler={handler}", sid)
    assert all(r is not None and r[0] == 200 for r in results), (results, php.log())
    # Every request saw every earlier one's write: the counts are 1..20, each once.
    assert sorted(int(r[1]) for r in results) == list(range(1, CONCURRENT + 1)), results
    assert b"i:20;" in client.get(key_prefix + sid)
    status, body, _ = php.get(f"read.php?handler={handler}", sid)
    assert (status, body) == (200, "20")


@pytest.mark.gradus_only
@pytest.mark.parametrize("handler", ["gradus", "gradus_url"])
def test_twenty_concurrent_requests_of_one_session_end_at_twenty(gradus, php_gradus, handler):
    client = redis_client(gradus)
    assert_counter_reaches(php_gradus, handler, client, "PHPREDIS_SESSION:")
    assert client.execute_command("LOCKS.LIST") == []


def test_stock_phpredis_handler_on_gradus_ends_at_twenty(gradus, php_gradus):
    assert_counter_reaches(php_gradus, "stock", redis_client(gradus), "PHPREDIS_SESSION:")


def test_stock_phpredis_handler_on_redis_ends_at_twenty(redis_server, tmp_path):
    php = PhpServer(tmp_path, {"host": redis_server.host, "port": redis_server.port})
    try:
        assert_counter_reaches(php, "stock", redis_client(redis_server), "PHPREDIS_SESSION:")
    finally:
        php.stop()


def test_without_the_lock_concurrent_requests_lose_writes(gradus, php_gradus):
    # The same pages with the handler's locking turned off (locking=0: GET / SETEX): the
    # requests overwrite each other, which is what the lock is for.
    sid = "s" + uuid.uuid4().hex
    results = concurrent_gets(php_gradus, "counter.php?handler=unlocked", sid)
    assert all(r is not None and r[0] == 200 for r in results), results
    final = int(php_gradus.get("read.php?handler=unlocked", sid)[1])
    assert final < CONCURRENT, f"unlocked requests lost no write ({final}); the test shows nothing"


@pytest.mark.gradus_only
def test_sessions_switch_between_stock_and_gradus_handlers_without_logout(gradus, php_gradus):
    # Same key prefix and data format as phpredis' handler: switching handlers keeps sessions.
    sid = "s" + uuid.uuid4().hex
    assert php_gradus.get("counter.php?handler=stock", sid)[1] == "1"
    assert php_gradus.get("counter.php?handler=gradus", sid)[1] == "2"
    assert php_gradus.get("counter.php?handler=stock", sid)[1] == "3"


@pytest.mark.gradus_only
def test_lazy_write_unchanged_session_only_touches(gradus, php_gradus):
    client = redis_client(gradus)
    sid = "s" + uuid.uuid4().hex
    key = f"PHPREDIS_SESSION:{sid}"
    assert php_gradus.get("counter.php?handler=counting", sid)[1] == "1"
    before = client.get(key)
    client.expire(key, 5)
    assert php_gradus.get("read.php?handler=counting", sid)[1] == "1"
    assert client.lrange("calls", 0, -1) == [b"write", b"updateTimestamp"]
    assert client.get(key) == before
    assert client.ttl(key) > 1000, "the unchanged session's TTL was not refreshed to gc_maxlifetime"
    assert client.execute_command("LOCKS.LIST") == []


@pytest.mark.gradus_only
def test_a_request_that_dies_with_a_fatal_error_frees_the_lock_at_once(gradus, php_gradus):
    sid = "s" + uuid.uuid4().hex
    status, body, _ = php_gradus.get("fatal.php?handler=gradus", sid)
    assert status == 500 or "about to die" in body, (status, body)
    status, body, seconds = php_gradus.get("counter.php?handler=gradus", sid)
    assert status == 200, (status, body, php_gradus.log())
    assert seconds < 1.0, f"the next request waited {seconds:.2f}s for a lock the dead request held"


@pytest.mark.gradus_only
def test_a_killed_process_holding_the_session_frees_it_for_the_next_request_at_once(gradus, php_gradus):
    sid = "s" + uuid.uuid4().hex
    assert php_gradus.get("counter.php?handler=gradus", sid)[1] == "1"
    holder = subprocess.Popen(["php", str(PAGES / "hold.php"), "gradus", sid], env=php_gradus.env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        client = redis_client(gradus)
        assert client.execute_command("LOCKS.INFO", f"PHPREDIS_SESSION:{sid}") is not None
        # A request arriving now waits for the holder...
        waiter = {}
        t = threading.Thread(target=lambda: waiter.update(r=php_gradus.get("counter.php?handler=gradus", sid)))
        t.start()
        time.sleep(0.5)
        assert t.is_alive(), "the second request did not wait for the session lock"
        # ...and gets the session as soon as the holder dies (its connection closes).
        killed_at = time.monotonic()
        holder.send_signal(signal.SIGKILL)
        t.join(10)
        assert waiter["r"][:2] == (200, "2"), (waiter, php_gradus.log())
        assert time.monotonic() - killed_at < 1.0
    finally:
        holder.kill()
        holder.wait(5)


@pytest.mark.gradus_only
def test_gradus_unreachable_fails_session_start_and_loses_nothing(gradus, php_gradus):
    sid = "s" + uuid.uuid4().hex
    assert php_gradus.get("counter.php?handler=gradus_url", sid)[1] == "1"
    gradus.stop()
    status, body, _ = php_gradus.get("counter.php?handler=gradus_url", sid)
    assert status == 503 and "session_start failed" in body
    assert "unreachable" in php_gradus.log() or "Connection refused" in php_gradus.log()
    gradus.start()
    # The session written before the outage is intact; the failed page wrote nothing over it.
    assert php_gradus.get("counter.php?handler=gradus_url", sid)[1] == "2"


@pytest.mark.gradus_only
def test_lock_is_blocking_fifo_with_a_lease(gradus):
    def run(hold_ms):
        out = subprocess.run(["php", str(PAGES / "lock.php"), str(gradus.port), "cron:job", str(hold_ms)],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stdout + out.stderr
        return json.loads(out.stdout)

    results = [None, None]
    first = threading.Thread(target=lambda: results.__setitem__(0, run(600)))
    first.start()
    time.sleep(0.2)
    results[1] = run(0)
    first.join(30)
    a, b = results
    assert a["got"] and b["got"] and a["released"] and b["released"]
    assert b["token"] > a["token"]
    # The second waited server-side and was granted as the first released.
    assert b["granted"] >= a["released_at"] - 0.01
    assert b["granted"] - a["released_at"] < 0.3


@pytest.mark.gradus_only
def test_regenerate_read_and_close_abort_and_destroy_leave_no_lock(gradus):
    out = subprocess.run(["php", str(PAGES / "lifecycle.php"), str(gradus.port), "oldsid123"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr
    r = json.loads(out.stdout)
    assert r["old_exists"] is False
    assert r["new_data"] == 'user|s:5:"alice";logged_in|b:1;'
    assert r["read_and_close"] == {"user": "alice", "logged_in": True}
    assert r["after_abort"] == r["new_data"]
    assert r["destroyed"] is True
    for key in ("locks_after_regenerate", "locks_after_read_and_close", "locks_after_abort", "locks_after_destroy"):
        assert r[key] == 0, (key, r)
