"""Sorted-set algebra against a real redis-server: ZUNION, ZINTER, ZDIFF (WITHSCORES),
ZUNIONSTORE, ZINTERSTORE, ZDIFFSTORE (WEIGHTS, AGGREGATE), ZINTERCARD (LIMIT) and ZMPOP.

Every command of a fixed script goes to Gradus and to redis-server over raw RESP (in RESP2
and in RESP3) and the parsed replies must be equal, type included: results, error texts
(numkeys, syntax, weights, WRONGTYPE, arity), missing keys, plain sets as inputs (score 1),
infinities (inf × 0 is 0, inf + -inf is 0), and what each store left at its destination
(read back with ZRANGE … WITHSCORES, TYPE, TTL and OBJECT ENCODING).
"""

from __future__ import annotations

import pytest

from differential import assert_same, assert_same_replies
from resp import RawConnection

SETUP = [
    ["ZADD", "za", "1", "a", "2", "b", "3", "c"],
    ["ZADD", "zb", "10", "b", "20", "c", "30", "d"],
    ["ZADD", "zc", "-1", "c", "5", "e"],
    ["ZADD", "zinf", "inf", "a", "-inf", "b", "0", "c"],
    ["SADD", "sa", "a", "d", "x"],
    ["SET", "str", "v"],
    ["RPUSH", "list", "1"],
]

SCRIPT = [
    # Replying forms.
    ["ZUNION", "2", "za", "zb"],
    ["ZUNION", "2", "za", "zb", "WITHSCORES"],
    ["ZUNION", "3", "za", "zb", "zc", "WEIGHTS", "1", "2", "3", "WITHSCORES"],
    ["ZUNION", "2", "za", "zb", "AGGREGATE", "MIN", "WITHSCORES"],
    ["ZUNION", "2", "za", "zb", "AGGREGATE", "max", "WITHSCORES"],
    ["ZUNION", "2", "za", "sa", "WITHSCORES"],
    ["ZUNION", "2", "za", "nokey", "WITHSCORES"],
    ["ZUNION", "1", "nokey"],
    ["ZUNION", "2", "za", "zinf", "WITHSCORES"],
    ["ZUNION", "2", "za", "zinf", "WEIGHTS", "0", "0", "WITHSCORES"],
    ["ZUNION", "2", "zinf", "zinf", "WEIGHTS", "1", "-1", "WITHSCORES"],
    ["ZUNION", "1", "zinf", "WEIGHTS", "-inf", "WITHSCORES"],
    ["ZINTER", "2", "za", "zb"],
    ["ZINTER", "2", "za", "zb", "WITHSCORES"],
    ["ZINTER", "3", "za", "zb", "zc", "WITHSCORES"],
    ["ZINTER", "2", "za", "zb", "WEIGHTS", "2", "0.5", "AGGREGATE", "MAX", "WITHSCORES"],
    ["ZINTER", "2", "za", "sa", "WITHSCORES"],
    ["ZINTER", "2", "za", "nokey", "WITHSCORES"],
    ["ZINTER", "2", "za", "za", "WITHSCORES"],
    ["ZINTER", "2", "zinf", "za", "WEIGHTS", "0", "1", "WITHSCORES"],
    ["ZINTER", "2", "zinf", "zinf", "WEIGHTS", "1", "-1", "WITHSCORES"],
    ["ZDIFF", "2", "za", "zb"],
    ["ZDIFF", "2", "za", "zb", "WITHSCORES"],
    ["ZDIFF", "3", "zb", "za", "zc", "WITHSCORES"],
    ["ZDIFF", "2", "za", "sa", "WITHSCORES"],
    ["ZDIFF", "2", "za", "za"],
    ["ZDIFF", "1", "nokey"],
    ["ZDIFF", "2", "nokey", "za"],
    ["ZDIFF", "2", "sa", "za", "WITHSCORES"],
    ["ZINTERCARD", "2", "za", "zb"],
    ["ZINTERCARD", "2", "za", "zb", "LIMIT", "1"],
    ["ZINTERCARD", "2", "za", "zb", "LIMIT", "0"],
    ["ZINTERCARD", "1", "za", "LIMIT", "5"],
    ["ZINTERCARD", "2", "za", "nokey"],
    ["ZINTERCARD", "2", "za", "sa"],
    # Errors.
    ["ZUNION", "0", "za"],
    ["ZUNION", "-1", "za"],
    ["ZUNION", "x", "za"],
    ["ZUNION", "3", "za", "zb"],
    ["ZUNION", "2", "za", "str"],
    ["ZUNION", "2", "str", "nokey", "WEIGHTS", "x"],
    ["ZINTER", "2", "za", "list"],
    ["ZDIFF", "2", "za", "str"],
    ["ZUNION", "2", "za", "zb", "WEIGHTS", "1"],
    ["ZUNION", "2", "za", "zb", "WEIGHTS", "1", "x"],
    ["ZUNION", "2", "za", "zb", "WEIGHTS", "1", "nan"],
    ["ZUNION", "2", "za", "zb", "WEIGHTS", "1", "1e400"],
    ["ZUNION", "2", "za", "zb", "AGGREGATE", "AVG"],
    ["ZUNION", "2", "za", "zb", "AGGREGATE"],
    ["ZUNION", "2", "za", "zb", "WITHSCORES", "extra"],
    ["ZDIFF", "2", "za", "zb", "WEIGHTS", "1", "1"],
    ["ZDIFF", "2", "za", "zb", "AGGREGATE", "SUM"],
    ["ZINTERCARD", "0", "za"],
    ["ZINTERCARD", "3", "za", "zb"],
    ["ZINTERCARD", "2", "za", "zb", "LIMIT", "-1"],
    ["ZINTERCARD", "2", "za", "zb", "LIMIT", "x"],
    ["ZINTERCARD", "2", "za", "zb", "WITHSCORES"],
    ["ZINTERCARD", "2", "za", "str"],
    ["ZUNION", "1"],
    ["ZUNIONSTORE", "d", "1"],
    ["ZINTERCARD", "1"],
    # Stores.
    ["ZUNIONSTORE", "d1", "2", "za", "zb"],
    ["ZRANGE", "d1", "0", "-1", "WITHSCORES"],
    ["OBJECT", "ENCODING", "d1"],
    ["ZUNIONSTORE", "d1", "2", "za", "zb", "WEIGHTS", "2", "3", "AGGREGATE", "MIN"],
    ["ZRANGE", "d1", "0", "-1", "WITHSCORES"],
    ["ZINTERSTORE", "d2", "2", "za", "zb"],
    ["ZRANGE", "d2", "0", "-1", "WITHSCORES"],
    ["ZINTERSTORE", "d2", "2", "za", "sa"],
    ["ZRANGE", "d2", "0", "-1", "WITHSCORES"],
    ["ZDIFFSTORE", "d3", "2", "za", "zb"],
    ["ZRANGE", "d3", "0", "-1", "WITHSCORES"],
    ["SET", "d4", "old", "EX", "100"],
    ["ZUNIONSTORE", "d4", "1", "za"],
    ["TYPE", "d4"],
    ["TTL", "d4"],
    ["ZINTERSTORE", "d4", "2", "za", "nokey"],
    ["EXISTS", "d4"],
    ["ZDIFFSTORE", "d4", "2", "za", "za"],
    ["ZUNIONSTORE", "za2", "2", "za", "zb"],
    ["ZUNIONSTORE", "za", "2", "za", "zb"],
    ["ZRANGE", "za", "0", "-1", "WITHSCORES"],
    ["ZUNIONSTORE", "d5", "2", "za", "str"],
    ["ZUNIONSTORE", "d5", "0", "za"],
    ["ZINTERSTORE", "d5", "3", "za"],
    ["ZINTERSTORE", "d5", "1", "za", "WITHSCORES"],
    ["ZDIFFSTORE", "d5", "1", "za", "WEIGHTS", "1"],
    ["ZDIFFSTORE", "str", "1", "zb"],
    ["TYPE", "str"],
    # ZMPOP.
    ["ZMPOP", "2", "nokey", "zb", "MIN"],
    ["ZMPOP", "1", "zb", "MAX", "COUNT", "10"],
    ["EXISTS", "zb"],
    ["ZMPOP", "2", "nokey", "zb", "MIN"],
    ["ZMPOP", "2", "zc", "za", "MAX", "COUNT", "1"],
    ["ZMPOP", "1", "list", "MIN"],
    ["ZMPOP", "0", "za", "MIN"],
    ["ZMPOP", "-1", "za", "MIN"],
    ["ZMPOP", "x", "za", "MIN"],
    ["ZMPOP", "2", "za", "MIN"],
    ["ZMPOP", "1", "za", "MIDDLE"],
    ["ZMPOP", "1", "za", "MIN", "COUNT", "0"],
    ["ZMPOP", "1", "za", "MIN", "COUNT", "-1"],
    ["ZMPOP", "1", "za", "MIN", "COUNT"],
    ["ZMPOP", "1", "za", "MIN", "COUNT", "1", "COUNT", "2"],
    ["ZMPOP", "1", "za"],
    ["ZMPOP", "1", "zinf", "MIN", "COUNT", "2"],
]


@pytest.mark.parametrize("protocol", [2, 3])
def test_zset_setops_match_redis(gradus, redis_server, protocol):
    assert_same_replies(gradus, redis_server, SCRIPT, protocol, setup=SETUP)


def test_zset_setops_in_multi_match_redis(gradus, redis_server):
    def in_multi(server):
        conn = RawConnection(server.host, server.port, timeout=10)
        conn.call("FLUSHALL")
        conn.call("ZADD", "za", "1", "a", "2", "b")
        conn.call("MULTI")
        for cmd in (["ZUNIONSTORE", "d", "1", "za"], ["ZMPOP", "1", "za", "MIN"],
                    ["ZINTERCARD", "2", "za", "d"], ["ZMPOP", "1", "nokey", "MAX"]):
            conn.call(*cmd)
        return conn.call("EXEC")

    assert_same(gradus, redis_server, in_multi)


def test_command_info_matches_redis(gradus, redis_server):
    names = ["zunion", "zinter", "zdiff", "zunionstore", "zinterstore", "zdiffstore",
             "zintercard", "zmpop"]

    def info(server):
        conn = RawConnection(server.host, server.port, timeout=10)
        # name, arity, flags, first key, last key, step, ACL categories
        return [[entry[:2], sorted(map(str, entry[2])), entry[3:6], sorted(map(str, entry[6]))]
                for entry in conn.call("COMMAND", "INFO", *names)]

    assert_same(gradus, redis_server, info)


def test_command_getkeys_matches_redis(gradus, redis_server):
    def keys(server):
        conn = RawConnection(server.host, server.port, timeout=10)
        return [conn.call("COMMAND", "GETKEYS", *cmd) for cmd in (
            ["ZUNIONSTORE", "dst", "2", "a", "b", "WEIGHTS", "1", "2"],
            ["ZUNION", "2", "a", "b", "WITHSCORES"],
            ["ZINTERCARD", "1", "a", "LIMIT", "1"],
            ["ZMPOP", "2", "a", "b", "MIN"],
        )]

    assert_same(gradus, redis_server, keys)
