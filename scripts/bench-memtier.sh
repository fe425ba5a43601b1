#!/usr/bin/env bash
# The memtier-style mixed run: 1 thread x 50 connections, 1 KiB values, 1:4 set:get on 100 000
# keys (prefilled), Gradus next to redis-server (RESP) and memcached (text protocol), in one run.
#
#   MEMTIER=/path/to/memtier_benchmark scripts/bench-memtier.sh [seconds] [rounds]   (defaults: 20 3)
#
# memtier_benchmark is not part of the project: build it from its public source beside the
# project (autoreconf -i && ./configure && make; it needs libevent) and point MEMTIER at it.
# GRADUS_BIN (default target/release/gradus) is the build measured.
#
# Targets, each on a fresh server per round (the order rotates from round to round):
#   redis      redis-server --save '' --appendonly no                 (memtier --protocol=redis)
#   gradus     gradus --durability none, RESP port                    (memtier --protocol=redis)
#   memcached  memcached -t 2 -m 1024                                     (memtier --protocol=memcache_text)
#   gradus-mc  gradus --durability none, memcached port               (memtier --protocol=memcache_text)
# Each target is first filled with the 100 000 keys (memtier --ratio=1:0 --key-pattern=P:P
# --requests=allkeys, pipelined), then measured for [seconds] with
#   memtier_benchmark -t 1 -c 50 -d 1024 --ratio=1:4 --key-pattern=R:R --key-maximum=100000
# Prints a Markdown table of the medians over the rounds: ops/s, P50 and P99 latency (ms, from
# memtier's JSON output) and the server's CPU time per request (user + system from /proc).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_RUN=${1:-20}; ROUNDS=${2:-3}
MEMTIER=${MEMTIER:?set MEMTIER to a memtier_benchmark binary (see the header of this script)}
GRADUS=${GRADUS_BIN:-target/release/gradus}
for tool in redis-server memcached; do
  command -v "$tool" >/dev/null || { echo "$tool not found (scripts/install-deps.sh installs it)" >&2; exit 1; }
done
TMP=$(mktemp -d)
PID=
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$TMP"' EXIT
PORT=7611
TICK=$(getconf CLK_TCK)

start() {  # target -> starts the server, sets PID and PROTO
  rm -rf "$TMP/dir"; mkdir -p "$TMP/dir"
  case $1 in
    redis) redis-server --port $PORT --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP/dir" >/dev/null 2>&1 & PROTO=redis ;;
    gradus) "$GRADUS" --port $PORT --memcached-port 0 --dir "$TMP/dir" --durability none --loglevel warn >/dev/null 2>&1 & PROTO=redis ;;
    memcached) memcached -l 127.0.0.1 -p $PORT -U 0 -t 2 -m 1024 -c 1024 -u "$(id -un)" >/dev/null 2>&1 & PROTO=memcache_text ;;
    gradus-mc) "$GRADUS" --port $((PORT + 1)) --memcached-port $PORT --dir "$TMP/dir" --durability none --loglevel warn >/dev/null 2>&1 & PROTO=memcache_text ;;
  esac
  PID=$!
  for _ in $(seq 100); do
    (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && return 0
    sleep 0.1
  done
  echo "no server for $1" >&2; exit 1
}

cpu_ticks() { awk '{print $14 + $15}' "/proc/$PID/stat"; }

COMMON=(-s 127.0.0.1 -p $PORT -d 1024 --key-maximum=100000 --hide-histogram)
TARGETS=(redis gradus memcached gradus-mc)
for round in $(seq "$ROUNDS"); do
  shift_by=$(( (round - 1) % ${#TARGETS[@]} ))
  order=("${TARGETS[@]:$shift_by}" "${TARGETS[@]:0:$shift_by}")
  for t in "${order[@]}"; do
    start "$t"
    "$MEMTIER" "${COMMON[@]}" --protocol=$PROTO -t 1 -c 10 --pipeline=64 --ratio=1:0 \
      --key-pattern=P:P --requests=allkeys >/dev/null 2>&1
    before=$(cpu_ticks)
    "$MEMTIER" "${COMMON[@]}" --protocol=$PROTO -t 1 -c 50 --ratio=1:4 --key-pattern=R:R \
      --test-time="$SECONDS_RUN" --json-out-file="$TMP/$t-$round.json" >/dev/null 2>&1
    after=$(cpu_ticks)
    echo "$t $round $((after - before))" >>"$TMP/cpu"
    kill "$PID"; wait "$PID" 2>/dev/null || true; PID=
    echo "round $round: $t done" >&2
  done
done

python3 - "$TMP" "$ROUNDS" "$TICK" "${TARGETS[@]}" <<'EOF'
import json, statistics, sys
tmp, rounds, tick, targets = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
cpu = {}
for line in open(f"{tmp}/cpu"):
    t, r, ticks = line.split()
    cpu[(t, int(r))] = int(ticks)
rows = {}
for t in targets:
    ops, p50, p99, us = [], [], [], []
    for r in range(1, rounds + 1):
        tot = json.load(open(f"{tmp}/{t}-{r}.json"))["ALL STATS"]["Totals"]
        ops.append(tot["Ops/sec"])
        p50.append(tot["Percentile Latencies"]["p50.00"])
        p99.append(tot["Percentile Latencies"]["p99.00"])
        us.append(cpu[(t, r)] / tick * 1e6 / tot["Count"])
    rows[t] = (statistics.median(ops), statistics.median(p50), statistics.median(p99), statistics.median(us), ops)
print("| target | ops/s (median) | rounds | P50 ms | P99 ms | server CPU µs/request |")
print("|---|---|---|---|---|---|")
for t in targets:
    o, a, b, u, all_ops = rows[t]
    print(f"| {t} | {o:,.0f} | {', '.join(f'{x:,.0f}' for x in all_ops)} | {a:.3f} | {b:.3f} | {u:.2f} |")
print()
for g, peer in (("gradus", "redis"), ("gradus-mc", "memcached"), ("gradus", "memcached")):
    print(f"- {g} / {peer}: ops/s {rows[g][0] / rows[peer][0]:.2f}x, P99 {rows[g][2] / rows[peer][2]:.2f}x")
EOF
