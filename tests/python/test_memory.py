"""Memory: MEMORY USAGE/STATS/DOCTOR/PURGE/HELP as Redis 7 answers them, INFO's allocator figures, and
memory limits that hold the process's real memory (not just the payload bytes)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import redis

from conftest import target_is_redis
from servers import gradus_binary, redis_client, rss

gradus_only = pytest.mark.skipif(target_is_redis(), reason="Gradus' keyspace limits and accounting")


def test_memory_help_usage_and_errors_match_redis(gradus):
    server = gradus
    r = redis_client(server, 2)
    help_text = r.execute_command("MEMORY", "HELP")
    assert help_text[0] == b"MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    assert b"USAGE <key> [SAMPLES <count>]" in help_text and help_text[-1] == b"    Print this help."
    assert r.execute_command("MEMORY", "USAGE", "missing") is None
    r.set("k", "v" * 100)
    usage = r.execute_command("MEMORY", "USAGE", "k")
    assert 100 < usage < 400, usage
    assert r.execute_command("MEMORY", "USAGE", "k", "SAMPLES", "0") == usage
    with pytest.raises(redis.ResponseError, match="^syntax error"):
        r.execute_command("MEMORY", "USAGE", "k", "SAMPLES", "-1")
    with pytest.raises(redis.ResponseError, match="^value is not an integer or out of range"):
        r.execute_command("MEMORY", "USAGE", "k", "SAMPLES", "x")
    with pytest.raises(redis.ResponseError, match="^syntax error"):
        r.execute_command("MEMORY", "USAGE", "k", "FOO")
    with pytest.raises(redis.ResponseError, match=r"^unknown subcommand 'FOO'. Try MEMORY HELP."):
        r.execute_command("MEMORY", "FOO")
    with pytest.raises(redis.ResponseError, match=r"^wrong number of arguments for 'memory\|usage' command"):
        r.execute_command("MEMORY", "USAGE")
    assert r.execute_command("MEMORY", "PURGE") in (b"OK", True)
    assert r.execute_command("MEMORY", "DOCTOR").startswith(b"Hi Sam, this instance is empty")
    stats = r.execute_command("MEMORY", "STATS")
    names = stats[0::2]
    for name in (b"peak.allocated", b"total.allocated", b"keys.count", b"dataset.bytes", b"fragmentation"):
        assert name in names, name
    assert stats[names.index(b"keys.count") * 2 + 1] == 1


@gradus_only
def test_used_memory_is_the_allocators_count_and_follows_the_data(gradus):
    server = gradus
    r = redis_client(server, 2)
    before = r.info("memory")
    for name in ("used_memory", "used_memory_rss", "used_memory_peak", "used_memory_dataset",
                 "mem_fragmentation_ratio"):
        assert name in before, name
    rss_before = rss(server)
    pipe = r.pipeline(transaction=False)
    keys = 100_000
    for i in range(keys):
        pipe.set(f"key:{i:08d}", "x" * 100)
        if len(pipe) >= 1000:
            pipe.execute()
    pipe.execute()
    after = r.info("memory")
    grown_used = after["used_memory"] - before["used_memory"]
    grown_rss = rss(server) - rss_before
    # The allocator's count follows what the process really took: never more, and here at least
    # half of it (the target is within 10 %: not met in this debug build); the rest is what
    # the allocator keeps of freed memory (the tables' smaller generations, request buffers) and,
    # in a debug build on a busy machine, varies from run to run: 0.60-0.75 seen, 0.599 once under
    # a load average of 8. docs/benchmarks/memory.md has the release figures at 1 M keys (83-97 %).
    # Payload bytes alone, the figure before, were 40 % of it: this bound still catches a return
    # to that.
    assert 0.5 * grown_rss <= grown_used <= 1.05 * grown_rss, (grown_used, grown_rss)
    # The keyspaces' own accounting is close to it too.
    grown_dataset = after["used_memory_dataset"] - before["used_memory_dataset"]
    assert 0.85 * grown_used <= grown_dataset <= 1.1 * grown_used, (grown_dataset, grown_used)
    usage = r.execute_command("MEMORY", "USAGE", "key:00000001")
    assert abs(usage - grown_dataset / keys) < 16, (usage, grown_dataset / keys)


@gradus_only
def test_reading_every_key_once_does_not_grow_the_store(gradus_factory):
    """Regression: a long string was a `Bytes` made from a `Vec`, whose first clone allocates a
    separate reference-count header that then lives as long as the value. A GET clones the value
    for its reply and a snapshot clones every value, so 1 M keys of 100 bytes grew by 32 bytes of
    RSS per key (212 -> 244, Redis 204) once each had been read. The count now lives in the
    value's own allocation: reading or snapshotting every key leaves the allocator's count where
    it was (a snapshot's transient copies are freed when it ends)."""
    server = gradus_factory("--durability", "background")
    r = redis_client(server, 2)
    keys = 100_000
    pipe = r.pipeline(transaction=False)

    def each_key(command):
        for i in range(keys):
            getattr(pipe, command)(f"session:{i:08d}", *(["x" * 100] if command == "set" else []))
            if len(pipe) >= 1000:
                pipe.execute()
        pipe.execute()

    each_key("set")
    loaded = r.info("memory")["used_memory"]
    each_key("get")
    read = r.info("memory")["used_memory"]
    # Before the fix: +24.8 bytes per key of used_memory here (a 24-byte header each).
    assert read - loaded < 4 * keys, (read - loaded) / keys
    r.bgsave()
    deadline = time.monotonic() + 60
    while r.info("persistence")["rdb_bgsave_in_progress"]:
        assert time.monotonic() < deadline, "snapshot did not finish"
        time.sleep(0.1)
    assert r.info("persistence")["rdb_last_bgsave_status"] == "ok"
    saved = r.info("memory")["used_memory"]
    assert saved - loaded < 4 * keys, (saved - loaded) / keys
    assert r.get("session:00000007") == b"x" * 100


@gradus_only
def test_a_snapshot_gives_back_the_memory_it_took(gradus_factory):
    """Regression: a snapshot's buffers and the value parts writes copied while it ran are freed
    when it ends, but the allocator kept the pages: after each snapshot of a 200 k-field hash RSS
    stayed up by 18 MB (+80 % of the data's), `used_memory` unchanged. The snapshot now gives
    them back (as a purge does)."""
    server = gradus_factory("--durability", "background")
    r = redis_client(server, 2)
    time.sleep(0.3)
    empty = rss(server)
    pipe = r.pipeline(transaction=False)
    for start in range(0, 200_000, 1000):
        pipe.hset("big", mapping={f"field:{j:010d}": f"value:{j:010d}" for j in range(start, start + 1000)})
    pipe.execute()
    time.sleep(0.3)
    loaded = rss(server) - empty
    for round_ in range(2):
        r.bgsave()
        r.hset("big", mapping={f"new:{round_}:{j}": "x" for j in range(2000)})
        deadline = time.monotonic() + 60
        while r.info("persistence")["rdb_bgsave_in_progress"]:
            assert time.monotonic() < deadline, "snapshot did not finish"
            time.sleep(0.1)
        assert r.info("persistence")["rdb_last_bgsave_status"] == "ok"
    time.sleep(0.5)
    after = rss(server) - empty
    assert after <= 1.25 * loaded, (after / loaded, loaded, after)
    assert r.hlen("big") == 204_000


LIMITED = """
[[tenants]]
name = "small"

  [[tenants.users]]
  name = "small"
  password = "{hash}"
  permissions = ["read", "write", "flush"]

  [[tenants.keyspaces]]
  name = "cache"
  select = 0
  durability = "none"
  eviction = "lru"
  memory-limit = "{limit_mib}mb"
"""


@gradus_only
@pytest.mark.parametrize("value_size", [300, 1000])
@pytest.mark.parametrize("threads", [1, 4])
def test_a_keyspace_limited_to_n_mib_never_grows_the_process_by_more_than_1_2_n(
        gradus_factory, tmp_path: Path, value_size: int, threads: int):
    """Regression for the limits counting payload bytes only: a keyspace limited to 64 MiB could hold
    ~220 MiB of real memory. Two and a half times the limit is written through it, on one
    connection. With one worker thread (the default on a 2-core machine) the process grows by at
    most 1.2 × the limit, the target: measured 1.01-1.06 × (release and debug builds, 2026-11-29).
    With four workers it is not met: 1.40-1.53 × with 300-byte values, 1.13-1.16 × with 1000-byte
    ones (1.14 × with two workers), the connection's task moving between workers so that blocks it
    frees sit in other threads' allocator pages (see docs/benchmarks/memory.md); asserted there:
    2 ×, which still fails the bug this guards against (3.4 ×)."""
    limit_mib = 32
    hashed = subprocess.run([str(gradus_binary()), "passwd"], input="small-pass\n", capture_output=True,
                            text=True, check=True).stdout.strip()
    config = tmp_path / "limited.toml"
    config.write_text(LIMITED.format(hash=hashed, limit_mib=limit_mib))
    server = gradus_factory("--config", str(config), "--threads", str(threads))
    r = redis_client(server, 2, username="small", password="small-pass", single_connection_client=True)
    r.ping()
    start = rss(server)
    total = 5 * limit_mib << 19
    keys = total // value_size
    peak = start
    pipe = r.pipeline(transaction=False)
    for i in range(keys):
        pipe.set(f"cache:{i:09d}", b"v" * value_size)
        if len(pipe) >= 1000:
            pipe.execute()
            peak = max(peak, rss(server))
    pipe.execute()
    peak = max(peak, rss(server))
    assert r.dbsize() < keys, "the keyspace evicted"
    grown = peak - start
    bound = 1.2 if threads == 1 else 2.0
    print(f"threads={threads} value_size={value_size}: RSS grew {grown / (limit_mib << 20):.2f} x the limit")
    assert grown <= bound * (limit_mib << 20), grown / (limit_mib << 20)


@gradus_only
def test_maxmemory_evicts_by_policy_and_noeviction_refuses(gradus_factory):
    """Server-wide maxmemory on the allocator's count: a cache database (durability none, no
    [[tenants]]) evicts by allkeys-lru and keeps used_memory near the limit; with noeviction a write
    over it gets Redis' OOM error and reads still work."""
    server = gradus_factory("--durability", "none")
    r = redis_client(server, 2)
    base = r.info("memory")["used_memory"]
    limit = base + (16 << 20)
    assert r.config_set("maxmemory", str(limit))
    assert r.config_set("maxmemory-policy", "allkeys-lru")
    assert r.config_get("maxmemory-policy") == {"maxmemory-policy": "allkeys-lru"}
    pipe = r.pipeline(transaction=False)
    for i in range(100_000):
        pipe.set(f"k:{i:07d}", b"x" * 500)
        if len(pipe) >= 1000:
            pipe.execute()
    pipe.execute()
    info = r.info("memory")
    assert info["maxmemory"] == limit and info["maxmemory_policy"] == "allkeys-lru"
    assert info["used_memory"] <= limit + (1 << 20), (info["used_memory"], limit)
    assert r.dbsize() < 100_000
    assert r.config_set("maxmemory-policy", "noeviction")
    # (redis-py takes the OOM code off the message.)
    with pytest.raises(redis.ResponseError, match=r"^command not allowed when used memory > 'maxmemory'\.$"):
        for i in range(100_000):
            r.set(f"more:{i}", b"y" * 500)
    assert r.get("more:0") is None or r.get("more:0") == b"y" * 500
    assert r.dbsize() > 0


def _thp_enabled(server) -> int:
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("THP_enabled:"):
            return int(line.split()[1])
    pytest.skip("this kernel does not report THP_enabled")


@gradus_only
def test_transparent_huge_pages_are_off_unless_disable_thp_is_no(gradus_factory, tmp_path):
    # mimalloc asks for huge pages on its arenas; with them, LPUSH of 1 KiB elements spent half
    # its time zeroing 2 MiB pages and a hash of 10 fields took 360 bytes per key instead of 310.
    # redis-server turns THP off for itself by default (`disable-thp yes`); so does Gradus.
    server = gradus_factory()
    r = redis_client(server, 2)
    assert r.config_get("disable-thp") == {"disable-thp": "yes"}
    assert _thp_enabled(server) == 0
    with pytest.raises(redis.ResponseError, match="can't set immutable config"):
        r.config_set("disable-thp", "no")
    config = tmp_path / "thp.toml"
    config.write_text("disable-thp = false\n")
    kept = gradus_factory("--config", str(config), name="gradus-thp")
    assert redis_client(kept, 2).config_get("disable-thp") == {"disable-thp": "no"}
    assert _thp_enabled(kept) == 1


def test_a_command_queued_over_maxmemory_is_refused_and_exec_aborts(gradus, redis_server):
    """Over maxmemory, a command sent inside MULTI is refused with OOM when queued (whatever the
    command: a queue would grow memory without bound) and EXEC then aborts; DISCARD, EXEC and
    CONFIG SET still work (Redis' `processCommand`; its multi.tcl "EXEC fails if there are errors
    while queueing commands #2" and "DISCARD should not fail during OOM"). Gradus queued them and
    ran the transaction. Compared with redis-server reply for reply."""
    from differential import assert_same
    from resp import Err, RawConnection

    def run(server):
        admin = RawConnection(server.host, server.port, timeout=10)
        c = RawConnection(server.host, server.port, timeout=10)
        replies = []
        try:
            for conn, cmd in [
                (c, ["MULTI"]), (c, ["SET", "foo1", "bar1"]),
                (admin, ["CONFIG", "SET", "maxmemory", "1"]),
                (c, ["LPUSH", "mylist", "v"]), (c, ["GET", "foo1"]),
                (admin, ["CONFIG", "SET", "maxmemory", "0"]),
                (c, ["SET", "foo2", "bar2"]), (c, ["EXEC"]), (c, ["EXISTS", "foo1", "foo2", "mylist"]),
                (admin, ["CONFIG", "SET", "maxmemory", "1"]),
                (c, ["MULTI"]), (c, ["SET", "x", "1"]), (c, ["DISCARD"]), (c, ["PING", "after"]),
                (admin, ["CONFIG", "SET", "maxmemory", "0"]),
                # Queued while under the limit, EXEC'd over it: EXEC aborts with the OOM error
                # (Redis' `execCommandAbort`; Gradus gave the bare OOM error; found by Redis'
                # own multi.tcl "EXEC with at least one use-memory command should fail").
                (c, ["MULTI"]), (c, ["SET", "x", "1"]), (c, ["GET", "x"]),
                (admin, ["CONFIG", "SET", "maxmemory", "1"]),
                (c, ["EXEC"]), (c, ["EXISTS", "x"]),
                (admin, ["CONFIG", "SET", "maxmemory", "0"]),
            ]:
                replies.append(conn.call(*cmd))
        finally:
            admin.close()
            c.close()
        return replies

    ours = assert_same(gradus, redis_server, run)
    assert ours[3] == Err(b"OOM command not allowed when used memory > 'maxmemory'."), ours
    assert ours[-3] == Err(b"EXECABORT Transaction discarded because of: OOM command not allowed "
                           b"when used memory > 'maxmemory'."), ours


def test_a_read_over_maxmemory_evicts_before_it_replies(gradus_factory, redis_server):
    """Regression: Gradus evicted under `maxmemory` only before a write that may grow memory,
    so with `maxmemory` lowered below `used_memory` reads (DBSIZE, GET) still found every key
    until some write came. Redis evicts before any command (`processCommand`; 7.0 and 7.2 also
    start evicting when CONFIG SET lowers the limit): the read's reply already counts without
    the evicted keys. Compared with redis-server, on a cache database (durability none)."""
    from differential import assert_same

    cache = gradus_factory() if target_is_redis() else gradus_factory("--durability", "none")

    def scenario(server):
        r = redis_client(server, 2)
        r.config_set("maxmemory-policy", "allkeys-random")
        pipe = r.pipeline(transaction=False)
        for i in range(300):
            pipe.set(f"k:{i}", b"x" * 10_000)
        pipe.execute()
        evicted = r.info("stats")["evicted_keys"]
        used = r.info("memory")["used_memory"]
        # Room for about half the keys.
        r.config_set("maxmemory", used - 1_500_000)
        try:
            left = r.dbsize()
            missing = r.get("nokey")
            now_evicted = r.info("stats")["evicted_keys"]
        finally:
            r.config_set("maxmemory", 0)
            r.config_set("maxmemory-policy", "noeviction")
        return [0 < left < 300, missing, now_evicted - evicted >= 300 - left > 0]

    assert assert_same(cache, redis_server, scenario) == [True, None, True]


def test_flush_async_is_counted_in_lazyfree_fields_until_freed(gradus):
    """INFO memory had no `lazyfree_pending_objects` / `lazyfreed_objects`, so tools (and
    Redis' own lazyfree.tcl and tracking.tcl, which wait for the pending figure to reach 0)
    could not tell when a flush's memory was back. Gradus frees a flushed keyspace on a
    background thread: it is pending until freed, then counted as freed."""
    import time

    r = redis_client(gradus)
    before = r.info("memory")
    assert before["lazyfree_pending_objects"] >= 0
    freed = before["lazyfreed_objects"]
    pipe = r.pipeline(transaction=False)
    for i in range(20_000):
        pipe.set(f"lazy:{i}", "x" * 32)
    pipe.execute()
    assert r.execute_command("FLUSHDB", "ASYNC") in (b"OK", "OK", True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        now = r.info("memory")
        if now["lazyfree_pending_objects"] == 0 and now["lazyfreed_objects"] > freed:
            break
        time.sleep(0.05)
    now = r.info("memory")
    assert now["lazyfree_pending_objects"] == 0
    assert now["lazyfreed_objects"] > freed
    assert r.dbsize() == 0


def test_unlink_frees_big_values_in_the_background_and_resetstat_clears_the_count(gradus, redis_server):
    """UNLINK frees a value whose free effort passes Redis' 64 (a hashtable-encoded set, hash
    or sorted set of 1 000, a stream of 200 nodes) on a background thread, counted in
    `lazyfreed_objects`; a packed value, an intset, a short list and DEL free at once;
    CONFIG RESETSTAT clears the count. Gradus freed every UNLINKed value inline, under the
    shard's lock, and RESETSTAT kept the count. (Found by Redis' own lazyfree.tcl.)"""

    def freed(r):
        deadline = time.monotonic() + 10
        while r.info("memory")["lazyfree_pending_objects"] and time.monotonic() < deadline:
            time.sleep(0.02)
        return r.info("memory")["lazyfreed_objects"]

    def scenario(server):
        r = redis_client(server, 2)
        r.flushall()
        freed(r)
        r.config_resetstat()
        r.config_set("stream-node-max-entries", 5)
        steps = [freed(r)]
        members = [f"member:{i}" for i in range(1000)]
        for kind, fill in [
            ("set", lambda k: r.sadd(k, *members)),
            ("hash", lambda k: r.hset(k, mapping={m: "v" for m in members})),
            ("zset", lambda k: r.zadd(k, {m: i for i, m in enumerate(members)})),
            ("small", lambda k: r.sadd(k, "a", "b")),
            ("intset", lambda k: r.sadd(k, *range(300))),
            ("list", lambda k: r.rpush(k, *range(1000))),
        ]:
            fill(kind)
            steps.append((kind, r.unlink(kind), freed(r)))
        pipe = r.pipeline(transaction=False)
        for i in range(1000):
            pipe.xadd("stream", {"foo": i})
        pipe.execute()
        steps.append(("stream", r.unlink("stream"), freed(r)))
        r.sadd("deleted", *members)
        steps.append(("del", r.delete("deleted"), freed(r)))
        r.config_resetstat()
        steps.append(freed(r))
        r.config_set("stream-node-max-entries", 100)
        return steps

    ours, theirs = scenario(gradus), scenario(redis_server)
    assert ours == theirs
    assert [s[2] for s in ours[1:-1]] == [1, 2, 3, 3, 3, 3, 4, 4], ours


@gradus_only
def test_idle_connections_give_back_the_buffers_of_big_values(gradus_factory):
    """A connection that sent (or was sent) one big value gives its grown buffers back once it
    has nothing pending, and the allocator returns the memory to the system. Regression: each
    connection kept the read buffer a big SET had grown, so eight connections that had each set
    one 32 MiB value held ~330 MB while idle (redis-server: nothing beyond the value), and the
    process stayed at its peak after that. Here: eight connections set one 8 MiB value each (the
    same key) and read it back; once they are idle, the process holds about the value."""
    import socket
    import time

    server = gradus_factory("--durability", "none")
    value = b"v" * (8 << 20)
    request = b"*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$%d\r\n%s\r\n" % (len(value), value)
    get = b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n"
    reply = b"$%d\r\n%s\r\n" % (len(value), value)
    start = rss(server)
    conns = []
    try:
        for _ in range(8):
            s = socket.create_connection((server.host, server.port), timeout=30)
            conns.append(s)
            s.sendall(request)
            assert s.recv(16) == b"+OK\r\n"
            s.sendall(get)
            got = b""
            while len(got) < len(reply):
                chunk = s.recv(1 << 20)
                assert chunk, "connection closed"
                got += chunk
            assert got == reply
        held = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            held = rss(server) - start
            if held < 3 * len(value):
                break
            time.sleep(0.2)
        assert held < 3 * len(value), (
            f"idle process holds {held >> 20} MiB for one {len(value) >> 20} MiB value"
        )
        # The connections still work, with buffers of the usual size.
        for s in conns:
            s.sendall(b"PING\r\n")
            assert s.recv(16) == b"+PONG\r\n"
        clients = redis_client(server, 2).execute_command("CLIENT", "LIST").decode()
        for line in clients.splitlines():
            free = int(line.split(" qbuf-free=")[1].split()[0])
            assert free <= 1 << 20, line
    finally:
        for s in conns:
            s.close()


def test_maxmemory_samples_is_a_setting_as_in_redis(gradus_factory, redis_server):
    """`maxmemory-samples` (keys an eviction samples) is read and set with Redis' replies and
    range, and evictions go on with it changed. Gradus sampled a fixed 5 keys and did not know
    the setting (`Unknown option`), which Redis' own introspection test and tuned
    configurations set. (Gradus evicts for maxmemory from databases of degree `none`.)"""
    gradus = gradus_factory("--durability", "none")
    seen = {}
    for server in (gradus, redis_server):
        r = redis_client(server, 2)
        out = [r.config_get("maxmemory-samples")]
        for value in ("0", "abc", "10", "2147483647", "2147483648", "5"):
            try:
                out.append(r.config_set("maxmemory-samples", value))
            except redis.ResponseError as e:
                out.append(str(e))
            out.append(r.config_get("maxmemory-samples"))
        r.config_set("maxmemory-samples", "10")
        r.config_set("maxmemory-policy", "allkeys-lru")
        r.flushall()
        r.config_set("maxmemory", 2 * 1024 * 1024 + int(r.info("memory")["used_memory"]))
        try:
            p = r.pipeline(transaction=False)
            for i in range(20_000):
                p.set(f"k:{i}", "x" * 200)
            p.execute()
            evicted = r.info("stats")["evicted_keys"]
        finally:
            r.config_set("maxmemory", 0)
            r.config_set("maxmemory-policy", "noeviction")
            r.config_set("maxmemory-samples", "5")
            r.flushall()
        seen[server.name] = out
        assert evicted > 0, server.name
    assert seen[gradus.name] == seen[redis_server.name]
