"""DEBUG, against a real redis-server started the same way: refused by default (Redis 7's
`enable-debug-command no`) before authentication, in MULTI at queue time and in scripts; allowed
with `enable-debug-command yes` or, from loopback, `local`; the subcommands harnesses use give
Redis' replies."""
import re
import socket
import subprocess
import time

import pytest
import redis

from servers import redis_client

NOT_ALLOWED = ("DEBUG command not allowed. If the enable-debug-command option is set to \"local\", "
               "you can run it from a local connection, otherwise you need to set this option in "
               "the configuration file, and then restart the server.")


def reply(r, *args):
    """The reply, or the error's text."""
    try:
        return r.execute_command(*args)
    except redis.ResponseError as e:
        return f"error: {e}"


def test_debug_is_refused_by_default_as_by_redis(gradus_factory, redis_server):
    gradus = gradus_factory("--requirepass", "pw")
    peer = redis_server
    peer_client = redis_client(peer, 2)
    peer_client.config_set("requirepass", "pw")
    for server in (gradus, peer):
        # Before authentication: the refusal, not NOAUTH (Redis checks a protected command first).
        with socket.create_connection((server.host, server.port), timeout=10) as bare:
            bare.sendall(b"DEBUG SLEEP 0\r\n")
            assert bare.makefile("rb").readline() == f"-ERR {NOT_ALLOWED}\r\n".encode(), server.name
        r = redis_client(server, 2, password="pw", single_connection_client=True)
        assert reply(r, "DEBUG", "SLEEP", "0") == f"error: {NOT_ALLOWED}", server.name
        assert reply(r, "CONFIG", "GET", "enable-debug-command") == [b"enable-debug-command", b"no"]
        assert reply(r, "CONFIG", "SET", "enable-debug-command", "yes") == (
            "error: CONFIG SET failed (possibly related to argument 'enable-debug-command') - "
            "can't set immutable config")
        # In MULTI it is refused when queued, so EXEC aborts.
        with socket.create_connection((server.host, server.port), timeout=10) as raw:
            raw.sendall(b"AUTH pw\r\nMULTI\r\nDEBUG SLEEP 0\r\nEXEC\r\n")
            lines = raw.makefile("rb")
            assert [lines.readline() for _ in range(4)] == [
                b"+OK\r\n", b"+OK\r\n", f"-ERR {NOT_ALLOWED}\r\n".encode(),
                b"-EXECABORT Transaction discarded because of previous errors.\r\n"], server.name


@pytest.mark.parametrize("setting", ["yes", "local"])
def test_debug_subcommands_reply_as_redis(gradus_factory, _servers, setting):
    gradus = gradus_factory("--enable-debug-command", setting)
    peer = _servers.start_redis("--enable-debug-command", setting)
    replies = {}
    for server in (gradus, peer):
        r = redis_client(server, 2, single_connection_client=True)
        r.set("k", "v")
        r.set("n", "123")
        r.set("long", "abcdefghijklmnopqrstuvwxyz0123456789")
        cases = [
            ("DEBUG", "SLEEP", "0"),
            ("DEBUG", "SLEEP", "not-a-number"),
            ("DEBUG", "OBJECT", "nokey"),
            ("DEBUG", "OBJECT"),
            ("DEBUG", "NO-SUCH-THING"),
            ("DEBUG",),
            ("DEBUG", "ERROR", "CUSTOM an error"),
            ("DEBUG", "LOG", "a line for the log"),
            ("EVAL", "return redis.call('debug', 'sleep', '0')", "0"),
        ]
        replies[server.name] = [reply(r, *c) for c in cases]
        # The same fields, in Redis' order; the address and the clock differ by nature.
        objects = []
        for key in ("k", "n", "long"):
            line = r.execute_command("DEBUG", "OBJECT", key)
            line = line.decode() if isinstance(line, bytes) else line
            # (Redis' LRU clock ticks once a second, so a key just written may look 1 s idle.)
            line = re.sub(r" lru:\d+ lru_seconds_idle:[01]$", " lru:CLOCK lru_seconds_idle:0|1", line)
            objects.append(re.sub(r"Value at:0x[0-9a-f]+ ", "Value at:ADDR ", line))
        replies[server.name].append(objects)
        # SLEEP stalls for the time asked.
        started = time.monotonic()
        assert r.execute_command("DEBUG", "SLEEP", "0.2") in (b"OK", "OK", True)
        assert time.monotonic() - started >= 0.19, server.name
    assert replies[gradus.name] == replies[peer.name]
    # The script's refusal names the script; the rest is equal above.
    assert "not allowed from script" in replies[gradus.name][8]


def test_debug_help_lists_what_is_implemented(gradus_factory):
    r = redis_client(gradus_factory("--enable-debug-command", "yes"), 2)
    lines = [l.decode() if isinstance(l, bytes) else l for l in r.execute_command("DEBUG", "HELP")]
    assert lines[0].startswith("DEBUG <subcommand>")
    listed = {l.split()[0] for l in lines[1:] if not l.startswith(" ")}
    assert listed == {"ERROR", "LOG", "OBJECT", "PROTOCOL", "SET-ACTIVE-EXPIRE", "SLEEP", "HELP"}
    for sub in listed - {"HELP"}:
        answer = reply(r, "DEBUG", sub, "x")
        assert not (isinstance(answer, str) and answer.startswith("error: unknown subcommand")), sub


def test_debug_set_active_expire_stops_and_restarts_the_background_sweep_as_redis(gradus_factory, _servers):
    """`DEBUG SET-ACTIVE-EXPIRE 0` leaves expired keys nobody reads in place (DBSIZE still counts
    them; a read expires one), `1` sweeps them again; a flag that is not a number reads as 0, as
    Redis' `atoi` does. Redis' own test suite turns the sweep off this way around its expiry tests
    (it was an unknown subcommand)."""
    gradus = gradus_factory("--enable-debug-command", "yes")
    peer = _servers.start_redis("--enable-debug-command", "yes")
    seen = {}
    for server in (gradus, peer):
        r = redis_client(server, 2, single_connection_client=True)
        steps = [reply(r, "DEBUG", "SET-ACTIVE-EXPIRE", "0")]
        for i in range(20):
            r.set(f"k{i}", "v", px=20)
        time.sleep(0.5)
        steps.append(r.dbsize())
        steps.append(r.get("k0"))
        steps.append(r.dbsize())
        steps.append(reply(r, "DEBUG", "SET-ACTIVE-EXPIRE", "1"))
        deadline = time.monotonic() + 10
        while r.dbsize() and time.monotonic() < deadline:
            time.sleep(0.05)
        steps.append(r.dbsize())
        steps.append(reply(r, "DEBUG", "SET-ACTIVE-EXPIRE", "not-a-number"))
        r.set("late", "v", px=20)
        time.sleep(0.5)
        steps.append(r.dbsize())
        steps.append(reply(r, "DEBUG", "SET-ACTIVE-EXPIRE"))
        seen[server.name] = steps
    assert seen[gradus.name] == seen[peer.name]
    assert seen[gradus.name][1:4] == [20, None, 19]


@pytest.mark.gradus_only
def test_config_set_loglevel_filters_the_log_at_once(gradus_factory):
    """`CONFIG SET loglevel` changes what the server logs at once, with Redis' level names
    (`DEBUG LOG` writes at warning level); an unknown level is refused with Redis' error and
    changes nothing. Gradus refused every change (`can't set immutable config`), and took a
    misspelt level (`--loglevel notice` was not one) for `info` without a word."""
    server = gradus_factory("--loglevel", "warning", "--enable-debug-command", "yes")
    r = redis_client(server, 2)
    assert r.config_get("loglevel") == {"loglevel": "warning"}
    r.execute_command("DEBUG", "LOG", "first-line")
    assert r.config_set("loglevel", "nothing")
    r.execute_command("DEBUG", "LOG", "second-line")
    assert r.config_set("loglevel", "notice")
    r.execute_command("DEBUG", "LOG", "third-line")
    assert reply(r, "CONFIG", "SET", "loglevel", "loud").startswith(
        "error: CONFIG SET failed (possibly related to argument 'loglevel') - argument(s) must "
        "be one of the following: debug, verbose, notice, warning, nothing")
    assert r.config_get("loglevel") == {"loglevel": "notice"}
    r.execute_command("DEBUG", "LOG", "fourth-line")
    log = server.stderr_text()
    assert "first-line" in log and "third-line" in log and "fourth-line" in log
    assert "second-line" not in log
    server.stop()
    proc = subprocess.run([server.argv[0], "--port", "0", "--tls-port", "0", "--loglevel", "loud"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0
    assert "loglevel: argument(s) must be one of the following" in proc.stderr
