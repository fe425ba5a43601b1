"""COPY, MOVE, SWAPDB, SORT ... STORE and WAIT against Gradus' write path: what
they leave survives a kill -9 at `strict` exactly; they follow the durability
rules between keyspaces of different degrees (a `none` keyspace starts empty, a
key cannot come from it into a logged one, SWAPDB pairs equal keyspaces only);
a swap invalidates WATCH as in Redis; WAIT answers 0 as a server without
replicas does. Replies are compared with redis-server by test_differential.py."""

from __future__ import annotations

import time

import pytest
import redis

from resp import RawConnection
from test_durability import NONE_DB1, client, dump, write_config

pytestmark = pytest.mark.gradus_only

DBS = (0, 1, 2, 3)


def has_lists(server) -> bool:
    """Whether this build has the list type (SORT ... STORE stores a list)."""
    conn = RawConnection(server.host, server.port, timeout=10)
    try:
        return isinstance(conn.call("COMMAND", "INFO", "rpush")[0], list)
    finally:
        conn.close()


def test_cross_keyspace_writes_survive_a_strict_crash(gradus_factory):
    server = gradus_factory("--durability", "strict")
    r0, r1 = client(server, db=0), client(server, db=1)
    lists = has_lists(server)
    r0.set("s", "v", ex=3600)
    r0.hset("h", mapping={"f": "1", "g": "2"})
    r0.zadd("z", {"3": 3, "1": 1, "2": 2})
    for m, w in (("1", 30), ("2", 10), ("3", 20)):
        r0.set(f"w_{m}", w)
    # COPY within the database and into another one, with its TTL and REPLACE.
    assert r0.copy("s", "s-copy") is True
    assert r0.copy("h", "h", destination_db=2) is True
    r1.set("z", "occupied")
    assert r0.copy("z", "z", destination_db=1) is False
    assert r0.copy("z", "z", destination_db=1, replace=True) is True
    # MOVE, keeping the TTL; refused when the target has the key.
    assert r0.move("s", 3) is True
    r1.set("s-copy", "x")
    assert r0.move("s-copy", 1) is False
    # SWAPDB 1 and 2 from database 0, twice over an odd number of times.
    for _ in range(3):
        assert r0.swapdb(1, 2) is True
    # SORT ... STORE: an empty result deletes the destination.
    r0.set("dest", "old")
    assert r0.execute_command("SORT", "nothing", "STORE", "dest") == 0
    assert r0.exists("dest") == 0
    if lists:
        assert r0.execute_command("SORT", "z", "BY", "w_*", "GET", "#", "GET", "w_*", "STORE", "sorted") == 6
        assert r0.lrange("sorted", 0, -1) == [b"2", b"10", b"3", b"20", b"1", b"30"]
    else:
        with pytest.raises(redis.ResponseError, match="needs the list type"):
            r0.execute_command("SORT", "z", "BY", "w_*", "STORE", "sorted")
        assert r0.exists("sorted") == 0, "a refused STORE changes nothing"
    assert r0.sort("z", by="w_*", get=["#", "w_*"]) == [b"2", b"10", b"3", b"20", b"1", b"30"]
    r0.close()
    r1.close()
    expected = dump(server, DBS)
    assert expected[(3, b"s")][2] is True, "MOVE kept the TTL"
    assert expected[(1, b"h")][0] == "hash" and (2, b"h") not in expected, "swapped"
    assert expected[(2, b"z")][0] == "zset" and expected[(2, b"s-copy")][1] == b"x"
    server.crash_restart()  # every write above was acknowledged at strict
    assert dump(server, DBS) == expected
    # And again from a snapshot.
    r = client(server)
    assert r.save() is True
    r.close()
    server.crash_restart()
    assert dump(server, DBS) == expected


def test_swapdb_invalidates_watch_on_keys_present_in_either_database(gradus):
    r = client(gradus, db=0)
    other = client(gradus, db=0)
    try:
        r.flushall()
        other.execute_command("SELECT", 1)
        other.set("only-in-1", "x")
        for key, expect_run in (("only-in-1", False), ("in-neither", True)):
            pipe = r.pipeline(transaction=True)
            pipe.watch(key)
            pipe.multi()
            pipe.set("marker", key)
            other.swapdb(0, 1)
            try:
                pipe.execute()
                ran = True
            except redis.WatchError:
                ran = False
            assert ran is expect_run, key
            other.swapdb(0, 1)
    finally:
        r.close()
        other.close()


def test_cross_keyspace_rules_between_logged_and_none_keyspaces(gradus_factory, tmp_path):
    server = gradus_factory("--config", write_config(tmp_path, NONE_DB1))
    r0, r1 = client(server, db=0), client(server, db=1)
    r0.set("logged", "1")
    r0.set("moved-to-cache", "2")
    r0.set("copied-to-cache", "3")
    r1.set("cache", "4")
    # Out of a logged keyspace into the cache: allowed.
    assert r0.move("moved-to-cache", 1) is True
    assert r0.copy("copied-to-cache", "copied-to-cache", destination_db=1) is True
    # From the cache into a logged keyspace: refused, nothing changes.
    with pytest.raises(redis.ResponseError, match="never logged"):
        r1.move("cache", 0)
    with pytest.raises(redis.ResponseError, match="never logged"):
        r1.copy("cache", "cache", destination_db=0)
    assert r1.get("cache") == b"4" and r0.exists("cache") == 0
    # SWAPDB between a logged keyspace and a `none` one: refused.
    with pytest.raises(redis.ResponseError) as refused:
        r0.swapdb(0, 1)
    assert str(refused.value) == (
        "SWAPDB needs two databases of the same durability and eviction policy "
        "(database 0: durability background, eviction none, database 1: durability none, eviction none)"
    )
    assert r0.swapdb(0, 2) is True and r0.swapdb(2, 0) is True
    assert r0.execute_command("WAITAOF", 1, 0, 0) == [1, 0]
    r0.close()
    r1.close()
    server.crash_restart()
    r0, r1 = client(server, db=0), client(server, db=1)
    try:
        assert sorted(r0.keys("*")) == [b"copied-to-cache", b"logged"], "the MOVE out was replayed"
        assert r1.dbsize() == 0, "a none keyspace starts empty"
    finally:
        r0.close()
        r1.close()


def test_wait_answers_zero_without_replicas(gradus):
    r = client(gradus)
    try:
        start = time.monotonic()
        assert r.execute_command("WAIT", 0, 0) == 0
        assert r.execute_command("WAIT", 1, 150) == 0
        assert time.monotonic() - start >= 0.14, "WAIT waits out its timeout"
        pipe = r.pipeline(transaction=True)
        pipe.execute_command("WAIT", 1, 0)
        assert pipe.execute() == [0], "inside MULTI WAIT does not block"
        with pytest.raises(redis.ResponseError, match="timeout is negative"):
            r.execute_command("WAIT", 1, -1)
    finally:
        r.close()


def test_object_reads_do_not_count_as_access(gradus):
    r = client(gradus)
    try:
        r.hset("idle", "f", "v")
        time.sleep(2.2)
        assert r.object("idletime", "idle") >= 2
        assert r.object("idletime", "idle") >= 2, "OBJECT itself is not an access"
        r.hget("idle", "f")
        assert r.object("idletime", "idle") == 0
        assert r.object("encoding", "idle") == b"listpack"
    finally:
        r.close()


def test_ttl_type_and_exists_leave_the_last_access_time_alone(r2):
    """TTL, PTTL, EXPIRETIME, PEXPIRETIME, TYPE and EXISTS look at a key without counting an
    access (Redis' LOOKUP_NOTOUCH; its introspection-2.tcl): LRU eviction and OBJECT IDLETIME
    must not take them for use. GET does count. Gradus counted all of them."""
    r2.set("k", "v")
    payload = r2.dump("k")
    r2.restore("k", 0, payload, replace=True, idletime=1000)
    assert r2.object("idletime", "k") >= 1000
    r2.ttl("k"), r2.pttl("k"), r2.expiretime("k"), r2.pexpiretime("k")
    r2.type("k"), r2.exists("k")
    assert r2.object("idletime", "k") >= 1000
    r2.get("k")
    assert r2.object("idletime", "k") < 5
