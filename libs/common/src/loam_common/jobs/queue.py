"""`QueueTx`: one queue inside one transaction. The only code that moves a job between
states: it keeps the job record, its index entry, the per-shard counts, the subject
FIFO and the outbox row of the move in step, so every transition above it is a few
lines of guards. What a job leaving the live states sets off in other jobs (its flow
parents, a kept dedup duplicate) is not here: `QueueTx` calls its `follow_*` methods,
which `linked.LinkedQueueTx`, the QueueTx every transition opens, fills in.

Use it as a context manager; the shard metas it touched are written once on exit:

    with QueueTx(tx, ns, queue) as qt:
        job = qt.require_job(job_id)
        qt.move(job, COMPLETED, "completed")
"""

from __future__ import annotations

from collections.abc import Callable

from loam_common import keys, registry
from loam_common.effects import Changed, Ready
from loam_common.errors import InvalidState, NotFound, PayloadTooLarge
from loam_common.gen.loam.jobs.v1 import events_pb2
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S
from loam_common.store.base import Txn

DEFAULT_VISIBILITY_NS = 30_000_000_000
DEFAULT_LOG_CAP = 1000
DEFAULT_PAYLOAD_LIMIT = 64 * 1024 * 1024
JobEvent = events_pb2.JobEvent
# Job headers copied onto each of the job's events: the trace context, and the schedule
# a tick job came from (schedules.HEADER_SCHEDULE), which Watch on a schedule filters by.
EVENT_HEADERS = ("traceparent", "x-loam-schedule")


def payload_size(payload: pb.Payload) -> int:
    """A payload's bytes, inline or in the blob store (`size` is kept for both)."""
    return len(payload.data) or payload.size


def default_config(queue: str, now_ns: int) -> pb.QueueConfig:
    return pb.QueueConfig(
        name=queue, visibility_ns=DEFAULT_VISIBILITY_NS, attempts=1, shards=1, created_ns=now_ns
    )


def retention_of(r: pb.Retention, state: int) -> tuple[int | None, int | None]:
    """(count, age_ns) that `r` keeps of `state` (COMPLETED, else FAILED); None = keep."""
    count_f, age_f = (
        ("completed_count", "completed_age_ns") if state == S.COMPLETED else ("failed_count", "failed_age_ns")
    )
    return (
        getattr(r, count_f) if r.HasField(count_f) else None,
        getattr(r, age_f) if r.HasField(age_f) else None,
    )


def max_stalled(cfg: pb.QueueConfig) -> int:
    """BullMQ's maxStalledCount: 1 unless set; -1 means unlimited (Celery acks_late)."""
    return cfg.max_stalled if cfg.HasField("max_stalled") else 1


def stalled_cutoff(cfg: pb.QueueConfig, now_ns: int) -> int | None:
    """The latest lease deadline the stalled sweep reclaims at `now_ns`, or None when the
    queue's leases are never reclaimed (BullMQ's skipStalledCheck). With a stalled
    interval (BullMQ's stalledInterval) the sweep checks only at its multiples, so a lease
    is reclaimed at the first check after it expired, as BullMQ's periodic check finds it."""
    if cfg.skip_stalled_check:
        return None
    interval = cfg.stalled_interval_ns
    return now_ns - now_ns % interval if interval > 0 else now_ns


#: A job moved into these states can be leased now or once due: a parked poll must look
#: (it may sleep until a later due time).
WAKES_A_POLL = S.READY | {S.DELAYED}


class QueueTx:
    __slots__ = (
        "tx",
        "ns",
        "name",
        "k",
        "cfg",
        "now",
        "_metas",
        "_dirty",
        "on_finished",
        "_exists",
        "_peers",
        "_inserted_ready",
        "memo",
        "_due",
        "_stored_cfg",
        "_subject_jobs_done",
        "_key_counter",
        "_key_counter_moved",
    )

    def __init__(self, tx: Txn, ns: str, queue: str, *, create: bool = True) -> None:
        self.tx = tx
        self.ns = ns
        self.name = queue
        self.k = keys.QueueKeys(ns, queue)
        self.now = tx.now_ns()
        raw = tx.get(self.k.config())
        if raw is None:
            if not create:
                raise NotFound(f"queue {queue!r} does not exist in namespace {ns!r}")
            self.cfg = default_config(queue, self.now)
            self._exists = False
        else:
            self.cfg = pb.QueueConfig.FromString(raw)
            self._exists = True
        self._stored_cfg = raw
        self._metas: dict[int, pb.ShardMeta] = {}
        self._dirty: set[int] = set()
        # Jobs made leasable (new, or their subject's turn), declared on flush.
        self._inserted_ready: list[str] = []
        # Values derived from the config, computed once per transition (retention.py);
        # emptied whenever the config is saved.
        self.memo: dict = {}
        # shard -> the earliest time this transition gave the shard sweep work (flush)
        self._due: dict[int, int] = {}
        # Hooks run when a job reaches a finished state.
        self.on_finished: list[Callable[[QueueTx, pb.Job], None]] = []
        # The other queues this transition touches (flows), sharing one QueueTx per queue.
        self._peers: dict[str, QueueTx] | None = None
        # Subject jobs this transition finished: a subject batch's holder, finishing
        # after the rest of its run in one batched Complete, need not read them again.
        self._subject_jobs_done: set[str] | None = None
        # The queue's job key counter as this transition moved it (None: not read yet),
        # written once on flush rather than once a job.
        self._key_counter: int | None = None
        self._key_counter_moved = False

    # -- lifecycle -------------------------------------------------------------------
    def __enter__(self) -> QueueTx:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.flush()

    def ensure_exists(self) -> None:
        """Queues are created on first use: the first write to a queue stores its config."""
        if not self._exists:
            self.save_config()
            self.tx.put(keys.queue_registry(self.ns, self.name), b"")
            registry.register_namespace(self.tx, self.ns)
            registry.registry_changed(self.tx)  # a new queue: new shards to own
            self._exists = True

    @property
    def exists(self) -> bool:
        return self._exists

    def save_config(self) -> None:
        self.memo.clear()
        self.tx.put(self.k.config(), self.cfg.SerializeToString())
        if self._stored_cfg is not None:
            before = pb.QueueConfig.FromString(self._stored_cfg)
            if before.retention != self.cfg.retention or before.shards != self.cfg.shards:
                for shard in range(max(self.cfg.shards, 1)):  # new ages or shards: look now
                    self.note_due(shard, self.now)
            if before.shards != self.cfg.shards:
                registry.registry_changed(self.tx)

    def note_due(self, shard: int, at_ns: int) -> None:
        """The shard may have sweep work from `at_ns` on (a lease deadline, a delayed job's
        due time, a retention age, an idempotency expiry): on flush, the shard's place in
        the store-wide due index moves that early if it is later."""
        due = self._due
        if at_ns < due.get(shard, at_ns + 1):
            due[shard] = at_ns

    def flush(self) -> None:
        self._flush_own()
        if self._peers:
            for peer in self._peers.values():
                peer._flush_own()

    def _flush_own(self) -> None:
        if self._due:
            self._place_due()
        if self._key_counter_moved:
            self.tx.put(self.k.key_counter(), keys.U64.pack(self._key_counter))  # type: ignore[arg-type]
            self._key_counter_moved = False
        if not self._dirty:
            return
        for shard in self._dirty:
            self.tx.put(self.k.shard_meta(shard), self._metas[shard].SerializeToString())
        self._dirty.clear()
        if self._inserted_ready:  # one wake-up per new job, named so a hand-off can take it back
            self.tx.declare(Ready(self.ns, self.name, len(self._inserted_ready), tuple(self._inserted_ready)))
            self._inserted_ready = []
        self.tx.declare(Changed(self.ns, self.name))  # its events grew: Watch streams look

    def forget_due(self) -> None:
        """Drop the due times noted so far (the queue is going away)."""
        self._due = {}

    def _place_due(self) -> None:
        """Move each noted shard's due-index entry earlier (one read a shard; a steady
        lease stream finds the entry already at its oldest lease and writes nothing)."""
        tx, k = self.tx, self.k
        for shard, at_ns in self._due.items():
            nd_key = k.next_due(shard)
            raw = tx.get(nd_key)
            if raw is not None:
                current = keys.U64.unpack(raw)[0]
                if current <= at_ns:
                    continue
                tx.delete(keys.due_entry(current, self.ns, self.name, shard))
            tx.put(keys.due_entry(at_ns, self.ns, self.name, shard), b"")
            tx.put(nd_key, keys.U64.pack(max(at_ns, 0)))
        self._due = {}

    def peer(self, queue: str, *, create: bool = True) -> QueueTx:
        """The QueueTx of another queue in this same transition. One per queue, shared by
        every QueueTx reached this way, so a queue's cached counts exist once; flushing
        any of them flushes all."""
        if queue == self.name:
            return self
        if self._peers is None:
            self._peers = {self.name: self}
        p = self._peers.get(queue)
        if p is None:
            p = type(self)(self.tx, self.ns, queue, create=create)
            p._peers = self._peers
            self._peers[queue] = p
        return p

    def wake_after_commit(self, n: int = 1) -> None:
        """Wake up to `n` long-polls of this queue (`effects.ALL`: every one) once the
        transaction commits: jobs can be leased here now, or once due."""
        self.tx.declare(Ready(self.ns, self.name, n))

    # -- shard metas -----------------------------------------------------------------
    def meta(self, shard: int) -> pb.ShardMeta:
        m = self._metas.get(shard)
        if m is None:
            raw = self.tx.get(self.k.shard_meta(shard))
            m = pb.ShardMeta.FromString(raw) if raw else pb.ShardMeta()
            self._metas[shard] = m
        return m

    def meta_for_update(self, shard: int) -> pb.ShardMeta:
        """A shard's meta, to be written on flush (its totals: metrics.py)."""
        self._dirty.add(shard)
        return self.meta(shard)

    def next_seq(self, shard: int) -> int:
        m = self.meta(shard)
        m.next_seq += 1
        self._dirty.add(shard)
        return m.next_seq

    def next_job_key(self) -> str:
        """The queue's next counter value in decimal: BullMQ's auto-generated job ids.
        Counted here and written once on flush, not once a job."""
        n = self._stored_key_counter() + 1
        self._key_counter = n
        self._key_counter_moved = True
        return str(n)

    def key_counter_mark(self) -> tuple[int | None, bool]:
        """Where the job key counter stands, for `key_counter_reset` after a rollback."""
        return self._key_counter, self._key_counter_moved

    def key_counter_reset(self, mark: tuple[int | None, bool]) -> None:
        """The counter as it stood at `mark`: a job rolled back to its savepoint gives
        its value back, as a BullMQ add refused for its parent never takes one."""
        self._key_counter, self._key_counter_moved = mark

    def _stored_key_counter(self) -> int:
        n = self._key_counter
        if n is None:
            raw = self.tx.get(self.k.key_counter())
            n = self._key_counter = keys.U64.unpack(raw)[0] if raw else 0
        return n

    def prefetch_job_keys_from_counter(self, count: int) -> None:
        """Read in one go whether the next `count` counter values are taken as job keys
        (only a client that set a decimal key by hand can hold one): a bulk add then
        makes one read for its batch instead of one a job."""
        n = self._stored_key_counter()
        self.tx.prefetch([self.k.job_key(str(n + i)) for i in range(1, count + 1)])

    def _add_payload_bytes(self, shard: int, delta: int) -> None:
        """Keep the shard's stored payload bytes (the payload_bytes quota); never below 0,
        since jobs stored before the count was kept were never added."""
        if delta:
            m = self.meta_for_update(shard)
            m.payload_bytes = max(m.payload_bytes + delta, 0)

    def _count(self, shard: int, state: int, delta: int) -> None:
        m = self.meta(shard)
        m.counts[state] = m.counts[state] + delta
        self._dirty.add(shard)

    def counts(self) -> dict[int, int]:
        total: dict[int, int] = {}
        for shard in range(max(self.cfg.shards, 1)):
            for state, n in self.meta(shard).counts.items():
                total[state] = total.get(state, 0) + n
        return total

    def active_count(self) -> int:
        return sum(self.meta(s).counts[S.ACTIVE] for s in range(max(self.cfg.shards, 1)))

    # -- outbox ----------------------------------------------------------------------
    def emit(self, event: str, job: pb.Job | None = None, shard: int = 0, **fields) -> None:
        """Write the event of a change at its place in the queue's event log, in the
        transaction that makes the change (the outbox row of spec §6.6, decision 0020)."""
        if job is not None:
            shard = job.shard
        m = self.meta(shard)
        m.outbox_seq += 1
        self._dirty.add(shard)
        ev = self._event(event, job, shard, m.outbox_seq, fields)
        self.tx.put(self.k.event_log(shard, m.outbox_seq), ev.SerializeToString())

    def emit_added(self, job: pb.Job, state_event: str) -> None:
        """A new job's two events, `added` and then its state's (BullMQ's pair), made
        from one message: a bulk add writes two events a job."""
        shard = job.shard
        m = self.meta(shard)
        self._dirty.add(shard)
        m.outbox_seq += 1
        ev = self._event("added", job, shard, m.outbox_seq, {})
        self.tx.put(self.k.event_log(shard, m.outbox_seq), ev.SerializeToString())
        m.outbox_seq += 1
        ev.event, ev.seq = state_event, m.outbox_seq
        if state_event == "delayed" and job.due_ns:
            ev.detail = str(job.due_ns // 1_000_000)
        self.tx.put(self.k.event_log(shard, m.outbox_seq), ev.SerializeToString())

    def _event(self, event: str, job: pb.Job | None, shard: int, seq: int, fields: dict) -> JobEvent:
        if job is None:
            return JobEvent(event=event, queue=self.name, shard=shard, seq=seq, time_ns=self.now, **fields)
        # One constructor call: on the hot path, cheaper than setting field by field.
        task = job.task  # each access to a sub-message builds a wrapper: take it once
        ev = JobEvent(event=event, queue=self.name, shard=shard, seq=seq, time_ns=self.now,
                      job_id=job.id, state=job.state, name=task.name, attempt=job.attempt,
                      epoch=job.epoch, **fields)  # fmt: skip
        job_key = job.opts.job_key
        if job_key:
            ev.job_key = job_key
        if event == "delayed" and job.due_ns and not ev.detail:
            ev.detail = str(job.due_ns // 1_000_000)  # BullMQ's `delay` field: the due time, ms
        headers = task.headers
        if headers:
            for h in EVENT_HEADERS:
                v = headers.get(h)
                if v:
                    ev.headers[h] = v
        return ev

    # -- jobs ------------------------------------------------------------------------
    def get_job(self, job_id: str) -> pb.Job | None:
        raw = self.tx.get(self.k.job(job_id))
        return pb.Job.FromString(raw) if raw is not None else None

    def require_job(self, job_id: str) -> pb.Job:
        job = self.get_job(job_id)
        if job is None:
            raise NotFound(f"job {job_id!r} not found in queue {self.name!r}")
        return job

    def put_job(self, job: pb.Job) -> None:
        self.tx.put(self.k.job(job.id), job.SerializeToString())

    def replace_payload(self, job: pb.Job, payload: pb.Payload) -> None:
        """Give `job` a new payload (BullMQ's updateData, a worker's data report): held
        to the queue's payload limit; the old payload's blob, if any, is collected."""
        limit = self.cfg.payload_limit or DEFAULT_PAYLOAD_LIMIT
        size = payload_size(payload)
        if size > limit:
            raise PayloadTooLarge(size, limit)
        old = job.task.payload.blob_ref
        if old and old != payload.blob_ref:
            self.tx.put(keys.blob_gc(self.ns, old), b"")
        self._add_payload_bytes(job.shard, size - payload_size(job.task.payload))
        job.task.payload.CopyFrom(payload)

    def _index_key(self, job: pb.Job) -> bytes | None:
        st = job.state
        if st == S.WAITING or st == S.PRIORITIZED:
            if job.subject_blocked:
                return self.k.subject_backlog_entry(job.opts.subject, job.seq)
            return self.k.ready(job.shard, job.opts.priority, job.seq, job.opts.lifo)
        if st == S.ACTIVE:
            return self.k.active(job.shard, job.deadline_ns, job.id)
        if st == S.DELAYED:
            return self.k.delayed(job.shard, job.due_ns, job.id)
        if st in S.STATE_INDEXED:
            return self.k.state_entry(st, job.shard, job.state_ns, job.id)
        return None

    def _index_add(self, job: pb.Job) -> None:
        key = self._index_key(job)
        if key is not None:
            st = job.state
            value = job.id.encode() if (st == S.WAITING or st == S.PRIORITIZED) else b""
            self.tx.put(key, value)
            if job.subject_blocked and value:  # into its subject's backlog
                self.meta_for_update(job.shard).subject_waiting += 1
            if st == S.ACTIVE:
                self.note_due(job.shard, job.deadline_ns)
            elif st == S.DELAYED:
                self.note_due(job.shard, job.due_ns)
                if job.opts.subject and not job.epoch:  # a replacement may drop it (insert.py)
                    self.tx.put(self.k.subject_delayed_entry(job.opts.subject, job.task.name, job.id), b"")
            elif st == S.COMPLETED or st == S.FAILED:
                age = self.queue_retention(st)[1]
                if age is not None:  # the sweeper removes it once that age has passed
                    self.note_due(job.shard, job.state_ns + age)

    def idempotency_record(self, key: str) -> bytes | None:
        """The stored IdempotencyRecord of `key`, if any: under the key (format 3), else,
        while the queue still has any, among format 2's records (by the key's SHA-256;
        whether it has any is read once a transition, from their expiry index)."""
        raw = self.tx.get(self.k.idempotency(key))
        if raw is not None:
            return raw
        older = self.memo.get("idempotency_format_2")
        if older is None:
            prefix = self.k.idempotency_expiry_all_format_2()
            older = self.memo["idempotency_format_2"] = bool(
                self.tx.scan(prefix, keys.prefix_end(prefix), limit=1)
            )
        return self.tx.get(self.k.idempotency_format_2(key)) if older else None

    def queue_retention(self, state: int) -> tuple[int | None, int | None]:
        """The queue's own (count, age_ns) to keep of a finished state (None = keep),
        read once per transition: a completion batch asks for it once a job."""
        memo_key = ("retention", state)
        policy = self.memo.get(memo_key)
        if policy is None:
            policy = self.memo[memo_key] = retention_of(self.cfg.retention, state)
        return policy

    def _index_remove(self, job: pb.Job) -> None:
        key = self._index_key(job)
        if key is not None:
            self.tx.delete(key)
            if job.subject_blocked and (job.state == S.WAITING or job.state == S.PRIORITIZED):
                self.meta_for_update(job.shard).subject_waiting -= 1
            elif job.state == S.DELAYED and job.opts.subject and not job.epoch:
                self.tx.delete(self.k.subject_delayed_entry(job.opts.subject, job.task.name, job.id))

    def insert(self, job: pb.Job, event: str | None = None) -> None:
        """Store a new job in its state (WAITING/PRIORITIZED/DELAYED/...)."""
        self.ensure_exists()
        job.state_ns = self.now
        if job.opts.subject and job.state == S.DELAYED:
            # A delayed job never holds up the ones behind it (spec 003): it claims its
            # subject once due (promote: subject_reclaim_if_stepped_aside).
            job.subject_blocked = True
        elif job.opts.subject and job.state != S.WAITING_CHILDREN:
            self.subject_claim(job)
        if job.state in S.READY:
            job.seq = self.next_seq(job.shard)
        self._index_add(job)
        self._count(job.shard, job.state, 1)
        meta = self.meta_for_update(job.shard)
        meta.enqueued_total += 1
        size = payload_size(job.task.payload)
        if size:
            meta.payload_bytes += size
        self.put_job(job)
        if event:
            self.emit(event, job)
        if job.state in WAKES_A_POLL:  # leasable now or once due: a parked poll looks (flush)
            self._inserted_ready.append(job.id)

    def move(
        self,
        job: pb.Job,
        to: int,
        event: str | None,
        *,
        keep_place: bool = False,
        unblock_subject: bool = False,
        finished_ns: int | None = None,
        **event_fields,
    ) -> None:
        """Move a stored job to `to`: index, counts, record and outbox in one go. A job
        made ready goes to the back of its band, or with `keep_place` (a leased job handed
        back unprocessed) where it was when it was leased. `unblock_subject`: the job
        leaves its subject's backlog (it is the subject's job now). `finished_ns`: the
        finished time a job moved to a finished state records (the worker's clock, for
        BullMQ), instead of the store's."""
        frm = job.state
        if to not in S.ALLOWED.get(frm, ()):
            raise InvalidState(job.id, S.name(frm), f"move to {S.name(to)}")
        self._index_remove(job)
        shard = job.shard
        counts = self.meta(shard).counts  # the shard's counts: one lookup for both moves
        self._dirty.add(shard)
        counts[frm] = counts[frm] - 1
        if unblock_subject:
            job.subject_blocked = False
        job.state = to
        job.state_ns = self.now
        if to in S.READY and not (keep_place and job.seq):
            job.seq = self.next_seq(job.shard)
        if to == S.ACTIVE:
            self.meta_for_update(job.shard).leased_total += 1
        else:
            job.worker = ""
            job.deadline_ns = 0
        if to in S.FINISHED:
            job.finished_ns = self.now if finished_ns is None else finished_ns
        self._index_add(job)
        counts[to] = counts[to] + 1
        self.put_job(job)
        if event:
            self.emit(event, job, prev_state=frm, **event_fields)
        if to in WAKES_A_POLL or (frm == S.ACTIVE and self.cfg.concurrency):
            self.wake_after_commit()  # a job to lease, or a slot of the queue's concurrency
        if to in S.FINISHED and frm not in S.FINISHED:
            self._finished(job)

    def set_deadline(self, job: pb.Job, deadline_ns: int) -> None:
        """Move an active job's entry in the active index (extend)."""
        self.tx.delete(self.k.active(job.shard, job.deadline_ns, job.id))
        job.deadline_ns = deadline_ns
        self.tx.put(self.k.active(job.shard, deadline_ns, job.id), b"")
        self.note_due(job.shard, deadline_ns)

    def remove(self, job: pb.Job, event: str | None = "removed") -> None:
        """Delete a job and everything that points at it."""
        self._index_remove(job)
        self._count(job.shard, job.state, -1)
        self._add_payload_bytes(job.shard, -payload_size(job.task.payload))
        self.tx.delete(self.k.job(job.id))
        for key, _ in self.tx.scan(self.k.logs(job.id), keys.prefix_end(self.k.logs(job.id))):
            self.tx.delete(key)
        for ref in (job.task.payload.blob_ref, job.result.blob_ref):
            if ref:
                self.tx.put(keys.blob_gc(self.ns, ref), b"")
        if job.opts.job_key:
            kk = self.k.job_key(job.opts.job_key)
            if self.tx.get(kk) == job.id.encode():
                self.tx.delete(kk)
        if job.children:  # a parent's dependency records go with it
            deps = self.k.dependencies(job.id)
            for key, _ in self.tx.scan(deps, keys.prefix_end(deps)):
                self.tx.delete(key)
        if event:
            self.emit(event, job)
        if job.state not in S.FINISHED:
            self._finished(job)
        elif job.parents:  # a failed dependency under the keep-waiting policy is forgotten
            self.follow_finished_job_removed(job)

    # -- finishing ---------------------------------------------------------------------
    def _finished(self, job: pb.Job) -> None:
        """A job left the live states (finished or removed): free its subject, set off
        what that means for other jobs (`follow_job_left_live`), and run the hooks."""
        opts = job.opts
        subject = opts.subject
        if subject:
            done = self._subject_jobs_done
            if done is None:
                done = self._subject_jobs_done = set()
            done.add(job.id)
            if not job.subject_blocked:
                self._subject_release(job, subject)
        if opts.dedup.id or job.parents:
            self.follow_job_left_live(job)
        for hook in self.on_finished:
            hook(self, job)

    def follow_job_left_live(self, job: pb.Job) -> None:
        """`job` (with a dedup id or flow parents) left the live states: free its dedup id
        or enqueue the duplicate kept while it ran, settle its parents. The QueueTx of a
        transition (linked.LinkedQueueTx) does it; a bare QueueTx refuses rather than
        leave those jobs waiting forever."""
        raise NotImplementedError("a transition that finishes or removes jobs opens a LinkedQueueTx")

    def follow_finished_job_removed(self, job: pb.Job) -> None:
        """A finished `job` with flow parents was removed: a parent still counting it as
        pending forgets it (linked.LinkedQueueTx)."""
        raise NotImplementedError("a transition that finishes or removes jobs opens a LinkedQueueTx")

    # -- subjects (spec 003: per-subject serial execution) -------------------------------
    def subject_claim(self, job: pb.Job) -> bool:
        """Make `job` its subject's job, or mark it to wait behind the subject's in-flight
        job (before it is stored or moved: the mark decides its index). True if it waits."""
        cur_key = self.k.subject_current(job.opts.subject)
        current = self.tx.get(cur_key)
        if current is None or current == job.id.encode():
            self.tx.put(cur_key, job.id.encode())
            job.subject_blocked = False
            job.holds_subject = True
        else:
            job.subject_blocked = True
            job.holds_subject = False
        return job.subject_blocked

    def subject_step_aside(self, job: pb.Job) -> None:
        """`job` (its subject's, about to wait for a retry) lets the jobs behind it run
        during its backoff: the subject passes on as if it had finished, and the job is
        marked to claim the subject again once due (`move` from DELAYED)."""
        subject = job.opts.subject
        if subject and not job.subject_blocked:
            self._subject_release(job, subject)
            job.subject_blocked = True

    def subject_reclaim_if_stepped_aside(self, job: pb.Job) -> bool:
        """A delayed `job` about to be made ready: if it did not hold its subject while
        delayed (enqueued delayed, or stepped aside for a retry), it takes the subject, or
        waits in the backlog. True if so: the move keeps a seq it had (`keep_place`), so
        a retry goes back to the front of its subject, a new job to the back."""
        if not job.subject_blocked or not job.opts.subject:
            return False
        self.subject_claim(job)
        return True

    def subject_requeue_goes_behind(self, job: pb.Job) -> bool:
        """An active subject job is going back (released, retried, delayed, stalled)
        while it is part of a subject batch: a member of the run that does not hold the
        subject, or its holder with other jobs of the run still running or already gone
        back ahead of it. It must not run beside them, nor before the earlier ones, so it
        goes behind its subject (the subject passes on to the run, or to the backlog's
        head) and claims it again from its place in the backlog (keep its seq). True when
        so: it is marked, the caller moves it with `keep_place`."""
        if not job.opts.subject or job.subject_blocked:
            return False
        cur_key = self.k.subject_current(job.opts.subject)
        if self.tx.get(cur_key) != job.id.encode():
            job.subject_blocked = True  # a member of a run that does not hold it
            return True
        if job.subject_run:
            passed, earlier_waiting = self._subject_pass_down_run(job, cur_key)
            if passed:
                job.subject_blocked = True
                job.holds_subject = False
                return True
            if earlier_waiting:  # they go first: the subject goes to its backlog's head
                self._subject_admit_next(*self.k.subject_current_and_backlog(job.opts.subject))
                job.subject_blocked = True
                job.holds_subject = False
                return True
        return False

    def _subject_release(self, job: pb.Job, subject: str) -> None:
        cur_key, backlog, backlog_end = self.k.subject_current_and_backlog(subject)
        # A job that holds its subject knows it; a run member does not hold it, nor (we
        # cannot tell) does a record from before the flag: the holder key says who does.
        if not job.holds_subject and self.tx.get(cur_key) != job.id.encode():
            return
        job.holds_subject = False
        if job.subject_run and self._subject_pass_down_run(job, cur_key)[0]:
            return
        self._subject_admit_next(cur_key, backlog, backlog_end)

    def _subject_admit_next(self, cur_key: bytes, backlog: bytes, backlog_end: bytes) -> None:
        """The subject is free: the head of its backlog becomes its job, or nobody.
        Every finished job of a subject with a backlog comes through here: it does only
        what the admission needs (decision 0036)."""
        tx = self.tx
        head = tx.scan(backlog, backlog_end, limit=1)
        if not head:
            tx.delete(cur_key)
            return
        entry_key, next_id = head[0]
        nxt = self.require_job(next_id.decode())
        tx.put(cur_key, next_id)
        nxt.holds_subject = True
        now = self.now
        shard = nxt.shard
        m = self.meta_for_update(shard)
        m.subject_admitted_total += 1
        m.subject_wait_ns_total += max(now - nxt.state_ns, 0)
        if nxt.due_ns > now:
            # Out of the backlog (move deletes its entry there) into the delayed index.
            self.move(nxt, S.DELAYED, None, unblock_subject=True)
            self.emit("delayed", nxt)
            return
        # Out of the backlog into the ready index. Its state (waiting or prioritized), so
        # its counts, stay as they are, and it had its `waiting` event when it was added:
        # only its index entry moves.
        tx.delete(entry_key)
        m.subject_waiting -= 1
        m.next_seq += 1
        seq = m.next_seq
        nxt.subject_blocked = False
        nxt.seq = seq
        nxt.state_ns = now
        opts = nxt.opts
        tx.put(self.k.ready(shard, opts.priority, seq, opts.lifo), next_id)
        self.put_job(nxt)
        self._inserted_ready.append(nxt.id)  # one wake-up for all of them, on flush

    def _subject_pass_down_run(self, job: pb.Job, cur_key: bytes) -> tuple[bool, bool]:
        """`job`, the holder of a subject batch's run, finishes or goes back: the subject
        passes to the *last* job of the run still running, which holds it for the run's
        jobs before it (`Job.subject_run`: those, then itself). The run's first job lists
        the jobs after it; a holder the subject passed to lists the ones before it and
        then itself. So a run completed in order passes the subject once, and its last
        job finds the others finished in the same transaction without reading them.
        Returns (passed, earlier_waiting): earlier_waiting when none is running but a job
        of the run before `job` went back to the backlog (it must run first)."""
        run = list(job.subject_run)
        del job.subject_run[:]
        own = run.index(job.id) if job.id in run else -1
        others = run[:own] if own >= 0 else run
        done = self._subject_jobs_done or ()
        earlier_waiting = False
        for i in range(len(others) - 1, -1, -1):
            member_id = others[i]
            if member_id in done:
                continue
            member = self.get_job(member_id)
            if member is None or member.state in S.FINISHED:
                continue
            if member.subject_blocked:  # went back behind the subject
                earlier_waiting = earlier_waiting or (own >= 0 and member.state in S.READY)
                continue
            self.tx.put(cur_key, member_id.encode())
            member.holds_subject = True
            del member.subject_run[:]
            if i:  # it holds the subject for the run's jobs before it
                member.subject_run.extend(others[:i])
                member.subject_run.append(member_id)
            self.put_job(member)
            return True, False
        return False, earlier_waiting
