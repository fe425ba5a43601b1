"""Redis' BUSY semantics for long scripts and functions (`busy-reply-threshold`).

With two worker threads or more (`--threads 2`), a script or function past the threshold runs
on, as in Redis 7.2: every other command is refused with `-BUSY …` except the `allow-busy`
ones (MULTI, DISCARD, WATCH, SCRIPT KILL, FUNCTION KILL, FUNCTION STATS, SHUTDOWN NOSAVE …),
an EXEC is discarded with `EXECABORT … BUSY …`, SCRIPT KILL / FUNCTION KILL stop it unless it
has written (UNKILLABLE), and SHUTDOWN NOSAVE exits without waiting for it. Each scenario runs
on Gradus and on redis-server and the replies must be the same (differential.assert_same). With
one worker (`--threads 1`) nothing could answer meanwhile, so Gradus stops a script that has not
written at the threshold instead, and lets one that has run to its end (the two tests at the end).

The threshold is set to 100 ms so every test takes about a second."""

from __future__ import annotations

import socket
import time

import pytest

from conftest import target_is_redis
from differential import assert_same
from resp import NULL_ARRAY, ConnectionClosed, Err, RawConnection, Simple

THRESHOLD_MS = "100"
LOOP = "local a = 1 while true do a = a + 1 end"
# About 0.3 s of Lua (under a 500 ms threshold), measured by the script's own clock.
SHORT_SPIN = ("local t = redis.call('TIME') local start = t[1] * 1000000 + t[2] "
              "repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - start > 300000 return 1")
BUSY_EVAL = Err(b"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.")
BUSY_FUNCTION = Err(b"BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.")
OK = Simple(b"OK")
LIBRARY = ("#!lua name=busylib\n"
           "redis.register_function('spin', function() local a = 1 while true do a = a + 1 end end)")


@pytest.fixture
def multi_worker(gradus_factory):
    """Gradus with two workers: BUSY replies while a script runs past the threshold."""
    return gradus_factory("--threads", "2")


def connect(server) -> RawConnection:
    return RawConnection(server.host, server.port, timeout=10)


def prepare(server) -> RawConnection:
    """A connection to a flushed `server` with the threshold at 100 ms."""
    conn = connect(server)
    conn.call("FLUSHALL")
    conn.call("FUNCTION", "FLUSH")
    conn.call("CONFIG", "SET", "busy-reply-threshold", THRESHOLD_MS)
    return conn


def wait_for_busy(conn: RawConnection, timeout: float = 10.0):
    """PING until the server answers BUSY (the script has passed the threshold); that reply."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reply = conn.call("PING")
        if isinstance(reply, Err):
            return reply
        time.sleep(0.02)
    raise AssertionError("the server never answered BUSY")


def read_after_kills(runner: RawConnection, other: RawConnection, tries: int = 5):
    """`runner`'s reply after a SCRIPT KILL. A script that only started after that kill (its
    worker was slow to read the EVAL) is not stopped by it, as in Redis, where a kill stops
    the script running then: it gets SCRIPT KILLs of its own (at most `tries`)."""
    for _ in range(tries):
        try:
            return runner.read_reply(timeout=2)
        except socket.timeout:
            assert other.call("SCRIPT", "KILL") == OK, "no reply and no script to kill"
    return runner.read_reply(timeout=2)


def without_duration(reply):
    """FUNCTION STATS with `duration_ms`'s value left out (it differs from run to run)."""
    if isinstance(reply, list):
        out = []
        for i, item in enumerate(reply):
            out.append("<ms>" if i > 0 and reply[i - 1] == b"duration_ms" else without_duration(item))
        return out
    return reply


def test_a_busy_eval_refuses_other_commands_until_script_kill(multi_worker, redis_server):
    """Redis' scripting.tcl "Timedout read-only scripts can be killed by SCRIPT KILL" and
    multi.tcl "EXEC and script timeout": past the threshold every command but the allow-busy
    ones gets BUSY (EXEC: EXECABORT, and its transaction is gone), FUNCTION STATS and
    FUNCTION KILL point to SCRIPT KILL, SHUTDOWN without NOSAVE is refused, SCRIPT KILL stops
    the script and its caller gets Redis' killed error; then everything runs again."""

    def scenario(server):
        other = prepare(server)
        runner = connect(server)
        other.call("SET", "xx", "1")
        runner.send_command("EVAL", LOOP, "0")
        seen = [wait_for_busy(other)]
        for cmd in (["GET", "xx"], ["MULTI"], ["INCR", "xx"], ["EXEC"], ["EXEC"],
                    ["FUNCTION", "STATS"], ["FUNCTION", "KILL"], ["SHUTDOWN"], ["SCRIPT", "KILL"]):
            seen.append((cmd, other.call(*cmd)))
        seen.append(("runner", runner.read_reply()))
        seen.append(other.call("PING", "asdf"))
        seen.append(other.call("GET", "xx"))
        seen.append(other.call("SCRIPT", "KILL"))
        return seen

    seen = assert_same(multi_worker, redis_server, scenario)
    assert seen[0] == BUSY_EVAL
    assert seen[-4][1].text.startswith("ERR Script killed by user with SCRIPT KILL... script: ")


def test_a_busy_key_locked_eval_is_busy_too(multi_worker, redis_server):
    """A script that declares its keys runs under those keys' locks on Gradus, beside other
    commands; past the threshold the whole server is BUSY all the same, as in Redis."""

    def scenario(server):
        other = prepare(server)
        runner = connect(server)
        runner.send_command("EVAL", "redis.call('get', KEYS[1]) " + LOOP, "1", "k")
        seen = [wait_for_busy(other), other.call("GET", "unrelated"), other.call("SCRIPT", "KILL")]
        seen.append(runner.read_reply())
        seen.append(other.call("SET", "k", "v"))
        return seen

    assert_same(multi_worker, redis_server, scenario)


def test_multi_during_a_busy_script_is_allowed_and_exec_aborts(multi_worker, redis_server):
    """Redis' multi.tcl "MULTI and script timeout" / "MULTI-EXEC body and script timeout": MULTI
    is allowed while busy (a pipelined transaction must not lose its MULTI and run half its
    commands on their own), a command refused with BUSY fails the transaction, and EXEC after
    the kill answers EXECABORT without running any of it."""

    def scenario(server):
        other = prepare(server)
        runner = connect(server)
        other.call("SET", "xx", "1")
        runner.send_command("EVAL", LOOP, "0")
        seen = [wait_for_busy(other), other.call("MULTI"), other.call("INCR", "xx")]
        killer = connect(server)
        seen.append(killer.call("SCRIPT", "KILL"))
        seen.append(runner.read_reply())
        seen += [other.call("INCR", "xx"), other.call("EXEC"), other.call("GET", "xx"),
                 other.call("PING", "asdf")]
        return seen

    assert_same(multi_worker, redis_server, scenario)


def test_a_busy_function_is_stopped_by_function_kill_only(multi_worker, redis_server):
    """Redis' functions.tcl "test function kill" / "test script kill not working on function":
    BUSY names FUNCTION KILL, SCRIPT KILL is refused, FUNCTION STATS shows the running
    function and its command, FUNCTION KILL stops it (its caller gets Redis' error, which names
    SCRIPT KILL in Redis 7.2 too)."""

    def scenario(server):
        other = prepare(server)
        runner = connect(server)
        other.call("FUNCTION", "LOAD", LIBRARY)
        runner.send_command("FCALL", "spin", "0")
        seen = [wait_for_busy(other)]
        for cmd in (["GET", "x"], ["SCRIPT", "KILL"], ["FUNCTION", "STATS"], ["FUNCTION", "KILL"]):
            seen.append((cmd, without_duration(other.call(*cmd))))
        seen.append(("runner", runner.read_reply()))
        seen.append(without_duration(other.call("FUNCTION", "STATS")))
        seen.append(other.call("FUNCTION", "KILL"))
        return seen

    seen = assert_same(multi_worker, redis_server, scenario)
    assert seen[0] == BUSY_FUNCTION
    assert seen[5][1] == Err(b"ERR Script killed by user with SCRIPT KILL... script: spin, on @user_function:2.")


def test_pcall_cannot_swallow_script_kill(multi_worker, redis_server):
    """Redis' scripting.tcl "Timedout read-only scripts can be killed by SCRIPT KILL even when
    use pcall": the kill is raised again past every pcall."""

    def scenario(server):
        other = prepare(server)
        runner = connect(server)
        runner.send_command(
            "EVAL",
            "local f = function() while 1 do redis.call('ping') end end while 1 do pcall(f) end",
            "0")
        seen = [wait_for_busy(other), other.call("SCRIPT", "KILL"), runner.read_reply()]
        seen.append(other.call("PING"))
        return seen

    assert_same(multi_worker, redis_server, scenario)


def test_a_busy_script_that_wrote_is_unkillable_until_shutdown_nosave(multi_worker, redis_server):
    """Redis' scripting.tcl "Timedout scripts that modified data can't be killed by SCRIPT
    KILL" and "SHUTDOWN NOSAVE can kill a timedout script anyway": UNKILLABLE, the server stays
    BUSY, SHUTDOWN without NOSAVE is refused, and SHUTDOWN NOSAVE exits without waiting for the
    script, which leaves nothing behind (on Gradus its writes never reach the log)."""

    def scenario(server):
        other = prepare(server)
        runner = connect(server)
        other.call("SET", "before", "1")
        runner.send_command("EVAL", "redis.call('set', KEYS[1], 'y') " + LOOP, "1", "x")
        seen = [wait_for_busy(other), other.call("SCRIPT", "KILL"), other.call("PING"),
                other.call("SHUTDOWN")]
        started = time.monotonic()
        other.send_command("SHUTDOWN", "NOSAVE")
        seen.append(other.wait_closed(timeout=10))
        with pytest.raises((ConnectionClosed, ConnectionResetError)):
            runner.read_reply()
        assert server.wait(timeout=10) == 0, "the server did not exit"
        assert time.monotonic() - started < 3, "SHUTDOWN NOSAVE waited for the script"
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((server.host, server.port), timeout=2)
        server.start()
        seen.append(connect(server).call("GET", "x"))
        return seen

    seen = assert_same(multi_worker, redis_server, scenario)
    assert seen[1].text.startswith("UNKILLABLE ")
    if not target_is_redis():
        # What was logged before the script stands (redis-server here keeps nothing).
        assert connect(multi_worker).call("GET", "before") == b"1"


def test_a_busy_script_that_ends_by_itself_replies_and_frees_the_server(multi_worker, redis_server):
    """Redis' scripting.tcl "Timedout script link is still usable after Lua returns": a script
    past the threshold that ends on its own replies as usual, and the server is no longer
    busy."""

    def scenario(server):
        other = prepare(server)
        runner = connect(server)
        runner.send_command("EVAL", "local a = 0 for i = 1, 60000000 do a = a + 1 end return a", "0")
        seen = [wait_for_busy(other), runner.read_reply(timeout=60), other.call("PING"),
                runner.call("PING")]
        return seen

    assert_same(multi_worker, redis_server, scenario)


@pytest.mark.gradus_only
def test_two_key_locked_scripts_past_the_threshold_are_killed_together(multi_worker):
    """Two scripts on different declared keys run side by side on Gradus (Redis runs one at a
    time); both past the threshold, the server is busy until both end: SCRIPT KILL stops both,
    and then it is free. (Whether the second starts before the first passes the threshold is
    up to tokio: a worker that is asleep is not woken for one task, so it is tried a few times;
    either way the server must end up free.)"""
    other = prepare(multi_worker)
    other.call("CONFIG", "SET", "busy-reply-threshold", "300")
    both_ran = False
    for _ in range(6):
        runners = [connect(multi_worker) for _ in range(2)]
        for runner, key in zip(runners, ("k1", "k2")):
            runner.send_command("EVAL", "redis.call('get', KEYS[1]) " + LOOP, "1", key)
        time.sleep(0.5)
        assert other.call("GET", "k1") == BUSY_EVAL
        assert other.call("SCRIPT", "KILL") == OK
        replies = [read_after_kills(runner, other) for runner in runners]
        killed = [r for r in replies if r.text.startswith("ERR Script killed by user with SCRIPT KILL...")]
        # One at least ran; the other ran too, or came after the threshold and got BUSY.
        assert killed and all(r in killed or r == BUSY_EVAL for r in replies), replies
        assert other.call("PING") == Simple(b"PONG")
        assert other.call("SCRIPT", "KILL") == Err(b"NOTBUSY No scripts in execution right now.")
        if len(killed) == 2:
            both_ran = True
            break
    assert both_ran, "the two scripts never ran side by side"


@pytest.mark.gradus_only
def test_watch_while_busy_never_waits_and_makes_exec_fail(multi_worker):
    """WATCH is allowed while busy (Redis' allow-busy) but must not wait for the store gate the
    script holds: the keys are watched as changed, so EXEC answers nil (a retry, never a lost
    update). Redis would watch them as they are."""
    other = prepare(multi_worker)
    runner = connect(multi_worker)
    other.call("SET", "k", "1")
    runner.send_command("EVAL", LOOP, "0")
    wait_for_busy(other)
    watcher = connect(multi_worker)
    assert watcher.call("WATCH", "k", timeout=2) == OK
    assert other.call("SCRIPT", "KILL") == OK
    assert isinstance(runner.read_reply(), Err)
    assert watcher.call("MULTI") == OK
    assert watcher.call("SET", "k", "2") == Simple(b"QUEUED")
    assert watcher.call("EXEC") is NULL_ARRAY
    assert other.call("GET", "k") == b"1"
    # Once the script is gone WATCH is as before.
    assert watcher.call("WATCH", "k") == OK
    assert watcher.call("MULTI") == OK
    assert watcher.call("SET", "k", "3") == Simple(b"QUEUED")
    assert watcher.call("EXEC") == [OK]


@pytest.mark.gradus_only
def test_memcached_commands_are_refused_while_busy(multi_worker):
    """The memcached front end does not wait for the gate a busy script holds either: its
    commands get a SERVER_ERROR, `version` still answers, and all is as before after the kill."""
    other = prepare(multi_worker)
    runner = connect(multi_worker)
    runner.send_command("EVAL", LOOP, "0")
    wait_for_busy(other)
    mc = socket.create_connection((multi_worker.host, multi_worker.memcached_port), timeout=5)

    def ask(line: bytes) -> bytes:
        mc.sendall(line)
        data = b""
        while not data.endswith(b"\r\n"):
            data += mc.recv(4096)
        return data

    assert ask(b"get k\r\n") == b"SERVER_ERROR busy running a script\r\n"
    assert ask(b"version\r\n").startswith(b"VERSION ")
    assert other.call("SCRIPT", "KILL") == OK
    assert isinstance(runner.read_reply(), Err)
    assert ask(b"set k 0 0 1\r\nv\r\n") == b"STORED\r\n"
    mc.close()


@pytest.mark.gradus_only
def test_commands_that_came_while_the_script_ran_get_busy_too(multi_worker):
    """Commands that came before the threshold, while the script held the store gate, wait for
    it where they can be refused: once it passes the threshold they get BUSY (as Redis answers
    them) instead of waiting for it to end, each holding a worker thread. With two workers one
    such GET left nobody to answer anything, SCRIPT KILL included, until the script ended. New
    connections are served too (the accept loop may be queued on the script's worker, which
    hands its tasks on at the threshold)."""
    other = prepare(multi_worker)
    other.call("CONFIG", "SET", "busy-reply-threshold", "500")
    other.call("SET", "k", "v")
    waiting = [connect(multi_worker) for _ in range(4)]
    runner = connect(multi_worker)
    for _ in range(3):
        runner.send_command("EVAL", LOOP, "0")
        time.sleep(0.05)
        for conn in waiting:
            conn.send_command("GET", "k")
        assert [conn.read_reply() for conn in waiting] == [BUSY_EVAL] * len(waiting)
        late = [connect(multi_worker) for _ in range(10)]
        for conn in late:
            conn.send_command("GET", "k")
        assert [conn.read_reply() for conn in late] == [BUSY_EVAL] * len(late)
        assert connect(multi_worker).call("SCRIPT", "KILL") == OK
        assert isinstance(runner.read_reply(), Err)
        assert [conn.call("GET", "k") for conn in waiting] == [b"v"] * len(waiting)


def test_commands_that_came_while_exec_ran_a_script_get_busy(multi_worker, redis_server):
    """A script queued in MULTI runs inside EXEC, which holds the store gate for the whole
    transaction. Commands that came while EXEC ran (here during a shorter script queued before
    the long one) wait for it where they can be refused, and get BUSY once the script passes the
    threshold, as in Redis (regression: they waited at the gate behind EXEC, unanswered, each
    holding a worker, so with two of them nothing answered SCRIPT KILL either); SCRIPT KILL
    stops the script and EXEC's reply carries the killed error."""

    def scenario(server):
        other = prepare(server)
        other.call("CONFIG", "SET", "busy-reply-threshold", "500")
        other.call("SET", "k", "v")
        waiting = [connect(server) for _ in range(3)]
        runner = connect(server)
        assert runner.call("MULTI") == OK
        runner.call("EVAL", SHORT_SPIN, "0")
        runner.call("EVAL", LOOP, "0")
        runner.send_command("EXEC")
        time.sleep(0.1)
        for conn in waiting:
            conn.send_command("GET", "k")
        seen = [conn.read_reply(timeout=5) for conn in waiting]
        seen.append(other.call("SCRIPT", "KILL"))
        exec_reply = runner.read_reply(timeout=5)
        seen.append(len(exec_reply))
        seen.append(exec_reply[0])
        seen.append(exec_reply[1].text.split(" script: ")[0])
        seen.append([conn.call("GET", "k") for conn in waiting])
        return seen

    seen = assert_same(multi_worker, redis_server, scenario)
    assert seen[:3] == [BUSY_EVAL] * 3


@pytest.mark.gradus_only
def test_commands_sent_as_a_long_script_starts_are_answered(multi_worker):
    """Commands that reach the server at the moment a script that will run past the threshold
    starts are answered: PONG when they ran before it, BUSY once it passed the threshold, never
    left waiting behind it. Gradus looks for a running script before a command takes the store
    gate; a command let in just before an exclusive script announced itself must run before
    that script takes the gate (regression: such a PING waited at the gate, unanswered, until
    the script ended, so its client never got to send FUNCTION KILL). The window is narrow:
    several connections, several rounds."""
    other = prepare(multi_worker)
    other.call("FUNCTION", "LOAD", LIBRARY)
    for _ in range(15):
        pingers = [connect(multi_worker) for _ in range(6)]
        runner = connect(multi_worker)
        runner.send_command("FCALL", "spin", "0")
        for conn in pingers:
            conn.send_command("PING")
        replies = [conn.read_reply(timeout=5) for conn in pingers]
        assert all(r in (Simple(b"PONG"), BUSY_FUNCTION) for r in replies), replies
        assert wait_for_busy(other) == BUSY_FUNCTION
        assert other.call("FUNCTION", "KILL") == OK
        assert runner.read_reply().text.startswith("ERR Script killed by user with SCRIPT KILL...")
        for conn in pingers + [runner]:
            conn.close()


@pytest.mark.gradus_only
def test_one_worker_stops_a_script_at_the_threshold(gradus_factory):
    """With one worker nothing else runs while a script does, so no BUSY reply could be sent:
    the script is stopped at the threshold (Gradus' behaviour), and the next command runs."""
    server = gradus_factory("--threads", "1")
    conn = prepare(server)
    started = time.monotonic()
    reply = conn.call("EVAL", LOOP, "0")
    assert reply == Err(b"ERR Script killed: it ran longer than the script time limit")
    assert time.monotonic() - started < 3
    assert conn.call("PING") == Simple(b"PONG")
    assert conn.call("SCRIPT", "KILL") == Err(b"NOTBUSY No scripts in execution right now.")


@pytest.mark.gradus_only
def test_one_worker_lets_a_script_that_has_written_run_to_its_end(gradus_factory):
    """With one worker a script past the threshold that has already written is not stopped: it
    runs to its end and all its writes are there, as in Redis, which never stops a script
    halfway through its writes (SCRIPT KILL answers UNKILLABLE). Gradus stopped it, leaving the
    first half of its writes applied and the rest not. A client that sends a command meanwhile
    gets its reply once the script has ended. One that has not written is still stopped."""
    server = gradus_factory("--threads", "1")
    conn = prepare(server)
    writer = ("redis.call('SET', KEYS[1], 'first') "
              "local t = redis.call('TIME') local start = t[1] * 1000000 + t[2] "
              "repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - start > 600000 "
              "redis.call('SET', KEYS[2], 'second') return 'done'")
    other = connect(server)
    conn.send_command("EVAL", writer, "2", "w1", "w2")
    time.sleep(0.3)
    other.send_command("GET", "w2")
    assert conn.read_reply(timeout=10) == b"done"
    assert other.read_reply(timeout=10) == b"second"
    assert conn.call("MGET", "w1", "w2") == [b"first", b"second"]
    reply = conn.call("EVAL", LOOP, "0")
    assert reply == Err(b"ERR Script killed: it ran longer than the script time limit")
    assert conn.call("PING") == Simple(b"PONG")
    other.close()
    conn.close()
