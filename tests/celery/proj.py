"""The Celery app the tests run as real workers: its broker and result backend are
`loam://` URLs from the environment (LOAM_CELERY_URL, a namespace per test module), and
its tasks record what they did in files under LOAM_CELERY_MARKS, so a test can count
runs across worker processes and restarts."""

from __future__ import annotations

import datetime as dt
import os
import time
import uuid
from pathlib import Path

from celery import Celery
from celery.schedules import crontab

import loam_celery  # noqa: F401 - registers the loam:// transport alias

URL = os.environ.get("LOAM_CELERY_URL", "loam://127.0.0.1:7720/celery-tests")
MARKS = Path(os.environ.get("LOAM_CELERY_MARKS", "/tmp/loam-celery-marks"))

app = Celery("proj", broker=URL, backend=URL)
app.conf.update(
    broker_transport_options={"visibility_timeout": float(os.environ.get("LOAM_CELERY_VT", "3"))},
    result_expires=600,
    task_serializer="json",
    accept_content=["json"],
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    beat_schedule={
        "every-2s": {"task": "proj.mark", "schedule": dt.timedelta(seconds=2), "args": ("beat",)},
        "nightly": {"task": "proj.mark", "schedule": crontab(minute=30, hour=3), "args": ("nightly",)},
    },
)


def mark(kind: str, name: str = "") -> None:
    d = MARKS / kind
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name or uuid.uuid4().hex}.{uuid.uuid4().hex[:8]}").write_text(str(time.time()))


def marks(kind: str) -> list[str]:
    d = MARKS / kind
    return sorted(p.name.rsplit(".", 1)[0] for p in d.iterdir()) if d.exists() else []


@app.task(name="proj.add")
def add(x, y):
    return x + y


@app.task(name="proj.fail")
def fail(*args):
    raise ValueError("proj.fail failed", *args)


@app.task(name="proj.replace_with_add", bind=True)
def replace_with_add(self, x):
    raise self.replace(add.s(x, 1))


@app.task(name="proj.replace_with_add_late", bind=True, acks_late=True)
def replace_with_add_late(self, x):
    raise self.replace(add.s(x, 1))


@app.task(name="proj.mark")
def mark_task(kind, name=""):
    mark(kind, name)
    return kind


@app.task(name="proj.tsum", bind=True)
def tsum(self, values):
    mark("tsum", self.request.id)
    return sum(values)


@app.task(name="proj.slow_mark", acks_late=True)
def slow_mark(kind, seconds, name=""):
    mark(kind + "-start", name)
    time.sleep(seconds)
    mark(kind, name)
    return seconds


@app.task(name="proj.retry_once", bind=True, max_retries=3)
def retry_once(self, kind):
    mark(kind, f"try{self.request.retries}")
    if self.request.retries < 2:
        raise self.retry(countdown=0.2)
    return self.request.id


@app.task(name="proj.record_order")
def record_order(kind, value):
    mark(kind, f"{time.time():.6f}-{value}")
    return value


@app.task(name="proj.rate_limited", rate_limit="5/s")
def rate_limited(kind):
    mark(kind)
    return time.time()


@app.task(name="proj.sleeper")
def sleeper(seconds):
    time.sleep(seconds)
    return seconds


@app.task(name="proj.die_once", acks_late=True, reject_on_worker_lost=True)
def die_once(kind):
    """Kills its own pool process on the first run; the redelivered run finishes."""
    names = marks(kind + "-start")
    mark(kind + "-start")
    if not names:
        os._exit(1)
    mark(kind)
    return "survived"


@app.task(name="proj.timed_step", acks_late=True)
def timed_step(kind, value, seconds=0.2):
    start = time.time()
    time.sleep(seconds)
    mark(kind, f"{start:.6f}-{time.time():.6f}-{value}")
    return value
