#!/usr/bin/env bash
# Acknowledged writes with replicas: Gradus `background`, `strict` and `replicated` with 0, 1 and 2
# replicas, next to redis-server with `appendfsync everysec` / `always` and 0, 1 and 2 replicas,
# where Redis waits for a replica the only way it can: `WAIT 1 0` after each SET, in the same round
# trip. SET of 1 KiB values, 50 connections, one SET (and its WAIT) at a time per connection.
#
#   scripts/bench-replication.sh [rounds] [seconds]      (defaults: 3 rounds, 5 seconds each)
#   CONNECTIONS=n (default 50), SIZE=bytes (default 1024)
#
# Targets (primary degree : replicas : what the client does):
#   gradus:background:0|1|2   SET                       redis:everysec:0|1|2   SET
#   gradus:strict:0|1|2       SET                       redis:always:0|1|2     SET
#   gradus:replicated:1|2     SET (acked by 1 replica)   redis:always+wait:1|2  SET + WAIT 1 0
# Gradus replicas run at `strict` (a replica acknowledges a record once its own log has it
# durable); Redis replicas run with `appendfsync always` (a Redis replica acknowledges what it has
# applied, durable or not: its ACK does not wait for its fsync — so the Redis line is the weaker
# guarantee of the two). Every replica is attached with `REPLICAOF` at run time and waited for
# (the primary lists it online) before the load starts.
#
# The client is crates/bench/src/bin/write-load.rs (one thread). Every server runs on loopback,
# all on this machine: the primary, its replicas and the client share its cores, so a replica's
# apply and fsync compete with the primary's for the same two cores — absolute numbers are lower
# than on separate machines; the ratios between lines of one round are what this measures.
# Rounds run every target once, each round starting one target further on; the tables give the
# median ops/s and P99 of the rounds. The load average is printed at the start and the end.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
SECONDS_PER_RUN=${2:-5}
CONNECTIONS=${CONNECTIONS:-50}
SIZE=${SIZE:-1024}
TARGET_DIR=${CARGO_TARGET_DIR:-target}
command -v redis-server >/dev/null || { echo "redis-server not found (scripts/install-deps.sh installs it)" >&2; exit 1; }
cargo build --release -q -p gradus-server -p gradus-bench --bin gradus --bin write-load
GRADUS=$TARGET_DIR/release/gradus
LOAD=$TARGET_DIR/release/write-load
TMP=$(mktemp -d)
PIDS=()
# Kill every server and wait until each is gone (its port free) before the next target starts.
stop_all() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}
trap 'stop_all 2>/dev/null; rm -rf "$TMP"' EXIT
PRIMARY=7611

wait_port() { for _ in $(seq 200); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.05; done; echo "server on $1 did not start" >&2; exit 1; }
wait_replicas() { # port count
  for _ in $(seq 600); do
    n=$(redis-cli -p "$1" info replication | grep -c 'state=online' || true)
    [ "$n" -ge "$2" ] && return 0
    sleep 0.05
  done
  echo "the primary on $1 did not list $2 replicas online" >&2; redis-cli -p "$1" info replication >&2; exit 1
}

# kind port degree dir
start() {
  local kind=$1 port=$2 degree=$3 dir=$4
  mkdir -p "$dir"
  if [ "$kind" = gradus ]; then
    "$GRADUS" --port "$port" --memcached-port 0 --dir "$dir" --durability "$degree" --loglevel warn >"$dir.log" 2>&1 &
  else
    redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly yes --appendfsync "$degree" \
      --auto-aof-rewrite-percentage 0 >"$dir.log" 2>&1 &
  fi
  PIDS+=($!)
  wait_port "$port"
}

TARGETS="gradus:background:0 gradus:background:1 gradus:background:2 gradus:strict:0 gradus:strict:1 gradus:strict:2 gradus:replicated:1 gradus:replicated:2 redis:everysec:0 redis:everysec:1 redis:everysec:2 redis:always:0 redis:always:1 redis:always:2 redis:always+wait:1 redis:always+wait:2"
read -ra TARGET_LIST <<<"$TARGETS"
RAW=$TMP/raw.txt
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for round in $(seq "$ROUNDS"); do
  shift_by=$(( (round - 1) % ${#TARGET_LIST[@]} ))
  for target in "${TARGET_LIST[@]:shift_by}" "${TARGET_LIST[@]:0:shift_by}"; do
    IFS=: read -r kind mode replicas <<<"$target"
    degree=${mode%+wait}
    base="$TMP/$round-$kind-$mode-$replicas"
    start "$kind" $PRIMARY "$degree" "$base-primary"
    replica_degree=$([ "$kind" = gradus ] && echo strict || echo always)
    for i in $(seq "$replicas"); do
      port=$((PRIMARY + i))
      start "$kind" $port "$replica_degree" "$base-replica$i"
      redis-cli -p $port replicaof 127.0.0.1 $PRIMARY >/dev/null
    done
    [ "$replicas" -gt 0 ] && wait_replicas $PRIMARY "$replicas"
    if [ "$mode" = replicated ]; then
      redis-cli -p $PRIMARY config set min-replicas-to-write 1 >/dev/null
    fi
    wait_flag=()
    [ "$mode" = always+wait ] && wait_flag=(--wait 1)
    line=$("$LOAD" --port $PRIMARY --connections "$CONNECTIONS" --size "$SIZE" --seconds "$SECONDS_PER_RUN" "${wait_flag[@]}")
    echo "$round $target $line" | tee -a "$RAW" >&2
    stop_all
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

python3 - "$RAW" "$TARGETS" <<'EOF'
import statistics, sys
raw, targets = sys.argv[1], sys.argv[2].split()
rows = {}
for line in open(raw):
    parts = line.split()
    fields = dict(p.split('=', 1) for p in parts[2:])
    rows.setdefault(parts[1], []).append(fields)
def med(t, f):
    return statistics.median(float(r[f]) for r in rows[t])
print('| target | replicas | ops/s (median) | P99 µs (median) | errors | short WAITs |')
print('|---|---|---|---|---|---|')
for t in targets:
    kind, mode, replicas = t.split(':')
    errs = sum(int(r['errors']) for r in rows[t])
    short = sum(int(r['short_waits']) for r in rows[t])
    print(f"| {kind} {mode} | {replicas} | {med(t, 'ops_per_s'):.0f} | {med(t, 'p99_us'):.0f} | {errs} | {short} |")
def ratio(a, b):
    per_round = sorted(float(x['ops_per_s']) / float(y['ops_per_s']) for x, y in zip(rows[a], rows[b]))
    return f"{statistics.median(per_round):.2f}× (rounds {per_round[0]:.2f}–{per_round[-1]:.2f})"
print()
for a, b in [('gradus:replicated:1', 'gradus:strict:0'), ('gradus:replicated:2', 'gradus:strict:0'),
             ('gradus:replicated:1', 'gradus:strict:1'), ('gradus:replicated:2', 'gradus:strict:2'),
             ('gradus:replicated:1', 'redis:always+wait:1'), ('gradus:replicated:2', 'redis:always+wait:2'),
             ('gradus:strict:0', 'redis:always:0'), ('gradus:background:0', 'redis:everysec:0'),
             ('gradus:background:1', 'redis:everysec:1')]:
    print(f"- {a} / {b}: {ratio(a, b)}")
EOF
