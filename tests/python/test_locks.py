"""Native session locks (LOCK/UNLOCK/LOCKS.*) and the session commands (SESSION.*).

Every test uses its own connections (one redis-py client per simulated worker, each with
single_connection_client=True so a lock belongs to one TCP connection, as in a PHP worker).
"""
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import redis

pytestmark = pytest.mark.gradus_only


def conn(server, **kw):
    return redis.Redis(host=server.host, port=server.port, single_connection_client=True,
                       socket_timeout=10, retry_on_timeout=False, **kw)


def test_contending_connections_are_serialized_in_fifo_order(gradus):
    holder = conn(gradus)
    first = holder.execute_command("LOCK", "sess", "WAIT", "0")
    assert isinstance(first, int) and first > 0
    events, tokens = [], []
    lock = threading.Lock()

    def worker(i):
        c = conn(gradus)
        token = c.execute_command("LOCK", "sess", "WAIT", "10000")
        assert token is not None
        with lock:
            events.append(("in", i))
            tokens.append(token)
        time.sleep(0.02)
        with lock:
            events.append(("out", i))
        assert c.execute_command("UNLOCK", "sess", token) == b"OK"
        c.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    observer = conn(gradus)
    for i, t in enumerate(threads):
        # Queue in index order while the holder still holds: the next worker starts once the
        # server counts this one among the waiters.
        t.start()
        deadline = time.monotonic() + 10
        while observer.execute_command("LOCKS.INFO", "sess")[b"waiters"] != i + 1:
            assert time.monotonic() < deadline, f"worker {i} never queued"
            time.sleep(0.002)
    observer.close()
    assert holder.execute_command("UNLOCK", "sess", first) == b"OK"
    for t in threads:
        t.join(20)
    # Strictly serialized: in/out alternate, and grants follow the queueing order.
    assert [e[0] for e in events] == ["in", "out"] * 6
    assert [e[1] for e in events if e[0] == "in"] == list(range(6))
    assert tokens == sorted(tokens) and tokens[0] > first
    holder.close()


def test_killed_holder_process_hands_the_lock_on_quickly(gradus):
    script = (
        "import redis,time,sys\n"
        f"c=redis.Redis(port={gradus.port},single_connection_client=True)\n"
        "print(c.execute_command('LOCK','sess','WAIT','0'),flush=True)\n"
        "time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip().isdigit()
        waiter = conn(gradus)
        result = {}

        def wait():
            result["token"] = waiter.execute_command("LOCK", "sess", "WAIT", "10000")
            result["at"] = time.monotonic()

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.2)
        killed_at = time.monotonic()
        os.kill(holder.pid, signal.SIGKILL)
        t.join(10)
        assert result.get("token") is not None
        assert result["at"] - killed_at < 0.05 + 0.1, "hand-over after kill -9 took too long"
        waiter.close()
    finally:
        holder.kill()
        holder.wait()


def test_lease_expiry_hands_the_lock_on(gradus):
    a, b = conn(gradus), conn(gradus)
    token = a.execute_command("LOCK", "sess", "LEASE", "100")
    started = time.monotonic()
    second = b.execute_command("LOCK", "sess", "WAIT", "5000")
    waited = time.monotonic() - started
    assert second is not None and second > token
    assert 0.08 <= waited < 1.0
    # The first holder's token is stale now.
    with pytest.raises(redis.ResponseError, match="WRONGTOKEN"):
        a.execute_command("UNLOCK", "sess", token)
    a.close(); b.close()


def test_maxwaiters_rejects_the_extra_waiter_at_once(gradus):
    holder, w1, w2 = conn(gradus), conn(gradus), conn(gradus)
    holder.execute_command("LOCK", "sess")
    t = threading.Thread(target=lambda: w1.execute_command("LOCK", "sess", "WAIT", "1000", "MAXWAITERS", "1"))
    t.start()
    deadline = time.monotonic() + 0.9
    while holder.execute_command("LOCKS.INFO", "sess")[b"waiters"] != 1:
        assert time.monotonic() < deadline, "the first waiter never queued"
        time.sleep(0.002)
    started = time.monotonic()
    with pytest.raises(redis.ResponseError, match="LOCKBUSY too many waiters"):
        w2.execute_command("LOCK", "sess", "WAIT", "1000", "MAXWAITERS", "1")
    assert time.monotonic() - started < 0.2
    t.join(5)
    for c in (holder, w1, w2):
        c.close()


def test_a_timed_out_waiter_does_not_acquire_later(gradus):
    holder, waiter, observer = conn(gradus), conn(gradus), conn(gradus)
    token = holder.execute_command("LOCK", "sess")
    assert waiter.execute_command("LOCK", "sess", "WAIT", "100") is None
    assert holder.execute_command("UNLOCK", "sess", token) == b"OK"
    time.sleep(0.05)
    assert observer.execute_command("LOCKS.INFO", "sess") is None
    # And the waiter's connection is usable and can take the free lock normally.
    assert waiter.execute_command("LOCK", "sess") is not None
    for c in (holder, waiter, observer):
        c.close()


def test_wrong_token_cannot_unlock_or_write(gradus):
    a, b = conn(gradus), conn(gradus)
    reply = a.execute_command("SESSION.OPEN", "sid1")
    token = reply[0]
    assert reply[1] is None
    a.execute_command("SESSION.CLOSE", "sid1", token, "DATA", "v1", "TTL", "100")
    token2 = b.execute_command("SESSION.OPEN", "sid1")[0]
    with pytest.raises(redis.ResponseError, match="WRONGTOKEN"):
        a.execute_command("UNLOCK", "sid1", token)
    with pytest.raises(redis.ResponseError, match="WRONGTOKEN"):
        a.execute_command("SESSION.CLOSE", "sid1", token, "DATA", "stolen")
    assert a.get("sid1") == b"v1"
    assert b.execute_command("LOCKS.INFO", "sid1")[b"token"] == token2
    b.execute_command("SESSION.CLOSE", "sid1", token2, "DATA", "v2")
    assert a.get("sid1") == b"v2"
    a.close(); b.close()


def test_session_round_trips_and_survives_restart(gradus):
    c = conn(gradus)
    token, data = c.execute_command("SESSION.OPEN", "s:42", "WAIT", "1000", "LEASE", "30000")
    assert data is None
    assert c.execute_command("SESSION.CLOSE", "s:42", token, "DATA", b"x" * 4096, "TTL", "600") == b"OK"
    info = c.execute_command("LOCKS.INFO", "s:42")
    assert info is None
    token, data = c.execute_command("SESSION.OPEN", "s:42")
    assert data == b"x" * 4096
    assert 590 <= c.ttl("s:42") <= 600
    assert c.execute_command("SESSION.TOUCH", "s:42", "TTL", "1200") == 1
    assert c.ttl("s:42") > 600
    c.execute_command("SESSION.CLOSE", "s:42", token)
    c.close()
    gradus.restart()
    c = conn(gradus)
    token, data = c.execute_command("SESSION.OPEN", "s:42")
    assert data == b"x" * 4096, "session data was not durable"
    assert c.ttl("s:42") > 600
    assert c.execute_command("SESSION.DESTROY", "s:42", token) == 1
    assert c.get("s:42") is None
    assert c.execute_command("LOCKS.INFO", "s:42") is None
    c.close()


def test_locks_info_and_list(gradus):
    a = conn(gradus)
    token = a.execute_command("LOCK", "n1", "LEASE", "5000")
    a.execute_command("LOCK", "n2")
    info = a.execute_command("LOCKS.INFO", "n1")
    assert info[b"token"] == token
    assert 0 < info[b"lease_left_ms"] <= 5000
    assert info[b"waiters"] == 0
    names = sorted(i[b"name"] for i in a.execute_command("LOCKS.LIST", "n*"))
    assert names == [b"n1", b"n2"]
    a.close()
