"""Connection limits and process lifecycle: maxclients, SIGTERM, restart."""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path

import pytest

from resp import ConnectionClosed, Err, RawConnection, Simple


def _connect_registered(server, attempts: int = 50) -> RawConnection:
    """A connection the server has accepted and answered (retries while the
    server is still reaping a connection that was closed a moment ago)."""
    for _ in range(attempts):
        conn = RawConnection(server.host, server.port)
        try:
            reply = conn.call("PING")
        except ConnectionClosed:
            reply = None
        if reply == Simple(b"PONG"):
            return conn
        conn.close()
        time.sleep(0.05)
    raise AssertionError("could not open a connection below maxclients")


def test_maxclients(gradus_factory):
    server = gradus_factory("--maxclients", "5")
    conns = [_connect_registered(server) for _ in range(5)]
    try:
        extra = RawConnection(server.host, server.port)
        # The server sends the error without being asked anything, then closes.
        data = extra.wait_closed(timeout=5)
        assert data == b"-ERR max number of clients reached\r\n"
        extra.close()
        # Those already connected are unaffected.
        for conn in conns:
            assert conn.call("PING") == Simple(b"PONG")
        # Once one leaves, a newcomer gets in.
        conns.pop().close()
        conns.append(_connect_registered(server))
        assert conns[-1].call("SET", "k", "v") == Simple(b"OK")
    finally:
        for conn in conns:
            conn.close()


def test_maxclients_redis_py_error(gradus_factory):
    import redis

    from servers import redis_client

    server = gradus_factory("--maxclients", "2")
    conns = [_connect_registered(server) for _ in range(2)]
    try:
        client = redis_client(server, protocol=2)
        with pytest.raises(redis.ConnectionError) as info:
            client.ping()
        assert "max number of clients reached" in str(info.value)
        client.close()
    finally:
        for conn in conns:
            conn.close()


def test_sigterm_exits_zero(gradus):
    with RawConnection(gradus.host, gradus.port) as conn:
        assert conn.call("SET", "k", "v") == Simple(b"OK")
        gradus.signal(signal.SIGTERM)
        code = gradus.wait(timeout=5)
        assert code == 0, f"exit status {code}\n" + gradus.stderr_tail()
        conn.wait_closed(timeout=2)


def test_sigterm_with_idle_and_busy_clients(gradus):
    idle = [RawConnection(gradus.host, gradus.port) for _ in range(10)]
    half_frame = RawConnection(gradus.host, gradus.port)
    half_frame.send(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n12345")
    try:
        for conn in idle:
            assert conn.call("PING") == Simple(b"PONG")
        start = time.monotonic()
        gradus.signal(signal.SIGTERM)
        code = gradus.wait(timeout=5)
        assert code == 0, f"exit status {code}\n" + gradus.stderr_tail()
        assert time.monotonic() - start < 5
    finally:
        for conn in idle + [half_frame]:
            conn.close()


def test_sigint_exits_zero(gradus):
    gradus.signal(signal.SIGINT)
    code = gradus.wait(timeout=5)
    assert code == 0, f"exit status {code}\n" + gradus.stderr_tail()


def test_restart_same_port(gradus):
    port = gradus.port
    gradus.restart()
    assert gradus.port == port
    with RawConnection(gradus.host, gradus.port) as conn:
        assert conn.call("PING") == Simple(b"PONG")
    assert gradus.stop() == 0
    with pytest.raises(OSError):
        socket.create_connection((gradus.host, port), timeout=1).close()


def test_too_many_arguments_unauthenticated(gradus_factory):
    # Before AUTH, Redis refuses multibulk counts above 10 (and bulks above
    # 16 KiB): an anonymous client cannot make the server allocate much.
    server = gradus_factory("--requirepass", "pw")
    with RawConnection(server.host, server.port) as conn:
        conn.send(b"*11\r\n")
        assert conn.read_reply() == Err(b"ERR Protocol error: unauthenticated multibulk length")
        conn.wait_closed()
    with RawConnection(server.host, server.port) as conn:
        conn.send(b"*2\r\n$4\r\nAUTH\r\n$20000\r\n")
        assert conn.read_reply() == Err(b"ERR Protocol error: unauthenticated bulk length")
        conn.wait_closed()
    with RawConnection(server.host, server.port) as conn:
        assert conn.call("AUTH", "pw") == Simple(b"OK")
        assert conn.call("MSET", *[f"k{i}" for i in range(20)]) == Simple(b"OK")


@pytest.mark.gradus_only
def test_config_file(gradus_factory, tmp_path):
    # Settings from --config; command-line flags (here --port/--dir from the
    # fixture and --maxclients) override the file.
    config = tmp_path / "gradus.toml"
    config.write_text('requirepass = "fromfile"\ndatabases = 4\nmaxclients = 50\nport = 1\n')
    server = gradus_factory("--config", str(config), "--maxclients", "7")
    with RawConnection(server.host, server.port) as conn:
        assert conn.call("PING") == Err(b"NOAUTH Authentication required.")
        assert conn.call("AUTH", "fromfile") == Simple(b"OK")
        assert conn.call("SELECT", "3") == Simple(b"OK")
        assert conn.call("SELECT", "4") == Err(b"ERR DB index is out of range")
        assert conn.call("CONFIG", "GET", "maxclients") == [b"maxclients", b"7"]


def test_config_set_errors_match_redis(gradus, redis_server):
    # The same CONFIG SET mistakes against both servers: the same replies, and a
    # failed command changes nothing (Redis checks every pair before applying any).
    cases = [
        ("CONFIG", "SET", "no-such-option", "1"),
        ("CONFIG", "SET", "databases", "4"),
        ("CONFIG", "SET", "DATABASES", "4"),
        ("CONFIG", "SET", "maxclients", "abc"),
        ("CONFIG", "SET", "maxclients", "0"),
        ("CONFIG", "SET", "maxclients", "-5"),
        ("CONFIG", "SET", "maxclients", "99999999999"),
        ("CONFIG", "SET", "maxclients", "10", "MAXCLIENTS", "11"),
        ("CONFIG", "SET", "maxclients", "10", "no-such-option", "1"),
        ("CONFIG", "SET", "databases", "4", "no-such-option", "1"),
        ("CONFIG", "SET", "no-such-option", "1", "databases", "4"),
        ("CONFIG", "SET", "maxclients", "10", "proto-max-bulk-len", "-1"),
        ("CONFIG", "SET", "maxclients", "10", "databases"),
        ("CONFIG", "SET", "maxclients"),
        ("CONFIG", "SET", "MaxClients", "123"),
        ("CONFIG", "GET", "maxclients"),
        ("CONFIG", "GET", "MAXCLIENTS", "maxclient?"),
        ("CONFIG", "SET", "proto-max-bulk-len", "2mb"),
        ("CONFIG", "GET", "proto-max-bulk-len"),
        ("CONFIG", "GET", "no-such-option"),
    ]
    with RawConnection(gradus.host, gradus.port) as ours, \
            RawConnection(redis_server.host, redis_server.port) as theirs:
        for case in cases:
            assert ours.call(*case) == theirs.call(*case), case


@pytest.mark.gradus_only
def test_config_get_lists_every_setting_of_print_config(gradus, tmp_path):
    # --print-config renders the settings in force from the same table CONFIG GET reads.
    import subprocess
    import tomllib

    from servers import gradus_binary

    config = tmp_path / "gradus.toml"
    config.write_text('maxclients = 50\n[durability]\nlazy-flush-ms = 20\n')
    out = subprocess.run(
        [str(gradus_binary()), "--config", str(config), "--hz", "20", "--print-config"],
        check=True, capture_output=True, text=True, timeout=30,
    ).stdout
    printed = tomllib.loads(out)
    assert printed["maxclients"] == 50 and printed["hz"] == 20
    assert printed["durability"]["lazy-flush-ms"] == 20
    defaults = subprocess.run(
        [str(gradus_binary()), "--print-config"], check=True, capture_output=True, text=True, timeout=30,
    ).stdout
    repo = Path(__file__).resolve().parents[2]
    assert defaults == (repo / "crates/server/gradus.toml").read_text()
    with RawConnection(gradus.host, gradus.port) as conn:
        got = conn.call("CONFIG", "GET", "*")
    names = {k.decode() for k in got[0::2]}
    durability = tomllib.loads(defaults)["durability"]
    expected = {k for k in tomllib.loads(defaults) if k != "durability"}
    expected |= {"durability" if k == "default" else k for k in durability if k != "databases"}
    assert expected <= names, expected - names
    assert {"appendonly", "appendfsync", "maxmemory", "save"} <= names
    bad = subprocess.run(
        [str(gradus_binary()), "--maxclients", "0", "--print-config"], capture_output=True, text=True, timeout=30,
    )
    assert bad.returncode == 2
    assert "--maxclients" in bad.stderr and "between 1 and 4294967295" in bad.stderr, bad.stderr


def test_timeout_closes_idle_clients_but_not_subscribers_or_blocked_ones(gradus, redis_server):
    """`CONFIG SET timeout 1` closes a client that sends nothing for over a second, as Redis
    does, and leaves a subscriber and a client waiting in BLPOP alone; `timeout 0` closes none.
    Gradus only reported `timeout 0` and refused to set it."""
    import redis

    seen = {}
    for server in (gradus, redis_server):
        admin = redis.Redis(host=server.host, port=server.port)
        admin.config_set("timeout", 1)
        try:
            idle = RawConnection(server.host, server.port)
            assert idle.call("PING") == Simple(b"PONG")
            sub = RawConnection(server.host, server.port)
            sub.call("SUBSCRIBE", "idle-test")
            blocked = RawConnection(server.host, server.port)
            blocked.send_command("BLPOP", "idle-test-list", "0")
            kept = RawConnection(server.host, server.port)
            deadline = time.time() + 3.5
            while time.time() < deadline:
                assert kept.call("PING") == Simple(b"PONG")
                time.sleep(0.3)
            with pytest.raises((ConnectionClosed, OSError)):
                idle.call("PING")
            assert sub.call("PING") == [b"pong", b""]
            admin.rpush("idle-test-list", "x")
            try:
                served = blocked.read_reply(timeout=2)
            except (ConnectionClosed, OSError) as e:
                # Say which server closed it (this failed now and then, maybe on either).
                raise AssertionError(f"{server.name} closed the client it served BLPOP") from e
            assert served == [b"idle-test-list", b"x"]
            admin.config_set("timeout", 0)
            time.sleep(2.5)
            assert blocked.call("PING") == Simple(b"PONG")
            seen[server.name] = admin.config_get("timeout")
        finally:
            admin.config_set("timeout", 0)
    assert seen[gradus.name] == seen[redis_server.name] == {"timeout": "0"}


# What Redis' own "CONFIG sanity" test leaves out: settings Redis cannot set at run time, or
# that it sets only with side effects.
_NOT_SET_BACK = set("""rdbchecksum daemonize io-threads-do-reads tcp-backlog always-show-logo syslog-enabled
cluster-enabled disable-thp aclfile unixsocket pidfile syslog-ident appendfilename appenddirname
supervised syslog-facility databases io-threads logfile unixsocketperm replicaof slaveof
requirepass server_cpulist bio_cpulist aof_rewrite_cpulist bgsave_cpulist set-proc-title
cluster-config-file cluster-port oom-score-adj oom-score-adj-values enable-protected-configs
enable-debug-command enable-module-command dbfilename dir socket-mark-id req-res-logfile
client-default-resp""".split())


def test_every_setting_can_be_set_to_the_value_it_has(gradus, redis_server):
    """`CONFIG SET name <what CONFIG GET name shows>` succeeds for every setting and changes
    nothing, as Redis' own "CONFIG sanity" test does it (tools that write a whole configuration
    back do the same). Gradus refused `bind`, `port`, `appendonly`, … as immutable even when
    the value was the one in force; a different value still gets Redis' immutable error."""
    import redis

    for server in (gradus, redis_server):
        r = redis.Redis(host=server.host, port=server.port, decode_responses=True)
        before = {k: v for k, v in r.config_get("*").items()
                  if k not in _NOT_SET_BACK and not k.startswith("tls-")}
        refused = {}
        for name, value in before.items():
            try:
                r.config_set(name, value)
            except redis.ResponseError as e:
                refused[name] = str(e)
        assert refused == {}, server.name
        after = {k: v for k, v in r.config_get("*").items() if k in before}
        assert after == before, server.name
    r = redis.Redis(host=gradus.host, port=gradus.port, decode_responses=True)
    other = {"yes": "no", "no": "yes"}[r.config_get("appendonly")["appendonly"]]
    with pytest.raises(redis.ResponseError, match="can't set immutable config"):
        r.config_set("appendonly", other)
    with pytest.raises(redis.ResponseError, match="can't set immutable config"):
        r.config_set("port", gradus.port + 1)


def test_config_get_shows_redis_old_names_of_replica_settings(gradus, redis_server):
    """CONFIG GET by pattern shows Redis' old `slave` names beside the `replica` ones (`*of`
    gives `replicaof` and `slaveof`, as Redis' own "CONFIG GET multiple args" test checks) and
    CONFIG SET takes them; `daemonize` is reported and cannot be set to another value."""
    import redis

    names = {}
    for server in (gradus, redis_server):
        r = redis.Redis(host=server.host, port=server.port, decode_responses=True)
        got = r.config_get("*of", "slave-read-only", "min-slaves-*", "slave-priority", "daemonize")
        names[server.name] = sorted(got)
        assert r.config_set("slave-priority", 42)
        try:
            assert r.config_get("replica-priority") == {"replica-priority": "42"}
        finally:
            r.config_set("replica-priority", 100)
        with pytest.raises(redis.ResponseError, match="can't set immutable config"):
            r.config_set("daemonize", "yes" if got["daemonize"] == "no" else "no")
    assert names[gradus.name] == names[redis_server.name]
    assert "slaveof" in names[gradus.name] and "replicaof" in names[gradus.name]
