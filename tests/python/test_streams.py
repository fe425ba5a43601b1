"""Streams: every test does the same work on Gradus and on a real redis-server and compares the
replies, errors included. They describe Redis 7.2's stream semantics (Gradus' spec; it reports
redis_version 7.2.x). The reference may be older (7.0.15 here): see "Redis 7.0 references" below.

Covered: XADD (explicit, `*` and `ms-*` IDs, Redis' errors for IDs at or below the top one,
NOMKSTREAM, MAXLEN/MINID exact and approximate, LIMIT), XLEN, XRANGE/XREVRANGE (`-`, `+`,
exclusive `(` bounds, incomplete IDs, COUNT), XDEL, XTRIM (approximate trimming removes only
whole nodes of `stream-node-max-entries` = 100 entries, as Redis' listpack nodes), XSETID,
TYPE/OBJECT ENCODING/DEL/EXISTS/RENAME and WRONGTYPE both ways; consumer groups (XGROUP,
XREADGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM, XINFO STREAM [FULL] / GROUPS / CONSUMERS);
XREAD, blocking XREAD/XREADGROUP (timeouts, wake-ups by XADD, a blocked reader's key deleted or
its group destroyed), in RESP2 and RESP3; and seeded random command sequences.

Times differ between two servers: `normalise_stream_reply` replaces the integers that are times
(XPENDING's idle column, XINFO CONSUMERS' `idle`/`inactive`, XINFO STREAM FULL's `seen-time`,
`active-time` and PEL delivery times) with a placeholder, and `radix-tree-nodes` (the inner
node count of Redis' radix tree, not an observable of the stream) too. Everything else, first
and last entries, `radix-tree-keys` (the number of nodes), `recorded-first-entry-id`,
`entries-added`, `max-deleted-entry-id`, `entries-read` and `lag` included, is compared exactly.
Auto-generated IDs (`*`) are compared through what they must satisfy, or after a top ID put in
the future (where `*` is deterministic).

Redis 7.0 references: when the reference's `INFO server` redis_version is below 7.2, its replies
go through `to_7_2` (the 7.0 -> 7.2 changes that a reply alone determines: XINFO's new
`inactive`/`active-time` fields, the "Unbalanced 'xread'" error text, XADD `ms-*` on an exhausted
sequence, a blocked XREADGROUP whose key or group went away), and the few script steps whose 7.2
reply depends on state 7.0 does not keep (`Since72`) run on Gradus only, their replies asserted
by the test itself. With a 7.2+ reference everything is compared exactly. The random sequences
avoid the state-dependent changes (see StreamGenerator). The server under test must speak 7.2:
with GRADUS_TARGET=redis, give a 7.2 build as GRADUS_TARGET_REDIS_BIN (an older one skips).

Random sequences: seeds GRADUS_STREAM_SEEDS (default 4; RESP2 for even seeds, RESP3 for odd
ones), commands per seed GRADUS_STREAM_COMMANDS (default 300).
"""

from __future__ import annotations

import os
import random
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import pytest

from differential import run_script
from resp import Err, Map, RawConnection, Simple, encode_command

SEEDS = int(os.environ.get("GRADUS_STREAM_SEEDS", "4"))
COMMANDS = int(os.environ.get("GRADUS_STREAM_COMMANDS", "300"))

MAX = "18446744073709551615"  # the largest ms or seq part of a stream ID (2^64 - 1)

INVALID_ID = Err(b"ERR Invalid stream ID specified as stream command argument")
XADD_TOO_SMALL = Err(b"ERR The ID specified in XADD is equal or smaller than the target stream top item")
XSETID_BELOW_MAX_DELETED = Err(b"ERR The ID specified in XSETID is smaller than current max_deleted_entry_id")


# --- normalisation of times ---------------------------------------------------

TIME = "<time>"
RAX_NODES = "<radix-tree-nodes>"

# Record fields whose integer values are times in milliseconds: XINFO CONSUMERS' idle (and
# Redis 7.2's inactive), XINFO STREAM FULL consumers' seen-time (and 7.2's active-time).
TIME_FIELDS = {b"idle", b"inactive", b"seen-time", b"active-time"}


def _upper(word: Any) -> str:
    return (word.decode() if isinstance(word, bytes) else str(word)).upper()


def _pairs(record: Any) -> Optional[list]:
    """A record (RESP2 flat list of name, value … or RESP3 map) as (name, value) pairs."""
    if isinstance(record, Map):
        return list(record.items)
    if isinstance(record, list) and len(record) % 2 == 0 and all(isinstance(k, bytes) for k in record[::2]):
        return list(zip(record[::2], record[1::2]))
    return None


def _pel_row(row: Any) -> Any:
    """A PEL row with its time replaced: XPENDING's and a group's [id, consumer, time, count],
    a consumer's [id, time, count] (XINFO STREAM FULL)."""
    if isinstance(row, list) and len(row) in (3, 4) and isinstance(row[-2], int):
        row = list(row)
        row[-2] = TIME
    return row


def _record(record: Any) -> Any:
    pairs = _pairs(record)
    if pairs is None:
        return record
    out = []
    for name, value in pairs:
        if name in TIME_FIELDS and isinstance(value, int):
            value = TIME
        elif name == b"radix-tree-nodes" and isinstance(value, int):
            value = RAX_NODES
        elif name == b"pending" and isinstance(value, list):
            value = [_pel_row(row) for row in value]
        elif name in (b"groups", b"consumers") and isinstance(value, list):
            value = [_record(item) for item in value]
        out.append((name, value))
    if isinstance(record, Map):
        return Map(out)
    return [x for pair in out for x in pair]


def normalise_stream_reply(cmd: Sequence[Any], reply: Any) -> Any:
    """`reply` to `cmd` with its times (and radix-tree-nodes) replaced by placeholders."""
    if isinstance(reply, Err) or not cmd:
        return reply
    name = _upper(cmd[0])
    if name == "XINFO" and len(cmd) > 1:
        sub = _upper(cmd[1])
        if sub == "STREAM":
            return _record(reply)
        if sub in ("GROUPS", "CONSUMERS") and isinstance(reply, list):
            return [_record(item) for item in reply]
    if name == "XPENDING" and len(cmd) > 3 and isinstance(reply, list):
        return [_pel_row(row) for row in reply]
    return reply


# --- Redis 7.0 references ------------------------------------------------------------

_VERSIONS: Dict[str, Tuple[int, ...]] = {}


def redis_version(server) -> Tuple[int, ...]:
    """The server's `INFO server` redis_version as (major, minor, patch), asked once per binary."""
    binary = server.argv[0]
    if binary not in _VERSIONS:
        with RawConnection(server.host, server.port, timeout=10) as conn:
            info = conn.call("INFO", "server").decode()
        match = re.search(r"^redis_version:(\d+)\.(\d+)\.(\d+)", info, re.MULTILINE)
        assert match, f"no redis_version in INFO server of {binary}: {info[:300]!r}"
        _VERSIONS[binary] = tuple(int(part) for part in match.groups())
    return _VERSIONS[binary]


def reference_is_older(redis_server) -> bool:
    """The reference predates Redis 7.2: its replies go through to_7_2, Since72 steps skip it."""
    return redis_version(redis_server) < (7, 2)


@pytest.fixture(autouse=True)
def _server_under_test_speaks_7_2(request):
    """These tests assert Redis 7.2's behaviour. Gradus reports 7.2.x; a GRADUS_TARGET=redis
    stand-in older than that would fail them for being 7.0, so it skips."""
    if "gradus" in request.fixturenames:
        version = redis_version(request.getfixturevalue("gradus"))
        if version < (7, 2):
            shown = ".".join(map(str, version))
            pytest.skip(f"the server under test is Redis {shown}; these tests describe 7.2 "
                        "(set GRADUS_TARGET_REDIS_BIN to a 7.2 build)")


UNBALANCED_7_0 = b"ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified."
XADD_EXHAUSTED_SEQ_7_0 = Err(b"ERR Elements are too large to be stored")
BLOCKED_KEY_GONE_7_0 = Err(b"UNBLOCKED the stream key no longer exists")
BLOCKED_GROUP_GONE_7_0 = Err(b"NOGROUP the consumer group this client was blocked on no longer exists")
WRONGTYPE = Err(b"WRONGTYPE Operation against a key holding the wrong kind of value")


def _with_field_after(record: Any, after: bytes, name: bytes, value: Any) -> Any:
    """`record` (RESP2 flat list or RESP3 map) with `name: value` inserted after field `after`."""
    pairs = _pairs(record)
    if pairs is None or any(n == name for n, _ in pairs):
        return record
    out = []
    for n, v in pairs:
        out.append((n, v))
        if n == after:
            out.append((name, value))
    return Map(out) if isinstance(record, Map) else [x for pair in out for x in pair]


def _with_field_mapped(record: Any, name: bytes, fn: Callable[[Any], Any]) -> Any:
    """`record` with fn applied to the value of its field `name`."""
    pairs = _pairs(record)
    if pairs is None:
        return record
    out = [(n, fn(v) if n == name else v) for n, v in pairs]
    return Map(out) if isinstance(record, Map) else [x for pair in out for x in pair]


def _xreadgroup_key_and_group(cmd: Sequence[Any]) -> Tuple[str, str]:
    words = [w.decode() if isinstance(w, bytes) else str(w) for w in cmd]
    upper = [w.upper() for w in words]
    return words[upper.index("STREAMS") + 1], words[upper.index("GROUP") + 1]


def to_7_2(cmd: Sequence[Any], reply: Any, unblocked_by: Optional[str] = None) -> Any:
    """Redis 7.0's `reply` to `cmd` as Redis 7.2 gives it, for the 7.0 -> 7.2 changes that the
    7.0 reply determines (checked against 7.2.4's src/t_stream.c and src/blocked.c); any other
    reply is returned as it is.

    - #11099 (Stream consumers: re-purpose seen-time, add active-time): XINFO CONSUMERS gains
      `inactive` after `idle`, XINFO STREAM FULL's consumers `active-time` after `seen-time`.
      Both are times, compared as the time placeholder only, which is what is added.
    - #11799 and #12238: the unbalanced-streams error names the command as `'xread'` /
      `'xreadgroup'` (c->cmd->fullname) and suggests '>' for XREADGROUP, '$' for XREAD.
    - #11424 (Set errno in case XADD with partial ID fails): `XADD key <ms>-*` when <ms> is the
      top item's and its sequence is exhausted; 7.0 left errno unset and so answered "Elements
      are too large to be stored" (whose real cause, an element over 4 GB, never occurs here),
      7.2 answers the "equal or smaller than the target stream top item" error.
    - #11012 (reprocess command when client is unblocked on keys): a blocked XREADGROUP whose key
      was deleted (`unblocked_by` "DEL"), overwritten by another type ("SET") or whose group was
      destroyed ("XGROUP DESTROY") runs again in 7.2 and answers what XREADGROUP answers then:
      NOGROUP "No such key ... in XREADGROUP with GROUP option", or WRONGTYPE; 7.0 answered
      -UNBLOCKED the stream key no longer exists / -NOGROUP the consumer group this client was
      blocked on no longer exists.
    """
    name = _upper(cmd[0]) if cmd else ""
    if isinstance(reply, Err):
        if reply.message == UNBALANCED_7_0 and name in ("XREAD", "XREADGROUP"):
            symbol = ">" if name == "XREADGROUP" else "$"
            return Err(f"ERR Unbalanced '{name.lower()}' list of streams: for each stream key an ID "
                       f"or '{symbol}' must be specified.".encode())
        if reply == XADD_EXHAUSTED_SEQ_7_0 and name == "XADD" and any(
                str(arg).endswith("-*") for arg in cmd[2:]):
            return XADD_TOO_SMALL
        if unblocked_by is not None and name == "XREADGROUP" and reply in (BLOCKED_KEY_GONE_7_0,
                                                                            BLOCKED_GROUP_GONE_7_0):
            if unblocked_by == "SET":
                return WRONGTYPE
            key, group = _xreadgroup_key_and_group(cmd)
            return Err(f"NOGROUP No such key '{key}' or consumer group '{group}' in XREADGROUP "
                       "with GROUP option".encode())
        return reply
    if name == "XINFO" and len(cmd) > 1:
        sub = _upper(cmd[1])
        if sub == "CONSUMERS" and isinstance(reply, list):
            return [_with_field_after(c, b"idle", b"inactive", TIME) for c in reply]
        if sub == "STREAM" and any(_upper(arg) == "FULL" for arg in cmd[3:]):
            def consumers(cs: Any) -> Any:
                if not isinstance(cs, list):
                    return cs
                return [_with_field_after(c, b"seen-time", b"active-time", TIME) for c in cs]

            def groups(gs: Any) -> Any:
                if not isinstance(gs, list):
                    return gs
                return [_with_field_mapped(g, b"consumers", consumers) for g in gs]

            return _with_field_mapped(reply, b"groups", groups)
    return reply


@dataclass(frozen=True)
class Since72:
    """A script step whose Redis 7.2 reply depends on state that Redis 7.0 does not keep, so that
    to_7_2 cannot derive it from 7.0's reply; `change` names the 7.2 change. Such a step must
    change nothing in 7.2 (a read, or a refused command). With a reference older than 7.2 it is
    sent to Gradus only, so the reference's state stays what 7.2's would be, and the test
    asserts Gradus' reply itself; with a 7.2+ reference it is compared like any other step."""

    cmd: tuple
    change: str


def same(gradus, redis_server, script, protocol: int = 2, setup=()) -> List[Any]:
    """Run `script` (commands, or Since72 steps) on Gradus, then on the reference, both after
    FLUSHALL and `setup`, and compare them reply by reply after normalise_stream_reply, the
    reference's replies first through to_7_2 when it predates 7.2. A mismatch names the command
    and both replies. Returns Gradus' replies, one per step."""
    older = reference_is_older(redis_server)
    cmds = [step.cmd if isinstance(step, Since72) else step for step in script]
    compared = [not (older and isinstance(step, Since72)) for step in script]
    ours = run_script(gradus, cmds, protocol, setup)
    theirs = iter(run_script(redis_server, [c for c, keep in zip(cmds, compared) if keep], protocol, setup))
    for cmd, keep, a in zip(cmds, compared, ours):
        if not keep:
            continue
        b = next(theirs)
        if older:
            b = to_7_2(cmd, b)
        a, b = normalise_stream_reply(cmd, a), normalise_stream_reply(cmd, b)
        assert a == b, f"{cmd}: gradus {a!r}, redis {b!r}"
    return ours


def same_scenario(gradus, redis_server, scenario: Callable[[Any], List[Any]],
                  unblocked: Optional[Dict[int, Tuple[tuple, str]]] = None) -> List[Any]:
    """`scenario(server)` on Gradus, then on the reference; the two result lists must be equal.
    `unblocked` maps an index of the result to (the blocked XREADGROUP, what unblocked it), for
    to_7_2 when the reference predates 7.2. Returns Gradus' result."""
    ours, theirs = scenario(gradus), scenario(redis_server)
    if reference_is_older(redis_server):
        for index, (cmd, event) in (unblocked or {}).items():
            theirs[index] = to_7_2(cmd, theirs[index], unblocked_by=event)
    assert ours == theirs, f"\ngradus: {ours!r}\nredis:  {theirs!r}"
    return ours


def consumer_fields(reply: Any) -> List[dict]:
    """XINFO CONSUMERS' reply as one dict per consumer (field name as str -> value)."""
    return [{n.decode(): v for n, v in _pairs(c)} for c in reply]


def fill(key: str, count: int, start: int = 1, fields: Sequence[str] = ("f", "v")) -> List[tuple]:
    """XADD commands adding entries <start>-0 … <start+count-1>-0 to key."""
    return [("XADD", key, f"{i}-0", *fields) for i in range(start, start + count)]


# --- connections --------------------------------------------------------------


@contextmanager
def connections(server, count: int, protocol: int = 2) -> Iterator[List[RawConnection]]:
    """`count` raw connections to server (the first, the admin one, always RESP2), after a
    FLUSHALL; all closed on exit."""
    conns = [RawConnection(server.host, server.port, timeout=10) for _ in range(count)]
    try:
        for conn in conns[1:]:
            if protocol == 3:
                assert isinstance(conn.call("HELLO", "3"), Map)
        assert conns[0].call("FLUSHALL") is not None
        yield conns
    finally:
        for conn in conns:
            conn.close()


def blocked_clients(admin: RawConnection) -> int:
    info = admin.call("INFO", "clients")
    for line in info.decode().splitlines():
        if line.startswith("blocked_clients:"):
            return int(line.split(":")[1])
    raise AssertionError(f"no blocked_clients in {info!r}")


def wait_blocked(admin: RawConnection, n: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while blocked_clients(admin) != n:
        assert time.monotonic() < deadline, f"{blocked_clients(admin)} clients blocked, wanted {n}"
        time.sleep(0.005)


def nothing_arrives(conn: RawConnection, wait: float = 0.15) -> bool:
    return conn.read_available(wait) == b""


# --- XADD ---------------------------------------------------------------------


def test_xadd_explicit_ids_and_the_errors_of_ids_at_or_below_the_top(gradus, redis_server):
    """Explicit IDs (full and incomplete `5` = 5-0), `ms-*` continuing the top's sequence or
    starting at 0 on a new millisecond (0-* starts at 0-1), and Redis' exact errors: an ID
    equal or smaller than the top one, 0-0, an exhausted sequence (7.2: the same "equal or
    smaller" error), the last possible ID."""
    replies = same(gradus, redis_server, [
        ("XADD", "s", "1-1", "a", "1"),
        ("XADD", "s", "1-1", "a", "1"),
        ("XADD", "s", "1-0", "a", "1"),
        ("XADD", "s", "1", "a", "1"),
        ("XADD", "s", "0-0", "a", "1"),
        ("XADD", "new", "0-0", "a", "1"),
        ("XADD", "new", "0-*", "a", "1"),
        ("XADD", "new", "0-*", "a", "1"),
        ("XADD", "s", "5-*", "a", "1"),
        ("XADD", "s", "5-*", "a", "1"),
        ("XADD", "s", "4-*", "a", "1"),
        ("XADD", "s", "5", "a", "1"),
        ("XADD", "s", "6", "a", "1"),
        ("XADD", "s", "00007-0001", "a", "1"),
        ("XADD", "s", f"8-{MAX}", "a", "1"),
        ("XADD", "s", "8-*", "a", "1"),
        ("XADD", "s", "9-*", "a", "1"),
        ("XRANGE", "s", "-", "+"),
        ("XLEN", "s"),
        ("XADD", "s", f"{MAX}-{MAX}", "a", "1"),
        ("XADD", "s", f"{MAX}-{MAX}", "a", "1"),
        ("XADD", "s", "*", "a", "1"),
        ("XADD", "s", f"{MAX}-*", "a", "1"),
        ("XLEN", "s"),
        ("EXISTS", "new"),
    ])
    assert replies[1] == XADD_TOO_SMALL
    assert replies[4] == Err(b"ERR The ID specified in XADD must be greater than 0-0")
    assert replies[6:8] == [b"0-1", b"0-2"]
    # `8-*` on top 8-<max>: Redis 7.2's "equal or smaller" error (7.0 said "Elements are too
    # large to be stored", see to_7_2).
    assert replies[15] == XADD_TOO_SMALL
    assert replies[20] == Err(b"ERR The stream has exhausted the last possible ID, unable to add more items")


def test_xadd_argument_errors(gradus, redis_server):
    """Bad IDs, a missing or odd number of field/value arguments, bad MAXLEN/MINID/LIMIT values,
    LIMIT without `~` (refused, also with `=`), MAXLEN with MINID, and a string key."""
    replies = same(gradus, redis_server, [
        ("XADD", "s"),
        ("XADD", "s", "*"),
        ("XADD", "s", "*", "a"),
        ("XADD", "s", "*", "a", "b", "c"),
        ("XADD", "s", "1-1", "a", "b", "c"),
        ("XADD", "s", "a", "b", "c"),
        ("XADD", "s", "abc", "a", "1"),
        ("XADD", "s", "", "a", "1"),
        ("XADD", "s", "-1", "a", "1"),
        ("XADD", "s", "1-x", "a", "1"),
        ("XADD", "s", "-*", "a", "1"),
        ("XADD", "s", "*-1", "a", "1"),
        ("XADD", "s", "**", "a", "1"),
        ("XADD", "s", "18446744073709551616", "a", "1"),
        ("XADD", "s", "18446744073709551616-*", "a", "1"),
        ("XADD", "s", "MAXLEN"),
        ("XADD", "s", "MAXLEN", "1"),
        ("XADD", "s", "NOMKSTREAM"),
        ("XADD", "s", "MAXLEN", "-1", "1-1", "a", "1"),
        ("XADD", "s", "MAXLEN", "abc", "1-1", "a", "1"),
        ("XADD", "s", "MINID", "abc", "1-1", "a", "1"),
        ("XADD", "s", "MAXLEN", "=", "2", "LIMIT", "10", "1-1", "a", "1"),
        ("XADD", "s", "MINID", "=", "1", "LIMIT", "10", "1-1", "a", "1"),
        ("XADD", "s", "MAXLEN", "2", "LIMIT", "10", "1-1", "a", "1"),
        ("XADD", "s", "maxlen", "=", "2", "limit", "5", "1-1", "a", "1"),
        ("XADD", "s", "MAXLEN", "~", "2", "LIMIT", "-1", "1-1", "a", "1"),
        ("XADD", "s", "MAXLEN", "~", "2", "LIMIT", "x", "1-1", "a", "1"),
        ("XADD", "s", "MAXLEN", "1", "MINID", "1", "1-1", "a", "1"),
        ("XADD", "s", "MAXLEN", "1", "MAXLEN", "2", "1-1", "a", "1"),
        ("EXISTS", "s"),
        ("SET", "str", "v"),
        ("XADD", "str", "*", "a", "1"),
        ("XADD", "str", "NOMKSTREAM", "*", "a", "1"),
        ("GET", "str"),
    ])
    assert replies[6] == INVALID_ID
    assert replies[21] == Err(b"ERR syntax error, LIMIT cannot be used without the special ~ option")
    assert replies[-3] == Err(b"WRONGTYPE Operation against a key holding the wrong kind of value")


def test_xadd_nomkstream_fields_and_exact_trimming(gradus, redis_server):
    """NOMKSTREAM (a null reply, no key; options in any order), repeated and empty fields kept
    as given, XADD MAXLEN/MINID exact (with and without `=`), MAXLEN 0 leaving an empty stream
    that still exists, a MINID trim, and LIMIT with `~` accepted."""
    same(gradus, redis_server, [
        ("XADD", "nos", "NOMKSTREAM", "*", "a", "1"),
        ("EXISTS", "nos"),
        ("XADD", "s", "1-0", "a", "1", "b", "2", "a", "3"),
        ("XADD", "s", "2-0", "", ""),
        ("XADD", "s", "NOMKSTREAM", "3-0", "f", "v"),
        ("XADD", "s", "MAXLEN", "1", "NOMKSTREAM", "4-0", "f", "v"),
        ("XRANGE", "s", "-", "+"),
        ("XADD", "s", "5-0", "f", "v"),
        ("XADD", "s", "6-0", "f", "v"),
        ("XADD", "s", "MAXLEN", "=", "2", "7-0", "f", "v"),
        ("XRANGE", "s", "-", "+"),
        ("XADD", "s", "maxlen", "3", "8-0", "f", "v"),
        ("XADD", "s", "MINID", "=", "7", "9-0", "f", "v"),
        ("XRANGE", "s", "-", "+"),
        ("XADD", "s", "MINID", "9-0", "10-0", "f", "v"),
        ("XRANGE", "s", "-", "+"),
        ("XADD", "s", "MINID", "20", "11-0", "f", "v"),
        ("XLEN", "s"),
        ("XADD", "s", "MAXLEN", "~", "2", "LIMIT", "10", "12-0", "f", "v"),
        ("XADD", "s", "MAXLEN", "~", "0", "LIMIT", "0", "13-0", "f", "v"),
        ("XADD", "s", "MINID", "~", "0", "14-0", "f", "v"),
        ("XLEN", "s"),
        ("XADD", "t", "MAXLEN", "0", "1-0", "a", "1"),
        ("XLEN", "t"),
        ("EXISTS", "t"),
        ("XINFO", "STREAM", "t"),
        ("XADD", "t", "1-0", "a", "1"),
        ("XADD", "t", "MINID", "=", "1-0", "1-0", "a", "1"),
    ])


def test_xadd_auto_ids_follow_the_clock_and_the_top_id(gradus, redis_server):
    """`*` takes the server's clock (checked against ours, within 5 s) with increasing IDs, and
    a top ID in the future makes `*` continue it: 99999999999999-5 then `*` is
    99999999999999-6, and after a top at the sequence's maximum `*` moves to the next
    millisecond with sequence 0."""

    def parse(reply: Any) -> tuple:
        ms, seq = reply.decode().split("-")
        return int(ms), int(seq)

    def scenario(server):
        with connections(server, 1) as (c,):
            before = time.time() * 1000
            first = parse(c.call("XADD", "s", "*", "f", "v"))
            second = parse(c.call("XADD", "s", "*", "f", "v"))
            after = time.time() * 1000
            facts = [
                before - 5000 <= first[0] <= after + 5000,
                second > first,
                c.call("XADD", "s", f"{second[0]}-*", "f", "v") == f"{second[0]}-{second[1] + 1}".encode(),
                c.call("XADD", "s", f"{second[0]}-{second[1]}", "f", "v"),
                c.call("XLEN", "s"),
            ]
            c.call("DEL", "s")
            facts += [
                c.call("XADD", "s", "99999999999999-5", "f", "v"),
                c.call("XADD", "s", "*", "f", "v"),
                c.call("XADD", "s", f"99999999999999-{MAX}", "f", "v"),
                c.call("XADD", "s", "*", "f", "v"),
                c.call("XADD", "s", "100000000000000-*", "f", "v"),
                c.call("XADD", "s", "99999999999999-*", "f", "v"),
                c.call("XSETID", "s", "200000000000000-7"),
                c.call("XADD", "s", "*", "f", "v"),
                c.call("XRANGE", "s", "-", "+"),
            ]
            return facts

    facts = same_scenario(gradus, redis_server, scenario)
    assert facts[:3] == [True, True, True], facts
    assert facts[6] == b"99999999999999-6" and facts[8] == b"100000000000000-0"


# --- XLEN, XRANGE, XREVRANGE, XDEL ------------------------------------------------

RANGE_SETUP = [("XADD", "s", i, "f", "v") for i in ("1-0", "1-1", "2-0", "5-3", "5-7", "10-0")]


@pytest.mark.parametrize("protocol", [2, 3])
def test_xrange_and_xrevrange(gradus, redis_server, protocol):
    """Full ranges, incomplete IDs (`5` is 5-0 as a start and 5-<max> as an end), exclusive
    `(` bounds (also on incomplete IDs), COUNT (0 and negative answer a null), empty and
    reversed ranges, a missing key, and the errors: bad IDs, `(-`/`(+`, an exclusive bound
    past the last/first possible ID, COUNT without a value or not a number."""
    same(gradus, redis_server, [
        ("XLEN", "s"),
        ("XLEN", "nokey"),
        ("XRANGE", "s", "-", "+"),
        ("XRANGE", "s", "5", "5"),
        ("XRANGE", "s", "5-3", "5-3"),
        ("XRANGE", "s", "(1-0", "(5-7"),
        ("XRANGE", "s", "(1", "+"),
        ("XRANGE", "s", "-", "(5"),
        ("XRANGE", "s", "(5", "+"),
        ("XRANGE", "s", "(5-7", "(10-0"),
        ("XRANGE", "s", "-", "+", "COUNT", "2"),
        ("XRANGE", "s", "2", "+", "count", "1"),
        ("XRANGE", "s", "-", "+", "COUNT", "1", "COUNT", "3"),
        ("XRANGE", "s", "-", "+", "COUNT", "0"),
        ("XRANGE", "s", "-", "+", "COUNT", "-1"),
        ("XRANGE", "s", "-", "+", "COUNT", "abc"),
        ("XRANGE", "s", "-", "+", "COUNT"),
        ("XRANGE", "s", "-", "+", "LIMIT", "2"),
        ("XRANGE", "s", "3", "2"),
        ("XRANGE", "s", "11", "+"),
        ("XRANGE", "s", "-", "(0"),
        ("XRANGE", "s", "-", "(0-0"),
        ("XRANGE", "s", f"({MAX}-{MAX}", "+"),
        ("XRANGE", "s", f"{MAX}-{MAX}", "+"),
        ("XRANGE", "s", "abc", "+"),
        ("XRANGE", "s", "(-", "+"),
        ("XRANGE", "s", "-", "(+"),
        ("XRANGE", "s", "((5", "+"),
        ("XRANGE", "s", "(", "+"),
        ("XRANGE", "s", "5-", "+"),
        ("XRANGE", "s", "1-1-1", "+"),
        ("XRANGE", "s"),
        ("XRANGE", "nokey", "-", "+"),
        ("XREVRANGE", "s", "+", "-"),
        ("XREVRANGE", "s", "+", "-", "COUNT", "2"),
        ("XREVRANGE", "s", "(5-7", "(1-0"),
        ("XREVRANGE", "s", "5", "5"),
        ("XREVRANGE", "s", "(5", "-"),
        ("XREVRANGE", "s", "+", "(5"),
        ("XREVRANGE", "s", "-", "+"),
        ("XREVRANGE", "s", "+", "-", "COUNT", "0"),
        ("XREVRANGE", "s", "+", "(0-0"),
        ("XREVRANGE", "s", f"({MAX}-{MAX}", "-"),
        ("XREVRANGE", "nokey", "+", "-"),
        ("XREVRANGE", "s", "+"),
    ], protocol, setup=RANGE_SETUP)


def test_stream_id_parsing_accepts_what_redis_strtoull_accepts(gradus, redis_server):
    """Redis parses each ID part with string2ull (strtoull after a strict attempt): leading
    zeros, a `+` sign and leading spaces are accepted; a fraction, an exponent, hex, a trailing
    character or a negative number are not."""
    same(gradus, redis_server, [
        ("XRANGE", "s", "+5-+3", "+"),
        ("XRANGE", "s", "5- 3", "+"),
        ("XRANGE", "s", " 5", "+"),
        ("XRANGE", "s", "+5", "+"),
        ("XRANGE", "s", "00005-0003", "+"),
        ("XRANGE", "s", "5-3x", "+"),
        ("XRANGE", "s", "5.0", "+"),
        ("XRANGE", "s", "1e3", "+"),
        ("XRANGE", "s", "0x5", "+"),
        ("XRANGE", "s", "-5", "+"),
        ("XRANGE", "s", " -1", "+"),
        ("XRANGE", "s", "-", " -1"),
        ("XADD", "s", "+11", "a", "1"),
        ("XADD", "s", "00012-0001", "a", "1"),
        ("XRANGE", "s", "11", "+"),
    ], setup=RANGE_SETUP)


def test_xdel(gradus, redis_server):
    """XDEL counts the entries it removed (duplicates and missing IDs not), accepts incomplete
    IDs, refuses a bad one (deleting nothing); deleting every entry leaves an empty stream whose
    XINFO STREAM records the deletion (max-deleted-entry-id, first/last entry gone)."""
    same(gradus, redis_server, [
        ("XADD", "s", "1-0", "f", "v"),
        ("XADD", "s", "2-0", "f", "v"),
        ("XADD", "s", "3-0", "f", "v"),
        ("XADD", "s", "4-0", "f", "v"),
        ("XDEL", "s", "2-0", "2-0", "9-0"),
        ("XDEL", "s", "2-0"),
        ("XDEL", "s", "4-0", "abc"),
        ("XDEL", "s", "abc"),
        ("XDEL", "s", "3"),
        ("XDEL", "nokey", "1-0"),
        ("XDEL", "s"),
        ("XLEN", "s"),
        ("XINFO", "STREAM", "s"),
        ("XDEL", "s", "1-0", "4-0"),
        ("XLEN", "s"),
        ("EXISTS", "s"),
        ("TYPE", "s"),
        ("XRANGE", "s", "-", "+"),
        ("XINFO", "STREAM", "s"),
        ("XADD", "s", "4-0", "f", "v"),
        ("XADD", "s", "5-0", "f", "v"),
        ("XINFO", "STREAM", "s"),
    ])


# --- XTRIM ----------------------------------------------------------------------


def test_xtrim_exact_and_its_errors(gradus, redis_server):
    """XTRIM MAXLEN/MINID exact (with and without `=`, lowercase), its reply the number of
    entries removed, a missing key (0), and the errors: no strategy, an unknown one, a missing
    threshold, LIMIT without `~`, MAXLEN with MINID, a negative MAXLEN or LIMIT, bad MINID."""
    same(gradus, redis_server, fill("s", 12) + [
        ("XTRIM", "s", "MAXLEN", "10"),
        ("XTRIM", "s", "MAXLEN", "=", "8"),
        ("XTRIM", "s", "maxlen", "=", "8"),
        ("XTRIM", "s", "MINID", "5"),
        ("XTRIM", "s", "MINID", "=", "6-0"),
        ("XTRIM", "s", "minid", "2"),
        ("XRANGE", "s", "-", "+"),
        ("XTRIM", "s", "MAXLEN", "100"),
        ("XINFO", "STREAM", "s"),
        ("XTRIM", "nokey", "MAXLEN", "0"),
        ("EXISTS", "nokey"),
        ("XTRIM", "s"),
        ("XTRIM", "s", "MAXLEN"),
        ("XTRIM", "s", "FOO", "1"),
        ("XTRIM", "s", "MAXLEN", "=", "1", "LIMIT", "1"),
        ("XTRIM", "s", "MINID", "1", "LIMIT", "1"),
        ("XTRIM", "s", "MAXLEN", "1", "MINID", "1"),
        ("XTRIM", "s", "MAXLEN", "-1"),
        ("XTRIM", "s", "MAXLEN", "~", "1", "LIMIT", "-1"),
        ("XTRIM", "s", "MAXLEN", "abc"),
        ("XTRIM", "s", "MINID", "(1"),
        ("XTRIM", "s", "MINID", "abc"),
        ("XTRIM", "s", "MAXLEN", "1", "extra"),
        ("XTRIM", "s", "MAXLEN", "0"),
        ("XLEN", "s"),
        ("EXISTS", "s"),
        ("XINFO", "STREAM", "s"),
    ])


# (entries added, deleted ranges, trim command tail) for the approximate trimming test.
APPROXIMATE_CASES = [
    (50, [], ("MAXLEN", "~", "10")),
    (250, [], ("MAXLEN", "~", "10")),
    (250, [], ("MAXLEN", "~", "150")),
    (250, [], ("MAXLEN", "~", "149")),
    (250, [], ("MAXLEN", "~", "151")),
    (250, [], ("MAXLEN", "~", "0")),
    (250, [], ("MAXLEN", "~", "10", "LIMIT", "100")),
    (250, [], ("MAXLEN", "~", "10", "LIMIT", "99")),
    (250, [], ("MAXLEN", "~", "10", "LIMIT", "0")),
    (250, [], ("MAXLEN", "~", "10", "LIMIT", "250")),
    (250, [], ("MINID", "~", "150")),
    (250, [], ("MINID", "~", "101")),
    (250, [], ("MINID", "~", "100")),
    (250, [], ("MINID", "~", "100-1")),
    (250, [], ("MINID", "~", "1000")),
    (1000, [], ("MAXLEN", "~", "10")),
    (1000, [], ("MINID", "~", "900")),
    # A node keeps its deleted entries' places: 101..199 deleted leave a node of one entry.
    (250, [(101, 199)], ("MAXLEN", "~", "1")),
    (250, [(101, 200)], ("MAXLEN", "~", "60")),
    (250, [(1, 59)], ("MAXLEN", "~", "100")),
    (250, [(1, 59)], ("MAXLEN", "~", "150")),
    (250, [(1, 100)], ("MAXLEN", "~", "10")),
]


def test_xtrim_approximate_removes_only_whole_nodes(gradus, redis_server):
    """`~` trimming removes whole nodes only (Redis' listpacks of up to stream-node-max-entries
    = 100 entries, deleted ones included): MAXLEN ~ 10 on 50 entries removes nothing, on 250
    removes 200 (two nodes), ~ 150 removes one node; LIMIT caps the entries removed (a node that
    does not fit is kept); MINID ~ removes the nodes whole below the ID. XDEL'd entries still
    fill their node; a node whose entries are all deleted is gone. XINFO STREAM (radix-tree-keys
    = nodes, recorded-first-entry-id …) after each."""
    script: List[tuple] = []
    trims = []
    for entries, deleted, trim in APPROXIMATE_CASES:
        script.append(("DEL", "s"))
        script += fill("s", entries)
        for low, high in deleted:
            script.append(("XDEL", "s", *[f"{i}-0" for i in range(low, high + 1)]))
        script.append(("XINFO", "STREAM", "s"))
        trims.append(len(script))
        script.append(("XTRIM", "s", *trim))
        script.append(("XINFO", "STREAM", "s"))
        script.append(("XRANGE", "s", "-", "+", "COUNT", "1"))
    replies = same(gradus, redis_server, script)
    removed = [replies[i] for i in trims]
    assert removed[:3] == [0, 200, 100], removed


def test_xadd_with_approximate_maxlen_trims_nodes_as_it_goes(gradus, redis_server):
    """`XADD s MAXLEN ~ 100 …` (the common capped stream) lets the stream grow until a whole
    node can go, as Redis does; MINID ~ on XADD likewise; LIMIT on XADD caps the removal."""
    script: List[tuple] = []
    for i in range(1, 351):
        script.append(("XADD", "s", "MAXLEN", "~", "100", f"{i}-0", "f", "v"))
        if i % 50 == 0:
            script += [("XLEN", "s"), ("XINFO", "STREAM", "s")]
    for i in range(1, 301):
        script.append(("XADD", "m", "MINID", "~", str(max(1, i - 120)), f"{i}-0", "f", "v"))
        if i % 60 == 0:
            script += [("XLEN", "m"), ("XINFO", "STREAM", "m")]
    for i in range(1, 261):
        script.append(("XADD", "l", "MAXLEN", "~", "10", "LIMIT", "50", f"{i}-0", "f", "v"))
    script += [("XLEN", "l"), ("XINFO", "STREAM", "l")]
    same(gradus, redis_server, script)


# --- XSETID ---------------------------------------------------------------------


def test_xsetid(gradus, redis_server):
    """XSETID: a missing key, an ID below the top entry, equal or above it (later XADDs must
    pass it), ENTRIESADDED (not below the length, not negative) and MAXDELETEDID (not above the
    new ID; 0-0 leaves it unchanged), their effect in XINFO STREAM, an empty stream (any ID
    goes that is not below its max-deleted-entry-id: Redis 7.2), bad IDs (`+`, `-`, `(5`, `*`,
    `5-*`), syntax errors and a string key."""
    below_deleted = Since72(("XSETID", "s", "0-5"), "#11444: XSETID below max_deleted_entry_id (7-0)")
    below_both = Since72(("XSETID", "s", "1-0"), "#11444: below max_deleted_entry_id (2-0) and the top item")
    script = [
        ("XSETID", "s", "5-0"),
        ("XADD", "s", "1-0", "a", "1"),
        ("XADD", "s", "3-0", "a", "1"),
        ("XSETID", "s", "2-0"),
        ("XSETID", "s", "3-0"),
        ("XSETID", "s", "3"),
        ("XSETID", "s", "10-0"),
        ("XADD", "s", "5-0", "a", "1"),
        ("XADD", "s", "10-*", "a", "1"),
        ("XINFO", "STREAM", "s"),
        ("XSETID", "s", "20-0", "ENTRIESADDED", "1"),
        ("XSETID", "s", "20-0", "ENTRIESADDED", "-1"),
        ("XSETID", "s", "20-0", "ENTRIESADDED", "abc"),
        ("XSETID", "s", "20-0", "ENTRIESADDED", MAX),
        ("XSETID", "s", "20-0", "MAXDELETEDID", "25-0"),
        ("XSETID", "s", "20-0", "ENTRIESADDED", "10", "MAXDELETEDID", "20-1"),
        ("XSETID", "s", "20-0", "MAXDELETEDID", "abc"),
        ("XSETID", "s", "20-0", "FOO"),
        ("XSETID", "s", "20-0", "ENTRIESADDED"),
        ("XSETID", "s", "20-0", "ENTRIESADDED", "3", "MAXDELETEDID", "20-0"),
        ("XINFO", "STREAM", "s"),
        ("XSETID", "s", "20-0", "ENTRIESADDED", "7", "MAXDELETEDID", "15-0"),
        ("XINFO", "STREAM", "s"),
        ("XSETID", "s", "20-0", "MAXDELETEDID", "0-0"),
        ("XINFO", "STREAM", "s"),
        ("XSETID", "s", "21-0", "MAXDELETEDID", "2-0", "ENTRIESADDED", "9", "ENTRIESADDED", "12"),
        ("XINFO", "STREAM", "s"),
        ("XSETID", "s", "22-0", "ENTRIESADDED", "9223372036854775807"),
        ("XINFO", "STREAM", "s"),
        ("XSETID", "s", "+"),
        ("XSETID", "s", "-"),
        ("XSETID", "s", "(5"),
        ("XSETID", "s", "*"),
        ("XSETID", "s", "5-*"),
        ("XSETID", "s", "abc"),
        ("XSETID", "s"),
        ("DEL", "s"),
        ("XADD", "s", "7-0", "a", "1"),
        ("XDEL", "s", "7-0"),
        below_deleted,
        ("XSETID", "s", "7-0"),
        ("XSETID", "s", "9-0", "MAXDELETEDID", "2-0"),
        ("XSETID", "s", "3-0"),
        ("XINFO", "STREAM", "s"),
        ("XADD", "s", "2-9", "a", "1"),
        ("XADD", "s", "3-1", "a", "1"),
        ("XSETID", "s", "3-0"),
        below_both,
        ("XINFO", "STREAM", "s"),
        ("SET", "str", "v"),
        ("XSETID", "str", "1-0"),
    ]
    replies = same(gradus, redis_server, script)
    # Redis 7.2 (#11444, t_stream.c xsetidCommand) refuses an ID below max_deleted_entry_id,
    # checked before the top item; 7.0 set the empty stream's last ID back to 0-5, and
    # answered the top-item error for 1-0.
    assert replies[script.index(below_deleted)] == XSETID_BELOW_MAX_DELETED
    assert replies[script.index(below_both)] == XSETID_BELOW_MAX_DELETED


# --- keyspace and types ---------------------------------------------------------


def test_stream_keys_in_the_keyspace(gradus, redis_server):
    """TYPE `stream`, OBJECT ENCODING `stream`, EXISTS, DEL, RENAME (groups travel along,
    RENAME onto an existing key replaces it), and XLEN/XINFO afterwards."""
    same(gradus, redis_server, [
        ("XADD", "s", "1-0", "f", "v"),
        ("XADD", "s", "2-0", "f", "v"),
        ("TYPE", "s"),
        ("OBJECT", "ENCODING", "s"),
        ("EXISTS", "s"),
        ("XGROUP", "CREATE", "s", "g", "0"),
        ("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "s", ">"),
        ("RENAME", "s", "s2"),
        ("EXISTS", "s", "s2"),
        ("TYPE", "s2"),
        ("XLEN", "s2"),
        ("XINFO", "GROUPS", "s2"),
        ("XPENDING", "s2", "g"),
        ("SET", "str", "v"),
        ("RENAME", "s2", "str"),
        ("TYPE", "str"),
        ("XRANGE", "str", "-", "+"),
        ("XINFO", "STREAM", "str"),
        ("DEL", "str"),
        ("EXISTS", "str"),
        ("TYPE", "str"),
        ("XLEN", "str"),
        ("XADD", "e", "MAXLEN", "0", "1-0", "f", "v"),
        ("TYPE", "e"),
        ("OBJECT", "ENCODING", "e"),
        ("DEL", "e"),
    ])


def test_wrongtype_both_ways(gradus, redis_server):
    """Commands of other types on a stream key, and every X command on a string key, answer
    WRONGTYPE (after their arity checks), leaving the key alone."""
    script = [("XADD", "s", "1-0", "f", "v"), ("SET", "str", "v")]
    for cmd in [("GET", "s"), ("APPEND", "s", "x"), ("INCR", "s"), ("STRLEN", "s"),
                ("GETRANGE", "s", "0", "1"), ("LPUSH", "s", "x"), ("RPUSH", "s", "x"),
                ("LRANGE", "s", "0", "-1"), ("LLEN", "s"), ("HSET", "s", "f", "v"), ("HGETALL", "s"),
                ("SADD", "s", "m"), ("SMEMBERS", "s"), ("ZADD", "s", "1", "m"), ("ZRANGE", "s", "0", "-1"),
                ("PFADD", "s", "x"), ("SETRANGE", "s", "0", "x")]:
        script.append(cmd)
    for cmd in [("XADD", "str", "*", "a", "1"), ("XLEN", "str"), ("XRANGE", "str", "-", "+"),
                ("XREVRANGE", "str", "+", "-"), ("XDEL", "str", "1-0"), ("XTRIM", "str", "MAXLEN", "0"),
                ("XSETID", "str", "1-0"), ("XGROUP", "CREATE", "str", "g", "$"),
                ("XGROUP", "CREATE", "str", "g", "$", "MKSTREAM"), ("XGROUP", "SETID", "str", "g", "0"),
                ("XGROUP", "DESTROY", "str", "g"), ("XGROUP", "CREATECONSUMER", "str", "g", "c"),
                ("XGROUP", "DELCONSUMER", "str", "g", "c"), ("XREAD", "STREAMS", "str", "0"),
                ("XREAD", "STREAMS", "s", "str", "0", "0"),
                ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "str", ">"), ("XACK", "str", "g", "1-0"),
                ("XPENDING", "str", "g"), ("XPENDING", "str", "g", "-", "+", "10"),
                ("XCLAIM", "str", "g", "c", "0", "1-0"), ("XAUTOCLAIM", "str", "g", "c", "0", "0"),
                ("XINFO", "STREAM", "str"), ("XINFO", "GROUPS", "str"), ("XINFO", "CONSUMERS", "str", "g")]:
        script.append(cmd)
    script += [("GET", "str"), ("XRANGE", "s", "-", "+"), ("TYPE", "s")]
    replies = same(gradus, redis_server, script)
    wrongtype = Err(b"WRONGTYPE Operation against a key holding the wrong kind of value")
    assert replies[2] == wrongtype and replies[-3] == b"v"


# --- consumer groups --------------------------------------------------------------


def test_xgroup_create_setid_destroy(gradus, redis_server):
    """XGROUP CREATE at `$`, 0 or an ID (a missing key without MKSTREAM is Redis' long error),
    MKSTREAM, ENTRIESREAD (-1 allowed, below it refused), BUSYGROUP, syntax errors; SETID (with
    ENTRIESREAD, a missing group's NOGROUP); DESTROY (1, then 0); XINFO GROUPS after each,
    entries-read and lag (also negative, as ENTRIESREAD past entries-added makes it) exact."""
    same(gradus, redis_server, [
        ("XGROUP", "CREATE", "s", "g", "$"),
        ("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"),
        ("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"),
        ("XGROUP", "CREATE", "s", "g", "0"),
        ("XINFO", "GROUPS", "s"),
        ("XADD", "s", "1-0", "a", "1"),
        ("XGROUP", "CREATE", "s", "g0", "0"),
        ("XGROUP", "CREATE", "s", "g1", "$", "ENTRIESREAD", "1"),
        ("XGROUP", "CREATE", "s", "g2", "0", "ENTRIESREAD", "0"),
        ("XGROUP", "CREATE", "s", "g3", "1-0", "ENTRIESREAD", "5"),
        ("XGROUP", "CREATE", "s", "g4", "5", "ENTRIESREAD", "-1"),
        ("XGROUP", "CREATE", "s", "g5", "5-0", "ENTRIESREAD", "-2"),
        ("XGROUP", "CREATE", "s", "g5", "5-0", "ENTRIESREAD", "abc"),
        ("XGROUP", "CREATE", "s", "g5", "5-0", "ENTRIESREAD"),
        ("XGROUP", "CREATE", "s", "g5", "0", "FOO"),
        ("XGROUP", "CREATE", "s", "g5", "abc"),
        ("XGROUP", "CREATE", "s", "g5", "+"),
        ("XGROUP", "CREATE", "s", "g5", "-"),
        ("XGROUP", "CREATE", "s", "g5"),
        ("XGROUP", "CREATE", "s", "g6", "0", "MKSTREAM", "MKSTREAM"),
        ("XGROUP", "CREATE", "s", "g7", "0", "ENTRIESREAD", "3", "MKSTREAM"),
        ("XGROUP", "CREATE", "s", "g8", f"{MAX}-{MAX}"),
        ("XINFO", "GROUPS", "s"),
        ("XADD", "s", "2-0", "a", "1"),
        ("XINFO", "GROUPS", "s"),
        ("XGROUP", "SETID", "s", "g2", "1-0"),
        ("XGROUP", "SETID", "s", "g3", "$"),
        ("XGROUP", "SETID", "s", "g4", "0", "ENTRIESREAD", "4"),
        ("XGROUP", "SETID", "s", "g5", "0"),
        ("XGROUP", "SETID", "s", "g4", "0", "ENTRIESREAD", "-5"),
        ("XGROUP", "SETID", "s", "g4", "0", "FOO"),
        ("XGROUP", "SETID", "s", "g4", "abc"),
        ("XGROUP", "SETID", "nokey", "g", "0"),
        ("XINFO", "GROUPS", "s"),
        ("XGROUP", "DESTROY", "s", "g"),
        ("XGROUP", "DESTROY", "s", "g"),
        ("XGROUP", "DESTROY", "s", "nog"),
        ("XGROUP", "DESTROY", "nokey", "g"),
        ("XGROUP", "DESTROY", "s"),
        ("XGROUP", "FOO", "s", "g"),
        ("XGROUP",),
        ("XINFO", "GROUPS", "s"),
        ("XINFO", "STREAM", "s"),
    ])


def test_xgroup_consumers(gradus, redis_server):
    """CREATECONSUMER (1, then 0), DELCONSUMER answering the consumer's pending count (its PEL
    entries gone from the group's), a missing group (NOGROUP) or key; XINFO CONSUMERS."""
    same(gradus, redis_server, [
        ("XADD", "s", "1-0", "a", "1"),
        ("XADD", "s", "2-0", "a", "1"),
        ("XADD", "s", "3-0", "a", "1"),
        ("XGROUP", "CREATE", "s", "g", "0"),
        ("XGROUP", "CREATECONSUMER", "s", "g", "c1"),
        ("XGROUP", "CREATECONSUMER", "s", "g", "c1"),
        ("XGROUP", "CREATECONSUMER", "s", "nog", "c1"),
        ("XGROUP", "CREATECONSUMER", "nokey", "g", "c1"),
        ("XGROUP", "CREATECONSUMER", "s", "g"),
        ("XREADGROUP", "GROUP", "g", "c2", "COUNT", "2", "STREAMS", "s", ">"),
        ("XREADGROUP", "GROUP", "g", "c3", "STREAMS", "s", ">"),
        ("XINFO", "CONSUMERS", "s", "g"),
        ("XINFO", "GROUPS", "s"),
        ("XGROUP", "DELCONSUMER", "s", "g", "c2"),
        ("XGROUP", "DELCONSUMER", "s", "g", "c2"),
        ("XGROUP", "DELCONSUMER", "s", "g", "c1"),
        ("XGROUP", "DELCONSUMER", "s", "nog", "c1"),
        ("XGROUP", "DELCONSUMER", "nokey", "g", "c1"),
        ("XPENDING", "s", "g"),
        ("XINFO", "CONSUMERS", "s", "g"),
        ("XINFO", "CONSUMERS", "s", "nog"),
        ("XINFO", "CONSUMERS", "nokey", "g"),
        ("XGROUP", "DELCONSUMER", "s", "g", "c3"),
        ("XINFO", "CONSUMERS", "s", "g"),
        ("XINFO", "GROUPS", "s"),
    ])


@pytest.mark.parametrize("protocol", [2, 3])
def test_xreadgroup(gradus, redis_server, protocol):
    """XREADGROUP `>` (new entries, COUNT), history from 0 or an ID (the consumer's own PEL,
    deleted entries as [id, nil], delivery counts raised), NOACK (nothing pending), several
    streams, COUNT 0/negative (no limit), and the errors: unknown group or key (NOGROUP text),
    `$`, `+`, `(1`, unbalanced streams, missing GROUP, syntax."""
    same(gradus, redis_server, [
        ("XADD", "s", "1-0", "a", "1"),
        ("XADD", "s", "2-0", "b", "2"),
        ("XADD", "s", "3-0", "c", "3"),
        ("XADD", "t", "1-0", "x", "1"),
        ("XGROUP", "CREATE", "s", "g", "0"),
        ("XGROUP", "CREATE", "t", "g", "0"),
        ("XREADGROUP", "GROUP", "g", "c1", "COUNT", "1", "STREAMS", "s", ">"),
        ("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", "0"),
        ("XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", "t", ">", ">"),
        ("XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", ">"),
        ("XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", "t", "0", "0"),
        ("XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", "2"),
        ("XREADGROUP", "GROUP", "g", "c2", "COUNT", "1", "STREAMS", "s", "0"),
        ("XREADGROUP", "GROUP", "g", "c2", "COUNT", "0", "STREAMS", "s", "0"),
        ("XREADGROUP", "GROUP", "g", "c2", "COUNT", "-1", "STREAMS", "s", "0"),
        ("XREADGROUP", "GROUP", "g", "c3", "STREAMS", "s", "0"),
        ("XREADGROUP", "GROUP", "g", "c3", "STREAMS", "s", ">"),
        ("XPENDING", "s", "g"),
        ("XPENDING", "s", "g", "-", "+", "10"),
        ("XDEL", "s", "2-0"),
        ("XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", "0"),
        ("XPENDING", "s", "g", "-", "+", "10"),
        ("XADD", "s", "4-0", "d", "4"),
        ("XADD", "s", "5-0", "e", "5"),
        ("XREADGROUP", "GROUP", "g", "c1", "NOACK", "COUNT", "1", "STREAMS", "s", ">"),
        ("XREADGROUP", "GROUP", "g", "c1", "noack", "STREAMS", "s", "0"),
        ("XPENDING", "s", "g"),
        ("XINFO", "GROUPS", "s"),
        ("XREADGROUP", "GROUP", "nog", "c3", "STREAMS", "s", ">"),
        ("XREADGROUP", "GROUP", "g", "c3", "STREAMS", "nokey", ">"),
        ("XREADGROUP", "GROUP", "g", "c3", "STREAMS", "s", "nokey", ">", ">"),
        ("XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", "$"),
        ("XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", "+"),
        ("XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", "-"),
        ("XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", "(1"),
        ("XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", "t", ">"),
        ("XREADGROUP", "GROUP", "g", "STREAMS", "s", ">"),
        ("XREADGROUP", "g", "c3", "STREAMS", "s", ">"),
        ("XREADGROUP", "GROUP", "g", "c2", "COUNT", "x", "STREAMS", "s", "0"),
        ("XREADGROUP", "GROUP", "g", "c2", "FOO", "STREAMS", "s", "0"),
        ("XREADGROUP", "GROUP", "g", "c2", "STREAMS"),
        ("XREADGROUP", "GROUP", "g", "c2"),
        ("XREADGROUP", "STREAMS", "s", ">"),
        ("XINFO", "CONSUMERS", "s", "g"),
        ("XINFO", "GROUPS", "s"),
        ("XINFO", "GROUPS", "t"),
    ], protocol)


def test_xack_and_xpending(gradus, redis_server):
    """XACK counts the IDs it removed from the PEL (missing group/key: 0; a bad ID an error);
    XPENDING's summary (empty: 0 and nulls), its extended form (exclusive and incomplete
    bounds, COUNT 0 or negative empty, a consumer filter, IDLE with 0 and with an hour, set by
    XCLAIM IDLE) with the idle column normalised, and its errors."""
    same(gradus, redis_server, [
        ("XADD", "s", "1-0", "a", "1"),
        ("XADD", "s", "2-0", "b", "2"),
        ("XADD", "s", "3-0", "c", "3"),
        ("XADD", "s", "4-0", "d", "4"),
        ("XGROUP", "CREATE", "s", "g", "0"),
        ("XPENDING", "s", "g"),
        ("XPENDING", "s", "g", "-", "+", "10"),
        ("XREADGROUP", "GROUP", "g", "c1", "COUNT", "1", "STREAMS", "s", ">"),
        ("XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", ">"),
        ("XPENDING", "s", "g"),
        ("XPENDING", "s", "g", "-", "+", "10"),
        ("XPENDING", "s", "g", "-", "+", "2"),
        ("XPENDING", "s", "g", "-", "+", "10", "c1"),
        ("XPENDING", "s", "g", "-", "+", "10", "nobody"),
        ("XPENDING", "s", "g", "-", "+", "0"),
        ("XPENDING", "s", "g", "-", "+", "-1"),
        ("XPENDING", "s", "g", "(2", "+", "10"),
        ("XPENDING", "s", "g", "-", "(3", "10"),
        ("XPENDING", "s", "g", "3", "3", "10"),
        ("XPENDING", "s", "g", "IDLE", "0", "-", "+", "10"),
        ("XPENDING", "s", "g", "IDLE", "3600000", "-", "+", "10"),
        ("XCLAIM", "s", "g", "c2", "0", "2-0", "IDLE", "7200000", "JUSTID"),
        ("XPENDING", "s", "g", "IDLE", "3600000", "-", "+", "10"),
        ("XPENDING", "s", "g", "IDLE", "3600000", "-", "+", "10", "c1"),
        ("XPENDING", "s", "g", "-", "+"),
        ("XPENDING", "s", "g", "IDLE", "0"),
        ("XPENDING", "s", "g", "IDLE", "abc", "-", "+", "10"),
        ("XPENDING", "s", "g", "foo", "+", "10"),
        ("XPENDING", "s", "g", "-", "+", "abc"),
        ("XPENDING", "s", "nog"),
        ("XPENDING", "nokey", "g"),
        ("XPENDING", "s"),
        ("XACK", "s", "g", "1-0", "9-0"),
        ("XACK", "s", "g", "1-0"),
        ("XACK", "s", "g", "2", "3-0", "3-0"),
        ("XACK", "s", "nog", "4-0"),
        ("XACK", "nokey", "g", "4-0"),
        ("XACK", "s", "g", "abc"),
        ("XACK", "s", "g", "4-0", "abc"),
        ("XACK", "s", "g"),
        ("XPENDING", "s", "g"),
        ("XPENDING", "s", "g", "-", "+", "10"),
        ("XINFO", "CONSUMERS", "s", "g"),
        ("XACK", "s", "g", "4-0"),
        ("XPENDING", "s", "g"),
    ])


def test_xclaim(gradus, redis_server):
    """XCLAIM with min-idle 0 (and negative), JUSTID (delivery count untouched), FORCE (only
    for IDs still in the stream), RETRYCOUNT, IDLE/TIME (only their effect on a later
    min-idle of an hour), LASTID (only raises the group's last ID), entries deleted from the
    stream (dropped from the PEL), a consumer created even when nothing is claimed (Redis 7.2),
    and the errors (Redis' own texts for bad min-idle, options and option values)."""
    # Redis 7.2 (#11099) creates XCLAIM's consumer whether or not it claims anything; 7.0 only
    # when it claims. The consumers are read on Gradus only, then newbie is deleted on both
    # (0 pending either way), after which the servers agree again.
    consumers_with_newbie = Since72(("XINFO", "CONSUMERS", "s", "g"), "#11099: XCLAIM creates its consumer")
    script = [
        ("XADD", "s", "1-0", "a", "1"),
        ("XADD", "s", "2-0", "b", "2"),
        ("XADD", "s", "3-0", "c", "3"),
        ("XADD", "s", "4-0", "d", "4"),
        ("XGROUP", "CREATE", "s", "g", "0"),
        ("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", ">"),
        ("XCLAIM", "s", "g", "c2", "0", "1-0"),
        ("XCLAIM", "s", "g", "c2", "0", "1-0", "2-0", "JUSTID"),
        ("XPENDING", "s", "g", "-", "+", "10"),
        ("XCLAIM", "s", "g", "c2", "3600000", "3-0"),
        ("XCLAIM", "s", "g", "newbie", "3600000", "3-0"),
        ("XCLAIM", "s", "g", "newbie", "0", "9-0"),
        consumers_with_newbie,
        ("XGROUP", "DELCONSUMER", "s", "g", "newbie"),
        ("XINFO", "CONSUMERS", "s", "g"),
        ("XCLAIM", "s", "g", "c2", "0", "9-0", "FORCE"),
        ("XCLAIM", "s", "g", "c2", "0", "4-5", "FORCE", "JUSTID"),
        ("XACK", "s", "g", "4-0"),
        ("XCLAIM", "s", "g", "c2", "0", "4-0"),
        ("XCLAIM", "s", "g", "c2", "0", "4-0", "FORCE"),
        ("XPENDING", "s", "g", "-", "+", "10"),
        ("XCLAIM", "s", "g", "c3", "0", "3-0", "RETRYCOUNT", "7"),
        ("XCLAIM", "s", "g", "c3", "0", "2-0", "RETRYCOUNT", "7", "JUSTID"),
        ("XCLAIM", "s", "g", "c3", "-1", "3-0", "RETRYCOUNT", "-1"),
        ("XPENDING", "s", "g", "-", "+", "10"),
        ("XCLAIM", "s", "g", "c3", "0", "3-0", "IDLE", "7200000", "JUSTID"),
        ("XCLAIM", "s", "g", "c3", "0", "1-0", "TIME", "1000", "JUSTID"),
        ("XCLAIM", "s", "g", "c4", "3600000", "1-0", "2-0", "3-0", "4-0"),
        ("XPENDING", "s", "g", "-", "+", "10"),
        ("XCLAIM", "s", "g", "c4", "0", "3-0", "LASTID", "100-0", "JUSTID"),
        ("XINFO", "GROUPS", "s"),
        ("XCLAIM", "s", "g", "c4", "0", "3-0", "LASTID", "2-0", "JUSTID"),
        ("XINFO", "GROUPS", "s"),
        ("XDEL", "s", "2-0"),
        ("XCLAIM", "s", "g", "c5", "0", "2-0", "3-0"),
        ("XCLAIM", "s", "g", "c5", "0", "2-0", "FORCE"),
        ("XPENDING", "s", "g", "-", "+", "10"),
        ("XPENDING", "s", "g"),
        ("XCLAIM", "s", "g", "c3", "abc", "3-0"),
        ("XCLAIM", "s", "g", "c3", "0", "abc"),
        ("XCLAIM", "s", "g", "c3", "0", "3-0", "RETRYCOUNT", "abc"),
        ("XCLAIM", "s", "g", "c3", "0", "3-0", "IDLE", "abc"),
        ("XCLAIM", "s", "g", "c3", "0", "3-0", "TIME", "abc"),
        ("XCLAIM", "s", "g", "c3", "0", "3-0", "LASTID", "abc"),
        ("XCLAIM", "s", "g", "c3", "0", "3-0", "FOO"),
        ("XCLAIM", "s", "g", "c3", "0", "3-0", "FORCE", "FOO"),
        ("XCLAIM", "s", "g", "c3", "0", "3-0", "JUSTID", "4-0"),
        ("XCLAIM", "s", "g", "c3", "0", "3-0", "RETRYCOUNT"),
        ("XCLAIM", "s", "nog", "c3", "0", "3-0"),
        ("XCLAIM", "nokey", "g", "c3", "0", "3-0"),
        ("XCLAIM", "s", "g", "c3", "0"),
        ("XINFO", "CONSUMERS", "s", "g"),
        ("XINFO", "STREAM", "s", "FULL"),
    ]
    replies = same(gradus, redis_server, script)
    consumers = consumer_fields(replies[script.index(consumers_with_newbie)])
    assert [c["name"] for c in consumers] == [b"c1", b"c2", b"newbie"], consumers
    # newbie has claimed nothing: no pending entries and `inactive` -1 (never active); c2 has.
    assert consumers[2]["pending"] == 0 and consumers[2]["inactive"] == -1, consumers
    assert consumers[1]["inactive"] >= 0, consumers


def test_xautoclaim(gradus, redis_server):
    """XAUTOCLAIM with min-idle 0: the next cursor, claimed entries (or IDs with JUSTID), and
    in its third element the PEL entries whose stream entries were deleted (dropped from the
    PEL; they count toward COUNT); exclusive/`-`/`+` starts, COUNT limits, a min-idle of an
    hour claiming nothing (Redis 7.2: the consumer is created all the same), and the errors."""
    # Redis 7.2 (#11099) creates XAUTOCLAIM's consumer whether or not it claims anything; 7.0
    # only when it claims. The consumers are read on Gradus only, then c4 is deleted on both
    # (0 pending either way), after which the servers agree again. (c9's first XAUTOCLAIM
    # claims nothing either, but its second one claims 6-0, so c9 exists in both by the end.)
    consumers_with_c4 = Since72(("XINFO", "CONSUMERS", "s", "g"), "#11099: XAUTOCLAIM creates its consumer")
    script = [
        *fill("s", 6),
        ("XGROUP", "CREATE", "s", "g", "0"),
        ("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", ">"),
        ("XDEL", "s", "2-0", "4-0"),
        ("XAUTOCLAIM", "s", "g", "c2", "0", "0", "COUNT", "2"),
        ("XPENDING", "s", "g", "-", "+", "10"),
        ("XAUTOCLAIM", "s", "g", "c2", "0", "3-0", "COUNT", "2"),
        ("XAUTOCLAIM", "s", "g", "c2", "0", "0"),
        ("XAUTOCLAIM", "s", "g", "c3", "0", "0", "JUSTID"),
        ("XAUTOCLAIM", "s", "g", "c3", "0", "(1", "JUSTID"),
        ("XAUTOCLAIM", "s", "g", "c3", "0", "-", "JUSTID", "COUNT", "1"),
        ("XAUTOCLAIM", "s", "g", "c3", "0", "+", "JUSTID"),
        ("XAUTOCLAIM", "s", "g", "c3", "0", "5", "COUNT", "1", "JUSTID", "JUSTID"),
        ("XAUTOCLAIM", "s", "g", "c3", "-5", "0"),
        ("XAUTOCLAIM", "s", "g", "c3", "0", "0", "COUNT", "1000000"),
        ("XAUTOCLAIM", "s", "g", "c4", "3600000", "0"),
        consumers_with_c4,
        ("XGROUP", "DELCONSUMER", "s", "g", "c4"),
        ("XINFO", "CONSUMERS", "s", "g"),
        ("XPENDING", "s", "g", "-", "+", "10"),
        ("XAUTOCLAIM", "s", "g", "c2", "0", "0", "COUNT", "0"),
        ("XAUTOCLAIM", "s", "g", "c2", "0", "0", "COUNT", "-1"),
        ("XAUTOCLAIM", "s", "g", "c2", "0", "0", "COUNT", "abc"),
        ("XAUTOCLAIM", "s", "g", "c2", "0", "0", "FOO"),
        ("XAUTOCLAIM", "s", "g", "c2", "abc", "0"),
        ("XAUTOCLAIM", "s", "g", "c2", "0", "abc"),
        ("XAUTOCLAIM", "s", "nog", "c2", "0", "0"),
        ("XAUTOCLAIM", "nokey", "g", "c2", "0", "0"),
        ("XAUTOCLAIM", "s", "g", "c2", "0"),
        ("XDEL", "s", "1-0", "3-0", "5-0"),
        ("XAUTOCLAIM", "s", "g", "c9", "0", "0", "COUNT", "1"),
        ("XAUTOCLAIM", "s", "g", "c9", "0", "0"),
        ("XPENDING", "s", "g"),
        ("XINFO", "CONSUMERS", "s", "g"),
        ("XINFO", "GROUPS", "s"),
    ]
    replies = same(gradus, redis_server, script)
    consumers = consumer_fields(replies[script.index(consumers_with_c4)])
    assert [c["name"] for c in consumers] == [b"c1", b"c2", b"c3", b"c4"], consumers
    # c4 has claimed nothing: no pending entries and `inactive` -1 (never active).
    assert consumers[3]["pending"] == 0 and consumers[3]["inactive"] == -1, consumers


@pytest.mark.parametrize("protocol", [2, 3])
def test_xinfo_stream_groups_and_consumers(gradus, redis_server, protocol):
    """XINFO STREAM (first/last entry, counters), STREAM FULL (default COUNT 10, COUNT 1, 0 and
    negative meaning all; group and consumer PELs), GROUPS (entries-read, lag: a deletion after
    the group's last ID makes lag null; a group at an ID with unknown entries-read too), and
    CONSUMERS, with times normalised; the errors of each (no such key, NOGROUP, syntax)."""
    same(gradus, redis_server, [
        *fill("s", 14),
        ("XGROUP", "CREATE", "s", "g", "0"),
        ("XGROUP", "CREATE", "s", "g2", "$"),
        ("XGROUP", "CREATE", "s", "g3", "2-0"),
        ("XREADGROUP", "GROUP", "g", "c1", "COUNT", "2", "STREAMS", "s", ">"),
        ("XREADGROUP", "GROUP", "g", "c2", "COUNT", "1", "STREAMS", "s", ">"),
        ("XINFO", "STREAM", "s"),
        ("XINFO", "GROUPS", "s"),
        ("XDEL", "s", "14-0"),
        ("XINFO", "GROUPS", "s"),
        ("XADD", "s", "15-0", "e", "5"),
        ("XINFO", "GROUPS", "s"),
        ("XDEL", "s", "1-0"),
        ("XINFO", "STREAM", "s"),
        ("XINFO", "STREAM", "s", "FULL"),
        ("XINFO", "STREAM", "s", "FULL", "COUNT", "1"),
        ("XINFO", "STREAM", "s", "FULL", "COUNT", "0"),
        ("XINFO", "STREAM", "s", "full", "count", "-1"),
        ("XINFO", "STREAM", "s", "FULL", "COUNT", "abc"),
        ("XINFO", "STREAM", "s", "FOO"),
        ("XINFO", "STREAM", "s", "COUNT", "1"),
        ("XINFO", "CONSUMERS", "s", "g"),
        ("XINFO", "CONSUMERS", "s", "g2"),
        ("XINFO", "STREAM", "nokey"),
        ("XINFO", "GROUPS", "nokey"),
        ("XINFO", "CONSUMERS", "s", "nog"),
        ("XINFO", "CONSUMERS", "nokey", "g"),
        ("XINFO", "FOO", "s"),
        ("XINFO",),
        ("XINFO", "STREAM"),
        ("XTRIM", "s", "MAXLEN", "0"),
        ("XINFO", "STREAM", "s"),
        ("XINFO", "STREAM", "s", "FULL"),
        ("XINFO", "GROUPS", "s"),
    ], protocol)


# --- XREAD ----------------------------------------------------------------------


@pytest.mark.parametrize("protocol", [2, 3])
def test_xread_without_blocking(gradus, redis_server, protocol):
    """XREAD from 0 or an ID, COUNT (0 and negative: no limit), several streams (a missing key
    and one with nothing new left out; none: a null), `$` (null), the same key twice, and the
    errors (`>` outside XREADGROUP, GROUP/NOACK on XREAD, unbalanced streams, bad BLOCK). In
    RESP3 the reply is a map of key to entries."""
    same(gradus, redis_server, [
        ("XADD", "s", "1-0", "a", "1"),
        ("XADD", "s", "2-0", "b", "2"),
        ("XADD", "t", "5-0", "x", "1"),
        ("XREAD", "STREAMS", "s", "0"),
        ("XREAD", "COUNT", "1", "STREAMS", "s", "t", "0", "0"),
        ("XREAD", "STREAMS", "s", "t", "1-0", "5"),
        ("XREAD", "STREAMS", "s", "t", "2", "5"),
        ("XREAD", "STREAMS", "s", "$"),
        ("XREAD", "STREAMS", "nokey", "0"),
        ("XREAD", "STREAMS", "nokey", "$"),
        ("XREAD", "STREAMS", "s", "nokey", "0", "0"),
        ("XREAD", "COUNT", "0", "STREAMS", "s", "0"),
        ("XREAD", "COUNT", "-1", "STREAMS", "s", "0"),
        ("XREAD", "count", "1", "streams", "s", "0"),
        ("XREAD", "STREAMS", "s", "s", "0", "1"),
        ("XREAD", "STREAMS", "s", f"{MAX}-{MAX}"),
        ("XREAD", "BLOCK", "0", "STREAMS", "s", "0"),
        ("XREAD", "STREAMS", "s", ">"),
        ("XREAD", "STREAMS", "s", "+"),
        ("XREAD", "STREAMS", "s", "-"),
        ("XREAD", "STREAMS", "s", "(1"),
        ("XREAD", "COUNT", "abc", "STREAMS", "s", "0"),
        ("XREAD", "STREAMS", "s"),
        ("XREAD", "STREAMS", "s", "t", "0"),
        ("XREAD", "GROUP", "g", "c", "STREAMS", "s", "0"),
        ("XREAD", "NOACK", "STREAMS", "s", "0"),
        ("XREAD", "FOO", "STREAMS", "s", "0"),
        ("XREAD", "BLOCK", "-1", "STREAMS", "s", "0"),
        ("XREAD", "BLOCK", "abc", "STREAMS", "s", "0"),
        ("XREAD", "s", "0"),
    ], protocol)


def test_xread_and_xreadgroup_do_not_block_in_multi(gradus, redis_server):
    """Inside MULTI a blocking XREAD/XREADGROUP answers at once (a null when nothing is new)."""
    same(gradus, redis_server, [
        ("XADD", "s", "1-0", "a", "1"),
        ("XGROUP", "CREATE", "s", "g", "$"),
        ("MULTI",),
        ("XREAD", "BLOCK", "0", "STREAMS", "s", "$"),
        ("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">"),
        ("XADD", "s", "2-0", "b", "2"),
        ("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">"),
        ("EXEC",),
    ])


@pytest.mark.parametrize("protocol", [2, 3])
def test_blocking_reads_time_out(gradus, redis_server, protocol):
    """XREAD BLOCK 100 and XREADGROUP BLOCK 100 with nothing new answer a null after about
    100 ms; BLOCK 0 waits until unblocked (CLIENT UNBLOCK: a null, as a timeout; with ERROR,
    Redis' UNBLOCKED error); XREADGROUP BLOCK on history (0) answers at once."""

    def scenario(server):
        with connections(server, 2, protocol) as (admin, reader):
            admin.call("XADD", "s", "1-0", "a", "1")
            admin.call("XGROUP", "CREATE", "s", "g", "$")
            out = []
            for cmd in (("XREAD", "BLOCK", "100", "STREAMS", "s", "$"),
                        ("XREAD", "BLOCK", "100", "STREAMS", "nokey", "s", "0", "$"),
                        ("XREADGROUP", "GROUP", "g", "c", "BLOCK", "100", "STREAMS", "s", ">")):
                started = time.monotonic()
                reply = reader.call(*cmd)
                elapsed = time.monotonic() - started
                out.append((reply, 0.09 <= elapsed < 3))
            out.append(reader.call("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", "0"))
            reader_id = reader.call("CLIENT", "ID")
            for unblock in (("CLIENT", "UNBLOCK", reader_id), ("CLIENT", "UNBLOCK", reader_id, "ERROR")):
                reader.send_command("XREAD", "BLOCK", "0", "STREAMS", "s", "$")
                wait_blocked(admin, 1)
                out.append(nothing_arrives(reader))
                out.append(admin.call(*unblock))
                out.append(reader.read_reply())
            return out

    out = same_scenario(gradus, redis_server, scenario)
    assert [ok for _, ok in out[:3]] == [True, True, True], out


@pytest.mark.parametrize("protocol", [2, 3])
def test_blocked_xread_is_woken_by_xadd(gradus, redis_server, protocol):
    """A client blocked in XREAD BLOCK 0 on `$` of several keys (one missing) is answered with
    the entry an XADD from another connection adds (RESP3: a map), only for the key that got
    it; a COUNT is honoured; an XADD creating a missing key wakes its reader; an entry added
    with an ID not above the one the reader waits past does not wake it."""

    def scenario(server):
        with connections(server, 2, protocol) as (admin, reader):
            out = [admin.call("XADD", "s", "1-0", "a", "1")]
            reader.send_command("XREAD", "BLOCK", "0", "STREAMS", "s", "missing", "$", "$")
            wait_blocked(admin, 1)
            out.append(nothing_arrives(reader))
            out.append(admin.call("XADD", "s", "2-0", "b", "2"))
            out.append(reader.read_reply())
            reader.send_command("XREAD", "BLOCK", "0", "STREAMS", "s", "missing", "$", "$")
            wait_blocked(admin, 1)
            out.append(admin.call("XADD", "missing", "7-0", "c", "3"))
            out.append(reader.read_reply())
            # Waiting past 5-0 on t: 3-0 does not wake it, 6-0 does.
            reader.send_command("XREAD", "COUNT", "1", "BLOCK", "0", "STREAMS", "t", "5-0")
            wait_blocked(admin, 1)
            out.append(admin.call("XADD", "t", "3-0", "d", "4"))
            out.append(nothing_arrives(reader))
            out.append(blocked_clients(admin))
            out.append(admin.call("XADD", "t", "6-0", "e", "5"))
            out.append(reader.read_reply())
            out.append(blocked_clients(admin))
            return out

    out = same_scenario(gradus, redis_server, scenario)
    assert out[1] is True and out[7] is True, out


@pytest.mark.parametrize("protocol", [2, 3])
def test_blocked_xreadgroup_is_woken_by_xadd(gradus, redis_server, protocol):
    """XREADGROUP BLOCK 0 `>` is answered with the new entry (now pending for that consumer);
    an XREAD and an XREADGROUP blocked on the same key are both served by one XADD; NOACK
    leaves nothing pending; XPENDING and XINFO GROUPS after."""

    def scenario(server):
        with connections(server, 3, protocol) as (admin, r1, r2):
            admin.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
            out = []
            r1.send_command("XREADGROUP", "GROUP", "g", "c1", "BLOCK", "0", "STREAMS", "s", ">")
            wait_blocked(admin, 1)
            out.append(admin.call("XADD", "s", "1-0", "a", "1"))
            out.append(r1.read_reply())
            r1.send_command("XREADGROUP", "GROUP", "g", "c2", "COUNT", "1", "BLOCK", "0", "STREAMS", "s", ">")
            r2.send_command("XREAD", "BLOCK", "0", "STREAMS", "s", "$")
            wait_blocked(admin, 2)
            out.append(admin.call("XADD", "s", "2-0", "b", "2"))
            out.append(r1.read_reply())
            out.append(r2.read_reply())
            r1.send_command("XREADGROUP", "GROUP", "g", "c3", "NOACK", "BLOCK", "0", "STREAMS", "s", ">")
            wait_blocked(admin, 1)
            out.append(admin.call("XADD", "s", "3-0", "c", "3"))
            out.append(r1.read_reply())
            out.append(blocked_clients(admin))
            out.append(normalise_stream_reply(("XPENDING", "s", "g", "-", "+", "10"),
                                              admin.call("XPENDING", "s", "g", "-", "+", "10")))
            out.append(admin.call("XINFO", "GROUPS", "s"))
            return out

    same_scenario(gradus, redis_server, scenario)


@pytest.mark.parametrize("protocol", [2, 3])
def test_a_blocked_readers_key_deleted_or_group_destroyed(gradus, redis_server, protocol):
    """Redis 7.2 runs a blocked XREADGROUP again when its key is deleted or overwritten, or its
    group destroyed (#11012), so it answers what XREADGROUP answers then: `-NOGROUP No such key
    's' or consumer group 'g' in XREADGROUP with GROUP option` (key deleted, group destroyed) or
    WRONGTYPE (key overwritten by a string). (Redis 7.0 answered `-UNBLOCKED the stream key no
    longer exists` and `-NOGROUP the consumer group this client was blocked on no longer
    exists`: see to_7_2.) A blocked XREAD keeps waiting when its key is deleted or becomes a
    string (then times out: a null), and on a key re-created with an ID not past the one it
    resolved `$` to."""
    blocked = ("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">")

    def scenario(server):
        with connections(server, 2, protocol) as (admin, reader):
            out = []
            admin.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
            reader.send_command(*blocked)
            wait_blocked(admin, 1)
            out.append(admin.call("DEL", "s"))
            out.append(reader.read_reply())
            admin.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
            reader.send_command(*blocked)
            wait_blocked(admin, 1)
            out.append(admin.call("SET", "s", "string"))
            out.append(reader.read_reply())
            admin.call("DEL", "s")
            admin.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
            reader.send_command(*blocked)
            wait_blocked(admin, 1)
            out.append(admin.call("XGROUP", "DESTROY", "s", "g"))
            out.append(reader.read_reply())
            out.append(blocked_clients(admin))

            admin.call("DEL", "s")
            admin.call("XADD", "s", "5-0", "a", "1")
            reader.send_command("XREAD", "BLOCK", "500", "STREAMS", "s", "$")
            wait_blocked(admin, 1)
            out.append(admin.call("DEL", "s"))
            out.append(nothing_arrives(reader, 0.1))
            out.append(admin.call("XADD", "s", "3-0", "b", "2"))
            out.append(admin.call("SET", "s", "string"))
            out.append(blocked_clients(admin))
            out.append(reader.read_reply())
            admin.call("DEL", "s")
            admin.call("XADD", "s", "5-0", "a", "1")
            reader.send_command("XREAD", "BLOCK", "0", "STREAMS", "s", "$")
            wait_blocked(admin, 1)
            admin.call("DEL", "s")
            out.append(admin.call("XADD", "s", "6-0", "c", "3"))
            out.append(reader.read_reply())
            return out

    unblocked = {1: (blocked, "DEL"), 3: (blocked, "SET"), 5: (blocked, "XGROUP DESTROY")}
    out = same_scenario(gradus, redis_server, scenario, unblocked)
    nogroup = Err(b"NOGROUP No such key 's' or consumer group 'g' in XREADGROUP with GROUP option")
    assert (out[1], out[3], out[5]) == (nogroup, WRONGTYPE, nogroup), out


def test_a_blocked_readers_stream_flushed_or_swapped_away_is_answered_nogroup(gradus, redis_server):
    """A blocked XREADGROUP whose stream goes with a FLUSHALL or FLUSHDB, or moves to another
    database with SWAPDB, is run again and answered NOGROUP (Redis 7.2's `signalFlushedDb` and
    `scanDatabaseForDeletedKeys`; 7.0 answered `-UNBLOCKED the stream key no longer exists`: see
    to_7_2). It stayed blocked for good: the group it waited for no longer existed, and no
    write to that key could ever serve it. A blocked BLPOP on a flushed key keeps waiting, as
    in Redis, and is served by the next push. (Found by Redis' own stream-cgroups.tcl.)"""
    blocked = ("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">")

    def scenario(server):
        with connections(server, 2) as (admin, reader):
            out = []
            for flush in (("FLUSHALL",), ("FLUSHDB",), ("SWAPDB", "0", "1")):
                admin.call("FLUSHALL")
                admin.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
                reader.send_command(*blocked)
                wait_blocked(admin, 1)
                out.append(admin.call(*flush))
                out.append(reader.read_reply())
                out.append(blocked_clients(admin))
            admin.call("FLUSHALL")
            reader.send_command("BLPOP", "l", "0")
            wait_blocked(admin, 1)
            admin.call("FLUSHALL")
            out.append(nothing_arrives(reader, 0.1))
            out.append(admin.call("RPUSH", "l", "x"))
            out.append(reader.read_reply())
            return out

    unblocked = {1: (blocked, "FLUSHALL"), 4: (blocked, "FLUSHDB"), 7: (blocked, "SWAPDB")}
    out = same_scenario(gradus, redis_server, scenario, unblocked)
    nogroup = Err(b"NOGROUP No such key 's' or consumer group 'g' in XREADGROUP with GROUP option")
    assert (out[1], out[4], out[7]) == (nogroup, nogroup, nogroup), out


# --- random sequences -----------------------------------------------------------

STREAM_KEYS = ["s0", "s1", "s2"]
GROUPS = ["g0", "g1"]
CONSUMERS = ["c0", "c1", "c2"]
FIELD_PAIRS = [["f", "v"], ["f", "w"], ["a", "1"], ["f", "v", "n", "2"], ["n", "3", "f", "v"], ["", ""]]


# Entries' sequence numbers here never exceed 3: new_id gives 0..3, its too-small IDs 0..2, bulk 0.
ENTRY_SEQ_MAX = 3


def _parse_id(text: str) -> Optional[Tuple[int, int]]:
    """A stream ID argument as (ms, seq) (an incomplete `5` is 5-0), None if it is not one."""
    ms, _, seq = text.partition("-")
    if not ms.isdigit() or not (seq == "" or seq.isdigit()):
        return None
    return int(ms), int(seq or 0)


class StreamGenerator:
    """Seeded stream commands over a few keys: explicit IDs from a per-key counter (sometimes
    too small, to get Redis' error), trims both ways, group commands, all non-blocking.

    `observe(cmd, reply)` with redis-server's reply lets it pick groups that exist and IDs that
    were delivered (for XACK and XCLAIM) more often: the sequence is then a function of the seed
    and of Redis' replies, which Gradus must match anyway.

    It also steers clear of the Redis 7.2 changes that depend on state, so that a 7.0 reference
    answers as 7.2 would (after to_7_2):
    - 7.2 creates the consumer of XCLAIM, XAUTOCLAIM and XREADGROUP `>` even when they claim or
      deliver nothing; 7.0 only when they do (#11099). Unless the replies have shown that the
      consumer exists in that group, such a command comes after an XGROUP CREATECONSUMER of it
      (answered alike by both: 1 if it was missing, 0 if not).
    - 7.2 refuses an XSETID below the stream's max_deleted_entry_id, which 7.0 accepts (#11444):
      XSETID IDs are never below what XDEL or MAXDELETEDID may have set it to."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        keys = STREAM_KEYS + ["str"]
        self.top = {k: 0 for k in keys}  # the highest millisecond handed out per key
        self.ids = {k: [] for k in keys}  # IDs handed out (maybe refused or deleted since)
        self.groups = {k: [] for k in keys}  # groups created (as far as replies tell)
        self.delivered = {k: [] for k in keys}  # IDs XREADGROUP or XPENDING replies named
        # (key, group) -> consumers the replies show to exist (a subset of those that do)
        self.consumers: Dict[Tuple[str, str], set] = {}
        # key -> an upper bound of the stream's max_deleted_entry_id
        self.deleted_bound = {k: (0, 0) for k in keys}

    def observe(self, cmd: List[str], reply: Any) -> None:
        if isinstance(reply, Err):
            return
        name = cmd[0].upper()
        if name == "XGROUP" and cmd[1].upper() == "CREATE" and reply == Simple(b"OK"):
            self.groups[cmd[2]].append(cmd[3])
            self.consumers[(cmd[2], cmd[3])] = set()
        elif name == "XGROUP" and cmd[1].upper() == "DESTROY" and reply == 1:
            self.groups[cmd[2]].remove(cmd[3])
            self.consumers.pop((cmd[2], cmd[3]), None)
        elif name == "XGROUP" and cmd[1].upper() == "CREATECONSUMER":
            self.consumers.setdefault((cmd[2], cmd[3]), set()).add(cmd[4])
        elif name == "XGROUP" and cmd[1].upper() == "DELCONSUMER":
            self.consumers.get((cmd[2], cmd[3]), set()).discard(cmd[4])
        elif name in ("DEL", "SET") and cmd[1] in self.groups:
            self.groups[cmd[1]].clear()
            self.delivered[cmd[1]].clear()
            for pair in [pair for pair in self.consumers if pair[0] == cmd[1]]:
                del self.consumers[pair]
            self.deleted_bound[cmd[1]] = (0, 0)
        elif name == "XREADGROUP" and isinstance(reply, (list, Map)):
            group, consumer = cmd[2], cmd[3]
            for key, entries in (reply.items if isinstance(reply, Map) else reply):
                # 7.0 creates the consumer in each stream it answers for.
                self.consumers.setdefault((key.decode(), group), set()).add(consumer)
                for entry in entries:
                    self.delivered[key.decode()].append(entry[0].decode())
        elif name == "XPENDING" and len(cmd) > 3 and isinstance(reply, list):
            self.delivered[cmd[1]].extend(row[0].decode() for row in reply)
        elif name in ("XCLAIM", "XAUTOCLAIM") and isinstance(reply, list):
            claimed = reply if name == "XCLAIM" else reply[1]
            if claimed:
                self.consumers.setdefault((cmd[1], cmd[2]), set()).add(cmd[3])
        elif name == "XDEL" and isinstance(reply, int) and reply > 0:
            cap = (self.top[cmd[1]], ENTRY_SEQ_MAX)
            for arg in cmd[2:]:
                parsed = _parse_id(arg)
                if parsed is not None:
                    self.deleted_bound[cmd[1]] = max(self.deleted_bound[cmd[1]], min(parsed, cap))
        elif name == "XSETID" and "MAXDELETEDID" in cmd:
            parsed = _parse_id(cmd[cmd.index("MAXDELETEDID") + 1])
            self.deleted_bound[cmd[1]] = max(self.deleted_bound[cmd[1]], parsed)
        for ids in self.delivered.values():
            del ids[:-50]

    def consumer_ready(self, key: str, group: str, consumer: str) -> List[List[str]]:
        """[XGROUP CREATECONSUMER key group consumer] unless the consumer is known to exist."""
        if consumer in self.consumers.get((key, group), ()):
            return []
        return [["XGROUP", "CREATECONSUMER", key, group, consumer]]

    # -- arguments

    def key(self) -> str:
        return self.rng.choice(STREAM_KEYS) if self.rng.random() < 0.97 else "str"

    def fields(self) -> List[str]:
        return list(self.rng.choice(FIELD_PAIRS))

    def new_id(self, key: str) -> str:
        r = self.rng
        top = self.top.get(key, 0)
        if top and r.random() < 0.06:
            return r.choice([f"{r.randrange(0, top + 1)}-{r.randrange(3)}", str(top), "0-0"])
        ms = top + r.choice([1, 1, 1, 2, 3, 10])
        self.top[key] = ms
        form = r.randrange(4)
        if form == 0:
            seq = r.randrange(1, 4)
            self.ids[key].append(f"{ms}-{seq}")
            return f"{ms}-{seq}"
        self.ids[key].append(f"{ms}-0")
        return [f"{ms}-0", f"{ms}", f"{ms}-*"][form - 1]

    def known_id(self, key: str) -> str:
        r = self.rng
        ids = self.ids.get(key) or []
        roll = r.random()
        if ids and roll < 0.75:
            return r.choice(ids[-60:]) if r.random() < 0.7 else r.choice(ids)
        if roll < 0.9:
            return f"{r.randrange(0, self.top.get(key, 0) + 2)}-{r.randrange(2)}"
        return r.choice(["0", "0-0", f"{MAX}-{MAX}", "abc", "1-1"])

    def bound(self, key: str, start: bool) -> str:
        r = self.rng
        roll = r.random()
        if roll < 0.3:
            return "-" if start else "+"
        if roll < 0.45:
            return str(r.randrange(0, self.top.get(key, 0) + 2))
        if roll < 0.6:
            return "(" + self.known_id(key)
        if roll < 0.63:
            return r.choice(["+", "-", "(-", "x"])
        return self.known_id(key)

    def count(self) -> str:
        return self.rng.choice(["1", "2", "3", "5", "10", "50", "0", "-1"])

    def trim_spec(self, key: str) -> List[str]:
        r = self.rng
        if r.random() < 0.55:
            spec = ["MAXLEN"]
            threshold = r.choice(["0", "1", "5", "10", "30", "50", "99", "100", "101", "150", "200", "250"])
        else:
            spec = ["MINID"]
            threshold = self.known_id(key) if r.random() < 0.7 else str(r.randrange(self.top.get(key, 0) + 2))
        approx = r.random() < 0.5
        if approx:
            spec.append("~")
        elif r.random() < 0.5:
            spec.append("=")
        spec.append(threshold)
        if approx and r.random() < 0.3:
            spec += ["LIMIT", r.choice(["0", "1", "50", "100", "150", "1000"])]
        elif not approx and r.random() < 0.03:
            spec += ["LIMIT", "10"]  # refused without ~
        return spec

    def group(self, key: str) -> str:
        r = self.rng
        if self.groups[key] and r.random() < 0.8:
            return r.choice(self.groups[key])
        return r.choice(GROUPS) if r.random() < 0.95 else "nog"

    def delivered_id(self, key: str) -> str:
        if self.delivered[key] and self.rng.random() < 0.7:
            return self.rng.choice(self.delivered[key])
        return self.known_id(key)

    def consumer(self) -> str:
        return self.rng.choice(CONSUMERS)

    # -- commands

    def bulk(self) -> List[List[str]]:
        """Many consecutive entries at once on one key: streams of several nodes."""
        key = self.rng.choice(STREAM_KEYS)
        cmds = []
        for _ in range(self.rng.randrange(40, 170)):
            ms = self.top[key] + 1
            self.top[key] = ms
            self.ids[key].append(f"{ms}-0")
            cmds.append(["XADD", key, f"{ms}-0", "f", "v"])
        return cmds

    def command(self) -> List[str]:
        r = self.rng
        k = self.key()
        pick = r.randrange(40)
        if pick < 9:
            cmd = ["XADD", k]
            if r.random() < 0.1:
                cmd.append("NOMKSTREAM")
            if r.random() < 0.15:
                cmd += self.trim_spec(k)
            return cmd + [self.new_id(k)] + self.fields()
        if pick < 11:
            return ["XDEL", k] + [self.known_id(k) for _ in range(r.randrange(1, 4))]
        if pick < 13:
            return ["XTRIM", k] + self.trim_spec(k)
        if pick < 16:
            name = r.choice(["XRANGE", "XREVRANGE"])
            a, b = self.bound(k, True), self.bound(k, False)
            cmd = [name, k, a, b] if name == "XRANGE" else [name, k, b, a]
            if r.random() < 0.5:
                cmd += ["COUNT", self.count()]
            return cmd
        if pick == 16:
            return ["XLEN", k]
        if pick == 17 or (pick == 37 and r.random() < 0.7):
            start = r.choice(["$", "0", "0-0", self.known_id(k)])
            cmd = ["XGROUP", "CREATE", k, r.choice(GROUPS), start]
            if r.random() < 0.3:
                cmd.append("MKSTREAM")
            if r.random() < 0.2:
                cmd += ["ENTRIESREAD", r.choice(["0", "1", "5", "-1", "100"])]
            return cmd
        if pick == 18:
            cmd = ["XGROUP", "SETID", k, self.group(k), r.choice(["$", "0", self.known_id(k)])]
            if r.random() < 0.3:
                cmd += ["ENTRIESREAD", r.choice(["0", "3", "-1", "50"])]
            return cmd
        if pick == 19:
            if r.random() < 0.15:
                return ["XGROUP", "DESTROY", k, self.group(k)]
            return ["XGROUP", r.choice(["CREATECONSUMER", "DELCONSUMER"]), k, self.group(k), self.consumer()]
        if pick < 25:
            cmd = ["XREADGROUP", "GROUP", self.group(k), self.consumer()]
            if r.random() < 0.6:
                cmd += ["COUNT", self.count()]
            if r.random() < 0.1:
                cmd.append("NOACK")
            keys = [k] if r.random() < 0.8 else [k, self.key()]
            ids = [">" if r.random() < 0.7 else r.choice(["0", self.known_id(key)]) for key in keys]
            return cmd + ["STREAMS"] + keys + ids
        if pick < 27:
            return ["XACK", k, self.group(k)] + [self.delivered_id(k) for _ in range(r.randrange(1, 4))]
        if pick < 29:
            if r.random() < 0.4:
                return ["XPENDING", k, self.group(k)]
            cmd = ["XPENDING", k, self.group(k)]
            if r.random() < 0.2:
                cmd += ["IDLE", "0"]
            cmd += [self.bound(k, True), self.bound(k, False), r.choice(["1", "3", "10", "100"])]
            if r.random() < 0.3:
                cmd.append(self.consumer())
            return cmd
        if pick < 31:
            cmd = ["XCLAIM", k, self.group(k), self.consumer(), "0"]
            cmd += [self.delivered_id(k) for _ in range(r.randrange(1, 4))]
            if r.random() < 0.7:
                cmd.append("JUSTID")
            if r.random() < 0.15:
                cmd.append("FORCE")
            if r.random() < 0.1:
                cmd += ["RETRYCOUNT", r.choice(["0", "5"])]
            if r.random() < 0.05:
                cmd += ["LASTID", self.known_id(k)]
            return cmd
        if pick < 33:
            cmd = ["XAUTOCLAIM", k, self.group(k), self.consumer(), "0", r.choice(["0", "-", self.known_id(k)])]
            if r.random() < 0.6:
                cmd += ["COUNT", r.choice(["1", "2", "5", "100"])]
            if r.random() < 0.7:
                cmd.append("JUSTID")
            return cmd
        if pick < 35:
            roll = r.random()
            if roll < 0.5:
                return ["XINFO", "STREAM", k]
            if roll < 0.65:
                return ["XINFO", "STREAM", k, "FULL", "COUNT", r.choice(["3", "10"])]
            if roll < 0.85:
                return ["XINFO", "GROUPS", k]
            return ["XINFO", "CONSUMERS", k, self.group(k)]
        if pick == 35:
            keys = [k, self.key()] if r.random() < 0.5 else [k]
            cmd = ["XREAD"] + (["COUNT", self.count()] if r.random() < 0.5 else [])
            return cmd + ["STREAMS"] + keys + [r.choice(["0", "$", self.known_id(key)]) for key in keys]
        if pick == 36:
            if r.random() < 0.3:
                new = self.top[k] + r.randrange(0, 3)
                self.top[k] = new
                # Not below max_deleted_entry_id (see the class' docstring).
                ms, seq = max((new, r.randrange(5)), self.deleted_bound[k])
                cmd = ["XSETID", k, f"{ms}-{seq}"]
                if r.random() < 0.3:
                    cmd += ["ENTRIESADDED", str(r.randrange(0, 400)), "MAXDELETEDID", f"{r.randrange(new + 1)}-0"]
                return cmd
            return r.choice([["TYPE", k], ["EXISTS", k]])
        if pick == 37:
            return r.choice([["DEL", k], ["SET", "str", "v"], ["XLEN", k]])
        return ["XINFO", "STREAM", k]

    def prerequisites(self, cmd: List[str]) -> List[List[str]]:
        """The XGROUP CREATECONSUMER commands that must come before `cmd` (see the class'
        docstring): for XCLAIM and XAUTOCLAIM, and for XREADGROUP's streams read with `>`."""
        name = cmd[0]
        if name in ("XCLAIM", "XAUTOCLAIM"):
            return self.consumer_ready(cmd[1], cmd[2], cmd[3])
        if name == "XREADGROUP":
            streams = cmd[cmd.index("STREAMS") + 1:]
            half = len(streams) // 2
            # Redis stores `>` as the ID <max>-<max>, so that ID given explicitly reads as `>` too.
            keys = {key for key, id in zip(streams[:half], streams[half:]) if id in (">", f"{MAX}-{MAX}")}
            return [c for key in sorted(keys) for c in self.consumer_ready(key, cmd[2], cmd[3])]
        return []

    def step(self) -> List[List[str]]:
        if self.rng.random() < 0.03:
            return self.bulk()
        cmd = self.command()
        return self.prerequisites(cmd) + [cmd]


def _call_all(conn: RawConnection, cmds: List[List[str]]) -> List[Any]:
    conn.send(b"".join(encode_command(*cmd) for cmd in cmds))
    return conn.read_replies(len(cmds), timeout=20)


def _format_tail(history: list, limit: int = 12) -> str:
    lines = []
    for index, cmd, expected, actual in history[-limit:]:
        mark = "  " if expected == actual else "!!"
        lines.append(f"{mark} #{index} {' '.join(c if c and ' ' not in c else repr(c) for c in cmd)}")
        lines.append(f"       redis:  {expected!r}")
        if expected != actual:
            lines.append(f"       gradus: {actual!r}")
    return "\n".join(lines)


@pytest.mark.parametrize("seed", range(SEEDS))
def test_random_stream_commands_answer_like_redis(seed, gradus, redis_server):
    """A seeded sequence of stream commands (see StreamGenerator) on 3 stream keys and a string
    key, every reply compared after normalise_stream_reply (the reference's after to_7_2 when it
    predates 7.2); the first mismatch fails with the seed, its command index and both replies.
    Then each key's entries and XINFO STREAM FULL."""
    protocol = 2 if seed % 2 == 0 else 3
    older = reference_is_older(redis_server)
    gen = StreamGenerator(7000 + seed)
    ours = RawConnection(gradus.host, gradus.port, timeout=20)
    theirs = RawConnection(redis_server.host, redis_server.port, timeout=20)
    label = f"seed {seed} (GRADUS_STREAM_SEEDS), RESP{protocol}"
    history: list = []
    index = 0
    try:
        for conn in (ours, theirs):
            if protocol == 3:
                assert isinstance(conn.call("HELLO", "3"), Map)
            conn.call("FLUSHALL")
        final = [["XRANGE", key, "-", "+"] for key in STREAM_KEYS]
        final += [["XINFO", "STREAM", key, "FULL", "COUNT", "0"] for key in STREAM_KEYS]
        final += [["XINFO", "GROUPS", key] for key in STREAM_KEYS]
        for number in range(COMMANDS + 1):
            step = gen.step() if number < COMMANDS else final
            expected_all = _call_all(theirs, step)
            actual_all = _call_all(ours, step)
            for cmd, expected, actual in zip(step, expected_all, actual_all):
                index += 1
                gen.observe(cmd, expected)
                if older:
                    expected = to_7_2(cmd, expected)
                expected = normalise_stream_reply(cmd, expected)
                actual = normalise_stream_reply(cmd, actual)
                history.append((index, cmd, expected, actual))
                if expected != actual:
                    pytest.fail(
                        f"stream mismatch ({label}) at command #{index}: {cmd[:12]}\n"
                        f"  redis:  {expected!r}\n  gradus: {actual!r}\n"
                        f"history tail (!! marks the mismatch):\n{_format_tail(history)}",
                        pytrace=False,
                    )
    finally:
        ours.close()
        theirs.close()


def test_stream_generator_is_deterministic():
    a, b = StreamGenerator(5), StreamGenerator(5)
    assert [a.step() for _ in range(300)] == [b.step() for _ in range(300)]


def test_xreadgroup_with_the_last_possible_id_reads_new_entries_like_the_greater_than_sign(gradus, redis_server):
    """Regression: Redis keeps `>` as the ID 18446744073709551615-18446744073709551615, so that ID
    written out serves new entries as `>` does (Gradus read it as history: an empty reply and
    nothing pending; found by the random sequences at 40 seeds x 600)."""
    top = "18446744073709551615-18446744073709551615"
    same(gradus, redis_server, [
        ("XADD", "s", "1-0", "a", "1"),
        ("XADD", "s", "2-0", "b", "2"),
        ("XGROUP", "CREATE", "s", "g", "0"),
        ("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "s", top),
        ("XPENDING", "s", "g"),
        ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", top),
        ("XINFO", "GROUPS", "s"),
    ])
