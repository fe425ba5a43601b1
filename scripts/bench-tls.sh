#!/usr/bin/env bash
# Side-by-side throughput over TLS: Gradus' tls-port vs redis-server's tls-port (persistence off),
# both with the same certificates (made here with the openssl CLI) and client certificates
# required (tls-auth-clients yes, Redis' default), driven by the same redis-benchmark --tls lines.
#
#   scripts/bench-tls.sh [requests] [rounds]   (defaults: 200000 requests, 3 rounds)
#   GRADUS_THREADS=N sets gradus --threads (default: one worker per core).
#   TESTS=… sets the redis-benchmark tests (default: set,get); DATA=n the value size (default 1024).
#   GRADUS_BIN=path runs that gradus binary instead of building one.
#
# Each round runs, for each server in turn (Redis, then Gradus: rounds interleave the two),
#   redis-benchmark --tls … -t set,get -c 50 -d 1024 -n N            (no pipelining)
#   redis-benchmark --tls … -t set,get -c 50 -d 1024 -n N -P 16      (pipelining 16)
# (one redis-benchmark per test) and the median of the rounds is reported with the Gradus/Redis
# ratio, and the server's own CPU time (user+system, from /proc) per 1000 requests: on a shared,
# loaded machine throughput swings with the other load, CPU per request much less (Markdown on
# stdout).
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS=${1:-200000}
ROUNDS=${2:-3}
command -v redis-benchmark >/dev/null || { echo "redis-benchmark not found (scripts/install-deps.sh installs it)" >&2; exit 1; }
. scripts/bench-common.sh
GRADUS=$(gradus_binary)
TMP=$(mktemp -d)
trap 'kill $(cat "$TMP"/server.pid 2>/dev/null) 2>/dev/null || true; rm -rf "$TMP"' EXIT

# A CA, a server certificate for 127.0.0.1 and a client certificate (EC P-256, X.509 v3).
(
  cd "$TMP"
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >server.ext
  printf 'extendedKeyUsage=clientAuth\n' >client.ext
  for k in ca server client; do openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out $k.key 2>/dev/null; done
  openssl req -x509 -new -key ca.key -out ca.crt -days 2 -subj "/CN=bench CA" 2>/dev/null
  for k in server client; do
    openssl req -new -key $k.key -out $k.csr -subj "/CN=$k" 2>/dev/null
    openssl x509 -req -in $k.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out $k.crt -days 2 -extfile $k.ext 2>/dev/null
  done
)
TLS_SERVER=(--tls-cert-file "$TMP/server.crt" --tls-key-file "$TMP/server.key" --tls-ca-cert-file "$TMP/ca.crt" --tls-auth-clients yes)
TLS_CLIENT=(--tls --cacert "$TMP/ca.crt" --cert "$TMP/client.crt" --key "$TMP/client.key")

wait_port() { for _ in $(seq 100); do redis-cli "${TLS_CLIENT[@]}" -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "server on $1 did not start" >&2; exit 1; }

cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }

run_bench() { # port pipeline pid → lines "TEST,rps,server-cpu-ticks" (one redis-benchmark per test,
              # so the server's CPU time, user+system from /proc, is that test's)
  for t in $(echo "${TESTS:-set,get}" | tr , ' '); do
    local before after line
    before=$(cpu_ticks "$3")
    line=$(redis-benchmark "${TLS_CLIENT[@]}" -p "$1" -t "$t" -c 50 -d "${DATA:-1024}" -n "$REQUESTS" -P "$2" --csv 2>/dev/null \
      | tail -n +2 | tr -d '"' | cut -d, -f1,2)
    after=$(cpu_ticks "$3")
    echo "$line,$((after - before))"
  done
}

for round in $(seq "$ROUNDS"); do
  for target in redis gradus; do
    if [ "$target" = redis ]; then
      redis-server --port 0 --tls-port 7321 --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP" \
        "${TLS_SERVER[@]}" --daemonize no >"$TMP/redis.log" 2>&1 &
      port=7321
    else
      "$GRADUS" --port 0 --tls-port 7322 --memcached-port 0 --dir "$TMP/gdata" --durability none "${TLS_SERVER[@]}" \
        ${GRADUS_THREADS:+--threads $GRADUS_THREADS} --loglevel warn >"$TMP/gradus.log" 2>&1 &
      port=7322
    fi
    echo $! >"$TMP/server.pid"
    wait_port $port
    for p in 1 16; do
      run_bench $port $p "$(cat "$TMP/server.pid")" | sed "s/^/$target,$p,$round,/" >>"$TMP/results.csv"
    done
    kill "$(cat "$TMP/server.pid")"; wait "$(cat "$TMP/server.pid")" 2>/dev/null || true
    sleep 0.5
  done
done

python3 - "$TMP/results.csv" "$REQUESTS" <<'PY'
import csv, os, statistics, sys
rows = list(csv.reader(open(sys.argv[1])))
requests = int(sys.argv[2])
tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
data, cpu = {}, {}
for target, pipe, rnd, test, rps, ticks in rows:
    data.setdefault((test, int(pipe)), {}).setdefault(target, []).append(float(rps))
    # server CPU (user+system) per 1000 requests, in ms
    cpu.setdefault((test, int(pipe)), {}).setdefault(target, []).append(int(ticks) * tick_ms * 1000 / requests)
print("| test | pipeline | redis-server TLS ops/s | Gradus TLS ops/s | Gradus / Redis | redis-server CPU ms / 1k req | Gradus CPU ms / 1k req |")
print("|---|---|---|---|---|---|---|")
for (test, pipe) in sorted(data, key=lambda k: (k[1], k[0])):
    d, c = data[(test, pipe)], cpu[(test, pipe)]
    r, g = statistics.median(d["redis"]), statistics.median(d["gradus"])
    rc, gc = statistics.median(c["redis"]), statistics.median(c["gradus"])
    print(f"| {test} | {pipe} | {r:,.0f} | {g:,.0f} | {g / r:.2f}x | {rc:.1f} | {gc:.1f} |")
print()
print("Medians of the rounds. Per-round figures (target, pipeline, round, test, ops/s, server CPU ticks):")
print()
print("```")
for row in rows:
    print(",".join(row))
print("```")
PY
