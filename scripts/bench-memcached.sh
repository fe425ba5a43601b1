#!/usr/bin/env bash
# memcached protocol: Gradus' memcached port vs memcached -t 2, in one run (same machine, same
# load generator, rounds interleaved). Gradus runs twice: durability none (a cache, like
# memcached) and background (every write logged, fsync within 10 ms).
#
#   scripts/bench-memcached.sh [connections] [value-bytes] [secs-per-round] [rounds]
#                              (defaults: 50 1024 10 3)
#   GRADUS_THREADS=N sets gradus --threads (default: one worker per core).
#   GRADUS_BASELINE=path/to/gradus adds an earlier build at durability none as a fourth target, in
#   the same rounds (to show that a change did not make the request path slower).
#
# Prints Markdown (crates/server/examples/memcache_bench.rs does the measuring).
set -euo pipefail
cd "$(dirname "$0")/.."
CONNS=${1:-50}; SIZE=${2:-1024}; SECS=${3:-10}; ROUNDS=${4:-3}
cargo build --release -q -p gradus-server --bin gradus --example memcache_bench
TMP=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$TMP"' EXIT
wait_port() {
    for _ in $(seq 200); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "no server on $1" >&2; exit 1
}
target/release/gradus --port 7601 --memcached-port 7611 --dir "$TMP/none" --durability none \
    ${GRADUS_THREADS:+--threads $GRADUS_THREADS} --loglevel warn >"$TMP/gradus-none.log" 2>&1 &
PIDS+=($!)
target/release/gradus --port 7602 --memcached-port 7612 --dir "$TMP/bg" --durability background \
    ${GRADUS_THREADS:+--threads $GRADUS_THREADS} --loglevel warn >"$TMP/gradus-bg.log" 2>&1 &
PIDS+=($!)
memcached -l 127.0.0.1 -p 7613 -U 0 -t 2 -m 1024 -c 1024 -u "$(id -un)" >"$TMP/memcached.log" 2>&1 &
PIDS+=($!)
BASELINE_TARGET=()
if [ -n "${GRADUS_BASELINE:-}" ]; then
    "$GRADUS_BASELINE" --port 7604 --memcached-port 7614 --dir "$TMP/baseline" --durability none \
        ${GRADUS_THREADS:+--threads $GRADUS_THREADS} --loglevel warn >"$TMP/baseline.log" 2>&1 &
    PIDS+=($!)
    wait_port 7614
    BASELINE_TARGET=(--target baseline-none=127.0.0.1:7614)
fi
wait_port 7611; wait_port 7612; wait_port 7613
echo "gradus $(target/release/gradus --version | cut -d' ' -f2), $(memcached -V), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(date -u +%Y-%m-%dT%H:%MZ)"
echo
target/release/examples/memcache_bench \
    --target gradus-none=127.0.0.1:7611 --target gradus-background=127.0.0.1:7612 \
    --target memcached=127.0.0.1:7613 "${BASELINE_TARGET[@]}" \
    --connections "$CONNS" --value "$SIZE" --keys 10000 --get-ratio 0.9 --secs "$SECS" --rounds "$ROUNDS"
