"""Storing one new job (spec §6.2): `job_insert`, the one primitive every path that
creates jobs goes through (enqueue, flows, schedules, exchanges, a kept dedup
duplicate). It checks the three uniqueness mechanisms in the order a retried producer
needs them: idempotency key, then job key, then dedup id."""

from __future__ import annotations

import zlib

from loam_common import tracing
from loam_common.errors import AlreadyExists, IdempotencyConflict, PayloadTooLarge
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import dedup, dependencies
from loam_common.jobs import states as S
from loam_common.jobs.new_job import Enqueued, NewJob, due_ns, request_hash
from loam_common.jobs.queue import QueueTx

DEFAULT_IDEMPOTENCY_TTL_NS = 24 * 3600 * 1_000_000_000


def check_payload_limit(qt: QueueTx, nj: NewJob) -> None:
    """The queue's own payload limit (the server-wide one is checked before any
    transaction)."""
    limit = qt.cfg.payload_limit
    if limit and nj.task.payload.size > limit:
        raise PayloadTooLarge(nj.task.payload.size, limit)


def _shard_of(qt: QueueTx, job: NewJob) -> int:
    shards = max(qt.cfg.shards, 1)
    if shards == 1:
        return 0
    # A subject's jobs share a shard so the subject's FIFO is one ordered range.
    basis = job.opts.subject or job.job_id
    return zlib.crc32(basis.encode()) % shards


def job_insert(qt: QueueTx, nj: NewJob) -> Enqueued:
    """Store `nj` in `qt`'s queue unless one of its keys already names a job: the
    idempotency key (the first answer again), then the job key, then the dedup id
    (that job). Refusals (a key taken by another request, a missing parent) raise
    before anything is written."""
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
                        qt, nj, Enqueued(existing.id, False, existing.state, existing.opts.job_key), rhash
                    )
                rhash = rhash or request_hash(nj.task, opts)
                if existing.request_hash != rhash:
                    raise AlreadyExists(
                        f"job key {opts.job_key!r} is taken by job {existing.id} with different "
                        "parameters; use another key or remove that job first",
                        existing.id,
                    )
                return _remember(
                    qt, nj, Enqueued(existing.id, False, existing.state, existing.opts.job_key), rhash
                )

    if opts.HasField("dedup"):
        hit = dedup.duplicate_of(qt, nj)
        if hit is not None:
            return _remember(qt, nj, hit, rhash)

    if "traceparent" not in nj.task.headers:  # every job gets a trace context (spec §6.11)
        nj.task.headers["traceparent"] = tracing.new_traceparent()
    job = pb.Job(id=nj.job_id, queue=qt.name, task=nj.task, opts=opts, created_ns=now)
    job.attempts_max = opts.attempts or qt.cfg.attempts or 1
    job.shard = _shard_of(qt, nj)
    # Compared when the same key is enqueued again without keeping the first job.
    job.request_hash = rhash or (
        request_hash(nj.task, opts) if opts.job_key and not opts.job_key_keeps_first else b""
    )
    due = due_ns(opts, now)
    if due > now:
        job.state = S.DELAYED
        job.due_ns = due
    else:
        job.state = S.ready_state(opts.priority)
    if opts.HasField("parent"):
        dependencies.attach_child(qt, job)  # checks the parent first: refused, nothing is written
    if nj.init is not None:
        nj.init(job)
    qt.insert(job)
    qt.emit_added(job, S.name(job.state) if not job.subject_blocked else "waiting")
    if opts.job_key:
        tx.put(k.job_key(opts.job_key), job.id.encode())
    if opts.HasField("dedup"):
        dedup.record(qt, nj)
    return _remember(qt, nj, Enqueued(job.id, True, job.state, job.opts.job_key), rhash)


def _remember(qt: QueueTx, nj: NewJob, result: Enqueued, rhash: bytes | None) -> Enqueued:
    """Store the idempotency record: the first call's answer, for its TTL. `rhash` is
    the hash of the request as the caller sent it, taken before the job got a key from
    the counter or a trace context (so a retry of the same call compares equal)."""
    opts = nj.opts
    if opts.HasField("idempotency"):
        ttl = opts.idempotency.ttl_ns or DEFAULT_IDEMPOTENCY_TTL_NS
        expires = qt.now + ttl
        rec = pb.IdempotencyRecord(
            request_hash=rhash or request_hash(nj.task, opts),
            job_id=result.job_id,
            state=result.state,
            expires_ns=expires,
            created=result.created,
        )
        qt.ensure_exists()
        qt.tx.put(qt.k.idempotency(opts.idempotency.key), rec.SerializeToString())
        qt.tx.put(qt.k.idempotency_expiry(expires, opts.idempotency.key), b"")
        qt.note_due(0, expires)  # the idempotency sweep runs with shard 0
    return result
