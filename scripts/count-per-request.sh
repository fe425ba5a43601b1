#!/usr/bin/env bash
# System calls, allocations and CPU time per request of one server under redis-benchmark.
#
#   scripts/count-per-request.sh gradus path/to/gradus [requests]
#   scripts/count-per-request.sh redis [requests]
#
# Starts the server (Gradus: `--durability none --memcached-port 0 --threads ${GRADUS_THREADS:-1}`;
# redis-server: `--save '' --appendonly no`), then for each of TESTS (default set,get) runs
#   redis-benchmark -c 50 -d ${DATA:-1024} -n N -t TEST -P ${PIPELINE:-1}
# while `perf stat` counts the server's system calls (tracepoints `syscalls:sys_enter_*`) and,
# through uprobes, its calls to the allocator (mimalloc's `mi_malloc_aligned`,
# `mi_zalloc_aligned`, `mi_realloc_aligned` for Gradus; `zmalloc`, `zcalloc`, `zrealloc`,
# `ztrymalloc_usable` … for Redis, whichever the binary has). Needs root (uprobes) and perf.
# Each test runs twice after a warm-up: once bare, for the server's CPU time (utime + stime from
# /proc/PID/stat) and ops/s, once under the counters (uprobes cost the server time). Prints one
# CSV line per test: server,test,ops/s,cpu µs/request,syscalls/request (total, then the largest
# by name),allocations/request.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=$1
if [ "$TARGET" = gradus ]; then BIN=$2; shift 2; else BIN=$(command -v redis-server); shift 1; fi
REQUESTS=${1:-200000}
PORT=${PORT:-7311}
TMP=$(mktemp -d)
cleanup() {
  [ -n "${SERVER:-}" ] && kill "$SERVER" 2>/dev/null || true
  perf probe -q -d 'probe_cpr:*' 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

if [ "$TARGET" = gradus ]; then
  FUNCS="mi_malloc_aligned mi_zalloc_aligned mi_realloc_aligned"
  "$BIN" --port "$PORT" --memcached-port 0 --dir "$TMP" --durability none --threads "${GRADUS_THREADS:-1}" --loglevel warn >"$TMP/server.log" 2>&1 &
else
  FUNCS="zmalloc zcalloc zrealloc zmalloc_usable zcalloc_usable zrealloc_usable ztrymalloc_usable ztrycalloc_usable ztryrealloc_usable"
  redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP" --daemonize no >"$TMP/server.log" 2>&1 &
fi
SERVER=$!
for _ in $(seq 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

EVENTS="syscalls:sys_enter_*"
for f in $FUNCS; do
  if perf probe -q -x "$BIN" --add "probe_cpr:cpr_$f=$f" 2>/dev/null; then EVENTS="$EVENTS,probe_cpr:cpr_$f"; fi
done

ticks() { awk '{print $14 + $15}' "/proc/$SERVER/stat"; }
HZ=$(getconf CLK_TCK)
for test in $(echo "${TESTS:-set,get}" | tr , ' '); do
  # Warm up (the keys exist for GET), then measure.
  redis-benchmark -p "$PORT" -c 50 -d "${DATA:-1024}" -n 50000 -t "$test" -P "${PIPELINE:-1}" -q >/dev/null 2>&1
  # CPU time and ops/s without the counters (uprobes cost the server time), then the counts.
  before=$(ticks)
  rps=$(redis-benchmark -p "$PORT" -c 50 -d "${DATA:-1024}" -n "$REQUESTS" -t "$test" -P "${PIPELINE:-1}" --csv 2>/dev/null | tail -1 | tr -d '"' | cut -d, -f2)
  after=$(ticks)
  perf stat -x, -e "$EVENTS" -p "$SERVER" -o "$TMP/perf.csv" &
  PERF=$!
  sleep 0.5
  redis-benchmark -p "$PORT" -c 50 -d "${DATA:-1024}" -n "$REQUESTS" -t "$test" -P "${PIPELINE:-1}" -q >/dev/null 2>&1
  kill -INT "$PERF"; wait "$PERF" 2>/dev/null || true
  python3 - "$TMP/perf.csv" "$TARGET" "$test" "$REQUESTS" "$rps" "$((after - before))" "$HZ" <<'PY'
import sys
path, target, test, n, rps, ticks, hz = sys.argv[1:]
n = int(n)
sys_calls, allocs = {}, 0
for line in open(path):
    parts = line.strip().split(",")
    if len(parts) < 3 or not parts[0].replace(".", "").isdigit():
        continue
    count, event = int(float(parts[0])), parts[2]
    if event.startswith("syscalls:sys_enter_"):
        if count:
            sys_calls[event[len("syscalls:sys_enter_"):]] = count
    elif event.startswith("probe_cpr:"):
        allocs += count
total = sum(sys_calls.values())
top = " ".join(f"{k}={v / n:.3f}" for k, v in sorted(sys_calls.items(), key=lambda kv: -kv[1])[:6])
cpu_us = int(ticks) / int(hz) * 1e6 / n
print(f"{target},{test},{float(rps):.0f},{cpu_us:.2f},{total / n:.3f} ({top}),{allocs / n:.2f}")
PY
done
