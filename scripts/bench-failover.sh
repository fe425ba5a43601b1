#!/usr/bin/env bash
# Failover time under Redis Sentinel, Gradus next to redis-server in the same run: one primary, two
# replicas and three real redis-sentinel processes on loopback (tests/python/sentinel_harness.py:
# down-after-milliseconds 1000, failover-timeout 5000, quorum 2), a redis-py Sentinel client writing
# without pause; the primary is killed (-9) and the time from the kill to the first write the new
# primary acknowledges is measured (test_sentinel.py::test_kill_primary_under_write_load_...).
#
#   scripts/bench-failover.sh [rounds]          (default: 5; each round runs Gradus and Redis once)
#   GRADUS_BIN=path   the gradus binary (default: a release build of this tree)
#
# Rounds alternate which target goes first. Prints every round and the median per target, with the
# load average at the start and the end. Sentinel's own timers (down-after 1 s, then its election)
# dominate: the figure says whether the server adds to them.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
if [ -z "${GRADUS_BIN:-}" ]; then
  cargo build --release -q -p gradus-server
  GRADUS_BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/gradus
fi
export GRADUS_BIN
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
run() { # target → seconds
  local out
  out=$(GRADUS_TARGET=$1 python3 -m pytest -q -s -p no:cacheprovider tests/python/test_sentinel.py \
        -k kill_primary_under_write_load 2>&1) || { echo "$out" >&2; exit 1; }
  echo "$out" | sed -n 's/.*failover time (kill -9 -> first write accepted on the new primary): \([0-9.]*\) s.*/\1/p'
}
for round in $(seq "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then order="gradus redis"; else order="redis gradus"; fi
  for target in $order; do
    s=$(run "$target")
    echo "$round $target $s" | tee -a "$TMP/raw" >&2
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 - "$TMP/raw" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    _, target, secs = line.split()
    rows.setdefault(target, []).append(float(secs))
print("| target | failover time, median (s) | rounds (s) |")
print("|---|---|---|")
for target in ("gradus", "redis"):
    xs = rows.get(target, [])
    print(f"| {target} | {statistics.median(xs):.2f} | {' '.join(f'{x:.2f}' for x in xs)} |")
EOF
