"""Enqueue (spec §5.1, §6.2): one transaction per call or per bulk batch, each job
stored by `insert.job_insert`; in a bulk call a refused job gets its error in its slot."""

from __future__ import annotations

from loam_common.effects import Handed
from loam_common.errors import IdempotencyConflict, JobsError
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import lease
from loam_common.jobs.insert import check_payload_limit, job_insert, store_idempotency_record
from loam_common.jobs.linked import LinkedQueueTx
from loam_common.jobs.new_job import CallKey, Enqueued, NewJob
from loam_common.jobs.queue import QueueTx
from loam_common.store.base import Txn


def job_enqueue(
    tx: Txn, ns: str, queue: str, new_jobs: list[NewJob], bulk: bool = False, call: CallKey | None = None
) -> list[Enqueued | JobsError]:
    """Enqueue jobs into one queue in one transaction. In a bulk call (`bulk`, or more
    than one job) a refused job (key clash) gets its error in its slot and leaves no
    trace, and the others go in; a single enqueue raises it. `call`: the bulk call's
    idempotency key (`call_answers`)."""
    with LinkedQueueTx(tx, ns, queue) as qt:
        return _enqueue_into(qt, new_jobs, bulk, call)


def _enqueue_into(
    qt: LinkedQueueTx, new_jobs: list[NewJob], bulk: bool, call: CallKey | None = None
) -> list[Enqueued | JobsError]:
    """`job_enqueue`'s work in the queue's open QueueTx."""
    if call is not None:
        answers = call_answers(qt, call)
        if answers is not None:
            return answers
    out = _insert_all(qt, new_jobs, bulk)
    if call is not None and new_jobs:  # a call of no jobs answers nothing, with or without it
        _remember_call(qt, call, out)
    return out


def _insert_all(qt: LinkedQueueTx, new_jobs: list[NewJob], bulk: bool) -> list[Enqueued | JobsError]:
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
        counter = qt.key_counter_mark() if sp is not None else None
        try:
            out.append(job_insert(qt, nj))
            if sp is not None:
                tx.release(sp)
        except JobsError as e:
            if sp is not None:
                tx.rollback_to(sp)
                tx.release(sp)
                qt.key_counter_reset(counter)  # type: ignore[arg-type]
                out.append(e)
            elif isinstance(e, IdempotencyConflict) and (bulk or len(new_jobs) > 1):
                out.append(e)  # raised before job_insert wrote anything
            else:
                raise
    return out


class StoredRefusal(JobsError):
    """A bulk item's refusal as a retry of its call gets it: the first call's code and
    message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.args = (code, message)


def call_answers(qt: QueueTx, call: CallKey) -> list[Enqueued | JobsError] | None:
    """The answers a bulk call with `call`'s key got, if one was made and its record has
    not expired; None if not. The key used for other jobs (or for one job's enqueue)
    refuses the call: IdempotencyConflict, nothing written."""
    raw = qt.idempotency_record(call.key)
    if raw is None:
        return None
    rec = pb.IdempotencyRecord.FromString(raw)
    if rec.expires_ns <= qt.now:
        return None
    if not rec.call or rec.request_hash != call.request_hash:
        raise IdempotencyConflict(call.key)
    return [
        StoredRefusal(a.error_code, a.error_message)
        if a.error_code
        else Enqueued(a.job_id, a.created, a.state, a.job_key, a.dropped)
        for a in rec.answers
    ]


def _remember_call(qt: QueueTx, call: CallKey, results: list[Enqueued | JobsError]) -> None:
    """One record for the call (`call_answers`), in the enqueue's transaction."""
    rec = pb.IdempotencyRecord(request_hash=call.request_hash, call=True)
    add = rec.answers.add
    for r in results:
        if isinstance(r, Enqueued):
            add(job_id=r.job_id, created=r.created, state=r.state, job_key=r.job_key, dropped=r.dropped)
        else:
            add(error_code=r.code, error_message=r.message)
    store_idempotency_record(qt, call.key, call.ttl_ns, rec)


def job_enqueue_then_lease(
    tx: Txn,
    ns: str,
    queue: str,
    new_jobs: list[NewJob],
    bulk: bool,
    lease_args: tuple,
    call: CallKey | None = None,
) -> tuple[list[Enqueued | JobsError], lease.LeaseResult]:
    """An enqueue that hands its jobs to a parked poll (decision 0023): `job_enqueue`,
    then a lease of `queue` for that poll (job_lease's worker, max_jobs, names and
    visibility_ns, subject_batch), in one transaction."""
    worker, max_jobs, names, visibility_ns, subject_batch = lease_args
    leased = lease.LeaseResult(subject_batch=subject_batch)
    # One QueueTx for both: the queue's config and shard meta read, and written, once.
    with LinkedQueueTx(tx, ns, queue) as qt:
        done = _enqueue_into(qt, new_jobs, bulk, call)
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
