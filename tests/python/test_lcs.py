"""LCS against a real redis-server: the common subsequence, LEN, IDX with MINMATCHLEN and
WITHMATCHLEN (a map in RESP3, a flat array in RESP2), missing keys as empty strings, and the
error texts (keys of another type, LEN with IDX, syntax, a non-integer MINMATCHLEN, arity).
"""

from __future__ import annotations

import random

import pytest

from differential import assert_same, assert_same_replies
from resp import RawConnection

SETUP = [
    ["SET", "a", "ohmytext"],
    ["SET", "b", "mynewtext"],
    ["SET", "c", "aaaa"],
    ["SET", "empty", ""],
    ["SET", "num", "12345"],
    ["SET", "num2", "2468"],
    ["RPUSH", "list", "x"],
    ["SADD", "set", "x"],
]

SCRIPT = [
    ["LCS", "a", "b"],
    ["LCS", "b", "a"],
    ["LCS", "a", "b", "LEN"],
    ["LCS", "a", "b", "IDX"],
    ["LCS", "a", "b", "IDX", "WITHMATCHLEN"],
    ["LCS", "a", "b", "IDX", "MINMATCHLEN", "4"],
    ["LCS", "a", "b", "IDX", "MINMATCHLEN", "4", "WITHMATCHLEN"],
    ["LCS", "a", "b", "IDX", "MINMATCHLEN", "-5"],
    ["LCS", "a", "b", "IDX", "MINMATCHLEN", "100"],
    ["LCS", "a", "b", "MINMATCHLEN", "2"],
    ["LCS", "a", "b", "WITHMATCHLEN"],
    ["LCS", "a", "b", "len", "len"],
    ["LCS", "a", "a", "IDX"],
    ["LCS", "a", "c"],
    ["LCS", "c", "a", "IDX", "WITHMATCHLEN"],
    ["LCS", "num", "num2", "IDX", "WITHMATCHLEN"],
    ["LCS", "a", "nokey"],
    ["LCS", "nokey", "nokey2", "IDX"],
    ["LCS", "nokey", "a", "LEN"],
    ["LCS", "empty", "a", "IDX"],
    # Errors.
    ["LCS", "a", "b", "LEN", "IDX"],
    ["LCS", "a", "b", "IDX", "LEN"],
    ["LCS", "a", "b", "MINMATCHLEN"],
    ["LCS", "a", "b", "MINMATCHLEN", "x"],
    ["LCS", "a", "b", "FOO"],
    ["LCS", "a", "list"],
    ["LCS", "set", "a"],
    ["LCS", "list", "a", "LEN", "IDX"],
    ["LCS", "a", "b", "LEN", "IDX", "FOO"],
    ["LCS", "a"],
]


@pytest.mark.parametrize("protocol", [2, 3])
def test_lcs_matches_redis(gradus, redis_server, protocol):
    assert_same_replies(gradus, redis_server, SCRIPT, protocol, setup=SETUP)


@pytest.mark.parametrize("seed", range(3))
def test_lcs_of_random_strings_matches_redis(gradus, redis_server, seed):
    rng = random.Random(seed)
    setup, script = [], []
    for n in range(20):
        x = "".join(rng.choice("abc") for _ in range(rng.randint(0, 30)))
        y = "".join(rng.choice("abc") for _ in range(rng.randint(0, 30)))
        setup += [["SET", f"x{n}", x], ["SET", f"y{n}", y]]
        script += [["LCS", f"x{n}", f"y{n}"], ["LCS", f"x{n}", f"y{n}", "IDX", "WITHMATCHLEN"],
                   ["LCS", f"x{n}", f"y{n}", "IDX", "MINMATCHLEN", "2"]]
    assert_same_replies(gradus, redis_server, script, 3, setup=setup)


def test_lcs_table_over_proto_max_bulk_len_is_refused(gradus, redis_server):
    def attempt(server):
        conn = RawConnection(server.host, server.port, timeout=10)
        conn.call("CONFIG", "SET", "proto-max-bulk-len", "1048576")
        conn.call("SET", "big1", "x" * 1000)
        conn.call("SET", "big2", "y" * 1000)
        return conn.call("LCS", "big1", "big2", "LEN")

    assert_same(gradus, redis_server, attempt)


def test_lcs_command_info_matches_redis(gradus, redis_server):
    def info(server):
        conn = RawConnection(server.host, server.port, timeout=10)
        entry = conn.call("COMMAND", "INFO", "lcs")[0]
        return [entry[:2], sorted(map(str, entry[2])), entry[3:6], sorted(map(str, entry[6]))]

    assert_same(gradus, redis_server, info)
