"""Enqueue (spec §5.1, §6.2): one transaction per call or per bulk batch, with the
three uniqueness mechanisms checked in the order a retried producer needs them:
idempotency key, then job key, then dedup id."""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from loam_common import tracing, validate
from loam_common.effects import Handed
from loam_common.errors import AlreadyExists, IdempotencyConflict, InvalidArgument, JobsError, PayloadTooLarge
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import dedup, lease
from loam_common.jobs import states as S
from loam_common.jobs.queue import QueueTx
from loam_common.store.base import Txn

DEFAULT_IDEMPOTENCY_TTL_NS = 24 * 3600 * 1_000_000_000


@dataclass(frozen=True, slots=True)
class NewJob:
    """A job as the producer asked for it, validated, with its server-assigned id."""

    job_id: str
    task: pb.TaskSpec
    opts: pb.EnqueueOpts
    # Called on the new job record just before it is stored (flows set its state and links).
    init: Callable[[pb.Job], None] | None = None


@dataclass(frozen=True, slots=True)
class Enqueued:
    job_id: str
    created: bool
    state: int
    job_key: str = ""  # the job's key, when it has one (BullMQ's id)


def request_hash(task: pb.TaskSpec, opts: pb.EnqueueOpts) -> bytes:
    """The canonical request: what `job_key` and idempotency keys compare. The trace
    context is not part of it: a retried call may carry another one (or none, and get
    one generated)."""
    if any(h in task.headers for h in tracing.TRACE_HEADERS):
        t = pb.TaskSpec()
        t.CopyFrom(task)
        for h in tracing.TRACE_HEADERS:
            if h in t.headers:
                del t.headers[h]
        task = t
    o = pb.EnqueueOpts()
    o.CopyFrom(opts)
    o.ClearField("idempotency")
    h = hashlib.sha256(task.SerializeToString(deterministic=True))
    h.update(o.SerializeToString(deterministic=True))
    return h.digest()


def check_opts(opts: pb.EnqueueOpts, field: str = "opts") -> None:
    """Refuse contradictory or out-of-range options before any transaction."""
    if opts.priority > validate.PRIORITY_LIMIT:
        raise InvalidArgument(f"{field}.priority", f"must be at most {validate.PRIORITY_LIMIT}")
    if opts.priority and opts.lifo:
        raise InvalidArgument(f"{field}.lifo", "LIFO applies to the FIFO band only; drop priority or lifo")
    if opts.HasField("not_before"):
        nb = opts.not_before
        if nb.WhichOneof("kind") == "delay_ns":
            validate.duration_ns(f"{field}.not_before.delay_ns", nb.delay_ns)
        elif nb.WhichOneof("kind") == "at_ns":
            validate.time_ns(f"{field}.not_before.at_ns", nb.at_ns)
    for name in ("visibility_ns", "timeout_ns"):
        validate.duration_ns(f"{field}.{name}", getattr(opts, name))
    validate.time_ns(f"{field}.expires_ns", opts.expires_ns)
    if opts.timeout_ns and opts.visibility_ns > opts.timeout_ns:
        raise InvalidArgument(f"{field}.visibility_ns", "is longer than timeout_ns")
    if opts.HasField("backoff"):
        b = opts.backoff
        validate.duration_ns(f"{field}.backoff.base_ns", b.base_ns)
        validate.duration_ns(f"{field}.backoff.max_ns", b.max_ns)
        validate.in_range(f"{field}.backoff.jitter", b.jitter, 0.0, 1.0)
    if opts.job_key:
        validate.text(f"{field}.job_key", opts.job_key, 1024)
    if opts.HasField("idempotency"):
        validate.text(f"{field}.idempotency.key", opts.idempotency.key, 1024, allow_empty=False)
        validate.duration_ns(f"{field}.idempotency.ttl_ns", opts.idempotency.ttl_ns)
    if opts.HasField("dedup"):
        d = opts.dedup
        validate.text(f"{field}.dedup.id", d.id, 1024, allow_empty=False)
        validate.duration_ns(f"{field}.dedup.ttl_ns", d.ttl_ns)
        if d.mode in (pb.DEDUP_MODE_THROTTLE, pb.DEDUP_MODE_DEBOUNCE) and d.ttl_ns <= 0:
            raise InvalidArgument(f"{field}.dedup.ttl_ns", "throttle and debounce need a ttl")
        if d.replace and d.mode != pb.DEDUP_MODE_DEBOUNCE:
            raise InvalidArgument(f"{field}.dedup.replace", "only applies to debounce")
        if d.replace and not opts.HasField("not_before"):
            raise InvalidArgument(f"{field}.dedup.replace", "debounce with replace needs a delay")
    if opts.subject:
        validate.text(f"{field}.subject", opts.subject, 1024)
    if opts.HasField("parent"):
        p = opts.parent
        validate.name(f"{field}.parent.queue", p.queue)
        validate.text(f"{field}.parent.job_id", p.job_id, 1024, allow_empty=False)
        flags = [f for f in _PARENT_FLAGS if getattr(p, f)]
        if len(flags) > 1:
            raise InvalidArgument(f"{field}.parent", f"{flags[0]} and {flags[1]} cannot be used together")
        if opts.HasField("dedup"):  # a duplicate would not be the parent's child; keep-last could outlive it
            raise InvalidArgument(f"{field}.dedup", "cannot be used on a job with a parent")
    if opts.mode == pb.MODE_DURABLE and not opts.durable_function:
        raise InvalidArgument(f"{field}.durable_function", "durable mode names the function to run")


_PARENT_FLAGS = (
    "fail_parent_on_failure",
    "continue_parent_on_failure",
    "ignore_dependency_on_failure",
    "remove_dependency_on_failure",
)


def _due_ns(opts: pb.EnqueueOpts, now: int) -> int:
    if not opts.HasField("not_before"):
        return 0
    nb = opts.not_before
    return now + nb.delay_ns if nb.WhichOneof("kind") == "delay_ns" else nb.at_ns


def _shard(qt: QueueTx, job: NewJob) -> int:
    shards = max(qt.cfg.shards, 1)
    if shards == 1:
        return 0
    # A subject's jobs share a shard so the subject's FIFO is one ordered range.
    basis = job.opts.subject or job.job_id
    return zlib.crc32(basis.encode()) % shards


def job_enqueue(
    tx: Txn, ns: str, queue: str, new_jobs: list[NewJob], bulk: bool = False
) -> list[Enqueued | JobsError]:
    """Enqueue jobs into one queue in one transaction. In a bulk call (`bulk`, or more
    than one job) a refused job (key clash) gets its error in its slot and leaves no
    trace, and the others go in; a single enqueue raises it."""
    out: list[Enqueued | JobsError] = []
    with QueueTx(tx, ns, queue) as qt:
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
                out.append(_enqueue_one(qt, nj))
                if sp is not None:
                    tx.release(sp)
            except JobsError as e:
                if sp is not None:
                    tx.rollback_to(sp)
                    tx.release(sp)
                    out.append(e)
                else:
                    raise
    return out


def check_payload_limit(qt: QueueTx, nj: NewJob) -> None:
    """The queue's own payload limit (the server-wide one is checked before any
    transaction)."""
    limit = qt.cfg.payload_limit
    if limit and nj.task.payload.size > limit:
        raise PayloadTooLarge(nj.task.payload.size, limit)


def job_enqueue_then_lease(
    tx: Txn, ns: str, queue: str, new_jobs: list[NewJob], bulk: bool, lease_args: tuple
) -> tuple[list[Enqueued | JobsError], lease.LeaseResult]:
    """An enqueue that hands its jobs to a parked poll (decision 0023): `job_enqueue`,
    then a lease of `queue` for that poll (job_lease's worker, max_jobs, names and
    visibility_ns), in one transaction."""
    done = job_enqueue(tx, ns, queue, new_jobs, bulk)
    worker, max_jobs, names, visibility_ns = lease_args
    leased = lease.job_lease(tx, ns, [queue], worker, max_jobs, names, 0, visibility_ns)
    if leased.jobs:  # the poll has them: their wake-ups would only send another poll looking
        tx.declare(Handed(frozenset(j.id for j in leased.jobs)))
    return done, leased


def _refusable(nj: NewJob) -> bool:
    """Whether enqueueing `nj` can end in a per-job error (a key clash, a missing parent).
    A key that keeps the first job, or one the counter makes, never clashes into an error."""
    o = nj.opts
    return bool(
        (o.job_key and not o.job_key_keeps_first)
        or nj.init
        or o.HasField("idempotency")
        or o.HasField("dedup")
        or o.HasField("parent")
    )


def _enqueue_one(qt: QueueTx, nj: NewJob) -> Enqueued:
    tx, k, now, opts = qt.tx, qt.k, qt.now, nj.opts
    rhash = None

    if opts.HasField("idempotency"):
        rhash = request_hash(nj.task, opts)
        ikey = k.idempotency(opts.idempotency.key)
        raw = tx.get(ikey)
        if raw is not None:
            rec = pb.IdempotencyRecord.FromString(raw)
            if rec.expires_ns > now:
                if rec.request_hash != rhash:
                    raise IdempotencyConflict(opts.idempotency.key)
                return Enqueued(rec.job_id, rec.created, rec.state)

    from_counter = opts.job_key_from_counter and not opts.job_key
    if from_counter:
        qt.ensure_exists()
        opts = pb.EnqueueOpts()
        opts.CopyFrom(nj.opts)  # not the caller's message: it may be reused
        opts.job_key = qt.next_job_key()
        # Nobody retries with a key the server made, so there is no request to compare:
        # the key keeps its first job. Only a client that set a decimal key by hand can
        # hold it already (BullMQ refuses integer custom ids); that job is returned.
        opts.job_key_keeps_first = True
        nj = NewJob(nj.job_id, nj.task, opts, nj.init)

    if opts.job_key:
        existing_id = tx.get(k.job_key(opts.job_key))
        if existing_id is not None:
            existing = qt.get_job(existing_id.decode())
            if existing is not None:
                if opts.job_key_keeps_first:  # BullMQ: the first job with an id wins
                    qt.emit("duplicated", existing)
                    return _remember(
                        qt, nj, Enqueued(existing.id, False, existing.state, existing.opts.job_key)
                    )
                rhash = rhash or request_hash(nj.task, opts)
                if existing.request_hash != rhash:
                    raise AlreadyExists(
                        f"job key {opts.job_key!r} is taken by job {existing.id} with different "
                        "parameters; use another key or remove that job first",
                        existing.id,
                    )
                return _remember(qt, nj, Enqueued(existing.id, False, existing.state, existing.opts.job_key))

    if opts.HasField("dedup"):
        hit = dedup.check(qt, nj)
        if hit is not None:
            return _remember(qt, nj, hit)

    if "traceparent" not in nj.task.headers:  # every job gets a trace context (spec §6.11)
        nj.task.headers["traceparent"] = tracing.new_traceparent()
    job = pb.Job(id=nj.job_id, queue=qt.name, task=nj.task, opts=opts, created_ns=now)
    job.attempts_max = opts.attempts or qt.cfg.attempts or 1
    job.shard = _shard(qt, nj)
    # Compared when the same key is enqueued again without keeping the first job.
    job.request_hash = rhash or (
        request_hash(nj.task, opts) if opts.job_key and not opts.job_key_keeps_first else b""
    )
    due = _due_ns(opts, now)
    if due > now:
        job.state = S.DELAYED
        job.due_ns = due
    else:
        job.state = S.ready_state(opts.priority)
    if opts.HasField("parent"):
        from loam_common import flows  # flows enqueues, so it imports this module

        flows.attach_child(qt, job)  # checks the parent first: refused, nothing is written
    if nj.init is not None:
        nj.init(job)
    qt.insert(job)
    qt.emit_added(job, S.name(job.state) if not job.subject_blocked else "waiting")
    if opts.job_key:
        tx.put(k.job_key(opts.job_key), job.id.encode())
    if opts.HasField("dedup"):
        dedup.record(qt, nj)
    return _remember(qt, nj, Enqueued(job.id, True, job.state, job.opts.job_key))


def _remember(qt: QueueTx, nj: NewJob, result: Enqueued) -> Enqueued:
    """Store the idempotency record: the first call's answer, for its TTL."""
    opts = nj.opts
    if opts.HasField("idempotency"):
        ttl = opts.idempotency.ttl_ns or DEFAULT_IDEMPOTENCY_TTL_NS
        expires = qt.now + ttl
        rec = pb.IdempotencyRecord(
            request_hash=request_hash(nj.task, opts),
            job_id=result.job_id,
            state=result.state,
            expires_ns=expires,
            created=result.created,
        )
        qt.ensure_exists()
        qt.tx.put(qt.k.idempotency(opts.idempotency.key), rec.SerializeToString())
        qt.tx.put(qt.k.idempotency_expiry(expires, opts.idempotency.key), b"")
    return result
