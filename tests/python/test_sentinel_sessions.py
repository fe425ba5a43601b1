"""Sessions across a Sentinel failover (issue: replicas and failover by Redis Sentinel): a page
holds a session lock on the primary, the primary is killed (-9), real Sentinels promote a
replica, and the page — reconnecting through redis-py's Sentinel client — closes its session on
the new primary with the token from before; tokens granted afterwards are above it.
"""

from __future__ import annotations

import time

import pytest
from redis.sentinel import Sentinel

from sentinel_harness import MASTER_NAME, wait_for
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
