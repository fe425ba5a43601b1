"""Replication: a primary and its replicas, real processes on loopback (see README, Replication).

Each node runs with database 0 logged (`background`) and database 1 `none`, so every test also
checks that a `none` keyspace is shipped to replicas (a replica of a cache is a warm cache) but
never written to a replica's own log. Convergence is checked by comparing every key's type,
contents and TTL on both sides, after `WAIT 1 <timeout>` said the replica acknowledged the
writer's last write (a replica acknowledges once it has applied it and its log made it durable).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest
import redis

from resp import Err, RawClient, Simple
from servers import redis_client

NONE_DB1 = '[durability]\ndefault = "background"\ndatabases = { "1" = "none" }\n'
SYNC_TIMEOUT = 20.0


# --- helpers -----------------------------------------------------------------


def config(tmp_path: Path, extra: str = "", name: str = "gradus.toml") -> str:
    path = tmp_path / name
    path.write_text(extra + NONE_DB1)
    return str(path)


def start_pair(gradus_factory, tmp_path, replicas: int = 1, primary_extra: str = ""):
    """A primary and `replicas` replicas following it (REPLICAOF), all linked."""
    primary = gradus_factory("--config", config(tmp_path, primary_extra, "primary.toml"), name="primary")
    followers = []
    for i in range(replicas):
        replica = gradus_factory("--config", config(tmp_path, name=f"replica{i}.toml"), name=f"replica{i}")
        assert client(replica).execute_command("REPLICAOF", primary.host, primary.port) == b"OK"
        followers.append(replica)
    for replica in followers:
        wait_link_up(replica)
    return primary, followers


def client(server, db: int = 0) -> redis.Redis:
    return redis_client(server, db=db, single_connection_client=True, password=server.password)


def info_text(server, section: str) -> str:
    c = client(server)
    c.set_response_callback("INFO", lambda r, **kw: r)
    text = c.execute_command("INFO", section)
    c.close()
    return text.decode() if isinstance(text, bytes) else text


def info(server, section: str = "replication") -> Dict[str, str]:
    text = info_text(server, section)
    if isinstance(text, bytes):
        text = text.decode()
    out = {}
    for line in text.splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k] = v
    return out


def info_keys(server, section: str = "replication") -> List[str]:
    text = info_text(server, section)
    return [l.split(":", 1)[0] for l in text.splitlines() if ":" in l and not l.startswith("#")]


def wait_until(predicate, timeout: float = SYNC_TIMEOUT, what: str = "condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def wait_link_up(replica, timeout: float = SYNC_TIMEOUT):
    wait_until(lambda: info(replica).get("master_link_status") == "up", timeout, "the replication link")


def wait_synced(primary, replica):
    """Until the replica applied everything the primary streamed so far."""
    target = int(info(primary)["master_repl_offset"])
    wait_until(lambda: int(info(replica).get("slave_repl_offset", "0")) >= target,
               what=f"replica offset >= {target}")


def snapshot(server, db: int) -> Dict[bytes, tuple]:
    """Every key of database `db`: (type, contents, has a TTL)."""
    c = client(server, db)
    out = {}
    for key in c.scan_iter(count=1000):
        kind = c.type(key)
        if kind == b"string":
            value = c.get(key)
        elif kind == b"hash":
            value = sorted(c.hgetall(key).items())
        elif kind == b"list":
            value = c.lrange(key, 0, -1)
        elif kind == b"set":
            value = sorted(c.smembers(key))
        elif kind == b"zset":
            value = c.zrange(key, 0, -1, withscores=True)
        else:
            value = None
        out[key] = (kind, value, c.pttl(key) > 0)
    return out


def assert_converged(primary, replica, dbs=(0, 1)):
    wait_synced(primary, replica)
    for db in dbs:
        assert snapshot(replica, db) == snapshot(primary, db), f"database {db} differs"


def replica_link_addr(primary) -> Optional[str]:
    for c in client(primary).client_list():
        if "S" in c["flags"]:
            return c["addr"]
    return None


GRADUS_ONLY = pytest.mark.gradus_only


# --- tests -------------------------------------------------------------------


@GRADUS_ONLY
def test_live_writes_of_every_kind_converge(gradus_factory, tmp_path):
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    p0, p1 = client(primary, 0), client(primary, 1)
    p0.set("s", "v")
    p0.set("ttl", "v", px=600_000)
    p0.hset("h", mapping={"a": "1", "b": "2"})
    p0.rpush("l", *range(20))
    p0.lpop("l")
    p0.sadd("set", "x", "y", "z")
    p0.srem("set", "y")
    p0.zadd("z", {"a": 1.5, "b": 2.5})
    p0.zincrby("z", 3, "a")
    p0.incr("counter")
    p0.expire("h", 1000)
    with p0.pipeline(transaction=True) as pipe:
        pipe.set("m1", "1").incr("m2").hset("mh", "f", "v").execute()
    p0.eval("redis.call('SET', KEYS[1], ARGV[1]); return redis.call('INCR', KEYS[2])", 2, "script", "sc", "v")
    p1.set("cache", "warm")
    p1.hset("cacheh", "f", "v")
    assert p0.execute_command("WAIT", 1, 5000) == 1
    assert_converged(primary, replica)
    # FLUSHALL empties the tenant's keyspaces on both; later writes still converge.
    p0.flushall()
    p0.set("after", "flush")
    p1.set("cache2", "x")
    assert p0.execute_command("WAIT", 1, 5000) == 1
    assert_converged(primary, replica)
    assert client(replica, 0).dbsize() == 1


@GRADUS_ONLY
def test_a_mixed_multi_ships_both_keyspaces_and_logs_only_the_logged_one(gradus_factory, tmp_path):
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    p = client(primary, 0)
    p.execute_command("MULTI")
    p.execute_command("SET", "logged", "1")
    p.execute_command("SELECT", "1")
    p.execute_command("SET", "cached", "2")
    p.execute_command("EXEC")
    # Fsynced here (background would allow a crash to lose it) and acknowledged by the replica.
    assert p.execute_command("WAITAOF", 1, 1, 5000) == [1, 1]
    assert client(replica, 0).get("logged") == b"1"
    assert client(replica, 1).get("cached") == b"2"
    # The primary's own log has only the logged write: after a crash, `cached` is gone.
    primary.crash_restart()
    assert client(primary, 0).get("logged") == b"1"
    assert client(primary, 1).get("cached") is None


@GRADUS_ONLY
def test_full_sync_of_a_preloaded_primary_ships_none_and_logged_keyspaces(gradus_factory, tmp_path):
    primary = gradus_factory("--config", config(tmp_path, name="primary.toml"), name="primary")
    p0, p1 = client(primary, 0), client(primary, 1)
    for db_client, prefix in ((p0, "logged"), (p1, "cache")):
        pipe = db_client.pipeline(transaction=False)
        for i in range(10_000):
            pipe.set(f"{prefix}:{i}", f"value-{i}")
        pipe.execute()
    p0.hset("big", mapping={f"f{i}": i for i in range(2000)})
    p0.set("expiring", "x", ex=1000)
    replica = gradus_factory("--config", config(tmp_path, name="replica.toml"),
                             "--replicaof", f"{primary.host} {primary.port}", name="replica")
    wait_link_up(replica)
    assert_converged(primary, replica)
    assert client(replica, 0).dbsize() == 10_002
    assert client(replica, 1).dbsize() == 10_000
    assert client(replica, 0).ttl("expiring") > 900
    stats = info(primary, "stats")
    assert stats["sync_full"] == "1"
    assert stats["sync_partial_ok"] == "0"


@GRADUS_ONLY
def test_a_replica_refuses_writes_with_redis_text(gradus_factory, tmp_path):
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    r = client(replica)
    with pytest.raises(redis.exceptions.ReadOnlyError, match="You can't write against a read only replica."):
        r.set("k", "v")
    # Queued in MULTI: refused at once, and EXEC aborts, as Redis.
    r.execute_command("MULTI")
    with pytest.raises(redis.exceptions.ReadOnlyError):
        r.execute_command("SET", "k", "v")
    with pytest.raises(redis.exceptions.ExecAbortError):
        r.execute_command("EXEC")
    assert r.get("k") is None
    # Reads are served.
    client(primary).set("k", "from-primary")
    wait_synced(primary, replica)
    assert r.get("k") == b"from-primary"
    # replica-read-only no: the replica takes local writes.
    r.config_set("replica-read-only", "no")
    assert r.set("local", "1")


@GRADUS_ONLY
def test_replicaof_replies_like_redis(gradus_factory, tmp_path):
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    r = client(replica)
    assert r.execute_command("REPLICAOF", primary.host, primary.port) == b"OK Already connected to specified master"
    with pytest.raises(redis.exceptions.ResponseError, match="Invalid master port"):
        r.execute_command("REPLICAOF", primary.host, "notaport")
    with pytest.raises(redis.exceptions.ResponseError, match="wrong number of arguments"):
        r.execute_command("REPLICAOF", primary.host)
    assert r.execute_command("SLAVEOF", "NO", "ONE") in (b"OK", True)
    assert r.execute_command("REPLICAOF", "NO", "ONE") == b"OK"


@GRADUS_ONLY
def test_replicaof_no_one_promotes_and_keeps_the_old_id_as_replid2(gradus_factory, tmp_path):
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    client(primary).set("before", "1")
    wait_synced(primary, replica)
    old_id = info(primary)["master_replid"]
    r = client(replica)
    assert r.execute_command("REPLICAOF", "NO", "ONE") == b"OK"
    rep = info(replica)
    assert rep["role"] == "master"
    assert rep["master_replid2"] == old_id
    assert rep["master_replid"] != old_id
    assert int(rep["second_repl_offset"]) == int(rep["master_repl_offset"]) + 1
    assert r.set("after", "2")
    assert r.get("before") == b"1"
    assert r.execute_command("ROLE")[0] == b"master"


@GRADUS_ONLY
def test_a_replica_of_the_old_primary_continues_with_the_promoted_one(gradus_factory, tmp_path):
    """PSYNC2: after a failover, the other replica resyncs partially with the new primary."""
    primary, (a, b) = start_pair(gradus_factory, tmp_path, replicas=2)
    client(primary).set("k", "1")
    wait_synced(primary, a)
    wait_synced(primary, b)
    client(a).execute_command("REPLICAOF", "NO", "ONE")
    client(b).execute_command("REPLICAOF", a.host, a.port)
    wait_link_up(b)
    client(a).set("after-failover", "x")
    assert client(a).execute_command("WAIT", 1, 5000) == 1
    assert client(b).get("after-failover") == b"x"
    stats = info(a, "stats")
    assert stats["sync_partial_ok"] == "1", stats
    assert stats["sync_full"] == "0", stats


@GRADUS_ONLY
def test_partial_resync_after_a_link_drop_sends_only_the_missing_records(gradus_factory, tmp_path):
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    p = client(primary)
    p.set("a", "1")
    wait_synced(primary, replica)
    seen = int(info(replica)["slave_repl_offset"])
    p.client_kill(replica_link_addr(primary))
    for i in range(50):
        p.set(f"missed:{i}", i)
    wait_link_up(replica)
    assert_converged(primary, replica)
    stats = info(primary, "stats")
    assert stats["sync_full"] == "1"
    assert stats["sync_partial_ok"] == "1"
    sent = int(stats["gradus_sync_partial_bytes"])
    streamed = int(info(primary)["master_repl_offset"])
    # Only what the replica lacked: the 50 writes (and pings), not the whole stream.
    assert 0 < sent <= streamed - seen
    assert sent >= 50 * len("missed:0")


@GRADUS_ONLY
def test_a_replica_killed_and_restarted_resyncs_and_converges(gradus_factory, tmp_path):
    primary = gradus_factory("--config", config(tmp_path, name="primary.toml"), name="primary")
    replica = gradus_factory("--config", config(tmp_path, name="replica.toml"),
                             "--replicaof", f"{primary.host} {primary.port}", name="replica")
    wait_link_up(replica)
    p0, p1 = client(primary, 0), client(primary, 1)
    p0.set("a", "1")
    p1.set("c", "1")
    wait_synced(primary, replica)
    replica.crash()
    p0.set("b", "2")
    p1.set("d", "2")
    replica.start()
    wait_link_up(replica)
    assert_converged(primary, replica)


@GRADUS_ONLY
def test_the_replicas_own_log_keeps_logged_keyspaces_and_never_none_ones(gradus_factory, tmp_path):
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    p0, p1 = client(primary, 0), client(primary, 1)
    p0.set("synced-by-snapshot", "1")  # before: arrives in the full sync
    p1.set("cache-snapshot", "1")
    wait_synced(primary, replica)
    p0.set("streamed", "2")  # after: arrives as a record
    p1.set("cache-streamed", "2")
    assert p0.execute_command("WAIT", 1, 5000) == 1
    # Promote (so a restart does not resync), crash it, and restart: only its log is left.
    client(replica).execute_command("REPLICAOF", "NO", "ONE")
    replica.crash_restart()
    r0, r1 = client(replica, 0), client(replica, 1)
    assert r0.get("synced-by-snapshot") == b"1"
    assert r0.get("streamed") == b"2"
    assert r1.dbsize() == 0


@GRADUS_ONLY
def test_role_and_info_replication_have_redis_shapes(gradus_factory, _servers, tmp_path):
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    client(primary).set("k", "v")
    wait_synced(primary, replica)
    role = client(primary).execute_command("ROLE")
    assert role[0] == b"master" and isinstance(role[1], int)
    assert role[2] == [[b"127.0.0.1", str(replica.port).encode(), role[2][0][2]]]
    rrole = client(replica).execute_command("ROLE")
    assert rrole[:4] == [b"slave", b"127.0.0.1", primary.port, b"connected"]
    assert isinstance(rrole[4], int) and rrole[4] > 0
    pinfo, rinfo = info(primary), info(replica)
    assert pinfo["slave0"].startswith(f"ip=127.0.0.1,port={replica.port},state=online,offset=")
    assert ",lag=" in pinfo["slave0"]
    assert len(pinfo["master_replid"]) == 40
    assert len(info(primary, "server")["run_id"]) == 40
    # The same fields in the same order as a real redis-server pair (7.x), besides Gradus' own
    # `gradus_` fields (each replica's lag in records, bytes and ms).
    rp = _servers.start_redis(name="redis-primary")
    rr = _servers.start_redis("--replicaof", f"127.0.0.1 {rp.port}", name="redis-replica")
    wait_link_up(rr)
    client(rp).set("k", "v")
    assert "gradus_slave0_lag" in info_keys(primary)
    assert [k for k in info_keys(primary) if not k.startswith("gradus_")] == info_keys(rp)
    theirs = [k for k in info_keys(rr)]
    ours = [k for k in info_keys(replica)]
    assert ours == theirs, (ours, theirs)
    assert [type(x) for x in client(rr).execute_command("ROLE")] == [type(x) for x in rrole]
    assert [type(x) for x in client(rp).execute_command("ROLE")[:2]] == [type(x) for x in role[:2]]


@GRADUS_ONLY
def test_wait_counts_replicas_that_acknowledged(gradus_factory, tmp_path):
    primary, replicas = start_pair(gradus_factory, tmp_path, replicas=2)
    p = client(primary)
    p.set("k", "v")
    assert p.execute_command("WAIT", 2, 5000) == 2
    assert p.execute_command("WAIT", 3, 200) == 2, "two replicas, after the timeout"
    assert p.execute_command("WAITAOF", 1, 2, 5000) == [1, 2]
    replicas[1].crash()
    p.set("k2", "v")
    assert p.execute_command("WAIT", 2, 300) == 1


@GRADUS_ONLY
def test_wait_without_replicas_answers_zero(gradus_factory, tmp_path):
    primary = gradus_factory("--config", config(tmp_path), name="primary")
    p = client(primary)
    p.set("k", "v")
    assert p.execute_command("WAIT", 1, 100) == 0


@GRADUS_ONLY
def test_min_replicas_to_write_refuses_writes_with_redis_text(gradus_factory, tmp_path):
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    p = client(primary)
    p.config_set("min-replicas-to-write", 1)
    assert p.set("ok", "1")
    p.config_set("min-replicas-to-write", 2)
    raw = RawClient(primary.host, primary.port)
    try:
        assert raw.call("SET", "refused", "1") == Err(b"NOREPLICAS Not enough good replicas to write.")
    finally:
        raw.close_all()
    p.config_set("min-replicas-to-write", 0)
    assert p.set("again", "1")
    assert p.get("refused") is None


@GRADUS_ONLY
def test_a_replica_with_another_layout_is_refused_with_a_clear_error(gradus_factory, tmp_path):
    primary = gradus_factory("--config", config(tmp_path, name="primary.toml"), name="primary")
    replica = gradus_factory("--config", config(tmp_path, name="replica.toml"), "--databases", "4",
                             name="replica")
    client(replica).set("kept", "1")
    assert client(replica).execute_command("REPLICAOF", primary.host, primary.port) == b"OK"
    error = wait_until(lambda: info(replica).get("master_sync_last_error"), what="the layout refusal")
    assert "keyspace layout" in error
    assert info(replica)["master_link_status"] == "down"
    assert client(replica).get("kept") == b"1", "nothing was cleared"
    assert "keyspace layout" in replica.stderr_text()


@GRADUS_ONLY
def test_expired_keys_reach_the_replica_as_dels_from_the_primary(gradus_factory, tmp_path):
    """A replica does not expire keys on its own clock: the primary's active expiry streams a DEL
    (its own sweep reclaims only keys expired for a minute). Logically expired keys already read
    as missing on the replica."""
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    p0, p1 = client(primary, 0), client(primary, 1)
    p0.set("short", "x", px=300)
    p1.set("short-cache", "x", px=300)
    p0.set("long", "y", ex=1000)
    assert p0.execute_command("WAIT", 1, 5000) == 1
    r0, r1 = client(replica, 0), client(replica, 1)
    assert r0.get("short") == b"x"
    wait_until(lambda: p0.dbsize() == 1 and p1.dbsize() == 0, what="the primary's active expiry")
    wait_until(lambda: r0.dbsize() == 1 and r1.dbsize() == 0, what="the streamed DELs")
    assert r0.get("short") is None
    assert r0.get("long") == b"y"


@GRADUS_ONLY
def test_a_cache_eviction_on_the_primary_reaches_the_replica(gradus_factory, tmp_path):
    """Evictions from a `none` keyspace are streamed (not logged): the replica drops the key too."""
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    p1 = client(primary, 1)
    for i in range(50):
        p1.set(f"k{i}", "v" * 1000)
    p = client(primary)
    p.config_set("maxmemory-policy", "allkeys-lru")
    used = int(info(primary, "memory")["used_memory"])
    p.config_set("maxmemory", used - 20_000)
    p1.set("trigger", "x")
    p.config_set("maxmemory", 0)
    assert p1.execute_command("WAIT", 1, 5000) == 1
    assert_converged(primary, replica, dbs=(1,))
    assert p1.dbsize() < 51


@GRADUS_ONLY
def test_replicated_degree_replies_once_a_replica_has_the_write(gradus_factory, tmp_path):
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    p = client(primary)
    assert p.execute_command("CLIENT", "DURABILITY", "replicated") == b"OK"
    for i in range(20):
        assert p.set(f"r{i}", i)
        # Acknowledged at `replicated`: the replica has it already, no WAIT needed.
        assert client(replica).get(f"r{i}") == str(i).encode()
    assert "durability=replicated" in p.execute_command("CLIENT", "INFO").decode()


@GRADUS_ONLY
def test_replicated_degree_without_enough_replicas_is_refused(gradus_factory, tmp_path):
    primary = gradus_factory("--config", config(tmp_path), name="primary")
    p = client(primary)
    p.execute_command("CLIENT", "DURABILITY", "replicated")
    with pytest.raises(redis.exceptions.ResponseError, match="Not enough good replicas to write"):
        p.set("k", "v")
    assert client(primary).get("k") is None


@GRADUS_ONLY
def test_a_replicated_write_whose_replica_goes_away_is_not_acknowledged(gradus_factory, tmp_path):
    """The replica is stopped (SIGSTOP) so it cannot acknowledge, then killed: the writer's
    connection is closed without a reply instead of acknowledging a write no replica has."""
    import signal
    import threading
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    p = redis_client(primary, socket_timeout=30)
    p.execute_command("CLIENT", "DURABILITY", "replicated")
    # One connection for the whole test (the pool would open another without the override).
    conn = p.connection_pool.get_connection("SET")
    conn.send_command("CLIENT", "DURABILITY", "replicated")
    assert conn.read_response() == b"OK"
    replica.proc.send_signal(signal.SIGSTOP)
    conn.send_command("SET", "held", "1")
    outcome = {}

    def read():
        try:
            outcome["reply"] = conn.read_response()
        except Exception as exc:  # noqa: BLE001 - any connection error is the expected outcome
            outcome["error"] = exc

    reader = threading.Thread(target=read)
    reader.start()
    reader.join(1.0)
    assert reader.is_alive(), f"the reply must wait for the replica: {outcome}"
    replica.proc.send_signal(signal.SIGCONT)
    replica.crash()
    reader.join(15)
    assert not reader.is_alive()
    assert "error" in outcome, outcome


@GRADUS_ONLY
def test_writes_on_a_writable_replica_stay_local_and_keep_its_offset_the_primarys(gradus_factory, tmp_path):
    """Regression: a local write on a replica with replica-read-only no was fed to the replica's
    own backlog, so its offset no longer matched its primary's stream."""
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    r = client(replica)
    r.config_set("replica-read-only", "no")
    assert r.set("local-only", "1")
    p = client(primary)
    for i in range(10):
        p.set(f"k{i}", i)
    assert p.execute_command("WAIT", 1, 5000) == 1
    time.sleep(1.2)  # a ping or two more
    wait_synced(primary, replica)
    assert info(replica)["master_repl_offset"] == info(replica)["slave_repl_offset"]
    assert info(replica)["master_link_status"] == "up"
    assert "panicked" not in replica.stderr_text()
    assert p.get("local-only") is None


@GRADUS_ONLY
def test_writes_racing_the_first_replicas_connection_all_reach_it(gradus_factory, tmp_path):
    """Regression: whether a write is streamed was decided before it took the store gate, so a
    write begun just before the first replica connected was neither in the replica's snapshot
    nor in the stream. Writers keep incrementing counters (a `none` and a logged keyspace) while
    a replica connects; every increment must arrive."""
    import threading
    primary = gradus_factory("--config", config(tmp_path, name="primary.toml"), name="primary")
    replica = gradus_factory("--config", config(tmp_path, name="replica.toml"), name="replica")
    stop = threading.Event()
    errors = []

    def writer(db: int, key: str):
        c = client(primary, db)
        try:
            while not stop.is_set():
                c.incr(key)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(db, f"counter{i}")) for i in range(2) for db in (0, 1)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    client(replica).execute_command("REPLICAOF", primary.host, primary.port)
    wait_link_up(replica)
    time.sleep(0.3)
    stop.set()
    for t in threads:
        t.join(10)
    assert not errors, errors
    assert client(primary).execute_command("WAIT", 1, 5000) == 1
    assert_converged(primary, replica)


@GRADUS_ONLY
def test_replicaof_sent_as_soon_as_the_server_answers_is_taken(gradus_factory, tmp_path):
    """Regression: the listeners accepted connections before the state REPLICAOF needs to start
    its link task was set, so a REPLICAOF sent right after start-up answered `replication is
    not available in this process`."""
    primary = gradus_factory("--config", config(tmp_path, name="primary.toml"), name="primary")
    for i in range(3):
        replica = gradus_factory("--config", config(tmp_path, name=f"replica{i}.toml"), name=f"replica{i}")
        assert client(replica).execute_command("REPLICAOF", primary.host, primary.port) == b"OK"
        wait_link_up(replica)


@GRADUS_ONLY
def test_a_replica_authenticates_with_masterauth(gradus_factory, tmp_path):
    primary = gradus_factory("--config", config(tmp_path, name="primary.toml"), "--requirepass", "s3cret",
                             name="primary")
    replica = gradus_factory("--config", config(tmp_path, 'masterauth = "wrong"\n', "replica.toml"),
                             name="replica")
    r = client(replica)
    r.execute_command("REPLICAOF", primary.host, primary.port)
    error = wait_until(lambda: info(replica).get("master_sync_last_error"), what="the refused AUTH")
    assert "AUTH" in error, error
    assert info(replica)["master_link_status"] == "down"
    r.config_set("masterauth", "s3cret")
    wait_link_up(replica)
    client(primary).set("k", "v")
    wait_synced(primary, replica)
    assert r.get("k") == b"v"


@GRADUS_ONLY
def test_metrics_show_each_replicas_lag(gradus_factory, tmp_path):
    import http.client
    import shutil
    import subprocess
    from servers import free_port
    metrics_port = free_port()
    primary = gradus_factory("--config", config(tmp_path, name="primary.toml"),
                             "--metrics-port", str(metrics_port), name="primary")
    replica = gradus_factory("--config", config(tmp_path, name="replica.toml"), name="replica")
    client(replica).execute_command("REPLICAOF", primary.host, primary.port)
    wait_link_up(replica)
    client(primary).set("k", "v")
    assert client(primary).execute_command("WAIT", 1, 5000) == 1
    conn = http.client.HTTPConnection("127.0.0.1", metrics_port, timeout=10)
    conn.request("GET", "/metrics")
    body = conn.getresponse().read()
    conn.close()
    text = body.decode()
    label = f'replica="127.0.0.1:{replica.port}"'
    assert f"gradus_replica_lag_bytes{{{label}}}" in text
    assert f"gradus_replica_ack_age_seconds{{{label}}}" in text
    assert "gradus_replication_connected_replicas 1" in text
    assert "gradus_replication_full_syncs_total 1" in text
    tool = shutil.which("promtool")
    if tool:
        result = subprocess.run([tool, "check", "metrics"], input=body, capture_output=True, timeout=30)
        assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


@GRADUS_ONLY
def test_a_replica_too_slow_for_its_output_limit_is_dropped_and_fully_resyncs(gradus_factory, tmp_path):
    """The replica class of client-output-buffer-limit (not normal's) bounds a replica's link: a
    replica that stops reading is dropped once its queue passes the hard limit, and, the backlog
    having moved on too, it must fully resync when it comes back. Regression: the link waited in
    its socket write, where being dropped did not reach it, so it was never dropped."""
    import signal
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    p = client(primary)
    p.config_set("client-output-buffer-limit", "replica 1mb 0 0")
    p.config_set("repl-backlog-size", "256kb")
    replica.proc.send_signal(signal.SIGSTOP)
    try:
        value = "x" * 10_000
        pipe = p.pipeline(transaction=False)
        for i in range(1000):  # ~10 MB: past the socket buffers and the 1 MiB limit
            pipe.set(f"big:{i}", value)
        pipe.execute()
        wait_until(lambda: info(primary)["connected_slaves"] == "0", what="the slow replica dropped")
    finally:
        replica.proc.send_signal(signal.SIGCONT)
    wait_link_up(replica)
    assert_converged(primary, replica, dbs=(0,))
    stats = info(primary, "stats")
    assert stats["sync_full"] == "2", stats


@GRADUS_ONLY
def test_replica_serve_stale_data_no_refuses_reads_while_the_link_is_down(gradus_factory, tmp_path):
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    client(primary).set("k", "v")
    wait_synced(primary, replica)
    r = client(replica)
    r.config_set("replica-serve-stale-data", "no")
    assert r.get("k") == b"v", "link up: served"
    primary.crash()
    wait_until(lambda: info(replica)["master_link_status"] == "down", what="the link down")
    raw = RawClient(replica.host, replica.port)
    try:
        assert raw.call("GET", "k") == Err(
            b"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.")
        assert raw.call("PING") == Simple(b"PONG"), "PING is served, as in Redis"
        assert raw.call("ROLE")[0] == b"slave"
    finally:
        raw.close_all()
    assert int(info(replica)["master_link_down_since_seconds"]) >= 0
    r.config_set("replica-serve-stale-data", "yes")
    assert r.get("k") == b"v"


LIBRARY = """#!lua name=replib
redis.register_function('setit', function(keys, args) return redis.call('SET', keys[1], args[1]) end)
"""


@GRADUS_ONLY
def test_function_libraries_reach_replicas_live_and_in_a_full_sync(gradus_factory, tmp_path):
    primary = gradus_factory("--config", config(tmp_path, name="primary.toml"), name="primary")
    p = client(primary)
    p.execute_command("FUNCTION", "LOAD", LIBRARY)
    early = gradus_factory("--config", config(tmp_path, name="early.toml"), name="early")
    client(early).execute_command("REPLICAOF", primary.host, primary.port)
    wait_link_up(early)
    p.execute_command("FCALL", "setit", 1, "fk", "fv")
    p.execute_command("FUNCTION", "LOAD", "REPLACE", LIBRARY.replace("setit", "setit2"))
    assert p.execute_command("WAIT", 1, 5000) == 1
    late = gradus_factory("--config", config(tmp_path, name="late.toml"), name="late")
    client(late).execute_command("REPLICAOF", primary.host, primary.port)
    wait_link_up(late)
    wait_synced(primary, late)
    for replica in (early, late):
        r = client(replica)
        assert r.get("fk") == b"fv"
        names = [f[1] for lib in r.execute_command("FUNCTION", "LIST") for f in lib[5]]
        assert names == [b"setit2"], names


@GRADUS_ONLY
def test_a_full_sync_replaces_the_replicas_own_function_libraries(gradus_factory, tmp_path):
    """Regression: a full sync cleared the keyspaces but kept the replica's own libraries."""
    primary = gradus_factory("--config", config(tmp_path, name="primary.toml"), name="primary")
    replica = gradus_factory("--config", config(tmp_path, name="replica.toml"), name="replica")
    client(replica).execute_command("FUNCTION", "LOAD", LIBRARY.replace("replib", "ownlib"))
    client(replica).execute_command("REPLICAOF", primary.host, primary.port)
    wait_link_up(replica)
    assert client(replica).execute_command("FUNCTION", "LIST") == []


@GRADUS_ONLY
def test_a_replica_of_a_replica_follows_the_chain(gradus_factory, tmp_path):
    """A replica streams its primary's records, as they came, to its own replicas (same offsets)."""
    primary, (middle,) = start_pair(gradus_factory, tmp_path)
    client(primary).set("before", "1")
    client(primary, 1).set("cache-before", "1")
    wait_synced(primary, middle)
    leaf = gradus_factory("--config", config(tmp_path, name="leaf.toml"), name="leaf")
    client(leaf).execute_command("REPLICAOF", middle.host, middle.port)
    wait_link_up(leaf)
    client(primary).set("after", "2")
    client(primary, 1).set("cache-after", "2")
    assert client(primary).execute_command("WAIT", 1, 5000) == 1
    wait_synced(primary, leaf)
    assert_converged(primary, leaf)
    assert info(leaf)["master_replid"] == info(primary)["master_replid"]
    assert client(leaf).execute_command("ROLE")[:3] == [b"slave", b"127.0.0.1", middle.port]


@GRADUS_ONLY
def test_a_full_sync_loads_a_value_split_over_several_items_across_load_batches(gradus_factory, tmp_path):
    """A hash of 20 MB is sent as several snapshot items (parts of at most 8 MiB); the replica
    loads the snapshot in batches as it arrives, so later parts land in a later batch."""
    primary = gradus_factory("--config", config(tmp_path, name="primary.toml"), name="primary")
    p = client(primary)
    field = "f" * 4000
    pipe = p.pipeline(transaction=False)
    for i in range(5000):
        pipe.hset("big", f"{i}", field)
    pipe.execute()
    replica = gradus_factory("--config", config(tmp_path, name="replica.toml"),
                             "--replicaof", f"{primary.host} {primary.port}", name="replica")
    wait_link_up(replica, timeout=60)
    r = client(replica)
    assert r.hlen("big") == 5000
    assert r.hget("big", "4999") == field.encode()


@GRADUS_ONLY
def test_config_get_replicaof_shows_the_role_in_force_and_config_set_refuses_it(gradus_factory, tmp_path):
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    r = client(replica)
    assert r.config_get("replicaof") == {"replicaof": f"{primary.host} {primary.port}"} or \
        r.config_get("replicaof") == {b"replicaof": f"{primary.host} {primary.port}".encode()}
    with pytest.raises(redis.exceptions.ResponseError,
                       match="CONFIG SET failed \\(possibly related to argument 'replicaof'\\) - can't set immutable config"):
        r.config_set("replicaof", "127.0.0.1 1")
    assert info(replica)["master_port"] == str(primary.port)
    r.execute_command("REPLICAOF", "NO", "ONE")
    assert list(r.config_get("replicaof").values()) in ([""], [b""])


@GRADUS_ONLY
def test_tenants_replicate_into_their_own_keyspaces(gradus_factory, tmp_path):
    """With [[tenants]] on both nodes (the same layout), the replica authenticates as an admin
    user (masteruser/masterauth) and each tenant's writes land in that tenant's keyspaces."""
    example = Path(__file__).resolve().parents[2] / "examples" / "tenants.toml"
    primary = gradus_factory("--config", str(example), name="primary")
    replica_config = tmp_path / "replica.toml"
    replica_config.write_text(example.read_text().replace(
        'dir = "./gradus-data"', 'dir = "./gradus-data"\nmasteruser = "admin"\nmasterauth = "admin-pass"'))
    replica = gradus_factory("--config", str(replica_config), name="replica")

    def as_user(server, user, db=0):
        return redis_client(server, db=db, username=user, password=f"{user}-pass",
                            single_connection_client=True)

    admin = as_user(replica, "admin")
    assert admin.execute_command("REPLICAOF", primary.host, primary.port) == b"OK"
    wait_until(lambda: admin.info("replication").get("master_link_status") == "up", what="the link")
    as_user(primary, "alpha").set("who", "alpha")
    as_user(primary, "beta").set("who", "beta")
    as_user(primary, "beta", 1).set("cached", "beta-cache")
    wait_until(lambda: as_user(replica, "beta", 1).get("cached") == b"beta-cache", what="beta's cache")
    assert as_user(replica, "alpha").get("who") == b"alpha"
    assert as_user(replica, "beta").get("who") == b"beta"
    assert as_user(replica, "alpha", 1).get("cached") is None


def test_the_replication_surface_is_the_same_on_gradus_and_redis(gradus_factory):
    """Runs against redis-server too (GRADUS_TARGET=redis): REPLICAOF, ROLE, the READONLY text,
    WAIT and INFO replication's fields on a primary and a replica, then a promotion."""
    primary = gradus_factory(name="primary")
    replica = gradus_factory(name="replica")
    r, p = client(replica), client(primary)
    assert r.execute_command("REPLICAOF", primary.host, primary.port) in (b"OK", True)
    wait_link_up(replica)
    p.set("k", "v")
    assert p.execute_command("WAIT", 1, 5000) == 1
    assert r.get("k") == b"v"
    with pytest.raises(redis.exceptions.ReadOnlyError, match="^You can't write against a read only replica.$"):
        r.set("k", "other")
    role = p.execute_command("ROLE")
    assert role[0] == b"master" and isinstance(role[1], int)
    assert role[2][0][:2] == [b"127.0.0.1", str(replica.port).encode()]
    rrole = r.execute_command("ROLE")
    assert rrole[:4] == [b"slave", b"127.0.0.1", primary.port, b"connected"]
    pinfo, rinfo = info(primary), info(replica)
    assert pinfo["role"] == "master" and pinfo["connected_slaves"] == "1"
    assert re.fullmatch(r"ip=127\.0\.0\.1,port=%d,state=online,offset=\d+,lag=\d+" % replica.port,
                        pinfo["slave0"]), pinfo["slave0"]
    assert rinfo["role"] == "slave" and rinfo["master_link_status"] == "up"
    assert rinfo["master_replid"] == pinfo["master_replid"]
    for key in ("master_last_io_seconds_ago", "slave_repl_offset", "slave_priority", "slave_read_only",
                "master_repl_offset", "second_repl_offset", "repl_backlog_active"):
        assert key in rinfo, key
    assert len(info(primary, "server")["run_id"]) == 40
    # Replica links are not counted among the clients.
    links = [c for c in p.client_list() if "S" in c["flags"]]
    assert len(links) == 1
    assert p.info("clients")["connected_clients"] == len(p.client_list()) - 1
    assert r.execute_command("REPLICAOF", "NO", "ONE") in (b"OK", True)
    assert r.set("k", "promoted")
    assert info(replica)["master_replid2"] == pinfo["master_replid"]


@GRADUS_ONLY
def test_an_isolated_primary_refuses_writes_once_its_replica_lags(gradus_factory, tmp_path):
    """A partition stand-in: the replica is stopped (SIGSTOP), so it stops acknowledging; past
    min-replicas-max-lag the primary refuses writes (NOREPLICAS), and takes them again once the
    replica is back."""
    import signal
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    p = client(primary)
    p.config_set("min-replicas-to-write", 1)
    p.config_set("min-replicas-max-lag", 1)
    assert p.set("before", "1")
    replica.proc.send_signal(signal.SIGSTOP)
    try:
        def refused():
            try:
                p.set("during", "1")
                return False
            except redis.exceptions.ResponseError as e:
                return "Not enough good replicas to write" in str(e)
        wait_until(refused, timeout=10, what="NOREPLICAS on the isolated primary")
    finally:
        replica.proc.send_signal(signal.SIGCONT)
    def accepted():
        try:
            return p.set("after", "1")
        except redis.exceptions.ResponseError:
            return False
    wait_until(accepted, timeout=10, what="writes accepted again")
    assert p.execute_command("WAIT", 1, 5000) == 1
    assert client(replica).get("after") == b"1"


@GRADUS_ONLY
def test_no_write_acknowledged_at_replicated_is_lost_when_the_primary_dies(gradus_factory, tmp_path):
    """kill -9 of the primary under a replicated write load, then promotion of the replica:
    every write the primary acknowledged is there."""
    import threading
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    acknowledged = []
    stop = threading.Event()

    def writer():
        c = client(primary)
        c.execute_command("CLIENT", "DURABILITY", "replicated")
        i = 0
        while not stop.is_set():
            try:
                c.set(f"w{i}", i)
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                return
            acknowledged.append(i)
            i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    wait_until(lambda: len(acknowledged) >= 200, what="some acknowledged writes")
    primary.crash()
    stop.set()
    thread.join(15)
    r = client(replica)
    r.execute_command("REPLICAOF", "NO", "ONE")
    missing = [i for i in acknowledged if r.get(f"w{i}") != str(i).encode()]
    assert not missing, f"{len(missing)} of {len(acknowledged)} acknowledged writes lost: {missing[:10]}"


@GRADUS_ONLY
def test_a_primary_with_no_log_at_all_replicates(gradus_factory, tmp_path):
    """Every degree `none`: no log exists on either side; the full sync and the stream work."""
    primary = gradus_factory("--durability", "none", name="primary")
    p = client(primary)
    for i in range(500):
        p.set(f"k{i}", i)
    replica = gradus_factory("--durability", "none", "--replicaof", f"{primary.host} {primary.port}",
                             name="replica")
    wait_link_up(replica)
    p.set("live", "1")
    assert p.execute_command("WAIT", 1, 5000) == 1
    assert_converged(primary, replica, dbs=(0,))
    assert client(replica).dbsize() == 501


def test_repl_timeout_drops_a_silent_link_and_the_ping_period_keeps_it_alive(gradus_factory, tmp_path):
    """`repl-ping-replica-period` (alias `repl-ping-slave-period`) and `repl-timeout` are Redis'
    settings, read and set as there (they were unknown to CONFIG SET): a primary that pings
    often keeps an idle link up past the replica's timeout; one that pings less often than that
    has the replica drop the link and continue with a partial resync."""
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    p, r = client(primary), client(replica)
    assert p.config_get("repl-ping-replica-period") == {"repl-ping-replica-period": "10"}
    assert r.config_get("repl-timeout") == {"repl-timeout": "60"}
    assert p.config_set("repl-ping-slave-period", 1)
    assert p.config_get("repl-ping-slave-period") == {"repl-ping-slave-period": "1"}
    with pytest.raises(redis.ResponseError, match="argument must be between 1 and 2147483647"):
        p.config_set("repl-ping-replica-period", 0)
    assert r.config_set("repl-timeout", 2)
    partial = int(info(primary, "stats")["sync_partial_ok"])
    time.sleep(4.5)
    assert info(replica)["master_link_status"] == "up"
    assert int(info(primary, "stats")["sync_partial_ok"]) == partial, "the link dropped while pinged"
    assert p.config_set("repl-ping-replica-period", 30)
    # From now on the idle link is silent for longer than the replica waits.
    wait_until(lambda: int(info(primary, "stats")["sync_partial_ok"]) > partial, 10,
               "the replica to time out and continue")
    wait_link_up(replica)
    p.set("after", "timeout")
    assert_converged(primary, replica)
