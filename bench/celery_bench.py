"""Celery on Loam next to Celery on Redis, same app, same worker settings, results on.

For each broker+backend pair it starts a real Celery worker (prefork, `-c` processes,
early acks, mingle/gossip/heartbeat off) that at first consumes nothing, then:

  enqueue   one producer thread calls `add.delay(i, i)` N times (each call also
            creates its AsyncResult, as applications do); jobs/s
  drain     `control.add_consumer` points the worker at the filled queue; the time
            until every result is stored and fetched; jobs/s ("steady": from the first
            result to the last, without the time the worker takes to start on the queue)

`loam dev` and `redis-server` are started here (free ports, temporary directories) and
stopped by pid at the end. It measures; it asserts nothing.

Run:  .venv/bin/python bench/celery_bench.py [-n 2000] [-c 4] [--rounds 1] [--only loam|redis] [--calls]
                                            [--conf '{"task_acks_late": true}']

`--rounds R` runs R rounds, alternating which system goes first, and prints each figure's
median (min-max) and the Loam/Redis ratio of each round's pair, then their median: on a
busy machine a pair run back to back is fairer than two medians taken apart.

`--calls` also counts the server calls the loam:// side makes per task, by method, in
every process (producer, worker, pool processes); the counting costs a little speed.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

APP = textwrap.dedent(
    """
    import os
    import loam_celery  # noqa: F401 - the loam:// alias
    from celery import Celery

    app = Celery("benchapp", broker=os.environ["BENCH_BROKER"], backend=os.environ["BENCH_BACKEND"])
    app.conf.update(worker_prefetch_multiplier=4, result_expires=3600, broker_connection_retry_on_startup=True,
                    worker_hijack_root_logger=False, task_default_queue="idle")
    if os.environ.get("BENCH_CONF"):  # --conf: settings of the app's own (acks_late, say)
        import json
        app.conf.update(json.loads(os.environ["BENCH_CONF"]))

    @app.task(name="benchapp.add")
    def add(x, y):
        return x + y

    if os.environ.get("BENCH_CALLS"):  # --calls: count the SDK's server calls per method, per process
        import collections, json, loam.client
        from celery.signals import worker_process_shutdown, worker_shutdown

        calls = collections.Counter()
        _call = loam.client.Client._call

        def dump(*args, **kwargs):
            path = os.path.join(os.environ["BENCH_CALLS"], f"{os.getpid()}.json")
            with open(path + ".tmp", "w") as f:
                json.dump(calls, f)
            os.replace(path + ".tmp", path)

        async def counted(self, method, request, **kwargs):
            calls[getattr(method, "__name__", "?")] += 1
            if sum(calls.values()) % 200 == 0:  # a pool process may end without a signal
                dump()
            return await _call(self, method, request, **kwargs)

        loam.client.Client._call = counted
        worker_process_shutdown.connect(dump, weak=False)
        worker_shutdown.connect(dump, weak=False)
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(path: Path, needle: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while needle not in (path.read_text(errors="replace") if path.exists() else ""):
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {needle!r} in {path}:\n{path.read_text(errors='replace')[-2000:]}")
        time.sleep(0.05)


def run_pair(name: str, broker: str, backend: str, n: int, concurrency: int, work: Path,
             calls: Path | None = None) -> dict[str, float]:  # fmt: skip
    pythonpath = os.pathsep.join(filter(None, [str(work), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, BENCH_BROKER=broker, BENCH_BACKEND=backend, PYTHONPATH=pythonpath)
    os.environ.pop("BENCH_CALLS", None)
    if calls is not None:
        calls.mkdir(parents=True, exist_ok=True)
        env["BENCH_CALLS"] = os.environ["BENCH_CALLS"] = str(calls)
    celery = str(Path(sys.executable).with_name("celery"))
    log = work / f"worker-{name}.log"
    queue = f"bench-{name}-{time.time_ns()}"
    worker = subprocess.Popen(
        [celery, "-A", "benchapp", "worker", "-l", "WARNING", "-c", str(concurrency), "-n", f"{name}@%h",
         "-Q", "idle", "--without-mingle", "--without-gossip", "--without-heartbeat"],
        cwd=work, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        os.environ.update(BENCH_BROKER=broker, BENCH_BACKEND=backend)
        sys.modules.pop("benchapp", None)
        import benchapp

        app = benchapp.app
        deadline = time.monotonic() + 30
        while not app.control.ping(timeout=0.5):
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError(
                    f"{name} worker did not answer:\n{log.read_text(errors='replace')[-2000:]}"
                )
        benchapp.add.apply_async((0, 0), queue=queue).forget()  # warm up the producer
        t0 = time.perf_counter()
        results = [benchapp.add.apply_async((i, i), queue=queue) for i in range(n)]
        enqueue_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        app.control.add_consumer(queue, reply=True, timeout=5, limit=1)
        t_added = time.perf_counter() - t1
        results[0].get(timeout=120)
        t_first = time.perf_counter() - t1
        for r in results:
            r.get(timeout=120)
        drain_s = time.perf_counter() - t1
        if os.environ.get("BENCH_VERBOSE"):
            print(f"{name}: add_consumer {t_added:.3f}s, first result {t_first:.3f}s, all {drain_s:.3f}s")
        assert results[-1].get() == 2 * (n - 1)
        app.close()
        if calls is not None:
            benchapp.dump()
        return {
            "enqueue": n / enqueue_s,
            "drain": n / drain_s,
            "steady": (n - 1) / max(drain_s - t_first, 1e-9),
        }
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()


def _spread(values: list[float], fmt: str = "{:,.0f}") -> str:
    """The median, with min-max when there is more than one value."""
    mid = statistics.median(values)
    if len(values) == 1:
        return fmt.format(mid)
    return f"{fmt.format(mid)} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", type=int, default=2000, help="tasks per run (default 2000)")
    p.add_argument("-c", type=int, default=4, help="worker processes (default 4)")
    p.add_argument("--only", choices=["loam", "redis"])
    p.add_argument(
        "--conf",
        default="",
        help='Celery settings for both systems, as JSON: \'{"task_acks_late": true, "worker_prefetch_multiplier": 1}\'',
    )
    p.add_argument(
        "--rounds", type=int, default=1, help="rounds, alternating which system goes first (default 1)"
    )
    p.add_argument("--calls", action="store_true",
                   help="also count the loam:// side's server calls per task, by method (all processes)")  # fmt: skip
    args = p.parse_args()
    if args.conf:
        json.loads(args.conf)  # a bad --conf fails here, not in each worker
        os.environ["BENCH_CONF"] = args.conf  # the workers and this process's app read it
    work = Path(tempfile.mkdtemp(prefix="celery-bench-"))
    (work / "benchapp.py").write_text(APP)
    sys.path.insert(0, str(work))
    procs: list[subprocess.Popen] = []
    rows: dict[str, list[dict[str, float]]] = {}
    per_method: collections.Counter[str] = collections.Counter()
    systems: dict[str, tuple[str, str, str]] = {}  # row -> (name, broker, backend)
    try:
        if args.only != "redis":
            port = free_port()
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "loam_gateway.dev", "--port", str(port), "--data", str(work / "loam")],
                stdout=open(work / "loam.log", "wb"), stderr=subprocess.STDOUT,
            ))  # fmt: skip
            wait_for(work / "loam.log", "ready")
            url = f"loam://127.0.0.1:{port}/bench"
            systems["Celery on Loam"] = ("loam", url, url)
        if args.only != "loam":
            if not shutil.which("redis-server"):
                print("redis-server not found (apt-get install redis-server): Redis side skipped")
            else:
                port = free_port()
                procs.append(subprocess.Popen(
                    ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                    stdout=open(work / "redis.log", "wb"), stderr=subprocess.STDOUT,
                ))  # fmt: skip
                wait_for(work / "redis.log", "Ready to accept")
                systems["Celery on Redis"] = (
                    "redis",
                    f"redis://127.0.0.1:{port}/0",
                    f"redis://127.0.0.1:{port}/1",
                )
        for i in range(args.rounds):
            # Alternate who goes first, so neither always meets the other's leftovers.
            for row, (name, broker, backend) in sorted(systems.items(), reverse=bool(i % 2)):
                calls = work / f"calls-{i}" if args.calls and name == "loam" else None
                rows.setdefault(row, []).append(run_pair(name, broker, backend, args.n, args.c, work, calls))
                for f in calls.glob("*.json") if calls is not None else ():
                    per_method.update(json.loads(f.read_text()))
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(work, ignore_errors=True)
    metrics = ("enqueue", "drain", "steady")
    rounds = f", median of {args.rounds} rounds (min-max)" if args.rounds > 1 else ""
    conf = f", with {args.conf}" if args.conf else ""
    print(
        f"\n{args.n} tasks, worker -c {args.c} (prefork, prefetch x4, early acks{conf}), results on{rounds}\n"
    )
    print(f"{'':18} {'enqueue jobs/s':>22} {'drain jobs/s':>22} {'steady drain':>22}")
    for row, runs in rows.items():
        print(f"{row:18} " + " ".join(f"{_spread([r[m] for r in runs]):>22}" for m in metrics))
    if len(rows) == 2 and args.rounds > 0:
        loam, redis = rows["Celery on Loam"], rows["Celery on Redis"]
        ratios = [
            _spread([a[m] / b[m] for a, b in zip(loam, redis, strict=True)], "{:.2f}x") for m in metrics
        ]
        print(f"{'Loam / Redis':18} " + " ".join(f"{r:>22}" for r in ratios) + "   (per round, then median)")
    if per_method:
        total = sum(per_method.values())
        tasks = args.n * args.rounds
        print(f"\nCelery on Loam, server calls per task (all processes, warm-up and control included): "
              f"{total / tasks:.2f}")  # fmt: skip
        for method, count in per_method.most_common():
            print(f"  {method:24} {count / tasks:6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
