"""BullMQ's deduplication modes (spec §6.2): simple (while the job is not finished),
throttle (for a ttl), debounce (replace the delayed job's data, optionally extend the
ttl) and keep-last-if-active (a duplicate that arrives while the job runs is enqueued
once it finishes: linked.py, since that enqueues)."""

from __future__ import annotations

from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S
from loam_common.jobs.new_job import Enqueued, NewJob, due_ns
from loam_common.jobs.queue import QueueTx


def _load(qt: QueueTx, dedup_id: str) -> pb.DedupRecord | None:
    raw = qt.tx.get(qt.k.dedup(dedup_id))
    if raw is None:
        return None
    rec = pb.DedupRecord.FromString(raw)
    if rec.expires_ns and rec.expires_ns <= qt.now:
        return None
    return rec


def duplicate_of(qt: QueueTx, nj: NewJob) -> Enqueued | None:
    """The existing job this enqueue duplicates, or None to enqueue it."""
    d = nj.opts.dedup
    rec = _load(qt, d.id)
    if rec is None:
        return None
    job = qt.get_job(rec.job_id)
    if job is None or (job.state in S.FINISHED and not rec.expires_ns):
        return None
    if d.replace_job and job.state == S.DELAYED:
        # BullMQ's replace: the delayed job goes, this one is enqueued in its place and
        # the id points at it, for what was left of its expiry unless extend renews it.
        qt.emit("deduplicated", job, detail=d.id)
        qt.remove(job, event="removed")
        expires = qt.now + d.ttl_ns if d.extend and d.ttl_ns else rec.expires_ns
        qt.tx.put(qt.k.dedup(d.id), pb.DedupRecord(job_id=nj.job_id, expires_ns=expires).SerializeToString())
        return None
    if d.replace_job and not (d.keep_last_if_active and job.state == S.ACTIVE):
        return Enqueued(job.id, False, job.state, job.opts.job_key)  # BullMQ: no event here
    changed = False
    if d.mode == pb.DEDUP_MODE_DEBOUNCE and d.extend and d.ttl_ns:
        rec.expires_ns = qt.now + d.ttl_ns
        changed = True
    if d.mode == pb.DEDUP_MODE_DEBOUNCE and d.replace and job.state == S.DELAYED:
        # Debounce: the pending job takes the newest data and the newest delay.
        job.task.CopyFrom(nj.task)
        due = due_ns(nj.opts, qt.now)
        qt.tx.delete(qt.k.delayed(job.shard, job.due_ns, job.id))
        job.due_ns = due
        qt.tx.put(qt.k.delayed(job.shard, due, job.id), b"")
        qt.put_job(job)
    elif d.keep_last_if_active and job.state == S.ACTIVE:
        rec.pending_job_id = nj.job_id
        rec.pending_task.CopyFrom(nj.task)
        rec.pending_opts.CopyFrom(nj.opts)
        changed = True
    if changed:
        qt.tx.put(qt.k.dedup(d.id), rec.SerializeToString())
    qt.emit("deduplicated", job, detail=d.id)
    return Enqueued(job.id, False, job.state, job.opts.job_key)


def record(qt: QueueTx, nj: NewJob) -> None:
    d = nj.opts.dedup
    raw = qt.tx.get(qt.k.dedup(d.id))
    if raw is not None and pb.DedupRecord.FromString(raw).job_id == nj.job_id:
        return  # duplicate_of() wrote it (replace_job keeps the replaced job's expiry)
    rec = pb.DedupRecord(job_id=nj.job_id, expires_ns=qt.now + d.ttl_ns if d.ttl_ns else 0)
    qt.tx.put(qt.k.dedup(d.id), rec.SerializeToString())


def job_of(qt: QueueTx, dedup_id: str) -> pb.Job | None:
    """The live job a dedup id points at (BullMQ's getDeduplicationJobId)."""
    rec = _load(qt, dedup_id)
    if rec is None:
        return None
    job = qt.get_job(rec.job_id)
    if job is None or (job.state in S.FINISHED and not rec.expires_ns):
        return None
    return job


def remove_key(qt: QueueTx, dedup_id: str) -> bool:
    key = qt.k.dedup(dedup_id)
    existed = qt.tx.get(key) is not None
    qt.tx.delete(key)
    return existed
