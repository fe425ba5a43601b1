"""Durability: what survives a clean restart, a process crash (SIGKILL) and a damaged log.

Every test runs the real gradus binary with its own --dir and real redis-py clients. A crash
is `kill -9` of the server process: no shutdown code runs, but whatever the server handed to
the OS with write() survives (the OS keeps it), so these tests check the process-crash
guarantees of each degree (see README.md "Durability" and crates/server/gradus.toml, [durability]):

- strict:     an acknowledged write is never lost;
- background: an acknowledged write is lost only if it was acknowledged less than
              background-fsync-ms (+ slack for a loaded machine) before the crash;
- lazy:       writes older than lazy-flush-ms (+ slack) survive a process crash, and a later
              strict write (from any connection) hardens every earlier one (one ordered log);
- none:       memory only; a clean restart brings a `none` database back empty.

Data files in --dir: `wal-<lsn>.log` segments and `snap-<lsn>.snap` snapshots.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest
import redis

from resp import Err, RawConnection, Simple, encode_command
from servers import free_port, redis_client

pytestmark = pytest.mark.gradus_only

# Bounds that keep a loaded 2-core CI box from flaking the timing-based assertions.
BACKGROUND_FSYNC_MS = 10
SLACK_S = 0.5
JOIN_TIMEOUT = 20.0
MAX_OPS_PER_WORKER = 200_000


# --- helpers -----------------------------------------------------------------


def write_config(tmp_path: Path, body: str, name: str = "gradus.toml") -> str:
    path = tmp_path / name
    path.write_text(body)
    return str(path)


def client(server, **kwargs) -> redis.Redis:
    """A client with one connection, so per-connection state (SELECT, CLIENT DURABILITY) sticks.

    Careful: its pipelines still take another connection from the pool, so a WAITAOF sent
    on the client does not cover writes made through a pipeline.
    """
    kwargs.setdefault("single_connection_client", True)
    return redis_client(server, 2, **kwargs)


def persistence(r: redis.Redis) -> dict:
    return r.info("persistence")


def wal_files(dir: Path) -> List[Path]:
    return sorted(p for p in Path(dir).iterdir() if re.fullmatch(r"wal-\d+\.log", p.name))


def snap_files(dir: Path) -> List[Path]:
    return sorted(p for p in Path(dir).iterdir() if re.fullmatch(r"snap-\d+\.snap", p.name))


def records_end(segment: Path) -> int:
    """Where the records of a cleanly closed segment end. The file is zero-filled past them
    (crates/log/src/format.rs): walk the 16-byte record headers (len u32, crc u32, lsn u64)
    from the 24-byte file header until one is all zeros (a real record has an lsn >= 1)."""
    data = segment.read_bytes()
    offset = 24
    while offset + 16 <= len(data) and data[offset + 8 : offset + 16] != bytes(8):
        offset += 16 + int.from_bytes(data[offset : offset + 4], "little")
    assert offset <= len(data), (segment, offset, len(data))
    return offset


def data_bytes(dir: Path) -> int:
    total = 0
    for p in wal_files(dir) + snap_files(dir):
        try:
            total += p.stat().st_size
        except FileNotFoundError:  # removed by a snapshot since the listing
            pass
    return total


def keys_of(r: redis.Redis) -> List[bytes]:
    return sorted(r.scan_iter(count=1000))


def dump(server, dbs=(0,)) -> Dict[Tuple[int, bytes], tuple]:
    """Every key of `dbs`: (db, key) -> (type, value, has_ttl)."""
    out = {}
    for db in dbs:
        r = client(server, db=db)
        try:
            for key in keys_of(r):
                kind = r.type(key).decode()
                if kind == "string":
                    value = r.get(key)
                elif kind == "hash":
                    value = sorted(r.hgetall(key).items())
                elif kind == "zset":
                    value = r.zrange(key, 0, -1, withscores=True)
                elif kind == "list":
                    value = r.lrange(key, 0, -1)
                elif kind == "set":
                    value = sorted(r.smembers(key))
                else:
                    raise AssertionError(f"unexpected type {kind} of {key!r}")
                out[(db, key)] = (kind, value, r.pttl(key) > 0)
        finally:
            r.close()
    return out


def retry_busy(fn, attempts: int = 100):
    """Run a SAVE/BGSAVE, retrying while a snapshot triggered by the server is in progress."""
    for _ in range(attempts):
        try:
            return fn()
        except redis.ResponseError as exc:
            if "already in progress" not in str(exc):
                raise
            time.sleep(0.05)
    raise AssertionError("a snapshot stayed in progress for more than 5 s")


# --- the crash workload --------------------------------------------------------


CONNECTION_ERRORS = (redis.ConnectionError, ConnectionError, OSError)


class Worker(threading.Thread):
    """One client thread: SETs on 64 keys of its own, an INCR counter and MULTI/EXEC batches.

    It records everything it sent and every acknowledgement (with time.monotonic()), and stops
    at the first connection error (the server was killed) or when `stop` is set.
    """

    KEYS = 64

    def __init__(self, server, tid: int, stop: threading.Event):
        super().__init__(name=f"worker-{tid}", daemon=True)
        self.server = server
        self.tid = tid
        self.stop_event = stop
        self.sent: Dict[str, set] = defaultdict(set)  # key -> every seq sent to it
        self.acks: Dict[str, List[Tuple[int, float]]] = defaultdict(list)  # key -> (seq, t)
        self.incr_sent = 0
        self.incr_acks: List[Tuple[int, float]] = []  # (value returned, t)
        self.batch_sent: List[int] = []
        self.batch_acks: List[Tuple[int, float]] = []
        self.error: Optional[BaseException] = None
        self.error_time: Optional[float] = None
        self.ops = 0

    def counter(self) -> str:
        return f"c{self.tid}"

    def batch_keys(self) -> List[str]:
        return [f"b{self.tid}:{s}" for s in "xyz"]

    def run(self):
        r = redis_client(self.server, 2, socket_timeout=15)
        pad = "v" * 24
        seq = 0
        try:
            while not self.stop_event.is_set() and seq < MAX_OPS_PER_WORKER:
                seq += 1
                kind = seq % 8
                if kind == 3:
                    self.incr_sent += 1
                    value = r.incr(self.counter())
                    self.incr_acks.append((value, time.monotonic()))
                elif kind == 6:
                    self.batch_sent.append(seq)
                    pipe = r.pipeline(transaction=True)
                    for key in self.batch_keys():
                        pipe.set(key, str(seq))
                    replies = pipe.execute()
                    assert replies == [True, True, True], replies
                    self.batch_acks.append((seq, time.monotonic()))
                else:
                    key = f"k{self.tid}:{seq % self.KEYS}"
                    self.sent[key].add(seq)
                    assert r.set(key, f"{self.tid}:{seq}:{pad}") is True
                    self.acks[key].append((seq, time.monotonic()))
                self.ops += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
            self.error_time = time.monotonic()
        finally:
            try:
                r.close()
            except Exception:
                pass


def run_workload_and_kill(server, threads: int = 8, seed: Optional[int] = None, ready=None):
    """Start the workers, SIGKILL the server after 0.5-1.5 s, wait for the workers.

    `ready(info)`, if given, must also hold (polled on INFO persistence, up to 20 s) before the
    kill: e.g. that a snapshot was taken, whatever the machine's speed.

    Returns (workers, t_kill, max_fsync_s) where max_fsync_s is the slowest fsync the server
    reported shortly before the kill.
    """
    rng = random.Random(seed if seed is not None else time.time_ns())
    delay = rng.uniform(0.5, 1.5)
    stop = threading.Event()
    workers = [Worker(server, t, stop) for t in range(threads)]
    for w in workers:
        w.start()
    print(f"killing the server {delay:.3f}s into the workload")
    time.sleep(delay)
    probe = client(server, socket_timeout=10)
    if ready is not None:
        deadline = time.monotonic() + 20
        while not ready(persistence(probe)):
            assert time.monotonic() < deadline, f"not ready for the kill: {persistence(probe)}"
            time.sleep(0.05)
    max_fsync_s = persistence(probe).get("gradus_log_max_fsync_usec", 0) / 1e6
    probe.close()
    time.sleep(0.05)
    t_kill = time.monotonic()
    server.crash()
    stop.set()
    for w in workers:
        w.join(JOIN_TIMEOUT)
        assert not w.is_alive(), f"{w.name} still running {JOIN_TIMEOUT}s after the kill"
    for w in workers:
        # The only acceptable way for a worker to stop is losing its connection at the kill.
        if w.error is not None:
            assert isinstance(w.error, CONNECTION_ERRORS) and w.error_time >= t_kill, (
                f"{w.name} failed before the kill ({w.error_time - t_kill:+.3f}s): {w.error!r}"
            )
    assert sum(len(a) for w in workers for a in w.acks.values()) >= threads, "too few writes acknowledged"
    return workers, t_kill, max_fsync_s


def check_after_crash(
    server, workers: List[Worker], t_kill: float, window: Optional[float]
) -> Dict[str, int]:
    """Check the restarted server against what the workers recorded.

    An acknowledged write may be missing (and not superseded by a newer value) only if it was
    acknowledged less than `window` seconds before `t_kill` (time.monotonic()); window None
    forbids any loss. Whatever is present must be a value that was sent to that key, and each
    MULTI/EXEC batch is all or nothing. Returns counts of lost acknowledged writes.
    """
    r = client(server)
    problems: List[str] = []
    lost = {"set": 0, "incr": 0, "batch": 0}
    oldest_loss = [0.0]  # how long before the kill the oldest lost write was acknowledged
    lost_ok_after = float("inf") if window is None else t_kill - window

    def judge(what: str, kind: str, found: Optional[int], acks: List[Tuple[int, float]]):
        missing = [(v, t) for (v, t) in acks if found is None or v > found]
        if missing:
            lost[kind] += len(missing)
            first_t = min(t for _, t in missing)
            oldest_loss[0] = max(oldest_loss[0], t_kill - first_t)
            if first_t < lost_ok_after:
                problems.append(
                    f"{what}: found {found}, but {missing[0][0]} was acknowledged "
                    f"{lost_ok_after - first_t:.3f}s before the allowed loss window"
                )

    for w in workers:
        keys = sorted(w.sent)
        values = r.mget(keys) if keys else []
        for key, raw in zip(keys, values):
            found = None
            if raw is not None:
                tid, seq, _ = raw.decode().split(":")
                found = int(seq)
                if int(tid) != w.tid or found not in w.sent[key]:
                    problems.append(f"{key}: value {raw!r} was never sent to this key")
                    continue
            judge(key, "set", found, w.acks[key])

        raw = r.get(w.counter())
        found = int(raw) if raw is not None else 0
        if found > w.incr_sent:
            problems.append(f"{w.counter()}: {found} > {w.incr_sent} INCRs sent")
        judge(w.counter(), "incr", found, w.incr_acks)

        batch = r.mget(w.batch_keys())
        if len(set(batch)) != 1:
            problems.append(f"batch keys {w.batch_keys()} disagree (a partly applied MULTI/EXEC): {batch}")
        else:
            found = int(batch[0]) if batch[0] is not None else None
            if found is not None and found not in w.batch_sent:
                problems.append(f"batch value {found} was never sent")
            judge(f"batch {w.tid}", "batch", found, w.batch_acks)
    r.close()
    summary = (
        f"{sum(w.ops for w in workers)} ops acknowledged by {len(workers)} workers; lost: {lost}; "
        f"oldest lost ack {oldest_loss[0] * 1000:.1f} ms before the kill (allowed: "
        f"{'none' if window is None else f'{window * 1000:.0f} ms'})"
    )
    print(summary)
    assert not problems, summary + "\n" + "\n".join(problems[:30])
    return lost


# --- 1, 2: crash under concurrent load ---------------------------------------


@pytest.mark.parametrize("snapshots", [False, True], ids=["log-only", "with-snapshots"])
def test_strict_crash_loses_no_acknowledged_write(gradus_factory, tmp_path, snapshots):
    args = ["--durability", "strict"]
    if snapshots:
        # Snapshots (and log truncation) while the workload runs and when the crash hits.
        body = "[durability]\nsnapshot-log-bytes = 32768\nsegment-bytes = 8192\n"
        args += ["--config", write_config(tmp_path, body)]
    server = gradus_factory(*args)
    # With snapshots on, the kill waits for the first one (the size trigger is checked twice a
    # second, so on a slow machine the workload may not have reached it by the random delay).
    ready = (lambda info: info["gradus_snapshot_lsn"] > 0) if snapshots else None
    workers, t_kill, _ = run_workload_and_kill(server, ready=ready)
    server.start()
    check_after_crash(server, workers, t_kill, window=None)
    r = client(server)
    info = persistence(r)
    assert info["gradus_recovery_keys"] == r.dbsize()
    if snapshots:
        assert info["gradus_recovery_snapshot_items"] > 0, info
    else:
        assert info["gradus_recovery_records"] > 0, info
    r.close()


def test_background_crash_loses_only_the_last_moments(gradus_factory):
    server = gradus_factory()  # background is the default degree
    r = client(server)
    assert persistence(r)["gradus_durability_default"] == "background"
    r.close()
    workers, t_kill, max_fsync_s = run_workload_and_kill(server)
    server.start()
    # A background write goes to the OS (and is fsynced) within background-fsync-ms; a
    # write+fsync in progress delays the next one by up to one fsync. Generous slack on top.
    window = BACKGROUND_FSYNC_MS / 1000 + 2 * max_fsync_s + SLACK_S
    check_after_crash(server, workers, t_kill, window)


# --- 3: lazy -----------------------------------------------------------------


def test_lazy_clean_shutdown_keeps_everything(gradus_factory):
    server = gradus_factory("--durability", "lazy")
    r = client(server)
    pipe = r.pipeline(transaction=False)
    for i in range(500):
        pipe.set(f"lazy:{i}", f"value-{i}")
    assert all(pipe.execute())
    r.shutdown()  # no reply; redis-py swallows the expected ConnectionError
    r.close()
    assert server.wait(timeout=10) == 0, server.stderr_tail()
    server.stop()  # records the (clean) exit
    server.start()
    r = client(server)
    assert r.dbsize() == 500
    assert r.mget([f"lazy:{i}" for i in range(500)]) == [f"value-{i}".encode() for i in range(500)]
    # SIGTERM flushes too.
    r.set("after-restart", "x")
    r.close()
    server.restart()
    r = client(server)
    assert r.dbsize() == 501 and r.get("after-restart") == b"x"
    r.close()


def test_lazy_survives_process_crash_after_flush_interval(gradus_factory):
    server = gradus_factory("--durability", "lazy")
    r = client(server)
    info = persistence(r)
    lazy_flush_s = info["gradus_lazy_flush_ms"] / 1000
    pipe = r.pipeline(transaction=False)
    for i in range(300):
        pipe.set(f"old:{i}", i)
    pipe.execute()
    t_written = time.monotonic()
    last = persistence(r)["gradus_log_last_lsn"]
    # The writer hands a lazy record to the OS within lazy-flush-ms (slack for a loaded box).
    time.sleep(lazy_flush_s)
    while persistence(r)["gradus_log_written_lsn"] < last:
        assert time.monotonic() - t_written < lazy_flush_s + 2.0, persistence(r)
        time.sleep(0.02)
    for i in range(50):  # too young to be guaranteed; may or may not survive
        r.set(f"young:{i}", i)
    r.close()
    server.crash_restart()
    r = client(server)
    assert r.mget([f"old:{i}" for i in range(300)]) == [str(i).encode() for i in range(300)]
    young = r.mget([f"young:{i}" for i in range(50)])
    # The log is ordered: what survived of the young writes is a prefix of them.
    present = [v is not None for v in young]
    assert present == sorted(present, reverse=True), present
    r.close()


def test_strict_write_hardens_earlier_lazy_writes(gradus_factory, tmp_path):
    # A long lazy-flush-ms: without the strict write these could sit in memory for 60 s.
    config = write_config(tmp_path, "[durability]\ndefault = \"lazy\"\nlazy-flush-ms = 60000\n")
    server = gradus_factory("--config", config)
    lazy = client(server)
    strict = client(server)
    assert strict.execute_command("CLIENT", "DURABILITY", "strict") == b"OK"
    pipe = lazy.pipeline(transaction=False)
    for i in range(200):
        pipe.set(f"lazy:{i}", i)
    pipe.execute()
    assert strict.set("barrier", "1") is True  # acknowledged only after its fsync
    lazy.close()
    strict.close()
    server.crash_restart()
    r = client(server)
    assert r.get("barrier") == b"1"
    assert r.mget([f"lazy:{i}" for i in range(200)]) == [str(i).encode() for i in range(200)]
    r.close()


# --- 4: a `none` database ------------------------------------------------------


NONE_DB1 = '[durability]\ndefault = "background"\ndatabases = { "1" = "none" }\n'


def test_none_database_is_not_persisted(gradus_factory, tmp_path):
    server = gradus_factory("--config", write_config(tmp_path, NONE_DB1))
    r0, r1 = client(server, db=0), client(server, db=1)
    info = persistence(r0)
    assert info["gradus_durability_databases"]["db0"] == "background"
    assert info["gradus_durability_databases"]["db1"] == "none"
    for i in range(20):
        r0.set(f"kept:{i}", i)
        r1.set(f"cache:{i}", i)
    r0.hset("h0", mapping={"a": 1})
    r1.hset("h1", mapping={"a": 1})
    r0.close()
    r1.close()
    server.restart()
    r0, r1 = client(server, db=0), client(server, db=1)
    assert r0.dbsize() == 21
    assert r0.get("kept:7") == b"7" and r0.hgetall("h0") == {b"a": b"1"}
    assert r1.dbsize() == 0
    assert persistence(r0)["gradus_recovery_keys"] == 21

    # A logged degree cannot be had in a database that is never logged...
    c = client(server)
    with pytest.raises(redis.ResponseError):
        c.execute_command("CLIENT", "DURABILITY", "eventually")
    assert c.execute_command("CLIENT", "DURABILITY", "strict") == b"OK"
    c.execute_command("SELECT", 1)
    with pytest.raises(redis.ResponseError) as info:
        c.set("x", "y")
    assert "durability" in str(info.value).lower()
    assert c.exists("x") == 0  # refused, not applied
    # ... while the same connection's writes in a logged database succeed (at strict).
    c.execute_command("SELECT", 0)
    assert c.set("strict-in-db0", "y") is True
    # `none` asked for in a logged database is raised to `lazy`: still logged.
    assert c.execute_command("CLIENT", "DURABILITY", "none") == b"OK"
    assert c.set("none-in-db0", "z") is True
    c.execute_command("SELECT", 1)
    assert c.set("none-in-db1", "z") is True  # `none` in a `none` database: fine
    c.close()
    # A snapshot leaves `none` databases out, too.
    assert retry_busy(r0.save) is True
    r0.close()
    r1.close()
    server.crash_restart()
    r0, r1 = client(server, db=0), client(server, db=1)
    assert r0.get("strict-in-db0") == b"y"
    assert r0.get("none-in-db0") == b"z"
    assert r1.dbsize() == 0
    assert persistence(r0)["gradus_recovery_snapshot_items"] == r0.dbsize() == 23
    r0.close()
    r1.close()


def test_flushall_from_none_database_is_not_undone_by_restart(gradus_factory, tmp_path):
    server = gradus_factory("--config", write_config(tmp_path, NONE_DB1))
    r0, r1 = client(server, db=0), client(server, db=1)
    r0.set("k0", "v0")
    r1.set("k1", "v1")
    assert r1.flushall() is True
    assert r0.dbsize() == 0 and r1.dbsize() == 0
    r0.close()
    r1.close()
    server.restart()
    r0 = client(server, db=0)
    try:
        assert r0.keys("*") == [], "FLUSHALL was undone by the restart"
    finally:
        r0.close()


def test_database_switched_to_none_comes_back_empty(gradus_factory, tmp_path):
    server = gradus_factory()  # db1 logged (background) at first
    r1 = client(server, db=1)
    r1.set("k1", "old")
    assert r1.execute_command("WAITAOF", 1, 0, 0) == [1, 0]
    r1.close()
    server.stop()
    server.argv += ["--config", write_config(tmp_path, NONE_DB1)]  # now db1 = none
    server.start()
    r1 = client(server, db=1)
    try:
        r1.set("k1", "new")  # not logged: gone at the next restart, as a `none` key should be
        r1.close()
        server.restart()
        r1 = client(server, db=1)
        assert r1.get("k1") is None, "the stale logged value came back"
        assert r1.dbsize() == 0
    finally:
        r1.close()


def test_reset_restores_the_default_degree(gradus_factory):
    """RESET gives the next user of a pooled connection the database's degree again."""
    server = gradus_factory("--durability", "strict")
    r = client(server)
    assert r.execute_command("CLIENT", "DURABILITY", "lazy") == b"OK"
    r.set("lazy", "1")
    info = persistence(r)
    # A lazy write is not fsynced by itself (nothing else writes here).
    assert info["gradus_log_durable_lsn"] < info["gradus_log_last_lsn"] == 1, info
    assert r.execute_command("RESET") == "RESET"  # redis-py decodes this reply
    r.set("after-reset", "1")  # at the database's degree again: strict
    info = persistence(r)
    try:
        assert info["gradus_log_durable_lsn"] == info["gradus_log_last_lsn"] == 2, info
    finally:
        r.close()


# --- 5: snapshots and log truncation -------------------------------------------


def test_a_big_dataset_is_not_snapshotted_for_every_snapshot_log_bytes_of_writes(
    gradus_factory, tmp_path
):
    """Regression: the size trigger fired on `snapshot-log-bytes` of log alone, so a dataset
    several times that size was written out whole again and again (400 MB of 4 KiB values under
    SET: 5 snapshots of 400 MB in 400 000 requests, a third of the process' CPU). Like Redis'
    `auto-aof-rewrite-percentage`, the log must also have grown by `snapshot-log-percentage`
    (100 by default) of the last snapshot's size."""
    config = write_config(
        tmp_path, "[durability]\nsnapshot-log-bytes = 65536\nsegment-bytes = 16384\n"
    )
    server = gradus_factory("--config", config)
    r = client(server)
    # ~1 MiB of incompressible values, then a snapshot of them: the base of the percentage.
    pipe = r.pipeline(transaction=False)
    for i in range(1000):
        pipe.set(f"big:{i}", os.urandom(1024))
    pipe.execute()
    # The load alone is past snapshot-log-bytes with no snapshot before it, so it triggers an
    # automatic one: let that finish first, or one decided just before the SAVE below may run
    # after it and be counted against the percentage (seen once in CI: `assert 2 == 1`).
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        info = persistence(r)
        if info["rdb_saves"] >= 1 and info["rdb_bgsave_in_progress"] == 0:
            break
        time.sleep(0.05)
    r.save()
    time.sleep(0.6)  # a trigger check (every 500 ms) after the SAVE: nothing may be due now
    info = persistence(r)
    assert info["rdb_bgsave_in_progress"] == 0, info
    base_bytes, saves = info["gradus_snapshot_size_bytes"], info["rdb_saves"]
    assert base_bytes > 1000 * 1024, info

    def write_log(nbytes):
        start = persistence(r)["gradus_log_bytes_written"]
        i = 0
        while persistence(r)["gradus_log_bytes_written"] - start < nbytes:
            pipe = r.pipeline(transaction=False)
            for _ in range(50):
                pipe.set(f"big:{i % 1000}", os.urandom(1024))
                i += 1
            pipe.execute()

    # Half the snapshot's size in log: eight times snapshot-log-bytes, yet no snapshot.
    write_log(base_bytes // 2)
    time.sleep(1.2)  # over two checks of the snapshot trigger (every 500 ms)
    info = persistence(r)
    assert info["rdb_saves"] == saves, info
    # Past the snapshot's whole size: the next one follows within a few checks.
    write_log(base_bytes // 2 + 65536)
    deadline = time.monotonic() + 10
    while persistence(r)["rdb_saves"] == saves and time.monotonic() < deadline:
        time.sleep(0.1)
    assert persistence(r)["rdb_saves"] == saves + 1, persistence(r)
    r.close()


def test_snapshots_truncate_the_log_and_recover(gradus_factory, tmp_path):
    config = write_config(
        tmp_path,
        # The bytes alone trigger snapshots here (the percentage of the snapshot's size has
        # its own test below).
        "[durability]\nsnapshot-log-bytes = 65536\nsnapshot-log-percentage = 0\n"
        "segment-bytes = 16384\n",
    )
    server = gradus_factory("--config", config)
    r = client(server)
    start_snapshot = persistence(r)["gradus_snapshot_lsn"]
    snapshots = set()
    max_wal = max_bytes = 0
    value = "s" * 200
    deadline = time.monotonic() + 25
    rounds = 0
    while (len(snapshots) < 3 or rounds < 20) and time.monotonic() < deadline:
        rounds += 1
        pipe = r.pipeline(transaction=False)
        for i in range(200):
            pipe.set(f"snap:{(rounds * 200 + i) % 500}", f"{rounds}:{value}")
        pipe.execute()
        lsn = persistence(r)["gradus_snapshot_lsn"]
        if lsn > start_snapshot:
            snapshots.add(lsn)
        max_wal = max(max_wal, len(wal_files(server.dir)))
        max_bytes = max(max_bytes, data_bytes(server.dir))
        time.sleep(0.05)
    info = persistence(r)
    assert len(snapshots) >= 3, f"only {len(snapshots)} size-triggered snapshots in 25 s: {info}"
    written = info["gradus_log_bytes_written"]
    assert written > 10 * 65536
    # Segments covered by a snapshot are deleted while writes go on...
    segments_ever = written // 16384
    assert max_wal < segments_ever, (max_wal, segments_ever)
    assert max_bytes < written, (max_bytes, written)
    # ... and once they stop, the size trigger leaves less than snapshot-log-bytes of log
    # (in 16 KiB segments, plus the newest one) behind.
    time.sleep(1.2)  # over two checks of the snapshot trigger (every 500 ms)
    deadline = time.monotonic() + 10
    while persistence(r)["rdb_bgsave_in_progress"] and time.monotonic() < deadline:
        time.sleep(0.05)
    wal = wal_files(server.dir)
    assert len(wal) <= 65536 // 16384 + 2, [p.name for p in wal]
    assert len(snap_files(server.dir)) == 1, os.listdir(server.dir)

    # SAVE: a snapshot now; LASTSAVE moves to now; every segment but the newest goes.
    before = r.lastsave()
    assert retry_busy(r.save) is True
    after = r.lastsave()
    assert after >= before and abs(after.timestamp() - time.time()) < 5
    assert len(snap_files(server.dir)) == 1, os.listdir(server.dir)
    assert len(wal_files(server.dir)) <= 2, os.listdir(server.dir)
    lsn = persistence(r)["gradus_snapshot_lsn"]
    assert lsn == persistence(r)["gradus_log_last_lsn"]

    # BGSAVE answers at once and the snapshot follows.
    r.set("after-save", "1")
    assert retry_busy(r.bgsave) is True  # redis-py: "Background saving started" -> True
    deadline = time.monotonic() + 10
    while persistence(r)["gradus_snapshot_lsn"] <= lsn and time.monotonic() < deadline:
        time.sleep(0.05)
    assert persistence(r)["gradus_snapshot_lsn"] > lsn

    # Writes after the last snapshot come from the log on recovery.
    for i in range(30):
        r.set(f"tail:{i}", i)
    r.hset("tail-hash", mapping={"a": 1, "b": 2})
    assert r.execute_command("WAITAOF", 1, 0, 0) == [1, 0]
    expected = dump(server)
    r.close()
    server.crash_restart()
    r = client(server)
    assert dump(server) == expected
    info = persistence(r)
    assert info["gradus_recovery_keys"] == r.dbsize() == len(expected)
    assert info["gradus_recovery_snapshot_items"] > 0
    assert info["gradus_recovery_records"] > 0
    r.close()


def test_snapshot_interval(gradus_factory, tmp_path):
    config = write_config(tmp_path, "[durability]\nsnapshot-interval-s = 1\n")
    server = gradus_factory("--config", config)
    r = client(server)
    for i in range(10):
        r.set(f"k:{i}", i)
    deadline = time.monotonic() + 10
    while persistence(r)["gradus_snapshot_lsn"] < 10:
        assert time.monotonic() < deadline, persistence(r)
        time.sleep(0.1)
    # Nothing written since: no further snapshot.
    info = persistence(r)
    time.sleep(1.6)
    again = persistence(r)
    assert again["gradus_snapshot_lsn"] == info["gradus_snapshot_lsn"] == 10
    assert again["rdb_last_save_time"] == info["rdb_last_save_time"]
    r.close()
    server.crash_restart()
    r = client(server)
    assert persistence(r)["gradus_recovery_snapshot_items"] == 10
    assert r.dbsize() == 10
    r.close()


def test_crash_during_snapshot(gradus_factory):
    server = gradus_factory()
    r = redis_client(server, 2)
    pipe = r.pipeline(transaction=False)
    for i in range(20000):
        pipe.set(f"big:{i}", "x" * 50)
        if i % 2000 == 1999:
            if i == 19999:
                # On the pipeline's own connection, so that it covers these writes.
                pipe.execute_command("WAITAOF", 1, 0, 0)
            replies = pipe.execute()
    assert replies[-1] == [1, 0] and all(replies[:-1])
    r.close()
    with RawConnection(server.host, server.port) as conn:
        assert conn.call("BGSAVE") == Simple(b"Background saving started")
        time.sleep(0.005)
        server.crash()  # most likely in the middle of writing snap-*.snap.tmp
    server.start()
    assert not [p.name for p in Path(server.dir).iterdir() if p.name.endswith(".tmp")]
    r = client(server)
    assert r.dbsize() == 20000
    assert persistence(r)["gradus_recovery_keys"] == 20000
    assert r.get("big:19999") == b"x" * 50
    r.close()


def test_bgsave_reply_and_lastsave(gradus):
    r = client(gradus)
    r.set("k", "v")
    with RawConnection(gradus.host, gradus.port) as conn:
        assert retry_busy(lambda: conn.call("BGSAVE")) == Simple(b"Background saving started")
    deadline = time.monotonic() + 10
    while persistence(r)["gradus_snapshot_lsn"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    info = persistence(r)
    assert info["gradus_snapshot_lsn"] >= 1
    assert info["rdb_last_bgsave_status"] == "ok"
    assert abs(info["rdb_last_save_time"] - time.time()) < 5
    assert int(r.lastsave().timestamp()) == info["rdb_last_save_time"]
    # The longest hold of a shard's lock is part of the longest copy, which also counts the wait.
    hold, copy = info["gradus_last_snapshot_max_shard_hold_usec"], info["gradus_last_snapshot_max_shard_copy_usec"]
    assert 0 <= hold <= copy, info
    with pytest.raises(redis.ResponseError):
        r.execute_command("BGSAVE", "NOW")
    r.close()


def test_info_persistence_gives_the_snapshot_fields_monitoring_tools_read(gradus_factory, tmp_path):
    """The Redis fields that exporters and monitoring checks read, with their Redis meanings:
    changes since the last save (here: records a restart would replay), snapshots written,
    the last and the running snapshot's duration in seconds (-1 for none), the log's size."""
    server = gradus_factory("--config", write_config(tmp_path, "[durability]\nsnapshot-log-bytes = 0\n"))
    r = client(server)
    info = persistence(r)
    assert info["rdb_saves"] == 0
    assert info["rdb_last_bgsave_time_sec"] == -1 and info["aof_last_rewrite_time_sec"] == -1
    assert info["rdb_current_bgsave_time_sec"] == -1 and info["aof_current_rewrite_time_sec"] == -1
    before = info["rdb_changes_since_last_save"]
    for i in range(10):
        r.set(f"k{i}", "v")
    r.delete("k0")
    info = persistence(r)
    assert info["rdb_changes_since_last_save"] == before + 11
    assert info["aof_current_size"] == info["gradus_log_size_bytes"] > 0
    assert r.save()
    info = persistence(r)
    assert info["rdb_changes_since_last_save"] == 0
    assert info["rdb_saves"] == 1
    assert info["rdb_last_bgsave_time_sec"] == info["aof_last_rewrite_time_sec"] == 0
    assert info["rdb_current_bgsave_time_sec"] == -1
    r.set("after", "v")
    assert persistence(r)["rdb_changes_since_last_save"] == 1
    r.close()


def test_a_snapshot_asked_for_while_one_runs_is_scheduled_after_it(gradus_factory, tmp_path):
    """As in Redis: `BGSAVE SCHEDULE` (and `BGREWRITEAOF`) while a snapshot runs answer
    "scheduled" and a snapshot follows the running one; a plain `BGSAVE` is refused."""
    server = gradus_factory("--config", write_config(tmp_path, "[durability]\nsnapshot-log-bytes = 0\n"))
    r = client(server)
    pipe = r.pipeline(transaction=False)
    for i in range(150_000):
        pipe.set(f"k:{i}", os.urandom(1000))  # random: a snapshot of ~150 MB takes a while
        if i % 10_000 == 9_999:
            pipe.execute()
    pipe.execute()
    with RawConnection(server.host, server.port) as conn:
        assert conn.call("BGSAVE") == Simple(b"Background saving started")
        deadline = time.monotonic() + 10
        while not persistence(r)["rdb_bgsave_in_progress"]:
            assert time.monotonic() < deadline, "the snapshot never started"
            time.sleep(0.001)
        assert conn.call("BGSAVE", "SCHEDULE") == Simple(b"Background saving scheduled")
        assert conn.call("BGREWRITEAOF") == Simple(b"Background append only file rewriting scheduled")
        refused = conn.call("BGSAVE")
        assert isinstance(refused, Err) and b"already in progress" in refused.message, refused
    # Written after the running snapshot was armed: only the scheduled one can hold it.
    r.set("after", "x")
    last = persistence(r)["gradus_log_last_lsn"]
    deadline = time.monotonic() + 60
    while persistence(r)["gradus_snapshot_lsn"] < last:
        assert time.monotonic() < deadline, persistence(r)
        time.sleep(0.05)
    r.close()


def test_bgsave_is_in_progress_as_soon_as_it_answers(gradus_factory, tmp_path):
    """Regression: BGSAVE only asked the snapshot task for a snapshot, so until the task woke up
    INFO said `rdb_bgsave_in_progress:0` and a second BGSAVE was "started" too. A client that
    waits for the flag to drop after BGSAVE (as Redis' own tests do) then read the server mid-save:
    `test_reading_every_key_once_does_not_grow_the_store` saw the snapshot's buffers in flight.
    Redis forks before it answers: the flag is 1 at once and the second BGSAVE is refused."""
    server = gradus_factory("--config", write_config(tmp_path, "[durability]\nsnapshot-log-bytes = 0\n"))
    r = client(server)
    pipe = r.pipeline(transaction=False)
    for i in range(20_000):
        pipe.set(f"k:{i}", "v" * 100)
    pipe.execute()
    saves = persistence(r)["rdb_saves"]
    with RawConnection(server.host, server.port) as conn:
        # One write: the server reads all three before its snapshot task can have started.
        conn.send(encode_command("BGSAVE") + encode_command("BGSAVE") + encode_command("INFO", "persistence"))
        started, second, info = conn.read_replies(3)
    assert started == Simple(b"Background saving started")
    assert isinstance(second, Err) and second.message == b"ERR Background save already in progress", second
    fields = dict(line.split(":", 1) for line in info.decode().splitlines() if ":" in line)
    assert fields["rdb_bgsave_in_progress"] == "1" or int(fields["rdb_saves"]) > saves, fields
    deadline = time.monotonic() + 30
    while persistence(r)["rdb_bgsave_in_progress"]:
        assert time.monotonic() < deadline, "the snapshot did not finish"
        time.sleep(0.01)
    after = persistence(r)
    assert after["rdb_saves"] == saves + 1 and after["rdb_last_bgsave_status"] == "ok", after
    r.close()


def test_bgrewriteaof_takes_a_snapshot_that_retires_the_log(gradus_factory, tmp_path):
    """Redis' BGREWRITEAOF compacts the append-only file; here a snapshot does that job: the
    log segments it covers are removed once it is durable, and a restart loads it."""
    body = "[durability]\nsnapshot-log-bytes = 0\nsegment-bytes = 4194304\n"
    server = gradus_factory("--config", write_config(tmp_path, body))
    r = client(server)
    pipe = r.pipeline(transaction=False)
    for i in range(40_000):
        pipe.set(f"k:{i}", b"x" * 1000)
    pipe.execute()
    segments_before = len(wal_files(server.dir))
    assert segments_before >= 3, segments_before
    with RawConnection(server.host, server.port) as conn:
        assert retry_busy(lambda: conn.call("BGREWRITEAOF")) == Simple(
            b"Background append only file rewriting started"
        )
    deadline = time.monotonic() + 20
    while persistence(r)["aof_rewrite_in_progress"] or persistence(r)["gradus_snapshot_lsn"] < 40_000:
        assert time.monotonic() < deadline, persistence(r)
        time.sleep(0.05)
    info = persistence(r)
    assert info["aof_last_bgrewrite_status"] == "ok" and info["rdb_bgsave_in_progress"] == 0, info
    assert len(wal_files(server.dir)) < segments_before
    assert len(snap_files(server.dir)) == 1
    r.close()
    server.crash_restart()
    r = client(server)
    assert persistence(r)["gradus_recovery_snapshot_items"] == 40_000
    assert r.dbsize() == 40_000 and r.get("k:39999") == b"x" * 1000
    r.close()


# --- 6: expiry ----------------------------------------------------------------


def test_expiry_survives_restart(gradus):
    r = client(gradus)
    assert r.set("short", "s", px=300)
    assert r.set("long", "l", ex=100)
    r.set("expire-later", "e")
    assert r.expire("expire-later", 100)
    r.set("persisted", "p", ex=100)
    assert r.persist("persisted")
    r.set("pexpireat", "x")
    assert r.pexpireat("pexpireat", int(time.time() * 1000) + 200_000)
    # Expired then rewritten: the replay must see it expired at the original time, too.
    r.set("reborn", "5", px=100)
    time.sleep(0.25)
    assert r.incr("reborn") == 1
    r.set("getex", "g")
    assert r.getex("getex", ex=50) == b"g"
    t_short = time.monotonic()
    r.close()
    gradus.stop()  # "short" is still alive in the log: it must expire while we are down
    time.sleep(max(0.0, 0.6 - (time.monotonic() - t_short)))
    gradus.start()
    r = client(gradus)
    assert r.get("short") is None
    assert r.get("long") == b"l" and 90 <= r.ttl("long") <= 100
    assert r.get("expire-later") == b"e" and 0 < r.ttl("expire-later") <= 100
    assert r.get("persisted") == b"p" and r.ttl("persisted") == -1
    assert 190 <= r.ttl("pexpireat") <= 200
    assert r.get("reborn") == b"1" and r.ttl("reborn") == -1
    assert 0 < r.ttl("getex") <= 50
    assert r.dbsize() == 6, keys_of(r)
    assert persistence(r)["gradus_recovery_keys"] == 6
    r.close()


# --- 7: every logged command replays to the same state ---------------------------


def _rich_workload(server):
    r = client(server)
    r3 = client(server, db=3)
    r2 = client(server, db=2)
    # Some keys that a FLUSHALL will wipe.
    r.set("gone", "1")
    r3.set("gone3", "1")
    r.hset("gone-hash", mapping={"a": 1})
    assert r.flushall() is True
    # Strings, counters, floats.
    r.set("s", "hello")
    r.append("s", " world")
    r.setrange("s", 0, "J")
    r.set("n", 10)
    r.incrby("n", 5)
    r.decr("n")
    r.set("f", "1")
    for delta in ("0.1", "0.1", "0.1", "-2.5e-1", "3.0e3"):
        r.incrbyfloat("f", delta)
    r.incrbyfloat("f-new", "10.5")
    r.mset({"m1": "a", "m2": "b", "m3": "c"})
    r.msetnx({"m3": "x", "m4": "y"})  # no-op: m3 exists
    r.getset("m1", "a2")
    r.getdel("m2")
    r.setnx("m1", "nope")
    r.set("del-me", 1)
    r.delete("del-me")
    r.set("unlink-me", 1)
    r.unlink("unlink-me")
    # Hashes.
    r.hset("h", mapping={"f1": "v1", "f2": "v2", "f3": 3, "fl": "1.5"})
    r.hdel("h", "f2")
    r.hincrby("h", "f3", 4)
    r.hincrbyfloat("h", "fl", "0.25")
    r.hsetnx("h", "f1", "nope")
    r.hsetnx("h", "f9", "new")
    r.hset("h-empty", "only", 1)
    r.hdel("h-empty", "only")  # the key disappears
    # Sorted sets.
    r.zadd("z", {"a": 1, "b": 2, "c": 3, "d": 1.5e-3, "e": "-inf", "f": "+inf"})
    r.zincrby("z", 2.5, "a")
    r.zrem("z", "b")
    r.zadd("z", {"c": 10}, xx=True)
    r.zadd("z", {"c": 5}, gt=True)  # not greater: no change
    r.zadd("z2", {f"m{i}": i for i in range(10)})
    r.zpopmin("z2", 2)
    r.zpopmax("z2")
    r.zremrangebyscore("z2", 4, 5)
    r.zremrangebyrank("z2", 0, 0)
    r.zrangestore("z3", "z", 0, 2)
    r.zadd("zlex", {x: 0 for x in "abcdef"})
    r.zremrangebylex("zlex", "[b", "(d")
    # Renames (with and without TTL), RENAMENX.
    r.set("a", "va")
    r.rename("a", "a2")
    r.rename("h", "h-renamed")
    r.set("ttl-src", "t", ex=1000)
    r.rename("ttl-src", "ttl-dst")
    r.set("rnx", "1")
    r.set("rnx-taken", "2")
    r.renamenx("rnx", "rnx-taken")  # no-op
    r.renamenx("rnx", "rnx-free")
    r.rename("z3", "z3-renamed")
    # TTLs.
    r.set("e1", "x")
    r.expire("e1", 500)
    r.set("e2", "x", ex=500)
    r.persist("e2")
    r.hset("h-ttl", "a", 1)
    r.pexpire("h-ttl", 900_000)
    # A transaction.
    pipe = r.pipeline(transaction=True)
    pipe.set("tx1", "1").incr("tx-n").hset("tx-h", "k", "v").zadd("tx-z", {"m": 1})
    pipe.execute()
    # FLUSHDB of another database, then new writes there.
    for i in range(10):
        r2.set(f"db2:{i}", i)
    assert r2.flushdb() is True
    r2.set("db2:after-flush", "yes")
    r3.set("db3:after-flushall", "yes")
    r3.zadd("db3:z", {"x": 1})
    for c in (r, r2, r3):
        c.close()


def test_types_and_flushes_replay_after_strict_crash(gradus_factory):
    server = gradus_factory("--durability", "strict")
    _rich_workload(server)
    dbs = (0, 2, 3)
    expected = dump(server, dbs)
    assert (0, b"gone") not in expected and (0, b"h-renamed") in expected
    assert expected[(0, b"f")][1] == b"3001.05000000000000004" and expected[(2, b"db2:after-flush")]
    server.crash_restart()  # every write above was acknowledged at strict
    assert dump(server, dbs) == expected
    r = client(server)
    assert persistence(r)["gradus_recovery_keys"] == len(expected)
    # The same state again from a snapshot (plus an empty log tail).
    assert retry_busy(r.save) is True
    r.close()
    server.crash_restart()
    assert dump(server, dbs) == expected
    r = client(server)
    assert persistence(r)["gradus_recovery_snapshot_items"] == len(expected)
    r.close()


# --- 8: damaged logs ------------------------------------------------------------


def test_torn_tail_is_truncated(gradus_factory):
    server = gradus_factory("--durability", "strict")
    r = client(server)
    for i in range(100):
        r.set(f"t:{i}", i)
    r.close()
    server.stop()
    last = wal_files(server.dir)[-1]
    size = records_end(last)
    assert last.stat().st_size > size  # zero-filled past the records
    garbage = bytes(range(1, 40))
    with open(last, "r+b") as f:  # over the zero fill, right after the records
        f.seek(size)
        f.write(garbage)
    server.start()
    r = client(server)
    info = persistence(r)
    assert info["gradus_recovery_torn_tail_bytes"] == len(garbage), info
    assert last.stat().st_size == size  # truncated back to the last whole record
    assert r.mget([f"t:{i}" for i in range(100)]) == [str(i).encode() for i in range(100)]
    r.set("after", "1")
    r.close()
    server.restart()
    r = client(server)
    assert persistence(r)["gradus_recovery_torn_tail_bytes"] == 0
    assert r.dbsize() == 101
    r.close()


def test_half_written_last_record_is_dropped(gradus_factory):
    server = gradus_factory("--durability", "strict")
    r = client(server)
    for i in range(50):
        r.set(f"t:{i}", i)
    r.close()
    server.stop()
    last = wal_files(server.dir)[-1]
    size = records_end(last)
    os.truncate(last, size - 5)  # a crash in the middle of writing the last record
    server.start()
    r = client(server)
    assert persistence(r)["gradus_recovery_torn_tail_bytes"] > 0
    assert r.mget([f"t:{i}" for i in range(49)]) == [str(i).encode() for i in range(49)]
    assert r.get("t:49") is None
    r.close()


CORRUPT_CONFIG = "[durability]\ndefault = \"strict\"\nsegment-bytes = 4096\n"


def _corrupt_early_segment(server) -> Tuple[Path, Dict[str, int]]:
    r = client(server)
    pipe = r.pipeline(transaction=False)
    for i in range(300):
        pipe.set(f"c:{i:03d}", "x" * 100)
    pipe.execute()
    r.close()
    server.stop()
    segments = wal_files(server.dir)
    assert len(segments) >= 4, [p.name for p in segments]
    victim = segments[1]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    return victim, {p.name: p.stat().st_size for p in wal_files(server.dir)}


def test_corruption_in_the_middle_refuses_to_start(gradus_factory, tmp_path):
    server = gradus_factory("--config", write_config(tmp_path, CORRUPT_CONFIG))
    victim, files = _corrupt_early_segment(server)
    for _ in range(2):  # refusing twice: the first refusal must not have "fixed" anything
        code, stderr = server.run_to_exit(timeout=15)
        assert code is not None, "gradus started on a log corrupt in the middle"
        assert code != 0
        assert re.search(r"corrupt", stderr, re.I), stderr
        assert "--repair" in stderr, stderr
        assert victim.name in stderr, stderr
        assert {p.name: p.stat().st_size for p in wal_files(server.dir)} == files


def test_repair_keeps_the_valid_prefix(gradus_factory, tmp_path):
    server = gradus_factory("--config", write_config(tmp_path, CORRUPT_CONFIG))
    _corrupt_early_segment(server)
    server.start(["--repair"])
    r = client(server)
    info = persistence(r)
    assert info["gradus_recovery_repaired"] not in ("no", "", None), info
    n = r.dbsize()
    assert 0 < n < 300, n  # the prefix before the damage, nothing after it
    # Exactly a prefix: c:000 .. c:<n-1> (written in that order, one record each).
    assert r.mget([f"c:{i:03d}" for i in range(n)]) == [b"x" * 100] * n
    assert r.exists(*[f"c:{i:03d}" for i in range(n, 300)]) == 0
    assert any(p.name.endswith(".corrupt") for p in Path(server.dir).iterdir())
    assert r.set("after-repair", "1") is True
    r.close()
    server.crash_restart()  # the repaired directory starts without --repair (strict: kept)
    r = client(server)
    assert persistence(r)["gradus_recovery_repaired"] == "no"
    assert r.dbsize() == n + 1 and r.get("after-repair") == b"1"
    r.close()


def test_a_snapshot_damaged_at_its_end_is_dropped_after_part_of_it_was_loaded(gradus_factory, tmp_path):
    """A snapshot is loaded while it is read, 64 MiB of keys at a time, and its checksum is known
    only at its end. When that fails, the keys already loaded from it must go before the older
    snapshot and the log after it are used: replaying INCRs over counters loaded from the newer
    snapshot would count them twice."""
    server = gradus_factory()
    r = client(server)
    # The newer snapshot spans two batches: values that do not compress.
    big = [random.Random(i).randbytes(1 << 20) for i in range(80)]
    for i, value in enumerate(big):
        r.set(f"big:{i}", value)
    retry_busy(r.save)  # the older snapshot
    counters = [f"n:{i}" for i in range(1000)]
    for _ in range(3):
        pipe = r.pipeline(transaction=False)
        for key in counters:
            pipe.incr(key)
        pipe.execute()
    assert r.execute_command("WAITAOF", 1, 0, 0)[0] == 1
    # What the older snapshot needs: itself and the segments after it (the newer snapshot
    # removes both). No write goes on meanwhile.
    older = {p.name: p.read_bytes() for p in snap_files(server.dir) + wal_files(server.dir)}
    retry_busy(r.save)  # the newer snapshot: the big values and the counters at 3
    r.close()
    server.stop()
    newest = snap_files(server.dir)[-1]
    assert newest.name not in older and newest.stat().st_size > 70 << 20
    for name, data in older.items():
        if not (server.dir / name).exists():
            (server.dir / name).write_bytes(data)
    damaged = bytearray(newest.read_bytes())
    damaged[-1000] ^= 0xFF  # inside the last value: every item still parses
    newest.write_bytes(bytes(damaged))
    log_start = server.stderr_path.stat().st_size
    server.start()
    r = client(server)
    info = persistence(r)
    assert info["gradus_recovery_snapshot_items"] == len(big), info  # the older snapshot's
    assert r.mget(counters) == [b"3"] * len(counters)
    assert r.dbsize() == len(big) + len(counters)
    assert [r.strlen(f"big:{i}") for i in range(len(big))] == [1 << 20] * len(big)
    assert r.get("big:79") == big[79]
    r.close()
    log = re.sub(r"\x1b\[[0-9;]*m", "", server.stderr_path.read_text(errors="replace")[log_start:])
    assert "damaged snapshot; falling back" in log, log
    dropped = re.search(r"dropping the keys loaded from a snapshot.*keys=(\d+)", log)
    assert dropped and int(dropped.group(1)) > 0, log


@pytest.mark.parametrize("compression", [True, False])
def test_values_larger_than_a_snapshot_item_are_saved_in_parts(gradus_factory, tmp_path, compression):
    """The log limits a record, snapshot items included (to 64 MiB when this was written), and
    a string may grow past that (with a larger proto-max-bulk-len), as may a hash or sorted set.
    A value over 8 MiB is written as several items that the loader adds up: a 70 MiB string
    (which used to fail every snapshot), a 21 MiB hash and a 9 MiB sorted set come back whole,
    with their TTL. The same with snapshot compression on (the default), where these values,
    which compress well, make a snapshot of well under half the size, in compressed parts."""
    body = "proto-max-bulk-len = 104857600\n[durability]\nsnapshot-compression = %s\n" % (
        "true" if compression else "false"
    )
    server = gradus_factory("--config", write_config(tmp_path, body))
    r = client(server)
    piece = b"".join(b"line %06d of a long text;" % i for i in range(40_000))[: 1 << 20]  # 1 MiB
    pipe = r.pipeline(transaction=False)
    for _ in range(70):
        pipe.append("s", piece)
    pipe.execute()
    value = b"v" * 200
    fields = [b"f%d" % i for i in range(100_000)]
    members = [b"member:%08d" % i for i in range(350_000)]
    for start in range(0, len(fields), 10_000):
        r.hset("h", mapping={f: value for f in fields[start:start + 10_000]})
    for start in range(0, len(members), 10_000):
        r.zadd("z", {m: i / 7 for i, m in enumerate(members[start:start + 10_000], start)})
    r.expire("h", 3600)
    assert retry_busy(r.save) is True
    assert persistence(r)["gradus_snapshot_compression"] == ("yes" if compression else "no")
    r.close()
    server.stop()
    size = snap_files(server.dir)[-1].stat().st_size
    if compression:
        assert size < 40 << 20, size
    else:
        assert size > 95 << 20, size
    server.start()
    r = client(server)
    info = persistence(r)
    assert info["gradus_recovery_snapshot_items"] >= 9 + 2 + 1, info  # parts of s, h and z
    assert r.strlen("s") == 70 << 20 and r.get("s") == piece * 70
    assert r.hlen("h") == len(fields) and r.hget("h", "f99999") == value
    assert 3500 < r.ttl("h") <= 3600
    assert r.zcard("z") == len(members) and float(r.zscore("z", members[-1])) == 349_999 / 7
    assert r.zrange("z", 0, 2) == members[:3]
    r.close()


def test_a_transaction_of_70_mib_is_logged_and_replayed(gradus_factory, tmp_path):
    """One MULTI/EXEC is one log record. Seventy SETs of 1 MiB make a 70 MiB record, which the
    log once refused (its limit was 64 MiB) after the transaction had been applied in memory:
    the client got an error for writes that were visible and then lost at the next restart.
    (No automatic snapshot: the restart replays the record.)"""
    config = write_config(tmp_path, "[durability]\nsnapshot-log-bytes = 0\n")
    server = gradus_factory("--config", config)
    r = client(server)
    values = [bytes([i]) * (1 << 20) for i in range(70)]
    # On the client's own connection (not a pipeline's), so WAITAOF covers the transaction.
    r.execute_command("MULTI")
    for i, value in enumerate(values):
        r.execute_command("SET", f"t:{i}", value)  # QUEUED (redis-py reads it as a failed SET)
    assert r.execute_command("EXEC") == [b"OK"] * len(values)
    assert r.execute_command("WAITAOF", 1, 0, 0)[0] == 1
    r.close()
    server.crash_restart()
    r = client(server)
    info = persistence(r)
    assert info["gradus_recovery_records"] == 1, info
    assert r.mget([f"t:{i}" for i in range(len(values))]) == values
    r.close()


def test_a_script_stops_before_its_log_record_outgrows_the_limit(gradus_factory, tmp_path):
    """A script's writes are logged as one record once it has run. Past the log's 512 MiB
    record limit the log would refuse that record after the writes were applied: visible, then
    lost at the next restart. The write that would take the record over is refused instead (the
    script's earlier writes stand, as after any error in a script), and the restart brings back
    exactly what the script was told it wrote. A MULTI/EXEC around the script shares the record.
    (No automatic snapshot: the restart replays the log.)"""
    body = "proto-max-bulk-len = 16777216\n[durability]\nsnapshot-log-bytes = 0\n"
    server = gradus_factory("--config", write_config(tmp_path, body))
    r = client(server)
    value = b"x" * (16 << 20)
    script = """
        local n = 0
        for i = 1, 40 do
            local reply = redis.pcall('SET', KEYS[1] .. i, ARGV[1])
            if type(reply) == 'table' and reply.err then return {n, reply.err} end
            n = n + 1
        end
        return {n, ''}
    """
    written, error = r.eval(script, 1, "big:", value)
    # 31 SETs of 16 MiB (and their headers) fit in 512 MiB; the 32nd does not.
    assert written == 31, (written, error)
    assert b"over the 536870912-byte limit" in error, error
    assert r.exists(*[f"big:{i}" for i in range(1, 32)]) == 31
    assert r.exists("big:32") == 0
    # Inside a transaction the queued commands' room is shared with the script's writes.
    r.execute_command("MULTI")
    r.execute_command("SET", "before", value)
    r.execute_command("EVAL", script, 1, "tx:", value)
    replies = r.execute_command("EXEC")
    assert replies[0] == b"OK"
    tx_written, tx_error = replies[1]
    assert 0 < tx_written < 31 and b"over the" in tx_error, (tx_written, tx_error)
    assert r.execute_command("WAITAOF", 1, 0, 0)[0] == 1
    r.close()
    server.crash_restart()
    r = client(server)
    info = persistence(r)
    assert info["gradus_recovery_records"] == 2, info
    assert r.exists(*[f"big:{i}" for i in range(1, 32)]) == 31 and r.exists("big:32") == 0
    assert r.strlen("big:31") == len(value)
    assert r.strlen("before") == len(value)
    assert r.exists(*[f"tx:{i}" for i in range(1, tx_written + 1)]) == tx_written
    assert r.exists(f"tx:{tx_written + 1}") == 0
    r.close()


def _mount_small_ext4(image: Path, mountpoint: Path, mib: int) -> None:
    """Mount a fresh ext4 file system of `mib` MiB (a loop device over `image`) at
    `mountpoint`; skip the test where that is not allowed (not root, no loop devices)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    with open(image, "wb") as f:
        f.truncate(mib << 20)
    made = subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"mkfs.ext4 failed: {made.stderr.decode(errors='replace')}")
    mounted = subprocess.run(["mount", "-o", "loop", str(image), str(mountpoint)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a loop device here: {mounted.stderr.decode(errors='replace')}")


@contextlib.contextmanager
def _gradus_on_a_small_disk(gradus_factory, tmp_path: Path, body: str, mib: int = 64):
    """A gradus server (config `body`) whose data directory is a fresh ext4 file system of its
    own, `mib` MiB large; stopped and unmounted afterwards."""
    server = gradus_factory("--config", write_config(tmp_path, body))
    server.stop()
    for leftover in server.dir.iterdir():
        leftover.unlink()
    _mount_small_ext4(tmp_path / "disk.img", server.dir, mib)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        subprocess.run(["umount", str(server.dir)], capture_output=True)


def _fill_disk(dir: Path) -> Path:
    """Write a file in `dir` until its file system has no room left; returns the file."""
    ballast = dir / "ballast"
    with open(ballast, "wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 20))
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            pass
    return ballast


def test_a_full_disk_refuses_durable_writes_until_there_is_room_again(gradus_factory, tmp_path):
    """The data directory's disk fills up. Writes the log holds already are kept and written
    once there is room; new durable writes get MISCONF meanwhile (as Redis does when it cannot
    write its append-only file) and INFO says why (a write whose reply was being held for its
    fsync gets its connection closed, unacknowledged, rather than wait for the disk); once a
    file is deleted the writes go on by themselves, without a restart, and every acknowledged
    write survives a kill -9. (The log used to be poisoned for good by the first ENOSPC.) On a
    64 MiB ext4 file system of its own, with direct I/O as on any ext4."""
    body = "[durability]\nsnapshot-log-bytes = 0\nsegment-bytes = 8388608\n"
    with _gradus_on_a_small_disk(gradus_factory, tmp_path, body) as server:
        r = client(server)
        assert persistence(r)["gradus_log_direct_io"] == "yes"
        # Fill what the file system has left (a 4 MiB zero fill ahead of the records stays).
        ballast = _fill_disk(server.dir)
        value = b"v" * (64 << 10)
        acknowledged = []
        unknown = []  # writes whose reply was held (late) when the log stalled: not acknowledged
        refusal = None
        for i in range(2000):
            try:
                r.set(f"k:{i}", value)
                acknowledged.append(f"k:{i}")
            except redis.ConnectionError:
                unknown.append(f"k:{i}")
            except redis.ResponseError as e:
                refusal = str(e)
                break
        assert refusal is not None, "the disk never filled up"
        assert refusal.startswith("MISCONF the write-ahead log cannot write"), refusal
        assert "No space left on device" in refusal, refusal
        info = persistence(r)
        assert info["gradus_log_stalled"] != "no" and info["aof_last_write_status"] == "err", info
        assert info["gradus_log_poisoned"] == "no", info
        assert len(acknowledged) > 10, len(acknowledged)
        # Reads still work.
        assert r.get(acknowledged[-1]) == value
        ballast.unlink()
        deadline = time.monotonic() + 15
        while True:
            try:
                r.set("after", value)
                break
            except redis.ResponseError as e:
                assert e.args[0].startswith("MISCONF"), e
                assert time.monotonic() < deadline, "writes never resumed"
                time.sleep(0.1)
        info = persistence(r)
        assert info["gradus_log_stalled"] == "no" and info["aof_last_write_status"] == "ok", info
        assert info["gradus_log_disk_full_retries"] >= 1, info
        assert r.execute_command("WAITAOF", 1, 0, 0)[0] == 1
        r.close()
        server.crash_restart()
        r = client(server)
        assert len(acknowledged) + 1 <= r.dbsize() <= len(acknowledged) + len(unknown) + 1
        assert r.mget(acknowledged + ["after"]) == [value] * (len(acknowledged) + 1)
        r.close()


def test_a_failing_automatic_snapshot_waits_before_it_is_tried_again(gradus_factory, tmp_path):
    """An automatic snapshot that fails (here: the disk is full) is not tried again every half
    second while the log stays over `snapshot-log-bytes`, copying and writing the whole dataset
    each time: the next automatic one waits 5 s, then twice as long after each further failure
    (Redis waits 5 s after a failed BGSAVE). Once there is room, the next one succeeds."""
    body = "[durability]\nsnapshot-log-bytes = 1048576\nsegment-bytes = 8388608\n"
    with _gradus_on_a_small_disk(gradus_factory, tmp_path, body) as server:
        r = client(server)
        ballast = _fill_disk(server.dir)
        # Values that do not compress, so a snapshot needs megabytes the disk does not have.
        for i in range(2000):
            try:
                r.set(f"k:{i}", os.urandom(64 << 10))
            except redis.ConnectionError:
                pass  # a reply held when the log stalled; the client connects again
            except redis.ResponseError:
                break
        deadline = time.monotonic() + 10
        while persistence(r)["gradus_snapshot_failures"] == 0:
            assert time.monotonic() < deadline, {
                k: v for k, v in persistence(r).items() if "snapshot" in k or "stall" in k or "bgsave" in k
            }
            time.sleep(0.05)
        failures = persistence(r)["gradus_snapshot_failures"]
        assert persistence(r)["gradus_last_snapshot_status"].startswith("err"), persistence(r)
        time.sleep(3)
        assert persistence(r)["gradus_snapshot_failures"] == failures, "tried again within 5 s"
        ballast.unlink()
        deadline = time.monotonic() + 20
        while persistence(r)["gradus_last_snapshot_status"] != "ok":
            assert time.monotonic() < deadline, persistence(r)
            time.sleep(0.1)
        assert persistence(r)["gradus_snapshot_failures"] == failures
        r.close()


@pytest.mark.parametrize(
    "degree, appendonly, appendfsync",
    [("strict", "yes", "always"), ("background", "yes", "everysec"), ("lazy", "yes", "no"), ("none", "no", "no")],
)
def test_config_get_gives_the_default_degree_in_redis_terms(gradus_factory, degree, appendonly, appendfsync):
    """Tools that check `appendonly`/`appendfsync` see what the default degree amounts to."""
    server = gradus_factory("--durability", degree)
    r = client(server)
    assert r.config_get("appendonly") == {"appendonly": appendonly}
    assert r.config_get("appendfsync") == {"appendfsync": appendfsync}
    assert r.config_get("durability") == {"durability": degree}
    r.close()


def test_data_directory_is_locked(gradus):
    """A second server on the same --dir refuses to start (two writers would corrupt the log)."""
    argv = list(gradus.argv)
    argv[argv.index("--port") + 1] = str(free_port())
    proc = subprocess.run(argv, cwd=gradus.dir, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=15)
    assert proc.returncode != 0
    assert b"in use" in proc.stderr, proc.stderr[-2000:]
    r = client(gradus)
    assert r.set("still", "fine") is True
    r.close()


# --- 9: WAITAOF -----------------------------------------------------------------


def test_waitaof(gradus):
    r = client(gradus)
    assert persistence(r)["aof_enabled"] == 1
    r.set("k", "v")
    assert r.execute_command("WAITAOF", 1, 0, 0) == [1, 0]
    info = persistence(r)
    assert info["gradus_log_durable_lsn"] >= info["gradus_log_last_lsn"]
    # No write yet on a fresh connection: nothing to wait for.
    other = client(gradus)
    assert other.execute_command("WAITAOF", 1, 0, 0) == [1, 0]
    other.close()
    # No replicas: waits out the timeout, then reports what it has.
    t = time.monotonic()
    reply = r.execute_command("WAITAOF", 0, 1, 100)
    elapsed = time.monotonic() - t
    assert reply[1] == 0 and reply[0] in (0, 1), reply
    assert 0.09 <= elapsed < 5, elapsed
    for args in [(1, 0), (1, 0, 0, 0), ("x", 0, 0), (1, "x", 0), (1, 0, "x"), (1, 0, -1), (-1, 0, 0)]:
        with pytest.raises(redis.ResponseError):
            r.execute_command("WAITAOF", *args)
    r.execute_command("MULTI")
    with pytest.raises(redis.ResponseError):
        r.execute_command("WAITAOF", 1, 0, 0)
    r.execute_command("DISCARD")
    r.close()


def test_waitaof_forces_the_fsync_of_lazy_writes(gradus_factory, tmp_path):
    config = write_config(tmp_path, "[durability]\ndefault = \"lazy\"\nlazy-flush-ms = 30000\n")
    server = gradus_factory("--config", config)
    r = client(server)
    for i in range(20):
        r.set(f"k:{i}", i)
    t = time.monotonic()
    assert r.execute_command("WAITAOF", 1, 0, 0) == [1, 0]
    assert time.monotonic() - t < 10  # not the 30 s lazy flush
    r.close()
    server.crash_restart()
    r = client(server)
    assert r.dbsize() == 20
    r.close()


def test_waitaof_without_a_log(gradus_factory):
    server = gradus_factory("--durability", "none")
    r = client(server)
    assert persistence(r)["aof_enabled"] == 0
    r.set("k", "v")
    with pytest.raises(redis.ResponseError) as info:
        r.execute_command("WAITAOF", 1, 0, 0)
    assert str(info.value) == "WAITAOF cannot be used when numlocal is set but appendonly is disabled."
    assert r.execute_command("WAITAOF", 0, 0, 0) == [0, 0]
    with pytest.raises(redis.ResponseError):
        r.save()
    r.close()
    server.restart()
    r = client(server)
    assert r.dbsize() == 0  # nothing is kept at `none`
    assert wal_files(server.dir) == [] and snap_files(server.dir) == []
    r.close()


# --- 10: group commit ------------------------------------------------------------


def test_strict_group_commit(gradus_factory):
    server = gradus_factory("--durability", "strict")
    r = client(server)
    # Alone, each strict reply comes after the fsync that covers it.
    for i in range(20):
        r.set(f"alone:{i}", i)
        info = persistence(r)
        assert info["gradus_log_durable_lsn"] == info["gradus_log_last_lsn"] == i + 1, info
    before = persistence(r)
    stop = threading.Event()
    counts = [0] * 16
    errors: List[BaseException] = []

    def writer(n: int):
        c = redis_client(server, 2, socket_timeout=15)
        try:
            i = 0
            while not stop.is_set():
                c.set(f"g{n}:{i % 100}", i)
                i += 1
                counts[n] = i
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            c.close()

    threads = [threading.Thread(target=writer, args=(n,), daemon=True) for n in range(16)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join(JOIN_TIMEOUT)
        assert not t.is_alive()
    assert not errors, errors
    writes = sum(counts)
    after = persistence(r)
    fsyncs = after["gradus_log_fsyncs"] - before["gradus_log_fsyncs"]
    assert writes >= 16
    assert after["gradus_log_durable_lsn"] >= writes
    assert 0 < fsyncs < writes, (fsyncs, writes)
    assert after["gradus_log_mean_group_commit"] > 1, after
    hist = after["gradus_log_group_commit_histogram"]
    assert any(int(size) > 1 for size in hist), hist
    r.close()


def test_zset_algebra_zmpop_and_geoadd_survive_a_crash(gradus_factory):
    """ZUNIONSTORE/ZINTERSTORE/ZDIFFSTORE replay from the log (their keys follow numkeys),
    ZMPOP replays as the pop it did and GEOADD as its ZADD."""
    server = gradus_factory("--durability", "strict")
    r = client(server)
    r.zadd("a", {"x": 1, "y": 2, "z": 3})
    r.zadd("b", {"y": 10, "w": 20})
    r.sadd("s", "x", "w")
    r.execute_command("ZUNIONSTORE", "u", "3", "a", "b", "s", "WEIGHTS", "1", "2", "3")
    r.execute_command("ZINTERSTORE", "i", "2", "a", "b", "AGGREGATE", "MAX")
    r.execute_command("ZDIFFSTORE", "d", "2", "a", "b")
    r.execute_command("ZMPOP", "2", "nokey", "a", "MAX", "COUNT", "2")
    r.execute_command("GEOADD", "g", "13.361389", "38.115556", "Palermo")
    before = {k: r.zrange(k, 0, -1, withscores=True) for k in ("a", "b", "u", "i", "d", "g")}
    r.close()
    server.crash_restart()
    r = client(server)
    after = {k: r.zrange(k, 0, -1, withscores=True) for k in ("a", "b", "u", "i", "d", "g")}
    assert after == before
    assert before["a"] == [(b"x", 1.0)] and before["g"] == [(b"Palermo", 3479099956230698.0)]
    r.close()
