"""What a Sentinel failover keeps (issue: replicas and failover by Redis Sentinel): a page
holds a session lock on the primary, the primary is killed (-9), real Sentinels promote a
replica, and the page — reconnecting through redis-py's Sentinel client — closes its session on
the new primary with the token from before; tokens granted afterwards are above it. And with
every node at `replicated`, no write acknowledged before the kill is lost.
"""

from __future__ import annotations

import time

import pytest
from redis.sentinel import Sentinel

from sentinel_harness import MASTER_NAME, SentinelCluster, measure_failover, wait_for
from test_sentinel import cluster, kill_primary_and_wait  # noqa: F401  (fixture)

pytestmark = pytest.mark.gradus_only

EPOCH_SHIFT = 40


def lock_token(node, name: str):
    c = node.client()
    try:
        reply = c.execute_command("LOCKS.INFO", name)
    finally:
        c.close()
    if reply is None:
        return None
    if isinstance(reply, list):
        reply = dict(zip(reply[::2], reply[1::2]))
    return reply["token"]


def test_a_session_lock_taken_before_a_sentinel_failover_closes_after_it(cluster):  # noqa: F811
    primary = cluster.nodes[0]
    page = primary.client()
    page.set("sess:a", "cart=1")
    token, data = page.execute_command("SESSION.OPEN", "sess:a", "LEASE", "60000")
    assert data == "cart=1"  # the harness's node clients decode replies
    # Both replicas mirror the holder before the primary dies.
    for node in cluster.nodes[1:]:
        wait_for(f"the lock on {node.name}", lambda n=node: lock_token(n, "sess:a") == token, 10)

    old, new, killed_at = kill_primary_and_wait(cluster)
    page.close()

    sentinel = Sentinel(cluster.sentinel_addrs(), socket_timeout=0.5,
                        sentinel_kwargs={"socket_timeout": 0.5})
    master = sentinel.master_for(MASTER_NAME, socket_timeout=1.0)
    # The page's next request reaches the promoted replica and closes with its old token.
    assert master.execute_command("SESSION.CLOSE", "sess:a", token, "DATA", "cart=2", "TTL", "600") == b"OK"
    assert master.get("sess:a") == b"cart=2"
    # The next page gets the lock at once, under a token of the new primary's epoch.
    next_token, data = master.execute_command("SESSION.OPEN", "sess:a")
    assert data == b"cart=2"
    assert next_token > token and next_token >> EPOCH_SHIFT > token >> EPOCH_SHIFT
    assert master.execute_command("SESSION.CLOSE", "sess:a", next_token) == b"OK"
    print(f"\nsession closed on the new primary {time.monotonic() - killed_at:.2f} s after the kill")
    master.close()


def test_no_write_acknowledged_at_replicated_is_lost_in_a_sentinel_failover(tmp_path):
    """Every Gradus node at `replicated`: a write is acknowledged once the primary's log has it
    durable and a replica acknowledged it. The primary is killed (-9) under a redis-py write
    load; after Sentinel's promotion, every write acknowledged before the kill is on the new
    primary."""
    c = SentinelCluster(tmp_path, durability="replicated")
    c.start()
    try:
        failover_s, failed, new, writer = measure_failover(c, settle_writes=300)
        killed_at = writer.first_after_kill[0] - failover_s
        before = [n for at, n in writer.acked if at < killed_at]
        assert len(before) >= 300
        client = new.client()
        values = client.mget([f"w:{n}" for n in before])
        client.close()
        lost = [n for n, v in zip(before, values) if v != str(n)]
        assert not lost, f"{len(lost)} acknowledged writes lost, e.g. {lost[:10]}"
        print(f"\nreplicated: {len(before)} writes acknowledged before the kill, none lost; "
              f"failover {failover_s:.2f} s, {failed} failed attempts in between")
    finally:
        c.stop()
    problems = c.problems()
    assert not problems, "\n".join(problems)
