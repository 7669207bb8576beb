"""Schedules (spec §8.1): BullMQ's job schedulers and Celery beat entries, fired by the
server. A schedule is a rule (cron in a time zone, or `every`; schedule_rules.py) and a
job template (queue, task, options), kept as a ScheduleRecord under `t/<ns>/sched/<id>`
with an entry in the due index `t/<ns>/sdue/<next tick><id>`.

`sweep_schedules` fires what is due: each tick enqueues one job through the enqueue path
in the same transaction that advances the record (next tick, last tick, count), so a
tick is fired and recorded together or not at all. The job's idempotency key is
`loam:schedule:<id>:<tick ns>`, so even a record that was lost and re-created cannot
enqueue a tick twice. Two sweepers, a restarted one or a clock that jumps therefore fire
every tick at most once; a sweeper that was down fires the ticks it missed as the
schedule's misfire policy says (docs/decisions/0008-schedules-in-the-core.md).

Upsert by id: the same rule again changes nothing; a new rule replaces the old one in
one transaction (its count starts again; it never fires an instant already fired).

A schedule with `driver = SCHEDULE_DRIVER_ITERATIONS` (BullMQ's job schedulers) is never
fired here: it has no due entry. The client computes each next time (BullMQ does its cron
and `every` maths in the client, on the client's clock) and `schedule_iterate` stores it
with the iteration's job, enqueued in the same transaction; the job of one iteration,
once a worker takes it, advances the chain by one (`advance` with `if_next_ns`, so two
workers finishing the same iteration advance it once). `last_job_id` is the current
iteration, which drain and clean leave alone and `schedule_remove` takes away while it is
still delayed, as BullMQ does.

A schedule whose options say `mode = MODE_DURABLE` targets a durable function instead of
a queue: `queue` is the Resonate group whose workers run it, `opts.durable_function` the
registered function, the payload its arguments (a JSON array, or an object of keyword
arguments). Each tick asks the durable timers (loam_durable) to create the root
promise `<schedule id>-<tick ms>` and dispatch it to `poll://any@<group>`, exactly as a
Resonate schedule's fire does: the request is a row `dur/st/...` written in the tick's
transaction, and a tick's promise id is its own, so a tick runs the function once
(docs/decisions/0035-loam-schedules-run-durable-functions.md)."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field

from loam_common import ids, keys, registry, validate
from loam_common.blobs import INLINE_LIMIT
from loam_common.errors import AlreadyExists, InvalidArgument, JobsError, NotFound
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S
from loam_common.jobs.insert import job_insert
from loam_common.jobs.linked import LinkedQueueTx
from loam_common.jobs.new_job import Enqueued, NewJob, check_opts
from loam_common.schedule_rules import MIN_EVERY_NS, Rule, parse_cron, parse_tz, rule_of
from loam_common.store.base import Txn

SEC = 1_000_000_000
DEFAULT_GRACE_NS = 60 * SEC  # a tick fired this late is on time, not missed
CATCH_UP_BATCH = 1000  # ticks one schedule fires per transaction (fire-all catch-up)
SWEEP_BATCH = 500
LIST_LIMIT = 1000
PAYLOAD_LIMIT = INLINE_LIMIT  # the template is stored in the record and copied per tick
HEADER_SCHEDULE = "x-loam-schedule"  # on every job a tick enqueues: the schedule id
HEADER_TICK = "x-loam-tick"  # and the tick time (ns), as BullMQ's repeatJobKey / millis
_REFUSED_OPTS = {
    "job_key": "every tick would be the same job; ticks are told apart by schedule id and time",
    "idempotency": "each tick gets its own key from the schedule id and the tick time",
    "parent": "a scheduled job cannot join a flow",
    "not_before": "ticks are enqueued when due; use offset_ns to shift them",
}


#: checks one tick's job (jobs, payload bytes) against the namespace's quotas before it is
#: stored, raising a JobsError to skip the tick (quotas.sweep_schedules_within_quota)
Admit = Callable[[int, int], None]

DURABLE_PROMISE_TIMEOUT_MS = 24 * 3600 * 1000  # as a Resonate schedule's default
DURABLE_FUNCTION_VERSION = 1  # the SDKs' registry version of a function registered plainly


def idempotency_key(schedule_id: str, tick_ns: int) -> str:
    return f"loam:schedule:{schedule_id}:{tick_ns}"


# -- validation ------------------------------------------------------------------------------
def iterated(rec: pb.ScheduleRecord) -> bool:
    return rec.driver == pb.SCHEDULE_DRIVER_ITERATIONS


def check_schedule(spec: pb.ScheduleSpec, field: str = "spec") -> None:
    """Refuse a spec that cannot work, naming the field, before any transaction."""
    validate.text(f"{field}.id", spec.id, 1024, allow_empty=False)
    if spec.driver not in pb.ScheduleDriver.values():
        raise InvalidArgument(f"{field}.driver", f"unknown schedule driver {spec.driver}")
    if spec.cron and spec.every_ns:
        raise InvalidArgument(f"{field}.every_ns", "both cron and every_ns are set; a schedule has one rule")
    if not spec.cron and not spec.every_ns:
        raise InvalidArgument(f"{field}.cron", "set cron or every_ns")
    if spec.driver == pb.SCHEDULE_DRIVER_ITERATIONS:
        _check_iterated(spec, field)
        return
    if spec.cron:
        parse_cron(spec.cron, f"{field}.cron")
        parse_tz(spec.tz, f"{field}.tz")
    else:
        if spec.every_ns < MIN_EVERY_NS:
            raise InvalidArgument(f"{field}.every_ns", f"must be at least {MIN_EVERY_NS} ns (1 ms)")
        if spec.tz:
            raise InvalidArgument(f"{field}.tz", "applies to cron rules only")
    for name in ("start_ns", "end_ns"):
        validate.time_ns(f"{field}.{name}", getattr(spec, name))
    for name in ("every_ns", "offset_ns", "misfire_grace_ns"):
        validate.duration_ns(f"{field}.{name}", getattr(spec, name))
    if spec.end_ns and spec.end_ns <= spec.start_ns:
        raise InvalidArgument(f"{field}.end_ns", "is not after start_ns")
    if spec.immediately and spec.start_ns:
        raise InvalidArgument(
            f"{field}.immediately", "cannot be used with start_ns: the first tick is the start"
        )
    if spec.misfire not in pb.MisfirePolicy.values():
        raise InvalidArgument(f"{field}.misfire", f"unknown misfire policy {spec.misfire}")
    validate.name(f"{field}.queue", spec.queue)
    validate.text(f"{field}.task.name", spec.task.name, 256, allow_empty=False)
    if len(spec.task.payload.data) > PAYLOAD_LIMIT:
        raise InvalidArgument(
            f"{field}.task.payload",
            f"is {len(spec.task.payload.data)} bytes; a schedule's payload is stored with the schedule "
            f"and is limited to {PAYLOAD_LIMIT} bytes (pass a reference to larger data)",
        )
    if spec.task.payload.blob_ref:
        raise InvalidArgument(f"{field}.task.payload.blob_ref", "is set by the server; send the data")
    check_opts(spec.opts, f"{field}.opts")
    if spec.opts.mode == pb.MODE_DURABLE:
        _check_durable(spec, field)
    for name, why in _REFUSED_OPTS.items():
        if (
            spec.opts.HasField(name)
            if name in ("idempotency", "parent", "not_before")
            else getattr(spec.opts, name)
        ):
            raise InvalidArgument(f"{field}.opts.{name}", why)


def _check_durable(spec: pb.ScheduleSpec, field: str) -> None:
    """A schedule that runs a durable function: its ticks are Resonate root promises
    `<id>-<tick ms>`, so the id may not hold the origin separator `:`, and the payload
    must be the function's arguments in JSON."""
    if ":" in spec.id:
        raise InvalidArgument(
            f"{field}.id", "a durable schedule's id may not contain ':' (it starts promise ids)"
        )
    durable_arguments(spec.task.payload, f"{field}.task.payload")


def durable_arguments(payload: pb.Payload, field: str = "task.payload") -> tuple[list, dict]:
    """(args, kwargs) of a durable function from a schedule's payload: empty -> no
    arguments, a JSON array -> positional, a JSON object -> keyword, any other JSON
    value or text -> one positional argument."""
    if not payload.data:
        return [], {}
    if payload.content_type.startswith("text/"):
        return [payload.data.decode("utf-8", "replace")], {}
    try:
        value = json.loads(payload.data)
    except ValueError:
        raise InvalidArgument(
            field, "a durable function's arguments must be JSON (an array or an object)"
        ) from None
    if isinstance(value, list):
        return value, {}
    if isinstance(value, dict):
        return [], value
    return [value], {}


def durable_start_request(rec: pb.ScheduleRecord, tick_ms: int) -> tuple[str, dict]:
    """(promise id, its `promise.create` data) for one tick of a durable schedule, as a
    Resonate schedule's fire builds it (`{{.id}}-{{.timestamp}}`, targeted at any worker
    of the group, the SDK's param encoding `{func, args, kwargs, version}` in base64)."""
    promise_id = f"{rec.id}-{tick_ms}"
    args, kwargs = durable_arguments(rec.task.payload)
    param = {
        "func": rec.opts.durable_function,
        "args": args,
        "kwargs": kwargs,
        "version": DURABLE_FUNCTION_VERSION,
    }
    data = base64.b64encode(json.dumps(param, separators=(",", ":")).encode()).decode()
    tags = {
        "resonate:target": f"poll://any@{rec.queue.lower()}",
        "resonate:scope": "global",
        "resonate:origin": promise_id,
        "resonate:branch": promise_id,
        "resonate:parent": promise_id,
        "resonate:prefix": promise_id,
        "loam:schedule": rec.id,
    }
    return promise_id, {
        "id": promise_id,
        "timeoutAt": tick_ms + DURABLE_PROMISE_TIMEOUT_MS,
        "param": {"data": data},
        "tags": tags,
        "createdAt": tick_ms,
    }


def _fire_durable(tx: Txn, ns: str, rec: pb.ScheduleRecord, tick_ns: int, out: Fired) -> None:
    """One tick of a durable schedule: leave the start of its root promise for the
    durable timers (loam_durable.timers), which create it if it is not there yet and
    dispatch it to the group's workers."""
    tick_ms = tick_ns // 1_000_000
    promise_id, request = durable_start_request(rec, tick_ms)
    tx.put(keys.durable_start(ns, tick_ms, promise_id), json.dumps(request, separators=(",", ":")).encode())
    tx.put(keys.durable_namespaces(ns), b"")  # so the durable timers visit this namespace
    rec.count += 1
    rec.last_tick_ns = tick_ns
    rec.last_job_id = promise_id
    rec.last_error = ""
    out.ticks += 1


def _check_iterated(spec: pb.ScheduleSpec, field: str) -> None:
    """An iteration-driven rule is evaluated by its client (BullMQ accepts custom repeat
    strategies, e.g. RRULE text in `pattern`) on the client's clock, so neither the rule
    nor its dates are checked against this server's parser or clock."""
    validate.text(f"{field}.cron", spec.cron, 1024)
    validate.text(f"{field}.tz", spec.tz, 256)
    for name in ("start_ns", "end_ns"):
        validate.time_ns(f"{field}.{name}", getattr(spec, name))
    for name in ("every_ns", "offset_ns"):
        validate.duration_ns(f"{field}.{name}", getattr(spec, name))
    validate.name(f"{field}.queue", spec.queue)
    validate.text(f"{field}.task.name", spec.task.name, 256, allow_empty=False)
    if len(spec.task.payload.data) > PAYLOAD_LIMIT:
        raise InvalidArgument(f"{field}.task.payload", f"a template is limited to {PAYLOAD_LIMIT} bytes")
    if spec.HasField("opts") and spec.opts.ByteSize():
        raise InvalidArgument(f"{field}.opts", "an iteration's options travel with its job (iteration_opts)")


@dataclass(frozen=True, slots=True)
class Iteration:
    """One call on an iteration-driven schedule (BullMQ's job schedulers): upsert its rule
    or, with `advance`, move its chain on by one; either may enqueue the iteration's job
    in the same transaction. The fields of ScheduleRequest, whose comments say more."""

    spec: pb.ScheduleSpec
    next_ns: int = 0  # the time of the iteration this call enqueues, as the client computed it
    advance: bool = False  # only spec.id is read; the stored rule and template stay
    if_next_ns: int = 0  # advance: only if the record's next_ns is this
    iteration_task: pb.TaskSpec | None = None  # the iteration's job, if any
    iteration_opts: pb.EnqueueOpts | None = None
    replace_job_id: str = ""  # upsert: remove this job first if it has not started
    if_updated_ns: int | None = None  # upsert: only if the record is as the caller read it

    @property
    def opts(self) -> pb.EnqueueOpts:
        return self.iteration_opts if self.iteration_opts is not None else pb.EnqueueOpts()


def check_iteration(req: Iteration) -> None:
    """The iteration fields of a call; the spec is checked by check_schedule unless the
    call only advances the chain."""
    iterating = req.advance or req.spec.driver == pb.SCHEDULE_DRIVER_ITERATIONS
    touched = (
        req.next_ns or req.advance or req.if_next_ns or req.replace_job_id or req.iteration_task is not None
    )
    if touched and not iterating:
        raise InvalidArgument("next_ns", "applies to spec.driver = SCHEDULE_DRIVER_ITERATIONS only")
    if not iterating:
        return
    validate.text("spec.id", req.spec.id, 1024, allow_empty=False)
    validate.time_ns("next_ns", req.next_ns)
    validate.time_ns("if_next_ns", req.if_next_ns)
    validate.time_ns("if_updated_ns", req.if_updated_ns or 0)
    validate.text("replace_job_id", req.replace_job_id, 1024)
    if req.iteration_task is not None:
        validate.text("iteration_task.name", req.iteration_task.name, 256, allow_empty=False)
        if len(req.iteration_task.payload.data) > PAYLOAD_LIMIT:
            limit = f"an iteration is limited to {PAYLOAD_LIMIT} bytes"
            raise InvalidArgument("iteration_task.payload", limit)
        check_opts(req.opts, "iteration_opts")
        if not req.opts.job_key:
            raise InvalidArgument("iteration_opts.job_key", "an iteration is named by its key")
    elif req.iteration_opts is not None:
        raise InvalidArgument("iteration_task", "iteration_opts without a task")


def _normalized(spec: pb.ScheduleSpec) -> pb.ScheduleRecord:
    """The record's fields 1-14 from a spec (same numbers), defaults made explicit so two
    specs meaning the same rule hash the same."""
    rec = pb.ScheduleRecord.FromString(spec.SerializeToString())
    if rec.cron and not rec.tz and not iterated(rec):  # the client's rule: its tz as given
        rec.tz = "UTC"
    if rec.misfire == pb.MISFIRE_POLICY_UNSPECIFIED:
        rec.misfire = pb.MISFIRE_POLICY_FIRE_LATEST
    if not rec.misfire_grace_ns:
        rec.misfire_grace_ns = DEFAULT_GRACE_NS
    for name in ("task", "opts"):
        if rec.HasField(name) and getattr(rec, name).ByteSize() == 0:
            rec.ClearField(name)
    rec.task.payload.size = len(rec.task.payload.data)
    return rec


def _rule_hash(rec: pb.ScheduleRecord) -> bytes:
    return hashlib.sha256(rec.SerializeToString(deterministic=True)).digest()


# -- firing ------------------------------------------------------------------------------------
@dataclass(slots=True)
class Fired:
    """What one transaction fired: for waking the long-polls of the queues it fed."""

    schedules: int = 0  # records looked at (a sweep: due-index rows)
    ticks: int = 0
    ready_queues: set[str] = field(default_factory=set)


def _fire(tx: Txn, ns: str, rec: pb.ScheduleRecord, tick_ns: int, out: Fired,
          admit: Admit | None = None) -> None:  # fmt: skip
    """Enqueue the job of one tick and record it. A tick the enqueue refuses (its key was
    used by an earlier schedule of the same id with another template) or `admit` refuses
    (the namespace is over a quota) is skipped with `last_error` set; the schedule goes on."""
    if rec.opts.mode == pb.MODE_DURABLE:
        _fire_durable(tx, ns, rec, tick_ns, out)
        return
    task = pb.TaskSpec()
    task.CopyFrom(rec.task)
    task.headers[HEADER_SCHEDULE] = rec.id
    task.headers[HEADER_TICK] = str(tick_ns)
    opts = pb.EnqueueOpts()
    opts.CopyFrom(rec.opts)
    opts.idempotency.key = idempotency_key(rec.id, tick_ns)
    sp = tx.savepoint()
    try:
        if admit is not None:
            admit(1, task.payload.size or len(task.payload.data))
        with LinkedQueueTx(tx, ns, rec.queue) as qt:
            res = job_insert(qt, NewJob(ids.new_ulid(), task, opts))
    except JobsError as e:
        tx.rollback_to(sp)
        rec.last_error = f"tick {tick_ns}: {e.message}"
        rec.last_tick_ns = max(rec.last_tick_ns, tick_ns)
        return
    rec.count += 1
    rec.last_tick_ns = tick_ns
    rec.last_job_id = res.job_id
    rec.last_error = ""
    out.ticks += 1
    if res.created and res.state in S.READY:
        out.ready_queues.add(rec.queue)


def _room(rec: pb.ScheduleRecord) -> bool:
    return not rec.limit or rec.count < rec.limit


def _fire_due(tx: Txn, ns: str, rec: pb.ScheduleRecord, rule: Rule, now: int, out: Fired,
              admit: Admit | None = None) -> None:  # fmt: skip
    """Fire the ticks due at `now` per the misfire policy and set `next_ns`."""
    t: int | None = rec.next_ns
    n = 0
    if rec.misfire != pb.MISFIRE_POLICY_FIRE_ALL:
        lo = now - (rec.misfire_grace_ns or DEFAULT_GRACE_NS)
        if t is not None and t < lo:  # ticks were missed (the sweeper was down, the clock jumped)
            on_time = rule.next_after(lo - 1)
            if rec.misfire != pb.MISFIRE_POLICY_SKIP and (on_time is None or on_time > now):
                latest = rule.latest_at_or_before(lo - 1)
                if latest is not None and latest > rec.last_tick_ns and _room(rec):
                    _fire(tx, ns, rec, latest, out, admit)
            t = on_time
    while t is not None and t <= now and _room(rec) and n < CATCH_UP_BATCH:
        if t > rec.last_tick_ns:
            _fire(tx, ns, rec, t, out, admit)
            n += 1
        t = rule.next_after(t)
    rec.next_ns = t if t is not None and _room(rec) else 0


def _save(tx: Txn, ns: str, rec: pb.ScheduleRecord) -> None:
    tx.put(keys.schedule(ns, rec.id), rec.SerializeToString())
    if rec.next_ns and not iterated(rec):  # an iteration-driven schedule is never swept
        tx.put(keys.schedule_due(ns, rec.next_ns, rec.id), b"")


def sweep_schedules(tx: Txn, ns: str, limit: int = SWEEP_BATCH, admit: Admit | None = None) -> Fired:
    """Fire every schedule of `ns` whose next tick is due, up to `limit` schedules; with
    `admit`, each tick's job is first checked against the namespace's quotas."""
    now = tx.now_ns()
    out = Fired()
    prefix = keys.schedule_due_all(ns)
    rows = tx.scan(prefix, prefix + keys.U64.pack(now + 1), limit=limit)
    out.schedules = len(rows)
    for key, _ in rows:
        tx.delete(key)
        sid = keys.schedule_id_from_due(ns, key)
        raw = tx.get(keys.schedule(ns, sid))
        if raw is None:
            continue  # removed; a stale entry
        rec = pb.ScheduleRecord.FromString(raw)
        if rec.next_ns != keys.index_time(key, len(prefix)) or iterated(rec):
            continue  # a stale entry; the record's own entry is elsewhere, or it has none
        _fire_due(tx, ns, rec, rule_of(rec), now, out, admit)
        _save(tx, ns, rec)
    return out


# -- the API -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Upserted:
    schedule: pb.ScheduleRecord
    changed: bool  # False: the same rule was there already
    fired: Fired  # `immediately`: the tick fired in this transaction


def schedule_upsert(tx: Txn, ns: str, spec: pb.ScheduleSpec, admit: Admit | None = None) -> Upserted:
    """Create or replace the schedule `spec.id` (spec checked by `check_schedule`); with
    `admit`, an `immediately` tick's job is first checked against the namespace's quotas."""
    now = tx.now_ns()
    rec = _normalized(spec)
    rec.rule_hash = _rule_hash(rec)
    key = keys.schedule(ns, rec.id)
    raw = tx.get(key)
    old = pb.ScheduleRecord.FromString(raw) if raw is not None else None
    if old is not None and old.rule_hash == rec.rule_hash:
        return Upserted(old, False, Fired())
    if rec.end_ns and rec.end_ns <= now:
        raise InvalidArgument("spec.end_ns", "is not in the future")
    rec.created_ns = old.created_ns if old is not None else now
    rec.updated_ns = now
    if old is not None:
        # A replaced rule keeps what was fired, so it never fires one of those instants again.
        rec.last_tick_ns, rec.last_job_id = old.last_tick_ns, old.last_job_id
        if old.next_ns:
            tx.delete(keys.schedule_due(ns, old.next_ns, old.id))
    rule = rule_of(rec)
    out = Fired()
    if rec.immediately and now > rec.last_tick_ns:
        _fire(tx, ns, rec, now, out, admit)
    nxt = rule.next_after(max(now, rec.last_tick_ns))
    rec.next_ns = nxt if nxt is not None and _room(rec) else 0
    if not rec.next_ns and not out.ticks:
        what = "spec.cron" if rec.cron else "spec.every_ns"
        raise InvalidArgument(what, "never fires: no tick between now, start_ns and end_ns")
    _save(tx, ns, rec)
    registry.register_namespace(tx, ns)  # so the sweeper visits this namespace
    return Upserted(rec, True, out)


def schedule_remove(tx: Txn, ns: str, schedule_id: str) -> bool:
    """Delete a schedule; jobs its ticks enqueued stay, except an iteration-driven
    schedule's next iteration while it is still delayed (BullMQ's removeJobScheduler).
    False if there was none."""
    key = keys.schedule(ns, schedule_id)
    raw = tx.get(key)
    if raw is None:
        return _remove_durable(tx, ns, schedule_id)
    rec = pb.ScheduleRecord.FromString(raw)
    if iterated(rec):
        _remove_if(tx, ns, rec, rec.last_job_id, (S.DELAYED,))
    elif rec.next_ns:
        tx.delete(keys.schedule_due(ns, rec.next_ns, schedule_id))
    tx.delete(key)
    return True


# -- iteration-driven schedules (BullMQ's job schedulers) ------------------------------------
@dataclass(frozen=True, slots=True)
class Iterated:
    schedule: pb.ScheduleRecord
    changed: bool  # False: an advance that lost its guard or found its iteration taken
    job: Enqueued | None  # the iteration's job
    replaced: bool  # replace_job_id was still pending and was removed


_PENDING = (S.WAITING, S.PRIORITIZED, S.DELAYED)


def _remove_if(tx: Txn, ns: str, rec: pb.ScheduleRecord, job_id: str, states: tuple[int, ...]) -> bool:
    if not job_id or tx.get(keys.QueueKeys(ns, rec.queue).config()) is None:
        return False  # no job, or its queue was obliterated
    with LinkedQueueTx(tx, ns, rec.queue, create=False) as qt:
        job = qt.get_job(job_id)
        if job is None or job.state not in states or job.task.headers.get(HEADER_SCHEDULE) != rec.id:
            return False
        qt.remove(job, event="removed")
        return True


def _take_key(tx: Txn, ns: str, rec: pb.ScheduleRecord, job_key: str) -> None:
    """A replaced cron rule whose next iteration falls on one this schedule already
    started (a worker holds it, or it finished) gets the key: BullMQ writes the new
    iteration over the old one's id. The old job keeps running under its own id. (An
    `every` rule's client moves on to the next free slot instead.)"""
    k = keys.QueueKeys(ns, rec.queue)
    held = tx.get(k.job_key(job_key))
    if held is None:
        return
    with LinkedQueueTx(tx, ns, rec.queue, create=False) as qt:
        job = qt.get_job(held.decode())
        if job is not None and job.task.headers.get(HEADER_SCHEDULE) == rec.id and job.state not in _PENDING:
            tx.delete(k.job_key(job_key))


def is_current_iteration(tx: Txn, ns: str, job: pb.Job) -> bool:
    """Whether `job` is the pending iteration of an iteration-driven schedule: drain and
    clean leave it, as BullMQ does, or the chain would stop."""
    sid = job.task.headers.get(HEADER_SCHEDULE)
    if not sid:
        return False
    raw = tx.get(keys.schedule(ns, sid))
    if raw is None:
        return False
    rec = pb.ScheduleRecord.FromString(raw)
    return iterated(rec) and rec.last_job_id == job.id


def schedule_iterate(tx: Txn, ns: str, req: Iteration) -> Iterated:
    """Upsert an iteration-driven schedule, or advance it by one (`req.advance`), and
    enqueue the iteration's job in the same transaction (checked by `check_iteration`
    and, for an upsert, `check_schedule`)."""
    now = tx.now_ns()
    key = keys.schedule(ns, req.spec.id)
    raw = tx.get(key)
    old = pb.ScheduleRecord.FromString(raw) if raw is not None else None
    replaced = False
    if req.advance:
        if old is None or not iterated(old) or (req.if_next_ns and old.next_ns != req.if_next_ns):
            return Iterated(old or pb.ScheduleRecord(id=req.spec.id), False, None, False)
        rec = pb.ScheduleRecord()
        rec.CopyFrom(old)
        rec.count += 1
    else:
        if req.if_updated_ns is not None and (old.updated_ns if old is not None else 0) != req.if_updated_ns:
            return Iterated(old or pb.ScheduleRecord(id=req.spec.id), False, None, False)  # read again
        rec = _normalized(req.spec)
        rec.rule_hash = _rule_hash(rec)
        rec.created_ns = old.created_ns if old is not None else now
        # BullMQ's iteration count starts at 1 and an upsert keeps it.
        rec.count = old.count if old is not None and iterated(old) else 1
        if old is not None:
            rec.last_tick_ns, rec.last_job_id = old.last_tick_ns, old.last_job_id
            if old.next_ns and not iterated(old):
                tx.delete(keys.schedule_due(ns, old.next_ns, old.id))
        replaced = _remove_if(tx, ns, rec, req.replace_job_id, _PENDING)
        if replaced and req.opts.job_key and not rec.every_ns:
            _take_key(tx, ns, rec, req.opts.job_key)
    rec.updated_ns = now
    rec.next_ns = req.next_ns
    job = None
    if req.iteration_task is not None:
        task = pb.TaskSpec()
        task.CopyFrom(req.iteration_task)
        task.headers[HEADER_SCHEDULE] = rec.id
        task.headers[HEADER_TICK] = str(req.next_ns)
        opts = pb.EnqueueOpts()
        opts.CopyFrom(req.opts)
        with LinkedQueueTx(tx, ns, rec.queue) as qt:
            job = job_insert(qt, NewJob(ids.new_ulid(), task, opts))
        if not job.created:
            if req.advance:  # another producer made this iteration already
                return Iterated(old, False, job, False)
            raise AlreadyExists(f"job key {opts.job_key!r} is taken by job {job.job_id}", job.job_id)
        rec.last_job_id = job.job_id
        rec.last_tick_ns = req.next_ns
    _save(tx, ns, rec)
    return Iterated(rec, True, job, replaced)


def schedule_get(tx: Txn, ns: str, schedule_id: str) -> pb.ScheduleRecord:
    raw = tx.get(keys.schedule(ns, schedule_id))
    if raw is not None:
        return pb.ScheduleRecord.FromString(raw)
    if schedule_id.startswith(DURABLE_PREFIX):
        raw = tx.get(keys.durable_schedule(ns, schedule_id[len(DURABLE_PREFIX) :]))
        if raw is not None:
            return _durable_record(json.loads(raw))
    raise NotFound(f"schedule {schedule_id!r} not found")


def schedule_list(tx: Txn, ns: str, after: str = "", limit: int = 100) -> tuple[list[pb.ScheduleRecord], str]:
    """Schedules in id order after `after`; the second value is the id to continue
    after, empty when this was the last page."""
    validate.in_range("page_size", limit, 1, LIST_LIMIT)
    if after.startswith(DURABLE_PREFIX):  # the Loam schedules are behind: the durable ones go on
        return _durable_schedules(tx, ns, after[len(DURABLE_PREFIX) :], limit)
    prefix = keys.schedules_all(ns)
    start = keys.schedule(ns, after) + b"\x00" if after else prefix
    rows = tx.scan(start, keys.prefix_end(prefix), limit=limit + 1)
    recs = [pb.ScheduleRecord.FromString(v) for _, v in rows[:limit]]
    if len(rows) > limit:
        return recs, recs[-1].id
    if len(recs) == limit:  # a full page: the durable schedules start the next one
        return recs, DURABLE_PREFIX if _has_durable(tx, ns) else ""
    more, token = _durable_schedules(tx, ns, "", limit - len(recs))
    return recs + more, token


#: Resonate schedules (durable mode, loam_durable) are listed after the Loam ones, under
#: this prefix (a Resonate schedule id has no `:`); they are fired by the durable timers.
DURABLE_PREFIX = "resonate:"


def _durable_schedules(tx: Txn, ns: str, after: str, limit: int) -> tuple[list[pb.ScheduleRecord], str]:
    """A page of the namespace's Resonate schedules as ScheduleRecords."""
    prefix = keys.durable_schedules(ns)
    start = keys.durable_schedule(ns, after) + b"\x00" if after else prefix
    rows = tx.scan(start, keys.prefix_end(prefix), limit=limit + 1)
    out = [_durable_record(json.loads(v)) for _, v in rows[:limit]]
    return out, (out[-1].id if len(rows) > limit else "")


def _durable_record(s: dict) -> pb.ScheduleRecord:
    """A Resonate schedule (its protocol record) as a ScheduleRecord: `resonate:<id>`, the
    group it targets as the queue, the function it runs in durable mode."""
    func = _durable_func(s.get("promiseParam") or {})
    target = (s.get("promiseTags") or {}).get("resonate:target", "")
    group = target.partition("@")[2].partition("/")[0] if target.startswith("poll://") else ""
    return pb.ScheduleRecord(
        id=DURABLE_PREFIX + s["id"], cron=s["cron"], tz="UTC", task=pb.TaskSpec(name=func), queue=group,
        opts=pb.EnqueueOpts(mode=pb.MODE_DURABLE, durable_function=func),
        next_ns=s["nextRunAt"] * 1_000_000 if s["nextRunAt"] < 2**53 else 0,
        last_tick_ns=s.get("lastRunAt", 0) * 1_000_000, created_ns=s["createdAt"] * 1_000_000,
        driver=pb.SCHEDULE_DRIVER_SERVER,
    )  # fmt: skip


def _remove_durable(tx: Txn, ns: str, schedule_id: str) -> bool:
    """Unschedule `resonate:<id>`: as the protocol's `schedule.delete` does, the record
    and its next fire go; promises it fired stay."""
    if not schedule_id.startswith(DURABLE_PREFIX):
        return False
    durable_id = schedule_id[len(DURABLE_PREFIX) :]
    raw = tx.get(keys.durable_schedule(ns, durable_id))
    if raw is None:
        return False
    s = json.loads(raw)
    tx.delete(keys.durable_schedule(ns, durable_id))
    tx.delete(keys.durable_timer(ns, s["nextRunAt"], keys.DURABLE_TIMER_SCHEDULE, durable_id))
    return True


def _has_durable(tx: Txn, ns: str) -> bool:
    prefix = keys.durable_schedules(ns)
    return bool(tx.scan(prefix, keys.prefix_end(prefix), limit=1))


def _durable_func(param: dict) -> str:
    """The function a Resonate schedule runs: `func` in its param's base64 JSON."""
    try:
        return str(json.loads(base64.b64decode(param.get("data", ""))).get("func", ""))
    except (ValueError, TypeError, AttributeError):
        return ""
