"""Dead-letter queues (spec §6.10): a failed job is copied into the queue's
dead-letter queue with its error history and original queue in headers, and marked
dead-lettered where it was. `redrive` moves dead letters back to where they came from."""

from __future__ import annotations

import json

from loam_common import ids, keys
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S
from loam_common.jobs.queue import QueueTx

ORIGIN_QUEUE = "x-loam-origin-queue"
ORIGIN_JOB = "x-loam-origin-job"
ERRORS = "x-loam-errors"


def dead_letter(qt: QueueTx, job: pb.Job) -> str:
    """Copy `job` into the dead-letter queue; returns the copy's id."""
    qt.move(job, S.DEAD_LETTERED, "dead-lettered", detail=qt.cfg.dead_letter_queue)
    copy = pb.Job(id=ids.new_ulid(), queue=qt.cfg.dead_letter_queue, created_ns=qt.now)
    copy.task.CopyFrom(job.task)
    copy.opts.CopyFrom(job.opts)  # kept so a redrive restores attempts, backoff, priority
    for once_only in ("job_key", "idempotency", "dedup", "not_before", "parent", "subject"):
        copy.opts.ClearField(once_only)
    copy.task.headers[ORIGIN_QUEUE] = qt.name
    copy.task.headers[ORIGIN_JOB] = job.id
    copy.task.headers[ERRORS] = json.dumps(
        [{"code": e.code, "message": e.message, "attempt": e.attempt, "at_ns": e.at_ns} for e in job.errors]
    )
    copy.errors.extend(job.errors)
    copy.origin_queue = qt.name
    copy.attempts_max = 1
    copy.state = S.ready_state(copy.opts.priority)
    with qt.peer(qt.cfg.dead_letter_queue) as dq:  # one QueueTx per queue in a transition
        dq.insert(copy)
        dq.emit("added", copy)
        dq.emit("waiting", copy, detail=f"dead letter from {qt.name}")
        dq.wake_after_commit()  # a consumer of the dead-letter queue may be parked
    return copy.id


def redrive(dq: QueueTx, limit: int) -> int:
    """Move up to `limit` waiting dead letters back to their original queues as new jobs."""
    moved = 0
    for shard in range(max(dq.cfg.shards, 1)):
        prefix = dq.k.ready_shard(shard)
        for _key, job_id in dq.tx.scan(prefix, keys.prefix_end(prefix), limit=limit - moved):
            job = dq.require_job(job_id.decode())
            origin = job.task.headers.get(ORIGIN_QUEUE) or job.origin_queue
            if not origin:
                continue
            fresh = pb.Job(id=ids.new_ulid(), queue=origin, created_ns=dq.now)
            fresh.task.CopyFrom(job.task)
            for h in (ORIGIN_QUEUE, ORIGIN_JOB, ERRORS):
                fresh.task.headers.pop(h, None)
            fresh.opts.CopyFrom(job.opts)
            with dq.peer(origin) as oq:  # one QueueTx per queue in a transition
                fresh.attempts_max = fresh.opts.attempts or oq.cfg.attempts or 1
                fresh.state = S.ready_state(fresh.opts.priority)
                oq.insert(fresh)
                oq.emit("added", fresh)
                oq.emit("waiting", fresh, detail=f"redriven from {dq.name}")  # insert wakes a poll
            dq.remove(job, event="removed")
            moved += 1
        if moved >= limit:
            break
    return moved
