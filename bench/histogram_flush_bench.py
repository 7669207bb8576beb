"""What a queue core's histogram flush costs (loam_queue_core.histogram_flush, decision
0040's amendment): the wall time of one pass writing the wait and run observations of N
queues (each with new observations, the worst case) to an LMDB store, median of 5.

    .venv/bin/python bench/histogram_flush_bench.py [--queues 10 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

from loam_common import metrics
from loam_common.store.runner import open_store
from loam_queue_core.histogram_flush import HistogramFlush


async def one(store, queues: int, rounds: int = 5) -> float:
    seen = metrics.ProcessMetrics()
    flush = HistogramFlush(store, observed=seen)
    times = []
    for _ in range(rounds):
        for q in range(queues):
            seen.observe_lease("bench", f"q{q}", *[10**6] * 10)
            seen.observe_run("bench", f"q{q}", "t", *[10**7] * 10)
        start = time.perf_counter()
        await flush.run_once()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queues", type=int, nargs="+", default=[10, 1000])
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        store = open_store(f"lmdb://{d}/store")
        try:
            for n in args.queues:
                print(f"{n} queues: a flush pass {await one(store, n) * 1e3:.1f} ms (median of 5)")
        finally:
            await store.close()


if __name__ == "__main__":
    asyncio.run(main())
