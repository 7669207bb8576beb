"""The sweeps (spec §6.3, §6.10), one function per sweep over one queue shard inside
one transaction, each returning how much it did so a loop can go again at once when
a batch was full. The sweeper service owns the loop and the shard ownership."""

from __future__ import annotations

from dataclasses import dataclass

from loam_common import keys
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import retention, schedules
from loam_common.jobs import states as S
from loam_common.jobs.failure import job_fail_if_live, job_record_error, job_retry_or_fail
from loam_common.jobs.linked import LinkedQueueTx
from loam_common.jobs.promote import promote_due
from loam_common.jobs.queue import max_stalled, stalled_cutoff
from loam_common.store.base import Txn

BATCH = 500
STALLED_MESSAGE = "job stalled more than allowable limit"


def sweep_stalled(tx: Txn, ns: str, queue: str, shard: int, limit: int = BATCH) -> int:
    """Reclaim active jobs whose lease deadline passed (as the queue's stalled check
    sees it: `stalled_cutoff`). The reclaim bumps the epoch, which is what fences the
    worker that lost the job."""
    with LinkedQueueTx(tx, ns, queue, create=False) as qt:
        cutoff = stalled_cutoff(qt.cfg, qt.now)
        if cutoff is None:
            return 0
        prefix = qt.k.active_shard(shard)
        expired = tx.scan(prefix, prefix + keys.U64.pack(cutoff), limit=limit)
        plen = len(prefix)
        jobs = []
        for key, _ in expired:
            job = qt.get_job(keys.index_job_id(key, plen))
            if job is None:
                tx.delete(key)
            else:
                jobs.append(job)
        # A subject's job last: the other jobs of its subject batch that stalled with it
        # go back to the backlog first, then it either keeps its subject and runs first
        # again (the run's first job) or goes behind the earlier ones (the run's last
        # running job, decision 0042): the run comes back in order.
        jobs.sort(key=lambda j: bool(j.subject_run))
        for job in jobs:
            job.epoch += 1
            if job.opts.timeout_ns and qt.now >= job.lease_started_ns + job.opts.timeout_ns:
                err = pb.JobError(
                    code="timeout", message=f"job timed out after {job.opts.timeout_ns / 1e9:g} s"
                )
                job_retry_or_fail(qt, job, err, None)
                continue
            job.stalled += 1
            qt.meta_for_update(job.shard).stalled_total += 1  # loam_jobs_stalled_total
            limit_stalled = max_stalled(qt.cfg)
            if limit_stalled >= 0 and job.stalled > limit_stalled and _of_a_job_scheduler(tx, ns, job):
                limit_stalled = -1  # BullMQ: a job scheduler's iteration is never failed for stalling
            if limit_stalled >= 0 and job.stalled > limit_stalled and qt.cfg.defer_stalled_failure:
                job.deferred_failure = STALLED_MESSAGE  # the next lease fails it (BullMQ)
            elif limit_stalled >= 0 and job.stalled > limit_stalled:
                err = pb.JobError(code="stalled", message=STALLED_MESSAGE)
                job_record_error(qt, job, err)
                job_fail_if_live(qt, job, err, False)
                continue
            # A job of a subject batch goes behind its subject, at its own place in it.
            behind = bool(job.opts.subject) and qt.subject_requeue_goes_behind(job)
            qt.move(job, S.ready_state(job.opts.priority), "stalled", keep_place=behind)
            qt.emit("waiting", job)
        return len(expired)


def _of_a_job_scheduler(tx: Txn, ns: str, job: pb.Job) -> bool:
    """Whether an iteration-driven schedule that still exists made `job`."""
    sid = job.task.headers.get(schedules.HEADER_SCHEDULE)
    if not sid:
        return False
    raw = tx.get(keys.schedule(ns, sid))
    return raw is not None and schedules.iterated(pb.ScheduleRecord.FromString(raw))


def sweep_delayed(tx: Txn, ns: str, queue: str, shard: int, limit: int = BATCH) -> int:
    with LinkedQueueTx(tx, ns, queue, create=False) as qt:
        return promote_due(qt, shard, limit)


def sweep_retention(tx: Txn, ns: str, queue: str) -> int:
    with LinkedQueueTx(tx, ns, queue, create=False) as qt:
        return retention.sweep_queue(qt)


def sweep_idempotency(tx: Txn, ns: str, queue: str, limit: int = BATCH) -> int:
    """Expired idempotency records, by their expiry index: format 3's, and format 2's
    while any are left (keys.py)."""
    with LinkedQueueTx(tx, ns, queue, create=False) as qt:
        k, swept = qt.k, 0
        for prefix, record_of in (
            (k.idempotency_expiry_all(), k.idempotency_from_expiry),
            (k.idempotency_expiry_all_format_2(), k.idempotency_from_expiry_format_2),
        ):
            rows = tx.scan(prefix, prefix + keys.U64.pack(qt.now), limit=limit - swept)
            for key, _ in rows:
                ikey = record_of(key)
                raw = tx.get(ikey)
                # A later call may have renewed the record; delete only the expired one.
                if raw is not None and pb.IdempotencyRecord.FromString(raw).expires_ns <= qt.now:
                    tx.delete(ikey)
                tx.delete(key)
            swept += len(rows)
            if swept >= limit:
                break
        return swept


def namespace_list(tx: Txn) -> list[str]:
    prefix = keys.namespace_registry()
    return [k[len(prefix) :].decode() for k, _ in tx.scan(prefix, keys.prefix_end(prefix))]


def queue_list_registered(tx: Txn, ns: str) -> list[str]:
    prefix = keys.queue_registry(ns)
    return [keys.queue_from_registry_key(ns, k) for k, _ in tx.scan(prefix, keys.prefix_end(prefix))]


@dataclass(frozen=True, slots=True)
class Due:
    """Which sweeps of a queue would find work now (`due`)."""

    shards: int
    stalled: frozenset[int]  # shards with a lease past its deadline
    delayed: frozenset[int]  # shards with a delayed job due
    retention: bool  # finished jobs past the queue's age or count limits
    idempotency: bool  # idempotency records expired


def due(tx: Txn, ns: str, queue: str) -> Due | None:
    """What the sweeps of `queue` would find, from the head of each index they read, in
    one snapshot; None if the queue is gone. An idle queue then costs the sweeper one
    read a pass instead of a write transaction per sweep and shard."""
    raw = tx.get(keys.QueueKeys(ns, queue).config())
    if raw is None:
        return None
    qt = LinkedQueueTx(tx, ns, queue, create=False)
    k, now, shards = qt.k, qt.now, max(qt.cfg.shards, 1)

    def head_before(prefix: bytes, t: int) -> bool:
        return bool(tx.scan(prefix, prefix + keys.U64.pack(max(t, 0)), limit=1))

    cutoff = stalled_cutoff(qt.cfg, now)
    stalled = (
        frozenset(s for s in range(shards) if head_before(k.active_shard(s), cutoff))
        if cutoff is not None
        else frozenset()
    )
    delayed = frozenset(s for s in range(shards) if head_before(k.delayed_shard(s), now + 1))
    retained = False
    for state in (S.COMPLETED, S.FAILED):
        count, age = retention.retention_policy(qt, None, state)
        for s in range(shards):
            if (age is not None and head_before(k.state_shard(state, s), now - age)) or (
                count is not None and qt.meta(s).counts[state] > count
            ):
                retained = True
    idempotency = head_before(k.idempotency_expiry_all(), now) or head_before(
        k.idempotency_expiry_all_format_2(), now
    )
    return Due(shards, stalled, delayed, retained, idempotency)


@dataclass(frozen=True, slots=True)
class NamespaceDue:
    schedules: bool  # a schedule tick is due
    results: bool  # a result record expired


def namespace_due(tx: Txn, ns: str) -> NamespaceDue:
    """`due` for the namespace-wide sweeps: schedule ticks and result expiry."""
    now = tx.now_ns()
    ticks, expired = keys.schedule_due_all(ns), keys.result_expiry_all(ns)
    return NamespaceDue(
        schedules=bool(tx.scan(ticks, ticks + keys.U64.pack(now + 1), limit=1)),
        results=bool(tx.scan(expired, expired + keys.U64.pack(now + 1), limit=1)),
    )


def due_many(tx: Txn, ns: str, queues: list[str]) -> list[Due | None]:
    """`due` for several queues in one snapshot (a sweeper pass over a namespace)."""
    return [due(tx, ns, q) for q in queues]


# -- the due index (keys.due_entry): which queue shards to look at, store-wide -------------
DUE_PAGE = 1000


def due_shards(tx: Txn, after: bytes = b"", limit: int = DUE_PAGE) -> list[tuple[bytes, str, str, int]]:
    """The queue shards whose place in the due index has come (at or before now), oldest
    first, from past the entry `after` on: (entry key, ns, queue, shard). The only queues
    a sweeper pass between full passes looks at."""
    end = keys.DUE_INDEX + keys.U64.pack(tx.now_ns() + 1)
    start = after + b"\x00" if after else keys.DUE_INDEX
    return [(k, *keys.due_entry_parts(k)[1:]) for k, _ in tx.scan(start, end, limit=limit)]


def next_due_ns(qt: LinkedQueueTx, shard: int) -> int | None:
    """When the shard next has sweep work, from the head of each index a sweep reads (the
    same heads `due` compares with now); None if nothing in it will ever be due."""
    tx, k = qt.tx, qt.k
    times = []

    def head(prefix: bytes, shift: int = 0) -> None:
        rows = tx.scan(prefix, keys.prefix_end(prefix), limit=1)
        if rows:
            times.append(keys.index_time(rows[0][0], len(prefix)) + shift)

    head(k.active_shard(shard))
    head(k.delayed_shard(shard))
    for state in (S.COMPLETED, S.FAILED):
        count, age = retention.retention_policy(qt, None, state)
        if age is not None:
            head(k.state_shard(state, shard), age)
        if count is not None and qt.meta(shard).counts[state] > count:
            times.append(qt.now)
    if shard == 0:  # the queue-wide sweeps run with shard 0
        head(k.idempotency_expiry_all())
        head(k.idempotency_expiry_all_format_2())
    return min(times) if times else None


def _placement(tx: Txn, ns: str, queue: str, shards: list[int]) -> list[tuple[int, int | None, int | None]]:
    """(shard, its time in the due index now, the time it should have) per shard."""
    k = keys.QueueKeys(ns, queue)
    qt = LinkedQueueTx(tx, ns, queue, create=False) if tx.get(k.config()) is not None else None
    out = []
    for shard in shards:
        raw = tx.get(k.next_due(shard))
        current = keys.U64.unpack(raw)[0] if raw is not None else None
        at_ns = next_due_ns(qt, shard) if qt is not None and shard < max(qt.cfg.shards, 1) else None
        out.append((shard, current, None if at_ns is None else max(at_ns, 0)))
    return out


def misplaced(tx: Txn, items: list[tuple[str, str, list[int]]]) -> list[tuple[str, str, list[int]]]:
    """The queue shards of `items` whose place in the due index is not their next due
    time (read-only: a pass that finds every place right writes nothing)."""
    out = []
    for ns, queue, shards in items:
        wrong = [shard for shard, current, at_ns in _placement(tx, ns, queue, shards) if current != at_ns]
        if wrong:
            out.append((ns, queue, wrong))
    return out


def reschedule_due(tx: Txn, ns: str, queue: str, shards: list[int]) -> None:
    """Put each shard at its next due time in the due index (after a sweep), or take it
    out: in the transaction that reads the heads, so an entry added meanwhile by another
    transition either is seen here or moves the place earlier after this commits."""
    k = keys.QueueKeys(ns, queue)
    for shard, current, at_ns in _placement(tx, ns, queue, shards):
        nd_key = k.next_due(shard)
        if at_ns == current:
            continue
        if current is not None:
            tx.delete(keys.due_entry(current, ns, queue, shard))
        if at_ns is None:
            tx.delete(nd_key)
        else:
            tx.put(keys.due_entry(at_ns, ns, queue, shard), b"")
            tx.put(nd_key, keys.U64.pack(at_ns))


def reschedule_due_many(tx: Txn, items: list[tuple[str, str, list[int]]]) -> None:
    for ns, queue, shards in items:
        reschedule_due(tx, ns, queue, shards)


def queue_shards(tx: Txn, ns: str, queue: str) -> int:
    raw = tx.get(keys.QueueKeys(ns, queue).config())
    return max(pb.QueueConfig.FromString(raw).shards, 1) if raw else 0
