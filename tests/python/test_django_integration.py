"""clients/python's Django backends in a real Django project (tests/python/django_project) served by
`manage.py runserver` (a threaded WSGI server), against Gradus.

- 20 concurrent requests of one user each increment a session counter: with the Gradus engine
  (session locked per request) it ends at 20; with Django's stock cache session engine on the same
  server it does not (writes are lost), and the Gradus engine unlocked loses them too.
- clear() empties only its own tenant's cache; delete_pattern; get_or_set computes once per miss.
- Sessions survive a Gradus restart (background durability, clean restart; strict, kill -9).
"""
from __future__ import annotations

import http.cookiejar
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from servers import REPO_ROOT, free_port

django = pytest.importorskip("django", reason="Django not installed (tests/python/requirements.txt)")

PROJECT = Path(__file__).resolve().parent / "django_project"
EXAMPLE_TENANTS = REPO_ROOT / "examples" / "tenants.toml"
CONCURRENT = 20

pytestmark = pytest.mark.gradus_only


class DjangoServer:
    def __init__(self, tmp_path: Path, env: dict):
        self.port = free_port()
        self.log_path = tmp_path / f"django-{self.port}.log"
        full_env = dict(os.environ)
        full_env.update(env)
        full_env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT / "clients" / "python"), str(PROJECT)])
        full_env["DJANGO_SETTINGS_MODULE"] = "testsite.settings"
        self.proc = subprocess.Popen(
            [sys.executable, str(PROJECT / "manage.py"), "runserver", f"127.0.0.1:{self.port}", "--noreload"],
            cwd=PROJECT, env=full_env, stdin=subprocess.DEVNULL,
            stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("runserver exited:\n" + self.log())
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/nothing", timeout=1)
            except urllib.error.HTTPError:
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("runserver did not start:\n" + self.log())

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def browser(self) -> "Browser":
        return Browser(self)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


class Browser:
    """One user: a cookie jar shared by every request (so concurrent requests share the session)."""

    def __init__(self, server: DjangoServer):
        self.server = server
        self.jar = http.cookiejar.CookieJar()

    def get(self, path: str, timeout: float = 60):
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        try:
            with opener.open(f"http://127.0.0.1:{self.server.port}/{path}", timeout=timeout) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def json(self, path: str):
        status, body = self.get(path)
        assert status == 200, (status, body, self.server.log()[-3000:])
        return json.loads(body)


@pytest.fixture
def django_server(tmp_path):
    started = []

    def start(**env):
        server = DjangoServer(tmp_path, env)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def url(server, user=None, password=None, db=0):
    auth = f"{user}:{password}@" if user else ""
    return f"redis://{auth}{server.host}:{server.port}/{db}"


def concurrent_increments(browser: Browser):
    status, body = browser.get("incr")  # creates the session and its cookie
    assert (status, body) == (200, "1"), (status, body, browser.server.log()[-3000:])
    results = [None] * CONCURRENT
    barrier = threading.Barrier(CONCURRENT)

    def one(i):
        barrier.wait()
        results[i] = browser.get("incr")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(CONCURRENT)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert all(r is not None and r[0] == 200 for r in results), (results, browser.server.log()[-3000:])
    status, body = browser.get("show")
    assert status == 200
    return int(body), sorted(int(r[1]) for r in results)


def test_gradus_engine_loses_no_concurrent_session_write(gradus, django_server):
    server = django_server(GRADUS_URL=url(gradus), SESSIONS="gradus")
    final, seen = concurrent_increments(server.browser())
    assert final == CONCURRENT + 1
    assert seen == list(range(2, CONCURRENT + 2))
    import redis
    assert redis.Redis(host=gradus.host, port=gradus.port).execute_command("LOCKS.LIST") == []


def test_django_stock_cache_engine_loses_concurrent_session_writes(gradus, django_server):
    server = django_server(GRADUS_URL=url(gradus), SESSIONS="django-cache")
    final, seen = concurrent_increments(server.browser())
    # Each request read the session before the others wrote it back: increments were lost.
    assert final < CONCURRENT + 1, f"stock engine lost nothing ({final}); the comparison shows nothing"
    assert len(set(seen)) < CONCURRENT


def test_gradus_engine_unlocked_behaves_like_the_stock_engines(gradus, django_server):
    server = django_server(GRADUS_URL=url(gradus), SESSIONS="gradus-unlocked")
    final, _ = concurrent_increments(server.browser())
    assert final < CONCURRENT + 1


def test_login_cycles_the_key_and_logout_deletes_the_session(gradus, django_server):
    import redis
    server = django_server(GRADUS_URL=url(gradus), SESSIONS="gradus")
    b = server.browser()
    assert b.get("incr") == (200, "1")
    old_key = b.get("key")[1]
    status, new_key = b.get("login")
    assert status == 200 and new_key and new_key != old_key
    client = redis.Redis(host=gradus.host, port=gradus.port)
    assert client.exists(f"django.session:{old_key}") == 0
    assert client.exists(f"django.session:{new_key}") == 1
    assert b.get("incr") == (200, "2")  # the data came along to the new key
    assert b.get("logout") == (200, "bye")
    assert client.exists(f"django.session:{new_key}") == 0
    assert b.get("show") == (200, "0")
    assert client.execute_command("LOCKS.LIST") == []


@pytest.mark.parametrize("durability,how", [("background", "restart"), ("strict", "kill")])
def test_sessions_survive_a_gradus_restart(gradus_factory, django_server, durability, how):
    server_g = gradus_factory("--durability", durability)
    server = django_server(GRADUS_URL=url(server_g), SESSIONS="gradus")
    browser = server.browser()
    for i in range(1, 4):
        assert browser.get("incr") == (200, str(i))
    if how == "restart":
        server_g.restart()
    else:
        server_g.crash_restart()
    # The same browser carries on with its session, as if nothing happened.
    assert browser.get("incr") == (200, "4"), server.log()[-3000:]


def test_gradus_unreachable_is_an_error_not_a_new_session(gradus, django_server):
    server = django_server(GRADUS_URL=url(gradus), SESSIONS="gradus")
    browser = server.browser()
    assert browser.get("incr") == (200, "1")
    gradus.stop()
    status, _ = browser.get("incr")
    assert status == 500
    assert "ConnectionError" in server.log() or "Connection refused" in server.log()
    gradus.start()
    # Nothing was lost or replaced by an empty session: the count goes on.
    assert browser.get("incr") == (200, "2")


@pytest.fixture
def tenants(gradus_factory):
    return gradus_factory("--config", str(EXAMPLE_TENANTS))


def test_cache_clear_empties_only_its_own_tenant(tenants, django_server):
    server = django_server(GRADUS_URL=url(tenants, "alpha", "alpha-pass", 0),
                           GRADUS_CACHE_A=url(tenants, "alpha", "alpha-pass", 1),
                           GRADUS_CACHE_B=url(tenants, "beta", "beta-pass", 1))
    b = server.browser()
    for alias in ("alpha", "beta"):
        for key in ("course:1", "course:2", "lang:en"):
            b.json(f"cache/{alias}/set?key={key}&value=" + urllib.request.quote(json.dumps({alias: key})))
    b.json("cache/alpha/clear")
    assert b.json("cache/alpha/get_many?key=course:1&key=lang:en")["values"] == {}
    assert b.json("cache/beta/get_many?key=course:1&key=lang:en")["values"] == {
        "course:1": {"beta": "course:1"}, "lang:en": {"beta": "lang:en"}}
    # Sessions of the same tenant live in another keyspace: the cache purge does not touch them.
    assert b.get("incr") == (200, "1")
    b.json("cache/alpha/clear")
    assert b.get("incr") == (200, "2")


def test_cache_delete_pattern_multiget_ttl_and_incr(gradus, django_server):
    server = django_server(GRADUS_URL=url(gradus, db=0), GRADUS_CACHE_A=url(gradus, db=1))
    b = server.browser()
    for key in ("views.a", "views.b", "viewsx", "other.c"):
        b.json(f"cache/alpha/set?key={key}&value=1")
    assert b.json("cache/alpha/delete_pattern?pattern=views.*")["deleted"] == 2
    assert b.json("cache/alpha/delete_pattern?pattern=v?ewsx")["deleted"] == 1
    assert b.json("cache/alpha/get_many?key=views.a&key=viewsx&key=other.c")["values"] == {"other.c": 1}
    assert b.json("cache/alpha/incr?key=other.c")["value"] == 2
    b.json("cache/alpha/set?key=short&value=5&timeout=1")
    assert b.json("cache/alpha/get?key=short")["value"] == 5
    time.sleep(2.1)
    assert b.json("cache/alpha/get?key=short")["value"] is None


def test_cache_get_or_set_computes_once_per_miss_under_a_stampede(gradus, django_server):
    server = django_server(GRADUS_URL=url(gradus, db=0), GRADUS_CACHE_A=url(gradus, db=1))
    b = server.browser()
    results = [None] * 10
    barrier = threading.Barrier(10)

    def one(i):
        barrier.wait()
        results[i] = b.json("cache/alpha/get_or_set?key=expensive")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(r == {"value": {"expensive": True}} for r in results), results
    # One request computed the value; the nine others waited on its lease and read it.
    assert b.json("cache/alpha/computed")["computed"] == 1
