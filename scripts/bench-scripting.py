#!/usr/bin/env python3
"""EVALSHA and FCALL throughput: Gradus (this build, and optionally an earlier one) next to
redis-server without persistence, redis-benchmark -c 50 unpipelined, rounds interleaved.

usage: scripts/bench-scripting.py GRADUS_BIN [BEFORE_BIN] [--requests N] [--rounds R]

Each server gets the same scripts (SCRIPT LOAD) and library (FUNCTION LOAD; skipped where the
server has no functions). Tests:
  unlock  EVALSHA of phpredis' session unlock script, 1 key (lock:__rand_int__, -r 100000: mostly
          absent, so GET + return 0; the held-lock case adds a DEL)
  script4 EVALSHA of a 4-command script (SET, INCR, GET, EXPIRE) on 2 keys
  fcall4  FCALL of the same 4 commands as a Redis 7 function
Prints a Markdown table of medians and every round's figures, the geometric mean of the paired
per-round ratios with its 95 % interval (scripts/paired-ratios.py), and each server's CPU time per
request (user + system time of the server process over the run, from /proc/PID/stat, divided by
the requests: far less sensitive to other load on the machine than throughput).
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import free_port  # noqa: E402

UNLOCK = 'if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end'
SCRIPT4 = ("redis.call('set', KEYS[1], ARGV[1]); redis.call('incr', KEYS[2]); "
           "redis.call('get', KEYS[1]); return redis.call('expire', KEYS[1], 100)")
LIBRARY = ("#!lua name=bench\n"
           "redis.register_function('touch4', function(keys, args)\n"
           "  redis.call('set', keys[1], args[1]); redis.call('incr', keys[2])\n"
           "  redis.call('get', keys[1]); return redis.call('expire', keys[1], 100)\n"
           "end)\n")


def start(argv, port):
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            if redis.Redis(port=port).ping():
                return proc
        except redis.ConnectionError:
            time.sleep(0.05)
    raise RuntimeError(f"{argv[0]} did not start")


def cpu_seconds(pid):
    """User + system CPU time of process `pid` so far, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(port, args, requests):
    out = subprocess.run(["redis-benchmark", "-p", str(port), "-c", "50", "-n", str(requests),
                          "-r", "100000", "--csv"] + args, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"redis-benchmark failed on port {port}: {out.stdout[-500:]} {out.stderr[-500:]}")
    out = out.stdout
    line = [l for l in out.splitlines() if l and not l.startswith('"test"')][-1]
    return float(line.split(",")[1].strip('"'))


def load_paired_ratios():
    """scripts/paired-ratios.py as a module (its name is not an identifier)."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "paired-ratios.py")
    spec = importlib.util.spec_from_file_location("paired_ratios", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gradus")
    ap.add_argument("before", nargs="?")
    ap.add_argument("--requests", type=int, default=100000)
    ap.add_argument("--rounds", type=int, default=3)
    opts = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-scripting-")
    servers = {}
    procs = []
    try:
        port = free_port()
        procs.append(start(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
                            "--dir", tmp], port))
        servers["redis-server"] = port
        pids = {"redis-server": procs[-1].pid}
        for name, binary in [("Gradus (before)", opts.before), ("Gradus", opts.gradus)]:
            if not binary:
                continue
            port = free_port()
            d = os.path.join(tmp, name.replace(" ", "_").replace("(", "").replace(")", ""))
            procs.append(start([binary, "--port", str(port), "--memcached-port", "0", "--durability", "none",
                                "--dir", d], port))
            servers[name] = port
            pids[name] = procs[-1].pid
        tests = {}
        for name, port in servers.items():
            c = redis.Redis(port=port)
            unlock, script4 = c.script_load(UNLOCK), c.script_load(SCRIPT4)
            tests.setdefault("unlock", {})[name] = ["evalsha", unlock, "1", "lock:__rand_int__", "token"]
            tests.setdefault("script4", {})[name] = ["evalsha", script4, "2", "k:__rand_int__",
                                                     "n:__rand_int__", "value"]
            try:
                c.function_load(LIBRARY, replace=True)
                tests.setdefault("fcall4", {})[name] = ["fcall", "touch4", "2", "k:__rand_int__",
                                                        "n:__rand_int__", "value"]
            except redis.ResponseError:
                pass
        figures = {}
        cpu = {}
        for r in range(opts.rounds):
            for test, per_server in tests.items():
                for name, args in per_server.items():
                    before = cpu_seconds(pids[name])
                    figures.setdefault((test, name), []).append(run(servers[name], args, opts.requests))
                    cpu.setdefault((test, name), []).append(
                        (cpu_seconds(pids[name]) - before) * 1e6 / opts.requests)
        print(f"load average: {os.getloadavg()}")
        names = list(servers)
        print("| test | " + " | ".join(f"{n} ops/s (median)" for n in names) + " | Gradus / Redis |")
        print("|---|" + "---|" * (len(names) + 1))
        for test in tests:
            medians = {n: statistics.median(figures[(test, n)]) for n in names if (test, n) in figures}
            ratio = medians.get("Gradus", 0) / medians["redis-server"]
            print(f"| {test} | " + " | ".join(f"{medians[n]:,.0f}" if n in medians else "n/a" for n in names)
                  + f" | {ratio:.2f}x |")
        print("\nserver CPU per request, µs (median):")
        print("| test | " + " | ".join(names) + " |")
        print("|---|" + "---|" * len(names))
        for test in tests:
            print(f"| {test} | " + " | ".join(
                f"{statistics.median(cpu[(test, n)]):.1f}" if (test, n) in cpu else "n/a" for n in names) + " |")
        print("\nper round (ops/s):")
        for (test, name), values in figures.items():
            print(f"{test:8} {name:18} " + " ".join(f"{v:,.0f}" for v in values))
        print("\nper round (server CPU µs per request):")
        for (test, name), values in cpu.items():
            print(f"{test:8} {name:18} " + " ".join(f"{v:.1f}" for v in values))
        # The rows scripts/paired-ratios.py reads (several runs' reports can be pooled).
        short = {"redis-server": "redis", "Gradus": "gradus", "Gradus (before)": "baseline"}
        lines = [f"{short[name]},1,{r + 1},{test},{ops:.0f},{cpu[(test, name)][r]:.1f}"
                 for (test, name), values in figures.items() for r, ops in enumerate(values)]
        print("\nper round (target, pipeline, round, test, ops/s, server CPU µs per request):\n")
        print("```")
        print("\n".join(lines))
        print("```\n")
        paired = load_paired_ratios()
        paired.print_table(paired.summarize(paired.rows(lines, "this run")))
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
