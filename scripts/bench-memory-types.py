#!/usr/bin/env python3
"""Memory per key of small lists, sets and strings: Gradus vs redis-server, in one run.

    scripts/bench-memory-types.py [keys]        (default 1 000 000 keys per type)

Starts `target/release/gradus --durability none` and `redis-server --save '' --appendonly no`
on free loopback ports, one at a time, and for each type loads `keys` keys with redis-py
pipelines of 1000 commands, measuring the server process's RSS growth (VmRSS, /proc) over the
load (each type on a fresh server):
  - list:   RPUSH list:%07d with five 8-byte elements;
  - set:    SADD set:%07d with five 8-byte string members;
  - intset: SADD iset:%07d with five integers;
  - string: SET str:%07d with a 40-byte value.
Prints a Markdown table (bytes per key and the Gradus / Redis ratio).
"""

import os
import socket
import subprocess
import sys
import tempfile
import time

import redis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEYS = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def start(target, tmp):
    port = free_port()
    if target == "gradus":
        argv = [os.path.join(ROOT, "target/release/gradus"), "--port", str(port), "--memcached-port", "0",
                "--dir", os.path.join(tmp, "g"), "--durability", "none", "--loglevel", "warn"]
    else:
        argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", tmp]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = redis.Redis(port=port)
    for _ in range(200):
        try:
            r.ping()
            return proc, r
        except redis.ConnectionError:
            time.sleep(0.05)
    raise RuntimeError(f"{target} did not start")


def load(r, kind):
    pipe = r.pipeline(transaction=False)
    for i in range(KEYS):
        if kind == "list":
            pipe.rpush(f"list:{i:07d}", *(f"e{j}{i % 1000:06d}" for j in range(5)))
        elif kind == "set":
            pipe.sadd(f"set:{i:07d}", *(f"m{j}{i % 1000:06d}" for j in range(5)))
        elif kind == "intset":
            pipe.sadd(f"iset:{i:07d}", *(i * 5 + j for j in range(5)))
        else:
            pipe.set(f"str:{i:07d}", f"{i:040d}")
        if len(pipe) >= 1000:
            pipe.execute()
    pipe.execute()


def main():
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ["list", "set", "intset", "string"]:
            for target in ["redis", "gradus"]:
                proc, r = start(target, tmp)
                try:
                    before = rss(proc.pid)
                    load(r, kind)
                    time.sleep(0.5)
                    assert r.dbsize() == KEYS
                    results[(kind, target)] = (rss(proc.pid) - before) / KEYS
                finally:
                    proc.terminate()
                    proc.wait(10)
    print(f"| type ({KEYS:,} keys) | redis-server bytes/key | Gradus bytes/key | Gradus / Redis |")
    print("|---|---|---|---|")
    for kind in ["list", "set", "intset", "string"]:
        rd, g = results[(kind, "redis")], results[(kind, "gradus")]
        print(f"| {kind} | {rd:.0f} | {g:.0f} | {g / rd:.2f}x |")


if __name__ == "__main__":
    main()
