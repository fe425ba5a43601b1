"""Bitmaps (SETBIT GETBIT BITCOUNT BITPOS BITOP BITFIELD BITFIELD_RO) and HyperLogLogs (PFADD
PFCOUNT PFMERGE) against a real redis-server, in the style of test_differential.py: seeded
random sequences go to both servers and every reply must be identical (type-exact, errors
included). After each sequence every key's raw bytes (GET) are compared too, so the HyperLogLog
encodings (sparse and dense, cached cardinality) must match Redis byte for byte.

Both servers run with the same proto-max-bulk-len (4 MiB, set on both: the default, 512 MB, would
let a random offset make half-gigabyte strings), which bounds bit offsets. Seeds: GRADUS_DIFF_SEEDS (default 5), commands per seed GRADUS_DIFF_COMMANDS (default
400); even seeds speak RESP2, odd seeds RESP3.

The crash test at the end writes with every new write command at `--durability strict`, kills
the server with SIGKILL and checks that the restarted server holds the same bytes.
"""

from __future__ import annotations

import os
import random
from typing import List

import pytest

from resp import Err, Map, RawConnection
from test_differential import format_history

SEEDS = int(os.environ.get("GRADUS_DIFF_SEEDS", "5"))
COMMANDS = int(os.environ.get("GRADUS_DIFF_COMMANDS", "400"))

BIT_KEYS = ["b0", "b1", "b2"]
HLL_KEYS = ["p0", "p1", "p2", "p3"]
OTHER_KEYS = ["s0", "h0", "nokey"]
ALL_KEYS = BIT_KEYS + HLL_KEYS + OTHER_KEYS
OFFSETS = ["0", "1", "7", "8", "15", "63", "100", "1000", "-1", "x", "4294967296", "33554431", "33554432"]
RANGE_ENDS = ["0", "1", "2", "-1", "-2", "-3", "5", "-100", "100", "x", "9", "17", "-9"]
FIELD_TYPES = ["u1", "u4", "u8", "u16", "u63", "i1", "i5", "i8", "i16", "i64", "u64", "i65", "u0", "x8", "i"]
FIELD_OFFSETS = ["0", "3", "7", "13", "64", "#0", "#1", "#3", "-1", "#-1", "x"]
FIELD_VALUES = ["0", "1", "-1", "5", "100", "127", "128", "255", "-128", "1000", "9223372036854775807",
                "-9223372036854775808", "x"]


class Generator:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        # A pool of elements: small enough to repeat, large enough to make HLLs dense.
        self.elements = [f"e{i}" for i in range(4000)]

    def key(self, preferred: List[str]) -> str:
        return self.rng.choice(preferred) if self.rng.random() < 0.85 else self.rng.choice(ALL_KEYS)

    def bitmap_cmd(self) -> List[List[str]]:
        rng, k = self.rng, self.key(BIT_KEYS)
        choice = rng.randrange(14)
        if choice in (0, 1):
            value = rng.choice(["0", "1", "1", "2", "-1", "x"])
            return [["SETBIT", k, rng.choice(OFFSETS), value]]
        if choice == 2:
            return [["GETBIT", k, rng.choice(OFFSETS)]]
        if choice in (3, 4):
            cmd = ["BITCOUNT", k]
            n = rng.choice([0, 1, 2, 2, 3, 4])
            if n >= 2:
                cmd += [rng.choice(RANGE_ENDS), rng.choice(RANGE_ENDS)]
                if n >= 3:
                    cmd.append(rng.choice(["BIT", "BYTE", "bit", "word"]))
                if n == 4:
                    cmd.append("BIT")
            elif n == 1:
                cmd.append(rng.choice(RANGE_ENDS))
            return [cmd]
        if choice in (5, 6):
            cmd = ["BITPOS", k, rng.choice(["0", "1", "1", "0", "2", "x"])]
            n = rng.choice([0, 1, 2, 3, 3, 4])
            args = [rng.choice(RANGE_ENDS), rng.choice(RANGE_ENDS), rng.choice(["BIT", "BYTE", "bit", "nope"]), "BIT"]
            return [cmd + args[:n]]
        if choice == 7:
            op = rng.choice(["AND", "OR", "XOR", "NOT", "and", "nand"])
            srcs = [self.key(BIT_KEYS) for _ in range(rng.choice([1, 1, 2, 3]))]
            return [["BITOP", op, self.key(BIT_KEYS)] + srcs]
        if choice in (8, 9, 10):
            return [["BITFIELD", k] + self.field_ops(rng.randrange(0, 4), writes=True)]
        if choice == 11:
            return [["BITFIELD_RO", k] + self.field_ops(rng.randrange(0, 3), writes=rng.random() < 0.2)]
        if choice == 12:
            return [["SET", k, rng.choice(["", "abc", "\xff\x00\x0f", "1234567890", "foobar"])]]
        return [["GET", k]]

    def field_ops(self, n: int, writes: bool) -> List[str]:
        rng, out = self.rng, []
        for _ in range(n):
            kinds = ["GET"] + (["SET", "INCRBY", "INCRBY", "OVERFLOW"] if writes else [])
            kind = rng.choice(kinds)
            if rng.random() < 0.03:
                kind = rng.choice(["BOGUS", "GET"])
                out += [kind, rng.choice(FIELD_TYPES)]
                continue
            if kind == "OVERFLOW":
                out += ["OVERFLOW", rng.choice(["WRAP", "SAT", "FAIL", "sat", "fail", "nope"])]
                continue
            typ = rng.choice(FIELD_TYPES[:10]) if rng.random() < 0.9 else rng.choice(FIELD_TYPES)
            off = rng.choice(FIELD_OFFSETS[:8]) if rng.random() < 0.9 else rng.choice(FIELD_OFFSETS)
            out += [kind, typ, off]
            if kind != "GET":
                out.append(rng.choice(FIELD_VALUES[:9]) if rng.random() < 0.85 else rng.choice(FIELD_VALUES))
        return out

    def hll_cmd(self) -> List[List[str]]:
        rng, k = self.rng, self.key(HLL_KEYS)
        choice = rng.randrange(10)
        if choice in (0, 1, 2, 3):
            n = rng.choice([0, 1, 1, 3, 10, 50, 300])
            return [["PFADD", k] + [rng.choice(self.elements) for _ in range(n)]]
        if choice in (4, 5, 6):
            return [["PFCOUNT"] + [self.key(HLL_KEYS) for _ in range(rng.choice([1, 1, 2, 3]))]]
        if choice == 7:
            return [["PFMERGE", self.key(HLL_KEYS)] + [self.key(HLL_KEYS) for _ in range(rng.choice([0, 1, 2, 3]))]]
        if choice == 8:
            return [["GET", k]]
        # Strings that are not HyperLogLogs, and sparse ones with no registers (corrupt): one
        # with a valid cached cardinality of 5, one whose cache is stale.
        return [["SET", k, rng.choice([
            "HYLL", "not an hll", "HYLL" + "\x00" * 12,
            "HYLL\x01\x00\x00\x00\x05" + "\x00" * 7, "HYLL\x01" + "\x00" * 9 + "\x80",
        ])]]

    def other_cmd(self) -> List[List[str]]:
        rng = self.rng
        return [rng.choice([
            ["SET", "s0", rng.choice(["1", "abc", "\x80"])], ["HSET", "h0", "f", "v"], ["DEL", rng.choice(ALL_KEYS)],
            ["SETBIT"], ["GETBIT", "b0"], ["BITCOUNT"], ["BITPOS", "b0"], ["BITOP", "AND", "b0"], ["BITFIELD"],
            ["PFADD"], ["PFCOUNT"], ["PFMERGE"], ["EXPIRE", rng.choice(BIT_KEYS + HLL_KEYS), "100000"],
        ])]

    def next_step(self) -> List[List[str]]:
        roll = self.rng.random()
        if roll < 0.05:
            body = self.bitmap_cmd() + self.hll_cmd()
            return [["MULTI"]] + body + [["EXEC"]]
        family = self.rng.choices([self.bitmap_cmd, self.hll_cmd, self.other_cmd], weights=[50, 40, 6])[0]
        return family()


def _pair(_servers, gradus):
    redis_server = _servers.start_redis("--proto-max-bulk-len", "4mb")
    ours = RawConnection(gradus.host, gradus.port, timeout=10)
    assert ours.call("CONFIG", "SET", "proto-max-bulk-len", "4mb") is not None
    return ours, RawConnection(redis_server.host, redis_server.port, timeout=10)


def _compare_keys(ours, theirs, keys):
    for key in keys:
        for cmd in (["TYPE", key], ["GET", key], ["PTTL", key]):
            expected, actual = theirs.call(*cmd), ours.call(*cmd)
            if cmd[0] == "PTTL" and isinstance(expected, int) and expected > 0:
                assert isinstance(actual, int) and abs(actual - expected) < 5000, (cmd, expected, actual)
                continue
            assert actual == expected, f"{cmd}:\n  redis:  {expected!r}\n  gradus: {actual!r}"


@pytest.mark.parametrize("seed", range(SEEDS))
def test_bitmaps_and_hyperloglogs_match_redis(seed, _servers, gradus):
    protocol = 2 if seed % 2 == 0 else 3
    ours, theirs = _pair(_servers, gradus)
    gen = Generator(seed)
    try:
        if protocol == 3:
            for conn in (ours, theirs):
                assert isinstance(conn.call("HELLO", "3"), Map)
        history: list = []
        index = 0
        queued: List[List[str]] = []
        for step in range(COMMANDS):
            for cmd in gen.next_step():
                index += 1
                expected, actual = theirs.call(*cmd), ours.call(*cmd)
                history.append((index, cmd, expected, actual))
                name = cmd[0].upper()
                if name == "MULTI":
                    queued = []
                elif name != "EXEC":
                    queued.append(cmd)
                ok = expected == actual
                if name == "EXPIRE" or (name == "EXEC" and any(q[0] == "EXPIRE" for q in queued)):
                    ok = type(expected) is type(actual)
                if not ok:
                    pytest.fail(
                        f"mismatch: seed={seed} RESP{protocol} step={step} #{index}: {cmd}\n"
                        f"  redis:  {expected!r}\n  gradus: {actual!r}\n{format_history(history)}",
                        pytrace=False,
                    )
        _compare_keys(ours, theirs, ALL_KEYS)
    finally:
        ours.close()
        theirs.close()


def test_offset_limits_follow_proto_max_bulk_len(_servers, gradus):
    """The byte an offset names must be below proto-max-bulk-len; both servers at 1 MiB."""
    ours, theirs = _pair(_servers, gradus)
    try:
        for conn in (ours, theirs):
            assert conn.call("CONFIG", "SET", "proto-max-bulk-len", "1mb") is not None
        limit_bits = 1024 * 1024 * 8
        cases = [
            ["SETBIT", "k", str(limit_bits - 1), "1"],
            ["SETBIT", "k", str(limit_bits), "1"],
            ["GETBIT", "k", str(limit_bits)],
            ["GETBIT", "k", str(limit_bits - 1)],
            ["BITFIELD", "k", "SET", "u8", str(limit_bits - 8), "255"],
            ["BITFIELD", "k", "GET", "i64", str(limit_bits)],
            ["BITFIELD", "k", "GET", "u8", f"#{limit_bits // 8}"],
            ["BITFIELD", "k", "GET", "u8", f"#{limit_bits // 8 - 1}"],
            ["SETBIT", "k", "4294967296", "1"],
            ["SETBIT", "k", "18446744073709551616", "1"],
            ["BITCOUNT", "k"],
            ["BITPOS", "k", "1", "-1"],
            ["STRLEN", "k"],
        ]
        for cmd in cases:
            expected, actual = theirs.call(*cmd), ours.call(*cmd)
            assert actual == expected, f"{cmd}:\n  redis:  {expected!r}\n  gradus: {actual!r}"
    finally:
        ours.close()
        theirs.close()


def test_promotion_to_dense_matches_redis_byte_for_byte(_servers, gradus):
    """One HyperLogLog grown element by element through the sparse encoding, across the
    promotion to dense, with the same bytes as Redis after every step; then again with a
    smaller hll-sparse-max-bytes set by CONFIG SET on both servers."""
    ours, theirs = _pair(_servers, gradus)
    rng = random.Random(5)
    try:
        for limit, key in (("3000", "grow"), ("300", "grow-small")):
            for conn in (ours, theirs):
                assert conn.call("CONFIG", "SET", "hll-sparse-max-bytes", limit) is not None
            encodings = set()
            for step in range(120):
                batch = [str(rng.randrange(100_000)) for _ in range(rng.choice([1, 10, 40]))]
                for cmd in (["PFADD", key, *batch], ["GET", key], ["PFCOUNT", key], ["GET", key]):
                    expected, actual = theirs.call(*cmd), ours.call(*cmd)
                    assert actual == expected, f"step {step} {cmd[:3]}:\n  redis:  {expected!r}\n  gradus: {actual!r}"
                encodings.add(len(theirs.call("GET", key)) == 12304)
            assert encodings == {False, True}, "the key went from sparse to dense"
            for cmd in (["PFMERGE", "m", key, "grow"], ["GET", "m"], ["PFCOUNT", "m", key], ["PFCOUNT", "m"]):
                expected, actual = theirs.call(*cmd), ours.call(*cmd)
                assert actual == expected, cmd
        assert ours.call("CONFIG", "GET", "hll-sparse-max-bytes") == theirs.call("CONFIG", "GET", "hll-sparse-max-bytes")
    finally:
        ours.close()
        theirs.close()


@pytest.mark.gradus_only
def test_bitmap_and_hll_writes_survive_a_strict_crash(gradus_factory):
    """SETBIT, BITFIELD, BITOP, PFADD, PFMERGE and the cache PFCOUNT stores, acknowledged at
    strict, then kill -9: the restarted server holds the same bytes (and TTLs)."""
    server = gradus_factory("--durability", "strict")
    conn = RawConnection(server.host, server.port, timeout=10)
    rng = random.Random(9)
    keys = ["bits", "bits2", "fields", "op", "hll1", "hll2", "merged", "counted"]
    for i in range(300):
        conn.call("SETBIT", "bits", str(rng.randrange(5000)), str(rng.randrange(2)))
        conn.call("SETBIT", "bits2", str(rng.randrange(3000)), "1")
        conn.call("BITFIELD", "fields", "OVERFLOW", rng.choice(["WRAP", "SAT", "FAIL"]),
                  "INCRBY", rng.choice(["i5", "u7", "i64"]), f"#{rng.randrange(40)}", str(rng.randrange(-300, 300)),
                  "SET", "u8", str(rng.randrange(400)), str(rng.randrange(256)))
        conn.call("PFADD", rng.choice(["hll1", "hll2"]), *[f"x{rng.randrange(20_000)}" for _ in range(10)])
        if i % 50 == 0:
            conn.call("PFCOUNT", "hll1")
    conn.call("BITOP", "XOR", "op", "bits", "bits2")
    conn.call("PFMERGE", "merged", "hll1", "hll2")
    conn.call("PFADD", "counted", "a", "b", "c")
    assert conn.call("PFCOUNT", "counted") == 3  # stores the cache: a write in disguise
    conn.call("EXPIRE", "bits2", "100000")
    before = {k: (conn.call("GET", k), conn.call("TTL", k) > 0) for k in keys}
    assert len(before["merged"][0]) == 12304 and before["counted"][0][15] == 0, "dense merge, valid cache"
    conn.close()
    server.crash_restart()
    conn = RawConnection(server.host, server.port, timeout=10)
    try:
        after = {k: (conn.call("GET", k), conn.call("TTL", k) > 0) for k in keys}
        assert after == before
    finally:
        conn.close()
