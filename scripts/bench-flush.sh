#!/usr/bin/env bash
# FLUSHDB of a keyspace holding N keys (default 1,000,000): Gradus (release build, background
# durability, so the flush is logged) vs redis-server (FLUSHDB, i.e. SYNC, and FLUSHDB ASYNC), in
# one run. Keys are loaded with redis-benchmark (random keys; the real count is reported), then one
# FLUSHDB is timed from the client, round trip included. Repeats ROUNDS times per server.
#
#   scripts/bench-flush.sh [keys] [rounds]     (defaults: 1000000 3)
#
# Prints Markdown.
set -euo pipefail
cd "$(dirname "$0")/.."
KEYS=${1:-1000000}; ROUNDS=${2:-3}
cargo build --release -q -p gradus-server --bin gradus
TMP=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"' EXIT
wait_port() { for _ in $(seq 200); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.05; done; echo "no server on $1" >&2; exit 1; }
target/release/gradus --port 7601 --memcached-port 0 --dir "$TMP/gradus" --loglevel warn >"$TMP/gradus.log" 2>&1 &
PIDS+=($!)
mkdir -p "$TMP/redis"
redis-server --port 7602 --bind 127.0.0.1 --dir "$TMP/redis" --save '' --appendonly no >"$TMP/redis.log" 2>&1 &
PIDS+=($!)
wait_port 7601; wait_port 7602
echo "| server | flush | keys | FLUSHDB reply (ms) |"
echo "|---|---|---:|---:|"
for round in $(seq "$ROUNDS"); do
  for target in "gradus 7601 FLUSHDB" "redis 7602 FLUSHDB" "redis 7602 FLUSHDB ASYNC"; do
    set -- $target
    name=$1; port=$2; shift 2
    # Random keys from a space 100x larger than the count: ~0.5% collide, the count is measured.
    redis-benchmark -p "$port" -t set -n "$KEYS" -r $((KEYS * 100)) -d 16 -P 64 -c 8 -q >/dev/null
    python3 - "$port" "$name" "$*" <<'PY'
import sys, time, redis
port, name, cmd = int(sys.argv[1]), sys.argv[2], sys.argv[3].split()
r = redis.Redis(port=port)
keys = r.dbsize()
t = time.perf_counter()
r.execute_command(*cmd)
ms = (time.perf_counter() - t) * 1000
assert r.dbsize() == 0
print(f"| {name} | {' '.join(cmd)} | {keys} | {ms:.2f} |")
PY
  done
done
