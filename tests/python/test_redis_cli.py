"""redis-cli (and a short redis-benchmark run) against Gradus.

redis-cli prints "raw" output when stdout is not a terminal (as here) and the
human format with --no-raw.  Skipped only when the tool is not installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

CLI = os.environ.get("REDIS_CLI_BIN") or shutil.which("redis-cli")
BENCHMARK = shutil.which("redis-benchmark")

pytestmark = pytest.mark.skipif(CLI is None, reason="redis-cli is not installed (run scripts/install-deps.sh)")


def cli(server, *args, stdin: bytes = b"", check: bool = True, timeout: float = 20) -> str:
    """Run redis-cli against `server`; return its stdout as text."""
    proc = subprocess.run(
        [CLI, "-h", server.host, "-p", str(server.port), *map(str, args)],
        input=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        timeout=timeout,
    )
    if check:
        assert proc.returncode == 0, f"redis-cli {args} exited {proc.returncode}: {proc.stderr!r}"
    return proc.stdout.decode()


def test_ping(gradus):
    assert cli(gradus, "PING") == "PONG\n"
    assert cli(gradus, "PING", "hello") == "hello\n"


def test_set_get(gradus):
    assert cli(gradus, "SET", "greeting", "hello world") == "OK\n"
    assert cli(gradus, "GET", "greeting") == "hello world\n"
    assert cli(gradus, "GET", "missing") == "\n"
    assert cli(gradus, "DEL", "greeting") == "1\n"


def test_no_raw_formatting(gradus):
    assert cli(gradus, "--no-raw", "SET", "k", "v") == "OK\n"
    assert cli(gradus, "--no-raw", "GET", "k") == '"v"\n'
    assert cli(gradus, "--no-raw", "GET", "missing") == "(nil)\n"
    assert cli(gradus, "--no-raw", "INCR", "n") == "(integer) 1\n"
    assert cli(gradus, "--no-raw", "ZADD", "z", "1.5", "m") == "(integer) 1\n"
    assert cli(gradus, "--no-raw", "ZRANGE", "z", "0", "-1", "WITHSCORES") == '1) "m"\n2) "1.5"\n'
    assert cli(gradus, "--no-raw", "HGETALL", "missing") == "(empty array)\n"
    assert cli(gradus, "--no-raw", "GET", "z") == (
        "(error) WRONGTYPE Operation against a key holding the wrong kind of value\n"
    )


def test_errors_are_printed(gradus):
    out = cli(gradus, "NOSUCHCMD", "a", check=False)
    assert out.startswith("ERR unknown command 'NOSUCHCMD', with args beginning with: 'a' ")


def test_resp3(gradus):
    cli(gradus, "HSET", "h", "f", "v")
    assert cli(gradus, "-3", "--no-raw", "HGETALL", "h") == '1# "f" => "v"\n'
    assert cli(gradus, "-3", "HGETALL", "h") == "f v\n"
    cli(gradus, "ZADD", "z", "2.5", "m")
    assert cli(gradus, "-3", "--no-raw", "ZSCORE", "z", "m") == "(double) 2.5\n"
    assert cli(gradus, "-3", "--no-raw", "GET", "missing") == "(nil)\n"
    assert cli(gradus, "-3", "--no-raw", "EXISTS", "h") == "(integer) 1\n"
    hello = cli(gradus, "-3", "--no-raw", "HELLO", "3")
    assert '1# "server" => "redis"' in hello
    assert '3# "proto" => (integer) 3' in hello


def test_info(gradus):
    out = cli(gradus, "INFO")
    assert "# Server" in out
    assert "redis_version:" in out
    out = cli(gradus, "INFO", "server")
    version = [line for line in out.splitlines() if line.startswith("redis_version:")][0]
    assert tuple(int(x) for x in version.split(":")[1].split(".")[:3]) >= (7, 2, 0)


def test_commands_from_stdin(gradus):
    out = cli(gradus, stdin=b"SET a 1\nINCR a\nGET a\nGET missing\n")
    assert out == "OK\n2\n2\n\n"


def test_last_argument_from_stdin(gradus):
    assert cli(gradus, "-x", "SET", "blob", stdin=b"line one\nline two\n") == "OK\n"
    assert cli(gradus, "STRLEN", "blob") == "18\n"


def test_select_db(gradus):
    assert cli(gradus, "-n", "3", "SET", "k", "in3") == "OK\n"
    assert cli(gradus, "-n", "3", "DBSIZE") == "1\n"
    assert cli(gradus, "DBSIZE") == "0\n"


def test_repeat(gradus):
    assert cli(gradus, "-r", "3", "INCR", "c") == "1\n2\n3\n"


def test_scan(gradus):
    cli(gradus, stdin=b"".join(b"SET user:%d x\n" % i for i in range(30)) + b"SET other 1\n")
    out = cli(gradus, "--scan", "--pattern", "user:*")
    assert sorted(out.split()) == sorted(f"user:{i}" for i in range(30))


def test_auth(gradus_factory):
    server = gradus_factory("--requirepass", "s3cret")
    assert cli(server, "--no-auth-warning", "-a", "s3cret", "PING") == "PONG\n"
    assert cli(server, "--no-auth-warning", "--user", "default", "--pass", "s3cret", "SET", "k", "v") == "OK\n"
    out = cli(server, "GET", "k", check=False)
    assert out.startswith("NOAUTH Authentication required.")


@pytest.mark.skipif(BENCHMARK is None, reason="redis-benchmark is not installed")
def test_redis_benchmark_smoke(gradus):
    proc = subprocess.run(
        [BENCHMARK, "-h", gradus.host, "-p", str(gradus.port), "-n", "2000", "-c", "4",
         "-t", "ping,set,get,incr,mset", "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=120,
    )
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, out
    for name in ("PING_INLINE", "PING_MBULK", "SET", "GET", "INCR", "MSET (10 keys)"):
        assert re.search(re.escape(name) + r": [0-9.]+ requests per second", out), out
    assert "ERR" not in out and "Error" not in out, out


def test_rdb_backup_with_redis_cli_loads_into_redis_server(gradus, _servers, tmp_path):
    """`redis-cli --rdb FILE` (REPLCONF rdb-only 1, then SYNC) saves a Redis RDB file that
    redis-check-rdb accepts and redis-server loads with the same keys, values, expiries and
    databases. Regression: the reply was Gradus' replication stream, which redis-check-rdb
    refused ("Wrong signature") and no Redis tool could read."""
    import redis as redis_py

    check_rdb = shutil.which("redis-check-rdb")
    if check_rdb is None:
        pytest.skip("redis-check-rdb is not installed (run scripts/install-deps.sh)")
    r = redis_py.Redis(host=gradus.host, port=gradus.port)
    r.set("int", 12345)
    r.set("str", "hello " * 20, ex=1000)
    r.rpush("list", *[f"e{i}" for i in range(300)])
    r.hset("hash", mapping={f"f{i}": f"v{i}" for i in range(20)})
    r.zadd("zset", {"a": 1, "b": 2.5, "c": -3})
    r.sadd("ints", 1, 2, 3)
    r.sadd("strs", "x", "y")
    r3 = redis_py.Redis(host=gradus.host, port=gradus.port, db=3)
    r3.set("in-db-3", "three")
    def contents(client, key):
        kind = client.type(key)
        read = {
            b"string": client.get,
            b"list": lambda k: client.lrange(k, 0, -1),
            b"hash": client.hgetall,
            b"set": client.smembers,
            b"zset": lambda k: client.zrange(k, 0, -1, withscores=True),
        }[kind]
        return kind, read(key)

    expected = {}
    for db, client in ((0, r), (3, r3)):
        for key in client.keys("*"):
            expected[(db, key)] = contents(client, key)
    path = tmp_path / "dump.rdb"
    cli(gradus, "--rdb", path)
    checked = subprocess.run([check_rdb, str(path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=20)
    assert b"RDB looks OK" in checked.stdout, checked.stdout.decode()
    peer = _servers.start_redis("--dir", str(tmp_path), "--dbfilename", "dump.rdb")
    loaded = {}
    for db in (0, 3):
        client = redis_py.Redis(host=peer.host, port=peer.port, db=db)
        for key in client.keys("*"):
            loaded[(db, key)] = contents(client, key)
        if db == 0:
            assert 900 < client.ttl("str") <= 1000
            assert client.ttl("int") == -1
    assert loaded == expected
