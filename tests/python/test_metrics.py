"""The Prometheus endpoint on metrics-port: promtool accepts it, and figures move under load."""
import base64
import http.client
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from servers import free_port, redis_client

pytestmark = pytest.mark.gradus_only

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tenants.toml"


def start(gradus_factory, *extra):
    port = free_port()
    server = gradus_factory("--metrics-port", str(port), *extra)
    server.metrics_port = port
    return server


def fetch(server, path="/metrics", method="GET", headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", server.metrics_port, timeout=10)
    conn.request(method, path, headers=headers or {})
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, resp.headers, body


def samples(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def promtool() -> str:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool is not installed (Debian package prometheus; scripts/install-deps.sh installs it)")
    return tool


def test_promtool_accepts_the_endpoint(gradus_factory, tmp_path):
    tool = promtool()
    server = start(gradus_factory)
    r = redis_client(server)
    r.set("k", "v")
    r.get("k")
    status, headers, body = fetch(server)
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    result = subprocess.run([tool, "check", "metrics"], input=body, capture_output=True, timeout=30)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert result.stdout.decode().strip() == "" and result.stderr.decode().strip() == "", \
        "promtool found problems:\n" + result.stdout.decode() + result.stderr.decode()


def test_counters_and_histograms_move_under_load(gradus_factory):
    server = start(gradus_factory, "--durability", "strict")
    before = samples(fetch(server)[2].decode())
    r = redis_client(server)
    for i in range(200):
        r.set(f"key:{i}", "x" * 100)
    for i in range(100):
        r.get(f"key:{i}")
    r.execute_command("LOCK", "sess", "WAIT", "0")
    after = samples(fetch(server)[2].decode())

    def delta(name):
        return after.get(name, 0) - before.get(name, 0)

    assert delta('gradus_commands_total{family="string"}') == 300
    assert delta('gradus_command_duration_seconds_count{family="string"}') == 300
    assert delta('gradus_command_duration_seconds_bucket{family="string",le="+Inf"}') == 300
    assert delta('gradus_command_duration_seconds_sum{family="string"}') > 0
    assert delta("gradus_log_fsync_duration_seconds_count") >= 1
    assert delta("gradus_log_group_commit_batch_records_count") >= 1
    assert delta("gradus_log_group_commit_batch_records_sum") >= 200
    assert after["gradus_log_last_lsn"] >= 200
    assert 'gradus_keyspace_keys{tenant="default",keyspace="0"}' in after
    assert after['gradus_keyspace_keys{tenant="default",keyspace="0"}'] == 200
    assert after['gradus_keyspace_memory_bytes{tenant="default",keyspace="0"}'] > 200 * 100
    assert delta('gradus_lock_grants_total{waited="no"}') == 1
    assert after['gradus_connected_clients{tenant="default"}'] >= 1
    # Cumulative buckets never decrease with le.
    buckets = sorted(
        (float(m.group(1)), v) for k, v in after.items()
        if (m := re.match(r'gradus_command_duration_seconds_bucket\{family="string",le="([0-9.e-]+)"\}', k))
    )
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)


def test_only_get_and_head_of_known_paths(gradus_factory):
    server = start(gradus_factory)
    assert fetch(server, "/nope")[0] == 404
    status, headers, _ = fetch(server, "/metrics", method="POST")
    assert status == 405 and headers["Allow"] == "GET, HEAD"
    assert fetch(server, "/", method="PUT")[0] == 405
    status, headers, body = fetch(server, "/metrics", method="HEAD")
    assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0
    # A page that rebinds its DNS name to 127.0.0.1 sends its own Host: refused.
    assert fetch(server, "/metrics", headers={"Host": "attacker.example"})[0] == 421


def test_off_by_default(gradus):
    r = redis_client(gradus)
    assert r.execute_command("CONFIG", "GET", "metrics-port") == [b"metrics-port", b"0"]
    assert r.execute_command("CONFIG", "GET", "metrics-bind") == [b"metrics-bind", b"127.0.0.1"]


def test_basic_auth_with_an_admin_user_when_auth_is_on(gradus_factory):
    server = start(gradus_factory, "--config", str(EXAMPLE))

    def auth(user, password):
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        return {"Authorization": f"Basic {token}"}

    status, headers, _ = fetch(server)
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
    assert fetch(server, headers=auth("admin", "wrong"))[0] == 401
    assert fetch(server, headers=auth("alpha", "alpha-pass"))[0] == 401, "not an admin"
    status, _, body = fetch(server, headers=auth("admin", "admin-pass"))
    assert status == 200 and b'gradus_tenant_memory_bytes{tenant="beta"}' in body


def test_lock_waits_hand_overs_and_cap_rejections_are_measured(gradus_factory):
    import threading
    import time

    server = start(gradus_factory, "--latency-monitor-threshold", "20")
    holder = redis_client(server, single_connection_client=True)
    waiter = redis_client(server, single_connection_client=True)
    third = redis_client(server, single_connection_client=True)
    token = holder.execute_command("LOCK", "sess:1", "WAIT", "0")
    got = {}
    t = threading.Thread(target=lambda: got.setdefault(
        "token", waiter.execute_command("LOCK", "sess:1", "WAIT", "5000", "MAXWAITERS", "1")))
    t.start()
    time.sleep(0.2)
    with pytest.raises(Exception, match="LOCKBUSY"):
        third.execute_command("LOCK", "sess:1", "WAIT", "5000", "MAXWAITERS", "1")
    holder.execute_command("UNLOCK", "sess:1", token)
    t.join(10)
    assert got.get("token", 0) > token
    m = samples(fetch(server)[2].decode())
    assert m["gradus_lock_waits_total"] == 1
    assert m["gradus_lock_waiter_cap_rejections_total"] == 1
    assert m['gradus_lock_grants_total{waited="yes"}'] == 1
    assert m["gradus_lock_wait_seconds_count"] == 1
    assert m["gradus_lock_wait_seconds_sum"] >= 0.15
    assert m["gradus_lock_handover_seconds_count"] == 1
    # The wait (about 200 ms) passed latency-monitor-threshold: a lock-wait event.
    events = {e[0]: e for e in holder.execute_command("LATENCY", "LATEST")}
    assert b"lock-wait" in events and events[b"lock-wait"][2] >= 150
