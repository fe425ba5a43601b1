"""A partitioned primary (README, Replication): its replica's link is cut by pausing the replica
(SIGSTOP), so the replica stops acknowledging. With `min-replicas-to-write 1` and
`min-replicas-max-lag 1` the isolated primary starts refusing writes (`NOREPLICAS`) within a
couple of seconds, and every write that was acknowledged by a replica before is on the replica
when it is promoted after the primary dies: nothing acknowledged is lost.
"""

from __future__ import annotations

import signal
import time

import pytest

from resp import Err, RawClient
from test_replication import client, start_pair, wait_until

pytestmark = pytest.mark.gradus_only

NOREPLICAS = Err(b"NOREPLICAS Not enough good replicas to write.")


def write_acked(raw: RawClient, n: int):
    """SET w:n, then WAIT for one replica: True when a replica acknowledged it, the error
    when the SET was refused, False when it was applied but not acknowledged in time."""
    reply = raw.call("SET", f"w:{n}", str(n))
    if isinstance(reply, Err):
        return reply
    return raw.call("WAIT", "1", "300") >= 1


def test_an_isolated_primary_refuses_writes_and_loses_nothing_it_acknowledged(gradus_factory, tmp_path):
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    p = client(primary)
    p.config_set("min-replicas-to-write", 1)
    p.config_set("min-replicas-max-lag", 1)
    raw = RawClient(primary.host, primary.port)
    acked, refused, unacked = [], [], []
    try:
        for n in range(200):
            assert write_acked(raw, n) is True
            acked.append(n)
        replica.signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        try:
            n = 200
            while time.monotonic() - stopped_at < 8:
                result = write_acked(raw, n)
                if result is True:
                    acked.append(n)
                elif result is False:
                    unacked.append(n)
                else:
                    assert result == NOREPLICAS, result
                    refused.append((n, time.monotonic() - stopped_at))
                    if len(refused) >= 5:
                        break
                n += 1
            assert refused, "the isolated primary never refused a write"
            first_refusal_s = refused[0][1]
            # The lag is counted in whole seconds since the last acknowledgement (Redis' rule).
            assert first_refusal_s < 4, first_refusal_s
            # Refusal is what the isolated side does from then on.
            assert raw.call("SET", "late", "1") == NOREPLICAS
        finally:
            primary.kill()  # the isolated primary dies before the replica comes back
            replica.signal(signal.SIGCONT)
    finally:
        raw.close_all()
    r = client(replica)
    assert r.execute_command("REPLICAOF", "NO", "ONE") == b"OK"
    values = r.mget([f"w:{n}" for n in acked])
    missing = [n for n, v in zip(acked, values) if v != str(n).encode()]
    assert not missing, f"acknowledged writes lost in the failover: {missing[:10]}"
    for n, _ in refused:
        assert r.get(f"w:{n}") is None, "a refused write reached the replica"
    assert r.get("late") is None
    # The promoted replica takes writes.
    assert r.set("after", "1")
    wait_until(lambda: r.get("after") == b"1", what="a write on the promoted replica")


def lag_of(primary):
    from test_replication import info
    fields = dict(kv.split("=") for kv in info(primary)["gradus_slave0_lag"].split(","))
    return {k: int(v) for k, v in fields.items()}


def test_a_paused_replicas_lag_shows_in_records_bytes_and_time(gradus_factory, tmp_path):
    primary, (replica,) = start_pair(gradus_factory, tmp_path)
    p = client(primary)
    p.set("warm", "1")
    wait_until(lambda: lag_of(primary) == {"records": 0, "bytes": 0, "ms": 0}, what="no lag")
    replica.signal(signal.SIGSTOP)
    try:
        for n in range(25):
            p.set(f"k:{n}", "x" * 100)
        time.sleep(0.3)
        lag = lag_of(primary)
        assert lag["records"] == 25, lag
        assert lag["bytes"] > 25 * 100, lag
        assert lag["ms"] >= 300, lag
    finally:
        replica.signal(signal.SIGCONT)
    wait_until(lambda: lag_of(primary)["records"] == 0, what="the replica catching up")
    assert lag_of(primary)["ms"] == 0
