"""Sets end to end: what the differential test cannot show with its few small keys.

- Large sets (past the intset, listpack and shared-parts thresholds) changed and queried the
  same way on Gradus and a real redis-server give the same replies; SSCAN walks a large set in
  pages and a small one in one page; an intset's SMEMBERS is in ascending order, as in Redis.
- Durability: set writes, SPOP among them (random, so logged as the SREMs it made), survive a
  kill -9 at `--durability strict` exactly, and again from a snapshot; a set larger than a
  snapshot item is saved in parts and comes back whole.
- Laravel's tagged cache (tag reference sets kept with SADD, flushed with SMEMBERS + DEL) run
  through redis-py leaves Gradus and Redis with the same keys, in RESP2 and RESP3.
"""

from __future__ import annotations

import hashlib
import random

import pytest
import redis

from resp import NULL_ARRAY, NULL_BULK, Err, RawConnection, Set, Simple
from servers import redis_client
from test_durability import client, dump, persistence, retry_busy


def members_of(reply) -> list:
    return list(reply.items) if isinstance(reply, Set) else reply


# --- large sets against Redis --------------------------------------------------------------


def test_large_sets_answer_like_redis(gradus, redis_server):
    rng = random.Random(5)
    ours = RawConnection(gradus.host, gradus.port, timeout=20)
    theirs = RawConnection(redis_server.host, redis_server.port, timeout=20)

    def both(*cmd):
        expected, actual = theirs.call(*cmd), ours.call(*cmd)
        return expected, actual

    try:
        # "big": 10 000 strings (a hashtable kept in shared parts); "ints": 400 integers (an
        # intset); "mixed": integers and strings past the listpack limit.
        words = [f"w{i}" for i in range(10_000)]
        for start in range(0, len(words), 2_000):
            both("SADD", "big", *words[start:start + 2_000])
        ints = rng.sample(range(-70_000, 70_000), 400)
        assert both("SADD", "ints", *map(str, ints)) == (400, 400)
        both("SADD", "mixed", *map(str, range(100)))
        both("SADD", "mixed", *[f"s{i}" for i in range(60)])
        expected, actual = both("SMEMBERS", "ints")
        assert actual == expected, "an intset's members come in the same order"
        assert [int(x) for x in actual] == sorted(ints), "ascending"
        for step in range(500):
            w = rng.choice(words)
            n = str(rng.randrange(-70_000, 70_000))
            keys = rng.sample(["big", "ints", "mixed", "nokey"], rng.randrange(1, 4))
            cmd = rng.choice([
                ["SADD", "big", w, f"new{step}"],
                ["SREM", "big", w],
                ["SISMEMBER", "big", w],
                ["SMISMEMBER", "big", w, "nope", words[0]],
                ["SCARD", "big"],
                ["SADD", "ints", n],
                ["SREM", "ints", n],
                ["SADD", "mixed", rng.choice([n, w])],
                ["SINTER"] + keys,
                ["SINTERCARD", str(len(keys))] + keys + ["LIMIT", str(rng.randrange(0, 50))],
                ["SUNION"] + keys,
                ["SDIFF"] + keys,
                [rng.choice(["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"]), "dst"] + keys,
                ["SCARD", "dst"],
                ["SMOVE", "big", "mixed", w],
                ["SMOVE", "ints", "big", n],
            ])
            expected, actual = both(*cmd)
            if cmd[0] in ("SINTER", "SUNION", "SDIFF"):
                expected, actual = sorted(members_of(expected)), sorted(members_of(actual))
            assert actual == expected, f"step {step}: {cmd}\n  redis:  {expected!r}\n  gradus: {actual!r}"
        for key in ("big", "ints", "mixed", "dst"):
            expected, actual = both("SMEMBERS", key)
            assert sorted(members_of(actual)) == sorted(members_of(expected)), key
        # Random picks: the sizes Redis gives, distinct members of the set.
        members = set(members_of(ours.call("SMEMBERS", "big")))
        for count, size in ((50, 50), (-50, 50), (20_000, len(members))):
            picked = ours.call("SRANDMEMBER", "big", str(count))
            assert len(picked) == size == len(theirs.call("SRANDMEMBER", "big", str(count)))
            assert set(picked) <= members
            assert count < 0 or len(set(picked)) == size
        popped = members_of(ours.call("SPOP", "big", "100"))
        assert len(set(popped)) == 100 and set(popped) <= members
        assert ours.call("SCARD", "big") == len(members) - 100
        assert ours.call("SMISMEMBER", "big", *popped) == [0] * 100
    finally:
        ours.close()
        theirs.close()


def test_sscan_pages_a_large_set_and_returns_a_small_one_at_once(gradus):
    r = RawConnection(gradus.host, gradus.port, timeout=20)
    try:
        r.call("SADD", "small", *map(str, range(300)))  # an intset
        r.call("SADD", "packed", *[f"m{i}" for i in range(100)])  # a listpack
        for key, size in (("small", 300), ("packed", 100)):
            cursor, page = r.call("SSCAN", key, "0", "COUNT", "5")
            assert (cursor, len(page)) == (b"0", size), key
        cursor, page = r.call("SSCAN", "small", "0", "MATCH", "1?")
        assert cursor == b"0" and sorted(page) == sorted(str(i).encode() for i in range(10, 20))
        members = [f"member:{i}" for i in range(20_000)]
        for start in range(0, len(members), 5_000):
            r.call("SADD", "large", *members[start:start + 5_000])
        seen, cursor, pages = [], b"0", 0
        while True:
            cursor, page = r.call("SSCAN", "large", cursor, "COUNT", "100")
            seen += page
            pages += 1
            # Members added and removed during the walk: every member present throughout is
            # still returned.
            if pages == 10:
                r.call("SADD", "large", *[f"extra:{i}" for i in range(5_000)])
                r.call("SREM", "large", "member:0", "member:1")
            if cursor == b"0":
                break
        assert pages > 100
        kept = {m.encode() for m in members} - {b"member:0", b"member:1"}
        assert kept <= set(seen)
    finally:
        r.close()


# --- durability ----------------------------------------------------------------------------


def set_workload(server) -> None:
    r = client(server)
    r.sadd("ints", *range(-5, 20))
    r.sadd("ints", 70_000, -(2**40))
    r.srem("ints", 3, 4, 999)
    r.sadd("tags", *[f"tag:{i}" for i in range(100)])
    r.sadd("wide", *range(600))  # past the intset limit
    r.sadd("long", "x" * 100, "y")  # past the listpack value limit
    r.sadd("huge", *[f"m{i}" for i in range(9_000)])  # kept in shared parts
    r.sadd("gone", "a", "b")
    r.srem("gone", "a", "b")
    # Random removals: each is replayed as the members it took.
    r.spop("ints")
    r.spop("tags", 10)
    r.spop("wide", 300)
    r.spop("huge", 2_500)
    r.sadd("all", 1, 2, 3)
    r.spop("all", 10)  # takes everything: the key goes
    r.sadd("one", "only")
    r.spop("one")
    r.smove("tags", "moved", "tag:50")
    r.smove("tags", "moved", "tag:51")
    r.sinterstore("inter", "tags", "moved")
    r.sunionstore("union", "ints", "long", "moved")
    r.sdiffstore("diff", "wide", "ints")
    r.sadd("ttl", "a", "b")
    r.expire("ttl", 5_000)
    # SPOP inside a transaction and a script: the record holds what they removed.
    pipe = r.pipeline(transaction=True)
    pipe.spop("tags", 5).sadd("tags", "after-pop").spop("wide")
    pipe.execute()
    r.eval("redis.call('SPOP', KEYS[1], 3); return redis.call('SCARD', KEYS[1])", 1, "huge")
    r.close()


def test_set_writes_replay_exactly_after_a_strict_crash(gradus_factory):
    server = gradus_factory("--durability", "strict")
    set_workload(server)
    expected = dump(server)
    assert (0, b"all") not in expected and (0, b"one") not in expected and (0, b"gone") not in expected
    assert len(expected[(0, b"huge")][1]) == 9_000 - 2_500 - 3
    assert expected[(0, b"ttl")][2], "the TTL is kept"
    r = client(server)
    intset_order = r.smembers("ints")
    r.close()
    server.crash_restart()  # every write above was acknowledged at strict
    assert dump(server) == expected
    # Once more from a snapshot, with an empty log after it.
    r = client(server)
    assert retry_busy(r.save) is True
    r.close()
    server.crash_restart()
    assert dump(server) == expected
    r = client(server)
    assert persistence(r)["gradus_recovery_snapshot_items"] >= len(expected)
    assert r.smembers("ints") == intset_order
    r.close()
    raw = RawConnection(server.host, server.port)
    in_order = [int(m) for m in raw.call("SMEMBERS", "ints")]
    raw.close()
    assert in_order == sorted(int(m) for m in intset_order), "still an intset, in ascending order"


def test_a_large_set_survives_a_snapshot_round_trip(gradus_factory):
    server = gradus_factory()
    r = client(server)
    # About 10 MiB of members: more than one snapshot item (8 MiB each).
    members = [f"member:{i:024d}" for i in range(320_000)]
    for start in range(0, len(members), 20_000):
        r.sadd("large", *members[start:start + 20_000])
    r.srem("large", *members[:1_000])
    r.sadd("small", 1, 2, 3)
    assert r.scard("large") == 319_000
    assert retry_busy(r.save) is True
    r.close()
    server.restart()
    r = client(server)
    info = persistence(r)
    assert info["gradus_recovery_snapshot_items"] > 2, "the large set was written in parts"
    assert r.scard("large") == 319_000
    got = r.smembers("large")
    assert got == {m.encode() for m in members[1_000:]}
    assert r.sismember("large", members[1_000]) and not r.sismember("large", members[0])
    r.close()
    raw = RawConnection(server.host, server.port)
    assert raw.call("SMEMBERS", "small") == [b"1", b"2", b"3"]
    raw.close()


# --- Laravel's tagged cache ----------------------------------------------------------------


class TaggedCache:
    """Laravel's Redis tagged cache (Illuminate\\Cache\\RedisTaggedCache, as up to Laravel 10):
    each tag has a random id under `tag:<name>:key`; an entry's key is the sha1 of its tags'
    ids joined by `|`; the keys of each tag are kept in the sets `<prefix><id>:standard_ref`
    (entries with a TTL) and `<prefix><id>:forever_ref` (entries without) with SADD. Flushing
    tags reads those sets with SMEMBERS, deletes their keys in chunks of 1000, deletes the
    sets, and gives the tags new ids."""

    def __init__(self, r: redis.Redis, prefix: str, ids):
        self.r, self.prefix, self.ids = r, prefix, ids

    def tag_id(self, name: str) -> str:
        key = f"{self.prefix}tag:{name}:key"
        current = self.r.get(key)
        if current is None:
            current = next(self.ids).encode()
            self.r.set(key, current)
        return current.decode()

    def key(self, tags, key: str) -> str:
        namespace = hashlib.sha1("|".join(self.tag_id(t) for t in tags).encode()).hexdigest()
        return f"{self.prefix}{namespace}:{key}"

    def put(self, tags, key: str, value: str, ttl: int = None) -> None:
        full = self.key(tags, key)
        reference = "forever_ref" if ttl is None else "standard_ref"
        for tag in tags:
            self.r.sadd(f"{self.prefix}{self.tag_id(tag)}:{reference}", full)
        if ttl is None:
            self.r.set(full, value)
        else:
            self.r.setex(full, ttl, value)

    def get(self, tags, key: str):
        return self.r.get(self.key(tags, key))

    def flush(self, tags) -> None:
        for tag in tags:
            for reference in ("standard_ref", "forever_ref"):
                ref_key = f"{self.prefix}{self.tag_id(tag)}:{reference}"
                keys = sorted(self.r.smembers(ref_key))
                for start in range(0, len(keys), 1000):
                    self.r.delete(*keys[start:start + 1000])
                self.r.delete(ref_key)
        for tag in tags:
            self.r.set(f"{self.prefix}tag:{tag}:key", next(self.ids))


def run_tagged_cache(server, protocol: int):
    """The same tagged-cache session on `server`; returns the keyspace as it is left."""
    r = redis_client(server, protocol)
    r.flushall()
    ids = (f"{i:08x}" for i in range(1_000_000))
    cache = TaggedCache(r, "laravel_cache:", ids)
    for i in range(1_200):
        cache.put(["people", "authors"], f"author:{i}", f"Author {i}", ttl=3600 if i % 2 else None)
    for i in range(50):
        cache.put(["people"], f"person:{i}", f"Person {i}")
        cache.put(["posts"], f"post:{i}", f"Post {i}", ttl=600)
    assert cache.get(["people", "authors"], "author:7") == b"Author 7"
    people = r.smembers(f"laravel_cache:{cache.tag_id('people')}:forever_ref")
    assert len(people) == 600 + 50 and all(isinstance(m, bytes) for m in people)
    cache.flush(["people"])
    assert cache.get(["people", "authors"], "author:7") is None
    assert cache.get(["people"], "person:3") is None
    assert cache.get(["posts"], "post:3") == b"Post 3"
    cache.put(["people"], "person:1", "again")
    state = {}
    for key in r.scan_iter(count=500):
        kind = r.type(key)
        state[key] = sorted(r.smembers(key)) if kind == b"set" else r.get(key)
    r.close()
    return state


@pytest.mark.parametrize("protocol", [2, 3])
def test_laravel_tagged_cache_behaves_as_on_redis(gradus, redis_server, protocol):
    ours = run_tagged_cache(gradus, protocol)
    theirs = run_tagged_cache(redis_server, protocol)
    assert ours == theirs
    assert sum(1 for v in ours.values() if isinstance(v, list)) >= 3, "reference sets are kept"


# --- one-lookup writes ------------------------------------------------------------------------


def test_one_lookup_writes_keep_redis_replies_and_watch(gradus, redis_server):
    """SADD, LPUSH/LPUSHX and LPOP check the type and write in one lookup of the key: a wrong
    type is refused with nothing changed, LPUSHX on a missing key creates nothing, and an SADD
    that adds nothing is no write (a WATCH of the key holds, as in Redis, where SADD signals a
    modified key only when it added a member). Same replies as redis-server."""
    for server in (redis_server, gradus):
        watcher = RawConnection(server.host, server.port)
        other = RawConnection(server.host, server.port)
        other.call("FLUSHALL")
        assert other.call("SADD", "s", "a", "b") == 2
        assert other.call("SET", "str", "x") == Simple(b"OK")
        assert watcher.call("WATCH", "s") == Simple(b"OK")
        assert other.call("SADD", "s", "a", "b") == 0
        assert watcher.call("MULTI") == Simple(b"OK")
        assert watcher.call("SCARD", "s") == Simple(b"QUEUED")
        assert watcher.call("EXEC") == [2], server
        assert watcher.call("WATCH", "s") == Simple(b"OK")
        assert other.call("SADD", "s", "a", "c") == 1
        assert watcher.call("MULTI") == Simple(b"OK")
        assert watcher.call("SCARD", "s") == Simple(b"QUEUED")
        assert watcher.call("EXEC") == NULL_ARRAY, server
        for cmd in (("SADD", "str", "m"), ("LPUSH", "str", "e"), ("LPUSHX", "str", "e"),
                    ("LPOP", "str"), ("RPOP", "str", "2")):
            reply = other.call(*cmd)
            assert isinstance(reply, Err) and reply.text.startswith("WRONGTYPE"), (server, cmd)
        assert other.call("GET", "str") == b"x"
        assert other.call("LPUSHX", "missing", "e") == 0
        assert other.call("EXISTS", "missing") == 0
        assert other.call("RPUSH", "l", "1", "2", "3") == 3
        assert other.call("LPOP", "l", "2") == [b"1", b"2"]
        assert other.call("RPOP", "l") == b"3"
        assert other.call("EXISTS", "l") == 0
        assert other.call("LPOP", "l") == NULL_BULK
        watcher.close()
        other.close()
