"""clients/moodle (local_gradus: session handler and lock factory; cachestore_gradus) in a harness
that declares Moodle 4.0-4.4's own base classes and interfaces and loads the plugins the way
Moodle does (tests/python/moodle_harness): version.php, lang strings, settings.php, privacy
providers, classes through a core_component-style loader, the store's lib.php and form.

The session handler runs under `php -S` with 8 workers (20 concurrent pages of one session end at
20); the lock factory blocks server-side and releases when its process dies; the cache store
serves both modes with TTL, multi-get, definition purge (PURGE), store purge scoped to its
tenant (FLUSHDB), and one regeneration per miss under a stampede (leases)."""
from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from php_server import PhpServer, php_with_redis
from servers import REPO_ROOT, redis_client

pytestmark = [
    pytest.mark.gradus_only,
    pytest.mark.skipif(not php_with_redis(), reason="php-cli with php-redis not installed"),
]

HARNESS = Path(__file__).resolve().parent / "moodle_harness"
EXAMPLE_TENANTS = REPO_ROOT / "examples" / "tenants.toml"


def php(script: str, *args: str, env: dict = None, timeout: float = 60) -> dict:
    out = subprocess.run(["php", str(HARNESS / script), *args], capture_output=True, text=True,
                         timeout=timeout, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


def settings_file(tmp_path: Path, server) -> Path:
    path = tmp_path / "moodle-settings.json"
    path.write_text(json.dumps({
        "host": server.host, "port": server.port,
        "server": f"tcp://{server.host}:{server.port}",
        "stores": {
            tenant: {"server": f"{server.host}:{server.port}", "username": tenant, "password": f"{tenant}-pass",
                     "database": 1, "prefix": "mdl_", "leasems": 5000, "leasewaitms": 3000}
            for tenant in ("alpha", "beta")
        },
    }))
    return path


def test_plugins_load_as_moodle_loads_them():
    out = php("plugins.php")
    for component in ("local_gradus", "cachestore_gradus"):
        version = out[component]["version"]
        assert version["component"] == component
        assert version["version"] >= 2026112500 and version["requires"] == 2022041900
    assert out["cachestore_gradus"]["version"]["dependencies"] == {"local_gradus": 2026112500}
    assert out["local_gradus"]["pluginname"] == "Gradus sessions and locks"
    assert "Session handler in use: \\local_gradus\\session\\handler" in out["local_gradus"]["settings"]["local_gradus/status"]
    assert out["cachestore_gradus"]["settings"] == [
        "cachestore_gradus/test_server", "cachestore_gradus/test_username",
        "cachestore_gradus/test_password", "cachestore_gradus/test_database"]
    assert out["classes"] == {"handler": True, "lock_factory": True, "privacy_local": True,
                              "privacy_local_reason": out["classes"]["privacy_local_reason"],
                              "privacy_cachestore": ["gradus"]}
    store = out["store"]
    assert store["is_store"] and store["application"] and store["session"] and not store["request"]
    assert store["native_ttl"] and store["modes"] == 3
    assert store["interfaces"] == ["cache_is_configurable", "cache_is_key_aware", "cache_is_searchable"]
    assert set(out["form"]) == {"server", "username", "password", "database", "prefix", "leasems", "leasewaitms"}
    assert all("help" in field for field in out["form"].values())
    assert out["config"] == {"server": "127.0.0.1:6379", "username": "alpha", "password": "pw", "database": 1,
                             "prefix": "mdl_", "leasems": 5000, "leasewaitms": 500}
    assert out["form_data"] == out["config"]
    assert out["unreachable"]["ready"] is False
    assert "Gradus is unreachable" in out["unreachable"]["warnings"][0]


# --- session handler -------------------------------------------------------------------------


@pytest.fixture
def moodle_php(gradus, tmp_path):
    server = PhpServer(tmp_path, json.loads(settings_file(tmp_path, gradus).read_text()),
                       docroot=HARNESS / "www", cookie="MoodleSession")
    yield server
    server.stop()


def test_session_handler_twenty_concurrent_pages_end_at_twenty(gradus, moodle_php):
    sid = "m" + uuid.uuid4().hex
    results = [None] * 20
    barrier = threading.Barrier(20)

    def one(i):
        barrier.wait()
        results[i] = moodle_php.get("session.php", sid)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert all(r and r[0] == 200 for r in results), (results, moodle_php.log())
    assert sorted(json.loads(r[1])["n"] for r in results) == list(range(1, 21))
    status, body, _ = moodle_php.get("session.php?op=read", sid)
    assert json.loads(body) == {"n": 20, "exists": True}
    client = redis_client(gradus)
    assert client.ttl(f"mdl_sess:{sid}") > 7000  # $CFG->sessiontimeout
    assert client.execute_command("LOCKS.LIST") == []


def test_session_lock_timeout_is_moodles_sessioncannotobtainlock(gradus, moodle_php):
    sid = "m" + uuid.uuid4().hex
    holder = subprocess.Popen(["php", str(HARNESS / "hold_session.php"), sid], env=moodle_php.env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        status, body, seconds = moodle_php.get("session.php?timeout=1", sid)
        assert status == 503, body
        assert json.loads(body)["error"] == "sessioncannotobtainlock"
        assert 0.9 < seconds < 5
        # The holder dies: the next page gets the session at once.
        holder.send_signal(signal.SIGKILL)
        holder.wait(5)
        status, body, seconds = moodle_php.get("session.php", sid)
        assert status == 200 and seconds < 1.0, (status, body)
    finally:
        holder.kill()
        holder.wait(5)


def test_session_handler_unreachable_is_sessionhandlerproblem(gradus, moodle_php):
    sid = "m" + uuid.uuid4().hex
    assert json.loads(moodle_php.get("session.php", sid)[1])["n"] == 1
    gradus.stop()
    status, body, _ = moodle_php.get("session.php", sid)
    assert status == 503 and json.loads(body)["error"] == "sessionhandlerproblem"
    gradus.start()
    assert json.loads(moodle_php.get("session.php", sid)[1])["n"] == 2


def test_kill_session_and_kill_all_sessions(gradus, tmp_path):
    client = redis_client(gradus)
    for sid in ("a1", "a2", "a3"):
        client.set(f"mdl_sess:{sid}", "x")
    client.set("other:key", "kept")
    script = tmp_path / "kill.php"
    script.write_text(f"""<?php
require '{HARNESS}/bootstrap.php';
$CFG->session_gradus_server = 'tcp://{gradus.host}:{gradus.port}';
$h = new \\local_gradus\\session\\handler();
$h->init();
$out = ['exists' => $h->session_exists('a1')];
$h->kill_session('a1');
$out['after_kill'] = $h->session_exists('a1');
$out['a2'] = $h->session_exists('a2');
$h->kill_all_sessions();
$out['after_kill_all'] = $h->session_exists('a2') || $h->session_exists('a3');
echo json_encode($out);
""")
    out = subprocess.run(["php", str(script)], capture_output=True, text=True, timeout=30)
    assert json.loads(out.stdout) == {"exists": True, "after_kill": False, "a2": True, "after_kill_all": False}, out
    assert client.get("other:key") == b"kept"


# --- lock factory ----------------------------------------------------------------------------


def test_lock_factory_api(gradus, tmp_path):
    out = php("lock.php", "basic", str(settings_file(tmp_path, gradus)))
    assert out == {"available": True, "timeout": True, "auto_release": True, "got": True, "second": False,
                   "other_resource": True, "released": True, "after_release": True, "released_third": True,
                   "unreachable_available": False}


def test_lock_factory_waits_server_side_and_a_dead_holder_frees_it(gradus, tmp_path):
    settings = str(settings_file(tmp_path, gradus))
    holder = subprocess.Popen(["php", str(HARNESS / "lock.php"), "hold", settings, "task"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        # Held: a try with a 1 s timeout gives up after about 1 s.
        out = php("lock.php", "get", settings, "task", "1")
        assert out["got"] is False and 0.9 < out["waited"] < 3
        # A waiter with a long timeout is granted as soon as the holder dies.
        result = {}
        t = threading.Thread(target=lambda: result.update(php("lock.php", "get", settings, "task", "20")))
        t.start()
        time.sleep(0.5)
        holder.send_signal(signal.SIGKILL)
        t.join(30)
        assert result["got"] is True and result["released"] is True
        assert result["waited"] < 2.5
    finally:
        holder.kill()
        holder.wait(5)


# --- cache store -----------------------------------------------------------------------------


@pytest.fixture
def tenants(gradus_factory):
    return gradus_factory("--config", str(EXAMPLE_TENANTS))


def test_cache_store_operations_both_modes_and_ttl(tenants, tmp_path):
    out = php("cache.php", "basic", str(settings_file(tmp_path, tenants)))
    assert out["initialised"] is True and out["miss"] is False
    assert out["set"] is True and out["get"] == {"name": "Maths", "sections": [1, 2, 3]}
    assert out["set_many"] == 3
    assert out["get_many"] == {"a": 1, "b": "two", "c": {"x": 3}, "missing": False}
    assert out["has"] == [True, False, True, False]
    assert out["find_all"] == ["a", "b", "c", "course1"]
    assert out["find_by_prefix"] == ["course1"]
    assert out["delete"] == [True, False] and out["delete_many"] == 2
    assert out["ttl"] is True and out["expired"] is False
    assert out["session_mode"] == "nav"


def test_cache_store_purge_is_scoped_to_definition_and_tenant(tenants, tmp_path):
    out = php("cache.php", "purge", str(settings_file(tmp_path, tenants)))
    after = out["after_definition_purge"]
    assert after["alpha"]["core/string"] == {"k1": False, "k2": False}
    assert after["alpha"]["core/config"] == {"k1": "alpha-core/config-1", "k2": "alpha-core/config-2"}
    assert after["beta"]["core/string"] == {"k1": "beta-core/string-1", "k2": "beta-core/string-2"}
    after = out["after_store_purge"]
    assert after["alpha"]["core/config"] == {"k1": False, "k2": False}
    # The other tenant's cache, same keyspace index, same keys: untouched.
    assert after["beta"]["core/config"] == {"k1": "beta-core/config-1", "k2": "beta-core/config-2"}
    assert after["beta"]["core/string"] == {"k1": "beta-core/string-1", "k2": "beta-core/string-2"}


def test_cache_store_regenerates_once_per_miss_under_a_stampede(tenants, tmp_path):
    settings = str(settings_file(tmp_path, tenants))
    procs = [subprocess.Popen(["php", str(HARNESS / "cache.php"), "stampede", settings],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(10)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert all(json.loads(o[0]) == {"value": "rendered menu"} for o in outs), outs
    client = redis_client(tenants, username="alpha", password="alpha-pass")
    assert client.get("regenerations") == b"1"


# --- coding style ----------------------------------------------------------------------------


def _phpcs_with_moodle_standard():
    """The command of a phpcs that knows the `moodle` standard: `php $MOODLE_PHPCS` (phpcs's
    bin/phpcs with moodle-cs in its installed_paths), else `phpcs` on PATH if it lists moodle."""
    import os
    import shutil
    commands = []
    if os.environ.get("MOODLE_PHPCS"):
        commands.append(["php", os.environ["MOODLE_PHPCS"]])
    if shutil.which("phpcs"):
        commands.append([shutil.which("phpcs")])
    for command in commands:
        if "moodle" in subprocess.run(command + ["-i"], capture_output=True, text=True).stdout:
            return command
    return None


@pytest.mark.skipif(_phpcs_with_moodle_standard() is None,
                    reason="phpcs with moodlehq/moodle-cs not available (set MOODLE_PHPCS); it is not in Debian")
def test_plugins_follow_moodle_coding_style():
    phpcs = _phpcs_with_moodle_standard()
    plugins = REPO_ROOT / "clients" / "moodle"
    paths = [plugins / "cache" / "stores" / "gradus", plugins / "local" / "gradus" / "classes",
             plugins / "local" / "gradus" / "lang", plugins / "local" / "gradus" / "version.php",
             plugins / "local" / "gradus" / "settings.php"]
    out = subprocess.run(phpcs + ["--standard=moodle", "--extensions=php", *map(str, paths)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
