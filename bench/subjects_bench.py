"""Benchmark: draining a queue of per-subject serial jobs against the same jobs without
subjects (issue 25's bar: 10,000 subjects x 10 jobs drain at >= 80 % of the rate of the
same 100,000 jobs without subjects).

Drives `QueueCore` in process on a fresh embedded store per run (`--store lmdb` or
`sqlite`), the way bench/core_bench.py does: the jobs are enqueued in bulk (not timed;
round-robin over the subjects, so each subject's jobs are spread over the whole queue),
then `--workers` asyncio workers lease up to `--lease-batch` jobs and complete them with
one batched Complete each, until the queue is empty. Three variants, each on its own
store, round after round (`--repeat`), so a load change hits them alike:

  plain          the jobs without a subject
  subjects       10,000 subjects x 10 jobs: one job per subject at a time
  subject-batch  the same, leased with subject_batch = 10 (a subject's run in one go)

It reports wall time and the process's CPU time (all threads: the event loop and the
store's writer), jobs per wall second and per CPU second, and each subject variant's
ratio to `plain`. The ratio per CPU second is the one to read on a loaded machine. It
checks that every job completed once and that every subject ran in enqueue order; it
never asserts a speed.

`--count-ops` runs each variant once and counts instead of timing: the store reads,
writes, deletes and range scans of the drain per job (on the LMDB transaction), the
figures decision 0042 works from; they do not move with the machine's load.

Run:  .venv/bin/python bench/subjects_bench.py [--subjects 10000 --per-subject 10] [--store lmdb]
      .venv/bin/python bench/subjects_bench.py --quick        (1,000 x 10, about 20 s)
      .venv/bin/python bench/subjects_bench.py --count-ops --subjects 2000
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs.complete import Ok
from loam_common.store.runner import open_store
from loam_queue_core.core import QueueCore

NS, QUEUE, TASK = "bench", "subjects", "t"
BULK = 1000
VARIANTS = ("plain", "subjects", "subject-batch")


async def _fill(core: QueueCore, subjects: int, per_subject: int, with_subjects: bool) -> list[str]:
    order: list[str] = []
    batch: list[tuple[pb.TaskSpec, pb.EnqueueOpts]] = []
    for i in range(per_subject):
        for s in range(subjects):
            opts = pb.EnqueueOpts(subject=f"s{s}") if with_subjects else pb.EnqueueOpts()
            batch.append((pb.TaskSpec(name=TASK, payload=pb.Payload(data=f"{s}:{i}".encode())), opts))
            if len(batch) == BULK:
                order.extend(r.job_id for r in await core.jobs.enqueue_bulk(NS, QUEUE, batch))
                batch = []
    if batch:
        order.extend(r.job_id for r in await core.jobs.enqueue_bulk(NS, QUEUE, batch))
    return order


async def _drain(core: QueueCore, workers: int, lease_batch: int, subject_batch: int) -> list[pb.Job]:
    done: list[pb.Job] = []

    async def worker(w: int) -> None:
        while True:
            jobs = await core.jobs.lease(NS, [QUEUE], f"w{w}", lease_batch, subject_batch=subject_batch)
            if not jobs:
                return
            await core.jobs.complete_many(NS, [(QUEUE, j.id, j.epoch, Ok()) for j in jobs])
            done.extend(jobs)

    await asyncio.gather(*(worker(w) for w in range(workers)))
    return done


COUNTED_OPS = ("get", "put", "delete", "scan")


@contextlib.contextmanager
def counting_store_ops(counts: collections.Counter):
    """Count the LMDB transaction's reads and writes while the block runs."""
    from loam_common.store.lmdb import LmdbTxn

    originals = {op: getattr(LmdbTxn, op) for op in COUNTED_OPS}

    def counted(op, fn):
        def call(self, *a, **kw):
            counts[op] += 1
            return fn(self, *a, **kw)

        return call

    for op, fn in originals.items():
        setattr(LmdbTxn, op, counted(op, fn))
    try:
        yield counts
    finally:
        for op, fn in originals.items():
            setattr(LmdbTxn, op, fn)


async def run_variant(args: argparse.Namespace, variant: str) -> dict:
    tmp = tempfile.mkdtemp(prefix="loam-subjects-bench-")
    path = os.path.join(tmp, "store.lmdb" if args.store == "lmdb" else "store.db")
    store = open_store(f"{args.store}://{path}")
    try:
        core = QueueCore(store)
        with_subjects = variant != "plain"
        t0 = time.perf_counter()
        order = await _fill(core, args.subjects, args.per_subject, with_subjects)
        fill_s = time.perf_counter() - t0
        ops: collections.Counter = collections.Counter()
        wall0, cpu0 = time.perf_counter(), time.process_time()
        with counting_store_ops(ops) if args.count_ops else contextlib.nullcontext():
            done = await _drain(
                core, args.workers, args.lease_batch, args.per_subject if variant == "subject-batch" else 0
            )
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        # Every job once; each subject's jobs in enqueue order.
        n = args.subjects * args.per_subject
        ids = [j.id for j in done]
        if len(ids) != n or set(ids) != set(order):
            raise SystemExit(f"{variant}: completed {len(ids)} jobs ({len(set(ids))} distinct), expected {n}")
        if with_subjects:
            rank = {job_id: i for i, job_id in enumerate(order)}
            last: dict[str, int] = {}
            for j in done:
                r = rank[j.id]
                if r < last.get(j.opts.subject, -1):
                    raise SystemExit(f"{variant}: subject {j.opts.subject} ran out of order")
                last[j.opts.subject] = r
        return {"variant": variant, "jobs": n, "fill_s": fill_s, "wall_s": wall, "cpu_s": cpu,
                "jobs_per_s": n / wall, "jobs_per_cpu_s": n / cpu,
                "ops_per_job": {op: ops[op] / n for op in COUNTED_OPS}}  # fmt: skip
    finally:
        await store.close()
        shutil.rmtree(tmp, ignore_errors=True)


async def main_async(args: argparse.Namespace) -> dict:
    rounds: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for r in range(args.repeat):
        for variant in VARIANTS:
            res = await run_variant(args, variant)
            rounds[variant].append(res)
            if not args.quiet:
                print(f"round {r + 1} {variant:14} {res['jobs_per_s']:9,.0f} jobs/s  "
                      f"{res['jobs_per_cpu_s']:9,.0f} jobs/CPU-s", file=sys.stderr)  # fmt: skip
    return {"args": vars(args), "load": os.getloadavg(), "rounds": rounds, "summary": summarise(rounds)}


def summarise(rounds: dict[str, list[dict]], extra: tuple[str, ...] = ()) -> dict[str, dict[str, float]]:
    """Each variant's medians over its rounds (rates, and the `extra` figures), and the
    subject variants' rates as fractions of plain's (also bench/subjects_http_bench.py)."""
    summary = {variant: {k: statistics.median(x[k] for x in runs) for k in ("jobs_per_s", "jobs_per_cpu_s", *extra)}
               for variant, runs in rounds.items()}  # fmt: skip
    for variant in ("subjects", "subject-batch"):
        for k in ("jobs_per_s", "jobs_per_cpu_s"):
            summary[variant][f"{k}_vs_plain"] = summary[variant][k] / summary["plain"][k]
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", choices=["lmdb", "sqlite"], default="lmdb")
    p.add_argument("--subjects", type=int, default=10_000)
    p.add_argument("--per-subject", type=int, default=10)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--lease-batch", type=int, default=32)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="1,000 subjects, one round")
    p.add_argument("--count-ops", action="store_true", help="count store ops per job (LMDB), one round")
    p.add_argument("--json", action="store_true")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.subjects, args.repeat = 1000, 1
    if args.count_ops:
        if args.store != "lmdb":
            p.error("--count-ops counts on the LMDB transaction: use --store lmdb")
        print(f"store ops per drained job, {args.subjects:,} subjects x {args.per_subject} jobs (LMDB):")
        for variant in VARIANTS:
            ops = asyncio.run(run_variant(args, variant))["ops_per_job"]
            print(f"  {variant:14} " + "  ".join(f"{op} {ops[op]:.2f}" for op in COUNTED_OPS))
        return 0
    out = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"load {out['load'][0]:.1f}; {args.subjects:,} subjects x {args.per_subject} jobs, {args.store}, "
              f"{args.workers} workers leasing {args.lease_batch}")  # fmt: skip
        for variant, s in out["summary"].items():
            ratio = (f"  {s['jobs_per_s_vs_plain']:.0%} / {s['jobs_per_cpu_s_vs_plain']:.0%} of plain"
                     if variant != "plain" else "")  # fmt: skip
            print(
                f"  {variant:14} {s['jobs_per_s']:9,.0f} jobs/s  {s['jobs_per_cpu_s']:9,.0f} jobs/CPU-s{ratio}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
