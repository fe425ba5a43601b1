"""Differential tests of client-side caching invalidations: the exact bytes Gradus and a real
redis-server send a tracking connection (RESP3 push, or a RESP2 redirect target's
`__redis__:invalidate` message) when a tracked key expires, is flushed, or is written.
"""

from __future__ import annotations

import socket
import time

from differential import assert_same
from servers import redis_client


class Raw:
    def __init__(self, server):
        self.sock = socket.create_connection((server.host, server.port), timeout=5)

    def send(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)

    def read_for(self, seconds):
        """Every byte that arrives within `seconds`."""
        self.sock.settimeout(0.05)
        data = b""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                data += chunk
            except socket.timeout:
                pass
        return data

    def call(self, *args, wait=0.2):
        self.send(*args)
        return self.read_for(wait)


def client_id(raw):
    reply = raw.call("CLIENT", "ID")
    return int(reply.split(b"\r\n")[0].lstrip(b":"))


def invalidation_subscriber(server):
    """A RESP2 connection subscribed to `__redis__:invalidate`, and its id (a REDIRECT target)."""
    sub = Raw(server)
    target = client_id(sub)
    sub.call("SUBSCRIBE", "__redis__:invalidate")
    return sub, target


def resp3_tracker(server, *options):
    t = Raw(server)
    t.call("HELLO", "3")
    assert t.call("CLIENT", "TRACKING", "on", *options) == b"+OK\r\n"
    return t


def test_active_expiry_of_a_tracked_key_sends_invalidate(gradus, redis_server):
    def scenario(server):
        t = resp3_tracker(server)
        redis_client(server).set("k", "v", px=400)
        got = t.call("GET", "k", wait=0.05)
        got += t.read_for(1.5)  # no read: active expiry must send it
        return got

    got = assert_same(gradus, redis_server, scenario)
    assert got.endswith(b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n")


def test_flush_sends_a_null_invalidation_in_resp3(gradus, redis_server):
    def scenario(server):
        t = resp3_tracker(server)
        out = t.call("GET", "a")
        redis_client(server).flushdb()
        return out + t.read_for(0.3)

    got = assert_same(gradus, redis_server, scenario)
    assert got.endswith(b">2\r\n$10\r\ninvalidate\r\n_\r\n")


def test_flush_sends_a_null_bulk_not_a_null_array_to_a_resp2_redirect_target(gradus, redis_server):
    def scenario(server):
        sub, target = invalidation_subscriber(server)
        t = Raw(server)
        assert t.call("CLIENT", "TRACKING", "on", "REDIRECT", target) == b"+OK\r\n"
        t.call("GET", "a")
        redis_client(server).flushall()
        return sub.read_for(0.3)

    got = assert_same(gradus, redis_server, scenario)
    assert got == b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n$-1\r\n"


def test_write_sends_the_key_to_a_resp2_redirect_target(gradus, redis_server):
    def scenario(server):
        sub, target = invalidation_subscriber(server)
        t = Raw(server)
        t.call("CLIENT", "TRACKING", "on", "REDIRECT", target)
        t.call("GET", "a")
        redis_client(server).set("a", "1")
        return sub.read_for(0.3)

    got = assert_same(gradus, redis_server, scenario)
    assert got == b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$1\r\na\r\n"


def test_bcast_prefix_invalidation_on_expiry(gradus, redis_server):
    def scenario(server):
        t = resp3_tracker(server, "BCAST", "PREFIX", "user:")
        redis_client(server).set("user:1", "v", px=100)
        return t.read_for(1.0)

    got = assert_same(gradus, redis_server, scenario)
    assert got.count(b"invalidate") == 2  # the SET, then the expiry


def test_own_flush_invalidation_comes_after_the_flush_reply(gradus, redis_server):
    """Regression: the flushing connection's own null invalidation came before its +OK."""
    def scenario(server):
        t = resp3_tracker(server)
        t.call("GET", "a")
        return t.call("FLUSHDB")

    assert assert_same(gradus, redis_server, scenario) == b"+OK\r\n>2\r\n$10\r\ninvalidate\r\n_\r\n"


def test_tracking_redir_broken_push_when_the_redirect_target_is_gone(gradus, redis_server):
    """Regression: with its redirect target closed, a RESP3 tracker was told nothing; Redis
    pushes `tracking-redir-broken <id>` where the invalidation would have gone."""
    def scenario(server):
        r = Raw(server)
        target = client_id(r)
        t = resp3_tracker(server, "REDIRECT", target)
        t.call("GET", "c")
        r.sock.close()
        time.sleep(0.2)
        # Broken only once a message found no target (flag `R`, `broken_redirect`).
        before = (flags_of(t), b"broken_redirect" in t.call("CLIENT", "TRACKINGINFO"))
        redis_client(server).set("c", "1")
        got = t.read_for(0.3)
        after = (flags_of(t), b"broken_redirect" in t.call("CLIENT", "TRACKINGINFO"))
        return got.replace(b":%d\r\n" % target, b":<id>\r\n"), before, after

    got, before, after = assert_same(gradus, redis_server, scenario)
    assert got == b">2\r\n$21\r\ntracking-redir-broken\r\n:<id>\r\n"
    assert before == ("t", False) and after == ("tR", True)


def flags_of(raw):
    info = raw.call("CLIENT", "INFO")
    return next(f.split(b"=")[1] for f in info.split() if f.startswith(b"flags=")).decode()


def test_reads_inside_exec_and_scripts_are_tracked(gradus, redis_server):
    """Regression: keys read inside MULTI/EXEC or a script were not remembered, so a later
    write of them sent the tracking connection no invalidation (Redis tracks them)."""
    def scenario(server):
        t = resp3_tracker(server)
        t.call("MULTI")
        t.call("GET", "in-exec")
        t.call("EXEC")
        t.call("EVAL", "return redis.call('get', KEYS[1])", "1", "in-script")
        writer = redis_client(server)
        writer.set("in-exec", "1")
        writer.set("in-script", "1")
        return t.read_for(0.3)

    got = assert_same(gradus, redis_server, scenario)
    assert got.count(b"invalidate") == 2


def test_bcast_prefixes_to_a_resp2_redirect_target(gradus, redis_server):
    def scenario(server):
        sub, target = invalidation_subscriber(server)
        t = Raw(server)
        t.call("CLIENT", "TRACKING", "on", "REDIRECT", target, "BCAST", "PREFIX", "a:", "PREFIX", "b:")
        writer = redis_client(server)
        writer.set("a:1", "x")
        writer.set("c:1", "x")
        writer.set("b:2", "x")
        writer.delete("a:1")
        return sub.read_for(0.3)

    got = assert_same(gradus, redis_server, scenario)
    assert got.count(b"__redis__:invalidate") == 3


def test_optin_optout_and_noloop_like_redis(gradus, redis_server):
    def scenario(server):
        out = b""
        t = resp3_tracker(server, "OPTIN")
        t.call("GET", "x1")
        t.call("CLIENT", "CACHING", "yes")
        t.call("GET", "x2")
        u = resp3_tracker(server, "OPTOUT", "NOLOOP")
        u.call("GET", "y1")
        u.call("CLIENT", "CACHING", "no")
        u.call("GET", "y2")
        writer = redis_client(server)
        for k in ("x1", "x2", "y1", "y2"):
            writer.set(k, "v")
        out += t.read_for(0.3) + b"|" + u.read_for(0.3)
        u.call("GET", "y1")
        out += b"|" + u.call("SET", "y1", "own")  # NOLOOP: no invalidation of its own write
        return out

    assert_same(gradus, redis_server, scenario)


def test_bcast_invalidations_of_an_exec_are_batched_per_prefix(gradus, redis_server):
    # Redis collects BCAST keys per prefix until the command (here EXEC) has finished and sends
    # one message per prefix with its keys sorted; Gradus sent one message per key, so the
    # redirect target of unit/tracking fell behind by two messages.
    def scenario(server):
        sub, target = invalidation_subscriber(server)
        t = Raw(server)
        t.call("CLIENT", "TRACKING", "on", "BCAST", "REDIRECT", target, "PREFIX", "b:", "PREFIX", "a:")
        for c in (("MULTI",), ("INCR", "a:2"), ("INCR", "b:1"), ("INCR", "a:1"), ("INCR", "b:2"),
                  ("INCR", "c:1"), ("INCR", "a:2"), ("EXEC",)):
            t.send(*c)
        t.read_for(0.2)
        t.call("MSET", "b:9", "1", "a:9", "1", "c:9", "1")
        return sub.read_for(0.3)

    got = assert_same(gradus, redis_server, scenario)
    assert got.count(b"message") == 4


def test_bcast_noloop_batch_leaves_out_only_the_trackers_own_writes(gradus, redis_server):
    def scenario(server):
        t = resp3_tracker(server, "BCAST", "NOLOOP")
        t.call("EVAL", "redis.call('set', 'mine', 1) return 1", "0")
        redis_client(server).mset({"x": 1, "y": 2})
        return t.call("PING")

    got = assert_same(gradus, redis_server, scenario)
    assert b"mine" not in got and b"$1\r\nx\r\n$1\r\ny\r\n" in got


def test_keys_read_before_tracking_off_are_forgotten_by_a_flush(gradus, redis_server):
    # With no connection tracking, Gradus skipped the table on writes and flushes, so a key
    # read earlier stayed remembered and a later tracker was told of a write it never read.
    def scenario(server):
        sub, target = invalidation_subscriber(server)
        t = Raw(server)
        t.call("CLIENT", "TRACKING", "on")
        t.call("GET", "key1")
        t.call("CLIENT", "TRACKING", "off")
        t.call("FLUSHALL")
        t.call("CLIENT", "TRACKING", "on", "REDIRECT", target)
        redis_client(server).set("key1", "1")
        info = t.call("INFO", "everything", wait=0.3).decode()
        stats = sorted(l for l in info.split("\r\n") if l.startswith("tracking"))
        return sub.read_for(0.3), stats

    got = assert_same(gradus, redis_server, scenario)
    assert got[0] == b""


def test_tracking_info_fields_count_keys_items_and_prefixes(gradus, redis_server):
    def scenario(server):
        t = Raw(server)
        t.call("CLIENT", "TRACKING", "on")
        t.call("MGET", "a", "b")
        b = Raw(server)
        b.call("CLIENT", "TRACKING", "on")
        b.call("GET", "a")
        p = Raw(server)
        p.call("CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "p:", "PREFIX", "q:")
        e = Raw(server)
        e.call("CLIENT", "TRACKING", "on", "BCAST")
        info = t.call("INFO", "everything", wait=0.3).decode()
        return sorted(l for l in info.split("\r\n") if l.startswith("tracking"))

    got = assert_same(gradus, redis_server, scenario)
    assert "tracking_total_items:3" in got and "tracking_total_prefixes:3" in got


def test_lowering_tracking_table_max_keys_evicts_without_a_new_read(gradus, redis_server):
    def scenario(server):
        sub, target = invalidation_subscriber(server)
        t = Raw(server)
        t.call("CLIENT", "TRACKING", "on", "REDIRECT", target)
        t.call("GET", "k1")
        t.call("GET", "k2")
        t.call("CONFIG", "SET", "tracking-table-max-keys", "1")
        got = sub.read_for(0.5)
        t.call("CONFIG", "SET", "tracking-table-max-keys", "1000000")
        # Redis evicts a random key, Gradus the oldest: compare how many.
        return got.count(b"message"), got.count(b"\r\nk")

    assert assert_same(gradus, redis_server, scenario) == (1, 1)


def test_prefix_collisions_name_the_prefixes_as_redis_orders_them(gradus, redis_server):
    def scenario(server):
        t = Raw(server)
        out = [t.call("CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "FOOBAR", "PREFIX", "FOO"),
               t.call("CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "FOO", "PREFIX", "FOOBAR"),
               t.call("CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "FOO", "PREFIX", "BAR"),
               t.call("CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "FO"),
               t.call("CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "BARB")]
        t.call("CLIENT", "TRACKING", "off")
        t.call("HELLO", "3")
        t.call("CLIENT", "TRACKING", "on", "BCAST")
        out.append(t.call("CLIENT", "TRACKINGINFO"))
        return out

    assert_same(gradus, redis_server, scenario)


def test_invalidations_of_keys_evicted_before_a_read_precede_its_reply(gradus_factory, redis_server):
    """Redis' tracking.tcl "Tracking invalidation message of eviction keys should be before
    response": a write admitted just under `maxmemory` takes the server over it; the next
    command, a read, first evicts (Redis' `processCommand` runs `performEvictions` before any
    command), so the evicted key's invalidation reaches its tracker before the read's reply.
    Gradus evicted only before writes, so GETBIT answered with nothing evicted. A cache
    database (durability none: maxmemory never evicts a logged one)."""
    from conftest import target_is_redis

    cache = gradus_factory() if target_is_redis() else gradus_factory("--durability", "none")

    def scenario(server):
        t = resp3_tracker(server)
        admin = redis_client(server)
        used = int(admin.info("memory")["used_memory"])
        admin.config_set("maxmemory-policy", "volatile-random")
        admin.config_set("maxmemory", used + 100 * 1024)
        try:
            out = [t.call("SETEX", "volatile-key", 10000, "x"), t.call("GET", "volatile-key"),
                   # 200 KB in one write, admitted while under the limit.
                   t.call("SETBIT", "big-key", 1600000, 0),
                   t.call("GETBIT", "big-key", 0)]
        finally:
            admin.config_set("maxmemory", 0)
            admin.config_set("maxmemory-policy", "noeviction")
        evicted = int(admin.info("stats")["evicted_keys"])
        return out, evicted, admin.exists("volatile-key", "big-key")

    out, evicted, left = assert_same(cache, redis_server, scenario)
    assert out[3] == b">2\r\n$10\r\ninvalidate\r\n*1\r\n$12\r\nvolatile-key\r\n:0\r\n", out
    assert (evicted, left) == (1, 1)
