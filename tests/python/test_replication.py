"""Replication: a primary and its replicas, real processes on loopback (see README, Replication).

Each node runs with database 0 logged (`background`) and database 1 `none`, so every test also
checks that a `none` keyspace is shipped to replicas (a replica of a cache is a warm cache) but
never written to a replica's own log. Convergence is checked by comparing every key's type,
contents and TTL on both sides, after `WAIT 1 <timeout>` said the replica acknowledged the
writer's last write (a replica acknowledges once it has applied it and its log made it durable).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest
import redis

from resp import Err, RawClient
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
    return redis_client(server, db=db, single_connection_client=True)


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


pytestmark = pytest.mark.gradus_only


# --- tests -------------------------------------------------------------------


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


def test_a_mixed_multi_ships_both_keyspaces_and_logs_only_the_logged_one(gradus_factory, tmp_path):
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    p = client(primary, 0)
    p.execute_command("MULTI")
    p.execute_command("SET", "logged", "1")
    p.execute_command("SELECT", "1")
    p.execute_command("SET", "cached", "2")
    p.execute_command("EXEC")
    assert p.execute_command("WAIT", 1, 5000) == 1
    assert client(replica, 0).get("logged") == b"1"
    assert client(replica, 1).get("cached") == b"2"
    # The primary's own log has only the logged write: after a crash, `cached` is gone.
    primary.crash_restart()
    assert client(primary, 0).get("logged") == b"1"
    assert client(primary, 1).get("cached") is None


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
    # The same fields in the same order as a real redis-server pair (7.x).
    rp = _servers.start_redis(name="redis-primary")
    rr = _servers.start_redis("--replicaof", f"127.0.0.1 {rp.port}", name="redis-replica")
    wait_link_up(rr)
    client(rp).set("k", "v")
    assert info_keys(primary) == [k for k in info_keys(rp)]
    theirs = [k for k in info_keys(rr)]
    ours = [k for k in info_keys(replica)]
    assert ours == theirs, (ours, theirs)
    assert [type(x) for x in client(rr).execute_command("ROLE")] == [type(x) for x in rrole]
    assert [type(x) for x in client(rp).execute_command("ROLE")[:2]] == [type(x) for x in role[:2]]


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


def test_wait_without_replicas_answers_zero(gradus_factory, tmp_path):
    primary = gradus_factory("--config", config(tmp_path), name="primary")
    p = client(primary)
    p.set("k", "v")
    assert p.execute_command("WAIT", 1, 100) == 0


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
