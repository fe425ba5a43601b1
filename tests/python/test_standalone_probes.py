"""What clients and tools probe a server with to learn what it is: cluster commands (a
cluster-aware client sends CLUSTER SLOTS/INFO and falls back to one node on Redis' "cluster
support disabled" error), READONLY/READWRITE/ASKING, MODULE LIST/HELP/LOAD, and COMMAND DOCS/INFO
of those commands. Each reply is compared with a real redis-server's, in RESP2 and RESP3."""

from __future__ import annotations

import pytest

from conftest import target_is_redis
from differential import assert_same, assert_same_replies, run_script

pytestmark = pytest.mark.skipif(target_is_redis(), reason="compares Gradus with redis-server")

PROBES = [
    ("CLUSTER", "INFO"), ("CLUSTER", "SLOTS"), ("CLUSTER", "SHARDS"), ("CLUSTER", "NODES"),
    ("CLUSTER", "MYID"), ("CLUSTER", "HELP"), ("CLUSTER", "KEYSLOT", "k"),
    ("CLUSTER", "COUNTKEYSINSLOT", "1"), ("CLUSTER", "GETKEYSINSLOT", "1", "10"),
    ("CLUSTER", "RESET", "HARD"), ("CLUSTER", "ADDSLOTS", "1", "2"), ("CLUSTER", "SETSLOT", "1", "STABLE"),
    ("cluster", "info"), ("CLUSTER", "FOO"), ("CLUSTER", "INFO", "x"), ("CLUSTER", "KEYSLOT"),
    ("CLUSTER",),
    ("READONLY",), ("READWRITE",), ("ASKING",), ("READONLY", "x"),
    ("MODULE", "LIST"), ("MODULE", "HELP"), ("MODULE", "LOAD", "/nonexistent.so"),
    ("MODULE", "LOADEX", "/nonexistent.so"), ("MODULE", "UNLOAD", "m"), ("MODULE", "FOO"),
    ("MODULE", "LIST", "x"), ("MODULE",),
    ("COMMAND", "GETKEYS", "CLUSTER", "INFO"),
    ("PING",),
]


@pytest.mark.parametrize("protocol", [2, 3])
def test_cluster_and_module_probes_answer_as_a_standalone_redis(gradus, redis_server, protocol):
    assert_same_replies(gradus, redis_server, PROBES, protocol)


def test_command_list_names_the_cluster_and_module_commands_and_their_categories(gradus, redis_server):
    def names(server):
        lists = [("COMMAND", "LIST", "FILTERBY", "PATTERN", "*cluster*"),
                 ("COMMAND", "LIST", "FILTERBY", "PATTERN", "module*"),
                 ("COMMAND", "LIST", "FILTERBY", "ACLCAT", "connection")]
        found = [sorted(names) for names in run_script(server, lists)]
        # Gradus has connection commands of its own (CLIENT DURABILITY …): compare Redis' only.
        found[2] = [n for n in found[2] if n in (b"readonly", b"readwrite", b"asking")]
        return found
    assert_same(gradus, redis_server, names)


# COMMAND GETKEYS of scripts read their `numkeys` (Gradus answered "The command has no key
# arguments"); COMMAND GETKEYSANDFLAGS was unknown. Redis' key-spec flags per key.
GETKEYS = [
    ("COMMAND", "GETKEYS", "fcall", "test", "1", "x", "foo"),
    ("COMMAND", "GETKEYS", "fcall_ro", "test", "2", "x", "y"),
    ("COMMAND", "GETKEYS", "eval", "return 1", "1", "key"),
    ("COMMAND", "GETKEYS", "eval", "return 1", "0"),
    ("COMMAND", "GETKEYS", "evalsha", "abc", "3", "a"),
    ("COMMAND", "GETKEYS", "evalsha_ro", "abc", "1", "a", "b"),
    ("COMMAND", "GETKEYS", "lmpop", "0", "a", "left"),
    ("COMMAND", "GETKEYS", "nosuch", "a"),
    ("COMMAND", "GETKEYS", "ping", "a"),
    ("COMMAND", "GETKEYS", "config", "nosuch"),
    ("COMMAND", "GETKEYSANDFLAGS", "set", "k1", "v1"),
    ("COMMAND", "GETKEYSANDFLAGS", "set", "k1", "v1", "get"),
    ("COMMAND", "GETKEYSANDFLAGS", "mset", "k1", "v1", "k2", "v2"),
    ("COMMAND", "GETKEYSANDFLAGS", "get", "k1"),
    ("COMMAND", "GETKEYSANDFLAGS", "exists", "k1", "k2"),
    ("COMMAND", "GETKEYSANDFLAGS", "del", "k1", "k2"),
    ("COMMAND", "GETKEYSANDFLAGS", "incr", "k1"),
    ("COMMAND", "GETKEYSANDFLAGS", "append", "k1", "x"),
    ("COMMAND", "GETKEYSANDFLAGS", "rename", "k1", "k2"),
    ("COMMAND", "GETKEYSANDFLAGS", "copy", "k1", "k2"),
    ("COMMAND", "GETKEYSANDFLAGS", "zunionstore", "d", "2", "a", "b", "weights", "1", "2"),
    ("COMMAND", "GETKEYSANDFLAGS", "georadius", "k", "0", "0", "1", "km", "store", "d"),
    ("COMMAND", "GETKEYSANDFLAGS", "bitfield", "k", "get", "u8", "0"),
    ("COMMAND", "GETKEYSANDFLAGS", "bitfield", "k", "set", "u8", "0", "1"),
    ("COMMAND", "GETKEYSANDFLAGS", "blmove", "a", "b", "left", "right", "0"),
    ("COMMAND", "GETKEYSANDFLAGS", "eval", "return 1", "2", "a", "b"),
    ("COMMAND", "GETKEYSANDFLAGS", "fcall_ro", "f", "1", "a"),
    ("COMMAND", "GETKEYSANDFLAGS", "set", "k1"),
    # MIGRATE: its key, or the keys after KEYS (Redis' key specs, then `migrateGetKeys`).
    ("COMMAND", "GETKEYSANDFLAGS", "migrate", "h", "1", "k", "0", "5"),
    ("COMMAND", "GETKEYSANDFLAGS", "migrate", "h", "1", "", "0", "5", "COPY", "AUTH", "keys", "KEYS", "a", "b"),
    ("COMMAND", "GETKEYS", "migrate", "h", "1", "", "0", "5", "AUTH2", "u", "p", "keys", "a"),
    ("COMMAND", "GETKEYS", "migrate", "h", "1", "k", "0", "5", "KEYS", "a"),
    ("COMMAND", "GETKEYS", "migrate", "h", "1", "", "0", "5", "KEYS"),
    ("COMMAND", "GETKEYS", "migrate", "h", "1", "k", "0"),
]


@pytest.mark.parametrize("protocol", [2, 3])
def test_command_getkeys_reads_script_numkeys_and_getkeysandflags_gives_key_spec_flags(
        gradus, redis_server, protocol):
    assert_same_replies(gradus, redis_server, GETKEYS, protocol)


# GETKEYSANDFLAGS of every data type's commands: rows without flags of their own had the
# defaults (`RW access update` / `RO access`) where Redis' key specs say e.g. `RW insert` for
# LPUSH or `RW access delete` + `RW insert` for LMOVE.
KEY_FLAG_CASES = [
    "lpush k a",
    "rpush k a",
    "lpushx k a",
    "rpushx k a",
    "lpop k",
    "rpop k",
    "llen k",
    "lindex k 0",
    "lrange k 0 1",
    "lset k 0 a",
    "linsert k before a b",
    "lrem k 0 a",
    "ltrim k 0 1",
    "lpos k a",
    "lmove a b left left",
    "rpoplpush a b",
    "lmpop 2 a b left",
    "sadd k a",
    "srem k a",
    "smembers k",
    "sismember k a",
    "smismember k a",
    "scard k",
    "spop k",
    "srandmember k",
    "smove a b m",
    "sinter a b",
    "sintercard 2 a b",
    "sunion a b",
    "sdiff a b",
    "sinterstore d a b",
    "sunionstore d a b",
    "sdiffstore d a b",
    "sscan k 0",
    "hset k f v",
    "hmset k f v",
    "hsetnx k f v",
    "hget k f",
    "hmget k f",
    "hgetall k",
    "hdel k f",
    "hexists k f",
    "hlen k",
    "hstrlen k f",
    "hkeys k",
    "hvals k",
    "hincrby k f 1",
    "hincrbyfloat k f 1",
    "hrandfield k",
    "hscan k 0",
    "zadd k 1 a",
    "zincrby k 1 a",
    "zrem k a",
    "zcard k",
    "zscore k a",
    "zrange k 0 1",
    "zrangestore d k 0 1",
    "zunionstore d 2 a b",
    "zpopmin k",
    "zmpop 2 a b min",
    "zrandmember k",
    "zremrangebyrank k 0 1",
    "set k v",
    "get k",
    "getdel k",
    "getex k",
    "append k v",
    "incr k",
    "decrby k 1",
    "setrange k 0 v",
    "getrange k 0 1",
    "mset a 1 b 2",
    "msetnx a 1 b 2",
    "mget a b",
    "strlen k",
    "setnx k v",
    "setex k 1 v",
    "psetex k 1 v",
    "getset k v",
    "lcs a b",
    "incrbyfloat k 1",
    "del a b",
    "unlink a b",
    "exists a",
    "expire k 1",
    "persist k",
    "ttl k",
    "type k",
    "rename a b",
    "renamenx a b",
    "copy a b",
    "touch a",
    "dump k",
    "restore k 0 x",
    "sort k",
    "sort_ro k",
    "object encoding k",
    "memory usage k",
    "setbit k 0 1",
    "getbit k 0",
    "bitcount k",
    "bitpos k 1",
    "bitop and d a b",
    "bitfield_ro k get u8 0",
    "pfadd k a",
    "pfcount k",
    "pfmerge d a",
    "geoadd k 1 1 m",
    "geopos k m",
    "geodist k a b",
    "geosearch k fromlonlat 0 0 byradius 1 km asc",
    "geosearchstore d k fromlonlat 0 0 byradius 1 km asc",
    "blpop a 0",
    "blmove a b left left 0",
    "bzpopmin a 0",
    "watch a",
]


def test_getkeysandflags_gives_redis_key_spec_flags_for_every_type(gradus, redis_server):
    cases = [["COMMAND", "GETKEYSANDFLAGS", *c.split()] for c in KEY_FLAG_CASES]
    assert_same_replies(gradus, redis_server, cases)
