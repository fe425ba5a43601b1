#!/usr/bin/env python3
"""Memory per key: Gradus vs redis-server vs memcached, in one run.

    scripts/bench-memory-types.py [scale] [gradus-binary ...]
    GRADUS_MEMORY_ROWS=hash,zset,list scripts/bench-memory-types.py ...   (only those rows)

`scale` (default 1.0) multiplies every row's key count. Each binary listed is measured as its
own column (default: target/release/gradus; give an older build too for a before/after run).
Each row loads keys into a fresh server with pipelines of 1000 commands (redis-py; memcached
through pymemcache's set_many in batches of 1000) and measures the server process's RSS growth
(VmRSS in /proc) over the load, and, for Redis and Gradus, INFO `used_memory` growth:
  - string16/100/1000: SET s:%08d <value of 16/100/1000 bytes>       (1 M keys)
  - ... +ttl:          SET s:%08d <value> EX 86400                    (1 M keys)
  - hash:              HSET h:%07d f0 v.. f9 v.. (10 fields, 8-byte values)  (100 k keys)
  - zset:              ZADD z:%07d 0 m0.. 4 m4.. (5 members of 8 bytes)      (100 k keys)
                       ZADD z:%07d 0 m0.. 9 m9.. (10 members of 8 bytes)     (100 k keys)
  - list:              RPUSH l:%07d with five 8-byte elements          (1 M keys)
  - set:               SADD S:%07d with five 8-byte string members     (1 M keys)
  - intset:            SADD i:%07d with five integers                  (1 M keys)
  - stream entries:    XADD x <n>-0 user u%03d event course.published (1 M entries in one
                       stream; the figures are per entry)
  - stream (5 entries): XADD x:%07d * with the same two fields, 5 times (100 k keys)
memcached (`-m 8192`, strings only) stores the same keys and values with `set`.
GRADUS_MEMORY_READ=1: after the load, every key is read back once (GET / memcached get_many,
HGETALL, ZRANGE, LRANGE, SMEMBERS, XRANGE, in pipelines of 1000) and the figures are taken after
that: a store's memory after its keys have been read, as a cache's are (the figure before the
reads is printed on stderr).
Servers: Gradus `--durability none --memcached-port 0`, redis-server `--save '' --appendonly no`.
Prints a Markdown table: bytes per key for each target and each Gradus build / Redis.
"""

import os
import subprocess
import sys
import tempfile
import time

import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import free_port, rss, wait_port  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCALE = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
BINARIES = sys.argv[2:] or [os.path.join(ROOT, "target/release/gradus")]

ROWS = [
    # (name, keys, kind, value size, ttl)
    ("string 16 B", 1_000_000, "string", 16, False),
    ("string 100 B", 1_000_000, "string", 100, False),
    ("string 1000 B", 1_000_000, "string", 1000, False),
    ("string 16 B + TTL", 1_000_000, "string", 16, True),
    ("string 100 B + TTL", 1_000_000, "string", 100, True),
    ("string 1000 B + TTL", 1_000_000, "string", 1000, True),
    ("hash (10 fields)", 100_000, "hash", 8, False),
    ("zset (5 members)", 100_000, "zset5", 8, False),
    ("zset (10 members)", 100_000, "zset", 8, False),
    ("list (5 elements)", 1_000_000, "list", 8, False),
    ("set (5 members)", 1_000_000, "set", 8, False),
    ("intset (5 integers)", 1_000_000, "intset", 0, False),
    ("stream entries (per entry)", 1_000_000, "stream1", 0, False),
    ("stream (5 entries)", 100_000, "stream5", 0, False),
]


# GRADUS_MEMORY_ROWS=hash,zset runs only the rows whose name starts with one of these words.
ONLY = [w for w in os.environ.get("GRADUS_MEMORY_ROWS", "").split(",") if w]
if ONLY:
    ROWS = [row for row in ROWS if any(row[0].startswith(w) for w in ONLY)]


def start(target, tmp):
    port = free_port()
    if target == "redis":
        argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", tmp]
    elif target == "memcached":
        argv = ["memcached", "-p", str(port), "-l", "127.0.0.1", "-U", "0", "-m", "8192", "-t", "2"]
        if os.geteuid() == 0:
            argv += ["-u", "root"]
    else:
        argv = [target, "--port", str(port), "--memcached-port", "0", "--dir", os.path.join(tmp, "g"),
                "--durability", "none", "--loglevel", "warn"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return proc, port


def value(i, size):
    text = f"{i:08d}"
    return (text * (size // len(text) + 1))[:size]


def load_redis(r, kind, keys, size, ttl):
    pipe = r.pipeline(transaction=False)
    for i in range(keys):
        if kind == "string":
            pipe.set(f"s:{i:08d}", value(i, size), ex=86400 if ttl else None)
        elif kind == "hash":
            pipe.hset(f"h:{i:07d}", mapping={f"f{j}": value(i + j, size) for j in range(10)})
        elif kind in ("zset", "zset5"):
            members = 5 if kind == "zset5" else 10
            pipe.zadd(f"z:{i:07d}", {f"m{j}{i % 1000:06d}": j for j in range(members)})
        elif kind == "list":
            pipe.rpush(f"l:{i:07d}", *(f"e{j}{i % 1000:06d}" for j in range(5)))
        elif kind == "set":
            pipe.sadd(f"S:{i:07d}", *(f"m{j}{i % 1000:06d}" for j in range(5)))
        elif kind == "stream1":
            pipe.xadd("x", {"user": f"u{i % 1000:03d}", "event": "course.published"}, id=f"{i + 1}-0")
        elif kind == "stream5":
            for _ in range(5):
                pipe.xadd(f"x:{i:07d}", {"user": f"u{i % 1000:03d}", "event": "course.published"})
        else:
            pipe.sadd(f"i:{i:07d}", *(i * 5 + j for j in range(5)))
        if len(pipe) >= 1000:
            pipe.execute()
    pipe.execute()


READ = os.environ.get("GRADUS_MEMORY_READ") == "1"


def read_redis(r, kind, keys):
    """Read every key once (GRADUS_MEMORY_READ=1)."""
    pipe = r.pipeline(transaction=False)
    for i in range(keys):
        if kind == "string":
            pipe.get(f"s:{i:08d}")
        elif kind == "hash":
            pipe.hgetall(f"h:{i:07d}")
        elif kind in ("zset", "zset5"):
            pipe.zrange(f"z:{i:07d}", 0, -1, withscores=True)
        elif kind == "list":
            pipe.lrange(f"l:{i:07d}", 0, -1)
        elif kind == "set":
            pipe.smembers(f"S:{i:07d}")
        elif kind == "stream1":
            if i % 1000 == 0:
                pipe.xrange("x", f"{i + 1}-0", f"{i + 1000}-0")
        elif kind == "stream5":
            pipe.xrange(f"x:{i:07d}")
        else:
            pipe.smembers(f"i:{i:07d}")
        if len(pipe) >= 1000:
            pipe.execute()
    pipe.execute()


def read_memcached(port, keys):
    from pymemcache.client.base import Client

    c = Client(("127.0.0.1", port))
    for start in range(0, keys, 1000):
        got = c.get_many([f"s:{i:08d}" for i in range(start, min(keys, start + 1000))])
        assert len(got) == min(keys, start + 1000) - start


def load_memcached(port, keys, size, ttl):
    from pymemcache.client.base import Client

    c = Client(("127.0.0.1", port))
    batch = {}
    for i in range(keys):
        batch[f"s:{i:08d}"] = value(i, size).encode()
        if len(batch) >= 1000:
            assert not c.set_many(batch, expire=86400 if ttl else 0)
            batch = {}
    if batch:
        assert not c.set_many(batch, expire=86400 if ttl else 0)
    return int(c.stats()[b"curr_items"])


def measure(target, tmp, row):
    _, keys, kind, size, ttl = row
    keys = max(1, int(keys * SCALE))
    proc, port = start(target, tmp)
    try:
        time.sleep(0.2)
        before = rss(proc.pid)
        if target == "memcached":
            assert load_memcached(port, keys, size, ttl) == keys
            if READ:
                print(f"#   {target} before the reads: {(rss(proc.pid) - before) / keys:.1f} B/key RSS",
                      file=sys.stderr, flush=True)
                read_memcached(port, keys)
            used = None
        else:
            r = redis.Redis(port=port)
            used0 = int(r.info("memory")["used_memory"])
            load_redis(r, kind, keys, size, ttl)
            if READ:
                time.sleep(0.5)
                print(f"#   {target} before the reads: {(rss(proc.pid) - before) / keys:.1f} B/key RSS",
                      file=sys.stderr, flush=True)
                read_redis(r, kind, keys)
            time.sleep(0.5)
            assert r.dbsize() == (1 if kind == "stream1" else keys)
            used = (int(r.info("memory")["used_memory"]) - used0) / keys
        return (rss(proc.pid) - before) / keys, used
    finally:
        proc.terminate()
        proc.wait(10)


def main():
    targets = ["redis", "memcached"] + BINARIES
    names = {b: f"Gradus {os.path.basename(os.path.dirname(os.path.dirname(b))) or b}" for b in BINARIES}
    if len(BINARIES) > 1:
        names = {b: f"Gradus ({b})" for b in BINARIES}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for row in ROWS:
            # Rounds interleaved: every target for one row, then the next row.
            for target in targets:
                if target == "memcached" and row[2] != "string":
                    continue
                results[(row[0], target)] = measure(target, tmp, row)
                print(f"# {row[0]} {target}: {results[(row[0], target)]}", file=sys.stderr, flush=True)
    head = ["row", "keys", "redis RSS B/key", "redis used_memory B/key", "memcached RSS B/key"]
    for b in BINARIES:
        head += [f"{names[b]} RSS B/key", f"{names[b]} used_memory B/key", f"{names[b]} RSS / Redis"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in ROWS:
        rd_rss, rd_used = results[(row[0], "redis")]
        mc = results.get((row[0], "memcached"))
        cells = [row[0], f"{int(row[1] * SCALE):,}", f"{rd_rss:.0f}", f"{rd_used:.0f}",
                 f"{mc[0]:.0f}" if mc else "–"]
        for b in BINARIES:
            g_rss, g_used = results[(row[0], b)]
            cells += [f"{g_rss:.0f}", f"{g_used:.0f}", f"{g_rss / rd_rss:.2f}x"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
