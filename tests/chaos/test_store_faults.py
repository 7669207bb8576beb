"""The store's own faults, on the in-memory MVCC backend's fault plan (write conflicts,
region errors at reads and commits, commits whose acknowledgement is lost, whether they
applied or not): a producer/worker workload through the queue core, its history checked
by the same checker as the process faults. A refused or unknown call is recorded as
such; nothing acknowledged may be lost or doubled."""

from __future__ import annotations

import asyncio
import random

from checker import check, read_final_state
from history import History

from loam_common.errors import JobsError
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs.complete import Ok
from loam_common.jobs.queue import QueueTx
from loam_common.store import MemoryBackend, Store
from loam_common.store.base import StoreError
from loam_common.store.memory import FaultPlan
from loam_queue_core import QueueCore

NS, QUEUE = "faults", "work"
SUBJECTS = ["a", "b", "c"]


async def test_no_acknowledged_job_is_lost_or_doubled_under_store_faults():
    seed = random.randrange(1 << 16)
    plan = FaultPlan(seed=seed, conflict=0.1, region_read=0.05, region_commit=0.05, unknown_committed=0.05,
                     unknown_not_committed=0.05)  # fmt: skip
    store = Store(MemoryBackend(faults=plan))
    core = QueueCore(store)
    history = History()
    rng = random.Random(seed)

    def configure(tx) -> None:
        with QueueTx(tx, NS, QUEUE) as qt:
            qt.cfg.shards = 2
            qt.ensure_exists()
            qt.save_config()

    await store.transact(configure)
    producing = asyncio.Event()

    async def producer(i: int) -> None:
        for n in range(150):
            subject = rng.choice(SUBJECTS) if n % 3 == 0 else ""
            op = history.invoke("enqueue", f"p{i}", subject=subject)
            try:
                e = await core.jobs.enqueue(NS, QUEUE, pb.TaskSpec(name="t", payload=pb.Payload(data=b"%d" % n)),
                                            pb.EnqueueOpts(subject=subject))  # fmt: skip
                history.ok(op, e.job_id)
            except (JobsError, StoreError) as err:
                history.info(op, repr(err))
            await asyncio.sleep(0)

    async def worker(i: int) -> None:
        idle = 0
        while idle < 20 or not producing.is_set():
            op = history.invoke("lease", f"w{i}", max=3)
            try:
                jobs = await core.jobs.lease(NS, [QUEUE], f"w{i}", 3)
            except (JobsError, StoreError) as err:
                history.info(op, repr(err))
                continue
            history.ok(op, [(j.id, j.epoch, j.opts.subject) for j in jobs])
            idle = 0 if jobs else idle + 1
            for j in jobs:
                while True:  # retried until the answer is definite, as a worker does
                    c = history.invoke("complete", f"w{i}", job=j.id, epoch=j.epoch)
                    try:
                        await core.jobs.complete(NS, QUEUE, j.id, j.epoch, Ok(None))
                        history.ok(c)
                        break
                    except StoreError as err:
                        history.info(c, repr(err))
                    except JobsError as err:
                        history.fail(c, str(err))
                        break
            await asyncio.sleep(0)

    producers = [asyncio.create_task(producer(i)) for i in range(3)]
    workers = [asyncio.create_task(worker(i)) for i in range(3)]
    await asyncio.gather(*producers)
    producing.set()
    await asyncio.gather(*workers)
    history.faults.update({f"store:{f.value}": n for f, n in plan.injected.items()})
    final = await store.snapshot(read_final_state, NS, QUEUE)
    report = check(history, {QUEUE: final}, watched=QUEUE)
    print(f"\nstore faults (seed {seed}): {report.text(history)}")
    await store.close()
    assert not report.violations, "\n".join(report.violations[:20])
    assert report.acknowledged_jobs > 300
    assert {"store:conflict", "store:region", "store:unknown_committed"} <= set(history.faults), (
        history.faults
    )
