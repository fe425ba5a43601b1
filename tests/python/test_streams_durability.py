"""Streams survive what other values survive: a crash at `strict` (the log's replay of what the
stream commands logged), a restart from a snapshot, a full and a partial resync of a replica.

Stream writes whose outcome depends on the clock or on the node layout log what they did (an
XADD its ID, an approximate trim the exact trim it amounted to, XREADGROUP / XCLAIM /
XAUTOCLAIM the pending entries they made, as `XCLAIM … FORCE JUSTID LASTID` and `XGROUP SETID
… ENTRIESREAD`), so what comes back must be the same stream: same entries, same node layout
(XINFO STREAM's radix-tree figures), same groups with the same pending entries, delivery times
and counts. Only the consumers' seen and active times are those of the replay.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from resp import RawConnection, Simple

OK = Simple(b"OK")

pytestmark = pytest.mark.gradus_only


def conn(server) -> RawConnection:
    return RawConnection(server.host, server.port, timeout=10)


def workload(c: RawConnection) -> None:
    """Every kind of stream write, with auto IDs, approximate trims and group reads."""
    for i in range(260):
        fields = ["f", f"value {i}"] if i % 9 else ["other", str(i), "x", ""]
        c.call("XADD", "s", "*", *fields)
    c.call("XADD", "s", "MAXLEN", "~", "150", "*", "f", "trimmed")
    assert c.call("XGROUP", "CREATE", "s", "g", "0") in (OK, )
    c.call("XGROUP", "CREATE", "s", "g2", "$", "ENTRIESREAD", "3")
    c.call("XREADGROUP", "GROUP", "g", "alice", "COUNT", "20", "STREAMS", "s", ">")
    c.call("XREADGROUP", "GROUP", "g", "bob", "COUNT", "5", "NOACK", "STREAMS", "s", ">")
    c.call("XREADGROUP", "GROUP", "g", "carol", "COUNT", "7", "STREAMS", "s", ">")
    ids = [e[0] for e in c.call("XRANGE", "s", "-", "+", "COUNT", "40")]
    c.call("XACK", "s", "g", ids[0], ids[1], ids[2])
    c.call("XCLAIM", "s", "g", "dave", "0", ids[3], ids[4])
    c.call("XCLAIM", "s", "g", "erin", "0", ids[5], "JUSTID", "RETRYCOUNT", "9")
    c.call("XDEL", "s", ids[6], ids[30])
    c.call("XAUTOCLAIM", "s", "g", "frank", "0", "0", "COUNT", "3")
    c.call("XGROUP", "CREATECONSUMER", "s", "g", "idle")
    c.call("XGROUP", "DELCONSUMER", "s", "g", "carol")
    c.call("XTRIM", "s", "MINID", "~", ids[12])
    c.call("XADD", "t", "5-1", "a", "1")
    c.call("XSETID", "t", "9-9", "ENTRIESADDED", "12", "MAXDELETEDID", "4-0")
    c.call("XGROUP", "CREATE", "empty", "g", "$", "MKSTREAM")


def state(server) -> Dict[str, Any]:
    """What must come back: entries, layout, groups and pending entries with their times."""
    c = conn(server)
    out: Dict[str, Any] = {}
    for key in ("s", "t", "empty"):
        info = c.call("XINFO", "STREAM", key, "FULL", "COUNT", "0")
        info = dict(zip(info[::2], info[1::2]))
        groups = []
        for g in info.pop(b"groups"):
            g = dict(zip(g[::2], g[1::2]))
            consumers = []
            for cons in g.pop(b"consumers"):
                cons = dict(zip(cons[::2], cons[1::2]))
                # The times a replay sets itself.
                cons.pop(b"seen-time")
                cons.pop(b"active-time", None)
                consumers.append(sorted(cons.items()))
            g[b"consumers"] = consumers
            groups.append(sorted(g.items()))
        info[b"groups"] = groups
        out[key] = sorted(info.items())
        out[key + " xinfo"] = c.call("XINFO", "STREAM", key)
    out["type"] = [c.call("TYPE", k) for k in ("s", "t", "empty")]
    c.close()
    return out


def test_streams_come_back_after_a_crash_at_strict(gradus_factory):
    server = gradus_factory("--durability", "strict")
    c = conn(server)
    workload(c)
    c.close()
    before = state(server)
    server.crash_restart()
    assert state(server) == before


def test_streams_come_back_from_a_snapshot_and_the_log_after_it(gradus_factory):
    server = gradus_factory("--durability", "strict")
    c = conn(server)
    workload(c)
    assert c.call("SAVE") == OK
    # More after the snapshot: replayed from the log on top of it.
    c.call("XADD", "s", "*", "after", "snapshot")
    c.call("XREADGROUP", "GROUP", "g", "zed", "STREAMS", "s", ">")
    c.close()
    before = state(server)
    server.crash_restart()
    assert state(server) == before


def wait_until(predicate, timeout: float = 15.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_a_replica_gets_the_same_streams(gradus_factory):
    primary = gradus_factory("--durability", "background", name="primary")
    c = conn(primary)
    # Written before the replica connects: sent in the full resync's RDB payload.
    workload(c)
    replica = gradus_factory("--durability", "background", name="replica")
    r = conn(replica)
    assert r.call("REPLICAOF", primary.host, str(primary.port)) == OK
    # And after: streamed as logged.
    c.call("XADD", "s", "*", "live", "1")
    c.call("XREADGROUP", "GROUP", "g", "yves", "COUNT", "2", "STREAMS", "s", ">")
    c.call("XADD", "s", "MAXLEN", "~", "100", "*", "live", "2")

    def same() -> bool:
        try:
            return state(replica) == state(primary)
        except Exception:
            return False

    wait_until(same)
    r.close()
    c.close()
