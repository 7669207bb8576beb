"""The failure primitives (spec §6.3, §6.10) that completions, the stalled sweep and
flows share: record an error in the job's history, spend an attempt (retry with
backoff, or fail once none are left), fail a live job (to its queue's dead-letter
queue or under its retention), and put a job back to waiting or delayed."""

from __future__ import annotations

import random

from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import dlq, retention
from loam_common.jobs import states as S
from loam_common.jobs.promote import promote_due
from loam_common.jobs.queue import QueueTx

ERROR_HISTORY = 50  # errors kept per job, the most recent


def backoff_delay(backoff: pb.Backoff, attempt: int, rng: random.Random | None = None) -> int:
    """The delay before retry number `attempt` (1-based), BullMQ's formulas."""
    if backoff.kind == pb.BACKOFF_KIND_FIXED:
        delay = backoff.base_ns
    elif backoff.kind == pb.BACKOFF_KIND_EXPONENTIAL:
        delay = backoff.base_ns * (2 ** max(attempt - 1, 0))
        if backoff.max_ns:
            delay = min(delay, backoff.max_ns)
    else:
        return 0
    if backoff.jitter:
        delay = int(delay * (1 - backoff.jitter * (rng or random).random()))
    return delay


def job_requeue(qt: QueueTx, job: pb.Job, due_ns: int, keep_place: bool = False) -> None:
    """Back to waiting (or delayed until `due_ns`) without spending an attempt. A job of
    a subject batch goes back behind its subject (`subject_requeue_goes_behind`): to the
    front of the backlog, or (delayed) to claim the subject again once due."""
    if job.opts.subject and qt.subject_requeue_goes_behind(job):
        keep_place = True
    if due_ns > qt.now:
        job.due_ns = due_ns
        qt.move(job, S.DELAYED, "delayed")
    else:
        job.due_ns = 0
        qt.move(job, S.ready_state(job.opts.priority), "waiting", keep_place=keep_place)


def job_record_error(qt: QueueTx, job: pb.Job, error: pb.JobError | None) -> None:
    """Append `error` to the job's history (stamped with the time and the attempt it
    ends), keeping the most recent ERROR_HISTORY. The caller stores the job."""
    if error is None:
        return
    e = job.errors.add()
    e.CopyFrom(error)
    e.at_ns = e.at_ns or qt.now
    e.attempt = job.attempt + 1
    if len(job.errors) > ERROR_HISTORY:
        del job.errors[0]


def job_retry_or_fail(qt: QueueTx, job: pb.Job, error: pb.JobError, after_ns: int | None) -> int:
    """Spend an attempt: retry with backoff if any are left, else fail. Returns the
    job's new state."""
    job_record_error(qt, job, error)
    job.attempt += 1
    if error.permanent:  # the handler says no retry will fix it
        return job_fail_if_live(qt, job, error, False)
    if job.attempt >= job.attempts_max:
        return job_fail_if_live(qt, job, error, False, exhausted=True)
    backoff = job.opts.backoff if job.opts.HasField("backoff") else qt.cfg.backoff
    if after_ns is None:
        after_ns = backoff_delay(backoff, job.attempt)
    if after_ns and job.opts.subject and not backoff.hold_subject:
        # The jobs behind it run during the backoff; once due it runs next (spec 003).
        qt.subject_step_aside(job)
    if not after_ns:
        # Delayed jobs already due go first, as in BullMQ's retry: they were due before
        # this job came back.
        promote_due(qt, job.shard)
    job_requeue(qt, job, qt.now + after_ns if after_ns else 0)
    return job.state


def job_fail_if_live(
    qt: QueueTx,
    job: pb.Job,
    error: pb.JobError,
    dead_letter: bool,
    exhausted: bool = False,
    clock_ns: int | None = None,
) -> int:
    """Fail a job that has not finished (QueueTx.move refuses any other): to the queue's
    dead-letter queue when asked or, with `exhausted`, when its config says so; else it
    stays failed under its retention. `clock_ns`: the worker's clock (BullMQ), the
    finished time and the clock retention ages are judged by. Returns the new state."""
    err = pb.JobError()
    err.CopyFrom(error)
    qt.move(job, S.FAILED, "failed", finished_ns=clock_ns, error=err)
    if exhausted:
        qt.emit("retries-exhausted", job, error=err)
    cfg = qt.cfg
    if cfg.dead_letter_queue and (dead_letter or (exhausted and cfg.dead_letter_on_exhausted)):
        dlq.dead_letter(qt, job)
    else:
        retention.on_finished(qt, job, clock_ns)
    return job.state
