#!/usr/bin/env bash
# Durability degrees side by side: Gradus at none/lazy/background/strict and redis-server with
# appendonly yes + appendfsync no/everysec/always, SET of 1 KiB values at 1, 8 and 50 connections,
# then Gradus recovery time for 1 M keys of 1 KiB (from the log, and from a snapshot), then how long
# SETs wait while a snapshot of those keys is taken, then recovery from a snapshot of 1 M keys of
# 1 KiB of random bytes (the values above are one letter repeated, which snapshot compression
# shrinks; random ones it cannot).
#
#   scripts/bench-durability.sh [requests] [recovery_keys] [rounds]   (defaults: 100000, 1000000, 3)
#
# Recovery is timed after kill -9. Log segments are written with direct I/O (the default), so the
# log-only restart reads the log from the disk, not from the page cache; the snapshot is written
# through the page cache, so a third restart drops the caches first (as root) to time it cold.
#
# Every server runs on loopback with a fresh data directory under $TMPDIR (on the same disk as
# the project). The throughput part runs `rounds` rounds; each round runs every target once, so
# a slow minute of the shared machine hits all targets of one round rather than one target of
# every round, and starts one target further on than the round before. The tables give the
# median of the rounds, the ratios are computed per round and their median given with the
# range. Every connection count runs the same number of requests. Prints Markdown on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS=${1:-100000}
RECOVERY_KEYS=${2:-1000000}
ROUNDS=${3:-3}
command -v redis-benchmark >/dev/null || { echo "redis-benchmark not found (scripts/install-deps.sh installs it)" >&2; exit 1; }
cargo build --release -q -p gradus-server
GRADUS=$PWD/target/release/gradus
TMP=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT

wait_port() { for _ in $(seq 300); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.05; done; echo "server on $1 did not start" >&2; exit 1; }
# port clients → ops/s. Every connection count gets the same number of requests: a one-connection
# run of a fifth of them (one second) swung by 30–50 % from round to round, for every target alike.
set_rps() {
  redis-benchmark -p "$1" -t set -d 1024 -c "$2" -n "$REQUESTS" -r 100000 --csv 2>/dev/null | tail -n 1 | tr -d '"' | cut -d, -f2
}

TARGETS="gradus:none gradus:lazy gradus:background gradus:strict redis:no redis:everysec redis:always"
RAW=$TMP/raw.txt   # lines: round target conns ops/s
# The throughput part measures what each degree costs a write, so neither server compacts its log
# meanwhile: Gradus takes no automatic snapshot (by default one after 256 MiB of log, which three
# runs of 100 000 SETs of 1 KiB pass during the third) and Redis no automatic AOF rewrite (by
# default at 64 MB and whenever the file doubles). What a snapshot costs writes is measured below.
printf '[durability]\nsnapshot-log-bytes = 0\n' >"$TMP/throughput.toml"
read -ra TARGET_LIST <<<"$TARGETS"
for round in $(seq "$ROUNDS"); do
  # Each round starts one target further on, so no target always runs right after the same one
  # (after its deleted data directory's write-back, say) or always first.
  shift_by=$(( (round - 1) % ${#TARGET_LIST[@]} ))
  for target in "${TARGET_LIST[@]:shift_by}" "${TARGET_LIST[@]:0:shift_by}"; do
    kind=${target%%:*}; mode=${target#*:}
    dir="$TMP/$kind-$mode-$round"; mkdir -p "$dir"
    if [ "$kind" = gradus ]; then
      "$GRADUS" --config "$TMP/throughput.toml" --port 7401 --memcached-port 0 --dir "$dir" --durability "$mode" --loglevel warn >"$dir.log" 2>&1 &
    else
      redis-server --port 7401 --bind 127.0.0.1 --dir "$dir" --save '' --appendonly yes --appendfsync "$mode" \
        --auto-aof-rewrite-percentage 0 >"$dir.log" 2>&1 &
    fi
    pid=$!; PIDS+=("$pid")
    wait_port 7401
    for c in 1 8 50; do
      echo "$round $target $c $(set_rps 7401 "$c")" >>"$RAW"
    done
    echo "round $round: $target done" >&2
    kill "$pid"; wait "$pid" 2>/dev/null || true
    rm -rf "$dir"
    # Let write-back of the previous target's data finish so it does not slow the next one's fsyncs.
    sync; sleep 2
  done
done
python3 - "$RAW" "$TARGETS" <<'PY'
import sys, statistics
raw, targets = sys.argv[1], sys.argv[2].split()
ops = {}
for line in open(raw):
    r, t, c, v = line.split()
    ops[(int(r), t, int(c))] = float(v)
rounds = sorted({k[0] for k in ops})
med = lambda xs: statistics.median(xs)
print(f"| target | 1 conn ops/s | 8 conns ops/s | 50 conns ops/s |  (median of {len(rounds)} rounds)")
print("|---|---|---|---|")
for t in targets:
    print(f"| {t.replace(':', ' ')} | " + " | ".join(f"{med([ops[(r, t, c)] for r in rounds]):.0f}" for c in (1, 8, 50)) + " |")
print()
def ratio(a, b, c):
    xs = [ops[(r, a, c)] / ops[(r, b, c)] for r in rounds]
    return f"{med(xs):.2f} ({min(xs):.2f}–{max(xs):.2f})"
print("| ratio (per round; median, range) | 1 conn | 8 conns | 50 conns |")
print("|---|---|---|---|")
for a, b in [("gradus:background", "gradus:none"), ("gradus:strict", "gradus:none"),
             ("gradus:strict", "redis:always"), ("gradus:background", "redis:everysec"),
             ("gradus:lazy", "redis:no")]:
    print(f"| {a.split(':')[1]} / {b.replace(':', ' ')} | " + " | ".join(ratio(a, b, c) for c in (1, 8, 50)) + " |")
print()
print("Per round (ops/s):")
print()
print("| round | " + " | ".join(t.replace(":", " ") + " 1/8/50" for t in targets) + " |")
print("|---|" + "---|" * len(targets))
for r in rounds:
    print(f"| {r} | " + " | ".join("/".join(f"{ops[(r, t, c)]/1000:.1f}k" for c in (1, 8, 50)) for t in targets) + " |")
print()
PY

# Recovery: load RECOVERY_KEYS distinct keys of 1 KiB at background, kill -9, time the restart.
# Automatic snapshots are off (snapshot-log-bytes = 0), so the first restart replays the whole log.
dir="$TMP/recovery"; mkdir -p "$dir"
printf '[durability]\nsnapshot-log-bytes = 0\n' >"$TMP/recovery.toml"
"$GRADUS" --config "$TMP/recovery.toml" --port 7402 --memcached-port 0 --dir "$dir" --loglevel info >"$dir.log" 2>&1 &
pid=$!; PIDS+=("$pid")
wait_port 7402
load_keys() { # values: "v" (1 KiB of one letter, as redis-benchmark's) or "random" (incompressible)
  python3 - "$RECOVERY_KEYS" "$1" <<'PY' | redis-cli -p 7402 --pipe >/dev/null
import os, sys
n = int(sys.argv[1])
random = sys.argv[2] == "random"
out = sys.stdout.buffer
for i in range(n):
    key = b"key:%d" % i
    value = os.urandom(1024) if random else b"v" * 1024
    out.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$1024\r\n%s\r\n" % (len(key), key, value))
# WAITAOF covers the writes of the connection that sends it: same connection as the SETs.
out.write(b"*4\r\n$7\r\nWAITAOF\r\n$1\r\n1\r\n$1\r\n0\r\n$1\r\n0\r\n")
PY
}
load_keys v
keys=$(redis-cli -p 7402 dbsize)
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
measure_restart() { # label
  local start end
  start=$(date +%s.%N)
  "$GRADUS" --config "$TMP/recovery.toml" --port 7402 --memcached-port 0 --dir "$dir" --loglevel info >"$dir.$1.log" 2>&1 &
  pid=$!; PIDS+=("$pid")
  wait_port 7402
  end=$(date +%s.%N)
  local got; got=$(redis-cli -p 7402 dbsize)
  local ms; ms=$(redis-cli -p 7402 info persistence | tr -d '\r' | grep '^gradus_recovery_ms:' | cut -d: -f2)
  echo "| $1 | $got of $keys | $ms | $(python3 -c "print(f'{$end-$start:.2f}')") |"
}
snapshot_mib() { du -m "$dir"/snap-*.snap | awk '{s += $1} END {print s}'; }
echo "| recovery of $keys keys × 1 KiB | keys back | recovery (server, ms) | until PING answers (s) |"
echo "|---|---|---|---|"
measure_restart "from the log alone (kill -9; no snapshot taken)"
save_started=$(date +%s.%N)
redis-cli -p 7402 save >/dev/null
save_s=$(python3 -c "import time; print(f'{time.time() - $save_started:.2f}')")
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
measure_restart "from a snapshot (kill -9 after SAVE; SAVE took $save_s s, $(snapshot_mib) MiB)"
# The same with nothing of the data directory in the page cache, as after a power cut (needs
# root to drop the caches; skipped otherwise).
if [ -w /proc/sys/vm/drop_caches ]; then
  kill -9 "$pid"; wait "$pid" 2>/dev/null || true
  sync; echo 3 >/proc/sys/vm/drop_caches
  measure_restart "from the snapshot again, page cache dropped first"
fi

# Writes while a snapshot of those keys is taken: SETs at 50 connections over the same keys, with a
# probe sending PING every 0.5 ms on its own connection and keeping its slowest replies; once
# without a snapshot and once with BGSAVE 1 s into the run. A snapshot must not hold commands back
# for more than a few milliseconds: what it adds is the difference between the two rows.
probe() { # seconds → the probe's three slowest round trips (ms)
  python3 - "$1" <<'PY'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", 7402)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
end = time.monotonic() + float(sys.argv[1]); worst = []
while time.monotonic() < end:
    start = time.monotonic(); s.sendall(b"*1\r\n$4\r\nPING\r\n"); reply = s.recv(64)
    while not reply.endswith(b"\r\n"):
        more = s.recv(64)
        if not more: sys.exit("connection closed")
        reply += more
    worst = sorted(worst + [time.monotonic() - start])[-3:]
    time.sleep(0.0005)
print(" / ".join(f"{w * 1000:.1f}" for w in reversed(worst)))
PY
}
echo
echo "| SETs during a snapshot of $keys keys | SET ops/s | SET p99 / max (ms) | PING probe, slowest three (ms) | snapshot: arming / longest shard copy (µs) |"
echo "|---|---|---|---|---|"
for mode in "no snapshot" "BGSAVE after 1 s"; do
  probe 6 >"$TMP/probe.txt" &
  probe_pid=$!
  if [ "$mode" != "no snapshot" ]; then (sleep 1; redis-cli -p 7402 bgsave >/dev/null) & fi
  line=$(redis-benchmark -p 7402 -t set -d 1024 -c 50 -n 300000 -r "$RECOVERY_KEYS" --csv 2>/dev/null | tail -n 1 | tr -d '"')
  wait "$probe_pid"
  while [ "$(redis-cli -p 7402 info persistence | tr -d '\r' | grep '^rdb_bgsave_in_progress:' | cut -d: -f2)" = 1 ]; do sleep 0.2; done
  snap="–"
  if [ "$mode" != "no snapshot" ]; then
    p=$(redis-cli -p 7402 info persistence | tr -d '\r')
    snap="$(echo "$p" | grep '^gradus_last_snapshot_arm_usec:' | cut -d: -f2) / $(echo "$p" | grep '^gradus_last_snapshot_max_shard_copy_usec:' | cut -d: -f2)"
  fi
  echo "| $mode | $(echo "$line" | cut -d, -f2 | cut -d. -f1) | $(echo "$line" | cut -d, -f7) / $(echo "$line" | cut -d, -f8) | $(cat "$TMP/probe.txt") | $snap |"
done

du -sh "$dir" | awk '{print "\nData directory after the runs: " $1}'

# The snapshot rows again with random values, which compression cannot shrink: a fresh data
# directory, the same number of keys, SAVE, then restarts from the snapshot (warm, then cold).
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
rm -rf "$dir"; mkdir -p "$dir"
"$GRADUS" --config "$TMP/recovery.toml" --port 7402 --memcached-port 0 --dir "$dir" --loglevel info >"$dir.random.log" 2>&1 &
pid=$!; PIDS+=("$pid")
wait_port 7402
load_keys random
keys=$(redis-cli -p 7402 dbsize)
save_started=$(date +%s.%N)
redis-cli -p 7402 save >/dev/null
save_s=$(python3 -c "import time; print(f'{time.time() - $save_started:.2f}')")
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
echo
echo "| recovery of $keys keys × 1 KiB of random bytes | keys back | recovery (server, ms) | until PING answers (s) |"
echo "|---|---|---|---|"
measure_restart "from a snapshot (kill -9 after SAVE; SAVE took $save_s s, $(snapshot_mib) MiB)"
if [ -w /proc/sys/vm/drop_caches ]; then
  kill -9 "$pid"; wait "$pid" 2>/dev/null || true
  sync; echo 3 >/proc/sys/vm/drop_caches
  measure_restart "from the snapshot again, page cache dropped first"
fi

# And with the default configuration, where a snapshot is taken automatically whenever the log has
# grown by 256 MiB: the same 1 M keys of the letter `v`, kill -9, page cache dropped, restart (the
# newest snapshot, then the log after it).
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
rm -rf "$dir"; mkdir -p "$dir"
"$GRADUS" --port 7402 --memcached-port 0 --dir "$dir" --loglevel info >"$dir.defaults.log" 2>&1 &
pid=$!; PIDS+=("$pid")
wait_port 7402
load_keys v
keys=$(redis-cli -p 7402 dbsize)
while [ "$(redis-cli -p 7402 info persistence | tr -d '\r' | grep '^rdb_bgsave_in_progress:' | cut -d: -f2)" = 1 ]; do sleep 0.2; done
log_mib=$(du -cm "$dir"/wal-*.log | tail -n 1 | cut -f1)
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
echo
echo "| recovery of $keys keys × 1 KiB, default configuration | keys back | recovery (server, ms) | until PING answers (s) |"
echo "|---|---|---|---|"
if [ -w /proc/sys/vm/drop_caches ]; then
  sync; echo 3 >/proc/sys/vm/drop_caches
fi
start=$(date +%s.%N)
"$GRADUS" --port 7402 --memcached-port 0 --dir "$dir" --loglevel info >>"$dir.defaults.log" 2>&1 &
pid=$!; PIDS+=("$pid")
wait_port 7402
end=$(date +%s.%N)
p=$(redis-cli -p 7402 info persistence | tr -d '\r')
echo "| the newest snapshot ($(snapshot_mib) MiB) and $(echo "$p" | grep '^gradus_recovery_records:' | cut -d: -f2) log records after it (segments: $log_mib MiB), page cache dropped | $(redis-cli -p 7402 dbsize) of $keys | $(echo "$p" | grep '^gradus_recovery_ms:' | cut -d: -f2) | $(python3 -c "print(f'{$end-$start:.2f}')") |"
