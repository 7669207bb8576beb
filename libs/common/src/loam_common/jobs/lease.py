"""Lease (spec §5.2, §6.3, §6.9): take up to `max_jobs` ready jobs from the queues in
the worker's order of preference, in one transaction. On the way it promotes due
delayed jobs, discards expired ones, debits the rate bucket and respects global
concurrency; each leased job gets epoch + 1 and a deadline by the store clock."""

from __future__ import annotations

from dataclasses import dataclass, field

from loam_common import keys
from loam_common.effects import Leased
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S
from loam_common.jobs.linked import LinkedQueueTx
from loam_common.jobs.promote import next_due_ns, promote_due
from loam_common.jobs.queue import DEFAULT_VISIBILITY_NS, QueueTx
from loam_common.store.base import Txn

NAME_SCAN_LIMIT = 2000


@dataclass(slots=True)
class LeaseResult:
    jobs: list[pb.Job] = field(default_factory=list)
    # When nothing was leased: the earliest moment something may become leasable
    # (a delayed job's due time, a rate window's end), 0 if unknown. Long-polls wait
    # no longer than this.
    wake_at_ns: int = 0
    # Per leased job, how long it had been ready (loam_jobs_lease_latency_seconds).
    waited_ns: list[int] = field(default_factory=list)
    subject_batch: int = 0  # the lease's subject batch size (0, 1: none)


def _note_wake(res: LeaseResult, at_ns: int) -> None:
    if at_ns and (not res.wake_at_ns or at_ns < res.wake_at_ns):
        res.wake_at_ns = at_ns


def lease_deadline(qt: QueueTx, job: pb.Job, visibility_ns: int = 0) -> int:
    """`visibility_ns`: the lease length the worker asked for (BullMQ's lockDuration)."""
    opts = job.opts  # one sub-message wrapper, not three
    visibility = visibility_ns or opts.visibility_ns or qt.cfg.visibility_ns or DEFAULT_VISIBILITY_NS
    deadline = qt.now + visibility
    timeout_ns = opts.timeout_ns
    if timeout_ns:
        deadline = min(deadline, job.lease_started_ns + timeout_ns)
    return deadline


def _rate_allowance(qt: QueueTx, shard: int, res: LeaseResult) -> tuple[int, pb.QueueRuntime | None, bytes]:
    """How many jobs the rate bucket allows now (a large number when unlimited)."""
    rl = qt.cfg.rate_limit
    rt_key = qt.k.runtime(shard if rl.sharded else None)
    raw = qt.tx.get(rt_key)
    rt = pb.QueueRuntime.FromString(raw) if raw else None
    if rt is not None and rt.blocked_until_ns > qt.now:
        _note_wake(res, rt.blocked_until_ns)
        return 0, rt, rt_key
    if not rl.max or not rl.duration_ns:
        return 1 << 30, rt, rt_key
    if rt is None:
        rt = pb.QueueRuntime()
    if qt.now >= rt.window_start_ns + rl.duration_ns:
        rt.window_start_ns = qt.now
        rt.used = 0
    cap = rl.max // max(qt.cfg.shards, 1) if rl.sharded else rl.max
    left = max(cap, 1) - rt.used
    if left <= 0:
        _note_wake(res, rt.window_start_ns + rl.duration_ns)
    return max(left, 0), rt, rt_key


def job_lease(
    tx: Txn,
    ns: str,
    queues: list[str],
    worker: str,
    max_jobs: int,
    names: frozenset[str] | None = None,
    shard_offset: int = 0,
    visibility_ns: int = 0,
    subject_batch: int = 0,
) -> LeaseResult:
    """`subject_batch`: after a subject's job, lease up to that many consecutive jobs of
    its subject with it (counted in `max_jobs`), as one run (`_take_subject_run`)."""
    res = LeaseResult(subject_batch=subject_batch)
    for queue in queues:
        if len(res.jobs) >= max_jobs:
            break
        if tx.get(keys.QueueKeys(ns, queue).config()) is None:
            continue  # nothing was ever enqueued here; leasing does not create queues
        with LinkedQueueTx(tx, ns, queue) as qt:
            lease_from(qt, queues, worker, max_jobs, names, shard_offset, visibility_ns, res)
    declare_leased(tx, ns, worker, res)
    return res


def lease_from(
    qt: QueueTx,
    queues: list[str],
    worker: str,
    max_jobs: int,
    names: frozenset[str] | None,
    shard_offset: int,
    visibility_ns: int,
    res: LeaseResult,
) -> None:
    """One queue's part of a lease (`job_lease`), in its open QueueTx: up to `max_jobs`
    in `res` in all, from its shards in turn; `queues`, the lease's whole list, is what
    the worker's record says it polls."""
    if qt.cfg.paused:
        return
    before = len(res.jobs)
    shards = max(qt.cfg.shards, 1)
    for i in range(shards):
        if len(res.jobs) >= max_jobs:
            break
        _lease_shard(qt, (shard_offset + i) % shards, worker, max_jobs, names, res, visibility_ns)
    if len(res.jobs) > before and worker:
        w = pb.Worker(id=worker, last_seen_ns=qt.now, queues=queues)
        qt.tx.put(qt.k.worker(worker), w.SerializeToString())


def declare_leased(tx: Txn, ns: str, worker: str, res: LeaseResult) -> None:
    """A lease's latency and spans, observed once it has committed."""
    if res.jobs:
        tx.declare(Leased(ns, worker, tuple(res.jobs), tuple(res.waited_ns), tx.now_ns()))


def _lease_shard(
    qt: QueueTx,
    shard: int,
    worker: str,
    max_jobs: int,
    names: frozenset[str] | None,
    res: LeaseResult,
    visibility_ns: int = 0,
) -> None:
    tx = qt.tx
    promote_due(qt, shard)
    want = max_jobs - len(res.jobs)
    allowance, rt, rt_key = _rate_allowance(qt, shard, res)
    want = min(want, allowance)
    if qt.cfg.concurrency:
        want = min(want, qt.cfg.concurrency - qt.active_count())
    if want <= 0:
        return
    prefix = qt.k.ready_shard(shard)
    end = keys.prefix_end(prefix)
    taken = scanned = 0
    # Page through the head: expired jobs (discarded on the way) and, with a `names`
    # filter, other tasks' jobs must not hide ready jobs behind them.
    while taken < want and scanned < NAME_SCAN_LIMIT:
        page = want - taken if names is None else NAME_SCAN_LIMIT - scanned
        entries = tx.scan(prefix, end, limit=page)
        if not entries:
            break
        scanned += len(entries)
        prefix = entries[-1][0] + b"\x00"
        taken += _take(qt, entries, want - taken, worker, names, res, visibility_ns)
    if rt is not None and taken and qt.cfg.rate_limit.max:
        rt.used += taken
        tx.put(rt_key, rt.SerializeToString())
    if not res.jobs:
        _note_wake(res, next_due_ns(qt, shard))


def _take(
    qt: QueueTx,
    entries: list[tuple[bytes, bytes]],
    want: int,
    worker: str,
    names: frozenset[str] | None,
    res: LeaseResult,
    visibility_ns: int = 0,
) -> int:
    taken = 0
    qt.tx.prefetch([qt.k.job(job_id.decode()) for _key, job_id in entries[:want]])
    for _key, job_id in entries:
        if taken >= want:
            break
        job = qt.require_job(job_id.decode())
        if names is not None and job.task.name not in names:
            continue
        opts = job.opts
        if opts.placement and opts.placement != worker:
            continue  # another worker's job (placement); its subject's jobs wait behind it
        if opts.expires_ns and qt.now > opts.expires_ns:
            job.errors.append(pb.JobError(code="expired", message="expired before it started", at_ns=qt.now))
            qt.move(job, S.CANCELED, "expired")
            continue
        _lease_one(qt, job, worker, res, visibility_ns)
        taken += 1
        if opts.subject and res.subject_batch > 1 and taken < want:
            taken += _take_subject_run(
                qt, job, worker, min(res.subject_batch - 1, want - taken), res, visibility_ns
            )
    return taken


def _lease_one(qt: QueueTx, job: pb.Job, worker: str, res: LeaseResult, visibility_ns: int, **move) -> None:
    res.waited_ns.append(qt.now - job.state_ns)
    if job.subject_run:  # an earlier run's list (its lease was lost): this lease makes its own
        del job.subject_run[:]
    job.epoch += 1
    job.worker = worker
    job.lease_started_ns = qt.now
    if not job.processed_ns:
        job.processed_ns = qt.now
    job.deadline_ns = lease_deadline(qt, job, visibility_ns)
    qt.move(job, S.ACTIVE, "active", worker=worker, **move)
    res.jobs.append(job)


def _take_subject_run(
    qt: QueueTx, lead: pb.Job, worker: str, room: int, res: LeaseResult, visibility_ns: int
) -> int:
    """Lease up to `room` jobs from the head of `lead`'s subject backlog with it, in
    order, stopping at the first of another task name, not due yet, placed on another
    worker or expired (each waits for its turn as the subject's job). The lead lists
    them (`Job.subject_run`); when it finishes, the subject passes to the last of them
    still running, which holds it until the run is over (`QueueTx._subject_pass_down_run`)."""
    start, end = qt.k.subject_backlog(lead.opts.subject)
    taken = 0
    for _key, job_id in qt.tx.scan(start, end, limit=room):
        job = qt.require_job(job_id.decode())
        opts = job.opts
        if (
            job.task.name != lead.task.name
            or job.due_ns > qt.now
            or (opts.placement and opts.placement != worker)
            or (opts.expires_ns and qt.now > opts.expires_ns)
        ):
            break
        _lease_one(qt, job, worker, res, visibility_ns, unblock_subject=True)
        lead.subject_run.append(job.id)
        taken += 1
    if taken:
        qt.put_job(lead)
    return taken
