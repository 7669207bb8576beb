"""Benchmark: the subjects drain as a user runs it, over HTTP. `bench/subjects_bench.py`
times the queue core alone, in process; this one starts a fresh `loam dev` per variant
and drains it with one `loam.Worker` (async no-op handler, concurrency 50, the harness's
worker: bench/drivers/loam_driver.py), so each job also pays for its lease and
completion on the wire, on both sides.

The same three variants, each on its own fresh server, round after round (`--repeat`),
so a load change hits them alike:

  plain          the jobs without a subject
  subjects       `--subjects` x `--per-subject` jobs: one job per subject at a time
  subject-batch  the same, the worker leasing with subject_batch = --per-subject

The jobs are enqueued in bulk first (1,000 a call, round-robin over the subjects; not
timed), then the worker runs until the server has acknowledged every completion. It
reports jobs per second, the server's CPU per job (its process, every thread, /proc) and
the worker process's, and each subject variant's ratio to `plain`: per wall second, and
per CPU second of server and worker together. It never asserts a speed.

Run:  .venv/bin/python bench/subjects_http_bench.py [--subjects 10000 --per-subject 10] [--repeat 3]
      .venv/bin/python bench/subjects_http_bench.py --quick     (1,000 x 10, one round)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "drivers"))
from loam_driver import CONCURRENCY, CountingClient  # noqa: E402  (bench/drivers/)
from procstat import free_port, process_cpu  # noqa: E402
from subjects_bench import VARIANTS, summarise  # noqa: E402  (bench/, this script's folder)

import loam  # noqa: E402

QUEUE, TASK, BULK = "subjects", "t", 1000


def start_server() -> tuple[subprocess.Popen, str, str]:
    port, data = free_port(), tempfile.mkdtemp(prefix="loam-subjects-http-")
    server = subprocess.Popen([sys.executable, "-m", "loam_gateway.dev", "--port", str(port), "--data", data,
                               "--spark-port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    for line in server.stdout:  # type: ignore[union-attr]
        if "ready" in line:
            break
    else:
        raise SystemExit(f"loam dev exited with {server.wait()}")
    # Keep reading what it prints: a full pipe would stop the server mid-log.
    threading.Thread(target=server.stdout.read, daemon=True).start()  # type: ignore[union-attr]
    return server, f"http://127.0.0.1:{port}", data


async def run_variant(args: argparse.Namespace, variant: str) -> dict:
    server, url, data = start_server()
    n = args.subjects * args.per_subject
    try:
        producer = loam.Client(url)
        wclient = CountingClient(url)
        try:
            items = [(TASK, None, {"subject": f"s{s}"} if variant != "plain" else {})
                     for _ in range(args.per_subject) for s in range(args.subjects)]  # fmt: skip
            for i in range(0, n, BULK):
                await producer.enqueue_bulk(QUEUE, items[i : i + BULK])

            async def handler(job: loam.LeasedJob) -> None:
                return None

            wclient.target, wclient.done = n, asyncio.Event()
            batch = args.per_subject if variant == "subject-batch" else 0
            worker = loam.Worker(wclient, QUEUE, handler, concurrency=CONCURRENCY, subject_batch=batch)
            s0, c0, t0 = process_cpu(server.pid), time.process_time(), time.perf_counter()
            task = asyncio.create_task(worker.run())
            await asyncio.wait_for(wclient.done.wait(), args.timeout)
            wall = time.perf_counter() - t0
            server_cpu, worker_cpu = process_cpu(server.pid) - s0, time.process_time() - c0
            worker.stop()
            await asyncio.wait_for(task, 30)
            counts = await producer.queue_counts(QUEUE)
        finally:
            await producer.close()
            await wclient.close()
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(data, ignore_errors=True)
    return {"variant": variant, "jobs": n, "wall_s": wall, "server_cpu_s": server_cpu, "worker_cpu_s": worker_cpu,
            "jobs_per_s": n / wall, "jobs_per_cpu_s": n / (server_cpu + worker_cpu),
            "server_us_per_job": 1e6 * server_cpu / n, "worker_us_per_job": 1e6 * worker_cpu / n,
            "completed": counts.get("completed")}  # fmt: skip


async def main_async(args: argparse.Namespace) -> dict:
    rounds: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for r in range(args.repeat):
        for variant in VARIANTS:
            res = await run_variant(args, variant)
            if res["completed"] != res["jobs"]:
                raise SystemExit(f"{variant}: {res['completed']} jobs completed, expected {res['jobs']}")
            rounds[variant].append(res)
            print(f"round {r + 1} {variant:14} {res['jobs_per_s']:7,.0f} jobs/s  server {res['server_us_per_job']:5.0f} us"
                  f"  worker {res['worker_us_per_job']:5.0f} us CPU/job", file=sys.stderr)  # fmt: skip
    summary = summarise(rounds, ("server_us_per_job", "worker_us_per_job"))
    return {"args": vars(args), "load": os.getloadavg(), "rounds": rounds, "summary": summary}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--subjects", type=int, default=10_000)
    p.add_argument("--per-subject", type=int, default=10)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds one drain may take")
    p.add_argument("--quick", action="store_true", help="1,000 subjects, one round")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.subjects, args.repeat = 1000, 1
    out = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"load {out['load'][0]:.1f}; {args.subjects:,} subjects x {args.per_subject} jobs over HTTP, "
          f"one loam.Worker, concurrency {CONCURRENCY}")  # fmt: skip
    for variant, s in out["summary"].items():
        ratio = (f"  {s['jobs_per_s_vs_plain']:.0%} per wall s, {s['jobs_per_cpu_s_vs_plain']:.0%} per CPU s of plain"
                 if variant != "plain" else "")  # fmt: skip
        print(f"  {variant:14} {s['jobs_per_s']:7,.0f} jobs/s  server {s['server_us_per_job']:4.0f} us"
              f" + worker {s['worker_us_per_job']:4.0f} us CPU/job{ratio}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
