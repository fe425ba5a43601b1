"""clients/python's redis-py helper (gradus.Gradus): typed lock, session and lease methods."""
from __future__ import annotations

import sys
import threading
import time

import pytest

from servers import REPO_ROOT, redis_client

sys.path.insert(0, str(REPO_ROOT / "clients" / "python"))

from gradus import Gradus, Lease, LockBusy, LockLost, LockTimeout, SessionOpened  # noqa: E402

pytestmark = pytest.mark.gradus_only


@pytest.fixture
def g(gradus):
    client = Gradus(redis_client(gradus))
    yield client
    client.close()


def test_lock_unlock_and_fencing_tokens(g, gradus):
    other = Gradus(redis_client(gradus))
    token = g.lock("job", lease_ms=5000)
    assert isinstance(token, int)
    assert other.lock("job") is None  # try-lock: held
    with pytest.raises(LockLost):
        other.unlock("job", token + 1000)
    g.unlock("job", token)
    assert other.lock("job") > token
    with pytest.raises(LockLost):
        g.unlock("job", token)


def test_locked_context_waits_fifo_and_releases(g):
    order = []

    def holder():
        with g.locked("cron", wait_ms=1000, lease_ms=5000):
            order.append("first")
            time.sleep(0.3)

    t = threading.Thread(target=holder)
    t.start()
    time.sleep(0.1)
    with g.locked("cron", wait_ms=5000) as token:
        order.append("second")
        assert token > 0
    t.join()
    assert order == ["first", "second"]
    with g.locked("cron", wait_ms=0):
        with pytest.raises(LockTimeout):
            with g.locked("cron", wait_ms=50):
                pass


def test_max_waiters_is_lockbusy(g, gradus):
    holder = g.dedicated()
    assert holder.lock("busy") is not None
    with pytest.raises(LockBusy):
        Gradus(redis_client(gradus)).lock("busy", wait_ms=1000, max_waiters=0)
    holder.close()


def test_session_open_close_touch_destroy(g, gradus):
    opened = g.session_open("sess:1", wait_ms=100, lease_ms=5000)
    assert opened == SessionOpened(opened.token, None)
    g.session_close("sess:1", opened.token, b"data-1", ttl=100)
    again = g.session_open("sess:1", wait_ms=100)
    assert again.data == b"data-1" and again.token > opened.token
    assert Gradus(redis_client(gradus)).session_open("sess:1", wait_ms=50) is None  # held: the wait ran out
    with pytest.raises(LockLost):
        g.session_close("sess:1", opened.token, b"stale writer")
    g.session_close("sess:1", again.token)  # unlock without writing
    assert g.client.get("sess:1") == b"data-1"
    assert g.session_touch("sess:1", 500) is True
    assert 400 < g.client.ttl("sess:1") <= 500
    assert g.session_destroy("sess:1") is True
    assert g.session_touch("sess:1", 500) is False


def test_getlease_setlease(g, gradus):
    first = g.getlease("page:1", 5000)
    assert first.won and first.value is None and not first.hit
    second = Gradus(redis_client(gradus)).getlease("page:1", 5000)
    assert second == Lease(None, None, False)
    assert g.setlease("page:1", first.token, b"rendered", ex=60) is True
    assert g.getlease("page:1", 5000) == Lease(b"rendered", None, False)
    assert g.setlease("page:1", first.token, b"late") is False


def test_the_package_installs_with_pip(tmp_path):
    # `pip install ./clients/python` (into a private directory, without touching the environment).
    import subprocess
    target = tmp_path / "site"
    out = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                          str(REPO_ROOT / "clients" / "python")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    check = subprocess.run([sys.executable, "-c", "import gradus, gradus.client, gradus.django; print(gradus.__version__)"],
                           capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": str(target)})
    assert check.stdout.strip() == "0.1.0", check.stderr
    assert (target / "gradus" / "py.typed").exists()
