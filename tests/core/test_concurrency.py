"""Workers racing for one queue: several asyncio workers on one QueueCore (every
backend), and several OS processes, each with its own store, on one SQLite file. Every
job is leased, no (job, epoch) is handed out twice, and every job completes exactly
once. Some first deliveries are released, so jobs are leased more than once and the
epochs are worth checking."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
import zlib
from collections import Counter

from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S
from loam_common.jobs.complete import Ok, Release
from loam_common.store import open_store
from loam_queue_core import QueueCore

NS = "acme"
SEC = 1_000_000_000


def released_first(job_id: str, epoch: int) -> bool:
    """Which deliveries a worker hands back (a quarter of the first ones)."""
    return epoch == 1 and zlib.crc32(job_id.encode()) % 4 == 0


async def test_asyncio_workers_share_a_queue(core, check_invariants, events_of):
    n_jobs, n_workers = 120, 6
    enqueued: list[str] = []
    leased: list[tuple[str, int]] = []
    completed: list[str] = []
    all_done = asyncio.Event()
    producing_done = asyncio.Event()

    async def producer() -> None:
        for start in range(0, n_jobs, 10):
            batch = [
                (pb.TaskSpec(name="t", payload=pb.Payload(data=str(i).encode())), None)
                for i in range(start, start + 10)
            ]
            enqueued.extend(r.job_id for r in await core.jobs.enqueue_bulk(NS, "q", batch))
            await asyncio.sleep(0)
        producing_done.set()

    async def worker(name: str) -> None:
        while True:
            jobs = await core.jobs.lease(NS, ["q"], name, 3, wait_ns=2 * SEC)
            for job in jobs:
                leased.append((job.id, job.epoch))
                if released_first(job.id, job.epoch):
                    await core.jobs.complete(NS, "q", job.id, job.epoch, Release())
                    continue
                done = await core.jobs.complete(NS, "q", job.id, job.epoch, Ok())
                assert done.state == S.COMPLETED
                completed.append(job.id)
                if producing_done.is_set() and len(completed) == len(enqueued):
                    all_done.set()

    workers = [asyncio.create_task(worker(f"w{i}")) for i in range(n_workers)]
    try:
        await producer()
        async with asyncio.timeout(25):
            waiter = asyncio.create_task(all_done.wait())
            done, _ = await asyncio.wait([waiter, *workers], return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                if t is not waiter:
                    t.result()  # a worker failed: raise its error
    finally:
        for t in workers:
            t.cancel()
        await asyncio.gather(*workers, return_exceptions=True)

    assert len(enqueued) == len(set(enqueued)) == n_jobs
    assert len(leased) == len(set(leased)), "a (job, epoch) was handed out twice"
    assert {job_id for job_id, _ in leased} == set(enqueued)
    assert Counter(completed) == Counter(enqueued)  # each exactly once
    redelivered = {job_id for job_id, epoch in leased if epoch > 1}
    assert redelivered and redelivered == {j for j in enqueued if released_first(j, 1)}
    assert len({name for name in (await core.store.snapshot(_workers))}) > 1
    assert (await check_invariants()) == {S.COMPLETED: n_jobs}
    assert Counter(e.job_id for e in await events_of() if e.event == "completed") == Counter(enqueued)


def _workers(tx) -> list[str]:
    from loam_common import keys

    k = keys.QueueKeys(NS, "q")
    return [key[len(k.workers()) :].decode() for key, _ in tx.scan(k.workers(), keys.prefix_end(k.workers()))]


WORKER_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys, zlib
    from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
    from loam_common.jobs.complete import Ok, Release
    from loam_common.store import open_store
    from loam_queue_core import QueueCore

    async def main(path, name, n_enqueue):
        store = open_store("sqlite://" + path)
        core = QueueCore(store)
        print("ready", flush=True)
        sys.stdin.readline()  # everyone starts at once
        out = {"enqueued": [], "leased": [], "completed": []}
        for i in range(n_enqueue):
            task = pb.TaskSpec(name="t", payload=pb.Payload(data=f"{name}-{i}".encode()))
            out["enqueued"].append((await core.jobs.enqueue("acme", "q", task)).job_id)
        while jobs := await core.jobs.lease("acme", ["q"], name, 4):
            for job in jobs:
                out["leased"].append([job.id, job.epoch])
                if job.epoch == 1 and zlib.crc32(job.id.encode()) % 4 == 0:
                    await core.jobs.complete("acme", "q", job.id, job.epoch, Release())
                    continue
                await core.jobs.complete("acme", "q", job.id, job.epoch, Ok())
                out["completed"].append(job.id)
        await store.close()
        print(json.dumps(out), flush=True)

    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
    """
)


async def test_processes_share_one_sqlite_file(tmp_path):
    db = tmp_path / "jobs.db"
    script = tmp_path / "worker.py"
    script.write_text(WORKER_SCRIPT)
    n_pre, n_procs, n_each = 120, 4, 20

    store = open_store(f"sqlite://{db}")
    core = QueueCore(store)
    pre = [
        r.job_id
        for r in await core.jobs.enqueue_bulk(NS, "q", [(pb.TaskSpec(name="t"), None) for _ in range(n_pre)])
    ]

    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            str(script),
            str(db),
            f"p{i}",
            str(n_each),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for i in range(n_procs)
    ]
    try:
        async with asyncio.timeout(25):
            for p in procs:  # wait until each has opened the store
                line = await p.stdout.readline()
                assert line.strip() == b"ready", (await p.stderr.read()).decode()
            for p in procs:
                p.stdin.write(b"go\n")
                await p.stdin.drain()
            results = []
            for p in procs:
                out, errs = await p.communicate()
                assert p.returncode == 0, errs.decode()
                results.append(json.loads(out.decode().strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()

    enqueued = pre + [j for r in results for j in r["enqueued"]]
    leased = [tuple(x) for r in results for x in r["leased"]]
    completed = [j for r in results for j in r["completed"]]
    assert len(set(enqueued)) == n_pre + n_procs * n_each
    assert len(leased) == len(set(leased)), "a (job, epoch) was handed out twice"
    assert {j for j, _ in leased} == set(enqueued)
    assert Counter(completed) == Counter(enqueued)  # each exactly once
    assert sum(1 for r in results if r["leased"]) > 1, "only one process got work"
    assert any(e > 1 for _j, e in leased), "nothing was delivered twice"

    def final(tx):
        from loam_common import keys

        k = keys.QueueKeys(NS, "q")
        jobs = [pb.Job.FromString(v) for _k, v in tx.scan(k.jobs(), keys.prefix_end(k.jobs()))]
        meta = pb.ShardMeta.FromString(tx.get(k.shard_meta(0)))
        return Counter(j.state for j in jobs), {s: n for s, n in meta.counts.items() if n}

    by_state, counts = await store.snapshot(final)
    assert by_state == {S.COMPLETED: len(enqueued)}
    assert counts == {S.COMPLETED: len(enqueued)}
    await store.close()
