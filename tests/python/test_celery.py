"""Celery on Gradus: a real `celery worker` process with Gradus as broker (lists, blocking pops,
MULTI, sorted sets for acknowledgements) and as result backend (results in keys, waited for by
pub/sub), running tasks to completion; a task queued while no worker runs survives a restart of
Gradus at its default durability (`background`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("celery")

APPS = Path(__file__).resolve().parent / "apps"


def _env(server):
    env = dict(os.environ)
    env["GRADUS_CELERY_URL"] = f"redis://{server.host}:{server.port}"
    env["PYTHONPATH"] = str(APPS) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _worker(server, tmp_path) -> subprocess.Popen:
    log = open(tmp_path / "worker.log", "wb")
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "celery_app", "worker", "--pool=solo",
         "--concurrency=1", "--without-gossip", "--without-mingle", "-l", "info"],
        stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, env=_env(server),
    )


def _stop(worker: subprocess.Popen) -> None:
    if worker.poll() is None:
        worker.terminate()
        try:
            worker.wait(15)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def _client(server):
    """The app in this process, pointed at `server` (imported afresh for each URL)."""
    os.environ["GRADUS_CELERY_URL"] = f"redis://{server.host}:{server.port}"
    sys.path.insert(0, str(APPS))
    try:
        sys.modules.pop("celery_app", None)
        import celery_app
    finally:
        sys.path.remove(str(APPS))
    return celery_app


def test_a_celery_worker_runs_tasks_to_completion(gradus, tmp_path):
    app = _client(gradus)
    worker = _worker(gradus, tmp_path)
    try:
        results = [app.add.delay(i, 100) for i in range(10)]
        # result.get() waits on the backend's pub/sub channel for the task's result.
        assert [r.get(timeout=60) for r in results] == [100 + i for i in range(10)], (
            (tmp_path / "worker.log").read_text())
        failed = app.fail.delay()
        with pytest.raises(ValueError, match="on purpose"):
            failed.get(timeout=60)
        assert failed.state == "FAILURE"
        chained = (app.add.s(1, 2) | app.add.s(10)).delay()
        assert chained.get(timeout=60) == 13
    finally:
        _stop(worker)
        app.app.close()


@pytest.mark.gradus_only  # the stand-in redis-server runs without persistence
def test_a_queued_task_survives_a_gradus_restart(gradus, tmp_path):
    app = _client(gradus)
    queued = app.add.delay(20, 22)
    # Nothing runs it yet; Gradus restarts (SIGTERM, then the same directory) with it queued.
    time.sleep(0.1)
    app.app.close()
    gradus.restart()
    app = _client(gradus)
    worker = _worker(gradus, tmp_path)
    try:
        result = app.app.AsyncResult(queued.id)
        assert result.get(timeout=60) == 42, (tmp_path / "worker.log").read_text()
    finally:
        _stop(worker)
        app.app.close()
