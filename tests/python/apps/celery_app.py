"""A small Celery application for test_celery.py: broker and result backend are the Redis URL
in GRADUS_CELERY_URL (databases 0 and 1)."""

import os

from celery import Celery

URL = os.environ["GRADUS_CELERY_URL"]

app = Celery("gradus_test", broker=f"{URL}/0", backend=f"{URL}/1")
app.conf.update(
    broker_connection_retry_on_startup=True,
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    result_expires=3600,
)


@app.task
def add(x, y):
    return x + y


@app.task
def fail():
    raise ValueError("on purpose")
