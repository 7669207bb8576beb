"""Storing one new job (spec §6.2): `job_insert`, the one primitive every path that
creates jobs goes through (enqueue, flows, schedules, exchanges, a kept dedup
duplicate). It checks the three uniqueness mechanisms in the order a retried producer
needs them: idempotency key, then job key, then dedup id."""

from __future__ import annotations

import zlib

from loam_common import keys, tracing
from loam_common.errors import AlreadyExists, IdempotencyConflict, PayloadTooLarge
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import dedup, dependencies
from loam_common.jobs import states as S
from loam_common.jobs.new_job import Enqueued, NewJob, due_ns
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
        rhash = nj.request_hash(opts)
        raw = qt.idempotency_record(opts.idempotency.key)
        if raw is not None:
            rec = pb.IdempotencyRecord.FromString(raw)
            if rec.expires_ns > now:
                if rec.call or rec.request_hash != rhash:  # rec.call: a bulk call's key
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
        nj = NewJob(nj.job_id, nj.task, opts, nj.init, nj.sent_hash)

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
                rhash = rhash or nj.request_hash(opts)
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

    dropped = ""
    if opts.replace:
        kept = _earlier_replaceable_kept(qt, nj, opts)
        if isinstance(kept, Enqueued):
            return _remember(qt, nj, kept, rhash)
        dropped = kept

    if "traceparent" not in nj.task.headers:  # every job gets a trace context (spec §6.11)
        nj.task.headers["traceparent"] = tracing.new_traceparent()
    job = pb.Job(id=nj.job_id, queue=qt.name, task=nj.task, opts=opts, created_ns=now)
    job.attempts_max = opts.attempts or qt.cfg.attempts or 1
    job.shard = _shard_of(qt, nj)
    # Compared when the same key is enqueued again without keeping the first job.
    job.request_hash = rhash or (
        nj.request_hash(opts) if opts.job_key and not opts.job_key_keeps_first else b""
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
    qt.emit_added(job, "waiting" if job.subject_blocked and job.state in S.READY else S.name(job.state))
    if opts.job_key:
        tx.put(k.job_key(opts.job_key), job.id.encode())
    if opts.HasField("dedup"):
        dedup.record(qt, nj)
    return _remember(qt, nj, Enqueued(job.id, True, job.state, job.opts.job_key, dropped), rhash)


def _earlier_replaceable_kept(qt: QueueTx, nj: NewJob, opts) -> Enqueued | str:
    """A replacement (spec 003's "push an eviction back each time the file is read"):
    every job of the same subject and task name that has not started (never leased,
    still waiting or delayed), however it was enqueued, and the new one: the one that
    runs latest is kept and all the others dropped (decision 0036). An earlier job runs
    later on a tie. When an earlier job is kept: its answer, naming the new job as
    dropped. Else the earlier ones are removed here and the id of the latest-running of
    them returned ("" when there was none: the new job goes in beside a started one)."""
    earlier = _not_started_of_subject_task(qt, opts.subject, nj.task.name)
    if not earlier:
        return ""
    # Latest run time first; on a tie the one enqueued first.
    earlier.sort(key=lambda j: (-_runs_at(j), j.created_ns, j.id))
    new_runs_at = max(due_ns(opts, qt.now), qt.now)
    latest = earlier[0]
    keep_earlier = _runs_at(latest) >= new_runs_at
    for job in earlier[1:] if keep_earlier else earlier:
        # Read again: removing a subject's job admits the next, which changes its record.
        current = qt.get_job(job.id)
        if current is not None:
            qt.remove(current, "removed")
    if keep_earlier:
        kept = qt.require_job(latest.id)
        qt.emit("duplicated", kept)
        return Enqueued(kept.id, False, kept.state, kept.opts.job_key, dropped=nj.job_id)
    return latest.id


def _runs_at(job: pb.Job) -> int:
    return job.due_ns or job.created_ns


def _not_started_of_subject_task(qt: QueueTx, subject: str, task: str) -> list[pb.Job]:
    """The jobs of (subject, task name) never leased and still waiting or delayed, from
    the subject's own indexes only: its job and its backlog after it (`sq/`), and its
    delayed jobs (`sd/`). A replacement pays for the scans; a plain enqueue writes
    nothing new."""
    k, found = qt.k, dict[str, pb.Job]()
    holder, _, backlog_end = k.subject_current_and_backlog(subject)
    ids = [v.decode() for _, v in qt.tx.scan(holder, backlog_end)]
    delayed = k.subject_delayed(subject, task)
    ids += [key[len(delayed) :].decode() for key, _ in qt.tx.scan(delayed, keys.prefix_end(delayed))]
    for job_id in ids:
        if job_id in found:
            continue
        job = qt.get_job(job_id)
        if (
            job is not None
            and not job.epoch
            and job.task.name == task
            and job.state in (S.WAITING, S.PRIORITIZED, S.DELAYED)
        ):
            found[job_id] = job
    return list(found.values())


def _remember(qt: QueueTx, nj: NewJob, result: Enqueued, rhash: bytes | None) -> Enqueued:
    """Store the idempotency record: the first call's answer, for its TTL. `rhash` is
    the hash of the request as the caller sent it, taken before the job got a key from
    the counter or a trace context (so a retry of the same call compares equal)."""
    opts = nj.opts
    if opts.HasField("idempotency"):
        rec = pb.IdempotencyRecord(
            request_hash=rhash or nj.request_hash(opts),
            job_id=result.job_id,
            state=result.state,
            created=result.created,
        )
        store_idempotency_record(qt, opts.idempotency.key, opts.idempotency.ttl_ns, rec)
    return result


def store_idempotency_record(qt: QueueTx, key: str, ttl_ns: int, rec: pb.IdempotencyRecord) -> None:
    """Keep `rec` under `key` for `ttl_ns` (0: the default), in the expiry index that
    the idempotency sweep reads."""
    expires = rec.expires_ns = qt.now + (ttl_ns or DEFAULT_IDEMPOTENCY_TTL_NS)
    qt.ensure_exists()
    qt.tx.put(qt.k.idempotency(key), rec.SerializeToString())
    qt.tx.put(qt.k.idempotency_expiry(expires, key), b"")
    qt.note_due(0, expires)  # the idempotency sweep runs with shard 0
