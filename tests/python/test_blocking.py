"""Blocking pops (BZPOPMIN/BZPOPMAX/BZMPOP, and BLPOP & co. once lists exist) at Redis 7.2's
semantics: the first blocked client is served first, timeouts in fractional seconds (0 waits
forever), CLIENT UNBLOCK, writes inside MULTI/EXEC or a script wake clients only after EXEC,
a key of another type keeps its clients blocked, a client that hangs up is never served, and a
served pop is logged like a plain one (it survives kill -9 at strict).

Every test but the crash test also passes against a real redis-server
(GRADUS_TARGET=redis), which checks that they describe Redis' behaviour.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import List

import pytest
import redis

from servers import redis_client


def _blocked_count(r: redis.Redis) -> int:
    return int(r.info("clients")["blocked_clients"])


def _wait_blocked(r: redis.Redis, n: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while _blocked_count(r) < n:
        assert time.monotonic() < deadline, f"{_blocked_count(r)} clients blocked, wanted {n}"
        time.sleep(0.005)


def zpop(result):
    """A BZPOPMIN/BZPOPMAX reply as [key, member, score] (redis-py makes it a tuple with a float)."""
    return None if result is None else [result[0], result[1], float(result[2])]


class Blocked(threading.Thread):
    """One client running one blocking command on its own connection; .result once done."""

    def __init__(self, server, *command, protocol: int = 2):
        super().__init__(daemon=True)
        self.client = redis_client(server, protocol)
        self.client_id = self.client.client_id()
        self.command = command
        self.result = None
        self.error = None
        self.finished_at = None

    def run(self):
        try:
            self.result = self.client.execute_command(*self.command)
        except redis.ResponseError as e:
            self.error = str(e)
        self.finished_at = time.monotonic()


def _start_in_order(server, r, commands: List[tuple]) -> List[Blocked]:
    """Start one blocked client per command, each only once the previous one is blocked."""
    clients = []
    for i, command in enumerate(commands):
        b = Blocked(server, *command)
        b.start()
        _wait_blocked(r, i + 1)
        clients.append(b)
    return clients


def test_the_first_blocked_client_is_served_first(gradus, r2):
    waiters = _start_in_order(gradus, r2, [("BZPOPMIN", "z", 0)] * 4)
    for i in range(4):
        r2.zadd("z", {f"m{i}": i})
        waiters[i].join(5)
        assert not waiters[i].is_alive(), f"waiter {i} not served"
        assert zpop(waiters[i].result) == [b"z", f"m{i}".encode(), i], waiters[i].result
        for later in waiters[i + 1:]:
            assert later.is_alive(), "a later waiter was served out of turn"
    assert r2.exists("z") == 0


def test_one_write_serves_as_many_waiters_as_it_made_room_for(gradus, r2):
    waiters = _start_in_order(gradus, r2, [("BZPOPMIN", "z", 0)] * 3)
    r2.zadd("z", {"a": 1, "b": 2})
    for w in waiters[:2]:
        w.join(5)
    assert [w.result[1] for w in waiters[:2]] == [b"a", b"b"]
    assert waiters[2].is_alive()
    assert _blocked_count(r2) == 1
    r2.zadd("z", {"c": 3})
    waiters[2].join(5)
    assert waiters[2].result[1] == b"c"


def test_a_waiter_on_several_keys_takes_the_first_ready_and_leaves_the_others(gradus, r2):
    (w,) = _start_in_order(gradus, r2, [("BZPOPMAX", "a", "b", "c", 0)])
    r2.zadd("b", {"x": 1})
    w.join(5)
    assert zpop(w.result) == [b"b", b"x", 1]
    assert _blocked_count(r2) == 0
    r2.zadd("a", {"y": 1})
    assert r2.zcard("a") == 1, "nobody is blocked on a any more"


def test_a_wake_up_takes_well_under_a_millisecond_of_server_work(gradus, r2):
    (w,) = _start_in_order(gradus, r2, [("BZPOPMIN", "z", 0)])
    sent = time.monotonic()
    r2.zadd("z", {"a": 1})
    w.join(5)
    # Client threads and the server share two cores: a generous bound, but a polling
    # implementation (10 ms ticks) would not meet it.
    assert w.finished_at - sent < 0.05, w.finished_at - sent


def test_timeouts_are_fractional_seconds_and_answer_null(gradus, r2, r3):
    start = time.monotonic()
    assert r2.execute_command("BZPOPMIN", "z", 0.2) is None
    elapsed = time.monotonic() - start
    assert 0.18 <= elapsed < 1.5, elapsed
    assert r3.execute_command("BZMPOP", 0.05, 1, "z", "MIN") is None
    with pytest.raises(redis.ResponseError, match="timeout is negative"):
        r2.execute_command("BZPOPMIN", "z", -1)
    with pytest.raises(redis.ResponseError, match="timeout is not a float or out of range"):
        r2.execute_command("BZPOPMIN", "z", "soon")
    with pytest.raises(redis.ResponseError, match="numkeys should be greater than 0"):
        r2.execute_command("BZMPOP", 0, 0, "z", "MIN")
    with pytest.raises(redis.ResponseError, match="count should be greater than 0"):
        r2.execute_command("BZMPOP", 0, 1, "z", "MIN", "COUNT", 0)


def test_a_ready_key_answers_at_once_in_redis_shapes(gradus, r2, r3):
    r2.zadd("z", {"a": 1, "b": 2, "c": 3})
    assert zpop(r2.execute_command("BZPOPMIN", "missing", "z", 0)) == [b"z", b"a", 1]
    assert zpop(r3.execute_command("BZPOPMAX", "z", 0)) == [b"z", b"c", 3]
    r2.zadd("z", {"d": 4, "e": 5})
    assert r2.execute_command("BZMPOP", 0, 2, "missing", "z", "MIN", "COUNT", 2) == [
        b"z",
        [[b"b", b"2"], [b"d", b"4"]],
    ]
    assert r3.execute_command("BZMPOP", 0, 1, "z", "MAX") == [b"z", [[b"e", 5.0]]]
    r2.set("s", "string")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        r2.execute_command("BZPOPMIN", "s", 0)


def test_client_unblock_answers_as_a_timeout_or_an_error(gradus, r2):
    waiters = _start_in_order(gradus, r2, [("BZPOPMIN", "z", 0), ("BZPOPMIN", "y", 0)])
    assert r2.client_unblock(waiters[0].client_id) == 1
    waiters[0].join(5)
    assert waiters[0].result is None and waiters[0].error is None
    assert r2.execute_command("CLIENT", "UNBLOCK", waiters[1].client_id, "ERROR") == 1
    waiters[1].join(5)
    assert waiters[1].error == "UNBLOCKED client unblocked via CLIENT UNBLOCK"
    assert r2.client_unblock(waiters[1].client_id) == 0, "not blocked any more"
    with pytest.raises(redis.ResponseError, match="reason should be TIMEOUT or ERROR"):
        r2.execute_command("CLIENT", "UNBLOCK", 1, "LATER")


def test_writes_in_a_transaction_wake_clients_only_after_exec(gradus, r2):
    (w,) = _start_in_order(gradus, r2, [("BZPOPMIN", "z", 0)])
    pipe = r2.pipeline(transaction=True)
    pipe.zadd("z", {"a": 1})
    pipe.zrem("z", "a")
    pipe.execute()
    time.sleep(0.1)
    assert w.is_alive(), "the member added and removed inside EXEC was never there for it"
    pipe = r2.pipeline(transaction=True)
    pipe.zadd("z", {"a": 1})
    pipe.zadd("z", {"b": 2})
    pipe.execute()
    w.join(5)
    assert zpop(w.result) == [b"z", b"a", 1]
    assert r2.zrange("z", 0, -1) == [b"b"]


def test_writes_in_a_script_wake_clients_after_it(gradus, r2):
    (w,) = _start_in_order(gradus, r2, [("BZPOPMIN", "z", 0)])
    r2.eval("redis.call('ZADD', KEYS[1], 1, 'a'); redis.call('ZREM', KEYS[1], 'a')", 1, "z")
    time.sleep(0.1)
    assert w.is_alive()
    r2.eval("redis.call('ZADD', KEYS[1], 1, 'a')", 1, "z")
    w.join(5)
    assert zpop(w.result) == [b"z", b"a", 1]


def _before_7_2(r: redis.Redis) -> bool:
    """Redis 7.0 (the redis-server installed here, GRADUS_TARGET=redis); Gradus follows 7.2."""
    version = tuple(int(x) for x in str(r.info("server")["redis_version"]).split(".")[:2])
    return version < (7, 2)


def test_nothing_blocks_inside_a_transaction_or_a_script(gradus, r2):
    pipe = r2.pipeline(transaction=True)
    pipe.execute_command("BZPOPMIN", "z", 0)
    pipe.ping()
    assert pipe.execute() == [None, True]
    if _before_7_2(r2):
        # Redis 7.0 kept BZPOPMIN (and BLPOP …) out of scripts; 7.2 lets them run there.
        with pytest.raises(redis.ResponseError, match="not allowed from script"):
            r2.eval("return redis.call('BZPOPMIN', KEYS[1], 0)", 1, "z")
    else:
        assert r2.eval("return redis.call('BZPOPMIN', KEYS[1], 0)", 1, "z") is None
    assert r2.eval("return redis.call('BZMPOP', 0, 1, KEYS[1], 'MIN')", 1, "z") is None
    r2.zadd("z", {"a": 1})
    assert r2.eval("return redis.call('BZMPOP', 0, 1, KEYS[1], 'MIN')", 1, "z") == [b"z", [[b"a", b"1"]]]


# Every blocking pop, and WAIT: what a script gets when nothing is ready, then when something is.
SCRIPT_BLOCKING_CALLS = [
    (("BLPOP", "l", 0), None, [b"l", b"a"]),
    (("BRPOP", "l", 0), None, [b"l", b"b"]),
    (("BLMOVE", "l", "m", "LEFT", "RIGHT", 0), None, b"a"),
    (("BRPOPLPUSH", "l", "m", 0), None, b"b"),
    (("BLMPOP", 0, 1, "l", "LEFT"), None, [b"l", [b"a"]]),
    (("BZPOPMIN", "z", 0), None, [b"z", b"a", b"1"]),
    (("BZPOPMAX", "z", 0), None, [b"z", b"b", b"2"]),
    (("BZMPOP", 0, 1, "z", "MIN"), None, [b"z", [[b"a", b"1"]]]),
]


def test_scripts_run_blocking_pops_without_blocking(gradus, r2):
    """Regression: Gradus flagged BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BZPOPMIN, BZPOPMAX and WAIT
    `noscript` (Redis 7.0's flags), so a script calling them failed. Redis 7.2 runs them there
    as inside MULTI: an empty key answers the timeout's reply at once, a filled one pops (its
    scripting.tcl "Scripts do not block on blpop command" …). Their COMMAND INFO flags lose
    `noscript` too. Against Redis 7.0 (GRADUS_TARGET=redis) only what 7.0 allows is run."""
    old = _before_7_2(r2)
    call = "return redis.call(unpack(ARGV))"
    for cmd, empty, filled in SCRIPT_BLOCKING_CALLS:
        name = cmd[0]
        if old and name not in ("BLMPOP", "BZMPOP"):
            with pytest.raises(redis.ResponseError, match="not allowed from script"):
                r2.eval(call, 0, *cmd)
            continue
        r2.delete("l", "m", "z")
        started = time.monotonic()
        assert r2.eval(call, 0, *cmd) == empty, name
        assert time.monotonic() - started < 1, f"{name} waited"
        r2.rpush("l", "a", "b")
        r2.zadd("z", {"a": 1, "b": 2})
        assert r2.eval(call, 0, *cmd) == filled, name
        # Declared keys: the script runs under its keys' locks.
        r2.delete("l", "m", "z")
        r2.rpush("l", "a", "b")
        r2.zadd("z", {"a": 1, "b": 2})
        assert r2.eval(call, 3, "l", "m", "z", *cmd) == filled, name
    if not old:
        assert r2.eval("return redis.call('WAIT', 1, 0)", 0) == 0
    for name in ("blpop", "brpop", "blmove", "brpoplpush", "bzpopmin", "bzpopmax", "wait"):
        flags = r2.execute_command("COMMAND", "INFO", name)[name]["flags"]
        assert ("noscript" in flags) == old, (name, flags)


def test_a_key_of_another_type_keeps_its_clients_blocked(gradus, r2):
    (w,) = _start_in_order(gradus, r2, [("BZPOPMIN", "k", 0)])
    r2.set("k", "a string")
    time.sleep(0.1)
    assert w.is_alive() and _blocked_count(r2) == 1
    r2.delete("k")
    r2.zadd("k", {"m": 1})
    w.join(5)
    assert zpop(w.result) == [b"k", b"m", 1]


def test_a_client_blocked_for_another_type_does_not_hold_back_the_ones_behind_it(gradus, r2):
    """Clients blocked on one key for different types: a BLPOP first, an XREAD and a BZPOPMIN
    behind it. An XADD serves the XREAD, a ZADD (after the key is gone) the BZPOPMIN; the
    BLPOP keeps waiting in its place and is served by the list at last. (The first waiter
    that could not be served ended the pass over the key, so the XREAD behind a BLPOP waited
    for good; found by Redis' own stream-cgroups.tcl.)"""
    first, reader, zpopper = _start_in_order(gradus, r2, [
        ("BLPOP", "k", 0), ("XREAD", "BLOCK", 0, "STREAMS", "k", "$"), ("BZPOPMIN", "k", 0)])
    r2.xadd("k", {"f": "v"}, id="1-0")
    reader.join(5)
    assert reader.result == [[b"k", [(b"1-0", {b"f": b"v"})]]] or reader.result == [
        [b"k", [[b"1-0", [b"f", b"v"]]]]], reader.result
    r2.delete("k")
    r2.zadd("k", {"m": 1})
    zpopper.join(5)
    assert zpop(zpopper.result) == [b"k", b"m", 1]
    assert first.is_alive() and _blocked_count(r2) == 1
    r2.rpush("k", "x")
    first.join(5)
    assert list(first.result) == [b"k", b"x"]


def test_info_clients_counts_blocking_keys_as_redis_7_2(gradus, r2):
    """INFO clients has Redis 7.2's `total_blocking_keys`, `total_blocking_keys_on_nokey` (keys
    a blocked XREADGROUP waits on: a deleted key answers it) and `clients_in_timeout_table`
    (clients blocked with a timeout), besides `cluster_connections` and the recent buffer
    peaks; the figures are redis-server 7.2's in the same steps (7.0 has no such fields, so
    this test runs against Gradus only)."""
    fields = ("blocked_clients", "clients_in_timeout_table", "total_blocking_keys",
              "total_blocking_keys_on_nokey")

    def counts():
        info = r2.info("clients")
        return tuple(info[f] for f in fields)

    info = r2.info("clients")
    for field in ("cluster_connections", "client_recent_max_input_buffer",
                  "client_recent_max_output_buffer") + fields:
        assert field in info, field
    assert counts() == (0, 0, 0, 0)
    blpop, = _start_in_order(gradus, r2, [("BLPOP", "mystream", 0)])
    assert counts() == (1, 0, 1, 0)
    r2.xadd("mystream", {"k": "v"}, id="666-0")
    r2.xgroup_create("mystream", "g", "$")
    group = Blocked(gradus, "XREADGROUP", "GROUP", "g", "c", "BLOCK", 0, "STREAMS", "mystream", ">")
    group.start()
    _wait_blocked(r2, 2)
    assert counts() == (2, 0, 1, 1)
    timed = Blocked(gradus, "BLPOP", "other", 30)
    timed.start()
    _wait_blocked(r2, 3)
    assert counts() == (3, 1, 2, 1)
    r2.delete("mystream")
    group.join(5)
    assert group.error is not None and group.error.startswith("NOGROUP"), group.error
    assert counts() == (2, 1, 2, 0)
    r2.rpush("other", "x")
    r2.rpush("mystream", "y")
    blpop.join(5)
    timed.join(5)
    assert counts() == (0, 0, 0, 0)


def test_a_client_that_hung_up_is_never_served(gradus, r2):
    sock = socket.create_connection((gradus.host, gradus.port))
    sock.sendall(b"*3\r\n$8\r\nBZPOPMIN\r\n$1\r\nz\r\n$1\r\n0\r\n")
    _wait_blocked(r2, 1)
    sock.close()
    deadline = time.monotonic() + 5
    while _blocked_count(r2) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _blocked_count(r2) == 0
    r2.zadd("z", {"a": 1})
    assert r2.zrange("z", 0, -1) == [b"a"], "the member went to a closed connection"


def test_a_client_that_hangs_up_before_it_blocks_is_never_left_blocked(gradus, r2):
    """Regression: a client that closed its socket before its connection got to wait left its
    waiter in the table (the clean-up was made only when the wait was first polled, and the wait
    for the hang-up could win that race), so a later write served an element to nobody."""
    for _ in range(30):
        sock = socket.create_connection((gradus.host, gradus.port))
        sock.sendall(b"*3\r\n$8\r\nBZPOPMIN\r\n$1\r\nz\r\n$1\r\n0\r\n")
        sock.close()
    deadline = time.monotonic() + 10
    while _blocked_count(r2) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _blocked_count(r2) == 0
    r2.zadd("z", {"a": 1})
    assert r2.zrange("z", 0, -1) == [b"a"], "the member went to a closed connection"


@pytest.mark.gradus_only
def test_a_served_pop_is_logged_and_survives_kill_9(gradus_factory):
    server = gradus_factory("--durability", "strict")
    r = redis_client(server, 2)
    r.zadd("z", {"keep": 9})
    (w,) = _start_in_order(server, r, [("BZPOPMIN", "empty", "q", 0)])
    r.zadd("q", {"a": 1, "b": 2})
    w.join(5)
    assert zpop(w.result) == [b"q", b"a", 1]
    assert zpop(r.execute_command("BZPOPMAX", "z", 0)) == [b"z", b"keep", 9]
    before = {k: r.zrange(k, 0, -1, withscores=True) for k in (b"q", b"z")}
    server.crash_restart()
    r = redis_client(server, 2)
    after = {k: r.zrange(k, 0, -1, withscores=True) for k in (b"q", b"z")}
    assert after == before == {b"q": [(b"b", 2.0)], b"z": []}


# --- the list forms -----------------------------------------------------------------------


def test_blpop_is_woken_by_a_push_from_another_client_at_once(gradus, r2):
    waiters = _start_in_order(gradus, r2, [("BLPOP", "q", 0), ("BRPOP", "q", 0)])
    sent = time.monotonic()
    r2.rpush("q", "first", "second", "third")
    for w in waiters:
        w.join(5)
    assert list(waiters[0].result) == [b"q", b"first"]
    assert list(waiters[1].result) == [b"q", b"third"], "BRPOP takes from the right, after BLPOP's turn"
    assert r2.lrange("q", 0, -1) == [b"second"]
    assert waiters[0].finished_at - sent < 0.05, waiters[0].finished_at - sent


def test_blmove_chains_wake_the_clients_blocked_on_the_destination(gradus, r2):
    waiters = _start_in_order(
        gradus, r2, [("BLMOVE", "a", "b", "LEFT", "RIGHT", 0), ("BLPOP", "b", 0)]
    )
    r2.lpush("a", "job")
    for w in waiters:
        w.join(5)
    assert waiters[0].result == b"job"
    assert list(waiters[1].result) == [b"b", b"job"], "the move made b ready for its waiter"
    assert r2.exists("a", "b") == 0


@pytest.mark.parametrize("command", [("BRPOPLPUSH", "src", "dst", 0),
                                     ("BLMOVE", "src", "dst", "RIGHT", "LEFT", 0)])
def test_a_blocked_move_into_a_key_of_another_type_is_answered_wrongtype(gradus, r2, command):
    """Redis re-runs a woken BLMOVE/BRPOPLPUSH: when its destination holds another type the
    client gets WRONGTYPE and is unblocked, and the source keeps its elements in order (Redis'
    own list.tcl "BRPOPLPUSH with wrong destination type"). Gradus left the client blocked."""
    r2.set("dst", "not a list")
    (w,) = _start_in_order(gradus, r2, [command])
    r2.rpush("src", "a", "b", "c")
    w.join(5)
    assert not w.is_alive(), "the client was left blocked"
    assert w.error is not None and w.error.startswith("WRONGTYPE"), (w.result, w.error)
    assert _blocked_count(r2) == 0
    assert r2.lrange("src", 0, -1) == [b"a", b"b", b"c"]
    assert r2.get("dst") == b"not a list"


def test_brpoplpush_and_blmpop_reply_in_redis_shapes(gradus, r2, r3):
    assert r2.brpoplpush("src", "dst", 0.05) is None
    assert r2.execute_command("BLMPOP", 0.05, 1, "src", "LEFT") is None
    (w,) = _start_in_order(gradus, r2, [("BLMPOP", 0, 2, "x", "y", "RIGHT", "COUNT", 2)])
    r2.rpush("y", 1, 2, 3)
    w.join(5)
    assert w.result == [b"y", [b"3", b"2"]]
    assert r3.execute_command("BLMPOP", 0, 1, "y", "LEFT", "COUNT", 5) == [b"y", [b"1"]]
    r2.rpush("src", "v")
    assert r2.brpoplpush("src", "dst", 0) == b"v"
    assert r2.lrange("dst", 0, -1) == [b"v"]


def test_a_push_inside_exec_wakes_the_list_client_after_exec(gradus, r2):
    (w,) = _start_in_order(gradus, r2, [("BLPOP", "q", 0)])
    pipe = r2.pipeline(transaction=True)
    pipe.rpush("q", "a", "b")
    pipe.lpop("q")
    pipe.execute()
    w.join(5)
    assert list(w.result) == [b"q", b"b"], "served with what EXEC left, not the element EXEC itself popped"
    assert r2.exists("q") == 0
