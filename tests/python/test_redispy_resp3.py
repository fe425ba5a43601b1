"""redis-py over RESP3 (protocol=3, HELLO 3) against Gradus.

The shared cases live in redispy_cases.py and run here through the `r`
fixture with PROTOCOL = 3; RESP3-specific wire checks follow.
"""

from redispy_cases import *  # noqa: F401,F403  (collected as this module's tests)
from resp import NULL, Double, Err, Map, Simple

PROTOCOL = 3


def hello3(raw):
    reply = raw.call("HELLO", "3")
    assert isinstance(reply, Map), reply
    return reply.to_dict()


def test_r3_fixture_is_resp3(r3):
    assert r3.connection_pool.connection_kwargs["protocol"] == 3
    assert r3.client_info()["resp"] == "3"


def test_hello3_reply(raw):
    hello = hello3(raw)
    assert hello[b"server"] == b"redis"
    version = tuple(int(x) for x in hello[b"version"].split(b".")[:3])
    assert version >= (7, 2, 0)
    assert hello[b"proto"] == 3
    assert isinstance(hello[b"id"], int)
    assert hello[b"mode"] == b"standalone"
    assert hello[b"role"] == b"master"
    assert hello[b"modules"] == []
    assert list(hello) == [b"server", b"version", b"proto", b"id", b"mode", b"role", b"modules"]


def test_hello_errors_and_back_to_resp2(raw):
    assert raw.call("HELLO", "4") == Err(b"NOPROTO unsupported protocol version")
    assert raw.call("HELLO", "x") == Err(b"ERR Protocol version is not an integer or out of range")
    hello3(raw)
    assert raw.call("GET", "missing") is NULL
    hello2 = raw.call("HELLO", "2")
    assert isinstance(hello2, list) and hello2[0] == b"server"
    assert raw.call("HGETALL", "missing") == []


def test_resp3_wire_types(raw):
    hello3(raw)
    assert raw.call("SET", "k", "v") == Simple(b"OK")
    assert raw.call("GET", "missing") is NULL
    assert raw.call("HSET", "h", "a", "1", "b", "2") == 2
    reply = raw.call("HGETALL", "h")
    assert isinstance(reply, Map) and sorted(reply.items) == [(b"a", b"1"), (b"b", b"2")]
    assert raw.call("HGETALL", "missing") == Map([])
    raw.call("ZADD", "z", "1.5", "m", "2", "n")
    score = raw.call("ZSCORE", "z", "m")
    assert isinstance(score, Double) and score.value == 1.5
    assert raw.call("ZSCORE", "z", "missing") is NULL
    assert raw.call("ZRANGE", "z", "0", "-1", "WITHSCORES") == [[b"m", Double(1.5, b"1.5")], [b"n", Double(2.0, b"2")]]
    assert raw.call("ZADD", "z", "INCR", "1", "m") == Double(2.5, b"2.5")
    assert raw.call("ZADD", "z", "NX", "INCR", "1", "m") is NULL
    assert raw.call("ZINCRBY", "z", "1", "n") == Double(3.0, b"3")
    config = raw.call("CONFIG", "GET", "maxclients")
    assert isinstance(config, Map) and config.items[0][0] == b"maxclients"
    assert raw.call("INCRBYFLOAT", "f", "1.5") == b"1.5"  # still a bulk string
    assert raw.call("HINCRBYFLOAT", "h", "a", "0.5") == b"1.5"


def test_resp3_exec_aborted_by_watch_is_null(raw):
    hello3(raw)
    other = raw.connect()
    raw.call("WATCH", "k")
    other.call("SET", "k", "x")
    raw.call("MULTI")
    raw.call("SET", "k", "y")
    assert raw.call("EXEC") is NULL


def test_resp3_hgetall_is_dict(r3):
    r3.hset("h", mapping={"a": "1"})
    assert r3.hgetall("h") == {b"a": b"1"}


def test_reset_returns_to_resp2(raw):
    hello3(raw)
    assert raw.call("RESET") == Simple(b"RESET")
    assert raw.call("GET", "missing") is not NULL  # RESP2 null bulk again
