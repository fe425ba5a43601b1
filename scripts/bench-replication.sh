#!/usr/bin/env bash
# Replication cost: SET throughput of a Gradus primary at none/background with 0 and 1 replica,
# strict with 0, 1 and 2, replicated with 1 and 2 (min-replicas-to-write 0: each write waits for
# one replica), next to redis-server without persistence with 0, 1 and 2 replicas, in one run.
# SET of 1 KiB values from redis-benchmark.
#
#   scripts/bench-replication.sh [requests] [clients] [rounds]   (defaults: 50000, 8, 3)
#
# Every server runs on loopback with a fresh data directory under $TMPDIR. Each round runs every
# target once (a fresh primary, and its replica started and synced before the run), starting one
# target further on than the round before, so a slow minute of the shared machine hits all
# targets of one round. The table gives the median of the rounds in requests per second. Prints
# Markdown on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS=${1:-50000}
CLIENTS=${2:-8}
ROUNDS=${3:-3}
command -v redis-benchmark >/dev/null || { echo "redis-benchmark not found (scripts/install-deps.sh installs it)" >&2; exit 1; }
TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
cargo build --release -q -p gradus-server
GRADUS=$TARGET_DIR/release/gradus
TMP=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
wait_port() { for _ in $(seq 300); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.05; done; echo "server on $1 did not start" >&2; exit 1; }
wait_link() { for _ in $(seq 600); do redis-cli -p "$1" info replication | grep -q 'master_link_status:up' && return 0; sleep 0.05; done; echo "replica on $1 did not link" >&2; exit 1; }
set_rps() {
  redis-benchmark -p "$1" -t set -d 1024 -c "$CLIENTS" -n "$REQUESTS" -r 100000 --csv 2>/dev/null | tail -n 1 | tr -d '"' | cut -d, -f2
}

# start <kind> <degree|-> → prints "port pid"
start() {
  local kind=$1 degree=$2 port dir
  port=$(free_port)
  dir=$(mktemp -d -p "$TMP")
  if [ "$kind" = gradus ]; then
    "$GRADUS" --bind 127.0.0.1 --port "$port" --dir "$dir" --memcached-port 0 --durability "$degree" >"$dir/log" 2>&1 &
  else
    redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" --save '' --appendonly no >"$dir/log" 2>&1 &
  fi
  echo "$port $!"
}

# run <name> <kind> <degree> <replicas> → prints ops/s
run() {
  local name=$1 kind=$2 degree=$3 replicas=$4 pport ppid rport rpid rps
  read -r pport ppid < <(start "$kind" "$degree")
  PIDS+=("$ppid")
  wait_port "$pport"
  local started=()
  for _ in $(seq "$replicas"); do
    read -r rport rpid < <(start "$kind" "$degree")
    PIDS+=("$rpid")
    wait_port "$rport"
    redis-cli -p "$rport" replicaof 127.0.0.1 "$pport" >/dev/null
    wait_link "$rport"
    started+=("$rpid")
  done
  rps=$(set_rps "$pport")
  kill -9 "$ppid" "${started[@]}" 2>/dev/null || true
  echo "$rps"
}

TARGETS=(
  "gradus none, 0 replicas|gradus|none|0"
  "gradus none, 1 replica|gradus|none|1"
  "gradus background, 0 replicas|gradus|background|0"
  "gradus background, 1 replica|gradus|background|1"
  "gradus strict, 0 replicas|gradus|strict|0"
  "gradus strict, 1 replica|gradus|strict|1"
  "gradus strict, 2 replicas|gradus|strict|2"
  "gradus replicated, 1 replica|gradus|replicated|1"
  "gradus replicated, 2 replicas|gradus|replicated|2"
  "redis-server no persistence, 0 replicas|redis|-|0"
  "redis-server no persistence, 1 replica|redis|-|1"
  "redis-server no persistence, 2 replicas|redis|-|2"
)
declare -A RESULTS
n=${#TARGETS[@]}
for round in $(seq "$ROUNDS"); do
  for i in $(seq 0 $((n - 1))); do
    t=${TARGETS[$(((i + round - 1) % n))]}
    IFS='|' read -r name kind degree replicas <<<"$t"
    RESULTS[$name]+="$(run "$name" "$kind" "$degree" "$replicas") "
  done
done

echo "SET, 1 KiB values, $CLIENTS clients, $REQUESTS requests per run, median of $ROUNDS rounds (requests/s):"
echo
echo "| target | median | rounds |"
echo "|---|---|---|"
for t in "${TARGETS[@]}"; do
  IFS='|' read -r name _ <<<"$t"
  values=${RESULTS[$name]}
  median=$(echo "$values" | tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  echo "| $name | $median | $values|"
done
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
