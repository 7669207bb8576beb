"""Queue admin (spec §5.4): the `QueueOp`s, one function per op over one transaction,
named `queue_<verb>` (the `JobOp`s are in job_admin.py). Every job move goes through
QueueTx, so indexes, per-shard counts, subject FIFOs and outbox rows stay in step; every
mutating op writes its outbox event(s) with BullMQ's event names.

Ops that can touch many jobs (drain, clean, retry-all, promote-all, obliterate) do at
most `limit` per call so one transaction stays bounded; the caller calls again while
a call did a full batch (obliterate says so with `done`).
"""

from __future__ import annotations

from dataclasses import dataclass

from loam_common import keys, registry, validate
from loam_common.effects import ALL
from loam_common.errors import AlreadyExists, InvalidArgument, InvalidState
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import dependencies, dlq, job_admin, schedules
from loam_common.jobs import states as S
from loam_common.jobs.linked import LinkedQueueTx
from loam_common.jobs.queue import DEFAULT_VISIBILITY_NS, QueueTx
from loam_common.store.base import Txn

BATCH = 1000
MAX_BATCH = 10_000
OBLITERATE_BATCH = 5000
# Settings Update may not touch: identity, and the flag Pause/Resume own.
_UPDATE_PROTECTED = {
    "name": "is the queue's name",
    "created_ns": "is set by Create",
    "paused": "is set by Pause and Resume",
}


# -- queue config -------------------------------------------------------------------------
def _normalized(cfg: pb.QueueConfig, queue: str) -> pb.QueueConfig:
    """A copy with the zero values that mean "default" filled in."""
    if cfg.name and cfg.name != queue:
        raise InvalidArgument("config.name", f"{cfg.name!r} differs from the queue {queue!r}")
    out = pb.QueueConfig()
    out.CopyFrom(cfg)
    out.name = queue
    out.shards = out.shards or 1
    out.visibility_ns = out.visibility_ns or DEFAULT_VISIBILITY_NS
    out.attempts = out.attempts or 1
    return out


def validate_config(cfg: pb.QueueConfig, queue: str, field: str = "config") -> None:
    """Refuse a config that cannot work, naming the field. `cfg` has defaults filled in."""
    validate.in_range(f"{field}.shards", cfg.shards, 1, validate.MAX_SHARDS)
    if cfg.visibility_ns <= 0:
        raise InvalidArgument(f"{field}.visibility_ns", f"must be above 0 (got {cfg.visibility_ns})")
    validate.duration_ns(f"{field}.visibility_ns", cfg.visibility_ns)
    validate.duration_ns(f"{field}.rate_limit.duration_ns", abs(cfg.rate_limit.duration_ns))
    if cfg.HasField("max_stalled") and cfg.max_stalled < -1:
        raise InvalidArgument(f"{field}.max_stalled", "must be -1 (unlimited) or more")
    validate.duration_ns(f"{field}.stalled_interval_ns", cfg.stalled_interval_ns)
    rl = cfg.rate_limit
    if rl.duration_ns < 0 or (rl.max > 0) != (rl.duration_ns > 0):
        raise InvalidArgument(f"{field}.rate_limit", "set max and duration_ns both above 0, or both to 0")
    if cfg.dead_letter_queue:
        validate.name(f"{field}.dead_letter_queue", cfg.dead_letter_queue)
        if cfg.dead_letter_queue == queue:
            raise InvalidArgument(f"{field}.dead_letter_queue", "must be another queue")
    elif cfg.dead_letter_on_exhausted:
        raise InvalidArgument(f"{field}.dead_letter_on_exhausted", "needs a dead_letter_queue")
    r = cfg.retention
    for name in ("completed_count", "completed_age_ns", "failed_count", "failed_age_ns"):
        if r.HasField(name):
            check = validate.duration_ns if name.endswith("_ns") else validate.non_negative
            check(f"{field}.retention.{name}", getattr(r, name))
    validate.duration_ns(f"{field}.retention.result_ttl_ns", r.result_ttl_ns)
    validate.duration_ns(f"{field}.backoff.base_ns", cfg.backoff.base_ns)
    validate.duration_ns(f"{field}.backoff.max_ns", cfg.backoff.max_ns)
    validate.in_range(f"{field}.backoff.jitter", cfg.backoff.jitter, 0.0, 1.0)


def _settings(cfg: pb.QueueConfig) -> bytes:
    """The config minus what is not a setting, for comparing two configs."""
    c = pb.QueueConfig()
    c.CopyFrom(cfg)
    c.ClearField("created_ns")
    c.ClearField("paused")
    return c.SerializeToString(deterministic=True)


def _check_shard_change(qt: QueueTx, shards: int) -> None:
    # A job's shard is fixed at enqueue; changing the count would strand held jobs.
    held = sum(qt.counts().values())
    if shards != max(qt.cfg.shards, 1) and held:
        raise InvalidArgument(
            "config.shards", f"cannot change while the queue holds {held} jobs; drain or obliterate it first"
        )


def queue_create(tx: Txn, ns: str, queue: str, cfg: pb.QueueConfig) -> tuple[pb.QueueConfig, bool]:
    """Create a queue. Creating it again with the same settings returns it with
    `created=False` (a retried Create succeeds); other settings are AlreadyExists."""
    validate.name("queue", queue)
    new = _normalized(cfg, queue)
    validate_config(new, queue)
    with LinkedQueueTx(tx, ns, queue) as qt:
        if qt.exists:
            if _settings(qt.cfg) != _settings(new):
                msg = f"queue {queue!r} exists with other settings; use Update to change them"
                raise AlreadyExists(msg, queue)
            return qt.cfg, False
        new.created_ns = qt.now
        qt.cfg = new
        qt.ensure_exists()
        qt.emit("created")
        return new, True


def queue_update(
    tx: Txn, ns: str, queue: str, cfg: pb.QueueConfig, fields: list[str] | None = None
) -> pb.QueueConfig:
    """Replace the queue's settings with `cfg`, or only the top-level `fields` named
    (a field mask). Zero values mean the defaults, as in Create."""
    validate.name("queue", queue)
    with LinkedQueueTx(tx, ns, queue, create=False) as qt:
        merged = pb.QueueConfig()
        if fields is None:
            merged.CopyFrom(cfg)
        else:
            merged.CopyFrom(qt.cfg)
            for f in fields:
                _copy_field(cfg, merged, f)
        new = _normalized(merged, queue)
        new.created_ns, new.paused = qt.cfg.created_ns, qt.cfg.paused
        validate_config(new, queue)
        _check_shard_change(qt, new.shards)
        if _settings(new) != _settings(qt.cfg):
            qt.cfg = new
            qt.save_config()
            qt.emit("config-updated", detail=",".join(fields) if fields else "")
        qt.wake_after_commit(ALL)  # a lifted rate limit or concurrency cap frees leases
        return qt.cfg


def _copy_field(src: pb.QueueConfig, dst: pb.QueueConfig, name: str) -> None:
    fd = pb.QueueConfig.DESCRIPTOR.fields_by_name.get(name)
    if fd is None:
        raise InvalidArgument("fields", f"{name!r} is not a QueueConfig field")
    if name in _UPDATE_PROTECTED:
        raise InvalidArgument("fields", f"{name!r} {_UPDATE_PROTECTED[name]}")
    dst.ClearField(name)
    if fd.message_type is not None:
        getattr(dst, name).CopyFrom(getattr(src, name))
    elif not fd.has_presence or src.HasField(name):
        setattr(dst, name, getattr(src, name))


def _set_paused(tx: Txn, ns: str, queue: str, paused: bool) -> None:
    validate.name("queue", queue)
    with LinkedQueueTx(tx, ns, queue, create=False) as qt:
        if qt.cfg.paused != paused:
            qt.cfg.paused = paused
            qt.save_config()
            qt.emit("paused" if paused else "resumed")
        qt.wake_after_commit(ALL)  # parked leases read the queue again


def queue_pause(tx: Txn, ns: str, queue: str) -> None:
    """Stop leasing; jobs stay where they are (lease skips paused queues)."""
    _set_paused(tx, ns, queue, True)


def queue_resume(tx: Txn, ns: str, queue: str) -> None:
    _set_paused(tx, ns, queue, False)


def queue_set_rate_limit(
    tx: Txn, ns: str, queue: str, max_jobs: int, duration_ns: int, sharded: bool = False
) -> pb.QueueConfig:
    """BullMQ's limiter: at most `max_jobs` leases per `duration_ns`; both 0 = none."""
    rl = pb.RateLimit(max=validate.non_negative("rate_limit.max", max_jobs), sharded=sharded)
    rl.duration_ns = validate.duration_ns("rate_limit.duration_ns", duration_ns)
    return queue_update(tx, ns, queue, pb.QueueConfig(rate_limit=rl), ["rate_limit"])


def queue_set_concurrency(tx: Txn, ns: str, queue: str, concurrency: int) -> pb.QueueConfig:
    """BullMQ's setGlobalConcurrency: active jobs across all workers; 0 = no cap."""
    c = validate.non_negative("concurrency", concurrency)
    return queue_update(tx, ns, queue, pb.QueueConfig(concurrency=c), ["concurrency"])


# -- reading a queue ------------------------------------------------------------------------
def _counts(qt: QueueTx) -> pb.QueueCounts:
    c = qt.counts()  # O(shards): kept by every move in ShardMeta
    return pb.QueueCounts(**{_COUNT_FIELD[st]: c.get(st, 0) for st in S.NAMES}, paused=qt.cfg.paused)


# The QueueCounts field of each state: its BullMQ name in snake_case (`waiting_children`).
_COUNT_FIELD = {st: S.name(st).replace("-", "_") for st in S.NAMES}


def counts_by_state_name(counts: pb.QueueCounts) -> dict[str, int]:
    """BullMQ-style state names (`waiting-children`, ...) to counts."""
    return {S.name(st): getattr(counts, f) for st, f in _COUNT_FIELD.items()}


def queue_counts(tx: Txn, ns: str, queue: str) -> pb.QueueCounts:
    validate.name("queue", queue)
    with LinkedQueueTx(tx, ns, queue, create=False) as qt:
        return _counts(qt)


def queue_rate_limit_for(tx: Txn, ns: str, queue: str, for_ns: int) -> None:
    """Block leases for `for_ns` (BullMQ's rateLimit); 0 lifts the block and resets the
    rate window (BullMQ's removeRateLimitKey)."""
    validate.name("queue", queue)
    validate.duration_ns("for_ns", for_ns)
    with LinkedQueueTx(tx, ns, queue) as qt:
        qt.ensure_exists()
        key = qt.k.runtime()
        raw = tx.get(key)
        rt = pb.QueueRuntime.FromString(raw) if raw else pb.QueueRuntime()
        if for_ns:
            # BullMQ's rateLimit(ms) replaces the limiter's window: full, ending in `ms`
            # (shorter or longer than the one open), after which a fresh window starts.
            rt.blocked_until_ns = qt.now + for_ns
            rl = qt.cfg.rate_limit
            if rl.max and rl.duration_ns:
                rt.window_start_ns = rt.blocked_until_ns - rl.duration_ns
                rt.used = rl.max
        else:
            rt.blocked_until_ns = 0
            rt.window_start_ns = 0
            rt.used = 0
            qt.wake_after_commit(ALL)  # the block is lifted
        tx.put(key, rt.SerializeToString())


def queue_rate_window(tx: Txn, ns: str, queue: str) -> tuple[int, int]:
    """(ns until the queue's rate window or RateLimited block ends, leases used in the
    window): BullMQ's getRateLimitTtl. (0, 0) when no window is open."""
    validate.name("queue", queue)
    with LinkedQueueTx(tx, ns, queue, create=False) as qt:
        raw = tx.get(qt.k.runtime())
        if raw is None:
            return 0, 0
        rt = pb.QueueRuntime.FromString(raw)
        if rt.blocked_until_ns > qt.now:
            return rt.blocked_until_ns - qt.now, rt.used
        rl = qt.cfg.rate_limit
        end = rt.window_start_ns + rl.duration_ns
        if rl.max and rl.duration_ns and rt.used and end > qt.now:
            return end - qt.now, rt.used
        return 0, 0


def queue_config(tx: Txn, ns: str, queue: str) -> pb.QueueConfig:
    validate.name("queue", queue)
    with LinkedQueueTx(tx, ns, queue, create=False) as qt:
        return qt.cfg


def queue_list(tx: Txn, ns: str, after: str = "", limit: int = MAX_BATCH) -> list[str]:
    """The namespace's queues in name order, from the `qs/` registry: up to `limit`
    names after `after`. Obliterated queues keep their registry entry (the relay still
    drains their outbox), so only names that still have a config count."""
    validate.non_negative("limit", limit)
    prefix = keys.queue_registry(ns)
    start = keys.queue_registry(ns, after) + b"\x00" if after else prefix
    rows = tx.scan(start, keys.prefix_end(prefix), limit=min(limit or MAX_BATCH, MAX_BATCH))
    names = [keys.queue_from_registry_key(ns, k) for k, _ in rows]
    found = tx.batch_get([keys.QueueKeys(ns, q).config() for q in names])
    return [q for q in names if keys.QueueKeys(ns, q).config() in found]


def queue_list_counts(
    tx: Txn, ns: str, after: str = "", limit: int = MAX_BATCH
) -> list[tuple[str, pb.QueueCounts]]:
    """`queue_list` with each queue's counts, read in the same snapshot: the queue list
    of the console costs one store read per queue shard, not a call per queue."""
    out = []
    for queue in queue_list(tx, ns, after, limit):
        with LinkedQueueTx(tx, ns, queue, create=False) as qt:
            out.append((queue, _counts(qt)))
    return out


def queue_workers(tx: Txn, ns: str, queue: str, seen_within_ns: int = 0) -> list[pb.Worker]:
    """Workers that leased from the queue (the `w/` records lease writes), most recently
    seen first; with `seen_within_ns`, only those seen that recently."""
    validate.name("queue", queue)
    validate.non_negative("seen_within_ns", seen_within_ns)
    with LinkedQueueTx(tx, ns, queue, create=False) as qt:
        prefix = qt.k.workers()
        out = [pb.Worker.FromString(v) for _, v in tx.scan(prefix, keys.prefix_end(prefix))]
        if seen_within_ns:
            out = [w for w in out if w.last_seen_ns >= qt.now - seen_within_ns]
        return sorted(out, key=lambda w: w.last_seen_ns, reverse=True)


@dataclass(frozen=True, slots=True)
class QueueOverview:
    counts: pb.QueueCounts
    completed: int  # jobs held in completed now (retention trims it)
    failed: int
    oldest_waiting_age_ns: int  # age in its state of the next job to serve; 0 if none
    workers: int


def queue_overview(tx: Txn, ns: str, queue: str) -> QueueOverview:
    """What is cheap to know: counts and one ready-index head per shard."""
    validate.name("queue", queue)
    with LinkedQueueTx(tx, ns, queue, create=False) as qt:
        counts = _counts(qt)
        oldest = 0
        for shard in range(max(qt.cfg.shards, 1)):
            prefix = qt.k.ready_shard(shard)
            head = tx.scan(prefix, keys.prefix_end(prefix), limit=1)
            job = qt.get_job(head[0][1].decode()) if head else None
            if job is not None:
                oldest = max(oldest, qt.now - job.state_ns)
        prefix = qt.k.workers()
        workers = len(tx.scan(prefix, keys.prefix_end(prefix)))
        return QueueOverview(counts, counts.completed, counts.failed, oldest, workers)


# -- bulk ops -------------------------------------------------------------------------------
def _limit(limit: int, default: int = BATCH) -> int:
    validate.non_negative("limit", limit)
    return min(limit or default, MAX_BATCH)


def _job_at(qt: QueueTx, prefix: bytes, key: bytes, value: bytes) -> pb.Job | None:
    """The job an index entry points at: ready and subject entries hold the id as their
    value, the time-ordered indexes at the end of the key. None for a stale entry (one
    removed earlier in this transaction, or one whose job is gone, which is repaired)."""
    if qt.tx.get(key) is None:
        return None
    job = qt.get_job(value.decode() if value else keys.index_job_id(key, len(prefix)))
    if job is None:
        qt.tx.delete(key)  # an index entry without its job: repair, as retention does
    return job


def _each_entry(qt: QueueTx, prefix: bytes, limit: int, consume: bool = True, keep=None):
    """Yield (key, job) from an index in key order until `limit` jobs were yielded or
    the index is exhausted. With `consume` the caller takes every yielded job out of
    this index, so each page is scanned from the start again until one comes back
    empty: that also finds entries the removals let in anywhere in the index (a
    subject's next job). Jobs `keep(job)` is true for are skipped, and stay. Among the
    subject backlogs, a subject's holder key is skipped: its job is in its own index."""
    start, end, seen = prefix, keys.prefix_end(prefix), 0
    backlogs = prefix == qt.k.subject_backlogs()
    while seen < limit:
        page = min(limit - seen, 500)
        rows = qt.tx.scan(start, end, limit=page)
        took = 0
        for key, value in rows:
            if backlogs and qt.k.is_subject_holder(key):
                continue
            job = _job_at(qt, prefix, key, value)
            if job is not None and not (keep is not None and keep(job)):
                seen += 1
                took += 1
                yield key, job
        if not consume or (rows and not took):  # a page of kept jobs: go past it
            if len(rows) < page:
                return
            start = rows[-1][0] + b"\x00"
        elif not rows:  # the caller took everything out, including what it let in
            return


def queue_drain(tx: Txn, ns: str, queue: str, delayed: bool = False, limit: int = BATCH) -> int:
    """Remove waiting and prioritized jobs (and delayed ones if `delayed`), as BullMQ's
    drain: not active, waiting-children or finished jobs. Returns how many went."""
    validate.name("queue", queue)
    limit = _limit(limit)
    with LinkedQueueTx(tx, ns, queue, create=False) as qt:
        shards = range(max(qt.cfg.shards, 1))
        prefixes = [qt.k.ready_shard(s) for s in shards] + [qt.k.subject_backlogs()]
        if delayed:
            prefixes += [qt.k.delayed_shard(s) for s in shards]
        removed = 0
        # Removing a subject's in-flight job admits its next one to the ready index,
        # so a prefix is scanned again until it is empty.
        # A job scheduler's pending iteration stays (BullMQ), or its chain would stop.
        keep = _current_iteration(qt)
        for prefix in prefixes:
            for _key, job in _each_entry(qt, prefix, limit - removed, keep=keep):
                qt.remove(job, event=None)
                removed += 1
        qt.emit("drained", detail="delayed" if delayed else "", data=str(removed).encode())
        return removed


def _current_iteration(qt: QueueTx):
    return lambda job: schedules.is_current_iteration(qt.tx, qt.ns, job)


def _clean_sources(qt: QueueTx, state: int) -> list[tuple[bytes, bool]]:
    """(prefix, indexed_by_state_time) to scan for `state`."""
    shards = range(max(qt.cfg.shards, 1))
    if state in S.STATE_INDEXED:
        return [(qt.k.state_shard(state, s), True) for s in shards]
    if state == S.DELAYED:
        return [(qt.k.delayed_shard(s), False) for s in shards]
    band = keys.PRIORITY_BAND if state == S.PRIORITIZED else keys.FIFO_BAND
    return [(qt.k.ready_band(s, band), False) for s in shards] + [(qt.k.subject_backlogs(), False)]


def queue_clean(tx: Txn, ns: str, queue: str, state: int, grace_ns: int, limit: int = BATCH) -> list[str]:
    """BullMQ's clean: remove up to `limit` jobs in `state` older than `grace_ns`, by the
    time they entered it (finished, waiting-children) or were created (waiting,
    prioritized, delayed). Active jobs are held by workers and cannot be cleaned."""
    validate.name("queue", queue)
    validate.duration_ns("grace_ns", grace_ns)
    if state not in S.NAMES:
        raise InvalidArgument("state", f"unknown state {state}")
    if state == S.ACTIVE:
        raise InvalidArgument("state", "active jobs are held by workers; cancel or let them finish")
    limit = _limit(limit)
    with LinkedQueueTx(tx, ns, queue, create=False) as qt:
        cutoff = qt.now - grace_ns
        removed: list[str] = []
        for prefix, by_time in _clean_sources(qt, state):
            if by_time:  # the index is in state-time order: stop at the cutoff
                rows = tx.scan(prefix, prefix + keys.U64.pack(max(cutoff + 1, 0)), limit=limit - len(removed))
                jobs = (j for j in (_job_at(qt, prefix, k, v) for k, v in rows) if j is not None)
            else:  # no time order: look at up to MAX_BATCH entries
                entries = _each_entry(qt, prefix, MAX_BATCH, consume=False)
                jobs = (j for _, j in entries if j.created_ns <= cutoff)
            keep = _current_iteration(qt)
            for job in jobs:
                if len(removed) >= limit:
                    break
                if job.state == state and not keep(job):
                    with dependencies.cleaning(queue):
                        qt.remove(job, event=None)
                    removed.append(job.id)
        qt.emit("cleaned", detail=S.name(state), data=str(len(removed)).encode())
        return removed


def queue_retry_all(tx: Txn, ns: str, queue: str, state: int = S.FAILED, limit: int = BATCH) -> int:
    """BullMQ's retryJobs: move up to `limit` failed (or completed) jobs back to waiting,
    oldest first."""
    validate.name("queue", queue)
    if state not in (S.FAILED, S.COMPLETED):
        raise InvalidArgument("state", "retry-all takes failed or completed")
    limit = _limit(limit)
    with LinkedQueueTx(tx, ns, queue, create=False) as qt:
        moved = 0
        for shard in range(max(qt.cfg.shards, 1)):
            for _key, job in _each_entry(qt, qt.k.state_shard(state, shard), limit - moved):
                job_admin.retry(qt, job)
                moved += 1
        if moved:
            qt.wake_after_commit(ALL)
        return moved


def queue_promote_all(tx: Txn, ns: str, queue: str, limit: int = BATCH) -> int:
    """BullMQ's promoteJobs: make up to `limit` delayed jobs ready now, soonest first."""
    validate.name("queue", queue)
    limit = _limit(limit)
    with LinkedQueueTx(tx, ns, queue, create=False) as qt:
        moved = 0
        for shard in range(max(qt.cfg.shards, 1)):
            for _key, job in _each_entry(qt, qt.k.delayed_shard(shard), limit - moved):
                job_admin.promote(qt, job)
                moved += 1
        if moved:
            qt.wake_after_commit(ALL)
        return moved


def queue_redrive_dead_letters(tx: Txn, ns: str, queue: str, limit: int = BATCH) -> int:
    """Called on a dead-letter queue: move up to `limit` dead letters back to the queues
    they came from, as new waiting jobs."""
    validate.name("queue", queue)
    limit = _limit(limit)
    with LinkedQueueTx(tx, ns, queue, create=False) as dq:
        return dlq.redrive(dq, limit)


@dataclass(frozen=True, slots=True)
class Obliterated:
    removed_keys: int
    done: bool  # False: call again (the queue stays paused meanwhile)


def _queue_refused(queue: str, why: str, action: str) -> InvalidState:
    return InvalidState(queue, why, action, f"queue {queue!r} {why}; cannot {action}")


def _drop_blobs(qt: QueueTx, job: pb.Job) -> None:
    """Hand a job's payload and result blobs to the sweeper, as QueueTx.remove does."""
    for ref in (job.task.payload.blob_ref, job.result.blob_ref):
        if ref:
            qt.tx.put(keys.blob_gc(qt.ns, ref), b"")


def queue_obliterate(
    tx: Txn, ns: str, queue: str, force: bool = False, limit: int = OBLITERATE_BATCH
) -> Obliterated:
    """Delete the queue and everything in it, `limit` keys per call. Refused while jobs
    are active unless `force` (their workers' completes then get NotFound).

    Kept: the shard metas (their sequences stay monotonic if the queue is created
    again), the final `obliterated` event in the log, any outbox rows an earlier server
    left, and the registry entry, so the relay still finds that log and outbox (to move
    the rows, then to trim)."""
    validate.name("queue", queue)
    validate.non_negative("limit", limit)
    limit = limit or OBLITERATE_BATCH
    with LinkedQueueTx(tx, ns, queue, create=False) as qt:
        active = qt.active_count()
        if active and not force:
            raise _queue_refused(queue, f"has {active} active jobs", "obliterate without force")
        if not qt.cfg.paused:
            qt.cfg.paused = True  # no leases while later calls finish the job
            qt.save_config()
        # Every job is going: the counts are zero from the first call on.
        for shard in range(max(qt.cfg.shards, 1)):
            meta = qt.meta(shard)
            meta.counts.clear()
            tx.put(qt.k.shard_meta(shard), meta.SerializeToString())
        k, cfg_key, jobs_prefix, deleted = qt.k, qt.k.config(), qt.k.jobs(), 0
        due_prefix = k.next_dues()
        metas, outbox = k.shard_metas(), k.outboxes()
        ranges = [
            (k.all(), metas),
            (keys.prefix_end(metas), outbox),
            (keys.prefix_end(outbox), keys.prefix_end(k.all())),
        ]
        for start, end in ranges:
            while True:
                rows = tx.scan(start, end, limit=500)
                for key, value in rows:
                    if key == cfg_key:
                        continue  # deleted last, so a partial obliterate stays paused
                    if deleted == limit:
                        return Obliterated(deleted, False)
                    if key.startswith(jobs_prefix):
                        _drop_blobs(qt, pb.Job.FromString(value))
                    elif key.startswith(due_prefix):  # its entry in the store-wide due index too
                        tx.delete(keys.due_entry(keys.U64.unpack(value)[0], ns, queue, key[-1]))
                    tx.delete(key)
                    deleted += 1
                if len(rows) < 500:
                    break
                start = rows[-1][0] + b"\x00"
        tx.delete(cfg_key)
        registry.registry_changed(tx)  # its shards are orphans now (the relay's to finish)
        qt.forget_due()
        qt.emit("obliterated")
        return Obliterated(deleted, True)
