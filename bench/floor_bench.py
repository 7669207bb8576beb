"""The floor under the queue core's in-process targets: only the calls into C that a
job's transitions cannot do without, with no Python logic between them.

`core_bench.py` measures the state machine; its `raw` scenario and issue 18's LMDB
figures measure the store alone, with no messages. This measures what lies between:
per job, the same LMDB environment settings as the backend, the rows the key layout
writes (`keys.py`) and the protobuf messages the design stores (a `Job` record and a
`JobEvent` per event), built, parsed and serialized as the transitions do, each key
made by concatenation and `struct`, and nothing else: no checks, counts, effects,
savepoints, ids or answers. A transition in Python cannot cost less than this.

  enqueue   a job built from its TaskSpec and options, serialized; its `added` and
            `waiting` events (one message, serialized twice); four puts (record,
            ready entry, two events); a shard meta and a commit per 1,000 jobs
  lease+complete
            lease: a scan of the ready index (32 a transaction), the record read and
            parsed, six fields set, serialized and put, the ready entry deleted, the
            active entry put, the `active` event built, serialized and put; complete: the
            record read and parsed, five fields set, serialized and put, the active entry
            deleted, the finished-state entry put, the `completed` event; a shard meta
            and a commit per transaction of 32

    .venv/bin/python bench/floor_bench.py [--jobs 30000] [--rounds 5]

Prints the Python build it ran on and µs of CPU a job (thread time, best and median of
the rounds) with the rate it would allow, next to the in-process targets of issue 18
(bulk 100,000 jobs/s = 10 µs a job; lease 32 + complete 40,000 jobs/s = 25 µs a job for
both transitions).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import lmdb

from loam_common import keys
from loam_common.gen.loam.jobs.v1 import events_pb2
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs.states import ACTIVE, COMPLETED, WAITING

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "drivers"))
import procstat  # noqa: E402  (bench/drivers/procstat.py)

U64 = keys.U64
LEASE_BATCH = 32
BULK_BATCH = 1000
# The key prefixes of one queue's rows in shard 0, made once (keys.QueueKeys makes them
# a call each); a row's key is its prefix and its packed order, as keys.py writes it.
K = keys.QueueKeys("bench", "floor")
JOB = K.jobs()
READY = K.ready_band(0, keys.FIFO_BAND) + keys.U32.pack(keys.FIFO_LANE)
ACTIVE_ = K.active_shard(0)
DONE = K.state_shard(COMPLETED, 0)
EVENT = K.event_log_shard(0)
META = K.shard_meta(0)


def open_env(path: str) -> lmdb.Environment:
    # The backend's settings (store/lmdb.py), without --durable.
    return lmdb.open(path, map_size=1 << 30, subdir=True, max_dbs=2, writemap=False, sync=False,
                     metasync=True, map_async=False, readahead=False, lock=True)  # fmt: skip


def task_spec(i: int) -> pb.TaskSpec:
    task = pb.TaskSpec(
        name="noop", payload=pb.Payload(data=b"x" * 100, content_type="application/octet-stream")
    )
    task.headers["traceparent"] = f"00-{i + 1:032x}-{i + 1:016x}-01"
    return task


def enqueue_floor(env: lmdb.Environment, jobs: int) -> float:
    """CPU seconds to store `jobs` new jobs, batches of 1,000."""
    db = env.open_db(b"kv")
    # What arrives decoded from the wire, and the ids the server would have made.
    specs = [task_spec(i) for i in range(jobs)]
    opts = pb.EnqueueOpts()
    ids = [f"01JF{i:022d}" for i in range(jobs)]
    meta = pb.ShardMeta()
    now = time.time_ns()
    t0 = time.thread_time()
    seq = 0
    for start in range(0, jobs, BULK_BATCH):
        with env.begin(write=True, db=db) as txn:
            put = txn.put
            for i in range(start, min(start + BULK_BATCH, jobs)):
                job_id = ids[i]
                seq += 1
                job = pb.Job(id=job_id, queue="floor", task=specs[i], opts=opts, created_ns=now, state=WAITING,
                             state_ns=now, seq=seq, attempts_max=1)  # fmt: skip
                put(JOB + job_id.encode(), job.SerializeToString())
                put(READY + U64.pack(seq), job_id.encode())
                ev = events_pb2.JobEvent(event="added", queue="floor", shard=0, seq=2 * seq - 1, time_ns=now,
                                         job_id=job_id, state=WAITING, name="noop")  # fmt: skip
                ev.headers["traceparent"] = specs[i].headers["traceparent"]
                put(EVENT + U64.pack(2 * seq - 1), ev.SerializeToString())
                ev.event, ev.seq = "waiting", 2 * seq
                put(EVENT + U64.pack(2 * seq), ev.SerializeToString())
            meta.next_seq, meta.outbox_seq = seq, 2 * seq
            put(META, meta.SerializeToString())
    return time.thread_time() - t0


def lease_complete_floor(env: lmdb.Environment, jobs: int) -> float:
    """CPU seconds to lease (32 a transaction) and complete (32 a transaction) the
    `jobs` waiting jobs `enqueue_floor` stored."""
    db = env.open_db(b"kv")
    meta = pb.ShardMeta()
    ready = K.ready_shard(0)
    seq = 2 * jobs
    t0 = time.thread_time()
    while True:
        now = time.time_ns()
        with env.begin(write=True, db=db) as txn:
            cur = txn.cursor()
            entries = []
            if cur.set_range(ready):
                for key, value in cur:
                    if not key.startswith(ready) or len(entries) == LEASE_BATCH:
                        break
                    entries.append((key, value))
            if not entries:
                break
            leased = []
            for ready_key, job_id in entries:
                jk = JOB + job_id
                job = pb.Job.FromString(txn.get(jk))
                job.epoch += 1
                job.worker = "w1"
                job.lease_started_ns = job.processed_ns = now
                job.deadline_ns = now + 30_000_000_000
                job.state, job.state_ns = ACTIVE, now
                txn.put(jk, job.SerializeToString())
                txn.delete(ready_key)
                txn.put(ACTIVE_ + U64.pack(job.deadline_ns) + job_id, b"")
                seq += 1
                ev = events_pb2.JobEvent(event="active", queue="floor", shard=0, seq=seq, time_ns=now, job_id=job.id,
                                         state=ACTIVE, name=job.task.name, epoch=job.epoch, worker="w1")  # fmt: skip
                ev.headers["traceparent"] = job.task.headers["traceparent"]
                txn.put(EVENT + U64.pack(seq), ev.SerializeToString())
                leased.append((job_id, job.deadline_ns))
            meta.outbox_seq = seq
            txn.put(META, meta.SerializeToString())
        with env.begin(write=True, db=db) as txn:
            for job_id, deadline_ns in leased:
                jk = JOB + job_id
                job = pb.Job.FromString(txn.get(jk))
                job.state, job.state_ns, job.finished_ns = COMPLETED, now, now
                job.worker, job.deadline_ns = "", 0
                txn.put(jk, job.SerializeToString())
                txn.delete(ACTIVE_ + U64.pack(deadline_ns) + job_id)
                txn.put(DONE + U64.pack(now) + job_id, b"")
                seq += 1
                ev = events_pb2.JobEvent(event="completed", queue="floor", shard=0, seq=seq, time_ns=now,
                                         job_id=job.id, state=COMPLETED, name=job.task.name, epoch=job.epoch,
                                         prev_state=ACTIVE)  # fmt: skip
                ev.headers["traceparent"] = job.task.headers["traceparent"]
                txn.put(EVENT + U64.pack(seq), ev.SerializeToString())
            meta.outbox_seq = seq
            txn.put(META, meta.SerializeToString())
    return time.thread_time() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=30000)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    enq, lc = [], []
    for _ in range(args.rounds):
        path = tempfile.mkdtemp(prefix="loam-floor-")
        try:
            env = open_env(path)
            enq.append(enqueue_floor(env, args.jobs) / args.jobs * 1e6)
            lc.append(lease_complete_floor(env, args.jobs) / args.jobs * 1e6)
            env.close()
        finally:
            shutil.rmtree(path, ignore_errors=True)
    out: dict = {"python": procstat.python_build()}
    for name, xs, target_us in (("enqueue", enq, 10.0), ("lease_complete", lc, 25.0)):
        best, med = min(xs), statistics.median(xs)
        out[name] = {"cpu_us_per_job_best": round(best, 2), "cpu_us_per_job_median": round(med, 2),
                     "rounds": [round(x, 2) for x in xs], "jobs_per_cpu_s_at_best": round(1e6 / best),
                     "target_us_per_job": target_us}  # fmt: skip
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
