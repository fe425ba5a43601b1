"""redis-py over RESP2 (protocol=2) against Gradus.

The shared cases live in redispy_cases.py and run here through the `r`
fixture with PROTOCOL = 2; RESP2-specific wire checks follow.
"""

from redispy_cases import *  # noqa: F401,F403  (collected as this module's tests)
from resp import NULL_ARRAY, NULL_BULK, Err, Simple

PROTOCOL = 2


def test_r2_fixture_is_resp2(r2):
    assert r2.connection_pool.connection_kwargs["protocol"] == 2
    assert r2.client_info()["resp"] == "2"


def test_resp2_wire_types(raw):
    assert raw.call("SET", "k", "v") == Simple(b"OK")
    assert raw.call("GET", "missing") is NULL_BULK
    assert raw.call("GET", "k") == b"v"
    assert raw.call("HSET", "h", "a", "1", "b", "2") == 2
    flat = raw.call("HGETALL", "h")
    assert isinstance(flat, list) and sorted(zip(flat[::2], flat[1::2])) == [(b"a", b"1"), (b"b", b"2")]
    raw.call("ZADD", "z", "1.5", "m", "2", "n")
    assert raw.call("ZSCORE", "z", "m") == b"1.5"  # scores are bulk strings in RESP2
    assert raw.call("ZSCORE", "z", "n") == b"2"
    assert raw.call("ZRANGE", "z", "0", "-1", "WITHSCORES") == [b"m", b"1.5", b"n", b"2"]
    assert raw.call("ZADD", "z", "INCR", "1", "m") == b"2.5"
    assert raw.call("ZADD", "z", "NX", "INCR", "1", "m") is NULL_BULK
    assert raw.call("EXISTS", "k") == 1
    assert raw.call("TYPE", "k") == Simple(b"string")
    assert raw.call("CONFIG", "GET", "maxclients")[0] == b"maxclients"
    assert raw.call("GET") == Err(b"ERR wrong number of arguments for 'get' command")


def test_resp2_exec_aborted_by_watch_is_null_array(raw, gradus):
    other = raw.connect()
    assert raw.call("WATCH", "k") == Simple(b"OK")
    assert other.call("SET", "k", "x") == Simple(b"OK")
    assert raw.call("MULTI") == Simple(b"OK")
    assert raw.call("SET", "k", "y") == Simple(b"QUEUED")
    assert raw.call("EXEC") is NULL_ARRAY
    assert raw.call("GET", "k") == b"x"


def test_resp2_exec_replies(raw):
    raw.call("HSET", "h", "f", "v")
    assert raw.call("MULTI") == Simple(b"OK")
    assert raw.call("SET", "a", "1") == Simple(b"QUEUED")
    assert raw.call("INCR", "h") == Simple(b"QUEUED")
    assert raw.call("GET", "nope") == Simple(b"QUEUED")
    assert raw.call("EXEC") == [
        Simple(b"OK"),
        Err(b"WRONGTYPE Operation against a key holding the wrong kind of value"),
        NULL_BULK,
    ]


def test_resp2_execabort_wire(raw):
    assert raw.call("MULTI") == Simple(b"OK")
    assert raw.call("SET", "k") == Err(b"ERR wrong number of arguments for 'set' command")
    assert raw.call("NOSUCHCMD") == Err(b"ERR unknown command 'NOSUCHCMD', with args beginning with: ")
    assert raw.call("EXEC") == Err(b"EXECABORT Transaction discarded because of previous errors.")
    assert raw.call("PING") == Simple(b"PONG")  # out of MULTI again
