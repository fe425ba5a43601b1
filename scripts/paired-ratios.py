#!/usr/bin/env python3
"""Gradus / Redis throughput ratios over many interleaved rounds, with a confidence interval.

usage: scripts/paired-ratios.py [FILE ...]     (stdin when no file is named)

Reads the per-round rows the side-by-side benchmark scripts print (bench-redis-benchmark.sh,
bench-tls.sh, bench-scripting.py): `target,pipeline,round,test,ops/s,cpu`, where target is
`redis`, `gradus` or `baseline`; any other line (Markdown around them) is skipped, so whole
reports can be fed in, several runs at once.

On this 2-core VM one round of either server swings by ±20 % with the machine's state, more than
the gaps being measured, and a run of 3-5 rounds can read either side of 1.0. Rounds interleave
the servers, so each Gradus round is paired with the Redis round next to it (same file, same
round number, same test and pipeline); the ratio of a pair cancels the machine's drift between
rounds. For each test and pipeline this prints the geometric mean of the paired ratios, a 95 %
bootstrap interval for it (10 000 resamples of the pairs, fixed seed), and how many pairs are
at or above 1.0. A line whose whole interval is at or above 1.0 is at least as fast as Redis
with that confidence; one whose interval straddles 1.0 is not shown either way.
"""
import math
import random
import sys


def rows(lines, source):
    """(source, target, pipeline, round, test, ops/s) of every per-round row."""
    for line in lines:
        parts = line.strip().split(",")
        if len(parts) != 6 or parts[0] not in ("redis", "gradus", "baseline"):
            continue
        try:
            yield source, parts[0], int(parts[1]), int(parts[2]), parts[3], float(parts[4])
        except ValueError:
            continue


def summarize(all_rows, against="gradus"):
    """{(test, pipeline): (pairs, geomean, low, high, at_or_above)} of `against` / redis."""
    table = {}
    for source, target, pipe, rnd, test, ops in all_rows:
        table.setdefault((test, pipe), {}).setdefault((source, rnd), {})[target] = ops
    out = {}
    rng = random.Random(1)
    for key, rounds in sorted(table.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        logs = [math.log(r[against] / r["redis"]) for r in rounds.values()
                if against in r and "redis" in r and r["redis"] > 0 and r[against] > 0]
        if not logs:
            continue
        n = len(logs)
        means = sorted(sum(rng.choice(logs) for _ in range(n)) / n for _ in range(10000))
        out[key] = (n, math.exp(sum(logs) / n), math.exp(means[250]), math.exp(means[9749]),
                    sum(x >= 0 for x in logs))
    return out


def print_table(summary, name="Gradus"):
    print(f"| test | pipeline | pairs | {name} / Redis (geometric mean) | 95 % interval | pairs ≥ 1.0 |")
    print("|---|---|---|---|---|---|")
    for (test, pipe), (n, mean, low, high, above) in summary.items():
        print(f"| {test} | {pipe} | {n} | {mean:.3f}× | {low:.3f}–{high:.3f} | {above}/{n} |")


def main():
    all_rows = []
    if len(sys.argv) > 1:
        for path in sys.argv[1:]:
            with open(path) as f:
                all_rows.extend(rows(f, path))
    else:
        all_rows.extend(rows(sys.stdin, "-"))
    print_table(summarize(all_rows))
    if any(r[1] == "baseline" for r in all_rows):
        print()
        print_table(summarize(all_rows, "baseline"), "baseline")


if __name__ == "__main__":
    main()
