"""The REST facade under `/v1/...` (the console, curl): each route parses its input into
the JobsService request, checks access, calls the Router — the same path as Connect —
and maps the answer onto the pydantic models below, which `/openapi.json` documents.

Errors are `{code, message, detail}` with Connect's code names and Connect's HTTP
statuses (loam_common.connect_errors.HTTP_STATUS); every route documents them.
Payloads: a JSON payload is `data` (any JSON value, content type application/json);
other bytes are `data_base64` with their `content_type`.

Schedules (`/v1/schedules/{id}`: PUT upserts, GET, DELETE; `GET /v1/schedules` lists)
and flows (`POST /v1/flows`, `GET /v1/flows/{id}`, and a parent's children at
`GET /v1/queues/{queue}/jobs/{job}/children`) are the Schedule / Flow calls of
JobsService with the same checks and permissions (jobs:schedule, jobs:enqueue; the
children, a JobAdmin call, jobs:admin).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic_core import to_json

from loam_common import validate
from loam_common.api.methods import operation
from loam_common.auth import Principal
from loam_common.errors import InvalidArgument, NotFound
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S
from loam_gateway.redaction import Redaction, Redactor

INT64 = 2**63 - 1
UINT32 = 2**32 - 1
PRIORITY_MAX = 2**21 - 1

JobListView = Literal["full", "summary"]
StateName = Literal[
    "waiting", "prioritized", "delayed", "active", "waiting-children",
    "completed", "failed", "dead-lettered", "canceled",
]  # fmt: skip


# -- models ------------------------------------------------------------------------------------
class _Model(BaseModel):
    # strict: "3" is not 3 and true is not 1 (the Connect JSON decoder agrees)
    model_config = ConfigDict(extra="forbid", strict=True)


class ErrorBody(BaseModel):
    code: str = Field(description="the Connect error code: invalid_argument, not_found, ...")
    message: str
    detail: dict[str, Any] | None = Field(
        None,
        description="the typed error's fields (loam.jobs.v1.ErrorDetail): reason, field, current_epoch, ...",
    )


# Models of flat messages are made from the message's descriptor, and filled from it
# (`message_view`): one shape, declared once in proto/, with no field-by-field copy.
_SCALAR_TYPES = {
    FieldDescriptor.CPPTYPE_INT32: int,
    FieldDescriptor.CPPTYPE_INT64: int,
    FieldDescriptor.CPPTYPE_UINT32: int,
    FieldDescriptor.CPPTYPE_UINT64: int,
    FieldDescriptor.CPPTYPE_BOOL: bool,
    FieldDescriptor.CPPTYPE_STRING: str,
    FieldDescriptor.CPPTYPE_DOUBLE: float,
    FieldDescriptor.CPPTYPE_FLOAT: float,
}


def message_model(message: type[Message], name: str) -> type[BaseModel]:
    """A model with the fields of a flat protobuf message (scalars only), all required,
    in the message's order."""
    fields: dict[str, Any] = {}
    for f in message.DESCRIPTOR.fields:
        if f.cpp_type not in _SCALAR_TYPES or f.is_repeated:
            raise TypeError(f"{message.DESCRIPTOR.name}.{f.name} is not a scalar field")
        fields[f.name] = (_SCALAR_TYPES[f.cpp_type], ...)
    return create_model(name, **fields)


def message_view[M: BaseModel](model: type[M], msg: Message) -> M:
    """`msg` as `model` (made by message_model from its type)."""
    return model(**{f.name: getattr(msg, f.name) for f in msg.DESCRIPTOR.fields})


Counts = message_model(pb.QueueCounts, "Counts")


class QueueSummary(BaseModel):
    name: str
    counts: Counts


class QueueList(BaseModel):
    queues: list[QueueSummary]


RateLimitModel = message_model(pb.RateLimit, "RateLimitModel")


class QueueConfigModel(BaseModel):
    name: str
    visibility_ns: int
    attempts: int
    max_stalled: int | None = Field(None, description="unset: 1 (BullMQ); -1: unlimited")
    rate_limit: RateLimitModel
    concurrency: int
    dead_letter_queue: str
    dead_letter_on_exhausted: bool
    shards: int
    paused: bool
    created_ns: int
    log_cap: int
    payload_limit: int


Activity = message_model(pb.QueueActivity, "Activity")


class QueueDetail(BaseModel):
    name: str
    config: QueueConfigModel
    counts: Counts
    activity: Activity | None = Field(
        None, description="ready and delayed jobs, the oldest ready job's age, subject waits, lease takeovers"
    )


class PayloadView(BaseModel):
    content_type: str
    size: int
    data: Any = Field(None, description="the payload as JSON, when it is JSON")
    data_base64: str | None = Field(None, description="the payload bytes, when they are not JSON")
    blob_ref: str | None = Field(None, description="set when the payload is kept in the blob store")


class JobErrorView(BaseModel):
    code: str
    message: str
    stacktrace: str
    at_ns: int
    attempt: int


class JobRefView(BaseModel):
    queue: str
    job_id: str


class JobView(BaseModel):
    id: str
    queue: str
    name: str
    state: StateName
    priority: int
    lifo: bool
    job_key: str
    subject: str
    attempt: int = Field(description="attempts spent")
    attempts_max: int
    stalled: int
    epoch: int
    worker: str
    created_ns: int
    processed_ns: int
    finished_ns: int
    due_ns: int
    deadline_ns: int
    state_ns: int
    payload: PayloadView
    result: PayloadView | None
    errors: list[JobErrorView]
    progress: Any = None
    log_count: int
    origin_queue: str
    headers: dict[str, str]
    parents: list[JobRefView] = Field(
        default_factory=list, description="the jobs that wait on this one (flows)"
    )
    flow: str = Field("", description="the flow this job is a node of")
    children: int = Field(0, description="dependencies ever registered (this job is a parent)")
    pending_children: int = Field(0, description="dependencies not finished yet")


class LogLineView(BaseModel):
    at_ns: int
    line: str


class JobDetail(BaseModel):
    job: JobView
    logs: list[LogLineView]
    log_count: int


class JobPage(BaseModel):
    jobs: list[JobView]
    next_page_token: str = Field(description="pass as page_token for the next page; empty at the end")


class JobActionResult(BaseModel):
    job: JobView | None
    removed: bool


class QueueActionResult(BaseModel):
    affected: int = Field(description="jobs moved or removed")
    counts: Counts | None = None


class EnqueueBody(_Model):
    name: str = Field(min_length=1, max_length=256, description="the task name")
    data: Any = Field(None, description="a JSON payload")
    data_base64: str | None = Field(None, description="a binary payload, instead of data")
    content_type: str | None = Field(None, max_length=256)
    headers: dict[str, str] = Field(default_factory=dict)
    priority: int = Field(0, ge=0, le=PRIORITY_MAX, description="0: the FIFO band; 1.. lower first")
    lifo: bool = False
    delay_ns: int = Field(0, ge=0, le=INT64)
    job_key: str | None = Field(None, max_length=1024)
    idempotency_key: str | None = Field(None, max_length=1024)
    attempts: int = Field(0, ge=0, le=validate.MAX_ATTEMPTS, description="0: the queue's default")
    subject: str | None = Field(None, max_length=1024)
    replace: Literal["keep_later"] | None = Field(
        None,
        description="with subject: of this job and the not-started ones of the same subject and "
        "task name, keep the one that runs latest, drop the others",
    )
    placement: str | None = Field(
        None, min_length=1, max_length=256, description="only the worker with this identity leases the job"
    )


class EnqueueResult(BaseModel):
    job: str = Field(description="the job kept")
    created: bool
    state: StateName
    dropped: str = Field("", description="a replacement: the job dropped (the earlier one, or this one)")


class WriteEnqueue(EnqueueBody):
    queue: str = Field(min_length=1, max_length=256)


class WriteCancel(_Model):
    queue: str = Field(min_length=1, max_length=256)
    job: str = Field(min_length=1, max_length=1024)
    reason: str = Field("", max_length=1024)


class WriteResultSet(_Model):
    key: str = Field(min_length=1, max_length=1024)
    data: Any = None
    data_base64: str | None = None
    content_type: str | None = Field(None, max_length=256)
    ttl_ns: int = Field(0, ge=0, le=INT64, description="0: never expires")


class WriteItemBody(_Model):
    """One write: set exactly one of enqueue, cancel (a job that has not started), result_set."""

    enqueue: WriteEnqueue | None = None
    cancel: WriteCancel | None = None
    result_set: WriteResultSet | None = None


class WriteBatchBody(_Model):
    items: list[WriteItemBody] = Field(min_length=1, max_length=1000)


class WriteOutcomeView(BaseModel):
    enqueued: EnqueueResult | None = None
    canceled: str | None = Field(None, description="the job canceled")
    result_stored: str | None = Field(None, description="the result key set")


class WriteBatchResult(BaseModel):
    outcomes: list[WriteOutcomeView] = Field(description="one per item, in order")


class DrainBody(_Model):
    delayed: bool = Field(False, description="also remove delayed jobs")


class CleanBody(_Model):
    state: StateName = "completed"
    grace_ns: int = Field(0, ge=0, le=INT64, description="only jobs older than this")
    limit: int = Field(0, ge=0, le=UINT32, description="at most this many; 0: all")


class RedriveBody(_Model):
    limit: int = Field(0, ge=0, le=UINT32, description="at most this many; 0: all")


class ResultValue(BaseModel):
    key: str
    value: PayloadView


class ResultPut(_Model):
    data: Any = None
    data_base64: str | None = None
    content_type: str | None = Field(None, max_length=256)
    ttl_ns: int = Field(0, ge=0, le=INT64, description="0: never expires")


class IncrBody(_Model):
    member: str = Field(min_length=1, max_length=1024)
    ttl_ns: int = Field(0, ge=0, le=INT64, description="0: keep the key's TTL")


class IncrResult(BaseModel):
    size: int


# -- schedules and flows ----------------------------------------------------------------------
MisfireName = Literal["fire_latest", "skip", "fire_all"]
ScheduleModeName = Literal["queue", "durable"]
FailurePolicyName = Literal["fail_parent", "continue_parent", "ignore_dependency", "remove_dependency"]
DependencyStateName = Literal["pending", "processed", "failed", "ignored"]
MIN_EVERY_NS = 1_000_000  # 1 ms (schedule_rules.MIN_EVERY_NS)
# Bounds that keep every computed tick and due time inside int64 ns (year 2262): a start
# date before 2100, intervals, offsets and delays of at most 100 years.
TIME_MAX_NS = 4_102_444_800 * 10**9  # 2100-01-01T00:00:00Z
DURATION_MAX_NS = 100 * 365 * 86_400 * 10**9
FLOW_NODES_MAX = 10_000  # flows.MAX_NODES

_MISFIRE = {"fire_latest": pb.MISFIRE_POLICY_FIRE_LATEST, "skip": pb.MISFIRE_POLICY_SKIP,
            "fire_all": pb.MISFIRE_POLICY_FIRE_ALL}  # fmt: skip
_MISFIRE_NAME = {v: k for k, v in _MISFIRE.items()}
_POLICY = {
    "fail_parent": pb.FAILURE_POLICY_FAIL_PARENT,
    "continue_parent": pb.FAILURE_POLICY_CONTINUE_PARENT,
    "ignore_dependency": pb.FAILURE_POLICY_IGNORE_DEPENDENCY,
    "remove_dependency": pb.FAILURE_POLICY_REMOVE_DEPENDENCY,
}
_POLICY_NAME = {v: k for k, v in _POLICY.items()}
_DEP_STATE_NAME = {
    pb.DEPENDENCY_STATE_PENDING: "pending",
    pb.DEPENDENCY_STATE_PROCESSED: "processed",
    pb.DEPENDENCY_STATE_FAILED: "failed",
    pb.DEPENDENCY_STATE_IGNORED: "ignored",
}


class ScheduleBody(_Model):
    """A schedule: one rule (`cron`, with `tz`, or `every_ns`) and the job each tick
    enqueues (queue, task name, payload, options). The id is in the path.

    With `mode` `durable` each tick starts a durable function on a Resonate group's
    workers instead (the root promise `<id>-<tick ms>`): `queue` is the group,
    `durable_function` the registered function (default: `name`), `data` its arguments
    (a JSON array, or an object of keyword arguments)."""

    queue: str = Field(min_length=1, max_length=128,
                       description="the queue each tick's job goes to; in durable mode the Resonate group")  # fmt: skip
    name: str = Field(min_length=1, max_length=256, description="the task name")
    mode: ScheduleModeName = Field(
        "queue", description="queue: enqueue a job; durable: start a durable function"
    )
    durable_function: str | None = Field(None, min_length=1, max_length=256,
                                         description="durable mode: the function each tick runs; default: name")  # fmt: skip
    data: Any = Field(None, description="a JSON payload (at most 16 KiB: it is stored with the schedule)")
    data_base64: str | None = Field(None, description="a binary payload, instead of data")
    content_type: str | None = Field(None, max_length=256)
    headers: dict[str, str] = Field(default_factory=dict)
    cron: str | None = Field(None, max_length=256,
                             description="5 fields, 6 with seconds first, or a macro such as @daily")  # fmt: skip
    tz: str | None = Field(None, max_length=256, description="the cron rule's IANA time zone; default UTC")
    every_ns: int | None = Field(None, ge=MIN_EVERY_NS, le=DURATION_MAX_NS,
                                 description="a fixed interval, instead of cron")  # fmt: skip
    limit: int = Field(0, ge=0, le=UINT32, description="fire at most this many ticks; 0: no limit")
    start_ns: int = Field(0, ge=0, le=TIME_MAX_NS, description="no tick before this (ns since the epoch)")
    end_ns: int = Field(0, ge=0, le=INT64, description="no tick after this; 0: none")
    offset_ns: int = Field(0, ge=0, le=DURATION_MAX_NS, description="shift every tick by this much")
    immediately: bool = Field(False, description="also fire one tick now")
    misfire: MisfireName | None = Field(
        None, description="ticks missed while no sweeper ran; default fire_latest"
    )
    misfire_grace_ns: int = Field(0, ge=0, le=INT64, description="a tick this late is still on time; 0: 60 s")
    priority: int = Field(0, ge=0, le=PRIORITY_MAX, description="0: the FIFO band; 1.. lower first")
    lifo: bool = False
    attempts: int = Field(0, ge=0, le=validate.MAX_ATTEMPTS, description="0: the queue's default")
    subject: str | None = Field(None, max_length=1024)


class ScheduleView(BaseModel):
    id: str
    queue: str
    name: str
    mode: ScheduleModeName
    durable_function: str = Field(description="durable mode: the function each tick runs")
    payload: PayloadView
    headers: dict[str, str]
    cron: str
    tz: str
    every_ns: int
    limit: int
    start_ns: int
    end_ns: int
    offset_ns: int
    immediately: bool
    misfire: MisfireName
    misfire_grace_ns: int
    priority: int
    lifo: bool
    attempts: int
    subject: str
    next_ns: int = Field(description="the next tick; 0: none left (limit reached, end passed)")
    last_tick_ns: int = Field(description="the last tick fired")
    last_job_id: str = Field(description="the job the last tick enqueued")
    count: int = Field(description="ticks fired under the current rule")
    created_ns: int
    updated_ns: int = Field(description="when the current rule was set")
    last_error: str = Field(description="why the last tick could not enqueue, if it could not")


class ScheduleResult(BaseModel):
    schedule: ScheduleView
    changed: bool = Field(description="false: the same rule was there already; nothing changed")


class SchedulePage(BaseModel):
    schedules: list[ScheduleView] = Field(description="in id order")
    next_page_token: str = Field(description="pass as page_token for the next page; empty at the end")


class UnscheduleResult(BaseModel):
    removed: bool = Field(description="false: there was no such schedule")


class FlowNodeBody(_Model):
    id: str = Field(min_length=1, max_length=256, description="unique in the flow")
    queue: str = Field(min_length=1, max_length=128)
    name: str = Field(min_length=1, max_length=256, description="the task name")
    data: Any = Field(None, description="a JSON payload")
    data_base64: str | None = Field(None, description="a binary payload, instead of data")
    content_type: str | None = Field(None, max_length=256)
    headers: dict[str, str] = Field(default_factory=dict)
    depends_on: list[Annotated[str, Field(max_length=256)]] = Field(
        default_factory=list, max_length=FLOW_NODES_MAX,
        description="ids of the nodes that must finish first (a BullMQ parent depends on its children)",
    )  # fmt: skip
    on_failure: FailurePolicyName | None = Field(
        None, description="what this node's failure does to the nodes that depend on it; default fail_parent"
    )
    priority: int = Field(0, ge=0, le=PRIORITY_MAX)
    lifo: bool = False
    delay_ns: int = Field(0, ge=0, le=DURATION_MAX_NS)
    job_key: str | None = Field(None, max_length=1024)
    attempts: int = Field(0, ge=0, le=validate.MAX_ATTEMPTS)
    subject: str | None = Field(None, max_length=1024)


class FlowBody(_Model):
    id: str | None = Field(None, max_length=1024, description="makes the submit idempotent; default a new id")
    nodes: list[FlowNodeBody] = Field(min_length=1, max_length=FLOW_NODES_MAX)


class FlowResult(BaseModel):
    flow: str = Field(description="the flow id")
    jobs: dict[str, str] = Field(description="node id -> job id")
    created: bool = Field(description="false: a flow with this id and graph existed; these are its jobs")


class FlowJobView(BaseModel):
    node: str
    queue: str
    job_id: str


class FlowView(BaseModel):
    id: str
    created_ns: int
    jobs: list[FlowJobView] = Field(description="in the submitted node order")


class DependencyView(BaseModel):
    queue: str = Field(description="the child's queue")
    job_id: str
    node: str = Field(description="the child's flow node id, when it is one")
    job_key: str
    state: DependencyStateName
    policy: FailurePolicyName = Field(description="what the child's failure does to this job")
    value: PayloadView | None = Field(None, description="the child's result, once processed")
    error: JobErrorView | None = Field(None, description="the child's failure")
    finished_ns: int


class ChildrenList(BaseModel):
    children: list[DependencyView]


# -- mapping -----------------------------------------------------------------------------------
def _json_or_none(raw: bytes) -> tuple[bool, Any]:
    """(True, the value) for JSON a response can carry; (False, None) otherwise. A
    stored value nested past the limit (stored before the limit, or by a path that does
    not check it) is shown as bytes: a stored payload never breaks a read."""
    if validate.json_depth(raw) > validate.MAX_JSON_DEPTH:
        return False, None
    try:
        return True, json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return False, None


def payload_view(p: pb.Payload, redact: Redactor | None = None) -> PayloadView:
    """`redact` (the namespace's redaction rules, loam_gateway.redaction) hides fields of
    a JSON payload."""
    view = PayloadView(content_type=p.content_type, size=p.size or len(p.data), blob_ref=p.blob_ref or None)
    if p.data:
        is_json, value = (False, None)
        if p.content_type.startswith("application/json") or not p.content_type:
            is_json, value = _json_or_none(p.data)
        if is_json:
            view.data = redact(value) if redact is not None else value
        else:
            view.data_base64 = base64.b64encode(p.data).decode()
    return view


def job_view(j: pb.Job, redact: Redactor | None = None) -> JobView:
    ok, progress = _json_or_none(j.progress) if j.progress else (False, None)
    if ok and redact is not None:
        progress = redact(progress)
    return JobView(
        id=j.id,
        queue=j.queue,
        name=j.task.name,
        state=S.name(j.state) if j.state in S.NAMES else "waiting",
        priority=j.opts.priority,
        lifo=j.opts.lifo,
        job_key=j.opts.job_key,
        subject=j.opts.subject,
        attempt=j.attempt,
        attempts_max=j.attempts_max,
        stalled=j.stalled,
        epoch=j.epoch,
        worker=j.worker,
        created_ns=j.created_ns,
        processed_ns=j.processed_ns,
        finished_ns=j.finished_ns,
        due_ns=j.due_ns,
        deadline_ns=j.deadline_ns,
        state_ns=j.state_ns,
        payload=payload_view(j.task.payload, redact),
        result=payload_view(j.result, redact) if j.HasField("result") else None,
        errors=[_error_view(e) for e in j.errors],
        progress=progress if ok else None,
        log_count=j.log_count,
        origin_queue=j.origin_queue,
        headers=dict(j.task.headers),
        parents=[JobRefView(queue=x.queue, job_id=x.job_id) for x in j.parents],
        flow=j.flow,
        children=j.children,
        pending_children=j.pending_children,
    )


_STATE_NAMES = {st: S.name(st) for st in S.NAMES}


def _payload_row(p: pb.Payload, redact: Redactor | None, summary: bool) -> dict[str, Any]:
    row: dict[str, Any] = {"content_type": p.content_type, "size": p.size or len(p.data), "data": None,
                           "data_base64": None, "blob_ref": p.blob_ref or None}  # fmt: skip
    if p.data and not summary:  # as payload_view shows it
        is_json, value = False, None
        if p.content_type.startswith("application/json") or not p.content_type:
            is_json, value = _json_or_none(p.data)
        if is_json:
            row["data"] = redact(value) if redact is not None else value
        else:
            row["data_base64"] = base64.b64encode(p.data).decode()
    return row


def job_row(j: pb.Job, redact: Redactor | None = None, summary: bool = False) -> dict[str, Any]:
    """`job_view(j, redact).model_dump()`, built straight as a dict: a page of 50 rows
    is then serialized once, without a model per row (the list's cost per row). With
    `summary`, what a list does not show is left out: payload and result data (their
    content type and size stay), the progress, the headers, and every error but the
    last, without its stack trace."""
    errors = j.errors[-1:] if summary else j.errors
    progress = None
    if j.progress and not summary:
        ok, value = _json_or_none(j.progress)
        if ok:
            progress = redact(value) if redact is not None else value
    opts = j.opts
    return {
        "id": j.id, "queue": j.queue, "name": j.task.name, "state": _STATE_NAMES.get(j.state, "waiting"),
        "priority": opts.priority, "lifo": opts.lifo, "job_key": opts.job_key, "subject": opts.subject,
        "attempt": j.attempt, "attempts_max": j.attempts_max, "stalled": j.stalled, "epoch": j.epoch,
        "worker": j.worker, "created_ns": j.created_ns, "processed_ns": j.processed_ns,
        "finished_ns": j.finished_ns, "due_ns": j.due_ns, "deadline_ns": j.deadline_ns, "state_ns": j.state_ns,
        "payload": _payload_row(j.task.payload, redact, summary),
        "result": _payload_row(j.result, redact, summary) if j.HasField("result") else None,
        "errors": [{"code": e.code, "message": e.message, "stacktrace": "" if summary else e.stacktrace,
                    "at_ns": e.at_ns, "attempt": e.attempt} for e in errors],
        "progress": progress, "log_count": j.log_count, "origin_queue": j.origin_queue,
        "headers": {} if summary else dict(j.task.headers),
        "parents": [{"queue": x.queue, "job_id": x.job_id} for x in j.parents],
        "flow": j.flow, "children": j.children, "pending_children": j.pending_children,
    }  # fmt: skip


def json_response(body: Any) -> Response:
    """A body already in its documented shape, serialized once (pydantic-core's encoder,
    no model validation on the way out)."""
    return Response(to_json(body), media_type="application/json")


def counts_view(c: pb.QueueCounts) -> BaseModel:
    return message_view(Counts, c)


def config_view(c: pb.QueueConfig) -> QueueConfigModel:
    return QueueConfigModel(
        name=c.name,
        visibility_ns=c.visibility_ns,
        attempts=c.attempts,
        max_stalled=c.max_stalled if c.HasField("max_stalled") else None,
        rate_limit=message_view(RateLimitModel, c.rate_limit),
        concurrency=c.concurrency,
        dead_letter_queue=c.dead_letter_queue,
        dead_letter_on_exhausted=c.dead_letter_on_exhausted,
        shards=c.shards,
        paused=c.paused,
        created_ns=c.created_ns,
        log_cap=c.log_cap,
        payload_limit=c.payload_limit,
    )


def payload_in(data: Any, data_base64: str | None, content_type: str | None) -> pb.Payload:
    if data_base64 is not None:
        if data is not None:
            raise InvalidArgument("data_base64", "send data or data_base64, not both")
        try:
            raw = base64.b64decode(data_base64, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgument("data_base64", "is not valid base64") from None
        return pb.Payload(data=raw, content_type=content_type or "application/octet-stream")
    if data is None:
        return pb.Payload(content_type=content_type or "")
    try:
        raw = json.dumps(data, ensure_ascii=False, allow_nan=False).encode()
    except RecursionError:
        raise InvalidArgument("data", f"JSON nests deeper than {validate.MAX_JSON_DEPTH} levels") from None
    except (ValueError, UnicodeEncodeError):
        raise InvalidArgument("data", "is not JSON that can be encoded as UTF-8") from None
    payload = pb.Payload(data=raw, content_type=content_type or "application/json")
    validate.json_payload("data", payload)
    return payload


def _proto(build):
    """Build a protobuf request; protobuf's own refusals (a lone surrogate in a string,
    an out-of-range number) are the caller's bad input, not a server error."""
    try:
        return build()
    except (ValueError, TypeError, UnicodeError) as e:
        raise InvalidArgument("body", f"cannot be encoded: {e}") from None


def enqueue_request(queue: str, body: EnqueueBody) -> J.EnqueueRequest:
    opts = pb.EnqueueOpts(priority=body.priority, lifo=body.lifo, attempts=body.attempts)
    if body.delay_ns:
        opts.not_before.delay_ns = body.delay_ns
    if body.job_key:
        opts.job_key = body.job_key
    if body.idempotency_key:
        opts.idempotency.key = body.idempotency_key
    if body.subject:
        opts.subject = body.subject
    if body.replace == "keep_later":
        opts.replace = pb.SUBJECT_REPLACE_KEEP_LATER
    if body.placement:
        opts.placement = body.placement
    task = pb.TaskSpec(name=body.name, payload=payload_in(body.data, body.data_base64, body.content_type))
    task.headers.update(body.headers)
    return J.EnqueueRequest(queue=queue, task=task, opts=opts)


def enqueue_result(e: J.Enqueued) -> EnqueueResult:
    return EnqueueResult(job=e.job, created=e.created, state=S.name(e.state), dropped=e.dropped)


def redactor(request: Request, p: Principal) -> Redactor | None:
    """The caller's namespace's redaction rules (None: nothing is hidden)."""
    rules: Redaction | None = getattr(request.app.state, "redaction", None)
    return rules.for_namespace(p.namespace) if rules is not None else None


def _state(name: str) -> int:
    return S.BY_NAME[name]


def _task(body: Any) -> pb.TaskSpec:
    """The TaskSpec of a body with name, data / data_base64, content_type and headers."""
    task = pb.TaskSpec(name=body.name, payload=payload_in(body.data, body.data_base64, body.content_type))
    task.headers.update(body.headers)
    return task


def _error_view(e: pb.JobError) -> JobErrorView:
    return JobErrorView(
        code=e.code, message=e.message, stacktrace=e.stacktrace, at_ns=e.at_ns, attempt=e.attempt
    )


def schedule_spec(schedule_id: str, body: ScheduleBody) -> pb.ScheduleSpec:
    spec = pb.ScheduleSpec(
        id=schedule_id, queue=body.queue, task=_task(body), cron=body.cron or "", tz=body.tz or "",
        every_ns=body.every_ns or 0, limit=body.limit, start_ns=body.start_ns, end_ns=body.end_ns,
        offset_ns=body.offset_ns, immediately=body.immediately, misfire_grace_ns=body.misfire_grace_ns,
        opts=pb.EnqueueOpts(priority=body.priority, lifo=body.lifo, attempts=body.attempts, subject=body.subject or ""),
    )  # fmt: skip
    if body.misfire:
        spec.misfire = _MISFIRE[body.misfire]
    if body.mode == "durable":
        spec.opts.mode = pb.MODE_DURABLE
        spec.opts.durable_function = body.durable_function or body.name
    elif body.durable_function is not None:
        raise InvalidArgument("durable_function", "is for mode durable only")
    return spec


def schedule_view(r: pb.ScheduleRecord, redact: Redactor | None = None) -> ScheduleView:
    return ScheduleView(
        id=r.id, queue=r.queue, name=r.task.name, payload=payload_view(r.task.payload, redact), headers=dict(r.task.headers),
        mode="durable" if r.opts.mode == pb.MODE_DURABLE else "queue", durable_function=r.opts.durable_function,
        cron=r.cron, tz=r.tz, every_ns=r.every_ns, limit=r.limit, start_ns=r.start_ns, end_ns=r.end_ns,
        offset_ns=r.offset_ns, immediately=r.immediately,
        misfire=_MISFIRE_NAME.get(r.misfire, "fire_latest"), misfire_grace_ns=r.misfire_grace_ns,
        priority=r.opts.priority, lifo=r.opts.lifo, attempts=r.opts.attempts, subject=r.opts.subject,
        next_ns=r.next_ns, last_tick_ns=r.last_tick_ns, last_job_id=r.last_job_id, count=r.count,
        created_ns=r.created_ns, updated_ns=r.updated_ns, last_error=r.last_error,
    )  # fmt: skip


def flow_spec(body: FlowBody) -> pb.FlowSpec:
    spec = pb.FlowSpec(id=body.id or "")
    for n in body.nodes:
        opts = pb.EnqueueOpts(priority=n.priority, lifo=n.lifo, attempts=n.attempts, job_key=n.job_key or "",
                              subject=n.subject or "")  # fmt: skip
        if n.delay_ns:
            opts.not_before.delay_ns = n.delay_ns
        node = spec.nodes.add(id=n.id, queue=n.queue, task=_task(n), opts=opts, depends_on=n.depends_on)
        if n.on_failure:
            node.on_failure = _POLICY[n.on_failure]
    return spec


def flow_view(f: pb.FlowRecord) -> FlowView:
    return FlowView(id=f.id, created_ns=f.created_ns,
                    jobs=[FlowJobView(node=j.node, queue=j.queue, job_id=j.job_id) for j in f.jobs])  # fmt: skip


def dependency_view(d: pb.Dependency, redact: Redactor | None = None) -> DependencyView:
    return DependencyView(
        queue=d.queue, job_id=d.job_id, node=d.node, job_key=d.job_key,
        state=_DEP_STATE_NAME.get(d.state, "pending"), policy=_POLICY_NAME.get(d.policy, "fail_parent"),
        value=payload_view(d.value, redact) if d.HasField("value") else None,
        error=_error_view(d.error) if d.HasField("error") else None,
        finished_ns=d.finished_ns,
    )  # fmt: skip


# -- routes ------------------------------------------------------------------------------------
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": desc}
    for status, desc in (
        (400, "invalid_argument or failed_precondition (a fenced lease, a job in the wrong state)"),
        (401, "unauthenticated: a missing or bad token"),
        (403, "permission_denied: the token lacks the action, or names another namespace"),
        (404, "not_found: no such queue, job or key"),
        (409, "already_exists"),
        (429, "resource_exhausted: a rate limit or a payload over the limit"),
        (503, "unavailable: the store or a queue core, retry"),
        (504, "deadline_exceeded"),
    )
}

QueueName = Annotated[str, Path(description="the queue name: 1-128 of A-Z a-z 0-9 . _ : @ -")]
ScheduleId = Annotated[
    str, Path(description="the schedule id (BullMQ's job scheduler id, a Celery beat entry's name)")
]
FlowId = Annotated[str, Path(description="the flow id")]
JobRef = Annotated[str, Path(description="a job id, or the job's key")]
ResultKey = Annotated[str, Path(description="a result key")]


def build_router() -> APIRouter:
    api = APIRouter(prefix="/v1", responses=ERROR_RESPONSES)

    def caller(name: str):
        """The route's caller, checked for the action the method table gives `name`."""
        op = operation(name)  # a name not in the table fails here, as the router is built

        async def dep(request: Request) -> Principal:
            return await request.app.state.access.check(request.headers, op)

        return Depends(dep)

    def router_of(request: Request):
        return request.app.state.router

    async def call(request: Request, p: Principal, method: str, req: Any) -> Any:
        return await router_of(request).call(p.namespace, method, req)

    # -- queues ------------------------------------------------------------------------------
    @api.get("/queues", response_model=QueueList, tags=["queues"], summary="List queues with their counts")
    async def list_queues(request: Request, p: Principal = caller("queue_list")) -> QueueList:
        rows = await router_of(request).queue_list_with_counts(p.namespace)
        return QueueList(queues=[QueueSummary(name=name, counts=counts_view(c)) for name, c in rows])

    @api.get(
        "/queues/{queue}",
        response_model=QueueDetail,
        tags=["queues"],
        summary="A queue's settings and counts",
    )
    async def get_queue(
        request: Request, queue: QueueName, p: Principal = caller("queue_get")
    ) -> QueueDetail:
        r = await call(
            request,
            p,
            "queue_admin",
            _proto(lambda: J.QueueAdminRequest(queue=queue, op=J.QueueOp(counts={}))),
        )
        return QueueDetail(name=queue, config=config_view(r.config), counts=counts_view(r.counts),
                           activity=message_view(Activity, r.activity))  # fmt: skip

    async def queue_op(request: Request, p: Principal, queue: str, op: J.QueueOp) -> QueueActionResult:
        r = await call(request, p, "queue_admin", _proto(lambda: J.QueueAdminRequest(queue=queue, op=op)))
        return QueueActionResult(
            affected=r.affected, counts=counts_view(r.counts) if r.HasField("counts") else None
        )

    @api.post(
        "/queues/{queue}:pause", response_model=QueueActionResult, tags=["queues"], summary="Stop leasing"
    )
    async def pause(
        request: Request, queue: QueueName, p: Principal = caller("queue_admin")
    ) -> QueueActionResult:
        return await queue_op(request, p, queue, J.QueueOp(pause={}))

    @api.post(
        "/queues/{queue}:resume", response_model=QueueActionResult, tags=["queues"], summary="Lease again"
    )
    async def resume(
        request: Request, queue: QueueName, p: Principal = caller("queue_admin")
    ) -> QueueActionResult:
        return await queue_op(request, p, queue, J.QueueOp(resume={}))

    @api.post("/queues/{queue}:drain", response_model=QueueActionResult, tags=["queues"],
              summary="Remove waiting (and optionally delayed) jobs")  # fmt: skip
    async def drain(
        request: Request,
        queue: QueueName,
        body: DrainBody | None = Body(None),
        p: Principal = caller("queue_admin"),
    ) -> QueueActionResult:
        body = body or DrainBody()
        return await queue_op(request, p, queue, J.QueueOp(drain=J.QueueOp.Drain(delayed=body.delayed)))

    @api.post("/queues/{queue}:clean", response_model=QueueActionResult, tags=["queues"],
              summary="Remove jobs in a state older than a grace period")  # fmt: skip
    async def clean(
        request: Request,
        queue: QueueName,
        body: CleanBody | None = Body(None),
        p: Principal = caller("queue_admin"),
    ) -> QueueActionResult:
        body = body or CleanBody()
        op = J.QueueOp(
            clean=J.QueueOp.Clean(state=_state(body.state), grace_ns=body.grace_ns, limit=body.limit)
        )
        return await queue_op(request, p, queue, op)

    @api.post("/queues/{queue}/dead-letters:redrive", response_model=QueueActionResult, tags=["queues"],
              summary="Move a dead-letter queue's jobs back to the queues they came from")  # fmt: skip
    async def redrive(
        request: Request,
        queue: QueueName,
        body: RedriveBody | None = Body(None),
        p: Principal = caller("queue_admin"),
    ) -> QueueActionResult:
        body = body or RedriveBody()
        op = J.QueueOp(redrive_dead_letters=J.QueueOp.RedriveDeadLetters(limit=body.limit))
        return await queue_op(request, p, queue, op)

    # -- jobs --------------------------------------------------------------------------------
    @api.post("/queues/{queue}/jobs", response_model=EnqueueResult, tags=["jobs"], summary="Enqueue a job")
    async def enqueue(
        request: Request, queue: QueueName, body: EnqueueBody, p: Principal = caller("enqueue")
    ) -> EnqueueResult:
        r = await call(request, p, "enqueue", _proto(lambda: enqueue_request(queue, body)))
        return enqueue_result(r.enqueued)

    @api.post("/writes", response_model=WriteBatchResult, tags=["jobs"],
              summary="Enqueues, cancels of jobs not started and result sets in one transaction, all or none")  # fmt: skip
    async def write_batch(
        request: Request, body: WriteBatchBody, p: Principal = caller("write_batch")
    ) -> WriteBatchResult:
        def build() -> J.WriteBatchRequest:
            req = J.WriteBatchRequest()
            for i, item in enumerate(body.items):
                given = [f for f in ("enqueue", "cancel", "result_set") if getattr(item, f) is not None]
                if len(given) != 1:
                    raise InvalidArgument(f"items[{i}]", "set exactly one of enqueue, cancel, result_set")
                if item.enqueue is not None:
                    req.items.add(enqueue=enqueue_request(item.enqueue.queue, item.enqueue))
                elif item.cancel is not None:
                    c = item.cancel
                    req.items.add(cancel=J.WriteItem.Cancel(queue=c.queue, job=c.job, reason=c.reason))
                else:
                    s = item.result_set
                    value = payload_in(s.data, s.data_base64, s.content_type)
                    req.items.add(result_set=J.ResultSetRequest(key=s.key, value=value, ttl_ns=s.ttl_ns))
            return req

        r = await call(request, p, "write_batch", _proto(build))
        out = []
        for o in r.outcomes:
            kind = o.WhichOneof("kind")
            if kind == "enqueued":
                out.append(WriteOutcomeView(enqueued=enqueue_result(o.enqueued)))
            elif kind == "canceled":
                out.append(WriteOutcomeView(canceled=o.canceled.job))
            else:
                out.append(WriteOutcomeView(result_stored=o.result_stored.key))
        return WriteBatchResult(outcomes=out)

    @api.get(
        "/queues/{queue}/jobs", response_model=JobPage, tags=["jobs"], summary="Jobs by state, newest first"
    )
    async def list_jobs(
        request: Request,
        queue: QueueName,
        state: Annotated[
            list[StateName] | None, Query(description="one or more states; none: all jobs")
        ] = None,
        name: Annotated[str | None, Query(max_length=256, description="only this task name")] = None,
        page_size: Annotated[int, Query(ge=0, le=1000, description="0: the default (100)")] = 0,
        page_token: Annotated[str, Query(max_length=4096)] = "",
        view: Annotated[JobListView, Query(description=(
            "summary: without what a list does not show (payload and result data, progress, headers, "
            "stack traces, all errors but the last)"))] = "full",
        p: Principal = caller("query"),
    ) -> Response:  # fmt: skip
        req = _proto(
            lambda: J.QueryRequest(
                queue=queue, states=[_state(s) for s in state or ()], name=name or "",
                page_size=page_size, page_token=page_token,
            )
        )  # fmt: skip
        r = await call(request, p, "query", req)
        redact, summary = redactor(request, p), view == "summary"
        return json_response(
            {"jobs": [job_row(j, redact, summary) for j in r.jobs], "next_page_token": r.next_page_token}
        )

    async def job_op(request: Request, p: Principal, queue: str, job: str, op: J.JobOp) -> J.JobAdminResponse:
        return await call(
            request, p, "job_admin", _proto(lambda: J.JobAdminRequest(queue=queue, job=job, op=op))
        )

    @api.get("/queues/{queue}/jobs/{job}", response_model=JobDetail, tags=["jobs"],
             summary="One job with its logs and error history")  # fmt: skip
    async def get_job(
        request: Request, queue: QueueName, job: JobRef, p: Principal = caller("job_get")
    ) -> JobDetail:
        got = await job_op(request, p, queue, job, J.JobOp(get={}))
        logs = await job_op(request, p, queue, got.job.id, J.JobOp(logs={}))
        return JobDetail(
            job=job_view(got.job, redactor(request, p)),
            logs=[LogLineView(at_ns=x.at_ns, line=x.line) for x in logs.logs],
            log_count=logs.log_count,
        )

    def job_action(verb: str, op_field: str, summary: str) -> None:
        async def action(
            request: Request, queue: QueueName, job: JobRef, p: Principal = caller("job_admin")
        ) -> JobActionResult:
            r = await job_op(request, p, queue, job, J.JobOp(**{op_field: {}}))
            view = job_view(r.job, redactor(request, p)) if r.HasField("job") else None
            return JobActionResult(job=view, removed=r.removed)

        action.__name__ = f"job_{verb}"
        api.post(f"/queues/{{queue}}/jobs/{{job}}:{verb}", response_model=JobActionResult, tags=["jobs"],
                 summary=summary)(action)  # fmt: skip

    job_action("retry", "retry", "Retry a finished job (its attempts start over)")
    job_action("remove", "remove", "Delete a job that no worker holds")
    job_action("promote", "promote", "Make a delayed job ready now")
    job_action("cancel", "cancel", "Cancel a job that has not started")

    # -- result keys -------------------------------------------------------------------------
    @api.get("/results/{key}", response_model=ResultValue, tags=["results"], summary="Read a result key")
    async def result_get(
        request: Request, key: ResultKey, p: Principal = caller("result_get")
    ) -> ResultValue:
        r = await call(request, p, "result_get", _proto(lambda: J.ResultGetRequest(key=key)))
        if not r.found:
            raise NotFound(f"result key {key!r} does not exist (or expired)")
        return ResultValue(key=key, value=payload_view(r.value))

    @api.put(
        "/results/{key}",
        status_code=204,
        response_class=Response,
        tags=["results"],
        summary="Write a result key",
    )
    async def result_set(
        request: Request, key: ResultKey, body: ResultPut, p: Principal = caller("result_set")
    ) -> Response:
        value = payload_in(body.data, body.data_base64, body.content_type)
        await call(
            request,
            p,
            "result_set",
            _proto(lambda: J.ResultSetRequest(key=key, value=value, ttl_ns=body.ttl_ns)),
        )
        return Response(status_code=204)

    @api.delete("/results/{key}", status_code=204, response_class=Response, tags=["results"],
                summary="Delete a result key")  # fmt: skip
    async def result_delete(
        request: Request, key: ResultKey, p: Principal = caller("result_delete")
    ) -> Response:
        await call(request, p, "result_delete", _proto(lambda: J.ResultDeleteRequest(key=key)))
        return Response(status_code=204)

    @api.post("/results/{key}:incr", response_model=IncrResult, tags=["results"],
              summary="Count a member into a counter key (a member counts once)")  # fmt: skip
    async def result_incr(
        request: Request, key: ResultKey, body: IncrBody, p: Principal = caller("result_incr")
    ) -> IncrResult:
        req = _proto(lambda: J.ResultIncrRequest(key=key, member=body.member, ttl_ns=body.ttl_ns))
        r = await call(request, p, "result_incr", req)
        return IncrResult(size=r.size)

    # -- schedules ---------------------------------------------------------------------------
    @api.put("/schedules/{id}", response_model=ScheduleResult, tags=["schedules"],
             summary="Create or replace a schedule (the same rule again changes nothing)")  # fmt: skip
    async def schedule_put(
        request: Request, id: ScheduleId, body: ScheduleBody, p: Principal = caller("schedule")
    ) -> ScheduleResult:
        req = _proto(lambda: J.ScheduleRequest(spec=schedule_spec(id, body)))
        r = await call(request, p, "schedule", req)
        return ScheduleResult(schedule=schedule_view(r.schedule, redactor(request, p)), changed=r.changed)

    @api.get("/schedules", response_model=SchedulePage, tags=["schedules"], summary="Schedules, in id order")
    async def schedule_list(
        request: Request,
        page_size: Annotated[int, Query(ge=0, le=1000, description="0: the default (100)")] = 0,
        page_token: Annotated[str, Query(max_length=4096)] = "",
        p: Principal = caller("list_schedules"),
    ) -> SchedulePage:
        req = _proto(lambda: J.ListSchedulesRequest(page_size=page_size, page_token=page_token))
        r = await call(request, p, "list_schedules", req)
        redact = redactor(request, p)
        return SchedulePage(
            schedules=[schedule_view(x, redact) for x in r.schedules], next_page_token=r.next_page_token
        )

    @api.get("/schedules/{id}", response_model=ScheduleView, tags=["schedules"],
             summary="One schedule with its next tick, last tick and count")  # fmt: skip
    async def schedule_get(
        request: Request, id: ScheduleId, p: Principal = caller("get_schedule")
    ) -> ScheduleView:
        r = await call(request, p, "get_schedule", _proto(lambda: J.GetScheduleRequest(id=id)))
        return schedule_view(r.schedule, redactor(request, p))

    @api.delete("/schedules/{id}", response_model=UnscheduleResult, tags=["schedules"],
                summary="Remove a schedule (the jobs its ticks enqueued stay)")  # fmt: skip
    async def schedule_delete(
        request: Request, id: ScheduleId, p: Principal = caller("unschedule")
    ) -> UnscheduleResult:
        r = await call(request, p, "unschedule", _proto(lambda: J.UnscheduleRequest(id=id)))
        return UnscheduleResult(removed=r.removed)

    # -- flows -------------------------------------------------------------------------------
    @api.post("/flows", response_model=FlowResult, tags=["flows"],
              summary="Submit a flow: every node's job in one transaction (idempotent by flow id)")  # fmt: skip
    async def flow_post(request: Request, body: FlowBody, p: Principal = caller("flow")) -> FlowResult:
        r = await call(request, p, "flow", _proto(lambda: J.FlowRequest(graph=flow_spec(body))))
        return FlowResult(flow=r.flow, jobs=dict(r.jobs), created=r.created)

    @api.get("/flows/{id}", response_model=FlowView, tags=["flows"], summary="A flow's jobs, node by node")
    async def flow_get(request: Request, id: FlowId, p: Principal = caller("get_flow")) -> FlowView:
        r = await call(request, p, "get_flow", _proto(lambda: J.GetFlowRequest(id=id)))
        return flow_view(r.flow)

    @api.get("/queues/{queue}/jobs/{job}/children", response_model=ChildrenList, tags=["flows"],
             summary="A job's dependencies with their results and failures (BullMQ getChildrenValues)")  # fmt: skip
    async def job_children(
        request: Request, queue: QueueName, job: JobRef, p: Principal = caller("job_get")
    ) -> ChildrenList:
        r = await job_op(request, p, queue, job, J.JobOp(children={}))
        redact = redactor(request, p)
        return ChildrenList(children=[dependency_view(d, redact) for d in r.children])

    return api
