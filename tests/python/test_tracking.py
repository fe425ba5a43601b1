"""Client-side caching (CLIENT TRACKING): RESP3 invalidation pushes, RESP2 redirection to
`__redis__:invalidate`, BCAST prefixes, OPTIN/OPTOUT with CLIENT CACHING, NOLOOP, flushes, the
bounded table (`tracking-table-max-keys`), Redis' errors, GETREDIR and TRACKINGINFO, redis-py's
own client-side cache (`cache_config`), and tenant isolation.

All but the tenant test also run against real Redis (GRADUS_TARGET=redis).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from resp import Err, Push, RawConnection, Simple, is_null
from servers import redis_client


def resp3(server):
    c = RawConnection(server.host, server.port)
    c.call("HELLO", "3")
    return c


def no_message(c, wait=0.3):
    assert c.read_available(wait) == b""


def test_resp3_read_then_foreign_write_sends_invalidate(gradus, r):
    c = resp3(gradus)
    assert c.call("CLIENT", "TRACKING", "on") == Simple(b"OK")
    r.set("k", "v1")
    assert c.call("GET", "k") == b"v1"
    r.set("k", "v2")
    assert c.read_reply() == Push([b"invalidate", [b"k"]])
    # Forgotten after one invalidation until it is read again.
    r.set("k", "v3")
    no_message(c)
    assert c.call("GET", "k") == b"v3"
    r.delete("k")
    assert c.read_reply() == Push([b"invalidate", [b"k"]])


def test_own_write_invalidates_unless_noloop(gradus):
    c = resp3(gradus)
    c.call("CLIENT", "TRACKING", "on")
    c.call("GET", "a")
    c.send_command("SET", "a", "1")
    # As in Redis: the reply first, then the invalidation of the writer's own read.
    assert c.read_reply() == Simple(b"OK")
    assert c.read_reply() == Push([b"invalidate", [b"a"]])
    c.call("CLIENT", "TRACKING", "on", "NOLOOP")
    c.call("GET", "a")
    assert c.call("SET", "a", "2") == Simple(b"OK")
    no_message(c)


def test_resp2_redirect_to_invalidate_channel(gradus, r):
    listener = RawConnection(gradus.host, gradus.port)
    listener_id = listener.call("CLIENT", "ID")
    listener.send_command("SUBSCRIBE", "__redis__:invalidate")
    assert listener.read_reply() == [b"subscribe", b"__redis__:invalidate", 1]
    reader = RawConnection(gradus.host, gradus.port)
    assert reader.call("CLIENT", "TRACKING", "on", "REDIRECT", listener_id) == Simple(b"OK")
    assert reader.call("CLIENT", "GETREDIR") == listener_id
    reader.call("GET", "x")
    r.set("x", "1")
    assert listener.read_reply() == [b"message", b"__redis__:invalidate", [b"x"]]


def test_bcast_prefixes(gradus, r):
    c = resp3(gradus)
    assert c.call("CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "user:", "PREFIX", "cfg:") == Simple(b"OK")
    r.set("user:1", "a")
    assert c.read_reply() == Push([b"invalidate", [b"user:1"]])
    r.set("other", "b")
    no_message(c)
    r.mset({"cfg:x": "1", "zzz": "2"})
    assert c.read_reply() == Push([b"invalidate", [b"cfg:x"]])


def test_optin_tracks_only_after_caching_yes(gradus, r):
    c = resp3(gradus)
    c.call("CLIENT", "TRACKING", "on", "OPTIN")
    c.call("GET", "a")
    r.set("a", "1")
    no_message(c)
    assert c.call("CLIENT", "CACHING", "yes") == Simple(b"OK")
    c.call("GET", "a")
    r.set("a", "2")
    assert c.read_reply() == Push([b"invalidate", [b"a"]])


def test_optout_tracks_unless_caching_no(gradus, r):
    c = resp3(gradus)
    c.call("CLIENT", "TRACKING", "on", "OPTOUT")
    c.call("CLIENT", "CACHING", "no")
    c.call("GET", "a")
    r.set("a", "1")
    no_message(c)
    c.call("GET", "a")
    r.set("a", "2")
    assert c.read_reply() == Push([b"invalidate", [b"a"]])


def test_flush_invalidates_everything(gradus, r):
    c = resp3(gradus)
    c.call("CLIENT", "TRACKING", "on")
    c.call("GET", "a")
    r.flushdb()
    reply = c.read_reply()
    assert isinstance(reply, Push) and reply.items[0] == b"invalidate" and is_null(reply.items[1])


def test_table_is_bounded_by_tracking_table_max_keys(gradus, r):
    r.config_set("tracking-table-max-keys", 2)
    assert r.config_get("tracking-table-max-keys") == {"tracking-table-max-keys": "2"}
    c = resp3(gradus)
    c.call("CLIENT", "TRACKING", "on")
    for k in ("k1", "k2", "k3"):
        c.send_command("GET", k)
    # Past the bound a key is invalidated and forgotten (Gradus: the oldest; Redis: any); the
    # push comes after the reply of the read that went past it.
    replies = c.read_replies(4)
    pushes = [x for x in replies if isinstance(x, Push)]
    assert [is_null(x) for x in replies if not isinstance(x, Push)] == [True, True, True]
    assert len(pushes) == 1 and pushes[0].items[0] == b"invalidate"
    assert pushes[0].items[1][0] in (b"k1", b"k2", b"k3")
    assert not isinstance(replies[0], Push)


def test_errors_getredir_and_trackinginfo(gradus):
    c = RawConnection(gradus.host, gradus.port)
    assert c.call("CLIENT", "GETREDIR") == -1
    info = c.call("CLIENT", "TRACKINGINFO")
    assert info == [b"flags", [b"off"], b"redirect", -1, b"prefixes", []]
    def err(*args):
        reply = c.call(*args)
        assert isinstance(reply, Err), reply
        return reply.text
    assert err("CLIENT", "TRACKING", "on", "REDIRECT", "999999") == "ERR The client ID you want redirect to does not exist"
    assert err("CLIENT", "TRACKING", "on", "PREFIX", "a") == "ERR PREFIX option requires BCAST mode to be enabled"
    assert err("CLIENT", "TRACKING", "on", "BCAST", "OPTIN") == "ERR OPTIN and OPTOUT are not compatible with BCAST"
    assert err("CLIENT", "TRACKING", "on", "OPTIN", "OPTOUT") == "ERR You can't specify both OPTIN mode and OPTOUT mode"
    assert err("CLIENT", "TRACKING", "maybe") == "ERR syntax error"
    assert err("CLIENT", "CACHING", "yes").startswith("ERR CLIENT CACHING can be called only when the client is in tracking mode")
    assert err("CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "a", "PREFIX", "ab") == (
        "ERR Prefix 'a' overlaps with another provided prefix 'ab'. Prefixes for a single client must not overlap.")
    c.call("CLIENT", "TRACKING", "on", "OPTIN")
    assert err("CLIENT", "CACHING", "no") == "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode."
    c.call("CLIENT", "CACHING", "yes")
    assert c.call("CLIENT", "TRACKINGINFO") == [
        b"flags", [b"on", b"optin", b"caching-yes"], b"redirect", 0, b"prefixes", []]
    assert c.call("CLIENT", "GETREDIR") == 0
    assert err("CLIENT", "TRACKING", "on", "BCAST").startswith("ERR You can't switch BCAST mode on/off")
    assert c.call("CLIENT", "TRACKING", "off") == Simple(b"OK")
    assert c.call("CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "b", "NOLOOP") == Simple(b"OK")
    assert c.call("CLIENT", "TRACKINGINFO") == [
        b"flags", [b"on", b"bcast", b"noloop"], b"redirect", 0, b"prefixes", [b"b"]]


def test_redis_py_client_side_cache_drops_a_value_another_connection_writes(gradus, monkeypatch):
    cache_mod = pytest.importorskip("redis.cache")
    from redis.connection import CacheProxyConnection

    # redis-py enables its cache only for servers announcing 7.4 or later (a product check, not
    # a protocol need: the tracking it uses is Redis 6's); Gradus announces 7.2.4.
    monkeypatch.setattr(CacheProxyConnection, "MIN_ALLOWED_VERSION", "7.0.0")
    writer = redis_client(gradus, 2)
    writer.set("course:1", "v1")
    cached = redis_client(gradus, 3, cache_config=cache_mod.CacheConfig(), single_connection_client=True)
    assert cached.get("course:1") == b"v1"
    cache = cached.get_cache()
    assert cache.size >= 1
    # A second read is served from the local cache: the server sees no GET for it.
    before = int(writer.info("commandstats").get("cmdstat_get", {}).get("calls", 0))
    assert cached.get("course:1") == b"v1"
    after = int(writer.info("commandstats").get("cmdstat_get", {}).get("calls", 0))
    assert after == before
    writer.set("course:1", "v2")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if cached.get("course:1") == b"v2":
            break
        time.sleep(0.05)
    assert cached.get("course:1") == b"v2"


TENANTS = Path(__file__).resolve().parents[2] / "examples" / "tenants.toml"
PASSWORDS = {"alpha": "alpha-pass", "beta": "beta-pass"}


@pytest.mark.gradus_only
def test_a_tenants_write_never_invalidates_another_tenants_cache(gradus_factory):
    server = gradus_factory("--config", str(TENANTS))
    alpha = RawConnection(server.host, server.port)
    alpha.call("HELLO", "3", "AUTH", "alpha", PASSWORDS["alpha"])
    alpha.call("CLIENT", "TRACKING", "on")
    alpha.call("GET", "shared-name")
    beta = redis_client(server, 2, username="beta", password=PASSWORDS["beta"])
    beta.set("shared-name", "x")
    beta.flushall()
    no_message(alpha)
    alpha_writer = redis_client(server, 2, username="alpha", password=PASSWORDS["alpha"])
    alpha_writer.set("shared-name", "y")
    assert alpha.read_reply() == Push([b"invalidate", [b"shared-name"]])


@pytest.mark.gradus_only
def test_an_evicted_tracked_key_is_invalidated(gradus_factory, tmp_path):
    """An evicted key a connection may cache is invalidated (Redis' performEvictions signals
    the key as modified): every tracked key that `evicted` names was invalidated."""
    from test_tenants import LIMITS, passwd

    config = tmp_path / "evict.toml"
    config.write_text('notify-keyspace-events = "Ee"\n' + LIMITS.format(
        hash=passwd("small-pass"), session_limit="512kb", tenant_limit="64mb", cache_degree="none"))
    server = gradus_factory("--config", str(config))
    cache = redis_client(server, 2, username="small", password="small-pass", db=1)
    tracked = [f"cache:{i}" for i in range(50)]
    for k in tracked:
        cache.set(k, b"x" * 1000)
    t = RawConnection(server.host, server.port)
    t.call("HELLO", "3", "AUTH", "small", "small-pass")
    t.call("SELECT", "1")
    t.call("CLIENT", "TRACKING", "on")
    for k in tracked:
        t.call("GET", k)
    events = cache.pubsub()
    events.subscribe("__keyevent@1__:evicted")
    assert events.get_message(timeout=5)["type"] == "subscribe"
    pipe = cache.pipeline(transaction=False)
    for i in range(50, 2000):
        pipe.set(f"cache:{i}", b"x" * 1000)
    pipe.execute()
    evicted = set()
    while (m := events.get_message(timeout=0.5)) is not None:
        evicted.add(m["data"].decode())
    invalidated = set()
    while True:
        try:
            reply = t.read_reply(timeout=0.5)
        except Exception:  # nothing more within the wait
            break
        assert isinstance(reply, Push) and reply.items[0] == b"invalidate", reply
        invalidated.update(k.decode() for k in reply.items[1])
    evicted_tracked = evicted & set(tracked)
    assert evicted_tracked, "no tracked key was evicted: the test proves nothing"
    assert evicted_tracked <= invalidated

