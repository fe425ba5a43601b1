#!/usr/bin/env bash
# Pub/sub fan-out, Gradus next to redis-server (persistence off) in the same run:
# 1 publisher, N subscribers on one channel, fixed-size payloads; messages delivered per second.
#
#   scripts/bench-pubsub.sh [rounds] [seconds]        (defaults: 5 rounds, 5 seconds each)
#   SUBSCRIBERS=n (default 100), SIZE=bytes (default 64), PIPELINE=n (default 16),
#   GRADUS_THREADS=N sets gradus --threads (default: one worker per core).
#
# The client is crates/bench/src/bin/pubsub-fanout.rs (one thread; subscribers count bytes).
# Rounds alternate redis-server / Gradus so machine noise hits both alike; the median of the
# rounds is reported with the Gradus/Redis ratio and the load average at the start and end.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
SECONDS_PER_RUN=${2:-5}
SUBSCRIBERS=${SUBSCRIBERS:-100}
SIZE=${SIZE:-64}
PIPELINE=${PIPELINE:-16}
TARGET_DIR=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p gradus-server -p gradus-bench --bin gradus --bin pubsub-fanout
GRADUS=$TARGET_DIR/release/gradus
FANOUT=$TARGET_DIR/release/pubsub-fanout
TMP=$(mktemp -d)
trap 'redis-cli -p 7311 shutdown nosave >/dev/null 2>&1 || true; kill $(cat "$TMP"/gradus.pid 2>/dev/null) 2>/dev/null || true; rm -rf "$TMP"' EXIT

wait_port() { for _ in $(seq 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "server on $1 did not start" >&2; exit 1; }

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for round in $(seq "$ROUNDS"); do
  for target in redis gradus; do
    if [ "$target" = redis ]; then
      redis-server --port 7311 --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP" --daemonize no >"$TMP/redis.log" 2>&1 &
      port=7311
    else
      "$GRADUS" --port 7312 --memcached-port 0 --dir "$TMP/gdata" --durability none ${GRADUS_THREADS:+--threads $GRADUS_THREADS} --loglevel warn >"$TMP/gradus.log" 2>&1 &
      echo $! >"$TMP/gradus.pid"
      port=7312
    fi
    wait_port $port
    line=$("$FANOUT" --port $port --subscribers "$SUBSCRIBERS" --size "$SIZE" --pipeline "$PIPELINE" --seconds "$SECONDS_PER_RUN")
    echo "$target,$round,$line" | tee -a "$TMP/results.csv" >&2
    if [ "$target" = redis ]; then redis-cli -p 7311 shutdown nosave >/dev/null 2>&1 || true; else kill "$(cat "$TMP/gradus.pid")"; wait "$(cat "$TMP/gradus.pid")" 2>/dev/null || true; fi
    sleep 0.5
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

python3 - "$TMP/results.csv" <<'PY'
import statistics, sys
data = {}
for line in open(sys.argv[1]):
    target, rnd, rest = line.strip().split(",", 2)
    fields = dict(kv.split("=") for kv in rest.split())
    data.setdefault(target, []).append((float(fields["delivered_per_s"]), float(fields["publishes_per_s"])))
r = statistics.median(d for d, _ in data["redis"])
g = statistics.median(d for d, _ in data["gradus"])
rp = statistics.median(p for _, p in data["redis"])
gp = statistics.median(p for _, p in data["gradus"])
print("| target | delivered msgs/s (median) | publishes/s (median) | per round (delivered msgs/s) |")
print("|---|---|---|---|")
print(f"| redis-server | {r:,.0f} | {rp:,.0f} | {', '.join(f'{d:,.0f}' for d, _ in data['redis'])} |")
print(f"| Gradus | {g:,.0f} | {gp:,.0f} | {', '.join(f'{d:,.0f}' for d, _ in data['gradus'])} |")
print()
print(f"Gradus / Redis (delivered messages): {g / r:.2f}x")
PY
