"""Enqueue (spec §5.1, §6.2): one transaction per call or per bulk batch, each job
stored by `insert.job_insert`; in a bulk call a refused job gets its error in its slot."""

from __future__ import annotations

from loam_common.effects import Handed
from loam_common.errors import IdempotencyConflict, JobsError
from loam_common.jobs import lease
from loam_common.jobs.insert import check_payload_limit, job_insert
from loam_common.jobs.linked import LinkedQueueTx
from loam_common.jobs.new_job import Enqueued, NewJob
from loam_common.store.base import Txn


def job_enqueue(
    tx: Txn, ns: str, queue: str, new_jobs: list[NewJob], bulk: bool = False
) -> list[Enqueued | JobsError]:
    """Enqueue jobs into one queue in one transaction. In a bulk call (`bulk`, or more
    than one job) a refused job (key clash) gets its error in its slot and leaves no
    trace, and the others go in; a single enqueue raises it."""
    with LinkedQueueTx(tx, ns, queue) as qt:
        return _enqueue_into(qt, new_jobs, bulk)


def _enqueue_into(qt: LinkedQueueTx, new_jobs: list[NewJob], bulk: bool) -> list[Enqueued | JobsError]:
    """`job_enqueue`'s work in the queue's open QueueTx."""
    tx = qt.tx
    out: list[Enqueued | JobsError] = []
    if qt.cfg.payload_limit:
        for nj in new_jobs:  # like any invalid input, one too big refuses the whole call
            check_payload_limit(qt, nj)
    from_counter = sum(1 for nj in new_jobs if nj.opts.job_key_from_counter and not nj.opts.job_key)
    if from_counter > 1:
        qt.prefetch_job_keys_from_counter(from_counter)
    for nj in new_jobs:
        # A savepoint only for a job that can be refused; released at once, so a
        # bulk batch never nests a thousand of them (SQLite copies pages per level).
        sp = tx.savepoint() if (bulk or len(new_jobs) > 1) and _refusable(nj) else None
        try:
            out.append(job_insert(qt, nj))
            if sp is not None:
                tx.release(sp)
        except JobsError as e:
            if sp is not None:
                tx.rollback_to(sp)
                tx.release(sp)
                out.append(e)
            elif isinstance(e, IdempotencyConflict) and (bulk or len(new_jobs) > 1):
                out.append(e)  # raised before job_insert wrote anything
            else:
                raise
    return out


def job_enqueue_then_lease(
    tx: Txn, ns: str, queue: str, new_jobs: list[NewJob], bulk: bool, lease_args: tuple
) -> tuple[list[Enqueued | JobsError], lease.LeaseResult]:
    """An enqueue that hands its jobs to a parked poll (decision 0023): `job_enqueue`,
    then a lease of `queue` for that poll (job_lease's worker, max_jobs, names and
    visibility_ns, subject_batch), in one transaction."""
    worker, max_jobs, names, visibility_ns, subject_batch = lease_args
    leased = lease.LeaseResult(subject_batch=subject_batch)
    # One QueueTx for both: the queue's config and shard meta read, and written, once.
    with LinkedQueueTx(tx, ns, queue) as qt:
        done = _enqueue_into(qt, new_jobs, bulk)
        lease.lease_from(qt, [queue], worker, max_jobs, names, 0, visibility_ns, leased)
    lease.declare_leased(tx, ns, worker, leased)
    if leased.jobs:  # the poll has them: their wake-ups would only send another poll looking
        tx.declare(Handed(frozenset(j.id for j in leased.jobs)))
    return done, leased


def _refusable(nj: NewJob) -> bool:
    """Whether enqueueing `nj` can end in a per-job error after it has written something
    (a key clash, a missing parent). A key that keeps the first job, or one the counter
    makes, never clashes into an error. An idempotency key alone needs no savepoint: its
    conflict is the first check `job_insert` makes, before any write (and the SDK puts one
    on every job, so a bulk call would otherwise pay a savepoint and an undo record per
    write for every job)."""
    o = nj.opts
    return bool(
        (o.job_key and not o.job_key_keeps_first) or nj.init or o.HasField("dedup") or o.HasField("parent")
    )
