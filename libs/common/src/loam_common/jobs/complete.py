"""The fenced transitions out of `active` (spec §6.3): extend, complete with every
Outcome, report. Each reads the job and refuses the write unless the token's epoch is
the job's current one. Expiry alone does not break the fence: a late complete before
the stalled sweep reclaims the job still succeeds."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from loam_common import keys
from loam_common.effects import Finished
from loam_common.errors import Fenced, InvalidArgument, InvalidState, JobsError
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import lease, retention
from loam_common.jobs import states as S
from loam_common.jobs.failure import job_fail_if_live, job_record_error, job_requeue, job_retry_or_fail
from loam_common.jobs.linked import LinkedQueueTx
from loam_common.jobs.queue import DEFAULT_LOG_CAP, QueueTx
from loam_common.store.base import Txn


@dataclass(frozen=True, slots=True, kw_only=True)
class OutcomeOptions:
    """What any outcome may carry besides its own fields."""

    retention: pb.Retention | None = None  # replaces the job's if this outcome finishes it
    metrics: tuple[int, int] | None = None  # (at_ms, max_data_points): count it (BullMQ)
    clock_ns: int | None = None  # the worker's clock: the finished time and retention ages go by it (BullMQ)


def _check_after(after_ns: int | None) -> None:
    if after_ns is not None and after_ns < 0:
        raise InvalidArgument("outcome.after_ns", "must not be negative")


@dataclass(frozen=True, slots=True)
class Ok(OutcomeOptions):
    """Done; `result` is kept as the job's result."""

    kind: ClassVar[str] = "ok"
    result: pb.Payload | None = None
    if_no_pending_children: bool = False  # refuse while a dependency is pending (BullMQ)


@dataclass(frozen=True, slots=True)
class Retry(OutcomeOptions):
    """Failed this attempt: again after `after_ns` (None: the job's backoff) if attempts
    are left, else failed."""

    kind: ClassVar[str] = "retry"
    error: pb.JobError
    after_ns: int | None = None

    def __post_init__(self) -> None:
        if self.error is None:
            raise InvalidArgument("outcome.error", "retry needs an error")
        _check_after(self.after_ns)


@dataclass(frozen=True, slots=True)
class Fail(OutcomeOptions):
    """Failed for good, whatever attempts are left; `dead_letter` sends it to the
    queue's dead-letter queue."""

    kind: ClassVar[str] = "fail"
    error: pb.JobError
    dead_letter: bool = False

    def __post_init__(self) -> None:
        if self.error is None:
            raise InvalidArgument("outcome.error", "fail needs an error")


@dataclass(frozen=True, slots=True)
class Release(OutcomeOptions):
    """Handed back unprocessed: it keeps its place, at once or after `after_ns`."""

    kind: ClassVar[str] = "release"
    after_ns: int | None = None

    def __post_init__(self) -> None:
        _check_after(self.after_ns)


@dataclass(frozen=True, slots=True)
class Delay(OutcomeOptions):
    """Back to delayed until `until_ns`, without spending an attempt."""

    kind: ClassVar[str] = "delay"
    until_ns: int


@dataclass(frozen=True, slots=True)
class WaitChildren(OutcomeOptions):
    """Wait for the job's pending dependencies (BullMQ's moveToWaitingChildren)."""

    kind: ClassVar[str] = "wait_children"


@dataclass(frozen=True, slots=True)
class RateLimited(OutcomeOptions):
    """Back to waiting, and the queue leases nothing for `for_ns` (BullMQ's rate limit
    error)."""

    kind: ClassVar[str] = "rate_limited"
    for_ns: int

    def __post_init__(self) -> None:
        if self.for_ns <= 0:
            raise InvalidArgument("outcome.for_ns", "rate_limited needs a positive duration")


#: How a worker finished its lease: one of these, each with only its own fields.
Outcome = Ok | Retry | Fail | Release | Delay | WaitChildren | RateLimited
#: Every outcome's kind (its label in loam_jobs_completed_total).
OUTCOMES = tuple(t.kind for t in (Ok, Retry, Fail, Release, Delay, WaitChildren, RateLimited))


@dataclass(frozen=True, slots=True)
class Completed:
    state: int
    moved: bool = True  # wait_children: False when the job had no pending children


_SHARED: dict[tuple[int, bool], Completed] = {}


def completed(state: int, moved: bool = True) -> Completed:
    """The answer of a recorded outcome: one shared (frozen) instance per state and
    `moved`, since a batch of completions answers the same few thousands of times."""
    done = _SHARED.get((state, moved))
    if done is None:
        done = _SHARED[(state, moved)] = Completed(state, moved)
    return done


def load_fenced(qt: QueueTx, job_id: str, epoch: int) -> pb.Job:
    job = qt.require_job(job_id)
    if job.epoch != epoch:
        raise Fenced(job_id, epoch, job.epoch)
    if job.state != S.ACTIVE:
        raise InvalidState(job_id, S.name(job.state), "complete a job that is not active")
    return job


def check_outcome_allowed(job: pb.Job, outcome: Outcome) -> None:
    """Refusals that depend on the job, checked before any write (so a batched Ok still
    needs no savepoint)."""
    if isinstance(outcome, Ok) and outcome.if_no_pending_children and job.pending_children:
        raise InvalidState(job.id, f"waiting on {job.pending_children} pending dependencies", "complete")


def job_extend_if_leased(tx: Txn, ns: str, queue: str, job_id: str, epoch: int, by_ns: int) -> int:
    """Move the deadline to now + by, never past the job's timeout. Returns it."""
    with LinkedQueueTx(tx, ns, queue, create=False) as qt:
        job = load_fenced(qt, job_id, epoch)
        deadline = qt.now + by_ns
        if job.opts.timeout_ns:
            cap = job.lease_started_ns + job.opts.timeout_ns
            if qt.now >= cap:
                raise InvalidState(job_id, "past its timeout", "extend")
            deadline = min(deadline, cap)
        qt.set_deadline(job, deadline)
        qt.put_job(job)
        return deadline


def job_complete_if_leased(
    tx: Txn, ns: str, queue: str, job_id: str, epoch: int, outcome: Outcome
) -> Completed:
    with LinkedQueueTx(tx, ns, queue, create=False) as qt:
        job = load_fenced(qt, job_id, epoch)
        check_outcome_allowed(job, outcome)
        return _complete(qt, job, outcome)


def job_complete_many(
    tx: Txn, ns: str, items: list[tuple[str, str, int, Outcome]]
) -> list[Completed | JobsError]:
    """Batched Complete: one transaction for the whole batch, one answer per item; a
    refused item (fenced, unknown, not active) changes nothing and spoils nothing."""
    out: list[Completed | JobsError] = []
    tx.prefetch([keys.QueueKeys(ns, queue).job(job_id) for queue, job_id, _e, _o in items])
    # One QueueTx per queue for the whole batch, shared as peers: a completion may move
    # a job of another queue (a flow parent), which a later item may complete too.
    root: QueueTx | None = None
    for queue, job_id, epoch, outcome in items:
        try:
            qt = (
                root.peer(queue, create=False)
                if root is not None
                else LinkedQueueTx(tx, ns, queue, create=False)
            )
            root = root or qt
            job = load_fenced(qt, job_id, epoch)  # reads only: a refusal here has nothing to undo
            check_outcome_allowed(job, outcome)
        except JobsError as e:
            out.append(e)
            continue
        if isinstance(outcome, Ok):
            # The hot path: once the token checks out, Ok cannot be refused, so it needs
            # no savepoint, and the batch writes each shard's counts once at the end.
            out.append(_complete(qt, job, outcome))
            continue
        root.flush()  # a rollback below must not lose the counts of earlier items
        sp = tx.savepoint()
        try:
            out.append(_complete(qt, job, outcome))
            root.flush()
            tx.release(sp)  # keep the savepoint stack one deep
        except JobsError as e:
            tx.rollback_to(sp)
            tx.release(sp)
            root = None  # cached metas may hold rolled-back counts: read them again
            out.append(e)
    if root is not None:
        root.flush()
    return out


def job_complete_many_then_lease(
    tx: Txn, ns: str, items: list[tuple[str, str, int, Outcome]], lease_args: tuple
) -> tuple[list[Completed | JobsError], lease.LeaseResult]:
    """BullMQ's moveToFinished with fetchNext, batched: the completions, then a lease
    (`job_lease`'s arguments after `ns`) that sees what they freed, in one transaction."""
    done = job_complete_many(tx, ns, items)
    return done, lease.job_lease(tx, ns, *lease_args)


def _complete(qt: QueueTx, job: pb.Job, outcome: Outcome) -> Completed:
    done = _complete_one(qt, job, outcome)
    if done.state in S.FINISHED:
        _emit_if_idle(qt)
        if outcome.metrics is not None and done.state in (S.COMPLETED, S.FAILED):
            collect_metrics(qt, "completed" if done.state == S.COMPLETED else "failed", *outcome.metrics)
    totals = qt.meta_for_update(job.shard).completed_total  # loam_jobs_completed_total{outcome}
    totals[outcome.kind] = totals[outcome.kind] + 1
    task = job.task  # each access to a sub-message builds a wrapper: take it once
    run_ns = qt.now - job.lease_started_ns
    traceparent = task.headers.get("traceparent", "")
    qt.tx.declare(
        Finished(qt.ns, qt.name, job.id, outcome.kind, done.state, task.name, run_ns, traceparent, qt.now)
    )
    return done


MINUTE_MS = 60_000


def collect_metrics(qt: QueueTx, kind: str, at_ms: int, max_points: int) -> None:
    """BullMQ's per-minute metrics: count the job; when the minute (by the worker's
    clock) moved on since the last data point, close a point with the jobs counted since,
    and a zero for each minute without any, newest first, keeping `max_points`."""
    key = qt.k.metrics(kind)
    raw = qt.tx.get(key)
    rec = pb.MetricsRecord.FromString(raw) if raw else None
    if rec is None:  # the first job opens the first minute
        qt.tx.put(key, pb.MetricsRecord(count=1, prev_ms=at_ms).SerializeToString())
        return
    count = rec.count  # before this job, as BullMQ's script reads it
    rec.count += 1
    n = min(at_ms // MINUTE_MS - rec.prev_ms // MINUTE_MS, max_points)
    if n > 0:
        points = [0] * (n - 1) + [count - rec.prev_count] + list(rec.points)
        del rec.points[:]
        rec.points.extend(points[:max_points])
        rec.prev_count, rec.prev_ms = count, at_ms
    qt.tx.put(key, rec.SerializeToString())


def queue_minute_metrics(tx: Txn, ns: str, queue: str, kind: str) -> pb.MetricsRecord:
    """The queue's per-minute `completed` or `failed` counts (BullMQ's getMetrics)."""
    return pb.MetricsRecord.FromString(tx.get(keys.QueueKeys(ns, queue).metrics(kind)) or b"")


def _emit_if_idle(qt: QueueTx) -> None:
    """BullMQ's global `drained`: a finish that leaves the queue with nothing waiting,
    prioritized or active emits `drained` (detail "idle"; the admin Drain op's event has
    another detail)."""
    for shard in range(max(qt.cfg.shards, 1)):
        c = qt.meta(shard).counts
        if c.get(S.WAITING, 0) or c.get(S.PRIORITIZED, 0) or c.get(S.ACTIVE, 0):
            return
    qt.emit("drained", detail="idle")


def _complete_one(qt: QueueTx, job: pb.Job, outcome: Outcome) -> Completed:
    if outcome.retention is not None:  # BullMQ's worker-level removeOnComplete / removeOnFail
        job.opts.retention.CopyFrom(outcome.retention)
    return _FINISH[type(outcome)](qt, job, outcome)


def _ok(qt: QueueTx, job: pb.Job, outcome: Ok) -> Completed:
    if outcome.result is not None:
        job.result.CopyFrom(outcome.result)
    qt.move(job, S.COMPLETED, "completed", finished_ns=outcome.clock_ns, data=job.result.data)
    retention.on_finished(qt, job, outcome.clock_ns)
    return completed(job.state)


def _retry(qt: QueueTx, job: pb.Job, outcome: Retry) -> Completed:
    return completed(job_retry_or_fail(qt, job, outcome.error, outcome.after_ns))


def _fail(qt: QueueTx, job: pb.Job, outcome: Fail) -> Completed:
    job_record_error(qt, job, outcome.error)
    return completed(job_fail_if_live(qt, job, outcome.error, outcome.dead_letter, clock_ns=outcome.clock_ns))


def _release(qt: QueueTx, job: pb.Job, outcome: Release) -> Completed:
    # Handed back unprocessed: it keeps its place (BullMQ, RabbitMQ).
    job_requeue(qt, job, qt.now + outcome.after_ns if outcome.after_ns else 0, keep_place=True)
    return completed(job.state)


def _delay(qt: QueueTx, job: pb.Job, outcome: Delay) -> Completed:
    job_requeue(qt, job, outcome.until_ns)
    return completed(job.state)


def _wait_children(qt: QueueTx, job: pb.Job, outcome: WaitChildren) -> Completed:
    if job.failed_child:  # a dependency failed while this job ran (dependencies.py)
        err = pb.JobError(code="child-failed", message=job.failed_child)
        job_record_error(qt, job, err)
        return completed(job_fail_if_live(qt, job, err, False))
    if not job.pending_children:
        return completed(job.state, moved=False)
    qt.move(job, S.WAITING_CHILDREN, "waiting-children")
    return completed(job.state)


def _rate_limited(qt: QueueTx, job: pb.Job, outcome: RateLimited) -> Completed:
    rl = qt.cfg.rate_limit
    rt_key = qt.k.runtime(job.shard if rl.sharded else None)
    raw = qt.tx.get(rt_key)
    rt = pb.QueueRuntime.FromString(raw) if raw else pb.QueueRuntime()
    rt.blocked_until_ns = max(rt.blocked_until_ns, qt.now + outcome.for_ns)
    qt.tx.put(rt_key, rt.SerializeToString())
    job_requeue(qt, job, 0, keep_place=True)
    return completed(job.state)


# The move of each outcome, by its type.
_FINISH: dict[type, Callable[[QueueTx, pb.Job, Any], Completed]] = {
    Ok: _ok,
    Retry: _retry,
    Fail: _fail,
    Release: _release,
    Delay: _delay,
    WaitChildren: _wait_children,
    RateLimited: _rate_limited,
}


def job_report_if_leased(
    tx: Txn,
    ns: str,
    queue: str,
    job_id: str,
    epoch: int,
    *,
    progress: bytes | None = None,
    log_line: str | None = None,
    data: pb.Payload | None = None,
) -> None:
    """Progress (JSON), a log line (capped per job, oldest dropped), a data update."""
    with LinkedQueueTx(tx, ns, queue, create=False) as qt:
        job = load_fenced(qt, job_id, epoch)
        if progress is not None:
            try:
                json.loads(progress)
            except ValueError as e:
                raise InvalidArgument("report.progress", f"is not JSON: {e}") from None
            job.progress = progress
            qt.emit("progress", job, data=progress)
        if log_line is not None:
            append_log(qt, job, log_line)
        if data is not None:
            qt.replace_payload(job, data)
        qt.put_job(job)


def append_log(qt: QueueTx, job: pb.Job, line: str) -> None:
    cap = qt.cfg.log_cap or DEFAULT_LOG_CAP
    n = job.log_count
    qt.tx.put(qt.k.log(job.id, n), pb.LogLine(at_ns=qt.now, line=line).SerializeToString())
    job.log_count = n + 1
    if n + 1 > cap:
        qt.tx.delete(qt.k.log(job.id, n + 1 - cap - 1))
