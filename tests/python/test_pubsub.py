"""Pub/sub: redis-py in RESP2 and RESP3, raw protocol (subscribed-mode rules, PING's shape,
RESP3 pushes mixed with replies), shard channels, introspection, phpredis `subscribe`, tenant
isolation, and a slow subscriber cut off at its output limit with the server's memory bounded.

Every test but the tenant one runs against real Redis too (GRADUS_TARGET=redis).
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
import redis

from resp import Err, RawConnection, Simple, encode_command
from servers import redis_client


def wait_message(p, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = p.get_message(timeout=0.1)
        if m is not None:
            return m
    raise AssertionError("no message within the timeout")


def wait_numsub(client, channel, n, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if dict(client.pubsub_numsub(channel)).get(channel, 0) == n:
            return
        time.sleep(0.02)
    raise AssertionError(f"{channel!r} never had {n} subscribers")


@pytest.mark.parametrize("protocol", [2, 3])
def test_redis_py_subscribe_publish_and_patterns(gradus, protocol):
    sub = redis_client(gradus, protocol)
    pub = redis_client(gradus, protocol)
    p = sub.pubsub()
    p.subscribe("news", "sport")
    assert wait_message(p) == {"type": "subscribe", "pattern": None, "channel": b"news", "data": 1}
    assert wait_message(p) == {"type": "subscribe", "pattern": None, "channel": b"sport", "data": 2}
    p.psubscribe("new*")
    assert wait_message(p)["type"] == "psubscribe"
    assert pub.publish("news", "hello") == 2
    assert wait_message(p) == {"type": "message", "pattern": None, "channel": b"news", "data": b"hello"}
    assert wait_message(p) == {"type": "pmessage", "pattern": b"new*", "channel": b"news", "data": b"hello"}
    assert pub.publish("nobody", "x") == 0
    assert sorted(pub.pubsub_channels()) == [b"news", b"sport"]
    assert pub.pubsub_channels("s*") == [b"sport"]
    assert pub.pubsub_numsub("news", "nobody") == [(b"news", 1), (b"nobody", 0)]
    assert pub.pubsub_numpat() == 1
    p.unsubscribe("news")
    m = wait_message(p)
    assert (m["type"], m["channel"], m["data"]) == ("unsubscribe", b"news", 2)
    p.punsubscribe()
    m = wait_message(p)
    assert (m["type"], m["channel"], m["data"]) == ("punsubscribe", b"new*", 1)
    assert pub.publish("news", "again") == 0
    assert pub.publish("sport", "goal") == 1
    assert wait_message(p)["data"] == b"goal"
    p.close()
    wait_numsub(pub, b"sport", 0)
    assert pub.pubsub_channels() == []


def test_redis_py_pubsub_thread_with_handler(gradus):
    sub = redis_client(gradus, 3)
    got = []
    done = threading.Event()

    def handler(message):
        got.append(message["data"])
        if len(got) == 100:
            done.set()

    p = sub.pubsub()
    p.subscribe(**{"jobs": handler})
    thread = p.run_in_thread(sleep_time=0.01)
    try:
        pub = redis_client(gradus, 2)
        wait_numsub(pub, b"jobs", 1)
        for i in range(100):
            pub.publish("jobs", str(i))
        assert done.wait(10)
        assert got == [str(i).encode() for i in range(100)]
    finally:
        thread.stop()
        thread.join(5)


def test_resp2_subscribed_mode_allows_only_subscription_commands(gradus):
    c = RawConnection(gradus.host, gradus.port)
    c.send_command("SUBSCRIBE", "a")
    assert c.read_reply() == [b"subscribe", b"a", 1]
    reply = c.call("GET", "k")
    assert isinstance(reply, Err)
    assert reply.text == (
        "ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET "
        "are allowed in this context"
    )
    reply = c.call("CLIENT", "LIST")
    assert reply.text.startswith("ERR Can't execute 'client|list': only")
    # PING answers as a message-shaped array while subscribed in RESP2.
    assert c.call("PING") == [b"pong", b""]
    assert c.call("PING", "hi") == [b"pong", b"hi"]
    c.send_command("UNSUBSCRIBE")
    assert c.read_reply() == [b"unsubscribe", b"a", 0]
    assert c.call("PING") == Simple(b"PONG")
    assert c.call("SET", "k", "v") == Simple(b"OK")


def test_unsubscribe_with_no_subscription_answers_null_channel(gradus):
    c = RawConnection(gradus.host, gradus.port)
    c.send_command("UNSUBSCRIBE")
    assert c.read_raw_reply() == b"*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n"
    c.send_command("PUNSUBSCRIBE")
    assert c.read_raw_reply() == b"*3\r\n$12\r\npunsubscribe\r\n$-1\r\n:0\r\n"
    c.send_command("SUNSUBSCRIBE")
    assert c.read_raw_reply() == b"*3\r\n$12\r\nsunsubscribe\r\n$-1\r\n:0\r\n"


def test_reset_leaves_subscribed_mode(gradus):
    c = RawConnection(gradus.host, gradus.port)
    c.send_command("SUBSCRIBE", "a", "b")
    c.read_replies(2)
    assert c.call("RESET") == Simple(b"RESET")
    assert c.call("PING") == Simple(b"PONG")
    pub = redis_client(gradus, 2)
    assert pub.publish("a", "x") == 0


def test_resp3_pushes_mix_with_replies(gradus):
    c = RawConnection(gradus.host, gradus.port)
    c.call("HELLO", "3")
    c.send_command("SUBSCRIBE", "chan")
    assert c.read_raw_reply() == b">3\r\n$9\r\nsubscribe\r\n$4\r\nchan\r\n:1\r\n"
    # Any command is allowed in RESP3 while subscribed.
    assert c.call("SET", "k", "v") == Simple(b"OK")
    assert c.call("GET", "k") == b"v"
    assert c.call("PING") == Simple(b"PONG")
    pub = redis_client(gradus, 2)
    assert pub.publish("chan", "m1") == 1
    assert c.read_raw_reply() == b">3\r\n$7\r\nmessage\r\n$4\r\nchan\r\n$2\r\nm1\r\n"
    # A message to itself: Redis 7.2 postpones it after the reply of the PUBLISH that sent it
    # (src/networking.c: pushes for the running client wait for `afterCommand`); 7.0 wrote it
    # first. The test follows the version the server announces.
    c.send_command("PUBLISH", "chan", "self")
    message = b">3\r\n$7\r\nmessage\r\n$4\r\nchan\r\n$4\r\nself\r\n"
    version = tuple(int(x) for x in pub.info("server")["redis_version"].split(".")[:2])
    if version >= (7, 2):
        assert c.read_reply() == 1
        assert c.read_raw_reply() == message
    else:
        assert c.read_raw_reply() == message
        assert c.read_reply() == 1


def test_shard_channels(gradus):
    sub = RawConnection(gradus.host, gradus.port)
    sub.send_command("SSUBSCRIBE", "s1", "s2")
    assert sub.read_replies(2) == [[b"ssubscribe", b"s1", 1], [b"ssubscribe", b"s2", 2]]
    pub = redis_client(gradus, 2)
    assert pub.execute_command("SPUBLISH", "s1", "hi") == 1
    assert sub.read_reply() == [b"smessage", b"s1", b"hi"]
    assert pub.publish("s1", "not a shard message") == 0
    assert sorted(pub.execute_command("PUBSUB", "SHARDCHANNELS")) == [b"s1", b"s2"]
    assert pub.execute_command("PUBSUB", "SHARDNUMSUB", "s1", "zz") == [b"s1", 1, b"zz", 0]
    # Shard subscriptions are counted apart from channels and patterns.
    sub.send_command("SUBSCRIBE", "c")
    assert sub.read_reply() == [b"subscribe", b"c", 1]
    sub.send_command("SUNSUBSCRIBE", "s1")
    assert sub.read_reply() == [b"sunsubscribe", b"s1", 1]


def test_pubsub_help_and_errors(gradus):
    c = redis_client(gradus, 2)
    help_lines = c.execute_command("PUBSUB", "HELP")
    assert help_lines[0].startswith(b"PUBSUB <subcommand>")
    with pytest.raises(redis.ResponseError, match=re.escape("unknown subcommand 'NOPE'. Try PUBSUB HELP.")):
        c.execute_command("PUBSUB", "NOPE")
    with pytest.raises(redis.ResponseError, match=re.escape("wrong number of arguments for 'pubsub|numpat' command")):
        c.execute_command("PUBSUB", "NUMPAT", "x")
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'subscribe' command"):
        c.execute_command("SUBSCRIBE")
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'publish' command"):
        c.execute_command("PUBLISH", "a")


def test_client_list_shows_subscriptions(gradus):
    sub = RawConnection(gradus.host, gradus.port)
    sub.send_command("CLIENT", "SETNAME", "listener")
    sub.read_reply()
    sub.send_command("SUBSCRIBE", "a", "b")
    sub.send_command("PSUBSCRIBE", "p*")
    sub.read_replies(3)
    c = redis_client(gradus, 2)
    line = next(l for l in c.execute_command("CLIENT", "LIST").decode().splitlines() if "name=listener" in l)
    assert " flags=P " in line and " sub=2 psub=1 ssub=0 " in line
    pubsub_only = c.execute_command("CLIENT", "LIST", "TYPE", "pubsub").decode()
    assert "name=listener" in pubsub_only


def test_subscribe_inside_multi(gradus):
    c = RawConnection(gradus.host, gradus.port)
    c.call("MULTI")
    assert c.call("SUBSCRIBE", "t") == Simple(b"QUEUED")
    assert c.call("EXEC") == [[b"subscribe", b"t", 1]]
    pub = redis_client(gradus, 2)
    assert pub.publish("t", "x") == 1
    assert c.read_reply() == [b"message", b"t", b"x"]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_slow_subscriber_is_disconnected_at_the_limit_and_memory_stays_bounded(gradus):
    admin = redis_client(gradus, 2)
    assert admin.config_set("client-output-buffer-limit", "pubsub 4mb 2mb 1")
    assert admin.config_get("client-output-buffer-limit")["client-output-buffer-limit"].endswith(
        "pubsub 4194304 2097152 1"
    )
    # A subscriber that never reads, with a small receive buffer.
    slow = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect((gradus.host, gradus.port))
    slow.sendall(encode_command("SUBSCRIBE", "firehose"))
    wait_numsub(admin, b"firehose", 1)
    pid = gradus.proc.pid
    before = rss_kib(pid)
    payload = b"x" * 16384
    pipe = admin.pipeline(transaction=False)
    sent = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for _ in range(64):
            pipe.publish("firehose", payload)
        receivers = pipe.execute()
        sent += len(receivers)
        if receivers[-1] == 0:
            break
    else:
        raise AssertionError("the slow subscriber was never disconnected")
    # It was cut off well before everything sent could have been buffered for it.
    assert sent * len(payload) < 200 * 1024 * 1024
    wait_numsub(admin, b"firehose", 0)
    after = rss_kib(pid)
    assert after - before < 64 * 1024, (before, after)
    slow.settimeout(5)
    with pytest.raises((ConnectionResetError, socket.timeout, OSError)):
        while slow.recv(1 << 20):
            pass
        raise ConnectionResetError("closed")
    slow.close()
    assert admin.ping()


def test_publishing_never_waits_for_a_slow_subscriber(gradus):
    slow = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect((gradus.host, gradus.port))
    slow.sendall(encode_command("SUBSCRIBE", "c"))
    fast = redis_client(gradus, 2).pubsub()
    fast.subscribe("c")
    wait_message(fast)
    pub = redis_client(gradus, 2)
    wait_numsub(pub, b"c", 2)
    start = time.monotonic()
    for i in range(200):
        pub.publish("c", b"y" * 1000)
    assert time.monotonic() - start < 10
    got = 0
    while got < 200:
        m = wait_message(fast)
        assert m["type"] == "message"
        got += 1
    slow.close()


PHP_SUBSCRIBER = r"""<?php
$r = new Redis();
$r->connect('127.0.0.1', (int)$argv[1]);
$r->setOption(Redis::OPT_READ_TIMEOUT, 10);
$got = [];
$r->subscribe(['php-chan'], function ($redis, $channel, $message) use (&$got) {
    $got[] = "$channel:$message";
    if ($message === 'stop') {
        echo implode(",", $got), "\n";
        exit(0);
    }
});
"""


def php_available() -> bool:
    if shutil.which("php") is None:
        return False
    out = subprocess.run(["php", "-m"], capture_output=True, text=True).stdout.lower()
    return "redis" in out.split()


@pytest.mark.skipif(not php_available(), reason="php-cli with php-redis not installed")
def test_phpredis_subscribe(gradus, tmp_path):
    script = tmp_path / "sub.php"
    script.write_text(PHP_SUBSCRIBER)
    proc = subprocess.Popen(["php", str(script), str(gradus.port)], stdout=subprocess.PIPE, text=True)
    try:
        pub = redis_client(gradus, 2)
        wait_numsub(pub, b"php-chan", 1, timeout=10)
        for m in ["one", "two", "stop"]:
            assert pub.publish("php-chan", m) == 1
        out, _ = proc.communicate(timeout=15)
        assert out.strip() == "php-chan:one,php-chan:two,php-chan:stop"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


TENANTS = Path(__file__).resolve().parents[2] / "examples" / "tenants.toml"
PASSWORDS = {"alpha": "alpha-pass", "beta": "beta-pass", "admin": "admin-pass"}


def tenant_client(server, user, protocol=2):
    return redis_client(server, protocol, username=user, password=PASSWORDS[user])


@pytest.mark.gradus_only
@pytest.mark.parametrize("protocol", [2, 3])
def test_a_tenant_never_hears_another_tenants_channels(gradus_factory, protocol):
    server = gradus_factory("--config", str(TENANTS))
    alpha, beta, admin = (tenant_client(server, u, protocol) for u in ("alpha", "beta", "admin"))
    a = alpha.pubsub()
    a.subscribe("news")
    a.psubscribe("*")
    wait_message(a)
    wait_message(a)
    b = beta.pubsub()
    b.psubscribe("*")
    wait_message(b)
    # beta publishes on a channel of the same name: only beta's own pattern hears it.
    assert beta.publish("news", "from beta") == 1
    m = wait_message(b)
    assert (m["type"], m["data"]) == ("pmessage", b"from beta")
    assert a.get_message(timeout=0.3) is None
    assert alpha.publish("news", "from alpha") == 2
    assert wait_message(a)["data"] == b"from alpha"
    assert wait_message(a)["data"] == b"from alpha"
    assert b.get_message(timeout=0.3) is None
    # Introspection is per tenant; the admin sees every tenant's.
    assert beta.pubsub_channels() == []
    assert beta.pubsub_numsub("news") == [(b"news", 0)]
    assert beta.pubsub_numpat() == 1
    assert alpha.pubsub_channels() == [b"news"]
    assert admin.pubsub_channels() == [b"news"]
    assert admin.pubsub_numpat() == 2


def test_monitor_shows_commands_in_redis_line_format(gradus):
    mon = RawConnection(gradus.host, gradus.port)
    assert mon.call("MONITOR") == Simple(b"OK")
    c = redis_client(gradus, 2, db=2)
    c.set("k", 'v "quoted"\n')
    deadline = time.monotonic() + 5
    lines = []
    while time.monotonic() < deadline:
        line = mon.read_reply()
        lines.append(line.value.decode())
        if '"set"' in lines[-1].lower():
            break
    assert re.fullmatch(
        r'\d+\.\d{6} \[2 127\.0\.0\.1:\d+\] "SET" "k" "v \\"quoted\\"\\n"', lines[-1]
    ), lines


@pytest.mark.gradus_only
def test_monitor_is_for_admins_and_sees_its_own_tenant(gradus_factory):
    server = gradus_factory("--config", str(TENANTS))
    alpha = tenant_client(server, "alpha")
    with pytest.raises(redis.ResponseError, match="no permissions to run the 'monitor' command"):
        alpha.execute_command("MONITOR")
    mon = RawConnection(server.host, server.port)
    mon.call("AUTH", "admin", PASSWORDS["admin"])
    assert mon.call("MONITOR") == Simple(b"OK")
    # The admin works in the first tenant (alpha): beta's commands are not shown.
    tenant_client(server, "beta").set("beta-key", "1")
    alpha.set("alpha-key", "1")
    lines = []
    while not any("alpha-key" in l for l in lines):
        lines.append(mon.read_reply().value.decode())
    assert not any("beta-key" in l for l in lines)
    # Credentials are never shown (AUTH and HELLO appear as Redis shows them, redacted, and
    # only to their own tenant's monitors).
    assert not any(p in l for l in lines for p in PASSWORDS.values())
    assert not any("beta" in l for l in lines)


def test_pubsub_channels_with_extra_arguments_words_the_error_as_redis(gradus):
    """Regression: CHANNELS/SHARDCHANNELS (arity -2) with two patterns answered the arity
    error of NUMPAT; Redis' handler says 'unknown subcommand or wrong number of arguments'."""
    c = RawConnection(gradus.host, gradus.port)
    assert c.call("PUBSUB", "CHANNELS", "a", "b").text == (
        "ERR unknown subcommand or wrong number of arguments for 'CHANNELS'. Try PUBSUB HELP.")
    assert c.call("PUBSUB", "shardchannels", "a", "b").text == (
        "ERR unknown subcommand or wrong number of arguments for 'shardchannels'. Try PUBSUB HELP.")
