#!/usr/bin/env bash
# Session pages: Gradus SESSION.OPEN/CLOSE (background durability) vs the phpredis lock sequence on
# redis-server (appendonly yes, appendfsync everysec: the closest Redis degree), in one run.
#
#   scripts/bench-sessions.sh [users] [pages] [size] [runs]     (defaults: 50 200 4096 1; docs/benchmarks uses 50 1000 4096 5)
#
# With runs > 1 the whole measurement is repeated (fresh servers each time), each run's report is
# printed, and a last table lists every run's P90 ratio with the median: on a shared 2-core
# machine single runs of this benchmark vary by tens of percent.
#   GRADUS_THREADS=N sets gradus --threads (default: one worker per core).
#   SLICES=N: the uncontended pages of a run are measured in N slices, the stores taking turns
#   (default 5; 1 = each store in one go, as before 2026-11-22).
#
# Prints Markdown (crates/server/examples/session_bench.rs does the measuring).
set -euo pipefail
cd "$(dirname "$0")/.."
USERS=${1:-50}; PAGES=${2:-200}; SIZE=${3:-4096}; RUNS=${4:-1}
cargo build --release -q -p gradus-server --bin gradus --example session_bench
TMP=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"' EXIT
wait_port() { for _ in $(seq 200); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.05; done; echo "no server on $1" >&2; exit 1; }
RATIOS=()
for run in $(seq "$RUNS"); do
  rm -rf "$TMP/gradus" "$TMP/redis"; mkdir -p "$TMP/redis"
  target/release/gradus --port 7501 --memcached-port 0 --dir "$TMP/gradus" --durability background ${GRADUS_THREADS:+--threads $GRADUS_THREADS} --loglevel warn >"$TMP/gradus.log" 2>&1 &
  gpid=$!; PIDS+=("$gpid")
  redis-server --port 7502 --bind 127.0.0.1 --dir "$TMP/redis" --save '' --appendonly yes --appendfsync everysec >"$TMP/redis.log" 2>&1 &
  rpid=$!; PIDS+=("$rpid")
  wait_port 7501; wait_port 7502
  [ "$RUNS" -gt 1 ] && echo "# Run $run of $RUNS" && echo
  target/release/examples/session_bench --gradus 127.0.0.1:7501 --redis 127.0.0.1:7502 \
      --users "$USERS" --pages "$PAGES" --size "$SIZE" --slices "${SLICES:-5}" | tee "$TMP/report.md"
  RATIOS+=("$(sed -n 's/^Page P90 ratio Gradus \/ Redis: //p' "$TMP/report.md")")
  kill "$gpid" "$rpid" 2>/dev/null || true
  wait "$gpid" "$rpid" 2>/dev/null || true
done
if [ "$RUNS" -gt 1 ]; then
  echo
  echo "## Page P90 ratio Gradus / Redis over $RUNS runs"
  echo
  python3 -c 'import sys, statistics; r = sorted(map(float, sys.argv[1:])); print("runs: " + ", ".join(f"{x:.2f}" for x in r) + f"; median {statistics.median(r):.2f}")' "${RATIOS[@]}"
fi
