"""Durable mode's overhead per step: N workflows of 10 `ctx.run` steps of no work, run by
W worker processes of the stock Python SDK (resonate-sdk) against a fresh `loam dev`.

    .venv/bin/python bench/durable_bench.py [--workflows 1000] [--workers 8] [--steps 10] [--out FILE]

Reports steps/s (wall clock from the first dispatch to the last result), the server's
CPU per step (user + system time of the `loam dev` process tree, read from /proc before
and after, as bench/drivers/procstat.py does for jobs) and the workers' CPU per step,
which tells whether the server or the SDK is the limit, and `speed_probe_us`: what a
fixed piece of pure-Python work took meanwhile (procstat.SpeedProbe), to compare runs
made in different hours of a shared machine by. Then, on an idle server, the
latency a durable step adds: workflows run one at a time, alternately with 10 steps and
with none, and the added latency per step is (p50 with 10 - p50 with 0) / 10. The same
work in a plain job is 10 calls of a no-op function inside the handler, which add
nothing measurable, so this difference is what durable mode adds per step. A step is two fenced requests
(`task.fence` create, then settle); each workflow adds a task.create-or-acquire, a
listener and a fulfil. Results are printed as JSON (and written to --out).
`--steps 0` runs workflows of no steps: `server_cpu_us_per_workflow` is then what a
workflow costs the server apart from its steps.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "drivers"))
sys.path.insert(0, str(HERE.parent / "tests" / "e2e"))
import procstat  # noqa: E402  (bench/drivers/procstat.py, found through the path above)
from devserver import start_dev_server  # noqa: E402  (tests/e2e/devserver.py)

STEPS = 10
WORKER = """
import asyncio, sys
from datetime import timedelta
from resonate.resonate import Resonate
from resonate.retry import Never

async def noop(ctx, i):
    return i

async def main():
    r = Resonate(url=sys.argv[1], group="bench", ttl=timedelta(seconds=30), retry_policy=Never())

    @r.register
    async def ten_steps(ctx, n):
        for i in range(n):
            await ctx.run(noop, i)
        return n

    print("worker ready", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


async def step_latency(url: str, rounds: int) -> dict:
    """Workflows one at a time, alternately of STEPS no-op steps and of none."""
    from resonate.resonate import Resonate

    r = Resonate(url=url, group="bench-latency")
    run = uuid.uuid4().hex[:8]
    times: dict[int, list[float]] = {STEPS: [], 0: []}
    for i in range(rounds):
        for steps in (STEPS, 0):
            t0 = time.perf_counter()
            assert (
                await r.options(target="bench").rpc(f"lat-{run}-{i}-{steps}", "ten_steps", steps).result()
                == steps
            )
            times[steps].append(time.perf_counter() - t0)
    await r.stop()
    p50 = {n: statistics.median(ts) for n, ts in times.items()}
    return {
        "latency_rounds": rounds,
        "workflow_p50_ms_10_steps": round(p50[STEPS] * 1e3, 2),
        "workflow_p50_ms_0_steps": round(p50[0] * 1e3, 2),
        "added_latency_ms_per_step_p50": round((p50[STEPS] - p50[0]) / STEPS * 1e3, 3),
    }


async def drive(url: str, workflows: int, steps: int = STEPS) -> float:
    from resonate.resonate import Resonate

    r = Resonate(url=url, group="bench-client")
    run = uuid.uuid4().hex[:8]
    t0 = time.perf_counter()
    handles = [
        r.options(target="bench").rpc(f"bench-{run}-{i}", "ten_steps", steps) for i in range(workflows)
    ]
    results = await asyncio.gather(*(h.result() for h in handles))
    elapsed = time.perf_counter() - t0
    assert results == [steps] * workflows
    await r.stop()
    return elapsed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workflows", type=int, default=1000)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument(
        "--steps", type=int, default=STEPS, help="steps a workflow (0: what a workflow costs alone)"
    )
    p.add_argument(
        "--latency-rounds", type=int, default=30, help="sequential workflows of each kind (0: skip)"
    )
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    data = Path(tempfile.mkdtemp(prefix="loam-durable-bench-"))
    server = start_dev_server(data)
    url = server.url + "/resonate"
    script = data / "worker.py"
    script.write_text(WORKER)
    workers = [subprocess.Popen([sys.executable, str(script), url], stdout=subprocess.PIPE, text=True)
               for _ in range(args.workers)]  # fmt: skip
    try:
        for w in workers:
            assert "worker ready" in w.stdout.readline()  # type: ignore[union-attr]
        time.sleep(1.0)  # their push streams connect in the background
        asyncio.run(drive(url, min(args.workflows, 20)))  # warm up
        probe = procstat.SpeedProbe()
        server_before = procstat.tree_cpu([server.proc.pid])
        workers_before = procstat.tree_cpu([w.pid for w in workers])
        elapsed = asyncio.run(drive(url, args.workflows, args.steps))
        server_cpu = procstat.busy_cpu(server_before, procstat.tree_cpu([server.proc.pid]))
        workers_cpu = procstat.busy_cpu(workers_before, procstat.tree_cpu([w.pid for w in workers]))
        steps = args.workflows * args.steps
        report = {
            "workflows": args.workflows,
            "steps_per_workflow": args.steps,
            "workers": args.workers,
            "seconds": round(elapsed, 3),
            "workflows_per_s": round(args.workflows / elapsed, 1),
            "server_cpu_us_per_workflow": round(server_cpu / args.workflows * 1e6, 1),
            "cores": os.cpu_count(),
            "python": procstat.python_build(),
            "speed_probe_us": probe.stop(),
        }
        if steps:
            report |= {
                "steps_per_s": round(steps / elapsed, 1),
                "server_cpu_us_per_step": round(server_cpu / steps * 1e6, 1),
                "workers_cpu_us_per_step": round(workers_cpu / steps * 1e6, 1),
            }
        if args.latency_rounds:
            report.update(asyncio.run(step_latency(url, args.latency_rounds)))
        print(json.dumps(report, indent=2))
        if args.out:
            args.out.write_text(json.dumps(report, indent=2) + "\n")
    finally:
        for w in workers:
            w.kill()
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
