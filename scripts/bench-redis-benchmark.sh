#!/usr/bin/env bash
# Side-by-side throughput of Gradus and redis-server (persistence off) with redis-benchmark.
#
#   scripts/bench-redis-benchmark.sh [requests] [rounds]   (defaults: 200000 requests, 3 rounds)
#   GRADUS_THREADS=N sets gradus --threads (default: one worker per core).
#   TESTS=lpush,rpush,… sets the redis-benchmark tests (default: set,get,incr,hset); DATA=n the
#   value size (default 1024).
#   GRADUS_BIN=path/to/gradus benchmarks that release binary instead of building one.
#   GRADUS_BASELINE=path/to/gradus adds a third target, an earlier build, to every round (to show
#   that a change did not make the request path slower, as a same-run ratio).
#   GRADUS_BASELINE_THREADS=N sets the baseline's --threads (default: GRADUS_THREADS); with
#   GRADUS_BASELINE=$GRADUS_BIN it compares two thread counts of one build in one run.
#   PIPELINES="1 16" sets the pipeline depths run (default both).
#
# Both servers run on loopback, one at a time, with the same redis-benchmark command lines:
#   redis-benchmark -t set,get,incr,hset -c 50 -d 1024 -n N            (no pipelining)
#   redis-benchmark -t set,get,incr,hset -c 50 -d 1024 -n N -P 16      (pipelining 16)
# Rounds alternate Redis / Gradus so machine noise hits both alike; the median of the rounds is
# reported with the Gradus/Redis ratio, and the server's CPU time per request (utime + stime
# from /proc/PID/stat around each test, one redis-benchmark run per test): a steadier figure
# than ops/s on a shared machine. Prints a Markdown table on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS=${1:-200000}
ROUNDS=${2:-3}
command -v redis-benchmark >/dev/null || { echo "redis-benchmark not found (scripts/install-deps.sh installs it)" >&2; exit 1; }
. scripts/bench-common.sh
GRADUS=$(gradus_binary)
TMP=$(mktemp -d)
trap 'redis-cli -p 7301 shutdown nosave >/dev/null 2>&1 || true; kill $(cat "$TMP"/gradus.pid 2>/dev/null) 2>/dev/null || true; rm -rf "$TMP"' EXIT

wait_port() { for _ in $(seq 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "server on $1 did not start" >&2; exit 1; }

HZ=$(getconf CLK_TCK)
run_bench() { # port pipeline server-pid → lines "TEST,rps,cpu µs per request"
  for test in $(echo "${TESTS:-set,get,incr,hset}" | tr , ' '); do
    before=$(ticks "$3")
    line=$(redis-benchmark -p "$1" -t "$test" -c 50 -d "${DATA:-1024}" -n "$REQUESTS" -P "$2" --csv 2>/dev/null \
      | tail -n +2 | tr -d '"' | cut -d, -f1,2)
    after=$(ticks "$3")
    cpu=$(awk -v t=$((after - before)) -v hz="$HZ" -v n="$REQUESTS" 'BEGIN { printf "%.2f", t / hz * 1e6 / n }')
    # LRANGE tests print their LPUSH fill line too: each line gets the run's CPU figure.
    echo "$line" | sed "s/\$/,$cpu/"
  done
}

BASELINE_THREADS=${GRADUS_BASELINE_THREADS:-${GRADUS_THREADS:-}}
TARGETS="redis gradus${GRADUS_BASELINE:+ baseline}"
for round in $(seq "$ROUNDS"); do
  for target in $TARGETS; do
    if [ "$target" = baseline ]; then
      "$GRADUS_BASELINE" --port 7302 --memcached-port 0 --dir "$TMP/bdata" --durability none ${BASELINE_THREADS:+--threads $BASELINE_THREADS} --loglevel warn >"$TMP/baseline.log" 2>&1 &
      echo $! >"$TMP/gradus.pid"
      pid=$(cat "$TMP/gradus.pid")
      port=7302
    elif [ "$target" = redis ]; then
      redis-server --port 7301 --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP" --daemonize no >"$TMP/redis.log" 2>&1 &
      pid=$!
      port=7301
    else
      "$GRADUS" --port 7302 --memcached-port 0 --dir "$TMP/gdata" --durability none ${GRADUS_THREADS:+--threads $GRADUS_THREADS} --loglevel warn >"$TMP/gradus.log" 2>&1 &
      echo $! >"$TMP/gradus.pid"
      pid=$(cat "$TMP/gradus.pid")
      port=7302
    fi
    wait_port $port
    for p in ${PIPELINES:-1 16}; do
      run_bench $port $p $pid | sed "s/^/$target,$p,$round,/" >>"$TMP/results.csv"
    done
    if [ "$target" = redis ]; then redis-cli -p 7301 shutdown nosave >/dev/null 2>&1 || true; else kill "$(cat "$TMP/gradus.pid")"; wait "$(cat "$TMP/gradus.pid")" 2>/dev/null || true; fi
    sleep 0.5
  done
done

python3 - "$TMP/results.csv" <<'PY'
import csv, statistics, sys
rows = list(csv.reader(open(sys.argv[1])))
data, cpu = {}, {}
for target, pipe, rnd, test, rps, us in rows:
    data.setdefault((test, int(pipe)), {}).setdefault(target, []).append(float(rps))
    cpu.setdefault((test, int(pipe)), {}).setdefault(target, []).append(float(us))
baseline = any("baseline" in d for d in data.values())
head = "| test | pipeline | redis-server ops/s (median) | Gradus ops/s (median) | Gradus / Redis |"
rule = "|---|---|---|---|---|"
if baseline:
    head += " baseline ops/s (median) | baseline / Redis |"
    rule += "---|---|"
head += " redis-server CPU µs/request | Gradus CPU µs/request |"
rule += "---|---|"
if baseline:
    head += " baseline CPU µs/request |"
    rule += "---|"
print(head)
print(rule)
for (test, pipe) in sorted(data, key=lambda k: (k[1], k[0])):
    d, c = data[(test, pipe)], cpu[(test, pipe)]
    r, g = statistics.median(d["redis"]), statistics.median(d["gradus"])
    line = f"| {test} | {pipe} | {r:,.0f} | {g:,.0f} | {g / r:.2f}x |"
    if baseline:
        b = statistics.median(d["baseline"])
        line += f" {b:,.0f} | {b / r:.2f}x |"
    line += f" {statistics.median(c['redis']):.2f} | {statistics.median(c['gradus']):.2f} |"
    if baseline:
        line += f" {statistics.median(c['baseline']):.2f} |"
    print(line)
print()
print("Per-round figures (target, pipeline, round, test, ops/s, server CPU µs per request):")
print()
print("```")
for row in rows:
    print(",".join(row))
print("```")
PY
