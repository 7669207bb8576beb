"""The native SDK's paths over HTTP against `loam dev`, in CPU per job as well as wall
time: bulk enqueue (1,000 a call, one call at a time), single enqueues (one caller, one
call at a time), and the drain of the bulk jobs by one `loam.Worker` (concurrency 50, a
no-op handler), with the CPU of the client process and of the server process (all
threads, from /proc) per job or call. On a machine shared with other work
the wall figures move with the load; the CPU ones much less.

`--before PYTHON` pairs this tree with another checkout: each round runs the other
tree's `loam dev` and its SDK (that interpreter runs this file), then this tree's, so
both see the same minutes of load.

    .venv/bin/python bench/wire_bench.py
    .venv/bin/python bench/wire_bench.py --before /path/to/other/.venv/bin/python --rounds 3
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
from procstat import free_port, process_cpu  # noqa: E402  (bench/drivers/procstat.py)


async def measure(jobs: int, singles: int) -> dict[str, float]:
    import loam  # the SDK of the interpreter running this

    port = free_port()
    data = tempfile.mkdtemp(prefix="loam-wire-")
    server = subprocess.Popen([sys.executable, "-m", "loam_gateway.dev", "--port", str(port), "--data", data],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        for line in server.stdout:  # type: ignore[union-attr]
            if "ready" in line:
                break
        # Keep reading what it prints: a full pipe would stop the server mid-log.
        threading.Thread(target=server.stdout.read, daemon=True).start()  # type: ignore[union-attr]
        async with loam.Client(f"http://127.0.0.1:{port}") as client:
            await client.enqueue_bulk("bulk", [("warmup", None)])
            await client.enqueue("single", "warmup")
            batch = [("noop", None)] * 1000
            s0, c0, t0 = process_cpu(server.pid), time.process_time(), time.perf_counter()
            for _ in range(jobs // 1000):
                await client.enqueue_bulk("bulk", batch)
            t1, c1, s1 = time.perf_counter(), time.process_time(), process_cpu(server.pid)
            n = jobs // 1000 * 1000
            out = {
                "bulk_per_s": n / (t1 - t0),
                "bulk_client_us_per_job": 1e6 * (c1 - c0) / n,
                "bulk_server_us_per_job": 1e6 * (s1 - s0) / n,
            }
            took = []
            s0, c0 = process_cpu(server.pid), time.process_time()
            for _ in range(singles):
                t = time.perf_counter()
                await client.enqueue("single", "noop")
                took.append(time.perf_counter() - t)
            c1, s1 = time.process_time(), process_cpu(server.pid)
            took.sort()
            out |= {
                "single_p50_ms": 1e3 * took[len(took) // 2],
                "single_client_us_per_call": 1e6 * (c1 - c0) / singles,
                "single_server_us_per_call": 1e6 * (s1 - s0) / singles,
            }
            done, ran = asyncio.Event(), [0]

            async def noop(job: loam.LeasedJob) -> None:
                ran[0] += 1
                if ran[0] == n + 1:  # the warm-up job too
                    done.set()

            worker = loam.Worker(client, "bulk", noop, concurrency=50)
            s0, c0, t0 = process_cpu(server.pid), time.process_time(), time.perf_counter()
            task = asyncio.create_task(worker.run())
            await done.wait()
            t1, c1, s1 = time.perf_counter(), time.process_time(), process_cpu(server.pid)
            worker.stop()
            await task
            out |= {
                "drain_per_s": (n + 1) / (t1 - t0),
                "drain_client_us_per_job": 1e6 * (c1 - c0) / (n + 1),
                "drain_server_us_per_job": 1e6 * (s1 - s0) / (n + 1),
            }
            return out
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(data, ignore_errors=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=20_000, help="jobs in the bulk part (default 20,000)")
    p.add_argument("--singles", type=int, default=2_000, help="single enqueues timed (default 2,000)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--before", default=None, help="another checkout's interpreter, run first each round")
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # one measurement, JSON out
    args = p.parse_args()
    if args.one:
        print(json.dumps(asyncio.run(measure(args.jobs, args.singles))))
        return 0
    sides = ([("before", args.before)] if args.before else []) + [("this tree", sys.executable)]
    for r in range(args.rounds):
        for label, python in sides:
            load = os.getloadavg()[0]
            run = subprocess.run([python, __file__, "--one", "--jobs", str(args.jobs), "--singles", str(args.singles)],
                                 capture_output=True, text=True, check=True)  # fmt: skip
            res = json.loads(run.stdout.strip().splitlines()[-1])
            print(f"round {r + 1} {label:9s} (load {load:.1f}): bulk {res['bulk_per_s']:,.0f} jobs/s, "
                  f"client {res['bulk_client_us_per_job']:.1f} + server {res['bulk_server_us_per_job']:.1f} us CPU/job; "
                  f"single p50 {res['single_p50_ms']:.3f} ms, client {res['single_client_us_per_call']:.0f} + "
                  f"server {res['single_server_us_per_call']:.0f} us CPU/call; drain {res['drain_per_s']:,.0f} jobs/s, "
                  f"client {res['drain_client_us_per_job']:.1f} + server {res['drain_server_us_per_job']:.1f} us CPU/job",
                  flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
