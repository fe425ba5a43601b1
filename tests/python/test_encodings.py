"""OBJECT ENCODING follows Redis 7.2's encoding knobs, set live with CONFIG SET: hashes
(`hash-max-listpack-*`), sets (`set-max-intset-entries`, `set-max-listpack-*`), lists
(`list-max-listpack-size`), and strings after INCR/APPEND/SETRANGE.

Hashes and strings are compared with a real redis-server (7.0 encodes them as 7.2 does); sets
and lists are checked against Redis 7.2's rules directly (7.0 has no listpack sets or lists).
"""

from __future__ import annotations

from differential import assert_same_replies
from servers import redis_client


def enc(key):
    return ("OBJECT", "ENCODING", key)


# --- hashes ----------------------------------------------------------------


def test_hash_max_listpack_entries_and_value_take_effect_live(gradus, redis_server):
    long_300 = "v" * 300
    assert_same_replies(gradus, redis_server, [
        ("CONFIG", "SET", "hash-max-listpack-entries", "3"),
        ("HSET", "h", "a", "1", "b", "2", "c", "3"), enc("h"),
        ("HSET", "h", "d", "4"), enc("h"),
        ("HDEL", "h", "d", "c"), enc("h"),  # a hashtable never converts back
        # The alias, and a value limit above 255: the packed form holds long fields.
        ("CONFIG", "SET", "hash-max-ziplist-value", "1000"),
        ("CONFIG", "SET", "hash-max-ziplist-entries", "10"),
        ("HSET", "long", "z", long_300, long_300, "x", "a", "1"), enc("long"),
        ("HGETALL", "long"),  # insertion order while packed
        ("HSET", "long", "z", "short"), ("HGETALL", "long"), enc("long"),
        ("HSET", "long", "big", "v" * 1001), enc("long"),
        ("CONFIG", "SET", "hash-max-listpack-entries", "0"),
        ("HSET", "none", "f", "1"), enc("none"),
    ])


def test_hincrbyfloat_over_hash_max_listpack_value_converts(gradus, redis_server):
    assert_same_replies(gradus, redis_server, [
        ("CONFIG", "SET", "hash-max-listpack-value", "8"),
        ("HSET", "h", "f", "1"), enc("h"),
        ("HINCRBYFLOAT", "h", "f", "0.1"), enc("h"),
        ("HINCRBYFLOAT", "h", "f", "0.0000001"), enc("h"),
    ])


def test_restore_of_a_small_hash_converts_by_the_live_limits(gradus, redis_server):
    # Redis' "Hash ziplist of various encodings": a 9-field listpack hash, restored with
    # hash-max-listpack-entries 2, is a hashtable.
    fields = [x for i in range(9) for x in (f"f{i}", "v")]
    for server in (gradus, redis_server):
        c = redis_client(server)
        c.hset("h", mapping=dict(zip(fields[::2], fields[1::2])))
        assert c.object("encoding", "h") == b"listpack"
        payload = c.dump("h")
        c.config_set("hash-max-listpack-entries", 2)
        c.restore("h", 0, payload, replace=True)
        assert c.object("encoding", "h") == b"hashtable", server
        assert c.hlen("h") == 9
        c.close()


# --- sets (Redis 7.2 rules: intset -> listpack -> hashtable, never down) ----


def test_set_max_intset_and_listpack_limits_take_effect_live(r):
    r.config_set("set-max-intset-entries", 4)
    r.sadd("ints", 1, 2, 3, 4)
    assert r.object("encoding", "ints") == b"intset"
    r.sadd("ints", 5)  # past set-max-intset-entries, within set-max-listpack-entries
    assert r.object("encoding", "ints") == b"hashtable"
    r.srem("ints", 5, 4)
    assert r.object("encoding", "ints") == b"hashtable", "a set never converts down"

    r.config_set("set-max-listpack-entries", 3)
    r.sadd("pack", "a", "b", "c")
    assert r.object("encoding", "pack") == b"listpack"
    r.sadd("pack", "d")
    assert r.object("encoding", "pack") == b"hashtable"

    # A member longer than 255 bytes stays in a listpack when the value limit allows it.
    r.config_set("set-max-listpack-entries", 128)
    r.config_set("set-max-listpack-value", 1000)
    long = b"m" * 300
    r.sadd("long", "a", long)
    assert r.object("encoding", "long") == b"listpack"
    assert set(r.smembers("long")) == {b"a", long}
    assert r.sismember("long", long)
    r.srem("long", long)
    assert r.smembers("long") == {b"a"}
    r.sadd("long", b"x" * 1001)
    assert r.object("encoding", "long") == b"hashtable"

    # An intset whose integers' text passes the value limit cannot become a listpack.
    r.config_set("set-max-listpack-value", 3)
    r.sadd("wide", 12345, 1)
    r.sadd("wide", "a")
    assert r.object("encoding", "wide") == b"hashtable"
    r.sadd("narrow", 123, 1)
    r.sadd("narrow", "a")
    assert r.object("encoding", "narrow") == b"listpack"

    # set-max-listpack-entries 0: a non-integer set is a hashtable from the start.
    r.config_set("set-max-listpack-entries", 0)
    r.sadd("none", "a")
    assert r.object("encoding", "none") == b"hashtable"


def test_set_algebra_stores_by_the_live_limits(r):
    r.config_set("set-max-listpack-entries", 2)
    r.sadd("a", "x", "y")
    r.sadd("b", "z")
    assert r.object("encoding", "a") == b"listpack"
    assert r.sunionstore("u", "a", "b") == 3
    assert r.object("encoding", "u") == b"hashtable"


# --- lists -------------------------------------------------------------------


def test_list_max_listpack_size_takes_effect_live(r):
    def e(key):
        return r.object("encoding", key)

    r.config_set("list-max-listpack-size", 4)
    r.rpush("l", "a", "b", "c", "d")
    assert e("l") == b"listpack"
    r.rpush("l", "e")
    assert e("l") == b"quicklist"
    r.rpop("l")
    assert e("l") == b"quicklist", "4 is more than half of 4"
    r.rpop("l", 2)
    assert e("l") == b"listpack", "back at half the limit"
    assert r.lrange("l", 0, -1) == [b"a", b"b"]

    r.config_set("list-max-ziplist-size", -1)  # the alias; 4 KiB
    r.rpush("k", *["x" * 100] * 39)
    assert e("k") == b"listpack"
    r.rpush("k", "x" * 100)
    assert e("k") == b"quicklist"
    r.ltrim("k", 0, 10)
    assert e("k") == b"listpack"

    r.config_set("list-max-listpack-size", 16)
    r.rpush("m", *range(16))
    assert e("m") == b"listpack"
    r.linsert("m", "BEFORE", 0, "new")
    assert e("m") == b"quicklist"
    r.lset("m", 0, "again")
    r.lrem("m", 0, "again")
    assert e("m") == b"quicklist"
    r.lpop("m", 8)
    assert e("m") == b"listpack"
    assert r.lrange("m", 0, -1) == [str(i).encode() for i in range(8, 16)]


def test_sort_store_lmove_and_restore_follow_list_max_listpack_size(r):
    # Redis' unit/sort checks SORT STORE's encoding with list-max-ziplist-size 16.
    r.config_set("list-max-ziplist-size", 16)
    r.rpush("src", *range(20))
    r.sort("src", store="big")
    assert r.object("encoding", "big") == b"quicklist"
    r.sort("src", start=0, num=10, store="small")
    assert r.object("encoding", "small") == b"listpack"
    r.lmove("src", "dst", "LEFT", "RIGHT")
    assert r.object("encoding", "dst") == b"listpack"
    payload = r.dump("small")
    r.config_set("list-max-listpack-size", 4)
    r.restore("small", 0, payload, replace=True)
    assert r.object("encoding", "small") == b"quicklist"
    assert r.llen("small") == 10


# --- strings -----------------------------------------------------------------


def test_string_encoding_after_incr_append_and_setrange(gradus, redis_server):
    assert_same_replies(gradus, redis_server, [
        ("SET", "n", "1"), enc("n"),
        ("APPEND", "n", "2"), enc("n"), ("GET", "n"),  # raw, though short and numeric
        ("INCR", "n"), enc("n"),  # back to int
        ("APPEND", "n", "x" * 20), enc("n"),  # 22 bytes: raw
        ("SET", "n", "x" * 30), enc("n"),
        ("APPEND", "n", "y"), enc("n"),  # 31 bytes, past the inline form: raw
        ("DECRBY", "absent", "5"), enc("absent"),
        ("APPEND", "new", "12"), enc("new"),  # a new key is stored as SET would: int
        ("APPEND", "newer", "abc"), enc("newer"),
        ("SET", "s", "1234"), ("SETRANGE", "s", "0", ""), enc("s"),  # no change
        ("SETRANGE", "s", "0", "2"), enc("s"), ("GET", "s"),
        ("SETRANGE", "fresh", "2", "ab"), enc("fresh"),
        ("SET", "b", "7"), ("SETBIT", "b", "0", "1"), enc("b"),
        ("SET", "e", "hello"), enc("e"), ("SET", "e", "x" * 45), enc("e"),
    ])
