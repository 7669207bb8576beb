"""What the client hands back: small read-only views over the protobuf messages, with
payloads decoded and states named. Each keeps its message as `.raw` for anything the
view does not name, and `to_dict()` gives the JSON shape the CLI prints."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as jpb
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb

from loam import payloads

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
    id: str
    created: bool
    state: str

    @classmethod
    def from_pb(cls, e: jpb.Enqueued) -> Enqueued:
        return cls(e.job, e.created, state_name(e.state))

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "created": self.created, "state": self.state}


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
    attempt = property(lambda self: self.raw.attempt)
    errors = property(lambda self: list(self.raw.errors))

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
