"""What the client hands back: small read-only views over the protobuf messages, with
payloads decoded and states named. Each keeps its message as `.raw` for anything the
view does not name, and `to_dict()` gives the JSON shape the CLI prints."""

from __future__ import annotations

import base64
import datetime as dt
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import FieldDescriptor

from loam import payloads
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as jpb
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb

STATE_NAMES = {
    pb.JOB_STATE_UNSPECIFIED: "unknown",
    pb.JOB_STATE_WAITING: "waiting",
    pb.JOB_STATE_PRIORITIZED: "prioritized",
    pb.JOB_STATE_DELAYED: "delayed",
    pb.JOB_STATE_ACTIVE: "active",
    pb.JOB_STATE_WAITING_CHILDREN: "waiting-children",
    pb.JOB_STATE_COMPLETED: "completed",
    pb.JOB_STATE_FAILED: "failed",
    pb.JOB_STATE_DEAD_LETTERED: "dead-lettered",
    pb.JOB_STATE_CANCELED: "canceled",
}
STATES = {v: k for k, v in STATE_NAMES.items() if k}


def state_name(state: int) -> str:
    return STATE_NAMES.get(state, "unknown")


def state_value(state: str | int) -> int:
    """'waiting', 'WAITING', 'dead_lettered' or the enum value → the enum value."""
    if isinstance(state, int):
        return state
    key = state.strip().lower().replace("_", "-")
    if key not in STATES:
        raise ValueError(f"unknown job state {state!r}; one of {', '.join(STATES)}")
    return STATES[key]


def _payload_dict(p: pb.Payload) -> Any:
    value = payloads.decode(p)
    if isinstance(value, bytes):
        return {"bytes": len(value), "content_type": p.content_type}
    return value


def message_dict(msg: Any) -> dict[str, Any]:
    """A message as plain JSON values: proto field names, 64-bit numbers as numbers
    (not strings, as protobuf's JSON mapping has them), enums by name, bytes base64."""
    out: dict[str, Any] = {}
    for fd, value in msg.ListFields():
        out[fd.name] = _field_value(fd, value)
    return out


def _scalar(fd: Any, v: Any) -> Any:
    if fd.type == FieldDescriptor.TYPE_MESSAGE:
        return message_dict(v)
    if fd.type == FieldDescriptor.TYPE_ENUM:
        name = fd.enum_type.values_by_number.get(v)
        return name.name if name is not None else v
    if fd.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(v).decode()
    return v


def _field_value(fd: Any, value: Any) -> Any:
    if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
        vfd = fd.message_type.fields_by_name["value"]
        return {k: _scalar(vfd, v) for k, v in value.items()}
    if fd.is_repeated:
        return [_scalar(fd, v) for v in value]
    return _scalar(fd, value)


@dataclass(frozen=True, slots=True)
class Enqueued:
    id: str  # the job kept
    created: bool
    state: str
    dropped: str = ""  # a replacement: the job dropped (the earlier one, or this one)

    @classmethod
    def from_pb(cls, e: jpb.Enqueued) -> Enqueued:
        return cls(e.job, e.created, state_name(e.state), e.dropped)

    def to_dict(self) -> dict[str, Any]:
        d = {"id": self.id, "created": self.created, "state": self.state}
        if self.dropped:
            d["dropped"] = self.dropped
        return d


@dataclass(frozen=True, slots=True)
class Completed:
    state: str
    moved: bool

    @classmethod
    def from_pb(cls, c: jpb.Completed) -> Completed:
        return cls(state_name(c.state), c.moved)


class JobInfo:
    """A job as admin calls and queries return it (`Job` in types.proto)."""

    __slots__ = ("raw",)

    def __init__(self, raw: pb.Job) -> None:
        self.raw = raw

    id = property(lambda self: self.raw.id)
    queue = property(lambda self: self.raw.queue)
    name = property(lambda self: self.raw.task.name)
    headers = property(lambda self: dict(self.raw.task.headers))
    state = property(lambda self: state_name(self.raw.state))
    attempt = property(lambda self: self.raw.attempt)  # attempts spent (types.proto Job.attempt)
    errors = property(lambda self: list(self.raw.errors))

    @property
    def attempt_number(self) -> int:
        """The attempt the job is on, or last ran, 1-based: the number a worker's lease of
        it reports (`LeasedJob.attempt`). A job that failed for good spent its last one."""
        spent = self.raw.attempt
        if self.raw.state in (pb.JOB_STATE_FAILED, pb.JOB_STATE_DEAD_LETTERED) and spent:
            return spent
        return spent + 1

    @property
    def payload(self) -> Any:
        return payloads.decode(self.raw.task.payload)

    @property
    def result(self) -> Any:
        return payloads.decode(self.raw.result) if self.raw.HasField("result") else None

    @property
    def progress(self) -> Any:
        return json.loads(self.raw.progress) if self.raw.progress else None

    def __getattr__(self, name: str) -> Any:  # anything else: the message's field
        return getattr(self.raw, name)

    def __repr__(self) -> str:
        return f"JobInfo(id={self.id!r}, queue={self.queue!r}, name={self.name!r}, state={self.state!r})"

    def to_dict(self) -> dict[str, Any]:
        d = message_dict(self.raw)
        d["state"] = self.state
        d["name"] = self.name
        d["payload"] = _payload_dict(self.raw.task.payload)
        d.pop("task", None)
        d.pop("request_hash", None)
        if self.raw.HasField("result"):
            d["result"] = _payload_dict(self.raw.result)
        if self.raw.progress:
            d["progress"] = self.progress
        if self.raw.task.headers:
            d["headers"] = dict(self.raw.task.headers)
        return d


@dataclass(slots=True)
class Page:
    jobs: list[JobInfo]
    next_page_token: str


class LeasedJob:
    """A job this worker holds a lease on. `token` is the fencing token every write
    about the job carries (extend, complete, report)."""

    __slots__ = ("raw", "received_ns", "_payload", "_reporter", "__weakref__")

    def __init__(self, raw: jpb.Lease, reporter: Callable[..., Any] | None = None) -> None:
        self.raw = raw
        self.received_ns = time.time_ns()
        self._payload: Any = _UNSET
        self._reporter = reporter

    token = property(lambda self: self.raw.token)
    id = property(lambda self: self.raw.token.job)
    queue = property(lambda self: self.raw.token.queue)
    epoch = property(lambda self: self.raw.token.epoch)
    name = property(lambda self: self.raw.task.name)
    headers = property(lambda self: dict(self.raw.task.headers))
    data = property(lambda self: self.raw.task.payload.data)
    content_type = property(lambda self: self.raw.task.payload.content_type)
    attempt = property(lambda self: self.raw.attempt)
    stalled = property(lambda self: self.raw.stalled)
    deadline_ns = property(lambda self: self.raw.deadline_ns)
    opts = property(lambda self: self.raw.opts)
    created_ns = property(lambda self: self.raw.created_ns)

    @property
    def payload(self) -> Any:
        if self._payload is _UNSET:
            self._payload = payloads.decode(self.raw.task.payload)
        return self._payload

    @property
    def lease_ns(self) -> int:
        """The lease length: the job's visibility when it set one, else what was left of
        the lease when it arrived (the queue's default, give or take clock skew)."""
        if self.raw.opts.visibility_ns:
            return self.raw.opts.visibility_ns
        left = self.raw.deadline_ns - self.received_ns
        return left if left > 0 else 30 * 10**9

    def progress(self, value: Any) -> None:
        """Report progress (any JSON value). Sent in the background, in order, before the
        job's completion; callable from async and sync (threaded) handlers alike."""
        self._report(progress=json.dumps(value).encode())

    def log(self, line: str) -> None:
        """Append a line to the job's log (in the background, like `progress`)."""
        self._report(log_line=str(line))

    def update_data(self, value: Any) -> None:
        self._report(data=payloads.encode(value))

    def _report(self, **kw: Any) -> None:
        if self._reporter is None:
            raise RuntimeError("this job is not run by a Worker; call client.report(job.token, ...)")
        self._reporter(self, **kw)

    def __repr__(self) -> str:
        return f"LeasedJob(id={self.id!r}, queue={self.queue!r}, name={self.name!r}, attempt={self.attempt})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "queue": self.queue,
            "epoch": self.epoch,
            "name": self.name,
            "payload": _payload_dict(self.raw.task.payload),
            "attempt": self.attempt,
            "deadline_ns": self.deadline_ns,
        }


class _Unset:
    pass


_UNSET = _Unset()


# -- schedules and flows ---------------------------------------------------------------------
MISFIRE_NAMES = {
    pb.MISFIRE_POLICY_UNSPECIFIED: "fire_latest",
    pb.MISFIRE_POLICY_FIRE_LATEST: "fire_latest",
    pb.MISFIRE_POLICY_SKIP: "skip",
    pb.MISFIRE_POLICY_FIRE_ALL: "fire_all",
}
POLICY_NAMES = {
    pb.FAILURE_POLICY_UNSPECIFIED: "fail_parent",
    pb.FAILURE_POLICY_FAIL_PARENT: "fail_parent",
    pb.FAILURE_POLICY_CONTINUE_PARENT: "continue_parent",
    pb.FAILURE_POLICY_IGNORE_DEPENDENCY: "ignore_dependency",
    pb.FAILURE_POLICY_REMOVE_DEPENDENCY: "remove_dependency",
}
DEPENDENCY_STATE_NAMES = {
    pb.DEPENDENCY_STATE_UNSPECIFIED: "unknown",
    pb.DEPENDENCY_STATE_PENDING: "pending",
    pb.DEPENDENCY_STATE_PROCESSED: "processed",
    pb.DEPENDENCY_STATE_FAILED: "failed",
    pb.DEPENDENCY_STATE_IGNORED: "ignored",
}


def _utc(ns: int) -> dt.datetime | None:
    return dt.datetime.fromtimestamp(ns / 1e9, dt.UTC) if ns else None


class ScheduleInfo:
    """A schedule (`ScheduleRecord`): its rule, its job template and where it stands
    (`next_run`, `last_run`, `count`). `changed` is set on what `Client.schedule`
    returns: False when the same rule was there already (nothing changed); None on
    reads. Any other record field reads through (`info.every_ns`, `info.opts`, ...)."""

    __slots__ = ("changed", "raw")

    def __init__(self, raw: pb.ScheduleRecord, changed: bool | None = None) -> None:
        self.raw = raw
        self.changed = changed

    id = property(lambda self: self.raw.id)
    queue = property(lambda self: self.raw.queue)
    name = property(lambda self: self.raw.task.name)
    headers = property(lambda self: dict(self.raw.task.headers))
    misfire = property(lambda self: MISFIRE_NAMES.get(self.raw.misfire, "fire_latest"))
    count = property(lambda self: self.raw.count)
    next_run = property(lambda self: _utc(self.raw.next_ns), doc="the next tick (UTC); None: no tick left")
    last_run = property(lambda self: _utc(self.raw.last_tick_ns), doc="the last tick fired (UTC), if any")

    @property
    def every(self) -> dt.timedelta | None:
        return dt.timedelta(microseconds=self.raw.every_ns / 1000) if self.raw.every_ns else None

    @property
    def payload(self) -> Any:
        return payloads.decode(self.raw.task.payload)

    @property
    def rule(self) -> str:
        """`cron '*/5 * * * *' in Europe/Paris` or `every 30s`, for people."""
        if self.raw.cron:
            return f"cron {self.raw.cron!r} in {self.raw.tz or 'UTC'}"
        return f"every {_duration_text(self.raw.every_ns)}"

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)

    def __repr__(self) -> str:
        return f"ScheduleInfo(id={self.id!r}, queue={self.queue!r}, name={self.name!r}, {self.rule})"

    def to_dict(self) -> dict[str, Any]:
        r = self.raw
        d: dict[str, Any] = {
            "id": r.id, "queue": r.queue, "name": r.task.name, "payload": _payload_dict(r.task.payload),
            "headers": dict(r.task.headers), "cron": r.cron, "tz": r.tz, "every_ns": r.every_ns,
            "limit": r.limit, "start_ns": r.start_ns, "end_ns": r.end_ns, "offset_ns": r.offset_ns,
            "immediately": r.immediately, "misfire": self.misfire, "misfire_grace_ns": r.misfire_grace_ns,
            "opts": message_dict(r.opts), "next_ns": r.next_ns, "last_tick_ns": r.last_tick_ns,
            "last_job_id": r.last_job_id, "count": r.count, "created_ns": r.created_ns,
            "updated_ns": r.updated_ns, "last_error": r.last_error,
        }  # fmt: skip
        if self.changed is not None:
            d["changed"] = self.changed
        return d


def _duration_text(ns: int) -> str:
    for unit, size in (
        ("d", 86_400 * 10**9),
        ("h", 3600 * 10**9),
        ("m", 60 * 10**9),
        ("s", 10**9),
        ("ms", 10**6),
    ):
        if ns >= size and ns % size == 0:
            return f"{ns // size}{unit}"
    return f"{ns / 1e9:g}s"


@dataclass(frozen=True, slots=True)
class FlowInfo:
    """A flow's jobs: `jobs` maps node id → job id and `queues` node id → queue, in
    the order the nodes were given. `created` (from `Client.flow`): False when a flow
    with this id and graph existed, and these are its jobs; None on reads."""

    id: str
    jobs: dict[str, str]
    queues: dict[str, str]
    created: bool | None = None
    created_ns: int = 0

    @classmethod
    def from_record(cls, f: pb.FlowRecord) -> FlowInfo:
        return cls(
            f.id, {j.node: j.job_id for j in f.jobs}, {j.node: j.queue for j in f.jobs}, None, f.created_ns
        )

    def job(self, node: str) -> tuple[str, str]:
        """(queue, job id) of a node: what `Client.get_job` and `children_values` take."""
        return self.queues[node], self.jobs[node]

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": self.id,
            "jobs": [{"node": n, "queue": self.queues.get(n, ""), "job_id": j} for n, j in self.jobs.items()],
        }
        if self.created is not None:
            d["created"] = self.created
        if self.created_ns:
            d["created_ns"] = self.created_ns
        return d


class Child:
    """One dependency of a job (BullMQ's getDependencies / getChildrenValues): the child,
    its state (pending, processed, failed, ignored), its result (`value`, once
    processed) or its failure (`error`)."""

    __slots__ = ("raw",)

    def __init__(self, raw: pb.Dependency) -> None:
        self.raw = raw

    queue = property(lambda self: self.raw.queue)
    job_id = property(lambda self: self.raw.job_id)
    node = property(lambda self: self.raw.node)
    job_key = property(lambda self: self.raw.job_key)
    state = property(lambda self: DEPENDENCY_STATE_NAMES.get(self.raw.state, "unknown"))
    policy = property(lambda self: POLICY_NAMES.get(self.raw.policy, "fail_parent"))
    finished_ns = property(lambda self: self.raw.finished_ns)

    @property
    def key(self) -> str:
        """The flow node id; for a child added with `parent=`, `queue:job key` (or job id)."""
        return self.raw.node or f"{self.raw.queue}:{self.raw.job_key or self.raw.job_id}"

    @property
    def value(self) -> Any:
        return payloads.decode(self.raw.value) if self.raw.HasField("value") else None

    @property
    def error(self) -> pb.JobError | None:
        return self.raw.error if self.raw.HasField("error") else None

    def __repr__(self) -> str:
        return f"Child(key={self.key!r}, job_id={self.job_id!r}, state={self.state!r})"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "key": self.key, "queue": self.queue, "job_id": self.job_id, "node": self.node,
            "job_key": self.job_key, "state": self.state, "policy": self.policy, "finished_ns": self.finished_ns,
        }  # fmt: skip
        if self.raw.HasField("value"):
            d["value"] = _payload_dict(self.raw.value)
        if self.raw.HasField("error"):
            d["error"] = message_dict(self.raw.error)
        return d
