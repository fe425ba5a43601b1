"""Interoperability of gradus-proto's DUMP/RESTORE codec (crates/proto/src/rdb.rs) with a real
redis-server, through the `rdb_tool` example (hex payloads <-> JSON lines).

- Redis -> codec: values of every type and size class are created in redis-server (small and
  large lists, a list with LZF-compressed quicklist nodes, integer and string sets on both sides
  of the intset limit, sorted sets and hashes on both sides of the listpack limits, integer and
  LZF-compressed strings); each DUMP reply must decode to exactly what Redis reports for the key.
- codec -> Redis: the codec's payloads for the same values are RESTOREd into redis-server and must
  read back identically; for values whose encoding is deterministic they must equal Redis' own
  DUMP byte for byte, and the others must be about as small.
- Errors: a payload with a changed byte is refused by both with the footer error, and a payload
  with a valid footer but a broken object is refused by both as bad data.

Skips when redis-server is not installed.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
import redis

from servers import REPO_ROOT, redis_client, target_dir

INF = float("inf")


@pytest.fixture(scope="module")
def rdb_tool() -> Path:
    cargo = shutil.which("cargo") or str(Path.home() / ".cargo" / "bin" / "cargo")
    proc = subprocess.run(
        [cargo, "build", "-q", "-p", "gradus-proto", "--example", "rdb_tool"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    path = target_dir() / "debug" / "examples" / "rdb_tool"
    if proc.returncode != 0 or not path.is_file():
        pytest.fail(f"building the rdb_tool example failed:\n{proc.stdout[-4000:]}", pytrace=False)
    return path


def run_tool(tool: Path, mode: str, lines: List[str]) -> List[str]:
    proc = subprocess.run(
        [str(tool), mode], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert len(out) == len(lines), (len(out), len(lines))
    return out


def decode(tool: Path, payloads: List[bytes]) -> List[dict]:
    return [json.loads(line) for line in run_tool(tool, "decode", [p.hex() for p in payloads])]


def encode(tool: Path, values: List[Tuple[str, object]]) -> List[bytes]:
    lines = []
    for kind, v in values:
        if kind == "string":
            j = v.hex()
        elif kind in ("list", "set"):
            j = [e.hex() for e in v]
        elif kind == "zset":
            j = [[m.hex(), repr(s)] for m, s in v]
        else:
            j = [[f.hex(), x.hex()] for f, x in v]
        lines.append(json.dumps({"type": kind, "value": j}))
    out = run_tool(tool, "encode", lines)
    for line in out:
        assert not line.startswith("error"), line
    return [bytes.fromhex(line) for line in out]


def normal(kind: str, v) -> object:
    """A comparable form: sets as sets, sorted sets and hashes as dicts."""
    if kind == "set":
        assert len(set(v)) == len(v), "duplicate set members"
        return set(v)
    if kind in ("zset", "hash"):
        d = dict(v)
        assert len(d) == len(v), "duplicate members or fields"
        return d
    return v


def from_json(d: dict) -> Tuple[str, object]:
    """The (kind, normal form) of a decoded JSON value."""
    kind, v = d["type"], d["value"]
    if kind == "string":
        return kind, bytes.fromhex(v)
    if kind in ("list", "set"):
        return kind, normal(kind, [bytes.fromhex(e) for e in v])
    if kind == "zset":
        return kind, normal(kind, [(bytes.fromhex(m), float(s)) for m, s in v])
    return kind, normal(kind, [(bytes.fromhex(f), bytes.fromhex(x)) for f, x in v])


def values() -> Dict[str, Tuple[str, object]]:
    rng = random.Random(7)
    v: Dict[str, Tuple[str, object]] = {
        "str:empty": ("string", b""),
        "str:short": ("string", b"hello"),
        "str:int8": ("string", b"-5"),
        "str:int16": ("string", b"12345"),
        "str:int32": ("string", b"-70000"),
        "str:int64": ("string", b"4294967296"),
        "str:notint": ("string", b"007"),
        "str:binary": ("string", bytes(range(256))),
        "str:lzf": ("string", b"abcdefgh" * 500),
        "str:lzf_big": ("string", b"x" * 200_000),
        "str:random": ("string", bytes(rng.getrandbits(8) for _ in range(3000))),
        "list:small": ("list", [b"a", b"1", b"-5000", b"123456789012", b"", b"x" * 100]),
        "list:tiny": ("list", [b"a", b"b", b"1"]),
        "list:large": ("list", [str(i).encode() if i % 3 else b"item-%d" % i for i in range(5000)]),
        "list:bigelem": ("list", [b"a", b"y" * 20000, b"b"]),
        "set:intset": ("set", [b"1", b"-2", b"70000", b"9223372036854775807"]),
        "set:intset_over_limit": ("set", [str(i * 7).encode() for i in range(600)]),
        "set:small": ("set", [b"a", b"b", b"17"]),
        "set:large": ("set", [b"m%d" % i for i in range(1000)]),
        "zset:tiny": ("zset", [(b"a", 1.5), (b"b", 2.0)]),
        "zset:small": (
            "zset",
            [(b"a", 1.5), (b"b", 2.0), (b"c", INF), (b"d", -INF), (b"e", 0.1), (b"f", -3.0), (b"g", 1e300)],
        ),
        "zset:large": ("zset", [(b"m%d" % i, i / 3) for i in range(300)]),
        "zset:longmember": ("zset", [(b"m" * 100, 1.0), (b"n", 2.0)]),
        "hash:small": ("hash", [(b"f", b"v"), (b"n", b"-12"), (b"e", b"")]),
        "hash:medium": ("hash", [(b"f%d" % i, str(i).encode()) for i in range(300)]),
        "hash:large": ("hash", [(b"f%d" % i, str(i).encode()) for i in range(600)]),
        "hash:longvalue": ("hash", [(b"f", b"v" * 100), (b"g", b"1")]),
    }
    return v


# Values whose Redis 7.0 encoding is deterministic and not LZF-compressed (LZF output depends on
# the compressor's match search): the codec's DUMP must be byte for byte Redis' own.
SAME_BYTES = [
    "str:empty", "str:short", "str:int8", "str:int16", "str:int32", "str:int64", "str:notint",
    "str:binary", "list:tiny", "zset:tiny", "hash:small",
]


def create(r: redis.Redis, key: str, kind: str, v) -> None:
    if kind == "string":
        r.set(key, v)
    elif kind == "list":
        for i in range(0, len(v), 1000):
            r.rpush(key, *v[i:i + 1000])
    elif kind == "set":
        r.sadd(key, *v)
    elif kind == "zset":
        r.zadd(key, dict(v))
    else:
        r.hset(key, mapping=dict(v))


def read(r: redis.Redis, key: str, kind: str) -> object:
    assert r.type(key).decode() == kind
    if kind == "string":
        return r.get(key)
    if kind == "list":
        return r.lrange(key, 0, -1)
    if kind == "set":
        return r.smembers(key)
    if kind == "zset":
        return dict(r.zrange(key, 0, -1, withscores=True))
    return r.hgetall(key)


@pytest.fixture
def r(redis_server) -> redis.Redis:
    client = redis_client(redis_server, 2)
    assert client.config_get("rdbcompression")["rdbcompression"] == "yes"
    yield client
    client.close()


def test_codec_decodes_every_redis_dump(r, rdb_tool):
    vals = values()
    for key, (kind, v) in vals.items():
        create(r, key, kind, v)
    # A list whose inner quicklist nodes Redis keeps LZF-compressed (and dumps so).
    r.config_set("list-compress-depth", 1)
    create(r, "list:compressed", "list", [b"element-%d" % (i % 50) for i in range(20000)])
    r.config_set("list-compress-depth", 0)
    vals["list:compressed"] = ("list", None)

    keys = list(vals)
    payloads = [r.dump(k) for k in keys]
    decoded = decode(rdb_tool, payloads)
    rdb_types = set()
    string_encodings = set()
    for key, payload, d in zip(keys, payloads, decoded):
        kind = vals[key][0]
        assert "error" not in d, (key, d)
        assert d["type"] == kind, key
        assert from_json(d) == (kind, normal(kind, read(r, key, kind))), key
        if vals[key][1] is not None:
            assert from_json(d) == (kind, normal(kind, vals[key][1])), key
        rdb_types.add(payload[0])
        if kind == "string" and len(payload) > 11:
            string_encodings.add(payload[1] if payload[1] >= 0xC0 else "raw")
    # Every encoding Redis 7.0 emits for these types was exercised.
    assert {0, 2, 4, 5, 11, 16, 17, 18} <= rdb_types, rdb_types
    assert {0xC0, 0xC1, 0xC2, 0xC3, "raw"} <= string_encodings, string_encodings


def test_redis_restores_codec_dumps(r, rdb_tool):
    vals = values()
    keys = list(vals)
    ours = encode(rdb_tool, [vals[k] for k in keys])
    for key, payload in zip(keys, ours):
        kind, v = vals[key]
        assert r.restore("copy:" + key, 0, payload) in (True, b"OK"), key
        assert normal(kind, read(r, "copy:" + key, kind)) == normal(kind, v), key
        # What Redis dumps for the same value.
        create(r, key, kind, v)
        theirs = r.dump(key)
        if key in SAME_BYTES:
            assert payload == theirs, (key, payload.hex(), theirs.hex())
        else:
            assert len(payload) <= len(theirs) * 1.1 + 16, (key, len(payload), len(theirs))
    # The codec's compact encodings are the ones Redis picks itself.
    assert r.object("encoding", "copy:set:intset") == b"intset"
    assert r.object("encoding", "copy:hash:small") == b"listpack"
    assert r.object("encoding", "copy:zset:small") == b"listpack"
    assert r.object("encoding", "copy:zset:large") == b"skiplist"
    assert r.object("encoding", "copy:hash:medium") == b"listpack"
    assert r.object("encoding", "copy:hash:large") == b"hashtable"


def test_both_refuse_the_same_bad_payloads(r, rdb_tool):
    good = encode(rdb_tool, [("list", [b"a", b"b", b"c"])])[0]
    flipped = bytearray(good)
    flipped[3] ^= 0x01
    # Type 18 (quicklist) claiming 5 nodes with none present, under a valid footer.
    broken_body = bytes([18, 5]) + (10).to_bytes(2, "little")
    broken = broken_body + redis_crc64(r, broken_body)
    decoded = decode(rdb_tool, [bytes(flipped), broken])
    assert decoded[0]["footer"] is True, decoded[0]
    assert decoded[1]["footer"] is False and "error" in decoded[1], decoded[1]
    with pytest.raises(redis.ResponseError, match="DUMP payload version or checksum are wrong"):
        r.restore("bad1", 0, bytes(flipped))
    with pytest.raises(redis.ResponseError, match="Bad data format"):
        r.restore("bad2", 0, broken)


def redis_crc64(r: redis.Redis, body: bytes) -> bytes:
    """The 8 footer CRC bytes for `body`, computed here from crc64.c's definition (reflected Jones
    polynomial, initial value 0) rather than by the codec, and checked against a payload Redis
    made."""
    poly = 0x95AC9329AC4BC9B5  # 0xad93d23594c935a9, bit-reflected
    crc = 0
    for byte in body:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (poly if crc & 1 else 0)
    # Check the implementation against a payload Redis made.
    r.set("crc:probe", "hello")
    probe = r.dump("crc:probe")
    c = 0
    for byte in probe[:-8]:
        c ^= byte
        for _ in range(8):
            c = (c >> 1) ^ (poly if c & 1 else 0)
    assert c.to_bytes(8, "little") == probe[-8:]
    return crc.to_bytes(8, "little")
