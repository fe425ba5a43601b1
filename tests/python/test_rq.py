"""python-rq, a real job queue, on Gradus: jobs enqueued by one process are run by an `rq worker`
process that waits for them in a blocking pop (BLPOP on the queue lists) and records their
results, statuses and registries in hashes, sets and sorted sets.

RQ 1.11 is pinned (tests/python/requirements.txt): later versions keep job results in Redis
streams, which Gradus does not have yet.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import redis

rq = pytest.importorskip("rq")

from servers import redis_client  # noqa: E402


def _worker(server, tmp_path) -> subprocess.Popen:
    url = f"redis://{server.host}:{server.port}/0"
    log = open(tmp_path / "worker.log", "wb")
    return subprocess.Popen(
        [sys.executable, "-m", "rq.cli", "worker", "--url", url, "--name", "w1", "default"],
        stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path,
    )


def test_an_rq_worker_blocked_on_its_queue_runs_enqueued_jobs(gradus, tmp_path):
    from rq import Queue

    r = redis_client(gradus, 2)
    worker = _worker(gradus, tmp_path)
    try:
        # The worker is idle in BLPOP on its queue before anything is enqueued.
        deadline = time.monotonic() + 30
        while int(r.info("clients")["blocked_clients"]) < 1:
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()
            assert time.monotonic() < deadline, "the worker never blocked on its queue"
            time.sleep(0.05)
        q = Queue("default", connection=r)
        jobs = [q.enqueue("operator.add", i, 100) for i in range(5)]
        jobs.append(q.enqueue("operator.truediv", 1, 0))
        deadline = time.monotonic() + 60
        for job in jobs:
            while job.get_status(refresh=True) not in ("finished", "failed"):
                assert worker.poll() is None, (tmp_path / "worker.log").read_text()
                assert time.monotonic() < deadline, f"{job.id} is {job.get_status()}"
                time.sleep(0.05)
        assert [j.result for j in jobs[:5]] == [100, 101, 102, 103, 104]
        jobs[5].refresh()
        assert jobs[5].get_status() == "failed"
        assert "ZeroDivisionError" in (jobs[5].exc_info or "")
        assert q.finished_job_registry.count == 5
        assert q.failed_job_registry.count == 1
        assert q.count == 0
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(5)
