"""One round of the main workloads for one Celery setup (Redis, RabbitMQ or Loam as the
broker; a result backend or none), for bench/harness.py. Prints one JSON object on its
last stdout line.

    BENCH_BROKER=redis://127.0.0.1:6379/0 BENCH_BACKEND= python bench/drivers/celery_driver.py --jobs 20000

  enqueue  N `noop.apply_async(queue=Q)` calls, one at a time, one producer, until the
           broker holds them all (see settle(); `enqueue_handoff_per_s` is the rate
           at which apply_async returned)
  bulk     none: Celery has no bulk publish (a group publishes its tasks one by one)
  drain    a Celery worker (`celery worker -P prefork -c <cores>`, default prefetch
           multiplier 4, early acks, mingle and gossip off) is started on the filled
           queue; the rate is jobs / (last task start - first task start), read from the
           tasks' own traces (celery_app.py), so the worker's start-up is not counted
  latency  the same worker, now idle: jobs published one at a time at a fixed rate;
           enqueue → task start (time.monotonic() on both sides)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


def records(path: Path) -> list[float]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    k = len(data) // 8
    return list(struct.unpack(f"{k}d", data[: k * 8]))


def wait_records(path: Path, n: int, timeout: float, worker: subprocess.Popen, log: Path) -> list[float]:
    deadline = time.monotonic() + timeout
    while True:
        size = path.stat().st_size if path.exists() else 0
        if size >= 8 * n:
            return records(path)
        if worker.poll() is not None:
            raise RuntimeError(
                f"celery worker exited with {worker.returncode}: {log.read_text(errors='replace')[-1500:]}"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(f"{size // 8} of {n} tasks ran in {timeout:.0f}s; worker log: "
                               f"{log.read_text(errors='replace')[-1500:]}")  # fmt: skip
        time.sleep(0.005)


def settle(app: Any, queue: str, n: int, timeout: float) -> None:
    """Until the broker holds all n messages. A Redis publish is an LPUSH answered by the
    server; an AMQP publish without confirms (Celery's default) only writes to the socket,
    and loam-celery batches publishes in the background: for those the enqueue figure
    stops when the broker has them all."""
    scheme = app.conf.broker_url.split("://", 1)[0]
    deadline = time.monotonic() + timeout
    if scheme == "loam":
        from loam_celery.pipeline import wait_all

        wait_all(timeout)
    elif scheme in ("amqp", "pyamqp"):
        with app.connection_for_read() as conn:
            channel = conn.default_channel
            while channel.queue_declare(queue=queue, passive=True).message_count < n:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"RabbitMQ did not report {n} messages in {queue}")
                time.sleep(0.002)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=20000)
    p.add_argument("--latency-jobs", type=int, default=500)
    p.add_argument("--latency-rate", type=float, default=50.0)
    p.add_argument("--concurrency", type=int, default=os.cpu_count() or 2)
    p.add_argument("--pool", default="prefork")
    p.add_argument("--timeout", type=float, default=600)
    args = p.parse_args()

    work = Path(tempfile.mkdtemp(prefix="loam-bench-celery-"))
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    count_file, lat_file, log = work / "count", work / "lat", work / "worker.log"
    os.environ.update(BENCH_COUNT_FILE=str(count_file), BENCH_LAT_FILE=str(lat_file), BENCH_QUEUE=queue)
    sys.path.insert(0, str(HERE))
    import celery_app

    out: dict[str, float | int | str] = {}
    n = args.jobs
    noop = celery_app.noop
    noop.apply_async(queue=queue)  # declares the queue, connects the producer; one extra job
    t0 = time.perf_counter()
    for _ in range(n):
        noop.apply_async(queue=queue)
    handoff = time.perf_counter() - t0
    settle(celery_app.app, queue, n + 1, args.timeout)
    out["enqueue_per_s"] = n / (time.perf_counter() - t0)
    out["enqueue_handoff_per_s"] = n / handoff

    celery = str(Path(sys.executable).with_name("celery"))
    cmd = [celery, "-A", "celery_app", "worker", "-Q", queue, "-P", args.pool, "-c", str(args.concurrency),
           "-l", "WARNING", "--without-mingle", "--without-gossip", "-n", f"{queue}@%h"]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    with open(log, "wb") as logf:  # the worker holds its own copy of the descriptor
        worker = subprocess.Popen(
            cmd, cwd=HERE, env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        starts = wait_records(count_file, n + 1, args.timeout, worker, log)
        out["drain_per_s"] = n / (max(starts) - min(starts))
        time.sleep(1.0)  # idle now
        if args.latency_jobs:
            start = time.monotonic()
            for i in range(args.latency_jobs):
                delay = start + i / args.latency_rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                noop.apply_async((time.monotonic(),), queue=queue)
            lats = wait_records(lat_file, args.latency_jobs, args.timeout, worker, log)
            out["latency_p50_ms"] = pct(lats, 50) * 1000
            out["latency_p99_ms"] = pct(lats, 99) * 1000
            out["latency_samples"] = len(lats)
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
        celery_app.app.close()
        shutil.rmtree(work, ignore_errors=True)
    out["worker_command"] = " ".join(["celery"] + cmd[1:])
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
