#!/usr/bin/env python3
"""Memory per element of one large set, hash and sorted set (their hashtable encodings):
Gradus vs redis-server, in one run.

    scripts/bench-memory-collections.py [elements] [gradus-binary ...]

For each target and each kind, a fresh FLUSHALL, then one key loaded with `elements` members
(default 200 000) in pipelines of 1000 commands of 1000 members each:
  - set:  SADD big member:%010d ...
  - hash: HSET big field:%010d value:%010d ...
  - zset: ZADD big <i> member:%010d ...
and the server's RSS growth (VmRSS) per element is taken. Then a snapshot (BGSAVE) with 2 000
more members written while it runs (the writes that make a copy-on-write store copy the parts
they touch), and RSS growth per element once the snapshot has ended. Gradus runs
`--durability background --memcached-port 0` (a snapshot needs a logged keyspace), redis-server
`--save '' --appendonly no` (its BGSAVE forks: the child's copied pages are not the parent's
RSS). Prints a Markdown table.
"""

import os
import subprocess
import sys
import tempfile
import time

import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import free_port, rss, wait_port  # noqa: E402

ELEMENTS = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARIES = sys.argv[2:] or [os.path.join(ROOT, "target/release/gradus")]
KINDS = ("set", "hash", "zset")


def add(pipe, kind, names):
    if kind == "set":
        pipe.sadd("big", *names)
    elif kind == "hash":
        pipe.hset("big", mapping={n: b"value:" + n[-10:] for n in names})
    else:
        pipe.zadd("big", {n: i for i, n in enumerate(names)})


def measure(target, tmp):
    port = free_port()
    if target == "redis":
        argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", tmp]
    else:
        # A data directory of its own: a build must not recover the one before it's data.
        data = tempfile.mkdtemp(dir=tmp)
        argv = [target, "--port", str(port), "--memcached-port", "0", "--dir", data,
                "--durability", "background", "--loglevel", "warn"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        r = redis.Redis(port=port)
        out = {}
        for kind in KINDS:
            r.flushall()
            time.sleep(0.5)
            before = rss(proc.pid)
            pipe = r.pipeline(transaction=False)
            for start in range(0, ELEMENTS, 1000):
                add(pipe, kind, [b"member:%010d" % j for j in range(start, min(ELEMENTS, start + 1000))])
            pipe.execute()
            time.sleep(0.5)
            loaded = rss(proc.pid)
            r.bgsave()
            add(r, kind, [b"new:%d" % j for j in range(2000)])
            while r.info("persistence")["rdb_bgsave_in_progress"]:
                time.sleep(0.1)
            time.sleep(1)
            out[kind] = ((loaded - before) / ELEMENTS, (rss(proc.pid) - before) / ELEMENTS)
            print(f"# {target} {kind}: {out[kind]}", file=sys.stderr, flush=True)
        return out
    finally:
        proc.terminate()
        proc.wait(10)


def main():
    targets = ["redis"] + BINARIES
    with tempfile.TemporaryDirectory() as tmp:
        results = {t: measure(t, tmp) for t in targets}
    head = ["kind", "redis RSS B/element (loaded / after snapshot)"]
    for b in BINARIES:
        head += [f"Gradus ({b}) RSS B/element (loaded / after snapshot)", "loaded / Redis"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for kind in KINDS:
        rl, rs = results["redis"][kind]
        cells = [f"{kind} ({ELEMENTS:,} elements)", f"{rl:.0f} / {rs:.0f}"]
        for b in BINARIES:
            gl, gs = results[b][kind]
            cells += [f"{gl:.0f} / {gs:.0f}", f"{gl / rl:.2f}x"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
