"""Session locks across a failover (README, Replication: sessions across a failover).

A primary streams every lock grant and release to its replicas (in memory, never logged); a
replica mirrors the holders. After a promotion (`REPLICAOF NO ONE`), a page that held a session
lock on the old primary closes it on the new one with the token it had, and tokens the new
primary grants are above every token of the old one (an epoch in their high bits).
"""

from __future__ import annotations

import pytest
import redis

from test_replication import client, config, start_pair, wait_synced, wait_until

pytestmark = pytest.mark.gradus_only

EPOCH_SHIFT = 40


def lock_info(server, name: str):
    reply = client(server).execute_command("LOCKS.INFO", name)
    if reply is None:
        return None
    if isinstance(reply, list):
        reply = dict(zip(reply[::2], reply[1::2]))
    return {k.decode(): v for k, v in reply.items()}


def test_a_session_lock_carries_over_a_promotion_and_closes_with_its_old_token(gradus_factory, tmp_path):
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    page = client(primary)
    page.set("sess:1", "before")
    token, data = page.execute_command("SESSION.OPEN", "sess:1")
    assert data == b"before"
    held_with_lease = page.execute_command("LOCK", "cron", "LEASE", "60000")
    wait_synced(primary, replica)
    mirrored = lock_info(replica, "sess:1")
    assert mirrored is not None and mirrored["token"] == token
    assert mirrored["holder"] == 0, "a replica's mirrored holder belongs to no connection of its own"
    assert lock_info(replica, "cron")["lease_left_ms"] > 0

    # A replica refuses to take locks itself, like writes.
    with pytest.raises(redis.exceptions.ReadOnlyError, match="read only replica"):
        client(replica).execute_command("LOCK", "other")

    primary.kill()
    assert client(replica).execute_command("REPLICAOF", "NO", "ONE") == b"OK"

    # The page reconnects to the promoted replica and closes its session with its old token.
    new = client(replica)
    assert new.execute_command("SESSION.CLOSE", "sess:1", token, "DATA", "after", "TTL", "100") == b"OK"
    assert new.get("sess:1") == b"after"
    assert lock_info(replica, "sess:1") is None
    # The lock without a lease got one at the promotion; the leased one kept its own.
    assert new.execute_command("UNLOCK", "cron", held_with_lease) == b"OK"

    # Tokens of the new primary start a new epoch, above the old primary's.
    next_token, _ = new.execute_command("SESSION.OPEN", "sess:1")
    assert next_token > token and next_token > held_with_lease
    assert next_token >> EPOCH_SHIFT == (token >> EPOCH_SHIFT) + 1


def test_an_orphan_lock_without_a_lease_is_freed_after_the_promotion_lease(gradus_factory, tmp_path):
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    page = client(primary)  # kept open: a closed connection releases its locks
    token, _ = page.execute_command("SESSION.OPEN", "sess:2")
    wait_synced(primary, replica)
    assert lock_info(replica, "sess:2")["lease_left_ms"] == -1
    assert client(replica).execute_command("REPLICAOF", "NO", "ONE") == b"OK"
    left = lock_info(replica, "sess:2")["lease_left_ms"]
    assert 0 < left <= 30_000, left
    # A new page waits behind it (FIFO) rather than taking a lock someone may still hold.
    assert client(replica).execute_command("LOCK", "sess:2", "WAIT", "50") is None


def test_a_full_sync_carries_the_locks_held_and_releases_follow(gradus_factory, tmp_path):
    primary, _ = start_pair(gradus_factory, tmp_path, replicas=0)
    page = client(primary)
    token, _ = page.execute_command("SESSION.OPEN", "sess:3")
    other = page.execute_command("LOCK", "job", "LEASE", "60000")
    # A replica that attaches now learns the holders from the snapshot, not from the stream.
    late = gradus_factory("--config", config(tmp_path, name="late.toml"), name="late")
    assert client(late).execute_command("REPLICAOF", primary.host, primary.port) == b"OK"
    wait_until(lambda: lock_info(late, "sess:3") is not None, what="the lock in the full sync")
    assert lock_info(late, "sess:3")["token"] == token
    assert lock_info(late, "job")["token"] == other
    # Releases stream after it; a hand-over to a waiter is a release and a grant.
    page.execute_command("SESSION.CLOSE", "sess:3", token)
    assert page.execute_command("UNLOCK", "job", other) == b"OK"
    wait_synced(primary, late)
    assert lock_info(late, "sess:3") is None and lock_info(late, "job") is None
