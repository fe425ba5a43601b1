"""FAILOVER (Redis 6.2): a coordinated switchover from a primary to one of its replicas.

One primary and two replicas on loopback (helpers from test_replication). FAILOVER pauses
writes on the primary, waits for the target to acknowledge everything, makes it the primary
(PSYNC … FAILOVER) and follows it with a partial resync; INFO `master_failover_state` shows
the phases in Redis' words. TIMEOUT with a target that never catches up (a stopped process)
aborts and lifts the pause; ABORT cancels. The reply texts are Redis 7's.
"""

from __future__ import annotations

import signal
import threading
import time

import pytest
import redis

from test_replication import client, info, start_pair, wait_link_up, wait_synced, wait_until

pytestmark = pytest.mark.gradus_only


def role(server):
    return client(server).execute_command("ROLE")


def test_failover_swaps_roles_without_losing_acknowledged_writes(gradus_factory, tmp_path):
    primary, (r0, r1) = start_pair(gradus_factory, tmp_path, replicas=2)
    p = client(primary)
    for i in range(500):
        p.set(f"k{i}", i)
    assert p.execute_command("WAIT", 2, 5000) == 2
    # Writes racing the failover: each is either refused (READONLY after the switch) or
    # acknowledged, and then it must be on the new primary.
    acknowledged = []

    def writer():
        w = client(primary)
        for i in range(300):
            try:
                w.set(f"race{i}", i)
                acknowledged.append(f"race{i}")
            except redis.ResponseError as e:
                assert str(e).startswith("You can't write against a read only replica"), e
            except redis.ConnectionError:
                pass

    t = threading.Thread(target=writer)
    t.start()
    assert p.execute_command("FAILOVER") == b"OK"
    t.join(30)
    # Any caught-up replica may be chosen; find which one is the primary now.
    new = wait_until(lambda: next((r for r in (r0, r1) if role(r)[0] == b"master"), None),
                     what="a promoted replica")
    other = r1 if new is r0 else r0
    wait_until(lambda: role(primary)[0] == b"slave", what="the old primary following")
    wait_until(lambda: info(primary).get("master_link_status") == "up", what="the old primary's link")
    assert info(primary)["master_port"] == str(new.port)
    assert info(primary)["master_failover_state"] == "no-failover"
    # The old primary continued from its own offset: a partial resync on the new primary.
    assert int(info(new, "stats")["sync_partial_ok"]) >= 1
    n = client(new)
    for i in range(500):
        assert n.get(f"k{i}") == str(i).encode()
    for key in acknowledged:
        assert n.get(key) is not None, key
    # The new primary takes writes and ships them to the old one.
    n.set("after", "failover")
    wait_synced(new, primary)
    assert client(primary).get("after") == b"failover"
    # The other replica can be pointed at the new primary.
    assert client(other).execute_command("REPLICAOF", new.host, new.port) == b"OK"
    wait_link_up(other)
    wait_synced(new, other)
    assert client(other).get("after") == b"failover"


def test_failover_to_a_named_replica(gradus_factory, tmp_path):
    primary, (r0, r1) = start_pair(gradus_factory, tmp_path, replicas=2)
    p = client(primary)
    p.set("x", "1")
    assert p.execute_command("WAIT", 2, 5000) == 2
    assert p.execute_command("FAILOVER", "TO", r1.host, r1.port) == b"OK"
    wait_until(lambda: role(r1)[0] == b"master", what="the named replica promoted")
    assert role(r0)[0] == b"slave"
    wait_until(lambda: info(primary).get("master_link_status") == "up", what="the old primary's link")
    assert info(primary)["master_port"] == str(r1.port)
    assert client(r1).get("x") == b"1"
    # The promoted side keeps the old id as replid2 (PSYNC2), as REPLICAOF NO ONE does.
    assert info(r1)["master_replid2"] != "0" * 40


def test_failover_errors_are_redis_texts(gradus_factory, tmp_path):
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    p = client(primary)
    with pytest.raises(redis.ResponseError, match="^No failover in progress.$"):
        p.execute_command("FAILOVER", "ABORT")
    with pytest.raises(redis.ResponseError, match="^FAILOVER target HOST and PORT is not a replica.$"):
        p.execute_command("FAILOVER", "TO", "127.0.0.1", 1)
    with pytest.raises(redis.ResponseError, match="^FAILOVER is not valid when server is a replica.$"):
        client(replica).execute_command("FAILOVER")
    with pytest.raises(redis.ResponseError, match="^FAILOVER with force option requires both a timeout"):
        p.execute_command("FAILOVER", "FORCE", "TIMEOUT", 100)
    with pytest.raises(redis.ResponseError, match="^PSYNC FAILOVER can't be sent to a master.$"):
        p.execute_command("PSYNC", "x" * 40, 1, "FAILOVER")
    with pytest.raises(redis.ResponseError, match="^PSYNC FAILOVER replid must match my replid.$"):
        client(replica).execute_command("PSYNC", "x" * 40, 1, "FAILOVER")


def test_failover_timeout_with_a_stopped_target_aborts_and_unpauses(gradus_factory, tmp_path):
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    p = client(primary)
    p.set("before", "1")
    wait_synced(primary, replica)
    replica.signal(signal.SIGSTOP)
    try:
        # A write the stopped replica cannot acknowledge.
        p.set("unacked", "1")
        assert p.execute_command("FAILOVER", "TIMEOUT", 1500) == b"OK"
        assert info(primary)["master_failover_state"] == "waiting-for-sync"
        # Writes wait while the failover waits, then run once it has given up.
        started = time.monotonic()
        assert client(primary).set("during", "1") is True
        assert time.monotonic() - started >= 1.0
        assert info(primary)["master_failover_state"] == "no-failover"
        assert role(primary)[0] == b"master"
    finally:
        replica.signal(signal.SIGCONT)


def test_failover_abort_cancels_and_unpauses(gradus_factory, tmp_path):
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    replica.signal(signal.SIGSTOP)
    try:
        p = client(primary)
        p.set("unacked", "1")
        assert p.execute_command("FAILOVER") == b"OK"
        assert info(primary)["master_failover_state"] == "waiting-for-sync"
        with pytest.raises(redis.ResponseError, match="^FAILOVER already in progress.$"):
            p.execute_command("FAILOVER")
        with pytest.raises(redis.ResponseError, match="^REPLICAOF not allowed while failing over.$"):
            p.execute_command("REPLICAOF", "127.0.0.1", 1)
        done = {}

        def writer():
            done["ok"] = client(primary).set("held", "1")

        t = threading.Thread(target=writer)
        t.start()
        time.sleep(0.3)
        assert "ok" not in done
        assert p.execute_command("FAILOVER", "ABORT") == b"OK"
        t.join(5)
        assert done["ok"] is True
        assert info(primary)["master_failover_state"] == "no-failover"
        assert role(primary)[0] == b"master"
    finally:
        replica.signal(signal.SIGCONT)


def test_failover_force_switches_after_the_timeout(gradus_factory, tmp_path):
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    p = client(primary)
    p.set("before", "1")
    wait_synced(primary, replica)
    replica.signal(signal.SIGSTOP)
    try:
        p.set("unacked", "1")
        assert p.execute_command("FAILOVER", "TO", replica.host, replica.port, "FORCE",
                                 "TIMEOUT", 500) == b"OK"
        # Past the timeout it follows the target anyway, waiting for its PSYNC reply.
        wait_until(lambda: info(primary)["master_failover_state"] == "failover-in-progress",
                   what="failover-in-progress")
        assert role(primary)[0] == b"slave"
    finally:
        replica.signal(signal.SIGCONT)
    wait_until(lambda: role(replica)[0] == b"master", what="the target promoted")
    wait_until(lambda: info(primary).get("master_link_status") == "up", what="the old primary's link")
    assert info(primary)["master_failover_state"] == "no-failover"
    assert client(replica).get("before") == b"1"
