"""CLIENT PAUSE timeout [WRITE|ALL] and CLIENT UNPAUSE (Redis 6.2/7 semantics).

Runs against Gradus and, with GRADUS_TARGET=redis, against redis-server: the paused command
waits (its reply comes after the pause ends or is lifted), what a WRITE pause holds back
(writes, PUBLISH, PFCOUNT, EVAL/FCALL that may write, EXEC of queued writes, queueing a write
inside MULTI) and what it lets through (reads, a `no-writes` script, CLIENT UNPAUSE), and the
errors in Redis' words.
"""

from __future__ import annotations

import threading
import time

import pytest
import redis

from servers import redis_client

# A paused command must wait at least this long (a pause of PAUSE_MS, then the command sent).
PAUSE_MS = 600


def conn(server):
    return redis_client(server, single_connection_client=True, password=server.password)


def timed(fn):
    """(result, seconds) of fn()."""
    started = time.monotonic()
    result = fn()
    return result, time.monotonic() - started


def test_client_pause_errors_are_redis_texts(gradus):
    c = conn(gradus)
    with pytest.raises(redis.ResponseError, match="^timeout is not an integer or out of range$"):
        c.execute_command("CLIENT", "PAUSE", "abc")
    with pytest.raises(redis.ResponseError, match="^timeout is negative$"):
        c.execute_command("CLIENT", "PAUSE", "-1")
    # The mode is checked before the timeout.
    with pytest.raises(redis.ResponseError, match="^CLIENT PAUSE mode must be WRITE or ALL$"):
        c.execute_command("CLIENT", "PAUSE", "abc", "foo")
    with pytest.raises(redis.ResponseError,
                       match=r"^wrong number of arguments for 'client\|pause' command$"):
        c.execute_command("CLIENT", "PAUSE")
    with pytest.raises(redis.ResponseError,
                       match=r"^wrong number of arguments for 'client\|unpause' command$"):
        c.execute_command("CLIENT", "UNPAUSE", "x")
    with pytest.raises(redis.ResponseError, match="unknown subcommand"):
        c.execute_command("CLIENT", "PAUSE", "10", "WRITE", "extra")
    # A zero timeout pauses nothing.
    assert c.execute_command("CLIENT", "PAUSE", "0", "ALL") == b"OK"
    assert timed(lambda: c.set("k", "v"))[1] < 0.3


def test_client_pause_write_holds_writes_not_reads(gradus):
    admin, c = conn(gradus), conn(gradus)
    c.set("k", "v0")
    assert admin.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE") == b"OK"
    value, took = timed(lambda: c.get("k"))
    assert value == b"v0" and took < 0.3
    ok, took = timed(lambda: c.set("k", "v1"))
    assert ok is True and took >= PAUSE_MS / 1000 * 0.7, took
    assert c.get("k") == b"v1"


def test_client_pause_all_holds_every_command_even_unpause(gradus):
    admin, c = conn(gradus), conn(gradus)
    assert admin.execute_command("CLIENT", "PAUSE", PAUSE_MS, "ALL") == b"OK"
    pong, took = timed(lambda: c.ping())
    assert pong is True and took >= PAUSE_MS / 1000 * 0.7, took
    # The default mode is ALL, and CLIENT UNPAUSE itself waits under it (as on Redis).
    assert admin.execute_command("CLIENT", "PAUSE", PAUSE_MS) == b"OK"
    ok, took = timed(lambda: c.execute_command("CLIENT", "UNPAUSE"))
    assert ok == b"OK" and took >= PAUSE_MS / 1000 * 0.7, took


def test_client_unpause_releases_waiting_clients_at_once(gradus):
    admin, c = conn(gradus), conn(gradus)
    assert admin.execute_command("CLIENT", "PAUSE", 20000, "WRITE") == b"OK"
    done = {}

    def writer():
        done["result"], done["took"] = timed(lambda: c.set("k", "after"))

    t = threading.Thread(target=writer)
    t.start()
    time.sleep(0.3)
    assert "result" not in done
    assert admin.get("k") is None
    # Not a write: CLIENT UNPAUSE runs under a WRITE pause.
    assert admin.execute_command("CLIENT", "UNPAUSE") == b"OK"
    t.join(5)
    assert done["result"] is True and done["took"] < 5
    assert admin.get("k") == b"after"


def test_client_pause_extends_to_the_stricter_mode_and_later_end(gradus):
    admin, c = conn(gradus), conn(gradus)
    assert admin.execute_command("CLIENT", "PAUSE", 1500, "WRITE") == b"OK"
    # A shorter, stricter pause: ALL now, and still until the later end.
    assert admin.execute_command("CLIENT", "PAUSE", 10, "ALL") == b"OK"
    value, took = timed(lambda: c.get("k"))
    assert value is None and took >= 1.0, took


def test_client_pause_write_holds_publish_pfcount_and_scripts_that_may_write(gradus):
    admin, c = conn(gradus), conn(gradus)
    for label, call in [
        ("PUBLISH", lambda: c.publish("ch", "m")),
        ("PFCOUNT", lambda: c.pfcount("h")),
        ("EVAL", lambda: c.eval("return 1", 0)),
    ]:
        assert admin.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE") == b"OK"
        _, took = timed(call)
        assert took >= PAUSE_MS / 1000 * 0.7, (label, took)
        admin.execute_command("CLIENT", "UNPAUSE")
    # A script that declares no-writes, and EVAL_RO, are reads.
    assert admin.execute_command("CLIENT", "PAUSE", 20000, "WRITE") == b"OK"
    try:
        result, took = timed(lambda: c.eval("#!lua flags=no-writes\nreturn 7", 0))
        assert result == 7 and took < 0.3
        result, took = timed(lambda: c.execute_command("EVAL_RO", "return 8", 0))
        assert result == 8 and took < 0.3
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")


def test_client_pause_write_inside_multi(gradus):
    admin = conn(gradus)
    c = conn(gradus)
    c.set_response_callback("SET", lambda r, **kw: r)
    assert c.execute_command("MULTI") == b"OK"
    assert admin.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE") == b"OK"
    # Queueing a read goes through; queueing a write waits (Redis checks before queueing).
    queued, took = timed(lambda: c.execute_command("GET", "k"))
    assert queued == b"QUEUED" and took < 0.3
    queued, took = timed(lambda: c.execute_command("SET", "k", "1"))
    assert queued == b"QUEUED" and took >= PAUSE_MS / 1000 * 0.7, took
    # EXEC of queued writes waits too.
    assert admin.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE") == b"OK"
    replies, took = timed(lambda: c.execute_command("EXEC"))
    assert replies == [None, b"OK"] and took >= PAUSE_MS / 1000 * 0.7, took
    # EXEC of reads only does not.
    assert c.execute_command("MULTI") == b"OK"
    assert c.execute_command("GET", "k") == b"QUEUED"
    assert admin.execute_command("CLIENT", "PAUSE", 20000, "WRITE") == b"OK"
    try:
        replies, took = timed(lambda: c.execute_command("EXEC"))
        assert replies == [b"1"] and took < 0.3
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")


def test_client_pause_keeps_a_pipeline_in_order(gradus):
    admin, c = conn(gradus), conn(gradus)
    assert admin.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE") == b"OK"
    pipe = c.pipeline(transaction=False)
    pipe.get("k")
    pipe.set("k", "1")
    pipe.incr("k")
    pipe.get("k")
    replies, took = timed(pipe.execute)
    assert replies == [None, True, 2, b"2"]
    assert took >= PAUSE_MS / 1000 * 0.7, took


def expired_keys(c) -> int:
    return int(c.info("stats")["expired_keys"])


def test_client_pause_write_stops_active_expiry(gradus):
    admin = conn(gradus)
    initial = expired_keys(admin)
    for i in range(20):
        admin.set(f"gone{i}", "v", px=300)
    assert admin.execute_command("CLIENT", "PAUSE", 20000, "WRITE") == b"OK"
    try:
        # Read after the pause began: on a loaded machine some keys may have expired before it.
        before = expired_keys(admin)
        time.sleep(1.0)
        # Nothing reads the keys: only active expiry could remove them, and it waits.
        assert expired_keys(admin) == before
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
    deadline = time.time() + 5
    while expired_keys(admin) < initial + 20 and time.time() < deadline:
        time.sleep(0.05)
    assert expired_keys(admin) == initial + 20


def test_client_pause_write_stops_passive_expiry_too(gradus):
    """Redis' pause.tcl "Test both active and passive expires are skipped during client pause":
    a read of an expired key during a WRITE pause sees it gone but deletes nothing
    (`expired_keys` unchanged, so no DEL reaches the log or a replica); after UNPAUSE the next
    read reclaims it."""
    admin = conn(gradus)
    initial = expired_keys(admin)
    pipe = admin.pipeline(transaction=True)
    pipe.set("foo", "bar", px=10)
    pipe.set("bar", "foo", px=10)
    pipe.execute_command("CLIENT", "PAUSE", 20000, "WRITE")
    pipe.execute()
    try:
        time.sleep(0.1)
        assert admin.get("foo") is None and admin.get("bar") is None
        assert admin.exists("foo", "bar") == 0
        assert expired_keys(admin) == initial
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
    assert admin.get("foo") is None and admin.get("bar") is None
    assert expired_keys(admin) == initial + 2


@pytest.mark.gradus_only
def test_client_pause_write_holds_the_memcached_port_too(gradus, mc):
    admin = conn(gradus)
    assert admin.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE") == b"OK"
    stored, took = timed(lambda: mc.cmd(b"set k 0 0 1\r\nv\r\n"))
    assert stored == b"STORED" and took >= PAUSE_MS / 1000 * 0.7, took


@pytest.mark.gradus_only
def test_client_pause_on_a_replica_holds_its_primarys_stream(gradus_factory, tmp_path):
    # As Redis pauses a replica's master client; the primary's side is never paused.
    from test_replication import client, start_pair, wait_synced

    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    assert client(replica).execute_command("CLIENT", "PAUSE", 1500, "WRITE") == b"OK"
    client(primary).set("pk", "1")
    time.sleep(0.5)
    assert client(replica).get("pk") is None
    wait_synced(primary, replica)
    assert client(replica).get("pk") == b"1"


def test_a_client_held_by_a_pause_counts_in_blocked_clients(gradus):
    """A command a CLIENT PAUSE holds back counts in INFO `blocked_clients` until it runs (Redis
    7.2 blocks it as BLOCKED_POSTPONE; its pause.tcl waits on that count). Gradus counted only
    clients blocked on keys."""
    r = redis_client(gradus, 2)
    writer = redis_client(gradus, 2)
    assert r.execute_command("CLIENT", "PAUSE", 5000, "WRITE")
    t = threading.Thread(target=lambda: writer.set("k", "v"))
    t.start()
    deadline = time.monotonic() + 5
    while int(r.info("clients")["blocked_clients"]) != 1:
        assert time.monotonic() < deadline, r.info("clients")
        time.sleep(0.01)
    assert r.execute_command("CLIENT", "UNPAUSE")
    t.join(5)
    assert r.get("k") == b"v"
    assert int(r.info("clients")["blocked_clients"]) == 0
