"""Lists: the same random sequences of every list command go to Gradus and to a real
redis-server (identical replies, errors included, RESP2 for even seeds and RESP3 for odd ones,
as test_differential.py does); a large list changed and queried the same way on both; redis-py
and phpredis list calls; a crash at `--durability strict` and snapshot round trips, including a
list over 8 MiB (saved as several snapshot items).

Seeds: GRADUS_DIFF_SEEDS (default 5), commands per seed: GRADUS_DIFF_COMMANDS (default 400).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from typing import List

import pytest
import redis

from resp import Map, RawConnection, Set
from servers import redis_client
from test_differential import close_enough, format_history, full_scan
from test_durability import client, dump, persistence, retry_busy

SEEDS = int(os.environ.get("GRADUS_DIFF_SEEDS", "5"))
COMMANDS = int(os.environ.get("GRADUS_DIFF_COMMANDS", "400"))

LIST_KEYS = ["l0", "l1", "l2"]
OTHER_KEYS = ["s0", "h0", "nokey"]
ALL_KEYS = LIST_KEYS + OTHER_KEYS
ELEMENTS = ["a", "b", "c", "a", "1", "-1", "42", "007", "", "hello world"]
INDEXES = ["0", "1", "2", "-1", "-2", "-3", "5", "-10", "100", "abc", "1.5"]
COUNTS = ["0", "1", "2", "3", "10", "-1", "abc"]


class ListGenerator:
    """Draws list commands from a seeded RNG over a few keys, some of other types."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def key(self) -> str:
        return self.rng.choice(LIST_KEYS) if self.rng.random() < 0.85 else self.rng.choice(ALL_KEYS)

    def element(self) -> str:
        roll = self.rng.random()
        if roll < 0.03:
            return "x" * self.rng.choice([100, 300, 5000])  # long ones make packs overflow
        return self.rng.choice(ELEMENTS)

    def end(self) -> str:
        return self.rng.choice(["LEFT", "RIGHT", "left", "Right"] * 8 + ["middle"])

    def command(self) -> List[str]:
        r = self.rng
        k = self.key()
        pick = r.randrange(28)
        if pick < 6:
            name = r.choice(["LPUSH", "RPUSH", "LPUSH", "RPUSH", "LPUSHX", "RPUSHX"])
            return [name, k] + [self.element() for _ in range(r.randrange(1, 6))]
        if pick < 9:
            name = r.choice(["LPOP", "RPOP"])
            return [name, k] if r.random() < 0.5 else [name, k, r.choice(COUNTS)]
        if pick == 9:
            return ["LLEN", k]
        if pick < 12:
            return ["LRANGE", k, r.choice(INDEXES), r.choice(INDEXES)]
        if pick == 12:
            return ["LINDEX", k, r.choice(INDEXES)]
        if pick == 13:
            return ["LSET", k, r.choice(INDEXES), self.element()]
        if pick == 14:
            where = r.choice(["BEFORE", "AFTER", "after", "before", "middle"])
            return ["LINSERT", k, where, r.choice(ELEMENTS), self.element()]
        if pick == 15:
            return ["LREM", k, r.choice(["0", "1", "2", "-1", "-2", "abc"]), r.choice(ELEMENTS)]
        if pick == 16:
            return ["LTRIM", k, r.choice(INDEXES), r.choice(INDEXES)]
        if pick < 19:
            cmd = ["LPOS", k, r.choice(ELEMENTS)]
            for _ in range(r.randrange(0, 3)):
                opt = r.choice(["RANK", "COUNT", "MAXLEN", "rank", "BOGUS"])
                if opt.upper() == "RANK":
                    cmd += [opt, r.choice(["1", "2", "-1", "-2", "0", "abc", "-9223372036854775807"])]
                elif opt == "BOGUS":
                    cmd += [opt]
                else:
                    cmd += [opt, r.choice(["0", "1", "2", "-1", "x"])]
            return cmd
        if pick < 21:
            return ["LMOVE", k, self.key(), self.end(), self.end()]
        if pick == 21:
            return ["RPOPLPUSH", k, self.key()]
        if pick < 24:
            keys = [self.key() for _ in range(r.randrange(1, 4))]
            numkeys = str(len(keys)) if r.random() < 0.9 else r.choice(["0", "-1", "x", "9"])
            cmd = ["LMPOP", numkeys] + keys + [self.end()]
            if r.random() < 0.5:
                cmd += ["COUNT", r.choice(["1", "2", "5", "0", "-1", "x"])]
            if r.random() < 0.05:
                cmd += ["COUNT", "1"]
            return cmd
        if pick == 24:
            return r.choice([["TYPE", k], ["EXISTS", k], ["DEL", k], ["SCANALL", "TYPE", "list"]])
        if pick == 25:
            return r.choice([["SET", "s0", "v"], ["HSET", "h0", "f", "v"], ["SET", k, "v"]])
        if pick == 26:
            # Many long elements at once: a list kept in several packs.
            return [r.choice(["RPUSH", "LPUSH"]), r.choice(LIST_KEYS)] + ["y" * 200] * r.randrange(30, 90)
        return r.choice([
            ["LPUSH", k], ["LPOP"], ["LPOP", k, "1", "2"], ["LLEN"], ["LRANGE", k, "0"], ["LINDEX", k],
            ["LSET", k, "0"], ["LINSERT", k, "BEFORE", "a"], ["LREM", k, "0"], ["LTRIM", k, "0"],
            ["LPOS", k], ["LMOVE", k, k, "LEFT"], ["RPOPLPUSH", k], ["LMPOP", "1", k], ["RPUSHX", k],
        ])

    def step(self) -> List[List[str]]:
        if self.rng.random() < 0.05:
            body = [c for c in (self.command() for _ in range(self.rng.randrange(1, 5)))
                    if c[0] != "SCANALL"]
            return [["MULTI"]] + body + [["EXEC"]]
        return [self.command()]


def run_sequence(ours: RawConnection, theirs: RawConnection, steps, label: str) -> None:
    history: list = []
    queued: List[List[str]] = []
    index = 0
    for step in steps:
        for cmd in step:
            index += 1
            if cmd[0] == "SCANALL":
                expected, actual = full_scan(theirs, cmd), full_scan(ours, cmd)
            else:
                expected, actual = theirs.call(*cmd), ours.call(*cmd)
            history.append((index, cmd, expected, actual))
            name = cmd[0].upper()
            if name == "MULTI":
                queued, ok = [], expected == actual
            elif name == "EXEC" and isinstance(expected, list) and isinstance(actual, list):
                ok = len(expected) == len(actual) == len(queued) and all(
                    close_enough(q, e, a) for q, e, a in zip(queued, expected, actual))
                queued = []
            else:
                ok = close_enough(cmd, expected, actual)
                queued.append(cmd)
            if not ok:
                pytest.fail(
                    f"list mismatch ({label}) at command #{index}: {cmd[:8]}\n"
                    f"  redis:  {expected!r}\n  gradus: {actual!r}\n"
                    f"history tail (!! marks the mismatch):\n{format_history(history)}",
                    pytrace=False,
                )


@pytest.mark.parametrize("seed", range(SEEDS))
def test_list_commands_answer_like_redis(seed, gradus, redis_server):
    protocol = 2 if seed % 2 == 0 else 3
    gen = ListGenerator(1000 + seed)
    ours = RawConnection(gradus.host, gradus.port, timeout=10)
    theirs = RawConnection(redis_server.host, redis_server.port, timeout=10)
    try:
        if protocol == 3:
            for conn in (ours, theirs):
                assert isinstance(conn.call("HELLO", "3"), Map)
        run_sequence(ours, theirs, (gen.step() for _ in range(COMMANDS)), f"seed {seed}, RESP{protocol}")
        # Both end with the same lists.
        for key in LIST_KEYS:
            assert ours.call("LRANGE", key, "0", "-1") == theirs.call("LRANGE", key, "0", "-1"), key
    finally:
        ours.close()
        theirs.close()


def test_list_generator_is_deterministic():
    a, b = ListGenerator(3), ListGenerator(3)
    assert [a.step() for _ in range(300)] == [b.step() for _ in range(300)]


@pytest.mark.parametrize("protocol", [2, 3])
def test_a_large_list_answers_like_redis(gradus, redis_server, protocol):
    """A list of 30 000 elements (thousands of packs): pushes and pops at both ends, inserts,
    sets, removals, trims and every read, at random positions, give Redis' replies."""
    rng = random.Random(protocol)
    ours = RawConnection(gradus.host, gradus.port, timeout=10)
    theirs = RawConnection(redis_server.host, redis_server.port, timeout=10)
    try:
        for conn in (ours, theirs):
            if protocol == 3:
                conn.call("HELLO", "3")
            for start in range(0, 30_000, 1_000):
                conn.call("RPUSH", "big", *[f"e{i % 500}-{'z' * (i % 37)}" for i in range(start, start + 1_000)])

        def position() -> str:
            return str(rng.randrange(-31_000, 31_000))

        def element() -> str:
            i = rng.randrange(2_000)
            return f"e{i % 500}-{'z' * (i % 37)}"

        steps = []
        for _ in range(800):
            steps.append([rng.choice([
                ["LPUSH", "big", element(), element()],
                ["RPUSH", "big", element()],
                ["LPOP", "big", str(rng.randrange(5))],
                ["RPOP", "big"],
                ["LINDEX", "big", position()],
                ["LSET", "big", position(), element()],
                ["LINSERT", "big", rng.choice(["BEFORE", "AFTER"]), element(), element()],
                ["LREM", "big", rng.choice(["1", "-1", "3", "-3"]), element()],
                ["LRANGE", "big", position(), position()],
                ["LRANGE", "big", "-5", "-1"],
                ["LPOS", "big", element(), "RANK", rng.choice(["1", "3", "-1", "-4"]), "COUNT", "3"],
                ["LPOS", "big", element(), "MAXLEN", "1000"],
                ["LLEN", "big"],
                ["LMOVE", "big", "big", rng.choice(["LEFT", "RIGHT"]), rng.choice(["LEFT", "RIGHT"])],
                ["LMOVE", "big", "other", "LEFT", "RIGHT"],
                ["LMPOP", "2", "missing", "big", "RIGHT", "COUNT", "4"],
            ])])
        steps.append([["LTRIM", "big", "100", "-100"]])
        steps.append([["LRANGE", "big", "0", "-1"]])
        steps.append([["LTRIM", "big", "5", "40"]])
        steps.append([["LRANGE", "big", "0", "-1"]])
        steps.append([["LRANGE", "other", "0", "-1"]])
        run_sequence(ours, theirs, steps, f"large list, RESP{protocol}")
    finally:
        ours.close()
        theirs.close()


# COMMAND GETKEYS / GETKEYSANDFLAGS of SORT and SORT_RO, and the keys Redis (7.0 and 7.2
# alike: `sortGetKeys`) finds.
SORT_GETKEYS = [
    (("sort", "abc", "store", "def"), [b"abc", b"def"]),
    (("sort", "abc", "BY", "w_*", "GET", "#", "GET", "h_*->f", "STORE", "def"), [b"abc", b"def"]),
    (("sort", "abc", "store", "d1", "store", "d2"), [b"abc", b"d2"]),
    (("sort", "abc", "limit", "0", "1", "alpha", "desc", "store", "def"), [b"abc", b"def"]),
    (("sort", "abc", "limit", "store", "x"), [b"abc"]),
    (("sort", "abc", "get", "store"), [b"abc"]),
    (("sort", "abc", "store"), [b"abc"]),
    (("sort", "abc"), [b"abc"]),
    (("sort_ro", "abc", "by", "w_*", "get", "#"), [b"abc"]),
]


@pytest.mark.parametrize("protocol", [2, 3])
def test_command_getkeys_finds_the_sort_store_key(gradus, redis_server, protocol):
    """Regression: COMMAND GETKEYS SORT abc STORE def answered only `abc`; Redis reports the
    STORE destination too (the last STORE's; BY and GET patterns name no key), with the flags
    `OW update` in GETKEYSANDFLAGS. Checked against the expected keys and redis-server."""
    from differential import assert_same_replies

    script = []
    for cmd, _ in SORT_GETKEYS:
        script.append(("COMMAND", "GETKEYS", *cmd))
        script.append(("COMMAND", "GETKEYSANDFLAGS", *cmd))
    replies = assert_same_replies(gradus, redis_server, script, protocol)
    for (cmd, keys), found, flagged in zip(SORT_GETKEYS, replies[::2], replies[1::2]):
        assert found == keys, cmd
        assert [entry[0] for entry in flagged] == keys, cmd
    with_store = replies[1][1][1]
    flags = with_store.items if isinstance(with_store, Set) else with_store
    assert sorted(getattr(f, "value", f) for f in flags) == [b"OW", b"update"], with_store


@pytest.mark.parametrize("protocol", [2, 3])
def test_redis_py_list_calls(gradus, protocol):
    r = redis_client(gradus, protocol)
    try:
        assert r.rpush("q", "a", "b", "c") == 3
        assert r.lpush("q", "z") == 4
        assert r.lpushx("nope", "x") == 0 and r.exists("nope") == 0
        assert r.rpushx("q", "d") == 5
        assert r.lrange("q", 0, -1) == [b"z", b"a", b"b", b"c", b"d"]
        assert r.llen("q") == 5 and r.type("q") == b"list"
        assert r.lindex("q", -1) == b"d" and r.lindex("q", 99) is None
        assert r.lset("q", 1, "A") is True
        assert r.linsert("q", "AFTER", "A", "A2") == 6
        assert r.linsert("q", "BEFORE", "missing", "x") == -1
        assert r.lpos("q", "b") == 3
        assert r.lpos("q", "nothing") is None
        assert r.lpos("q", "A", count=0) == [1]
        assert r.lrem("q", 0, "A2") == 1
        assert r.lpop("q") == b"z" and r.rpop("q", 2) == [b"d", b"c"]
        assert r.lpop("missing") is None and r.lpop("missing", 2) is None
        assert r.rpoplpush("q", "q2") == b"b"
        assert r.lmove("q", "q2", "LEFT", "RIGHT") == b"A"
        assert r.exists("q") == 0
        assert r.lrange("q2", 0, -1) == [b"b", b"A"]
        assert r.lmpop(2, "q", "q2", direction="RIGHT", count=5) == [b"q2", [b"A", b"b"]]
        assert r.lmpop(1, "q2", direction="LEFT") is None
        r.rpush("t", *range(10))
        assert r.ltrim("t", 2, -3) is True and r.lrange("t", 0, -1) == [str(i).encode() for i in range(2, 8)]
        assert list(r.scan_iter(_type="list")) == [b"t"]
        r.set("s", "x")
        with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
            r.lpush("s", "a")
        with pytest.raises(redis.exceptions.ResponseError, match="no such key"):
            r.lset("missing", 0, "x")
        with pytest.raises(redis.exceptions.ResponseError, match="index out of range"):
            r.lset("t", 100, "x")
    finally:
        r.close()


PHP_LISTS = r"""<?php
$r = new Redis();
$r->connect('127.0.0.1', (int)$argv[1]);
$out = [];
$out[] = $r->rPush('pl', 'a', 'b', 'c');
$out[] = $r->lPush('pl', 'z');
$out[] = $r->lRange('pl', 0, -1);
$out[] = $r->lLen('pl');
$out[] = $r->lIndex('pl', -1);
$out[] = $r->lSet('pl', 0, 'Z');
$out[] = $r->lInsert('pl', Redis::AFTER, 'a', 'a2');
$out[] = $r->lRem('pl', 'a2', 0);
$out[] = $r->lPop('pl');
$out[] = $r->rPop('pl');
$out[] = $r->rPopLPush('pl', 'pl2');
$out[] = $r->rawCommand('LMOVE', 'pl', 'pl2', 'LEFT', 'RIGHT');  // phpredis 5 has no lMove
$out[] = $r->lRange('pl2', 0, -1);
$out[] = $r->rawCommand('LPOS', 'pl2', 'a');
$out[] = $r->lTrim('pl2', 0, 0);
$out[] = $r->lRange('pl2', 0, -1);
$out[] = $r->exists('pl');
$out[] = $r->type('pl2') == Redis::REDIS_LIST;
echo json_encode($out);
"""


def test_phpredis_list_calls(gradus, tmp_path):
    if shutil.which("php") is None or "redis" not in subprocess.run(
            ["php", "-m"], capture_output=True, text=True).stdout.lower().split():
        pytest.skip("php-cli with php-redis not installed")
    script = tmp_path / "lists.php"
    script.write_text(PHP_LISTS)
    proc = subprocess.run(["php", str(script), str(gradus.port)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert json.loads(proc.stdout) == [
        3, 4, ["z", "a", "b", "c"], 4, "c", True, 5, 1, "Z", "c", "b", "a", ["b", "a"], 1, True, ["b"], 0, True,
    ]


def _list_workload(server) -> None:
    r = client(server)
    r.rpush("w:1", *[f"v{i}" for i in range(50)])
    r.lpush("w:1", "head")
    r.rpushx("w:1", "tail")
    r.lpushx("w:none", "x")
    r.lpop("w:1", 3)
    r.rpop("w:1")
    r.lset("w:1", 5, "set")
    r.linsert("w:1", "BEFORE", "v10", "inserted")
    r.lrem("w:1", 1, "v11")
    r.ltrim("w:1", 1, -2)
    r.rpush("w:big", *["p" * 300] * 200)  # several packs
    r.lmove("w:big", "w:moved", "LEFT", "RIGHT")
    r.rpoplpush("w:1", "w:moved")
    r.lmpop(2, "w:none", "w:big", direction="RIGHT", count=7)
    r.rpush("w:gone", "a")
    r.lpop("w:gone")
    r.rpush("w:ttl", "a", "b")
    r.expire("w:ttl", 5000)
    r.set("w:str", "x")
    pipe = r.pipeline(transaction=True)
    pipe.rpush("w:tx", "1", "2").lmove("w:tx", "w:tx", "LEFT", "RIGHT").lpush("w:tx", "0")
    pipe.execute()
    r.close()


def test_list_writes_survive_a_crash_at_strict_and_a_snapshot(gradus_factory):
    server = gradus_factory("--durability", "strict")
    _list_workload(server)
    expected = dump(server)
    assert expected[(0, b"w:1")][0] == "list" and (0, b"w:gone") not in expected
    assert expected[(0, b"w:ttl")][2] is True
    server.crash_restart()  # every write above was acknowledged at strict
    assert dump(server) == expected
    r = client(server)
    assert retry_busy(r.save) is True
    r.close()
    server.crash_restart()
    assert dump(server) == expected
    r = client(server)
    assert persistence(r)["gradus_recovery_snapshot_items"] == len(expected)
    r.close()


def test_a_list_over_8_mib_is_saved_in_parts_and_comes_back_whole(gradus_factory):
    server = gradus_factory()
    r = client(server)
    chunk = [b"element %06d " % i + b"q" * 240 for i in range(40_000)]  # ~10 MiB
    for start in range(0, len(chunk), 5_000):
        r.rpush("huge", *chunk[start:start + 5_000])
    r.rpush("small", "a", "b", "c")
    r.expire("huge", 3600)
    assert retry_busy(r.save) is True
    r.close()
    server.stop()
    server.start()
    r = client(server)
    assert persistence(r)["gradus_recovery_snapshot_items"] >= 3  # huge in two parts at least, small
    assert r.llen("huge") == len(chunk)
    assert r.lrange("huge", 0, -1) == chunk
    assert 3500 < r.ttl("huge") <= 3600
    assert r.lrange("small", 0, -1) == [b"a", b"b", b"c"]
    r.close()
