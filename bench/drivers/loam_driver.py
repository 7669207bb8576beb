"""One system's workloads on Loam Jobs through the native Python SDK (`loam.Client`,
`loam.Worker`), for bench/harness.py. Prints one JSON object on its last stdout line.

    python bench/drivers/loam_driver.py --url http://127.0.0.1:7720 run --jobs 20000
    python bench/drivers/loam_driver.py --url http://127.0.0.1:7720 growth --levels 1000,100000

`run` (one round of the main workloads, in fresh queues):
  enqueue  N no-op jobs, one `await client.enqueue(...)` at a time, one caller
  bulk     N no-op jobs by `enqueue_bulk`, 1,000 a call, one call at a time
  drain    the N jobs of `enqueue` (already waiting) by one `loam.Worker` (async no-op
           handler, concurrency 50, default prefetch): worker start → N completions
           acknowledged by the server
  latency  the same worker, now idle: jobs enqueued one at a time at a fixed rate
           (open loop); enqueue → handler start, from `time.perf_counter()` in the payload

`growth`: one queue filled (bulk) to each level in turn; then, with `--settle-pids`, a
wait until the server's processes are idle (the background work a fill leaves behind is
not the cost of a call at that backlog; the wait is reported as `settle_s`); then
`--repeats` times: `--samples` single enqueues timed one by one, then `--samples` `lease(max=1)`
each followed by its `complete` (lease and complete timed apart), so the backlog stays
at the level.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from typing import Any

import procstat

import loam

CHUNK = 1000
CONCURRENCY = 50


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


def qname(kind: str) -> str:
    return f"bench-{kind}-{uuid.uuid4().hex[:8]}"


async def enqueue_one_by_one(client: loam.Client, queue: str, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        await client.enqueue(queue, "noop")
    return n / (time.perf_counter() - t0)


async def enqueue_bulk(client: loam.Client, queue: str, n: int) -> float:
    batches = [[("noop", None)] * min(CHUNK, n - i) for i in range(0, n, CHUNK)]
    t0 = time.perf_counter()
    for batch in batches:
        await client.enqueue_bulk(queue, batch)
    return n / (time.perf_counter() - t0)


class CountingClient(loam.Client):
    """Counts completions the server acknowledged (the worker coalesces them)."""

    acked = 0
    target = 0
    done: asyncio.Event | None = None

    async def complete_batch(self, items: Any) -> Any:
        out = await super().complete_batch(items)
        self.acked += sum(1 for r in out if not isinstance(r, Exception))
        if self.done is not None and self.acked >= self.target:
            self.done.set()
        return out

    async def complete(self, token: Any, outcome: Any = None) -> Any:
        out = await super().complete(token, outcome)
        self.acked += 1
        if self.done is not None and self.acked >= self.target:
            self.done.set()
        return out


async def run_round(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    n = args.jobs
    producer = loam.Client(args.url, namespace=args.namespace)
    wclient = CountingClient(args.url, namespace=args.namespace)
    q_single, q_bulk = qname("single"), qname("bulk")
    try:
        await producer.enqueue(q_single, "warmup")  # connection set up, queue created
        await producer.enqueue_bulk(q_bulk, [("warmup", None)])
        out["enqueue_per_s"] = await enqueue_one_by_one(producer, q_single, n)
        out["bulk_enqueue_per_s"] = await enqueue_bulk(producer, q_bulk, n)

        # drain: n + 1 jobs wait (the warm-up one too)
        latencies: list[float] = []
        lat_done = asyncio.Event()
        lat_target = args.latency_jobs

        async def handler(job: loam.LeasedJob) -> None:
            if job.name == "lat":
                latencies.append(time.perf_counter() - job.payload["t"])
                if len(latencies) >= lat_target:
                    lat_done.set()

        wclient.target, wclient.done = n + 1, asyncio.Event()
        worker = loam.Worker(wclient, q_single, handler, concurrency=CONCURRENCY)
        t0 = time.perf_counter()
        task = asyncio.create_task(worker.run())
        await asyncio.wait_for(wclient.done.wait(), args.timeout)
        out["drain_per_s"] = (n + 1) / (time.perf_counter() - t0)

        # latency: the worker is idle now, long-polling
        await asyncio.sleep(0.5)
        if lat_target:
            start = time.perf_counter()
            for i in range(lat_target):
                delay = start + i / args.latency_rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                await producer.enqueue(q_single, "lat", {"t": time.perf_counter()})
            await asyncio.wait_for(lat_done.wait(), args.timeout)
            out["latency_p50_ms"] = pct(latencies, 50) * 1000
            out["latency_p99_ms"] = pct(latencies, 99) * 1000
            out["latency_samples"] = len(latencies)
        worker.stop()
        await asyncio.wait_for(task, 30)
    finally:
        await producer.close()
        await wclient.close()
    return out


async def fill(client: loam.Client, queue: str, n: int) -> None:
    """Bulk enqueue n jobs, two calls in flight."""
    sem = asyncio.Semaphore(2)

    async def one(k: int) -> None:
        async with sem:
            await client.enqueue_bulk(queue, [("noop", None)] * k)

    await asyncio.gather(*(one(min(CHUNK, n - i)) for i in range(0, n, CHUNK)))


async def growth(args: argparse.Namespace) -> dict[str, Any]:
    client = loam.Client(args.url, namespace=args.namespace, timeout=120)
    queue = qname("growth")
    levels = [int(x) for x in args.levels.split(",") if x]
    have = 0
    out: dict[str, Any] = {"levels": {}}
    try:
        for level in levels:
            t0 = time.perf_counter()
            await fill(client, queue, level - have)
            fill_s = time.perf_counter() - t0
            settle_s = await asyncio.to_thread(procstat.settle, args.settle_pids)
            have = level
            runs = []
            for _ in range(args.repeats):
                enq, lease, comp = [], [], []
                for _ in range(args.samples):
                    t = time.perf_counter()
                    await client.enqueue(queue, "noop")
                    enq.append(time.perf_counter() - t)
                for _ in range(args.samples):
                    t = time.perf_counter()
                    jobs = await client.lease(queue, max=1)
                    lease.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    await client.complete(jobs[0])
                    comp.append(time.perf_counter() - t)
                runs.append({
                    "enqueue_p50_ms": pct(enq, 50) * 1000, "enqueue_p99_ms": pct(enq, 99) * 1000,
                    "lease_p50_ms": pct(lease, 50) * 1000, "lease_p99_ms": pct(lease, 99) * 1000,
                    "complete_p50_ms": pct(comp, 50) * 1000,
                })  # fmt: skip
            counts = await client.queue_counts(queue)
            before = levels[levels.index(level) - 1] if levels.index(level) else 0
            out["levels"][str(level)] = {"runs": runs, "fill_per_s": (level - before) / fill_s,
                                         "settle_s": settle_s, "waiting": counts.get("waiting"),
                                         "memory": procstat.tree_memory(args.settle_pids)}  # fmt: skip
            print(f"  loam growth {level}: " + json.dumps({k: round(statistics.median(r[k] for r in runs), 3)
                                                            for k in runs[0]}), file=sys.stderr, flush=True)  # fmt: skip
    finally:
        await client.close()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True)
    p.add_argument("--namespace", default=os.environ.get("LOAM_NAMESPACE", "bench"))
    p.add_argument("--timeout", type=float, default=600)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--jobs", type=int, default=20000)
    r.add_argument("--latency-jobs", type=int, default=500)
    r.add_argument("--latency-rate", type=float, default=50.0, help="jobs per second")
    g = sub.add_parser("growth")
    g.add_argument("--levels", default="1000,100000,1000000")
    g.add_argument("--samples", type=int, default=200)
    g.add_argument("--repeats", type=int, default=3)
    g.add_argument("--settle-pids", type=lambda v: [int(x) for x in v.split(",") if x], default=[],
                   help="the server's process ids: wait for them to be idle after each fill")  # fmt: skip
    args = p.parse_args()
    result = asyncio.run(run_round(args) if args.cmd == "run" else growth(args))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
