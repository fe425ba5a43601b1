#!/usr/bin/env bash
# Install what the test suite needs, idempotently, on Debian 12 (run as root,
# or as a user with passwordless sudo; no stdin needed):
#   - redis-server, redis-cli, redis-benchmark (the reference server and real clients);
#   - redis-sentinel (the failover tests);
#   - memcached (a gradus-bench target);
#   - mariadb-server, mariadb-plugin-rocksdb and postgresql (gradus-bench database targets);
#   - php-cli and php-redis (phpredis, for the PHP session-handler tests);
#   - php-memcached, libmemcached-tools and memcached (memcached-port tests and benchmark);
#   - the Python packages in tests/python/requirements.txt (redis-py, pymemcache, pytest, hypothesis, rq,
#     celery, Django, channels, channels-redis);
#   - e2fsprogs and mount (the full-disk tests mount a small ext4 image; they need root);
#   - rustup's cargo on PATH (for this script's checks; scripts/test.sh does the same).
# Nothing is installed when it is already there.  A distro Redis service that the
# package starts is stopped again: the tests start their own servers on free ports.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.cargo/bin:$PATH"

log() { printf 'install-deps: %s\n' "$*" >&2; }

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo -n)
    fi
fi

APT_UPDATED=0
apt_install() {
    if ! command -v apt-get >/dev/null 2>&1; then
        log "apt-get not found; install these yourself: $*"
        return 1
    fi
    if [ "$APT_UPDATED" -eq 0 ]; then
        "${SUDO[@]}" apt-get update -q
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -q --no-install-recommends "$@"
}

# Install packages without letting them start their services (policy-rc.d exit 101 = "not
# allowed", unless a policy is already in place): the tests and the bench start their own servers
# on free loopback ports.
apt_install_quiet() {
    local created_policy=0 install_status=0
    if [ ! -e /usr/sbin/policy-rc.d ] && [ -w /usr/sbin ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        created_policy=1
    fi
    apt_install "$@" || install_status=$?
    if [ "$created_policy" -eq 1 ]; then
        rm -f /usr/sbin/policy-rc.d
    fi
    [ "$install_status" -eq 0 ] || exit "$install_status"
}

# Stop and disable distro services that started anyway (systemd or SysV init; a pid file is
# checked too). Errors are ignored: containers often have no init system at all.
#   stop_distro_service NAME [PIDFILE]
stop_distro_service() {
    local svc=$1 pidfile=${2:-}
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
        if systemctl is-active --quiet "$svc" 2>/dev/null; then
            log "stopping the distro $svc service"
            "${SUDO[@]}" systemctl stop "$svc" 2>/dev/null || true
            "${SUDO[@]}" systemctl disable "$svc" 2>/dev/null || true
        fi
    fi
    if [ -x "/etc/init.d/$svc" ]; then
        "${SUDO[@]}" "/etc/init.d/$svc" stop >/dev/null 2>&1 || true
        if command -v update-rc.d >/dev/null 2>&1; then
            "${SUDO[@]}" update-rc.d "$svc" disable >/dev/null 2>&1 || true
        fi
    fi
    if [ -n "$pidfile" ] && [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile" 2>/dev/null)" 2>/dev/null; then
        log "stopping the distro $svc (pid $(cat "$pidfile"))"
        "${SUDO[@]}" kill "$(cat "$pidfile")" 2>/dev/null || true
    fi
}

# --- Redis server and tools (reference server, real clients, redis-benchmark) ----------------
missing_redis=0
for tool in redis-server redis-cli redis-benchmark; do
    command -v "$tool" >/dev/null 2>&1 || missing_redis=1
done
if [ "$missing_redis" -eq 1 ]; then
    log "installing redis-server and redis-tools"
    apt_install_quiet redis-server redis-tools
fi
stop_distro_service redis-server /run/redis/redis-server.pid

# --- Redis Sentinel (the failover tests: three real Sentinels on loopback) -------------------
# Debian's redis-sentinel package; its service (port 26379) is stopped: the tests start their own.
if ! command -v redis-sentinel >/dev/null 2>&1; then
    log "installing redis-sentinel"
    apt_install_quiet redis-sentinel
fi
stop_distro_service redis-sentinel /run/sentinel/redis-sentinel.pid

# --- promtool and headless Chromium (metrics and status page tests) ---------------------------
# promtool (Debian's prometheus package) checks the /metrics output; chromium takes the status
# page's screenshot. The prometheus service the package installs is stopped: tests need only
# the tool.
if ! command -v promtool >/dev/null 2>&1; then
    log "installing prometheus (for promtool)"
    apt_install_quiet prometheus
    stop_distro_service prometheus
fi
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
    log "installing chromium"
    apt_install_quiet chromium
fi

# --- MariaDB (InnoDB and MyRocks) and PostgreSQL (gradus-bench database targets) ---------------
# gradus-bench starts its own mariadbd and postgres in temporary directories on free loopback
# ports (as the `postgres` system user when run as root), so the distro services must not run.
# mariadb-plugin-rocksdb provides ha_rocksdb.so for the `myrocks` target.
db_packages=()
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || db_packages+=(mariadb-server)
[ -e /usr/lib/mysql/plugin/ha_rocksdb.so ] || db_packages+=(mariadb-plugin-rocksdb)
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    db_packages+=(postgresql)
fi
if [ "${#db_packages[@]}" -gt 0 ]; then
    log "installing ${db_packages[*]}"
    apt_install_quiet "${db_packages[@]}"
    stop_distro_service mariadb
    stop_distro_service postgresql
fi

# --- mkfs.ext4 and mount (the full-disk tests put a data directory on a small loop-mounted ext4) -
if ! command -v mkfs.ext4 >/dev/null 2>&1 && [ ! -x /usr/sbin/mkfs.ext4 ] && [ ! -x /sbin/mkfs.ext4 ]; then
    log "installing e2fsprogs"
    apt_install e2fsprogs
fi
if ! command -v mount >/dev/null 2>&1 && [ ! -x /usr/bin/mount ] && [ ! -x /bin/mount ]; then
    log "installing mount"
    apt_install mount
fi

# --- PHP with phpredis (session-handler tests drive Gradus with phpredis itself) ---------------
if ! command -v php >/dev/null 2>&1 || ! php -m 2>/dev/null | grep -qi '^redis$'; then
    log "installing php-cli and php-redis"
    apt_install php-cli php-redis
fi

# --- memcached and its clients ----------------------------------------------------------------
# memcached itself (a gradus-bench target, the differential test, docs/benchmarks/memcached.md),
# php-memcached (sessions with sess_locking against the memcached port) and libmemcached-tools
# (memcdump/memcstat).
if ! php -m 2>/dev/null | grep -qi '^memcached$' || ! command -v memcdump >/dev/null 2>&1 \
    || ! command -v memcached >/dev/null 2>&1; then
    log "installing php-memcached, libmemcached-tools and memcached"
    apt_install_quiet php-memcached libmemcached-tools memcached
fi
stop_distro_service memcached /run/memcached/memcached.pid

# --- Python packages ----------------------------------------------------------------------
python_ok() {
    python3 - <<'EOF' 2>/dev/null
import importlib.metadata as md
import celery, channels, channels_redis, django, hypothesis, pymemcache, pytest, redis  # noqa: F401
major, minor = (int(x) for x in md.version("redis").split(".")[:2])
raise SystemExit(0 if (major, minor) >= (5, 2) and django.VERSION[:2] == (4, 2) else 1)
EOF
}

if ! command -v python3 >/dev/null 2>&1; then
    log "installing python3"
    apt_install python3 python3-pip python3-venv
fi
if ! python_ok; then
    if ! python3 -m pip --version >/dev/null 2>&1; then
        log "installing pip"
        apt_install python3-pip
    fi
    log "installing Python packages from tests/python/requirements.txt"
    if ! python3 -m pip install -q -r tests/python/requirements.txt; then
        # Debian's system Python refuses pip installs (PEP 668) unless told otherwise.
        python3 -m pip install -q --break-system-packages -r tests/python/requirements.txt
    fi
    python_ok || { log "Python packages still missing after pip install"; exit 1; }
fi

# --- Rust -----------------------------------------------------------------------------------
if ! command -v cargo >/dev/null 2>&1; then
    log "cargo not found (expected rustup's at \$HOME/.cargo/bin); install a Rust toolchain >= 1.80"
    exit 1
fi

log "ok: $(redis-server --version | cut -d' ' -f3), $(python3 -c 'import redis; print("redis-py", redis.__version__)'), $(cargo --version)"
