"""What idle queues cost the background services: a store with N queues and no work
due, and the CPU one pass of the sweeper service and of the relay service takes over it
(process CPU time, all threads: the store's writer and readers included), as a share of
one core at each service's interval (sweeper every 0.2 s; relay backs off to 1 s while
idle). It measures; it asserts nothing.

Then (`--seconds S`, default 30) both services run as they do in `loam dev`, on their own
loops at their own intervals, for S seconds of wall time: the process CPU over that time
includes what single passes miss (lease renewals every third of the lease TTL, the
membership heartbeat, the sweeper's full pass every 60 s).

Run:  .venv/bin/python bench/idle_bench.py [--queues 10000] [--passes 20] [--seconds 30] [--store lmdb|sqlite]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time

from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import admin
from loam_common.store.runner import open_store
from loam_relay.service import RelayService
from loam_sweeper.service import SweeperService

NS = "idle"


def make_queues(tx, names: list[str]) -> None:
    for name in names:
        admin.queue_create(tx, NS, name, pb.QueueConfig())


async def measure(service, passes: int) -> float:
    """CPU seconds per pass, after two warm-up passes (leases taken, caches filled)."""
    for _ in range(2):
        await service.run_once()
    c0 = time.process_time()
    for _ in range(passes):
        await service.run_once()
    return (time.process_time() - c0) / passes


async def main(args: argparse.Namespace) -> None:
    d = tempfile.mkdtemp(prefix="loam-idle-", dir=args.dir)
    path = os.path.join(d, "loam.lmdb" if args.store == "lmdb" else "loam.db")
    store = open_store(f"{args.store}://{path}")
    try:
        names = [f"q{i:06d}" for i in range(args.queues)]
        for i in range(0, len(names), 500):
            await store.transact(make_queues, names[i : i + 500])
        sweeper = SweeperService(store, None, "bench-sweeper", interval=0.2)
        relay = RelayService(store, "bench-relay")
        sweep_s = await measure(sweeper, args.passes)
        relay_s = await measure(relay, args.passes)
        running_cpu = 0.0
        if args.seconds > 0:
            sweeper.start()
            relay.start()
            c0 = time.process_time()
            await asyncio.sleep(args.seconds)
            running_cpu = (time.process_time() - c0) / args.seconds
            await sweeper.stop()
            await relay.stop()
    finally:
        await store.close()
        shutil.rmtree(d, ignore_errors=True)
    print(
        f"{args.queues:,} idle queues on {args.store}, load average {os.getloadavg()[0]:.1f}:\n"
        f"  sweeper pass {sweep_s * 1e3:8.2f} ms CPU = {sweep_s / 0.2 * 100:6.1f} % of a core at 0.2 s\n"
        f"  relay pass   {relay_s * 1e3:8.2f} ms CPU = {relay_s / 1.0 * 100:6.1f} % of a core at 1 s (idle)\n"
        f"  together     {(sweep_s / 0.2 + relay_s) * 100:6.1f} % of a core\n"
        + (
            f"  both running {args.seconds:.0f} s at their intervals: {running_cpu * 100:6.1f} % of a core"
            if args.seconds > 0
            else ""
        )
    )


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--queues", type=int, default=10_000)
    p.add_argument("--passes", type=int, default=20)
    p.add_argument("--seconds", type=float, default=30.0, help="run both services this long (0: skip)")
    p.add_argument("--store", choices=("lmdb", "sqlite"), default="lmdb")
    p.add_argument("--dir", default=None, help="where the temporary store goes")
    asyncio.run(main(p.parse_args()))
