"""redis-py test cases shared by test_redispy_resp2.py and test_redispy_resp3.py.

Each of those modules sets PROTOCOL and star-imports this one, so every case
runs once per protocol through the `r` fixture (see conftest.py).  The
expectations are those of real Redis 7.2; run them against it with
GRADUS_TARGET=redis.  Exact error texts are checked where clients match on them.
"""

from __future__ import annotations

import time

import pytest
import redis
from redis.exceptions import ResponseError

from resp import NULL_BULK, Err, Map, RawConnection, Simple
from servers import redis_client

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
NOT_INTEGER = "value is not an integer or out of range"
NOT_FLOAT = "value is not a valid float"
SYNTAX = "syntax error"


def error_of(r: redis.Redis, *args) -> str:
    """Run a command that must fail; return the error text as redis-py reports it.

    redis-py drops the leading "ERR " (it keeps other codes such as WRONGTYPE).
    """
    with pytest.raises(ResponseError) as info:
        r.execute_command(*args)
    return str(info.value)


class ErrorReply:
    """An error reply returned (not raised) by call(); shows its text in assertion output."""

    def __init__(self, exc: ResponseError):
        self.exc = exc
        self.text = str(exc)

    def __repr__(self) -> str:
        return f"ErrorReply({type(self.exc).__name__}: {self.text!r})"


def call(r: redis.Redis, *args):
    """Send a command through r's connection pool without redis-py's reply callbacks.

    Returns what the protocol parser produced (bytes, int, list, dict for a
    RESP3 map...) so tests see the server's reply rather than a client's
    interpretation of it.  Errors come back as ErrorReply values.
    """
    conn = r.connection_pool.get_connection()
    try:
        conn.send_command(*args)
        reply = conn.read_response(disable_decoding=True)
    except ResponseError as exc:
        reply = ErrorReply(exc)
    finally:
        r.connection_pool.release(conn)
    return reply


def scored(reply) -> list:
    """WITHSCORES replies as [(member, float score)], whatever the protocol/redis-py version."""
    return [(bytes(m), float(s)) for m, s in reply]


def info_version(r: redis.Redis) -> tuple:
    version = r.info("server")["redis_version"]
    return tuple(int(x) for x in str(version).split(".")[:3])


# --- handshake ----------------------------------------------------------------


def test_handshake_ping(r):
    assert r.ping() is True


def test_default_client_handshake(gradus):
    # No protocol argument: whatever redis-py sends by default (HELLO 3 and
    # CLIENT SETINFO for redis-py >= 8, RESP2 + SETINFO before) must work.
    client = redis.Redis(host=gradus.host, port=gradus.port, socket_timeout=10)
    try:
        assert client.ping() is True
        assert client.set("k", "v") is True
        assert client.get("k") == b"v"
    finally:
        client.close()


def test_client_setinfo_recorded(r):
    # redis-py sends CLIENT SETINFO LIB-NAME/LIB-VER on connect (Redis 7.2).
    assert r.execute_command("CLIENT", "SETINFO", "LIB-NAME", "mylib") in (True, b"OK")
    assert r.execute_command("CLIENT", "SETINFO", "LIB-VER", "1.2.3") in (True, b"OK")
    info = r.client_info()
    assert info["lib-name"] == "mylib"
    assert info["lib-ver"] == "1.2.3"


def test_client_setinfo_from_handshake(r):
    info = r.client_info()
    assert info["lib-name"].startswith("redis-py")
    assert info["lib-ver"] == redis.__version__


def test_client_setinfo_errors(r):
    assert error_of(r, "CLIENT", "SETINFO", "LIB-NAME", "has space") == (
        "LIB-NAME cannot contain spaces, newlines or special characters."
    )
    assert error_of(r, "CLIENT", "SETINFO", "NOPE", "x").startswith("Unrecognized option 'NOPE'")


def test_unknown_client_subcommand_keeps_connection(r):
    # redis-py >= 7 sends CLIENT MAINT_NOTIFICATIONS on RESP3 connections;
    # a server that lacks it must answer an error and keep the connection.
    msg = error_of(r, "CLIENT", "MAINT_NOTIFICATIONS", "ON", "moving-endpoint-type", "internal-ip")
    assert msg == "unknown subcommand 'MAINT_NOTIFICATIONS'. Try CLIENT HELP."
    assert r.ping() is True
    assert r.set("after", "1") is True


# --- strings --------------------------------------------------------------------


def test_set_get_basic(r):
    assert r.get("missing") is None
    assert r.set("k", "v") is True
    assert r.get("k") == b"v"
    assert r.set("k", b"\x00\r\n\xff") is True
    assert r.get("k") == b"\x00\r\n\xff"
    assert r.set("empty", "") is True
    assert r.get("empty") == b""


def test_set_ex_px(r):
    assert r.set("k", "v", ex=100) is True
    assert 99 <= r.ttl("k") <= 100
    assert r.set("k", "v", px=100000) is True
    assert 99000 < r.pttl("k") <= 100000


def test_set_exat_pxat(r):
    now = int(time.time())
    assert r.set("k", "v", exat=now + 200) is True
    assert 198 <= r.ttl("k") <= 200
    assert r.expiretime("k") == now + 200
    assert r.set("k2", "v", pxat=(now + 300) * 1000 + 123) is True
    assert r.pexpiretime("k2") == (now + 300) * 1000 + 123


def test_set_nx_xx(r):
    assert r.set("k", "1", nx=True) is True
    assert r.set("k", "2", nx=True) is None
    assert r.get("k") == b"1"
    assert r.set("k", "3", xx=True) is True
    assert r.get("k") == b"3"
    assert r.set("missing", "x", xx=True) is None
    assert r.exists("missing") == 0


def test_set_keepttl(r):
    r.set("k", "v", ex=500)
    assert r.set("k", "w", keepttl=True) is True
    assert 490 <= r.ttl("k") <= 500
    assert r.set("k", "x") is True
    assert r.ttl("k") == -1


def test_set_get_option(r):
    assert r.set("k", "old") is True
    assert r.set("k", "new", get=True) == b"old"
    assert r.get("k") == b"new"
    assert r.set("fresh", "v", get=True) is None
    assert r.get("fresh") == b"v"
    r.hset("h", "f", "v")
    assert error_of(r, "SET", "h", "x", "GET") == WRONGTYPE
    assert r.hget("h", "f") == b"v"
    # NX and GET together are allowed since Redis 7.0.
    assert call(r, "SET", "k", "z", "NX", "GET") == b"new"
    assert r.get("k") == b"new"


def test_set_syntax_errors(r):
    assert error_of(r, "SET", "k", "v", "EX", "10", "PX", "100") == SYNTAX
    assert error_of(r, "SET", "k", "v", "NX", "XX") == SYNTAX
    assert error_of(r, "SET", "k", "v", "EX") == SYNTAX
    assert error_of(r, "SET", "k", "v", "BOGUS") == SYNTAX
    assert error_of(r, "SET", "k", "v", "KEEPTTL", "EX", "10") == SYNTAX
    assert error_of(r, "SET", "k", "v", "EX", "abc") == NOT_INTEGER
    assert error_of(r, "SET", "k", "v", "EX", "0") == "invalid expire time in 'set' command"
    assert error_of(r, "SET", "k", "v", "PX", "-5") == "invalid expire time in 'set' command"
    assert error_of(r, "SET", "k") == "wrong number of arguments for 'set' command"
    assert r.exists("k") == 0


def test_setex_psetex_setnx(r):
    assert r.setex("k", 100, "v") is True
    assert 99 <= r.ttl("k") <= 100
    assert r.psetex("p", 100000, "v") is True
    assert 99000 < r.pttl("p") <= 100000
    assert error_of(r, "SETEX", "k", "0", "v") == "invalid expire time in 'setex' command"
    assert error_of(r, "PSETEX", "k", "-1", "v") == "invalid expire time in 'psetex' command"
    assert error_of(r, "SETEX", "k", "x", "v") == NOT_INTEGER
    assert r.setnx("n", "1") is True
    assert r.setnx("n", "2") is False
    assert r.get("n") == b"1"


def test_getex(r):
    assert r.getex("missing", ex=10) is None
    r.set("k", "v")
    assert r.getex("k") == b"v"
    assert r.ttl("k") == -1
    assert r.getex("k", ex=100) == b"v"
    assert 99 <= r.ttl("k") <= 100
    assert r.getex("k", px=200000) == b"v"
    assert 199000 < r.pttl("k") <= 200000
    assert r.getex("k", exat=int(time.time()) + 300) == b"v"
    assert 298 <= r.ttl("k") <= 300
    assert r.getex("k", persist=True) == b"v"
    assert r.ttl("k") == -1
    assert error_of(r, "GETEX", "k", "EX", "0") == "invalid expire time in 'getex' command"
    assert error_of(r, "GETEX", "k", "PERSIST", "EX", "10") == SYNTAX
    r.hset("h", "f", "v")
    assert error_of(r, "GETEX", "h") == WRONGTYPE


def test_getex_order_of_checks(r):
    # Redis checks the option syntax, then the key (missing: nil; other type:
    # WRONGTYPE), and only then the expire value.
    r.hset("h", "f", "v")
    assert error_of(r, "GETEX", "missing", "BOGUS") == SYNTAX
    assert error_of(r, "GETEX", "h", "PERSIST", "EX", "1") == SYNTAX
    assert call(r, "GETEX", "missing", "EX", "0") is None
    assert call(r, "GETEX", "missing", "EX", "abc") is None
    assert error_of(r, "GETEX", "h", "EX", "0") == WRONGTYPE
    assert error_of(r, "GETEX", "h", "EX", "abc") == WRONGTYPE
    r.set("k", "v")
    assert error_of(r, "GETEX", "k", "EX", "abc") == NOT_INTEGER
    assert error_of(r, "GETEX", "k", "EX", "0") == "invalid expire time in 'getex' command"
    assert r.ttl("k") == -1


def test_getdel_getset(r):
    assert r.getdel("missing") is None
    r.set("k", "v")
    assert r.getdel("k") == b"v"
    assert r.exists("k") == 0
    assert r.getset("g", "1") is None
    assert r.getset("g", "2") == b"1"
    assert r.get("g") == b"2"
    r.set("t", "v", ex=100)
    r.getset("t", "w")
    assert r.ttl("t") == -1  # GETSET discards the TTL
    r.zadd("z", {"m": 1})
    assert error_of(r, "GETDEL", "z") == WRONGTYPE
    assert error_of(r, "GETSET", "z", "v") == WRONGTYPE


def test_mget_mset_msetnx(r):
    assert r.mset({"a": "1", "b": "2", "c": "3"}) is True
    r.hset("h", "f", "v")
    # MGET answers nil for missing keys and for keys of another type.
    assert r.mget("a", "missing", "b", "h", "c") == [b"1", None, b"2", None, b"3"]
    assert r.msetnx({"x": "1", "a": "9"}) is False
    assert r.exists("x") == 0
    assert r.get("a") == b"1"
    assert r.msetnx({"x": "1", "y": "2"}) is True
    assert r.mget("x", "y") == [b"1", b"2"]
    assert error_of(r, "MSET", "a") == "wrong number of arguments for 'mset' command"
    assert error_of(r, "MSET", "a", "1", "b") == "wrong number of arguments for 'mset' command"
    assert error_of(r, "MSETNX", "a", "1", "b") == "wrong number of arguments for 'msetnx' command"
    assert error_of(r, "MGET") == "wrong number of arguments for 'mget' command"


def test_append_strlen(r):
    assert r.append("k", "Hello") == 5
    assert r.append("k", " World") == 11
    assert r.get("k") == b"Hello World"
    assert r.strlen("k") == 11
    assert r.strlen("missing") == 0
    r.set("n", 12)
    assert r.append("n", 3) == 3
    assert r.incr("n") == 124
    r.hset("h", "f", "v")
    assert error_of(r, "APPEND", "h", "x") == WRONGTYPE
    assert error_of(r, "STRLEN", "h") == WRONGTYPE


def test_getrange(r):
    r.set("k", "This is a string")
    assert r.getrange("k", 0, 3) == b"This"
    assert r.getrange("k", -3, -1) == b"ing"
    assert r.getrange("k", 0, -1) == b"This is a string"
    assert r.getrange("k", 10, 100) == b"string"
    assert r.getrange("k", 5, 3) == b""
    assert r.getrange("k", -100, 3) == b"This"
    assert r.getrange("missing", 0, 10) == b""
    assert error_of(r, "GETRANGE", "k", "a", "1") == NOT_INTEGER


def test_setrange(r):
    r.set("k", "Hello World")
    assert r.setrange("k", 6, "Redis") == 11
    assert r.get("k") == b"Hello Redis"
    assert r.setrange("pad", 5, "Redis") == 10
    assert r.get("pad") == b"\x00" * 5 + b"Redis"
    assert r.setrange("k", 20, "!") == 21
    assert r.get("k") == b"Hello Redis" + b"\x00" * 9 + b"!"
    assert r.setrange("nokey", 3, "") == 0
    assert r.exists("nokey") == 0
    assert error_of(r, "SETRANGE", "k", "-1", "x") == "offset is out of range"
    r.hset("h", "f", "v")
    assert error_of(r, "SETRANGE", "h", "0", "x") == WRONGTYPE


def test_incr_decr(r):
    assert r.incr("n") == 1
    assert r.incr("n") == 2
    assert r.incrby("n", 10) == 12
    assert r.decr("n") == 11
    assert r.decrby("n", 20) == -9
    assert r.incrby("n", -1) == -10
    assert r.get("n") == b"-10"
    r.set("t", "5", ex=100)
    assert r.incr("t") == 6
    assert 99 <= r.ttl("t") <= 100  # INCR keeps the TTL


def test_incr_errors(r):
    r.set("s", "abc")
    assert error_of(r, "INCR", "s") == NOT_INTEGER
    r.set("s", " 1")
    assert error_of(r, "INCR", "s") == NOT_INTEGER
    r.set("s", "1.5")
    assert error_of(r, "INCRBY", "s", "1") == NOT_INTEGER
    r.set("s", "")
    assert error_of(r, "DECR", "s") == NOT_INTEGER
    assert error_of(r, "INCRBY", "n", "abc") == NOT_INTEGER
    assert error_of(r, "INCRBY", "n", "9223372036854775808") == NOT_INTEGER
    assert r.exists("n") == 0
    r.set("big", "9223372036854775807")
    assert error_of(r, "INCR", "big") == "increment or decrement would overflow"
    assert error_of(r, "INCRBY", "big", "1") == "increment or decrement would overflow"
    r.set("small", "-9223372036854775808")
    assert error_of(r, "DECR", "small") == "increment or decrement would overflow"
    assert error_of(r, "DECRBY", "x", "-9223372036854775808") == "decrement would overflow"
    assert r.get("big") == b"9223372036854775807"
    r.hset("h", "f", "1")
    assert error_of(r, "INCR", "h") == WRONGTYPE


def test_incrbyfloat(r):
    # The examples of the INCRBYFLOAT documentation.
    r.set("k", "10.50")
    assert float(r.incrbyfloat("k", 0.1)) == 10.6
    assert r.get("k") == b"10.6"
    assert float(r.incrbyfloat("k", -5)) == 5.6
    assert r.get("k") == b"5.6"
    r.set("k", "5.0e3")
    assert float(r.incrbyfloat("k", 2.0e2)) == 5200
    assert r.get("k") == b"5200"
    assert r.execute_command("INCRBYFLOAT", "fresh", "3") in (b"3", 3.0)
    assert r.get("fresh") == b"3"
    assert r.execute_command("INCRBYFLOAT", "fresh", "-3.5") in (b"-0.5", -0.5)
    r.set("s", "abc")
    assert error_of(r, "INCRBYFLOAT", "s", "1") == NOT_FLOAT
    assert error_of(r, "INCRBYFLOAT", "fresh", "abc") == NOT_FLOAT
    assert error_of(r, "INCRBYFLOAT", "fresh", "inf") == "increment would produce NaN or Infinity"
    assert r.get("fresh") == b"-0.5"


def test_argument_vs_type_check_order(r):
    # Which error wins when both the key type and an argument are wrong
    # differs per command in Redis; clients see it, so it must match.
    r.hset("h", "f", "1")
    r.set("s", "1")
    assert error_of(r, "INCRBYFLOAT", "h", "abc") == WRONGTYPE  # type first
    assert error_of(r, "INCRBY", "h", "abc") == NOT_INTEGER  # argument first
    assert error_of(r, "DECRBY", "h", "abc") == NOT_INTEGER
    assert error_of(r, "HINCRBY", "s", "f", "abc") == NOT_INTEGER
    assert error_of(r, "HINCRBYFLOAT", "s", "f", "abc") == NOT_FLOAT
    assert error_of(r, "ZADD", "s", "abc", "m") == NOT_FLOAT
    assert error_of(r, "ZINCRBY", "s", "abc", "m") == NOT_FLOAT
    assert error_of(r, "ZCOUNT", "s", "abc", "1") == "min or max is not a float"
    assert error_of(r, "ZRANGEBYSCORE", "s", "abc", "1") == "min or max is not a float"
    assert error_of(r, "SETRANGE", "h", "-1", "x") == "offset is out of range"
    assert error_of(r, "GETRANGE", "h", "a", "1") == NOT_INTEGER
    assert error_of(r, "EXPIRE", "h", "abc") == NOT_INTEGER


def test_incrbyfloat_decimal_rendering(r):
    # Redis adds in long double and prints with %.17Lg, then trims: 0.1 + 0.2
    # shows as "0.3", not the f64 round-trip text "0.30000000000000004".
    r.set("k", "0.1")
    r.incrbyfloat("k", 0.2)
    assert r.get("k") == b"0.3"


# --- keys ---------------------------------------------------------------------------


def test_del_unlink_exists(r):
    r.mset({"a": 1, "b": 2, "c": 3})
    r.hset("h", "f", "v")
    assert r.exists("a", "b", "missing") == 2
    assert r.exists("a", "a", "a") == 3
    assert r.delete("a", "missing", "h") == 2
    assert r.exists("a", "h") == 0
    assert r.unlink("b", "c", "zz") == 2
    assert r.dbsize() == 0
    assert error_of(r, "DEL") == "wrong number of arguments for 'del' command"


def test_type(r):
    r.set("s", "v")
    r.hset("h", "f", "v")
    r.zadd("z", {"m": 1})
    assert r.type("s") == b"string"
    assert r.type("h") == b"hash"
    assert r.type("z") == b"zset"
    assert r.type("missing") == b"none"


def test_touch(r):
    r.mset({"a": 1, "b": 2})
    assert r.touch("a", "b", "missing") == 2


def test_rename(r):
    r.set("a", "1", ex=100)
    assert r.rename("a", "b") is True
    assert r.exists("a") == 0
    assert r.get("b") == b"1"
    assert 99 <= r.ttl("b") <= 100  # the TTL moves with the value
    r.set("c", "3")
    assert r.rename("b", "c") is True  # overwrites
    assert r.get("c") == b"1"
    assert r.rename("c", "c") is True
    assert r.get("c") == b"1"
    assert error_of(r, "RENAME", "missing", "x") == "no such key"
    r.hset("h", "f", "v")
    assert r.rename("h", "h2") is True
    assert r.hgetall("h2") == {b"f": b"v"}


def test_renamenx(r):
    r.set("a", "1")
    r.set("b", "2")
    assert r.renamenx("a", "b") is False
    assert r.get("a") == b"1"
    assert r.renamenx("a", "c") is True
    assert r.get("c") == b"1"
    assert r.exists("a") == 0
    assert error_of(r, "RENAMENX", "missing", "x") == "no such key"


def test_randomkey(r):
    assert r.randomkey() is None
    r.mset({"a": 1, "b": 2, "c": 3})
    for _ in range(10):
        assert r.randomkey() in (b"a", b"b", b"c")


def test_keys_patterns(r):
    for k in ["hello", "hallo", "hxllo", "hllo", "heeeello", "h*llo", "other", "hello2"]:
        r.set(k, 1)
    assert sorted(r.keys("*")) == sorted(
        [b"hello", b"hallo", b"hxllo", b"hllo", b"heeeello", b"h*llo", b"other", b"hello2"]
    )
    assert sorted(r.keys("h?llo")) == [b"h*llo", b"hallo", b"hello", b"hxllo"]
    assert sorted(r.keys("h*llo")) == [b"h*llo", b"hallo", b"heeeello", b"hello", b"hllo", b"hxllo"]
    assert sorted(r.keys("h[ae]llo")) == [b"hallo", b"hello"]
    assert sorted(r.keys("h[^e]llo")) == [b"h*llo", b"hallo", b"hxllo"]
    assert sorted(r.keys("h[a-b]llo")) == [b"hallo"]
    assert r.keys("h\\*llo") == [b"h*llo"]
    assert r.keys("nomatch*") == []


def test_scan_full_iteration(r):
    expected = set()
    for i in range(300):
        r.set(f"s:{i}", i)
        expected.add(f"s:{i}".encode())
    for i in range(50):
        r.hset(f"h:{i}", "f", "v")
    for i in range(20):
        r.zadd(f"z:{i}", {"m": 1})
    seen = []
    cursor = 0
    calls = 0
    while True:
        cursor, keys = r.scan(cursor, match="s:*", count=25)
        seen.extend(keys)
        calls += 1
        assert calls < 10000
        if cursor == 0:
            break
    assert set(seen) == expected
    assert len(set(r.scan_iter(count=7))) == 370
    assert set(r.scan_iter(_type="hash")) == {f"h:{i}".encode() for i in range(50)}
    assert set(r.scan_iter(_type="zset", match="z:1*")) == {f"z:{i}".encode() for i in [1] + list(range(10, 20))}
    assert set(r.scan_iter(_type="string", match="s:29?")) == {f"s:{i}".encode() for i in range(290, 300)}
    assert list(r.scan_iter(match="nomatch*")) == []


def test_scan_errors(r):
    assert error_of(r, "SCAN", "abc") == "invalid cursor"
    assert error_of(r, "SCAN", "0", "COUNT", "0") == SYNTAX
    assert error_of(r, "SCAN", "0", "COUNT", "x") == NOT_INTEGER
    assert error_of(r, "SCAN", "0", "BOGUS") == SYNTAX


def test_ttl_pttl_persist(r):
    assert r.ttl("missing") == -2
    assert r.pttl("missing") == -2
    assert r.expiretime("missing") == -2
    assert r.pexpiretime("missing") == -2
    r.set("k", "v")
    assert r.ttl("k") == -1
    assert r.pttl("k") == -1
    assert r.expiretime("k") == -1
    assert r.pexpiretime("k") == -1
    assert r.persist("k") is False
    assert r.expire("k", 100) is True
    assert 99 <= r.ttl("k") <= 100
    assert 99000 < r.pttl("k") <= 100000
    now = time.time()
    assert abs(r.expiretime("k") - (now + 100)) <= 2
    assert abs(r.pexpiretime("k") - (now + 100) * 1000) <= 2000
    assert r.persist("k") is True
    assert r.ttl("k") == -1
    assert r.persist("missing") is False


def test_expire_variants(r):
    r.set("k", "v")
    assert r.pexpire("k", 200000) is True
    assert 199000 < r.pttl("k") <= 200000
    now = int(time.time())
    assert r.expireat("k", now + 500) is True
    assert r.expiretime("k") == now + 500
    assert r.pexpireat("k", (now + 600) * 1000 + 5) is True
    assert r.pexpiretime("k") == (now + 600) * 1000 + 5
    assert r.expire("missing", 100) is False
    assert r.pexpire("missing", 100) is False
    assert r.expireat("missing", now + 100) is False


def test_expire_options(r):
    r.set("k", "v")
    assert r.expire("k", 100, xx=True) is False  # no TTL yet
    assert r.ttl("k") == -1
    assert r.expire("k", 100, gt=True) is False  # no TTL counts as infinite
    assert r.expire("k", 100, nx=True) is True
    assert r.expire("k", 200, nx=True) is False
    assert 99 <= r.ttl("k") <= 100
    assert r.expire("k", 200, xx=True) is True
    assert r.expire("k", 100, gt=True) is False
    assert r.expire("k", 300, gt=True) is True
    assert r.expire("k", 400, lt=True) is False
    assert r.expire("k", 50, lt=True) is True
    assert 49 <= r.ttl("k") <= 50
    r.set("p", "v")
    assert r.expire("p", 100, lt=True) is True  # a persistent key is "infinite"
    assert r.pexpire("p", 50000, lt=True) is True
    assert r.pexpire("p", 90000, gt=True) is True
    assert 89000 < r.pttl("p") <= 90000
    msg = "NX and XX, GT or LT options at the same time are not compatible"
    assert error_of(r, "EXPIRE", "k", "10", "NX", "XX") == msg
    assert error_of(r, "EXPIRE", "k", "10", "NX", "GT") == msg
    assert error_of(r, "EXPIRE", "k", "10", "GT", "LT") == "GT and LT options at the same time are not compatible"
    assert error_of(r, "EXPIRE", "k", "10", "BOGUS") == "Unsupported option BOGUS"
    assert error_of(r, "EXPIRE", "k", "ten") == NOT_INTEGER
    assert error_of(r, "EXPIRE", "k", "9223372036854775807") == "invalid expire time in 'expire' command"
    assert error_of(r, "PEXPIRE", "k", "9223372036854775807") == "invalid expire time in 'pexpire' command"


def test_expire_in_the_past_deletes(r):
    r.set("a", "v")
    assert r.expire("a", -1) is True
    assert r.exists("a") == 0
    r.set("b", "v")
    assert r.expireat("b", int(time.time()) - 10) is True
    assert r.exists("b") == 0
    r.set("c", "v")
    assert r.pexpire("c", 0) is True
    assert r.get("c") is None


def test_expiry_happens(r):
    r.set("short", "v", px=100)
    r.hset("hshort", "f", "v")
    r.pexpire("hshort", 100)
    r.zadd("zshort", {"m": 1})
    r.pexpire("zshort", 100)
    r.set("long", "v", ex=1000)
    assert r.exists("short", "hshort", "zshort") == 3
    time.sleep(0.3)
    assert r.get("short") is None
    assert r.exists("short", "hshort", "zshort") == 0
    assert r.hgetall("hshort") == {}
    assert r.zcard("zshort") == 0
    assert r.ttl("short") == -2
    assert r.get("long") == b"v"
    assert r.keys("*") == [b"long"]


def test_active_expiry_without_access(r):
    # Keys nobody reads again must still go away (active expiry): DBSIZE drops.
    for i in range(50):
        r.set(f"k{i}", "v", px=100)
    r.set("keep", "v")
    deadline = time.monotonic() + 5
    while r.dbsize() > 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert r.dbsize() == 1


def test_set_clears_ttl(r):
    r.set("k", "v", ex=100)
    r.set("k", "w")
    assert r.ttl("k") == -1
    r.setex("k", 100, "v")
    r.append("k", "x")
    assert 99 <= r.ttl("k") <= 100  # APPEND keeps it


# --- hashes -------------------------------------------------------------------------


def test_hset_hget(r):
    assert r.hset("h", "f1", "v1") == 1
    assert r.hset("h", "f1", "v2") == 0
    assert r.hset("h", mapping={"f2": "a", "f3": "b", "f1": "c"}) == 2
    assert r.hget("h", "f1") == b"c"
    assert r.hget("h", "nofield") is None
    assert r.hget("missing", "f") is None
    assert r.hlen("h") == 3
    assert error_of(r, "HSET", "h", "f") == "wrong number of arguments for 'hset' command"
    assert error_of(r, "HSET", "h", "f", "v", "g") == "wrong number of arguments for 'hset' command"


def test_hsetnx(r):
    assert r.hsetnx("h", "f", "1") == 1
    assert r.hsetnx("h", "f", "2") == 0
    assert r.hget("h", "f") == b"1"


def test_hmset_hmget(r):
    assert r.execute_command("HMSET", "h", "a", "1", "b", "2") in (True, b"OK")
    assert r.hmget("h", "a", "x", "b") == [b"1", None, b"2"]
    assert r.hmget("missing", "a", "b") == [None, None]
    assert error_of(r, "HMSET", "h", "a") == "wrong number of arguments for 'hmset' command"


def test_hdel_hexists(r):
    r.hset("h", mapping={"a": 1, "b": 2, "c": 3})
    assert r.hexists("h", "a") is True
    assert r.hexists("h", "z") is False
    assert r.hexists("missing", "a") is False
    assert r.hdel("h", "a", "z") == 1
    assert r.hdel("h", "b", "c") == 2
    assert r.exists("h") == 0  # the last field removed deletes the key
    assert r.hdel("h", "a") == 0


def test_hgetall_hkeys_hvals(r):
    assert r.hgetall("missing") == {}
    assert r.hkeys("missing") == []
    assert r.hvals("missing") == []
    mapping = {b"f%d" % i: b"v%d" % i for i in range(20)}
    r.hset("h", mapping=mapping)
    result = r.hgetall("h")
    assert isinstance(result, dict)
    assert result == mapping
    assert sorted(r.hkeys("h")) == sorted(mapping)
    assert sorted(r.hvals("h")) == sorted(mapping.values())
    # HKEYS and HVALS enumerate in the same order.
    assert dict(zip(r.hkeys("h"), r.hvals("h"))) == mapping


def test_hstrlen(r):
    r.hset("h", mapping={"f": "hello", "e": ""})
    assert r.hstrlen("h", "f") == 5
    assert r.hstrlen("h", "e") == 0
    assert r.hstrlen("h", "nope") == 0
    assert r.hstrlen("missing", "f") == 0


def test_hincrby(r):
    assert r.hincrby("h", "n", 5) == 5
    assert r.hincrby("h", "n", -7) == -2
    r.hset("h", "s", "abc")
    assert error_of(r, "HINCRBY", "h", "s", "1") == "hash value is not an integer"
    assert error_of(r, "HINCRBY", "h", "n", "x") == NOT_INTEGER
    r.hset("h", "big", "9223372036854775807")
    assert error_of(r, "HINCRBY", "h", "big", "1") == "increment or decrement would overflow"


def test_hincrbyfloat(r):
    r.hset("h", "f", "10.50")
    assert float(r.hincrbyfloat("h", "f", 0.1)) == 10.6
    assert r.hget("h", "f") == b"10.6"
    r.hset("h", "e", "5.0e3")
    assert float(r.hincrbyfloat("h", "e", 2.0e2)) == 5200
    assert r.hget("h", "e") == b"5200"
    r.hset("h", "s", "abc")
    assert error_of(r, "HINCRBYFLOAT", "h", "s", "1") == "hash value is not a float"
    assert error_of(r, "HINCRBYFLOAT", "h", "f", "x") == NOT_FLOAT


def test_hscan(r):
    mapping = {b"field:%d" % i: b"%d" % i for i in range(200)}
    mapping[b"other"] = b"x"
    r.hset("h", mapping=mapping)
    assert dict(r.hscan_iter("h", count=10)) == mapping
    assert dict(r.hscan_iter("h", match="field:1?")) == {b"field:%d" % i: b"%d" % i for i in range(10, 20)}
    cursor, data = r.hscan("missing", 0)
    assert cursor == 0 and data == {}
    small = {b"a": b"1", b"b": b"2"}
    r.hset("small", mapping=small)
    cursor, data = r.hscan("small", 0)
    assert cursor == 0 and data == small


def test_hash_wrongtype(r):
    r.set("s", "v")
    for args in [("HSET", "s", "f", "v"), ("HGET", "s", "f"), ("HGETALL", "s"), ("HDEL", "s", "f"),
                 ("HLEN", "s"), ("HINCRBY", "s", "f", "1"), ("HKEYS", "s"), ("HSCAN", "s", "0"),
                 ("HMGET", "s", "f"), ("HEXISTS", "s", "f")]:
        assert error_of(r, *args) == WRONGTYPE, args


# --- sorted sets ------------------------------------------------------------------


def test_zadd_basic(r):
    assert r.zadd("z", {"a": 1, "b": 2, "c": 3}) == 3
    assert r.zadd("z", {"a": 5, "d": 4}) == 1
    assert r.zcard("z") == 4
    assert r.zscore("z", "a") == 5.0
    assert r.zscore("z", "nope") is None
    assert r.zscore("missing", "a") is None
    assert r.zrange("z", 0, -1) == [b"b", b"c", b"d", b"a"]
    assert r.zadd("z", {"e": 1.5}) == 1
    assert r.zscore("z", "e") == 1.5


def test_zadd_flags(r):
    r.zadd("z", {"a": 1, "b": 2})
    assert r.zadd("z", {"a": 10, "c": 3}, nx=True) == 1
    assert r.zscore("z", "a") == 1.0
    assert r.zadd("z", {"a": 10, "d": 4}, xx=True) == 0
    assert r.zscore("z", "a") == 10.0
    assert r.zscore("z", "d") is None
    assert r.zadd("z", {"a": 5, "b": 5}, gt=True) == 0
    assert r.zscore("z", "a") == 10.0 and r.zscore("z", "b") == 5.0
    assert r.zadd("z", {"a": 7, "b": 9}, lt=True, ch=True) == 1
    assert r.zscore("z", "a") == 7.0 and r.zscore("z", "b") == 5.0
    assert r.zadd("z", {"a": 8, "b": 5, "n": 1}, ch=True) == 2  # one changed, one added
    assert r.zadd("z", {"n2": 1}, gt=True) == 1  # GT still adds new members


def test_zadd_incr(r):
    assert r.zadd("z", {"a": 1}, incr=True) == 1.0
    assert r.zadd("z", {"a": 2.5}, incr=True) == 3.5
    assert r.zincrby("z", 1, "a") == 4.5
    assert r.zadd("z", {"a": 1}, incr=True, nx=True) is None
    assert r.zadd("z", {"b": 1}, incr=True, xx=True) is None
    assert r.zadd("z", {"a": -1}, incr=True, gt=True) is None
    assert r.zscore("z", "a") == 4.5
    assert r.zadd("z", {"a": 1}, incr=True, gt=True) == 5.5


def test_zadd_errors(r):
    assert error_of(r, "ZADD", "z", "NX", "XX", "1", "a") == "XX and NX options at the same time are not compatible"
    assert error_of(r, "ZADD", "z", "NX", "GT", "1", "a") == (
        "GT, LT, and/or NX options at the same time are not compatible"
    )
    assert error_of(r, "ZADD", "z", "GT", "LT", "1", "a") == (
        "GT, LT, and/or NX options at the same time are not compatible"
    )
    assert error_of(r, "ZADD", "z", "INCR", "1", "a", "2", "b") == "INCR option supports a single increment-element pair"
    assert error_of(r, "ZADD", "z", "abc", "a") == NOT_FLOAT
    assert error_of(r, "ZADD", "z", "nan", "a") == NOT_FLOAT
    assert error_of(r, "ZADD", "z", "1", "a", "2") == SYNTAX
    assert error_of(r, "ZADD", "z", "1") == "wrong number of arguments for 'zadd' command"
    assert r.exists("z") == 0


def test_zadd_infinity(r):
    r.zadd("z", {"lo": float("-inf"), "hi": float("inf"), "mid": 0})
    assert r.zscore("z", "hi") == float("inf")
    assert r.zrange("z", 0, -1) == [b"lo", b"mid", b"hi"]
    assert error_of(r, "ZINCRBY", "z", "-inf", "hi") == "resulting score is not a number (NaN)"


def test_zrem_zcard(r):
    r.zadd("z", {"a": 1, "b": 2, "c": 3})
    assert r.zrem("z", "a", "nope") == 1
    assert r.zcard("z") == 2
    assert r.zrem("z", "b", "c") == 2
    assert r.exists("z") == 0
    assert r.zcard("z") == 0
    assert r.zrem("z", "a") == 0


def test_zcount(r):
    r.zadd("z", {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5})
    assert r.zcount("z", "-inf", "+inf") == 5
    assert r.zcount("z", 2, 4) == 3
    assert r.zcount("z", "(2", 4) == 2
    assert r.zcount("z", 2, "(4") == 2
    assert r.zcount("z", "(2", "(4") == 1
    assert r.zcount("z", "(1", "(1") == 0
    assert r.zcount("z", 5, 1) == 0
    assert r.zcount("z", "-inf", 3) == 3
    assert r.zcount("z", "(3", "inf") == 2
    assert r.zcount("missing", "-inf", "+inf") == 0
    assert error_of(r, "ZCOUNT", "z", "abc", "1") == "min or max is not a float"


def test_zrange_index(r):
    r.zadd("z", {"a": 1, "b": 2, "c": 3, "d": 3, "e": 5})
    assert r.zrange("z", 0, -1) == [b"a", b"b", b"c", b"d", b"e"]
    assert r.zrange("z", 1, 2) == [b"b", b"c"]
    assert r.zrange("z", -2, -1) == [b"d", b"e"]
    assert r.zrange("z", 3, 100) == [b"d", b"e"]
    assert r.zrange("z", 5, 10) == []
    assert r.zrange("z", 0, -1, desc=True) == [b"e", b"d", b"c", b"b", b"a"]
    assert scored(r.zrange("z", 0, 1, withscores=True)) == [(b"a", 1.0), (b"b", 2.0)]
    assert r.zrange("missing", 0, -1) == []


def test_zrange_byscore_rev_limit(r):
    r.zadd("z", {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5})
    assert r.zrange("z", 2, 4, byscore=True) == [b"b", b"c", b"d"]
    assert r.zrange("z", "(2", "+inf", byscore=True) == [b"c", b"d", b"e"]
    assert r.zrange("z", 2, 5, byscore=True, offset=1, num=2) == [b"c", b"d"]
    assert r.zrange("z", 4, 2, byscore=True, desc=True) == [b"d", b"c", b"b"]
    assert r.execute_command("ZRANGE", "z", "+inf", "-inf", "BYSCORE", "REV", "LIMIT", "0", "2") == [b"e", b"d"]
    assert scored(r.zrange("z", "-inf", 2, byscore=True, withscores=True)) == [(b"a", 1.0), (b"b", 2.0)]
    assert r.execute_command("ZRANGE", "z", "1", "5", "BYSCORE", "LIMIT", "1", "-1") == [b"b", b"c", b"d", b"e"]
    assert error_of(r, "ZRANGE", "z", "0", "-1", "LIMIT", "0", "1") == (
        "syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"
    )
    assert error_of(r, "ZRANGE", "z", "a", "b", "BYSCORE") == "min or max is not a float"
    assert error_of(r, "ZRANGE", "z", "a", "1") == NOT_INTEGER


def test_zrangebyscore(r):
    r.zadd("z", {"a": 1, "b": 2, "c": 3, "d": 4})
    assert r.zrangebyscore("z", "-inf", "+inf") == [b"a", b"b", b"c", b"d"]
    assert r.zrangebyscore("z", "(1", 3) == [b"b", b"c"]
    assert r.zrangebyscore("z", 1, 4, start=1, num=2) == [b"b", b"c"]
    assert scored(r.zrangebyscore("z", 3, 10, withscores=True)) == [(b"c", 3.0), (b"d", 4.0)]
    assert r.zrevrangebyscore("z", 3, 1) == [b"c", b"b", b"a"]
    assert error_of(r, "ZRANGEBYSCORE", "z", "0", "1", "LIMIT", "0") == SYNTAX


def test_zremrangebyscore(r):
    r.zadd("z", {"a": 1, "b": 2, "c": 3, "d": 4})
    assert r.zremrangebyscore("z", "(1", 3) == 2
    assert r.zrange("z", 0, -1) == [b"a", b"d"]
    assert r.zremrangebyscore("z", "-inf", "+inf") == 2
    assert r.exists("z") == 0
    assert r.zremrangebyscore("z", 0, 10) == 0


def test_zset_wrongtype(r):
    r.set("s", "v")
    for args in [("ZADD", "s", "1", "a"), ("ZSCORE", "s", "a"), ("ZCARD", "s"), ("ZRANGE", "s", "0", "-1"),
                 ("ZREM", "s", "a"), ("ZCOUNT", "s", "0", "1"), ("ZRANGEBYSCORE", "s", "0", "1"),
                 ("ZREMRANGEBYSCORE", "s", "0", "1"), ("ZINCRBY", "s", "1", "a")]:
        assert error_of(r, *args) == WRONGTYPE, args


def test_string_wrongtype(r):
    r.zadd("z", {"m": 1})
    for args in [("GET", "z"), ("INCR", "z"), ("APPEND", "z", "x"), ("GETRANGE", "z", "0", "1"),
                 ("SETRANGE", "z", "0", "x"), ("INCRBYFLOAT", "z", "1"), ("GETSET", "z", "x")]:
        assert error_of(r, *args) == WRONGTYPE, args
    assert r.set("z", "now a string") is True  # SET overwrites any type
    assert r.type("z") == b"string"


# --- transactions -----------------------------------------------------------------


def test_multi_exec_pipeline(r):
    with r.pipeline(transaction=True) as pipe:
        pipe.set("a", "1").incr("a").get("a").hset("h", "f", "v").hgetall("h")
        assert pipe.execute() == [True, 2, b"2", 1, {b"f": b"v"}]


def test_multi_exec_raw_commands(r):
    assert call(r, "MULTI") == b"OK"
    assert call(r, "SET", "k", "v") == b"QUEUED"
    assert call(r, "GET", "k") == b"QUEUED"
    assert call(r, "EXEC") == [b"OK", b"v"]


def test_exec_runtime_error_does_not_abort(r):
    r.hset("h", "f", "v")
    with r.pipeline(transaction=True) as pipe:
        pipe.set("a", "1").incr("h").incr("a")
        results = pipe.execute(raise_on_error=False)
    assert results[0] is True
    assert isinstance(results[1], ResponseError) and str(results[1]) == WRONGTYPE
    assert results[2] == 2


def test_discard(r):
    r.set("k", "before")
    assert call(r, "MULTI") == b"OK"
    assert call(r, "SET", "k", "after") == b"QUEUED"
    assert call(r, "DISCARD") == b"OK"
    assert r.get("k") == b"before"
    assert error_of(r, "DISCARD") == "DISCARD without MULTI"
    assert error_of(r, "EXEC") == "EXEC without MULTI"


def test_multi_nested_and_watch_inside(r):
    assert call(r, "MULTI") == b"OK"
    assert error_of(r, "MULTI") == "MULTI calls can not be nested"
    assert error_of(r, "WATCH", "k") == "WATCH inside MULTI is not allowed"
    assert call(r, "EXEC") == []


def test_watch_abort(r, gradus):
    other = redis_client(gradus, protocol=2, socket_timeout=10)
    try:
        r.set("k", "1")
        with r.pipeline(transaction=True) as pipe:
            pipe.watch("k")
            assert pipe.get("k") == b"1"
            other.set("k", "changed")
            pipe.multi()
            pipe.set("k", "mine")
            with pytest.raises(redis.WatchError):
                pipe.execute()
        assert r.get("k") == b"changed"
        # Not touched by anyone else: commits.
        with r.pipeline(transaction=True) as pipe:
            pipe.watch("k")
            pipe.multi()
            pipe.set("k", "mine")
            assert pipe.execute() == [True]
        assert r.get("k") == b"mine"
    finally:
        other.close()


def test_watch_unwatch(r, gradus):
    other = redis_client(gradus, protocol=2, socket_timeout=10)
    try:
        with r.pipeline(transaction=True) as pipe:
            pipe.watch("k")
            pipe.unwatch()
            other.set("k", "x")
            pipe.multi()
            pipe.set("k", "y")
            assert pipe.execute() == [True]
        # WATCH of a missing key that another client then creates aborts.
        with r.pipeline(transaction=True) as pipe:
            pipe.watch("new")
            other.set("new", "x")
            pipe.multi()
            pipe.get("new")
            with pytest.raises(redis.WatchError):
                pipe.execute()
    finally:
        other.close()


def test_execabort_on_wrong_arity(r):
    r.set("k", "untouched")
    with r.pipeline(transaction=True) as pipe:
        pipe.set("k", "changed")
        pipe.execute_command("GET")  # wrong number of arguments: rejected at queue time
        with pytest.raises(ResponseError) as info:
            pipe.execute()
    text = str(info.value)
    assert "wrong number of arguments for 'get' command" in text
    assert r.get("k") == b"untouched"


def test_execabort_error_text(r):
    assert call(r, "MULTI") == b"OK"
    assert error_of(r, "GET") == "wrong number of arguments for 'get' command"
    assert call(r, "SET", "k", "v") == b"QUEUED"
    reply = call(r, "EXEC")
    assert isinstance(reply, ErrorReply) and isinstance(reply.exc, redis.exceptions.ExecAbortError), reply
    assert reply.text == "Transaction discarded because of previous errors."
    assert r.exists("k") == 0


# --- connection and server ------------------------------------------------------------


def test_ping_echo(r):
    assert r.ping() is True
    assert call(r, "PING", "hello") == b"hello"
    assert r.echo("hi there") == b"hi there"
    assert r.echo(b"\x00\r\n") == b"\x00\r\n"
    assert error_of(r, "ECHO") == "wrong number of arguments for 'echo' command"
    assert error_of(r, "PING", "a", "b") == "wrong number of arguments for 'ping' command"


def test_select(r, gradus):
    for db in range(16):
        assert r.execute_command("SELECT", db) in (True, b"OK")
    assert error_of(r, "SELECT", "16") == "DB index is out of range"
    assert error_of(r, "SELECT", "-1") == "DB index is out of range"
    assert error_of(r, "SELECT", "abc") == NOT_INTEGER
    a = redis_client(gradus, db=0, socket_timeout=10, protocol=2)
    b = redis_client(gradus, db=5, socket_timeout=10, protocol=2)
    try:
        a.set("k", "in0")
        b.set("k", "in5")
        b.set("only5", "x")
        assert a.get("k") == b"in0"
        assert b.get("k") == b"in5"
        assert a.exists("only5") == 0
        assert a.dbsize() == 1 and b.dbsize() == 2
        b.flushdb()
        assert b.dbsize() == 0 and a.dbsize() == 1
    finally:
        a.close()
        b.close()


def test_dbsize_flushdb_flushall(r, gradus):
    r.mset({"a": 1, "b": 2})
    assert r.dbsize() == 2
    assert r.flushdb() is True
    assert r.dbsize() == 0
    other = redis_client(gradus, db=3, socket_timeout=10, protocol=2)
    try:
        other.set("x", 1)
        r.set("y", 1)
        assert r.flushall(asynchronous=True) is True
        assert other.dbsize() == 0 and r.dbsize() == 0
        other.set("x", 1)
        assert r.execute_command("FLUSHALL", "SYNC") in (True, b"OK")
        assert other.dbsize() == 0
        r.set("z", 1)
        assert r.execute_command("FLUSHDB", "ASYNC") in (True, b"OK")
        assert r.dbsize() == 0
        assert error_of(r, "FLUSHALL", "BOGUS") == SYNTAX
    finally:
        other.close()


def test_time(r):
    seconds, micros = r.time()
    assert abs(seconds + micros / 1e6 - time.time()) < 5
    assert 0 <= micros < 1_000_000


def test_info(r):
    r.set("a", 1)
    r.set("b", 2, ex=100)
    info = r.info()
    version = tuple(int(x) for x in str(info["redis_version"]).split(".")[:3])
    assert version >= (7, 2, 0), info["redis_version"]
    assert info["db0"]["keys"] == 2
    assert info["db0"]["expires"] == 1
    assert info["connected_clients"] >= 1
    server = r.info("server")
    assert "redis_version" in server and "tcp_port" in server
    assert "db0" in r.info("keyspace")
    both = r.info("server", "keyspace")  # several sections at once (Redis 7.0)
    assert "redis_version" in both and "db0" in both
    assert "redis_version" in r.info("everything")


def test_info_raw_text(r):
    r.set("a", 1)
    text = call(r, "INFO", "keyspace")
    assert b"# Keyspace\r\n" in text
    assert b"db0:keys=1,expires=0" in text
    server = call(r, "INFO", "server")
    assert server.startswith(b"# Server\r\n")
    assert b"\r\nredis_version:" in server


def test_config_get_set(r):
    everything = r.config_get("*")
    assert isinstance(everything, dict) and len(everything) > 0
    maxclients = r.config_get("maxclients")
    assert list(maxclients) == ["maxclients"] or list(maxclients) == [b"maxclients"]
    assert int(list(maxclients.values())[0]) > 0
    assert r.config_set("maxclients", 1000) is True
    assert int(list(r.config_get("maxclients").values())[0]) == 1000
    assert r.config_get("no-such-parameter") == {}
    assert error_of(r, "CONFIG", "SET", "no-such-parameter", "1").startswith(
        "Unknown option or number of arguments for CONFIG SET - 'no-such-parameter'"
    )


def test_client_id_name(r):
    cid = r.client_id()
    assert isinstance(cid, int) and cid > 0
    assert r.client_id() == cid
    assert r.client_getname() is None
    assert r.client_setname("worker-1") is True
    assert r.client_getname() in (b"worker-1", "worker-1")
    assert error_of(r, "CLIENT", "SETNAME", "has space") == (
        "Client names cannot contain spaces, newlines or special characters."
    )


def test_client_list_info(r, gradus):
    r.client_setname("lister")
    other = redis_client(gradus, protocol=2, socket_timeout=10, client_name="other")
    try:
        other.ping()
        clients = r.client_list()
        names = {c["name"] for c in clients}
        assert {"lister", "other"} <= names
        me = [c for c in clients if c["name"] == "lister"][0]
        assert int(me["id"]) == r.client_id()
        for field in ("id", "addr", "laddr", "fd", "name", "age", "idle", "flags", "db", "cmd"):
            assert field in me
        info = r.client_info()
        assert int(info["id"]) == r.client_id()
        assert info["name"] == "lister"
        assert info["cmd"] == "client|info"
        assert int(info["db"]) == 0
    finally:
        other.close()


def test_client_kill(r, gradus):
    victim = redis_client(gradus, protocol=2, socket_timeout=5)
    try:
        victim.ping()
        victim_id = victim.client_id()
        victim_addr = victim.client_info()["addr"]
        assert r.client_kill_filter(_id=victim_id) == 1
        assert r.client_kill_filter(_id=victim_id) == 0
        deadline = time.monotonic() + 2
        while victim_addr in {c["addr"] for c in r.client_list()} and time.monotonic() < deadline:
            time.sleep(0.02)
        assert victim_addr not in {c["addr"] for c in r.client_list()}
        assert error_of(r, "CLIENT", "KILL", "127.0.0.1:1") == "No such client"
        third = redis_client(gradus, protocol=2, socket_timeout=5)
        third.ping()
        addr = third.client_info()["addr"]
        assert r.client_kill(addr) is True
        third.close()
    finally:
        victim.close()


def test_command_count_info_docs(r):
    count = r.command_count()
    assert isinstance(count, int) and count > 20
    get_info = call(r, "COMMAND", "INFO", "get")
    assert get_info
    entry = get_info["get"] if isinstance(get_info, dict) else get_info[0]
    if isinstance(entry, dict):
        assert entry["arity"] == 2
        assert entry["first_key_pos"] == 1
        assert entry["last_key_pos"] == 1
        assert entry["step_count"] == 1
    else:
        assert entry[0] == b"get" and entry[1] == 2 and entry[3:6] == [1, 1, 1]
    docs = call(r, "COMMAND", "DOCS", "get")
    if isinstance(docs, list):  # RESP2: [name, [k, v, k, v...]]
        assert docs[0] == b"get"
        fields = dict(zip(docs[1][::2], docs[1][1::2]))
    else:
        fields = docs[b"get"] if b"get" in docs else docs["get"]
        if isinstance(fields, list):
            fields = dict(zip(fields[::2], fields[1::2]))
    assert fields[b"summary"]
    assert fields[b"group"] == b"string"


def test_command_list_names_subcommands_and_filters(r):
    # Redis 7 lists each subcommand as `container|sub` after its container (this listed only
    # the containers, and ignored FILTERBY).
    names = {n.decode() for n in call(r, "COMMAND", "LIST")}
    assert {"get", "config", "config|get", "acl|setuser", "client|kill"} <= names
    def listed(*filterby):
        return sorted(n.decode() for n in call(r, "COMMAND", "LIST", "FILTERBY", *filterby))
    assert listed("PATTERN", "config|*") == [
        "config|get", "config|help", "config|resetstat", "config|rewrite", "config|set"]
    assert listed("pattern", "CONFIG|G*") == ["config|get"]
    assert listed("ACLCAT", "geo") == [
        "geoadd", "geodist", "geohash", "geopos", "georadius", "georadius_ro",
        "georadiusbymember", "georadiusbymember_ro", "geosearch", "geosearchstore"]
    assert listed("ACLCAT", "no-such-category") == []
    assert listed("MODULE", "nosuchmodule") == []
    assert error_of(r, "COMMAND", "LIST", "FILTERBY", "NAME", "x") == "syntax error"
    assert error_of(r, "COMMAND", "LIST", "FILTERBY", "PATTERN") == "syntax error"
    assert error_of(r, "COMMAND", "LIST", "x") == "syntax error"


def test_unknown_command_error(r):
    assert error_of(r, "FOO", "a", "b") == "unknown command 'FOO', with args beginning with: 'a' 'b' "
    assert error_of(r, "foo") == "unknown command 'foo', with args beginning with: "
    assert r.ping() is True


def test_wrong_arity_errors(r):
    assert error_of(r, "GET") == "wrong number of arguments for 'get' command"
    assert error_of(r, "GET", "a", "b") == "wrong number of arguments for 'get' command"
    assert error_of(r, "HGET", "h") == "wrong number of arguments for 'hget' command"
    assert error_of(r, "ZADD", "z") == "wrong number of arguments for 'zadd' command"
    assert error_of(r, "EXPIRE", "k") == "wrong number of arguments for 'expire' command"
    assert error_of(r, "CLIENT", "SETNAME") == "wrong number of arguments for 'client|setname' command"
    assert error_of(r, "CONFIG", "GET") == "wrong number of arguments for 'config|get' command"


def test_reset(gradus, protocol):
    # Over a raw connection: RESET switches the protocol back to RESP2, which
    # would confuse a RESP3 redis-py connection.
    with RawConnection(gradus.host, gradus.port) as conn:
        conn.call("HELLO", str(protocol))
        assert conn.call("SELECT", "2") == Simple(b"OK")
        assert conn.call("CLIENT", "SETNAME", "named") == Simple(b"OK")
        assert conn.call("WATCH", "w") == Simple(b"OK")
        assert conn.call("MULTI") == Simple(b"OK")
        assert conn.call("SET", "x", "queued") == Simple(b"QUEUED")
        assert conn.call("RESET") == Simple(b"RESET")
        assert conn.call("CLIENT", "GETNAME") is NULL_BULK
        assert conn.call("EXISTS", "x") == 0
        assert conn.call("SET", "in0", "v") == Simple(b"OK")
        assert conn.call("EXEC") == Err(b"ERR EXEC without MULTI")
        assert b" db=0 " in conn.call("CLIENT", "INFO")
        assert b" resp=2 " in conn.call("CLIENT", "INFO")
        assert conn.call("PING") == Simple(b"PONG")


# --- authentication ---------------------------------------------------------------


def test_auth_requirepass(gradus_factory, protocol):
    server = gradus_factory("--requirepass", "s3cret")
    with RawConnection(server.host, server.port) as conn:
        assert conn.call("GET", "k") == Err(b"NOAUTH Authentication required.")
        assert conn.call("AUTH", "wrong") == Err(b"WRONGPASS invalid username-password pair or user is disabled.")
        assert conn.call("AUTH", "default", "wrong") == Err(
            b"WRONGPASS invalid username-password pair or user is disabled."
        )
        assert conn.call("AUTH", "s3cret") == Simple(b"OK")
        assert conn.call("SET", "k", "v") == Simple(b"OK")
    with RawConnection(server.host, server.port) as conn:
        assert conn.call("AUTH", "default", "s3cret") == Simple(b"OK")
        assert conn.call("GET", "k") == b"v"
    good = redis_client(server, protocol=protocol, password="s3cret", socket_timeout=10)
    try:
        assert good.get("k") == b"v"
    finally:
        good.close()
    bad = redis_client(server, protocol=protocol, password="nope", socket_timeout=10)
    try:
        with pytest.raises(redis.AuthenticationError):
            bad.ping()
    finally:
        bad.close()
    anon = redis_client(server, protocol=protocol, socket_timeout=10)
    try:
        with pytest.raises(redis.AuthenticationError):
            anon.get("k")
    finally:
        anon.close()


def test_hello_auth(gradus_factory):
    server = gradus_factory("--requirepass", "pw")
    with RawConnection(server.host, server.port) as conn:
        assert conn.call("HELLO", "3") == Err(b"NOAUTH HELLO must be called with the client already authenticated, "
                                              b"otherwise the HELLO <proto> AUTH <user> <pass> option can be used to "
                                              b"authenticate the client and select the RESP protocol version at the "
                                              b"same time")
        assert conn.call("HELLO", "3", "AUTH", "default", "bad") == Err(
            b"WRONGPASS invalid username-password pair or user is disabled."
        )
        hello = conn.call("HELLO", "3", "AUTH", "default", "pw")
        assert isinstance(hello, Map)
        assert hello.to_dict()[b"proto"] == 3
        assert conn.call("SET", "k", "v") == Simple(b"OK")
    with RawConnection(server.host, server.port) as conn:
        hello = conn.call("HELLO", "2", "AUTH", "default", "pw")
        assert isinstance(hello, list) and hello[:2] == [b"server", b"redis"]
        assert conn.call("GET", "k") == b"v"


def test_auth_without_password_configured(gradus):
    with RawConnection(gradus.host, gradus.port) as conn:
        assert conn.call("AUTH", "x") == Err(
            b"ERR AUTH <password> called without any password configured for the default user. "
            b"Are you sure your configuration is correct?"
        )
        # The default user is "nopass": any password is accepted with a user name.
        assert conn.call("AUTH", "default", "anything") == Simple(b"OK")

