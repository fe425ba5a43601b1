"""DUMP/RESTORE in Redis' serialization format: keys of every type move from a real redis-server
into Gradus and back unchanged, and RESTORE's options and errors answer as Redis does."""

from __future__ import annotations

import pytest
import redis

from servers import redis_client

pytestmark = pytest.mark.gradus_only


def _fill(c: redis.Redis) -> None:
    c.set("s", "hello")
    c.set("n", "12345")
    c.set("big", "x" * 5000)
    c.rpush("l", *[f"e{i}" for i in range(300)])
    c.rpush("biglist", *[f"{i:0100d}" for i in range(2000)])
    c.sadd("is", 1, 2, 3, -70000, 2**40)
    c.sadd("ss", "a", "b", "c" * 70)
    c.sadd("manyints", *range(1000))
    c.zadd("z", {"a": 1.5, "b": 2, "c": float("inf")})
    c.zadd("bigz", {f"m{i}": i / 3 for i in range(300)})
    c.hset("h", mapping={f"f{i}": "v" for i in range(10)})
    c.hset("bigh", mapping={f"f{i}": "v" * 70 for i in range(20)})


def read_value(c: redis.Redis, k: str):
    """A key's type and value, comparable across servers (sets sorted); None when absent."""
    t = c.type(k)
    return t, {
        b"string": lambda: c.get(k),
        b"list": lambda: c.lrange(k, 0, -1),
        b"set": lambda: sorted(c.smembers(k)),
        b"zset": lambda: c.zrange(k, 0, -1, withscores=True),
        b"hash": lambda: c.hgetall(k),
        b"none": lambda: None,
    }[t]()


KEYS = ["s", "n", "big", "l", "biglist", "is", "ss", "manyints", "z", "bigz", "h", "bigh"]


def test_keys_move_from_redis_to_gradus_and_back_unchanged(gradus, redis_server):
    g, r = redis_client(gradus, 2), redis_client(redis_server, 2)
    _fill(r)
    for k in KEYS:
        g.restore(k, 0, r.dump(k))
        assert read_value(g, k) == read_value(r, k), k
        r.restore(k + ":back", 0, g.dump(k))
        assert read_value(r, k + ":back") == read_value(r, k), k


def test_restore_options_and_errors_answer_as_redis(gradus, redis_server):
    g, r = redis_client(gradus, 2), redis_client(redis_server, 2)
    payload = r.dump("missing") or None
    assert payload is None and g.dump("missing") is None
    r.set("s", "v")
    payload = r.dump("s")
    for c in (g, r):
        c.set("s", "old")
    cases = [
        ("RESTORE", "s", 0, payload),
        ("RESTORE", "q", -1, payload),
        ("RESTORE", "q", 0, b"not a payload"),
        ("RESTORE", "q", 0, payload[:-1] + bytes([payload[-1] ^ 1])),
        ("RESTORE", "q", 0, payload, "IDLETIME", 5, "FREQ", 3),
        ("RESTORE", "q", 0, payload, "FREQ", 300),
        ("RESTORE", "q", 0, payload, "IDLETIME", -1),
        ("RESTORE", "q", 0, payload, "BOGUS"),
        ("RESTORE", "s", 0, payload, "REPLACE"),
        ("RESTORE", "t", 1000, payload, "ABSTTL"),
    ]
    for case in cases:
        replies = []
        for c in (g, r):
            try:
                replies.append(c.execute_command(*case))
            except redis.ResponseError as e:
                replies.append(str(e))
        assert replies[0] == replies[1], (case[:3], replies)
    for c in (g, r):
        assert c.get("s") == b"v" and c.exists("t") == 0
        c.execute_command("RESTORE", "idle", 0, payload, "IDLETIME", 100)
        assert 100 <= c.object("idletime", "idle") <= 102
        c.restore("ttl", 5000, payload)
        assert 0 < c.pttl("ttl") <= 5000


def test_restored_keys_survive_a_restart(gradus_factory, redis_server):
    server = gradus_factory("--durability", "strict")
    g, r = redis_client(server, 2), redis_client(redis_server, 2)
    _fill(r)
    for k in KEYS:
        g.restore(k, 0, r.dump(k))
    before = {k: read_value(g, k) for k in KEYS}
    server.crash_restart()
    g = redis_client(server, 2)
    assert {k: read_value(g, k) for k in KEYS} == before


def test_a_stream_consumer_restored_from_a_7_0_payload_is_active_when_last_seen(gradus, redis_server):
    """A stream DUMPed by Redis 7.0 has no consumer active-time; Redis 7.2 takes the seen-time
    as its best estimate on load, so XINFO STREAM FULL shows the two equal (Gradus showed -1,
    never active). (Found by Redis' own stream-cgroups.tcl.)"""
    peer = redis_client(redis_server, 2)
    peer.delete("x")
    peer.xgroup_create("x", "g", "$", mkstream=True)
    peer.xadd("x", {"f": "v"}, id="1-1")
    peer.xreadgroup("g", "Alice", {"x": ">"})
    payload = peer.dump("x")
    ours = redis_client(gradus, 2)
    ours.delete("x")
    assert ours.restore("x", 0, payload)
    full = ours.execute_command("XINFO", "STREAM", "x", "FULL")
    fields = dict(zip(full[::2], full[1::2]))
    group = dict(zip(fields[b"groups"][0][::2], fields[b"groups"][0][1::2]))
    consumer = dict(zip(group[b"consumers"][0][::2], group[b"consumers"][0][1::2]))
    assert consumer[b"name"] == b"Alice"
    assert consumer[b"active-time"] == consumer[b"seen-time"] > 0
