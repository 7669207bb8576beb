"""Job admin (spec §5.4): the `JobOp`s, one function per op over one transaction, named
`job_<verb>`, and the job-level moves the queue ops repeat over many jobs (`retry`,
`promote`). Every move goes through QueueTx, as in admin.py."""

from __future__ import annotations

import json
from dataclasses import dataclass

from loam_common import keys, validate
from loam_common.errors import InvalidArgument, InvalidState, JobsError, NotFound
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import dedup, dependencies
from loam_common.jobs import states as S
from loam_common.jobs.complete import append_log
from loam_common.jobs.linked import LinkedQueueTx
from loam_common.jobs.queue import QueueTx
from loam_common.store.base import Txn


# -- moves the queue ops share -------------------------------------------------------------
def _reset_for_retry(job: pb.Job, keep_attempts: bool = False) -> None:
    """BullMQ's job.retry: the attempts start over (unless `keep_attempts`); the error
    history stays."""
    job.deferred_failure = ""
    if not keep_attempts:
        job.attempt = 0
        job.stalled = 0
        job.retry_epoch = job.epoch
    elif job.state == S.COMPLETED or job.attempt < job.attempts_max:
        job.attempt += 1  # the finished run was an attempt too (BullMQ's attemptsMade)
    job.processed_ns = 0
    job.finished_ns = 0
    job.due_ns = 0
    job.ClearField("result")


def retry(qt: QueueTx, job: pb.Job, keep_attempts: bool = False) -> None:
    """Move a finished job back to waiting, its attempts started over (BullMQ's retry)."""
    if job.parents:
        dependencies.on_job_retried(qt, job)
    _reset_for_retry(job, keep_attempts)
    if job.opts.subject:
        # QueueTx.move does not re-claim a subject when a finished job comes back.
        qt.subject_claim(job)
    qt.move(job, S.ready_state(job.opts.priority), "waiting")


def promote(qt: QueueTx, job: pb.Job) -> None:
    """Make a delayed job ready now (BullMQ's promote)."""
    keep_place = qt.subject_reclaim_if_stepped_aside(job)
    qt.move(job, S.ready_state(job.opts.priority), "promoted", keep_place=keep_place)
    job.due_ns = 0  # after the move: the delayed index key was built from it
    qt.put_job(job)
    qt.emit("waiting", job, prev_state=S.DELAYED)


# -- job ops ----------------------------------------------------------------------------------
def _job_tx(tx: Txn, ns: str, queue: str) -> QueueTx:
    validate.name("queue", queue)
    return LinkedQueueTx(tx, ns, queue, create=False)


def _reindex(qt: QueueTx, job: pb.Job, via: int, change, to: int, event: str | None, **fields) -> None:
    """Change a field that is part of the job's index key (priority, due time).
    QueueTx builds the key from the job's fields, so the job steps out to `via` and
    back with the new value; the transient entry is written and deleted in this one
    transaction, so nobody sees it."""
    qt.move(job, via, None)
    change(job)
    qt.move(job, to, event, **fields)


def job_get(tx: Txn, ns: str, queue: str, job_id: str) -> pb.Job:
    with _job_tx(tx, ns, queue) as qt:
        return qt.require_job(job_id)


def job_get_by_ref(tx: Txn, ns: str, queue: str, ref: str) -> pb.Job:
    """The job `ref` names (its id or its job key), in one read."""
    return job_get(tx, ns, queue, job_resolve(tx, ns, queue, ref))


def job_remove(
    tx: Txn, ns: str, queue: str, job_id: str, force: bool = False, children: bool = False
) -> None:
    """Delete a job and its logs. An active job whose lease still runs is refused, as
    BullMQ refuses a locked one, unless `force` (its worker's complete then gets
    NotFound); one whose lease lapsed is no longer held (BullMQ: the lock expired). With
    `children`, its dependencies that have not started go too, recursively (BullMQ's
    removeChildren)."""
    with _job_tx(tx, ns, queue) as qt:
        job = qt.require_job(job_id)

        def held(j: pb.Job) -> bool:
            return j.state == S.ACTIVE and j.deadline_ns > qt.now

        if held(job) and not force:
            raise InvalidState(job_id, "active", "remove a job a worker holds; let it finish, or force")
        tree = _tree(qt, job) if children else []
        locked = next((j for q, j in tree if held(j)), None)
        if locked is not None:
            raise InvalidState(locked.id, "active", "remove a tree holding a job a worker holds")
        qt.remove(job, event="removed")  # first: its dependency records go, so no child settles it
        for q, child in tree:
            if q.get_job(child.id) is not None:
                q.remove(child, event="removed")


def _tree(qt: QueueTx, job: pb.Job) -> list[tuple[QueueTx, pb.Job]]:
    """Every job below `job` (its dependencies, theirs, ...) with its queue."""
    out: list[tuple[QueueTx, pb.Job]] = []
    todo = [(qt, job)]
    while todo:
        q, j = todo.pop()
        if not j.children:
            continue
        prefix = q.k.dependencies(j.id)
        for _, raw in q.tx.scan(prefix, keys.prefix_end(prefix)):
            dep = pb.Dependency.FromString(raw)
            cq = q.peer(dep.queue)
            child = cq.get_job(dep.job_id)
            if child is not None:
                out.append((cq, child))
                todo.append((cq, child))
    return out


def job_remove_child_dependency(tx: Txn, ns: str, queue: str, job_id: str) -> bool:
    """BullMQ's removeChildDependency (dependencies.remove_child_dependency)."""
    with _job_tx(tx, ns, queue) as qt:
        job = qt.require_job(job_id)
        return dependencies.remove_child_dependency(qt, job)


def job_retry(tx: Txn, ns: str, queue: str, job_id: str, keep_attempts: bool = False) -> pb.Job:
    """BullMQ's job.retry: a finished job goes back to waiting with its attempts reset
    (or kept: BullMQ's default, without resetAttemptsMade)."""
    with _job_tx(tx, ns, queue) as qt:
        job = qt.require_job(job_id)
        if job.state not in S.FINISHED:
            raise InvalidState(job_id, S.name(job.state), "retry a job that has not finished")
        retry(qt, job, keep_attempts)
        return job


def job_promote(tx: Txn, ns: str, queue: str, job_id: str) -> pb.Job:
    """A delayed job becomes ready now."""
    with _job_tx(tx, ns, queue) as qt:
        job = qt.require_job(job_id)
        if job.state != S.DELAYED:
            raise InvalidState(job_id, S.name(job.state), "promote a job that is not delayed")
        promote(qt, job)
        return job


def job_change_priority(
    tx: Txn, ns: str, queue: str, job_id: str, priority: int, lifo: bool = False
) -> pb.Job:
    """BullMQ's changePriority: a ready job is re-queued in its new band, behind the jobs
    already at that priority, or with `lifo` ahead of them; in any other state the new
    priority applies when the job is next ready."""
    validate.in_range("priority", priority, 0, validate.PRIORITY_LIMIT)
    with _job_tx(tx, ns, queue) as qt:
        job = qt.require_job(job_id)

        def change(j: pb.Job) -> None:
            j.opts.priority, j.opts.lifo = priority, lifo

        if job.state in S.READY:
            # A job waiting behind its subject also goes to the back of that backlog.
            _reindex(qt, job, S.DELAYED, change, S.ready_state(priority), "priority-changed")
        else:
            change(job)
            qt.put_job(job)
            qt.emit("priority-changed", job)
        return job


def job_change_delay(tx: Txn, ns: str, queue: str, job_id: str, delay_ns: int) -> pb.Job:
    """BullMQ's changeDelay: a delayed job becomes due `delay_ns` from now."""
    validate.duration_ns("delay_ns", delay_ns)
    with _job_tx(tx, ns, queue) as qt:
        job = qt.require_job(job_id)
        if job.state != S.DELAYED:
            raise InvalidState(job_id, S.name(job.state), "change the delay of a job that is not delayed")
        due = qt.now + delay_ns

        def change(j: pb.Job) -> None:
            j.due_ns = due

        _reindex(qt, job, S.ready_state(job.opts.priority), change, S.DELAYED, "delayed")
        return job


def job_update_data(tx: Txn, ns: str, queue: str, job_id: str, payload: pb.Payload) -> pb.Job:
    """BullMQ's updateData: replace the job's payload, in any state."""
    with _job_tx(tx, ns, queue) as qt:
        job = qt.require_job(job_id)
        qt.replace_payload(job, payload)
        qt.put_job(job)
        qt.emit("updated", job)  # no data: a payload can be MiBs
        return job


@dataclass(frozen=True, slots=True)
class JobLogs:
    lines: list[pb.LogLine]
    count: int  # lines held for the job (the oldest beyond the cap are gone)


def job_logs(
    tx: Txn, ns: str, queue: str, job_id: str, start: int = 0, end: int = -1, asc: bool = True
) -> JobLogs:
    """BullMQ's getJobLogs: lines `start..end` inclusive (negative counts from the
    end), oldest first unless `asc` is False. Held lines are capped, so this reads
    at most the cap."""
    with _job_tx(tx, ns, queue) as qt:
        qt.require_job(job_id)
        prefix = qt.k.logs(job_id)
        rows = tx.scan(prefix, keys.prefix_end(prefix), reverse=not asc)
        n = len(rows)
        lo = start + n if start < 0 else start
        hi = end + n if end < 0 else end
        picked = rows[max(lo, 0) : max(hi + 1, 0)]
        return JobLogs([pb.LogLine.FromString(v) for _, v in picked], n)


def job_set_progress(tx: Txn, ns: str, queue: str, job_id: str, progress: bytes) -> pb.Job:
    """BullMQ's job.updateProgress from any client (Report is the lease holder's):
    set the progress (JSON) in any state and emit `progress`."""
    try:
        json.loads(progress)
    except ValueError as e:
        raise InvalidArgument("progress", f"is not JSON: {e}") from None
    with _job_tx(tx, ns, queue) as qt:
        job = qt.require_job(job_id)
        job.progress = progress
        qt.put_job(job)
        qt.emit("progress", job, data=progress)
        return job


def job_add_log(tx: Txn, ns: str, queue: str, job_id: str, line: str, keep: int = 0) -> int:
    """BullMQ's job.log from any client: append a line, keep the last `keep` (0 = the
    queue's cap). Returns how many lines the job holds."""
    validate.text("line", line, 64 * 1024)
    with _job_tx(tx, ns, queue) as qt:
        job = qt.require_job(job_id)
        append_log(qt, job, line)
        if keep:
            _trim_logs(qt, job, keep)
        qt.put_job(job)
        return _held_logs(qt, job)


def job_resolve(tx: Txn, ns: str, queue: str, ref: str) -> str:
    """The id of the job `ref` names (its id or its job key). An unknown ref comes back
    as is, so the op itself says what is missing (the queue or the job)."""
    k = keys.QueueKeys(ns, queue)
    if tx.get(k.job(ref)) is not None:
        return ref
    by_key = tx.get(k.job_key(ref))
    return by_key.decode() if by_key is not None else ref


#: A running job's report by reference: (job id or key, "progress", JSON, 0) or
#: (job id or key, "add_log", line, keep).
Report = tuple[str, str, "bytes | str", int]


def job_report_many(tx: Txn, ns: str, queue: str, reports: list[Report]) -> list[int | JobsError | None]:
    """Many jobs' progress and log lines in one transaction, in order (BullMQ's
    updateProgress and log from many processors): per report, None for a progress set,
    the lines `job_add_log` counts for a line, or the error that refused it. A refused
    report is rolled back to its savepoint and spoils nothing."""
    out: list[int | JobsError | None] = []
    for ref, kind, value, keep in reports:
        sp = tx.savepoint()
        try:
            job_id = job_resolve(tx, ns, queue, ref)
            if kind == "progress":
                job_set_progress(tx, ns, queue, job_id, value)  # type: ignore[arg-type]
                out.append(None)
            else:
                out.append(job_add_log(tx, ns, queue, job_id, value, keep))  # type: ignore[arg-type]
        except JobsError as e:
            tx.rollback_to(sp)
            out.append(e)
            continue
        tx.release(sp)
    return out


def job_clear_logs(tx: Txn, ns: str, queue: str, job_id: str, keep: int = 0) -> int:
    """BullMQ's job.clearLogs: drop all lines but the last `keep`. Returns how many
    lines are left."""
    with _job_tx(tx, ns, queue) as qt:
        job = qt.require_job(job_id)
        _trim_logs(qt, job, keep)
        return _held_logs(qt, job)


# A job's lines are numbered from 0 as they come (`append_log` writes line `log_count`),
# and every trim drops the oldest: the lines held are always the newest ones, numbers
# first..log_count-1. So the count and a trim need the first line only, not every line
# (a job with keepLogs read all it held at each line it logged).
def _held_logs(qt: QueueTx, job: pb.Job) -> int:
    prefix = qt.k.logs(job.id)
    first = qt.tx.scan(prefix, keys.prefix_end(prefix), limit=1)
    return job.log_count - keys.U32.unpack(first[0][0][len(prefix) :])[0] if first else 0


def _trim_logs(qt: QueueTx, job: pb.Job, keep: int) -> None:
    """Drop all but the newest `keep` lines: the lines numbered below log_count - keep."""
    prefix = qt.k.logs(job.id)
    for key, _ in qt.tx.scan(prefix, prefix + keys.U32.pack(max(job.log_count - keep, 0))):
        qt.tx.delete(key)


def job_cancel(tx: Txn, ns: str, queue: str, job_id: str, reason: str = "") -> pb.Job:
    """Cancel a job that has not started (waiting, prioritized, delayed,
    waiting-children). A running job is its worker's to finish or fail."""
    validate.text("reason", reason, 1024)
    with _job_tx(tx, ns, queue) as qt:
        job = qt.require_job(job_id)
        if job.state == S.ACTIVE:
            raise InvalidState(job_id, "active", "cancel it; let its worker finish it or fail it")
        if job.state not in (S.WAITING, S.PRIORITIZED, S.DELAYED, S.WAITING_CHILDREN):
            raise InvalidState(job_id, S.name(job.state), "cancel a finished job")
        err = pb.JobError(code="canceled", message=reason or "canceled", at_ns=qt.now, attempt=job.attempt)
        job.errors.append(err)
        qt.move(job, S.CANCELED, "canceled", error=err)
        return job


def job_get_dedup(tx: Txn, ns: str, queue: str, dedup_id: str) -> pb.Job:
    """The live job a dedup id points at; NotFound when none does."""
    validate.text("dedup_id", dedup_id, 1024, allow_empty=False)
    with _job_tx(tx, ns, queue) as qt:
        job = dedup.job_of(qt, dedup_id)
        if job is None:
            raise NotFound(f"no live job holds dedup id {dedup_id!r} in queue {queue!r}")
        return job


def job_remove_dedup_key(tx: Txn, ns: str, queue: str, dedup_id: str) -> bool:
    """BullMQ's removeDeduplicationKey: the next enqueue with this id is not a
    duplicate. Returns whether the key existed."""
    validate.text("dedup_id", dedup_id, 1024, allow_empty=False)
    with _job_tx(tx, ns, queue) as qt:
        existed = dedup.remove_key(qt, dedup_id)
        if existed:
            qt.emit("deduplication-key-removed", detail=dedup_id)
        return existed
