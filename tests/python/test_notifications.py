"""Keyspace notifications: `notify-keyspace-events` (Redis' letters, validation and the form
CONFIG GET shows), `__keyspace@N__:key` and `__keyevent@N__:event` messages with Redis' event
names per command, `expired`, per SELECT number, and per tenant.

Runs against real Redis too (GRADUS_TARGET=redis), except the tenant test.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from servers import redis_client


def listener(server, pattern="__key*__:*", protocol=2, db=0):
    c = redis_client(server, protocol, db=db)
    p = c.pubsub()
    p.psubscribe(pattern)
    m = p.get_message(timeout=5)
    assert m["type"] == "psubscribe"
    p.owner = c  # the client's pool must outlive this function (its finaliser closes it)
    return p


def drain(p, wait=0.3):
    """Every message that arrives within `wait` seconds of the last one, as (channel, data)."""
    out = []
    while True:
        m = p.get_message(timeout=wait)
        if m is None:
            return out
        if m["type"] in ("pmessage", "message"):
            out.append((m["channel"].decode(), m["data"].decode()))


@pytest.mark.parametrize(
    "given,shown",
    [("", ""), ("KEA", "AKE"), ("Ex", "xE"), ("K$lg", "g$lK"), ("Kg$lshzxetd", "AK"),
     ("AKEm", "AKEm"), ("Kh", "hK"), ("E", "E")],
)
def test_config_shows_classes_as_redis_does(r, given, shown):
    assert r.config_set("notify-keyspace-events", given)
    assert r.config_get("notify-keyspace-events") == {"notify-keyspace-events": shown}


def test_config_rejects_an_unknown_class(r):
    with pytest.raises(redis.ResponseError) as e:
        r.config_set("notify-keyspace-events", "KQ")
    assert str(e.value) == (
        "CONFIG SET failed (possibly related to argument 'notify-keyspace-events') - "
        "Invalid event class character. Use 'Ag$lshzxeKEtmdn'."
    )


def test_nothing_is_published_by_default(gradus, r):
    p = listener(gradus)
    r.set("k", "v")
    assert drain(p) == []


def test_events_of_common_commands(gradus, r):
    r.config_set("notify-keyspace-events", "KEA")
    p = listener(gradus)
    r.set("s", "1")
    r.incr("s")
    r.append("s", "x")
    r.lpush("l", "a")
    r.rpush("l", "b")
    r.lpop("l")
    r.hset("h", "f", "v")
    r.hdel("h", "f")
    r.sadd("set", "m")
    r.srem("set", "nope")
    r.zadd("z", {"m": 1})
    r.zincrby("z", 2, "m")
    r.expire("s", 100)
    r.persist("s")
    r.rename("s", "s2")
    r.delete("s2", "missing")
    r.delete("missing")
    got = drain(p)
    events = [data for channel, data in got if channel.startswith("__keyspace@0__:")]
    assert events == [
        "set", "incrby", "append", "lpush", "rpush", "lpop", "hset", "hdel", "del", "sadd", "zadd",
        "zincr", "expire", "persist", "rename_from", "rename_to", "del",
    ]
    assert ("__keyevent@0__:set", "s") in got
    assert ("__keyspace@0__:l", "lpush") in got
    assert ("__keyevent@0__:rename_to", "s2") in got


def test_keyevent_only_and_class_filter(gradus, r):
    r.config_set("notify-keyspace-events", "E$")
    p = listener(gradus)
    r.set("a", "1")
    r.lpush("l", "x")
    r.hset("h", "f", "v")
    assert drain(p) == [("__keyevent@0__:set", "a")]


def test_channel_names_carry_the_select_number(gradus):
    r = redis_client(gradus, 2, db=3)
    r.config_set("notify-keyspace-events", "K$")
    p = listener(gradus, db=0)
    r.set("k", "v")
    assert drain(p) == [("__keyspace@3__:k", "set")]


@pytest.mark.parametrize("protocol", [2, 3])
def test_expired_is_published(gradus, r, protocol):
    r.config_set("notify-keyspace-events", "Ex")
    p = listener(gradus, "__keyevent@0__:expired", protocol=protocol)
    r.set("short", "v", px=100)
    r.set("lazy", "v", px=50)
    time.sleep(0.2)
    r.get("lazy")  # reclaimed at once by the read, or by active expiry
    deadline = time.monotonic() + 5
    got = []
    while len(got) < 2 and time.monotonic() < deadline:
        got += drain(p, wait=0.5)
    assert sorted(got) == [("__keyevent@0__:expired", "lazy"), ("__keyevent@0__:expired", "short")]


def test_resp3_client_gets_notifications_as_pushes_between_replies(gradus, r):
    r.config_set("notify-keyspace-events", "K$")
    c = redis_client(gradus, 3)
    p = c.pubsub()
    p.subscribe("__keyspace@0__:watched")
    assert p.get_message(timeout=5)["type"] == "subscribe"
    r.set("watched", "1")
    m = p.get_message(timeout=5)
    assert (m["channel"], m["data"]) == (b"__keyspace@0__:watched", b"set")


TENANTS = Path(__file__).resolve().parents[2] / "examples" / "tenants.toml"
PASSWORDS = {"alpha": "alpha-pass", "beta": "beta-pass", "admin": "admin-pass"}


@pytest.mark.gradus_only
def test_notifications_stay_in_their_tenant(gradus_factory):
    server = gradus_factory("--config", str(TENANTS))

    def client(user):
        return redis_client(server, 2, username=user, password=PASSWORDS[user])

    admin = client("admin")
    admin.config_set("notify-keyspace-events", "KEA")
    alpha, beta = client("alpha"), client("beta")
    pa, pb = alpha.pubsub(), beta.pubsub()
    pa.psubscribe("__key*__:*")
    pb.psubscribe("__key*__:*")
    pa.get_message(timeout=5)
    pb.get_message(timeout=5)
    alpha.set("secret", "1")
    assert ("__keyspace@0__:secret", "set") in drain(pa)
    assert drain(pb) == []
    beta.set("other", "1")
    assert drain(pa) == []
    assert ("__keyevent@0__:set", "other") in drain(pb)


@pytest.mark.gradus_only
def test_evicted_is_published_for_a_tenants_lru_cache(gradus_factory, tmp_path):
    from test_tenants import LIMITS, passwd

    config = tmp_path / "evict.toml"
    config.write_text('notify-keyspace-events = "Ee"\n' + LIMITS.format(
        hash=passwd("small-pass"), session_limit="512kb", tenant_limit="64mb", cache_degree="none"))
    server = gradus_factory("--config", str(config))
    cache = redis_client(server, 2, username="small", password="small-pass", db=1)
    p = cache.pubsub()
    p.subscribe("__keyevent@1__:evicted")
    assert p.get_message(timeout=5)["type"] == "subscribe"
    pipe = cache.pipeline(transaction=False)
    for i in range(2000):
        pipe.set(f"cache:{i}", b"x" * 1000)
    pipe.execute()
    evicted = [data for _, data in drain(p, wait=0.5)]
    assert len(evicted) > 500
    assert all(k.startswith("cache:") for k in evicted)
    assert not any(cache.exists(k) for k in evicted[:50])


@pytest.mark.gradus_only
def test_own_pushes_follow_the_reply_as_in_redis_7_2(gradus):
    """Regression: a RESP3 connection's own keyspace events (and invalidations) came before
    its reply and outside EXEC's reply. Redis 7.2 postpones pushes made for the running
    connection until after its reply: the reply, its own invalidations, then the other
    pushes (src/server.c `afterCommand`; 7.0, the reference server here, interleaved them,
    so this test pins 7.2's order on Gradus only)."""
    from resp import RawConnection

    admin = RawConnection(gradus.host, gradus.port)
    admin.call("CONFIG", "SET", "notify-keyspace-events", "KEA")
    c = RawConnection(gradus.host, gradus.port)
    c.call("HELLO", "3")
    c.call("SUBSCRIBE", "__keyspace@0__:k")
    c.send_command("SET", "k", "v")
    assert c.read_available(0.3) == (
        b"+OK\r\n>3\r\n$7\r\nmessage\r\n$16\r\n__keyspace@0__:k\r\n$3\r\nset\r\n")
    c.call("MULTI")
    c.call("SET", "k", "w")
    c.call("DEL", "k")
    c.send_command("EXEC")
    assert c.read_available(0.3) == (
        b"*2\r\n+OK\r\n:1\r\n"
        b">3\r\n$7\r\nmessage\r\n$16\r\n__keyspace@0__:k\r\n$3\r\nset\r\n"
        b">3\r\n$7\r\nmessage\r\n$16\r\n__keyspace@0__:k\r\n$3\r\ndel\r\n")
    c.call("CLIENT", "TRACKING", "on")
    c.call("GET", "k")
    c.send_command("SET", "k", "z")
    assert c.read_available(0.3) == (
        b"+OK\r\n>2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n"
        b">3\r\n$7\r\nmessage\r\n$16\r\n__keyspace@0__:k\r\n$3\r\nset\r\n")


def test_evicted_and_invalidated_under_maxmemory(gradus_factory, redis_server):
    """Regression: evictions under the server-wide `maxmemory` published no `evicted` event
    and invalidated no tracked key (only a tenant's LRU eviction did). Checked on Gradus and
    on redis-server alike: every tracked key `evicted` names was invalidated."""
    from resp import Push, RawConnection

    for server in (gradus_factory("--durability", "none"), redis_server):
        admin = redis_client(server, 2)
        admin.config_set("maxmemory-policy", "allkeys-lru")
        admin.config_set("notify-keyspace-events", "Ee")
        tracked = [f"k:{i}" for i in range(50)]
        for k in tracked:
            admin.set(k, b"x" * 1000)
        t = RawConnection(server.host, server.port)
        t.call("HELLO", "3")
        t.call("CLIENT", "TRACKING", "on")
        for k in tracked:
            t.call("GET", k)
        p = listener(server, "__keyevent@0__:evicted")
        used = int(admin.info("memory")["used_memory"])
        admin.config_set("maxmemory", used + 2_000_000)
        pipe = admin.pipeline(transaction=False)
        for i in range(50, 8000):
            pipe.set(f"k:{i}", b"x" * 1000)
        pipe.execute()
        evicted = {data for _, data in drain(p, wait=0.5)}
        admin.config_set("maxmemory", 0)
        invalidated = set()
        while True:
            try:
                reply = t.read_reply(timeout=0.5)
            except Exception:  # nothing more within the wait
                break
            assert isinstance(reply, Push) and reply.items[0] == b"invalidate", reply
            invalidated.update(k.decode() for k in reply.items[1])
        assert len(evicted) > 100, server
        assert evicted & set(tracked) <= invalidated, server
        assert not any(admin.exists(k) for k in list(evicted)[:50])


def test_config_set_maxmemory_below_the_used_memory_evicts_without_another_command(gradus_factory, redis_server):
    """After `CONFIG SET maxmemory` below what is used, keys are evicted (and `evicted`
    published) with no further command sent, as Redis' eviction timer does; Gradus evicted only
    before the next command, so an idle server stayed over its limit. (Found by Redis' own
    pubsub.tcl: it waits for the event right after the CONFIG SET.)"""
    for server in (gradus_factory("--durability", "none"), redis_server):
        admin = redis_client(server, 2)
        admin.config_set("notify-keyspace-events", "Ee")
        admin.config_set("maxmemory-policy", "allkeys-lru")
        p = listener(server, "__keyevent@0__:evicted")
        admin.set("foo", "bar")
        admin.config_set("maxmemory", 1)
        events = drain(p, wait=1.0)
        admin.config_set("maxmemory", 0)
        admin.config_set("maxmemory-policy", "noeviction")
        assert events == [("__keyevent@0__:evicted", "foo")], (server, events)
        assert admin.dbsize() == 0, server
