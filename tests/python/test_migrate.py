"""MIGRATE (Redis 7.2): keys move from Gradus to a redis-server, to another Gradus, and from a
redis-server into Gradus (which exercises Gradus' RESTORE with what Redis sends); the single-key
and KEYS forms, COPY, REPLACE, the target's errors forwarded (BUSYKEY, NOAUTH, WRONGPASS), NOKEY,
AUTH/AUTH2, TTLs carried, IOERR within the timeout. The replies of a Gradus source are compared
with those of a redis-server source sending the same MIGRATEs to the same target.

Gradus-only: MIGRATE waits for its target without holding up other clients; a cached
connection authenticated by one MIGRATE is never lent to a MIGRATE without credentials; a key
written while its transfer is in flight is not deleted; MIGRATE inside MULTI is refused;
tenants migrate their own keys only.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from conftest import target_is_redis
from differential import assert_same
from test_dump_restore import read_value
from resp import Err, RawConnection, Simple
from servers import free_port, redis_client

OK = Simple(b"OK")
NOKEY = Simple(b"NOKEY")
BUSYKEY = Err(b"ERR Target instance replied with error: BUSYKEY Target key name already exists.")
EXAMPLE_TENANTS = Path(__file__).resolve().parents[2] / "examples" / "tenants.toml"


def call(server, *args, password=None, timeout=10):
    with RawConnection(server.host, server.port, timeout=timeout) as conn:
        if password is not None:
            assert conn.call("AUTH", password) == OK
        return conn.call(*args)


def migrate(source, target, key, *options, db=0, timeout=5000):
    return call(source, "MIGRATE", target.host, target.port, key, db, timeout, *options)


def client(server, password=None):
    return redis_client(server, 2, password=password)


@pytest.fixture
def servers(gradus, redis_server, gradus_factory):
    """The source and target of each direction tested, by name."""
    made = {}

    def get(name):
        if name not in made:
            made[name] = {"gradus": lambda: gradus, "redis": lambda: redis_server,
                          "gradus2": gradus_factory}[name]()
        return made[name]

    return get


# (source, target): Gradus → redis-server, Gradus → Gradus, redis-server → Gradus.
DIRECTIONS = [("gradus", "redis"), ("gradus", "gradus2"), ("redis", "gradus")]


def fill(c) -> dict:
    c.set("s", "hello")
    c.pexpire("s", 100_000)
    c.set("n", "12345")
    c.rpush("l", "a", "b", "c")
    # A payload over 64 KB: written to the target in several chunks.
    c.rpush("biglist", *[f"item-{i:016d}" for i in range(20_000)])
    c.hset("h", mapping={"f1": "v1", "f2": "v2"})
    c.sadd("is", 1, 2, 3)
    c.sadd("ss", "x", "y")
    c.zadd("z", {"a": 1.5, "b": 2})
    return {k: read_value(c, k) for k in ["s", "n", "l", "biglist", "h", "is", "ss", "z"]}




@pytest.mark.parametrize("direction", DIRECTIONS, ids=lambda d: "-to-".join(d))
def test_a_key_of_each_type_moves_with_its_ttl(servers, direction):
    source, target = servers(direction[0]), servers(direction[1])
    src, dst = client(source), client(target)
    values = fill(src)
    for key, value in values.items():
        assert migrate(source, target, key) == OK, key
        assert src.exists(key) == 0, key
        assert read_value(dst, key) == value, key
    assert 90_000 < dst.pttl("s") <= 100_000
    assert dst.pttl("l") == -1
    # Into another database of the target.
    src.set("k", "v")
    assert migrate(source, target, "k", db=3) == OK
    assert redis_client(target, 2, db=3).get("k") == b"v"


@pytest.mark.parametrize("direction", DIRECTIONS, ids=lambda d: "-to-".join(d))
def test_keys_form_moves_the_keys_that_exist(servers, direction):
    source, target = servers(direction[0]), servers(direction[1])
    src, dst = client(source), client(target)
    src.mset({"k1": "v1", "k2": "v2", "k3": "v3"})
    assert migrate(source, target, "", "KEYS", "nokey-1", "nokey-2") == NOKEY
    assert migrate(source, target, "missing") == NOKEY
    assert migrate(source, target, "", "KEYS", "nokey-1", "k1", "nokey-2", "k2", "k3") == OK
    assert src.dbsize() == 0
    assert dst.mget("k1", "k2", "k3") == [b"v1", b"v2", b"v3"]


@pytest.mark.parametrize("direction", DIRECTIONS, ids=lambda d: "-to-".join(d))
def test_copy_replace_and_the_targets_busykey(servers, direction):
    source, target = servers(direction[0]), servers(direction[1])
    src, dst = client(source), client(target)
    src.set("k", "new")
    dst.set("k", "old")
    assert migrate(source, target, "k") == BUSYKEY
    assert src.get("k") == b"new" and dst.get("k") == b"old"
    assert migrate(source, target, "k", "COPY", "REPLACE") == OK
    assert src.get("k") == b"new" and dst.get("k") == b"new"
    assert migrate(source, target, "k", "REPLACE") == OK
    assert src.exists("k") == 0
    # Only the keys the target acknowledged are deleted (Redis' "delete just ack keys").
    src.mset({"a": "1", "b": "2", "c": "3"})
    dst.set("b", "busy")
    assert migrate(source, target, "", "KEYS", "a", "b", "c") == BUSYKEY
    assert sorted(src.keys("*")) == [b"b"]
    assert dst.mget("a", "b", "c") == [b"1", b"busy", b"3"]


def test_replies_are_those_of_a_redis_server_source(gradus, redis_server, _servers):
    """The same MIGRATEs, from Gradus and from a redis-server, to the same redis-server."""
    target = redis_server
    closed_port = free_port()

    def scenario(source):
        call(target, "FLUSHALL")
        call(source, "FLUSHALL")
        src = client(source)
        src.mset({"k": "v", "a": "1", "b": "2"})
        src.rpush("l", "x", "y")
        replies = [
            migrate(source, target, "k"),
            migrate(source, target, "k"),
            call(source, "SET", "k", "again"),
            migrate(source, target, "k"),
            migrate(source, target, "k", "COPY", "REPLACE"),
            migrate(source, target, "", "REPLACE", "KEYS", "a", "nokey", "b", "l"),
            migrate(source, target, "", "KEYS", "n1", "n2"),
            migrate(source, target, "", "KEYS"),
            migrate(source, target, "k", "KEYS", "a"),
            migrate(source, target, "k", "FOO"),
            migrate(source, target, "k", "AUTH"),
            migrate(source, target, "k", "AUTH2", "user"),
            migrate(source, target, "k", db="x"),
            migrate(source, target, "k", timeout="x"),
            migrate(source, target, "k", db=99),
            migrate(source, target, "k", "AUTH", "pw"),
            call(source, "MIGRATE", target.host, closed_port, "k", 0, 1000),
            call(source, "MIGRATE", target.host, -1, "k", 0, 1000),
            call(source, "MIGRATE", "", target.port, "k", 0, 1000),
            call(source, "MIGRATE", target.host, f"{target.port}abc", "k", 0, 1000, "COPY", "REPLACE"),
            call(source, "MIGRATE", target.host, target.port, "k", 0),
            migrate(source, target, "k", timeout=0),
        ]
        return replies, sorted(client(source).keys("*")), sorted(client(target).keys("*"))

    ours = assert_same(gradus, _servers.start_redis(), scenario)
    assert ours[0][0] == OK and ours[0][1] == NOKEY


def test_auth_and_auth2_to_a_password_protected_target(gradus, _servers, gradus_factory):
    """In this order a redis-server source answers the same (it lends its authenticated
    connection to later MIGRATEs: see the Gradus-only test below)."""
    def scenario(pair):
        source, target = pair
        client(target, "pw").flushall()
        client(source).set("k", "v")
        replies = [
            migrate(source, target, "k"),
            migrate(source, target, "k", "AUTH", "wrong"),
            migrate(source, target, "k", "COPY", "AUTH", "pw"),
            migrate(source, target, "k", "REPLACE", "AUTH2", "default", "pw"),
        ]
        return replies, client(target, "pw").get("k"), client(source).exists("k")

    for target in (_servers.start_redis("--requirepass", "pw"), gradus_factory("--requirepass", "pw")):
        replies = assert_same((gradus, target), (_servers.start_redis(), target), scenario)[0]
        assert replies[0] == Err(b"ERR Target instance replied with error: NOAUTH Authentication required.")
        assert replies[1].text.startswith("ERR Target instance replied with error: WRONGPASS")
        assert replies[2:] == [OK, OK]


@pytest.mark.gradus_only
def test_a_connection_authenticated_by_one_migrate_is_not_lent_to_another(gradus, gradus_factory):
    target = gradus_factory("--requirepass", "pw")
    client(gradus).mset({"a": "1", "b": "2"})
    assert migrate(gradus, target, "a", "AUTH", "pw") == OK
    assert call(gradus, "INFO", "stats").count(b"migrate_cached_sockets:1") == 1
    # Redis would reuse the authenticated connection and answer OK.
    assert migrate(gradus, target, "b") == Err(
        b"ERR Target instance replied with error: NOAUTH Authentication required.")
    assert client(gradus).exists("b") == 1


def test_connections_are_cached_and_released(gradus, redis_server):
    src = client(gradus)
    src.mset({"a": "1", "b": "2"})
    assert migrate(gradus, redis_server, "a") == OK
    assert migrate(gradus, redis_server, "b", db=1) == OK
    assert b"migrate_cached_sockets:1" in call(gradus, "INFO", "stats")
    # One connection from the source served both (the target counts this one too).
    assert len(client(redis_server).client_list()) == 2
    deadline = time.monotonic() + 15
    while b"migrate_cached_sockets:0" not in call(gradus, "INFO", "stats"):
        assert time.monotonic() < deadline, "a cached connection outlived 10 s unused"
        time.sleep(0.5)


class SilentTarget:
    """Accepts connections and reads, but answers only when `answer` is given lines to send."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.host, self.port = self.sock.getsockname()
        self.received = threading.Event()
        self.reply = None
        self.go = threading.Event()
        self.conns = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            conn.recv(65536)
            self.received.set()
            if self.go.wait(30) and self.reply is not None:
                conn.sendall(self.reply)

    def answer(self, reply: bytes):
        self.reply = reply
        self.go.set()

    def close(self):
        self.go.set()
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.fixture
def silent():
    target = SilentTarget()
    yield target
    target.close()


def test_an_unreachable_target_gives_ioerr_within_the_timeout(gradus, silent):
    client(gradus).set("k", "v")
    started = time.monotonic()
    # As Redis 7.2: its blocking connect fails only when the connect call does (a name that
    # does not resolve, a negative port); a refused connection is found by the first write.
    assert call(gradus, "MIGRATE", "127.0.0.1", free_port(), "k", 0, 300) == Err(
        b"IOERR error or timeout writing to target instance")
    assert call(gradus, "MIGRATE", "127.0.0.1", -1, "k", 0, 300) == Err(
        b"IOERR error or timeout connecting to the client")
    assert time.monotonic() - started < 3
    started = time.monotonic()
    assert migrate(gradus, silent, "k", timeout=400) == Err(
        b"IOERR error or timeout reading to target instance")
    assert 0.35 < time.monotonic() - started < 3
    assert client(gradus).get("k") == b"v"


@pytest.mark.gradus_only
def test_other_clients_are_served_while_migrate_waits(gradus, silent):
    client(gradus).set("k", "v")
    result = {}
    waiter = threading.Thread(target=lambda: result.update(r=migrate(gradus, silent, "k", timeout=2000)))
    waiter.start()
    assert silent.received.wait(5)
    started = time.monotonic()
    other = client(gradus)
    assert other.ping() and other.set("x", "1") and other.get("k") == b"v"
    assert time.monotonic() - started < 1
    waiter.join(10)
    assert result["r"] == Err(b"IOERR error or timeout reading to target instance")


@pytest.mark.gradus_only
def test_a_key_written_during_its_transfer_is_not_deleted(gradus, silent):
    src = client(gradus)
    src.mset({"k": "old", "other": "1"})
    result = {}
    waiter = threading.Thread(
        target=lambda: result.update(r=migrate(gradus, silent, "", "KEYS", "k", "other")))
    waiter.start()
    assert silent.received.wait(5)
    src.set("k", "new")
    silent.answer(b"+OK\r\n+OK\r\n+OK\r\n")
    waiter.join(10)
    assert result["r"] == OK
    # The target got the old value; the new one stays here, and the untouched key is moved.
    assert src.get("k") == b"new" and src.exists("other") == 0


@pytest.mark.gradus_only
def test_migrate_inside_multi_is_refused_unless_there_is_no_key(gradus, redis_server):
    src = client(gradus)
    src.set("k", "v")
    with RawConnection(gradus.host, gradus.port) as conn:
        conn.call("MULTI")
        conn.call("MIGRATE", redis_server.host, redis_server.port, "k", 0, 1000)
        conn.call("MIGRATE", redis_server.host, redis_server.port, "nokey", 0, 1000)
        replies = conn.call("EXEC")
    assert replies[0].text.startswith("ERR MIGRATE is not allowed inside MULTI")
    assert replies[1] == NOKEY
    assert src.get("k") == b"v"


def test_the_delete_is_notified_and_slow_logged_as_redis_does(gradus, redis_server, _servers):
    target = redis_server

    def scenario(source):
        call(target, "FLUSHALL")
        src = client(source)
        src.flushall()
        src.config_set("notify-keyspace-events", "KEA")
        src.config_set("slowlog-log-slower-than", 0)
        src.mset({"a": "1", "b": "2", "c": "3"})
        src.slowlog_reset()
        sub = client(source).pubsub()
        sub.psubscribe("__key*__:*")
        assert sub.get_message(timeout=5)["type"] == "psubscribe"
        # The target's default user has no password: AUTH2 default <anything> is accepted,
        # AUTH <password> refused (and then nothing is deleted).
        replies = [
            migrate(source, target, "", "AUTH2", "default", "secret", "REPLACE", "KEYS", "a", "b"),
            migrate(source, target, "c", "AUTH", "secret"),
        ]
        events = []
        while (m := sub.get_message(timeout=0.5)) is not None:
            if m["type"] == "pmessage":
                events.append((m["channel"], m["data"]))
        logged = [e["command"] for e in src.slowlog_get(128) if e["command"].lower().startswith(b"migrate")]
        return replies, events, logged, sorted(src.keys("*"))

    replies, events, logged, left = assert_same(gradus, _servers.start_redis(), scenario)
    assert replies[0] == OK and left == [b"c"]
    assert (b"__keyevent@0__:del", b"a") in events
    assert b"(redacted)" in logged[0]


@pytest.mark.gradus_only
def test_moved_keys_stay_deleted_after_a_restart(gradus_factory, redis_server):
    source = gradus_factory("--durability", "strict")
    client(source).mset({"a": "1", "b": "2", "c": "3"})
    assert migrate(source, redis_server, "", "KEYS", "a", "b") == OK
    source.restart()
    assert sorted(client(source).keys("*")) == [b"c"]


@pytest.mark.gradus_only
def test_a_tenant_migrates_its_own_keys_only(gradus_factory, redis_server):
    tenants = gradus_factory("--config", str(EXAMPLE_TENANTS))
    alpha = redis_client(tenants, 2, username="alpha", password="alpha-pass")
    beta = redis_client(tenants, 2, username="beta", password="beta-pass")
    alpha.set("k", "alpha's")
    beta.set("mine", "beta's")

    def migrate_as(user, password, key):
        with RawConnection(tenants.host, tenants.port) as conn:
            assert conn.call("AUTH", user, password) == OK
            return conn.call("MIGRATE", redis_server.host, redis_server.port, key, 0, 5000)

    assert migrate_as("beta", "beta-pass", "k") == NOKEY
    assert alpha.get("k") == b"alpha's"
    assert migrate_as("alpha", "alpha-pass", "k") == OK
    assert alpha.exists("k") == 0 and beta.get("mine") == b"beta's"
    assert client(redis_server).get("k") == b"alpha's"
