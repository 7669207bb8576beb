"""The Celery app of the benchmark: one no-op task. Broker and result backend come from
the environment (BENCH_BROKER, BENCH_BACKEND; an empty backend means none), so the same
module serves Celery on Redis, on RabbitMQ and on Loam (`loam://`).

The task leaves a trace the driver reads without asking the broker: 8 bytes appended to
a file (O_APPEND, one write per task, atomic across the pool's processes):
- a plain job appends its start time (time.monotonic(), one clock for every process on
  the machine) to BENCH_COUNT_FILE, so the driver counts jobs and times first → last;
- a latency job (`t0` given: the producer's time.monotonic() just before apply_async)
  appends `start - t0` to BENCH_LAT_FILE.
"""

from __future__ import annotations

import os
import struct
import time

from celery import Celery

BROKER = os.environ.get("BENCH_BROKER", "memory://")
BACKEND = os.environ.get("BENCH_BACKEND") or None

if BROKER.startswith("loam") or (BACKEND or "").startswith("loam"):
    import loam_celery  # noqa: F401 - registers the loam:// transport alias

app = Celery("bench", broker=BROKER, backend=BACKEND)
app.conf.update(
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    task_default_queue=os.environ.get("BENCH_QUEUE", "celery"),
)

_fds: dict[str, int] = {}
_pid = 0


def _append(env: str, value: float) -> None:
    global _pid
    if _pid != os.getpid():  # a pool child: its own descriptors
        _fds.clear()
        _pid = os.getpid()
    fd = _fds.get(env)
    if fd is None:
        fd = _fds[env] = os.open(os.environ[env], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, struct.pack("d", value))


@app.task(name="bench.noop")
def noop(t0: float | None = None) -> None:
    now = time.monotonic()
    if t0 is None:
        _append("BENCH_COUNT_FILE", now)
    else:
        _append("BENCH_LAT_FILE", now - t0)
