#!/usr/bin/env bash
# Stream commands, Gradus `none` vs redis-server without persistence, rounds interleaved.
#
#   scripts/bench-streams.sh [requests] [rounds]     (defaults: 200000 requests, 5 rounds)
#   GRADUS_BIN=path/to/gradus benchmarks that release binary instead of building one.
#   PIPELINES="1 16" sets the pipeline depths (default both).
#
# redis-benchmark has no stream tests, so each line is a command given to it (-c 50, keys from
# -r 1000, so 1000 streams):
#   xadd        XADD x:__rand_int__ MAXLEN ~ 1000 * user u1 event course.published
#   xrange      XRANGE x:__rand_int__ - + COUNT 10                (after the xadd line filled them)
#   xreadgroup  XREADGROUP GROUP g c COUNT 1 STREAMS x:__rand_int__ 0   (the consumer's history;
#               a group made on every stream first, 10 entries delivered to it)
# Prints `target,pipeline,round,test,ops/s,cpu µs per request` rows (scripts/paired-ratios.py reads
# them) and the medians as a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS=${1:-200000}
ROUNDS=${2:-5}
PIPELINES=${PIPELINES:-"1 16"}
. scripts/bench-common.sh
GRADUS=$(gradus_binary)
TMP=$(mktemp -d)
PORT=7321
trap 'redis-cli -p $PORT shutdown nosave >/dev/null 2>&1 || true; rm -rf "$TMP"' EXIT
wait_port() { for _ in $(seq 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "server did not start" >&2; exit 1; }
HZ=$(getconf CLK_TCK)

start() { # target → pid
    if [ "$1" = redis ]; then
        redis-server --port $PORT --save '' --appendonly no --dir "$TMP" >/dev/null 2>&1 &
    else
        "$GRADUS" --port $PORT --memcached-port 0 --durability none --dir "$TMP/g" >/dev/null 2>&1 &
    fi
    echo $!
}

one() { # target pipeline round
    local target=$1 p=$2 round=$3
    local pid; pid=$(start "$target"); wait_port
    bench() { # name command...
        local name=$1; shift
        local t0; t0=$(ticks "$pid")
        local rps; rps=$(redis-benchmark -p $PORT -c 50 -n "$REQUESTS" -P "$p" -r 1000 -q "$@" 2>/dev/null \
            | tr '\r' '\n' | awk '/requests per second/ {for (i=1;i<=NF;i++) if ($(i+1)=="requests") print $i}' | tail -1)
        local t1; t1=$(ticks "$pid")
        local cpu; cpu=$(awk -v a="$t0" -v b="$t1" -v hz="$HZ" -v n="$REQUESTS" 'BEGIN {printf "%.2f", (b-a)/hz*1e6/n}')
        echo "$target,$p,$round,$name,$rps,$cpu"
    }
    bench xadd XADD 'x:__rand_int__' MAXLEN '~' 1000 '*' user u1 event course.published
    bench xrange XRANGE 'x:__rand_int__' - + COUNT 10
    for i in $(seq 0 999); do printf 'XGROUP CREATE x:%012d g 0\r\nXREADGROUP GROUP g c COUNT 10 STREAMS x:%012d >\r\n' "$i" "$i"; done \
        | redis-cli -p $PORT --pipe >/dev/null 2>&1
    bench xreadgroup XREADGROUP GROUP g c COUNT 1 STREAMS 'x:__rand_int__' 0
    redis-cli -p $PORT shutdown nosave >/dev/null 2>&1 || kill "$pid"
    wait "$pid" 2>/dev/null || true
    rm -rf "$TMP/g"
}

OUT="$TMP/rows"
for round in $(seq "$ROUNDS"); do
    for p in $PIPELINES; do
        for target in redis gradus; do
            one "$target" "$p" "$round" | tee -a "$OUT"
        done
    done
done
echo
echo "| test | pipeline | redis-server ops/s (median) | Gradus ops/s (median) | Gradus / Redis | server CPU µs/request, Redis / Gradus |"
echo "|---|---|---|---|---|---|"
python3 - "$OUT" <<'EOF'
import statistics, sys
rows = [l.strip().split(",") for l in open(sys.argv[1]) if l.count(",") == 5]
keys = []
for t, p, r, test, rps, cpu in rows:
    if (test, p) not in keys:
        keys.append((test, p))
for test, p in keys:
    def med(target, col):
        return statistics.median(float(x[col]) for x in rows if x[0] == target and x[3] == test and x[1] == p)
    rd, gd = med("redis", 4), med("gradus", 4)
    print(f"| {test} | {p} | {rd:,.0f} | {gd:,.0f} | {gd / rd:.2f}x | {med('redis', 5):.1f} / {med('gradus', 5):.1f} |")
EOF
