"""`LinkedQueueTx`: the QueueTx every transition opens. It is queue.QueueTx with the links
between jobs followed: when a job leaves the live states (finished, or removed while
live), its dedup id is freed or the duplicate kept while it ran is enqueued
(dedup.py's keep-last-if-active), and its flow parents settle (dependencies.py); when
a finished job is removed, a parent still counting it as pending forgets it.

QueueTx itself stays below dedup, insert and dependencies (which all move or store jobs
through it), so the modules import one way; this subclass is where the recursion
between them (a child's failure fails its parent, which settles its own parents) is
tied, by dispatch rather than by import."""

from __future__ import annotations

from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import dependencies
from loam_common.jobs.insert import job_insert
from loam_common.jobs.new_job import NewJob
from loam_common.jobs.queue import QueueTx


class LinkedQueueTx(QueueTx):
    __slots__ = ()

    def follow_job_left_live(self, job: pb.Job) -> None:
        if job.opts.dedup.id:
            _dedup_job_left_live(self, job)
        if job.parents:
            dependencies.on_job_finished(self, job)

    def follow_finished_job_removed(self, job: pb.Job) -> None:
        dependencies.on_finished_job_removed(self, job)


def _dedup_job_left_live(qt: QueueTx, job: pb.Job) -> None:
    """Release a simple dedup id, or enqueue the last duplicate kept while the job ran."""
    d = job.opts.dedup
    key = qt.k.dedup(d.id)
    raw = qt.tx.get(key)
    if raw is None:
        return
    rec = pb.DedupRecord.FromString(raw)
    if rec.job_id != job.id:
        return
    if rec.pending_job_id:
        pending = NewJob(rec.pending_job_id, rec.pending_task, rec.pending_opts)
        qt.tx.delete(key)
        job_insert(qt, pending)  # its insert wakes a poll
    elif not rec.expires_ns:
        qt.tx.delete(key)
