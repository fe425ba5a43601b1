#!/usr/bin/env bash
# User-space instructions per request of Gradus and redis-server, counted by valgrind's callgrind:
# a figure that does not move with machine noise, where ops/s on a shared 2-core box moves by
# ±40 % between runs of one binary.
#
#   scripts/bench-instructions.sh [requests] [gradus-binary ...]
#   TESTS=lpush,get,…   redis-benchmark tests (default: get,set,lpush,rpush,lpop,sadd); also
#                       unlock, script4, fcall4 (EVALSHA/FCALL, as scripts/bench-scripting.py)
#   PIPELINE=n          redis-benchmark -P (default 16: the request path, not the syscalls)
#   DATA=n              redis-benchmark -d: value size in bytes (default 3)
#
# Each server runs under callgrind on loopback, persistence off (Gradus `--durability none
# --threads 1`, redis-server `--save '' --appendonly no`), and gets one redis-benchmark run
# (`-c 50 -d ${DATA:-3} -n REQUESTS -P PIPELINE -t TEST`), then is shut down. The figure is the whole
# process' instruction count divided by the requests, less an idle run's count (start-up and
# shutdown). Kernel time (the socket calls) is not counted: it is the same calls for both
# servers at equal pipelining. Prints a Markdown table on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS=${1:-100000}
shift || true
BINARIES=("$@")
if [ ${#BINARIES[@]} -eq 0 ]; then
  cargo build --release -q -p gradus-server
  BINARIES=("${CARGO_TARGET_DIR:-target}/release/gradus")
fi
for tool in valgrind callgrind_annotate redis-benchmark redis-server redis-cli; do
  command -v "$tool" >/dev/null || { echo "$tool not found (Debian: apt-get install valgrind redis-server redis-tools)" >&2; exit 1; }
done
PORT=7481
TMP=$(mktemp -d)
trap 'redis-cli -p $PORT shutdown nosave >/dev/null 2>&1 || true; rm -rf "$TMP"' EXIT

count() { # test requests command... → instructions of the whole run
  local test=$1 n=$2; shift 2
  rm -rf "$TMP/run" && mkdir "$TMP/run"
  valgrind --tool=callgrind --callgrind-out-file="$TMP/run/cg.out" "$@" >"$TMP/run/log" 2>&1 &
  local pid=$!
  for _ in $(seq 300); do redis-cli -p $PORT ping >/dev/null 2>&1 && break; sleep 0.2; done
  if [ "$n" -gt 0 ]; then
    # GET reads the key SET writes (redis-benchmark's key and value), not a missing one.
    [ "$test" = get ] && redis-cli -p $PORT set key:__rand_int__ "$(head -c "${DATA:-3}" /dev/zero | tr '\0' x)" >/dev/null
    case "$test" in
      unlock|script4|fcall4)
        # The scripts of scripts/bench-scripting.py, on random keys as there.
        local sha
        case "$test" in
          unlock) sha=$(redis-cli -p $PORT script load "$UNLOCK")
                  set -- evalsha "$sha" 1 lock:__rand_int__ token ;;
          script4) sha=$(redis-cli -p $PORT script load "$SCRIPT4")
                   set -- evalsha "$sha" 2 k:__rand_int__ n:__rand_int__ value ;;
          fcall4) redis-cli -p $PORT function load replace "$LIBRARY" >/dev/null
                  set -- fcall touch4 2 k:__rand_int__ n:__rand_int__ value ;;
        esac
        redis-benchmark -p $PORT -c 50 -n "$n" -P "${PIPELINE:-16}" -r 100000 -q "$@" >/dev/null 2>&1 ;;
      *)
        redis-benchmark -p $PORT -t "$test" -c 50 -d ${DATA:-3} -n "$n" -P "${PIPELINE:-16}" -q >/dev/null 2>&1 ;;
    esac
  fi
  redis-cli -p $PORT shutdown nosave >/dev/null 2>&1 || true
  wait "$pid" || true
  callgrind_annotate "$TMP/run/cg.out" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }'
}

# unlock, script4, fcall4: the scripts of scripts/bench-scripting.py (phpredis' session unlock;
# SET, INCR, GET and EXPIRE on two keys, as a script and as a Redis 7 function).
UNLOCK='if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end'
SCRIPT4="redis.call('set', KEYS[1], ARGV[1]); redis.call('incr', KEYS[2]); redis.call('get', KEYS[1]); return redis.call('expire', KEYS[1], 100)"
LIBRARY="#!lua name=bench
redis.register_function('touch4', function(keys, args)
  redis.call('set', keys[1], args[1]); redis.call('incr', keys[2])
  redis.call('get', keys[1]); return redis.call('expire', keys[1], 100)
end)"

server() { # target → its command line
  if [ "$1" = redis ]; then
    echo "redis-server --port $PORT --save '' --appendonly no --dir $TMP/run"
  else
    echo "$1 --port $PORT --memcached-port 0 --dir $TMP/run/data --durability none --threads 1 --loglevel warn"
  fi
}

TARGETS=(redis "${BINARIES[@]}")
header="| test | pipeline |"
rule="|---|---|"
for t in "${TARGETS[@]}"; do header="$header $(basename "$t") instructions/request |"; rule="$rule---|"; done
for t in "${BINARIES[@]}"; do header="$header $(basename "$t") / redis |"; rule="$rule---|"; done
echo "$header"
echo "$rule"
declare -A idle
for t in "${TARGETS[@]}"; do
  # shellcheck disable=SC2046
  idle[$t]=$(eval count get 0 $(server "$t"))
done
for test in $(echo "${TESTS:-get,set,lpush,rpush,lpop,sadd}" | tr , ' '); do
  line="| ${test^^} | ${PIPELINE:-16} |"
  declare -A per
  for t in "${TARGETS[@]}"; do
    # shellcheck disable=SC2046
    total=$(eval count "$test" "$REQUESTS" $(server "$t"))
    per[$t]=$(( (total - idle[$t]) / REQUESTS ))
    line="$line $(printf "%d" "${per[$t]}") |"
  done
  for t in "${BINARIES[@]}"; do
    line="$line $(awk -v a="${per[$t]}" -v b="${per[redis]}" 'BEGIN { printf "%.2fx", a / b }') |"
  done
  echo "$line"
done
