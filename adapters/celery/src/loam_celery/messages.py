"""kombu messages <-> Loam jobs (spec §7.1.2, §7.1.3). Pure functions.

Publishing: the whole kombu message (body, headers, properties) is the job payload, as
JSON with content type `application/x-kombu+json`. Loam reads a few fields:

- header `task` -> the job's name (other kombu messages: `kombu.message`);
- headers `id` + `retries` -> `job_key` `<id>:<retries>`: `Task.retry` publishes a new
  message with the same id, so the id alone would collide with the original while it is
  still active; the same (id, retries) published twice is one job. `Task.replace` also
  publishes its replacement under the task's id, from inside the task (before its ack
  has reached the server, and always before it under `acks_late`), with the header
  `replaced_task_nesting` one higher: a nesting above 0 is part of the key
  (`<id>:<retries>:r<nesting>`);
- header `eta` -> `not_before`: the worker gets the task when it is due and never holds
  it, so an ETA longer than the visibility timeout runs once;
- header `expires` -> `expires` (plus `expires_grace` for Celery tasks, so that a worker
  still sees the expired task and records it REVOKED as Celery does; kombu's pidbox
  messages carry `expires` as a Unix time and get no grace), else the `expiration`
  property (ms), else the queue's `x-message-ttl`;
- property `priority`: 0 or unset -> the FIFO band, 1-9 -> Loam priority 1-9 (lower
  first: Redis's order); `priority_order="amqp"` reverses it (9 first, 0 last);
- header `loam_subject` (`apply_async(headers={"loam_subject": ...})`) -> `subject`: the
  queue runs one task of a subject at a time, in the order they were sent.

Delivering: the payload comes back as the kombu message with a delivery tag of its
own (`<job id>.<epoch>`), `redelivered` set when it was leased before (released,
lapsed or retried), and,
for a job a Loam schedule fired (beat entries), a task id of its own per tick."""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from typing import Any

from loam_common.gen.loam.jobs.v1 import types_pb2 as pb

CONTENT_TYPE = "application/x-kombu+json"
SEC = 1_000_000_000
HEADER_SCHEDULE = "x-loam-schedule"  # loam_common.schedules.HEADER_SCHEDULE
HEADER_TICK = "x-loam-tick"
HEADER_EXPIRES_IN = "x-loam-celery-expires-in"  # beat entries: seconds after each tick
HEADER_SUBJECT = "loam_subject"  # routing by subject: one task of a subject at a time
_TICK_NS = uuid.UUID("8a6c1f52-7d43-4b0e-9a57-0c1d3e5f7a90")


def _ns_from_iso(value: str) -> int | None:
    try:
        t = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    if t.tzinfo is None:  # Celery sends UTC; a naive time is read as UTC too
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * SEC)


def _time_ns(value: Any) -> int | None:
    """An ISO-8601 string (Celery) or a Unix time in seconds (kombu pidbox); 0/None: none."""
    if value is None or value == "" or value == 0:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value * SEC) if value > 0 else None
    if isinstance(value, str):
        return _ns_from_iso(value)
    return None


def loam_priority(priority: Any, order: str = "redis") -> int:
    try:
        p = max(0, min(int(priority), 9))
    except (TypeError, ValueError):
        p = 0
    if order == "amqp":
        return 10 - p if p else 10
    return p


def to_job(
    message: dict[str, Any],
    *,
    priority_order: str = "redis",
    queue_ttl_ms: int | None = None,
    expires_grace_s: float = 0.0,
    now_ns: int | None = None,
) -> tuple[pb.TaskSpec, pb.EnqueueOpts]:
    headers = message.get("headers") or {}
    props = message.get("properties") or {}
    now = now_ns if now_ns is not None else time.time_ns()
    name = str(headers.get("task") or "kombu.message")[:256]
    task = pb.TaskSpec(name=name)
    task.payload.data = json.dumps(message, separators=(",", ":"), default=str).encode()
    task.payload.content_type = CONTENT_TYPE
    opts = pb.EnqueueOpts()
    task_id = headers.get("id")
    if task_id:
        opts.job_key = f"{task_id}:{headers.get('retries') or 0}"
        nesting = headers.get("replaced_task_nesting") or 0
        if nesting:
            opts.job_key += f":r{nesting}"
    eta = _time_ns(headers.get("eta"))
    if eta is not None and eta > now:
        opts.not_before.at_ns = eta
    expires = _time_ns(headers.get("expires"))
    if expires is not None and "task" in headers:
        expires += int(expires_grace_s * SEC)
    if expires is None and props.get("expiration"):
        try:
            expires = now + int(float(props["expiration"]) * 1_000_000)
        except (TypeError, ValueError):
            pass
    if expires is None and queue_ttl_ms:
        expires = now + int(queue_ttl_ms) * 1_000_000
    if expires is not None:
        opts.expires_ns = max(expires, 1)
    prio = loam_priority(props.get("priority"), priority_order)
    if prio:
        opts.priority = prio
    subject = headers.get(HEADER_SUBJECT)
    if subject is not None and str(subject):
        opts.subject = str(subject)[:1024]
    return task, opts


def from_lease(lease: Any) -> tuple[dict[str, Any], str]:
    """The kombu message of a leased job and its delivery tag."""
    message = json.loads(lease.raw.task.payload.data)
    props = message.setdefault("properties", {})
    tag = f"{lease.id}.{lease.epoch}"
    props["delivery_tag"] = tag
    info = props.setdefault("delivery_info", {})
    info.setdefault("exchange", "")
    info.setdefault("routing_key", lease.queue)
    if lease.epoch > 1 or lease.attempt > 1 or lease.stalled:  # leased before (released, lapsed, retried)
        info["redelivered"] = True
        message["redelivered"] = True
    theaders = lease.raw.task.headers
    if HEADER_SCHEDULE in theaders:
        _stamp_tick(message, theaders[HEADER_SCHEDULE], theaders.get(HEADER_TICK, "0"))
    return message, tag


def from_lease_tag(message: dict[str, Any]) -> str:
    return str((message.get("properties") or {}).get("delivery_tag", ""))


def _stamp_tick(message: dict[str, Any], schedule: str, tick: str) -> None:
    """A schedule copies one message per tick: give each tick its own task id (the same
    on redelivery) and its `expires` relative to the tick."""
    headers = message.setdefault("headers", {})
    task_id = str(uuid.uuid5(_TICK_NS, f"{schedule}:{tick}"))
    headers["id"] = headers["root_id"] = task_id
    message.setdefault("properties", {})["correlation_id"] = task_id
    headers.pop("eta", None)
    expires_in = headers.pop(HEADER_EXPIRES_IN, None)
    if expires_in is not None:
        at = int(tick) / SEC + float(expires_in)
        headers["expires"] = dt.datetime.fromtimestamp(at, dt.UTC).isoformat()
