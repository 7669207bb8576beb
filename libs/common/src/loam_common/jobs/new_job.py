"""A job as a producer asks for it, before it exists: `NewJob` (its task, options and
server-assigned id), the checks of its options made before any transaction, and the
answer an enqueue gives (`Enqueued`). Every path that creates jobs (enqueue, flows,
schedules, exchanges, a kept dedup duplicate) speaks these types; insert.py stores them."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from loam_common import tracing, validate
from loam_common.errors import InvalidArgument
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb


# NewJob, Enqueued and effects.Finished are made once a job on the hot path: not frozen,
# since a frozen dataclass's __init__ sets each field through object.__setattr__ (five
# fields: ~0.7 against ~0.2 µs). Nothing changes them after they are built.
@dataclass(slots=True)
class NewJob:
    """A job as the producer asked for it, validated, with its server-assigned id."""

    job_id: str
    task: pb.TaskSpec
    opts: pb.EnqueueOpts
    # Called on the new job record just before it is stored (flows set its state and links).
    init: Callable[[pb.Job], None] | None = None
    # `request_hash` of the job as sent, when taken before its payload moved to the blob
    # store (whose reference differs for every call); None: taken from `task` when needed.
    sent_hash: bytes | None = None

    def request_hash(self, opts: pb.EnqueueOpts) -> bytes:
        return self.sent_hash or request_hash(self.task, opts)


@dataclass(slots=True)
class Enqueued:
    job_id: str
    created: bool
    state: int
    job_key: str = ""  # the job's key, when it has one (BullMQ's id)
    # A replacement (EnqueueOpts.replace): the job dropped, the earlier one or this one.
    dropped: str = ""


@dataclass(frozen=True, slots=True)
class CallKey:
    """A bulk call's idempotency key (EnqueueBulkRequest.idempotency), with the hash of
    the jobs it was sent with (`call_hash`)."""

    key: str
    ttl_ns: int
    request_hash: bytes


_IDEMPOTENCY = pb.EnqueueOpts.DESCRIPTOR.fields_by_name["idempotency"]


def _without_trace(task: pb.TaskSpec) -> pb.TaskSpec:
    """`task` without its trace context, which is not part of a request: a retried call
    may carry another one (or none, and get one generated)."""
    headers = task.headers
    if headers and any(h in headers for h in tracing.TRACE_HEADERS):
        t = pb.TaskSpec()
        t.CopyFrom(task)
        for h in tracing.TRACE_HEADERS:
            if h in t.headers:
                del t.headers[h]
        return t
    return task


def request_hash(task: pb.TaskSpec, opts: pb.EnqueueOpts) -> bytes:
    """The canonical request: what `job_key` and idempotency keys compare. The trace
    context is not part of it (`_without_trace`)."""
    h = hashlib.sha256(_without_trace(task).SerializeToString(deterministic=True))
    fields = opts.ListFields()
    # Options with nothing but an idempotency key (the SDK's default, per job of a bulk
    # call) hash as no options: the copy without the key would serialize to nothing.
    if fields and not (len(fields) == 1 and fields[0][0] is _IDEMPOTENCY):
        o = pb.EnqueueOpts()
        o.CopyFrom(opts)
        o.ClearField("idempotency")
        h.update(o.SerializeToString(deterministic=True))
    return h.digest()


def call_hash(jobs: list[tuple[pb.TaskSpec, pb.EnqueueOpts | None]]) -> bytes:
    """The canonical request of a bulk call, as its key (`CallKey`) compares it: each
    job's task and options as sent, in order, trace context aside. Taken before the
    payloads are checked (which writes their sizes into the tasks)."""
    h = hashlib.sha256()
    for task, opts in jobs:
        t = _without_trace(task).SerializeToString(deterministic=True)
        o = opts.SerializeToString(deterministic=True) if opts is not None else b""
        h.update(len(t).to_bytes(4, "big") + t + len(o).to_bytes(4, "big") + o)
    return h.digest()


def call_key(idempotency: pb.Idempotency, jobs: list[tuple[pb.TaskSpec, pb.EnqueueOpts | None]]) -> CallKey:
    """A bulk call's key, checked (before any transaction), with its jobs' hash."""
    check_idempotency(idempotency, "idempotency")
    return CallKey(idempotency.key, idempotency.ttl_ns, call_hash(jobs))


#: Options checked alone: with no other field set, the checks of the rest (of fields at
#: their defaults) pass, so a job with only these set (the SDK's default, an idempotency
#: key; BullMQ's, a key or a counter and attempts) skips them. A bulk call checks per job.
_CHECKED_ALONE = frozenset(
    {"idempotency", "job_key", "job_key_from_counter", "job_key_keeps_first", "attempts", "retention", "lifo"}
)


def check_opts(opts: pb.EnqueueOpts, field: str = "opts") -> None:
    """Refuse contradictory or out-of-range options before any transaction."""
    present = opts.ListFields()
    if not present:
        return
    names = {fd.name for fd, _ in present}
    if names <= _CHECKED_ALONE:
        if "attempts" in names:
            validate.attempts(f"{field}.attempts", opts.attempts)
        if "job_key" in names:
            validate.text(f"{field}.job_key", opts.job_key, 1024)
        if "idempotency" in names:
            check_idempotency(opts.idempotency, f"{field}.idempotency")
        return
    if opts.priority > validate.PRIORITY_LIMIT:
        raise InvalidArgument(f"{field}.priority", f"must be at most {validate.PRIORITY_LIMIT}")
    validate.attempts(f"{field}.attempts", opts.attempts)
    validate.enum(f"{field}.mode", opts.mode, pb.Mode)
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
        validate.enum(f"{field}.backoff.kind", b.kind, pb.BackoffKind)
        validate.duration_ns(f"{field}.backoff.base_ns", b.base_ns)
        validate.duration_ns(f"{field}.backoff.max_ns", b.max_ns)
        validate.in_range(f"{field}.backoff.jitter", b.jitter, 0.0, 1.0)
    if opts.job_key:
        validate.text(f"{field}.job_key", opts.job_key, 1024)
    if opts.HasField("idempotency"):
        check_idempotency(opts.idempotency, f"{field}.idempotency")
    if opts.HasField("dedup"):
        d = opts.dedup
        validate.text(f"{field}.dedup.id", d.id, 1024, allow_empty=False)
        validate.duration_ns(f"{field}.dedup.ttl_ns", d.ttl_ns)
        validate.enum(f"{field}.dedup.mode", d.mode, pb.DedupMode)
        if d.mode in (pb.DEDUP_MODE_THROTTLE, pb.DEDUP_MODE_DEBOUNCE) and d.ttl_ns <= 0:
            raise InvalidArgument(f"{field}.dedup.ttl_ns", "throttle and debounce need a ttl")
        if d.replace and d.mode != pb.DEDUP_MODE_DEBOUNCE:
            raise InvalidArgument(f"{field}.dedup.replace", "only applies to debounce")
        if d.replace and not opts.HasField("not_before"):
            raise InvalidArgument(f"{field}.dedup.replace", "debounce with replace needs a delay")
    if opts.subject:
        validate.text(f"{field}.subject", opts.subject, 1024)
    validate.enum(f"{field}.replace", opts.replace, pb.SubjectReplace)
    if opts.replace and not opts.subject:
        raise InvalidArgument(f"{field}.replace", "a replacement replaces a job of its subject: set subject")
    if opts.placement:
        validate.text(f"{field}.placement", opts.placement, 256)
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


def check_idempotency(idempotency: pb.Idempotency, field: str) -> None:
    """An idempotency key (a job's or a bulk call's) and its TTL."""
    validate.text(f"{field}.key", idempotency.key, 1024, allow_empty=False)
    validate.duration_ns(f"{field}.ttl_ns", idempotency.ttl_ns)


_PARENT_FLAGS = (
    "fail_parent_on_failure",
    "continue_parent_on_failure",
    "ignore_dependency_on_failure",
    "remove_dependency_on_failure",
)


def due_ns(opts: pb.EnqueueOpts, now: int) -> int:
    """When a job enqueued at `now` with `opts` is due; 0 when it is ready at once."""
    if not opts.HasField("not_before"):
        return 0
    nb = opts.not_before
    return now + nb.delay_ns if nb.WhichOneof("kind") == "delay_ns" else nb.at_ns
