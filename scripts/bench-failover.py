#!/usr/bin/env python3
"""Failover time under Redis Sentinel: Gradus next to redis-server, same Sentinel settings.

    scripts/bench-failover.py [--rounds N] [--targets gradus,redis]

Each round starts, for each target in turn (the order rotating by one target per round), the
harness of tests/python/sentinel_harness.py: a primary, two replicas and three real Redis
Sentinels on loopback (`down-after-milliseconds` 1000, `failover-timeout` 5000, SENTINEL DEBUG
info/publish/ask periods 250 ms). A redis-py `Sentinel(...).master_for()` client writes in a loop;
the primary is killed with SIGKILL; the failover time is from the moment the killed process is
reaped to the first write the client gets acknowledged afterwards (only a promoted replica can
acknowledge it). Like for like: Gradus nodes at durability `none`, redis-server nodes without
persistence (`save ""`, `appendonly no`). The Gradus binary is $GRADUS_BIN, else the release build (built first); the
redis-server is the one on PATH. Prints one line per run, then the median, minimum and maximum per
target, with the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))

from sentinel_harness import SentinelCluster, measure_failover  # noqa: E402


def gradus_release() -> str:
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "gradus-server", "--bin", "gradus"],
                   cwd=ROOT, check=True)
    return str(target / "release" / "gradus")


def one_run(target: str) -> tuple[float, int]:
    os.environ["GRADUS_TARGET"] = target
    with tempfile.TemporaryDirectory(prefix="bench-failover-") as tmp:
        cluster = SentinelCluster(Path(tmp), durability="none")
        cluster.start()
        try:
            seconds, failed, _, _ = measure_failover(cluster)
        finally:
            cluster.stop()
    return seconds, failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--targets", default="gradus,redis")
    args = parser.parse_args()
    targets = args.targets.split(",")
    if "gradus" in targets and "GRADUS_BIN" not in os.environ:
        os.environ["GRADUS_BIN"] = gradus_release()
    print(f"load average before: {os.getloadavg()}")
    results: dict[str, list[float]] = {t: [] for t in targets}
    for r in range(args.rounds):
        order = targets[r % len(targets):] + targets[:r % len(targets)]
        for target in order:
            seconds, failed = one_run(target)
            results[target].append(seconds)
            print(f"round {r + 1} {target:6} failover {seconds:.2f} s ({failed} failed attempts)", flush=True)
    print(f"load average after: {os.getloadavg()}")
    print("| target | runs | median s | min s | max s |")
    print("|---|---|---|---|---|")
    for target, times in results.items():
        print(f"| {target} | {len(times)} | {statistics.median(times):.2f} | {min(times):.2f} | {max(times):.2f} |")


if __name__ == "__main__":
    main()
