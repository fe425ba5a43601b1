"""Streams through redis-py, as an event bus uses them (Open edX's `edx-event-bus-redis` is built on
XADD with an approximate MAXLEN, XREADGROUP with BLOCK, XACK and XAUTOCLAIM): a producer, two
consumers of one group, a crashed consumer's entries claimed by another, in RESP2 and RESP3
(redis-py parses XREAD's RESP3 map and XINFO's maps itself)."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from servers import redis_client


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def r(gradus, request) -> redis.Redis:
    client = redis_client(gradus, protocol=request.param)
    client.flushall()
    yield client
    client.close()


def entries_of(reply) -> list:
    """The (id, fields) entries of an XREAD/XREADGROUP reply as redis-py parses it: RESP2
    `[[name, entries]]`, RESP3 `{name: [entries]}`."""
    if isinstance(reply, dict):
        return [e for wrapped in reply.values() for entries in wrapped for e in entries]
    return [e for _, entries in reply for e in entries]


def test_a_group_shares_the_work_and_a_dead_consumers_entries_are_claimed(r):
    r.xgroup_create("events", "workers", id="0", mkstream=True)
    ids = [r.xadd("events", {"n": str(i), "kind": "course.published"}, maxlen=1000, approximate=True)
           for i in range(10)]
    assert r.xlen("events") == 10
    alice = [e[0] for e in entries_of(r.xreadgroup("workers", "alice", {"events": ">"}, count=4))]
    bob = entries_of(r.xreadgroup("workers", "bob", {"events": ">"}, count=10))
    assert alice == ids[:4] and [e[0] for e in bob] == ids[4:]
    assert bob[0][1] == {b"n": b"4", b"kind": b"course.published"}
    assert r.xack("events", "workers", *[e[0] for e in bob]) == 6
    summary = r.xpending("events", "workers")
    assert summary["pending"] == 4 and summary["min"] == ids[0] and summary["max"] == ids[3]
    # alice died: carol claims what alice had (idle 0 ms here).
    claimed = r.xautoclaim("events", "workers", "carol", 0, "0-0", count=10)
    assert [e[0] for e in claimed[1]] == ids[:4]
    assert r.xack("events", "workers", *ids[:4]) == 4
    (group,) = r.xinfo_groups("events")
    assert group["name"] == b"workers" and group["pending"] == 0 and group["lag"] == 0
    assert group["entries-read"] == 10
    info = r.xinfo_stream("events")
    assert info["length"] == 10 and info["entries-added"] == 10


def test_a_blocked_consumer_gets_the_next_event(r, gradus):
    protocol = r.connection_pool.connection_kwargs.get("protocol", 2)
    r.xgroup_create("bus", "g", id="$", mkstream=True)
    out = {}

    def consume():
        c = redis_client(gradus, protocol=protocol)
        out["reply"] = c.xreadgroup("g", "worker", {"bus": ">"}, count=1, block=5000)
        c.close()

    t = threading.Thread(target=consume)
    t.start()
    deadline = time.time() + 5
    while time.time() < deadline and int(r.info("clients")["blocked_clients"]) < 1:
        time.sleep(0.01)
    assert int(r.info("clients")["blocked_clients"]) == 1
    sent = time.monotonic()
    new_id = r.xadd("bus", {"event": "enrolled"})
    t.join(5)
    assert not t.is_alive()
    assert [e[0] for e in entries_of(out["reply"])] == [new_id]
    assert time.monotonic() - sent < 1.0
    assert r.xpending("bus", "g")["pending"] == 1
