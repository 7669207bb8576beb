"""The Resonate protocol's records and rules, as the server keeps them: promises, tasks,
schedules (plain dicts in the wire's own camelCase, stored as JSON), the address model
(`poll://uni@group/pid`, `poll://any@group[/pid]`), the checks of ids, tags and
values, and `DurableError`, the status + message every refusal carries.

Nothing here touches the store; `transitions.py` does.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import msgspec

PROTOCOL_VERSION = "2026-04-01"

PENDING = "pending"
RESOLVED = "resolved"
REJECTED = "rejected"
REJECTED_CANCELED = "rejected_canceled"
REJECTED_TIMEDOUT = "rejected_timedout"
SETTLE_STATES = frozenset({RESOLVED, REJECTED, REJECTED_CANCELED})

TASK_PENDING = "pending"
TASK_ACQUIRED = "acquired"
TASK_SUSPENDED = "suspended"
TASK_HALTED = "halted"
TASK_FULFILLED = "fulfilled"

TAG_TARGET = "resonate:target"
TAG_TIMER = "resonate:timer"
TAG_EXTERNAL = "resonate:external"
TAG_DELAY = "resonate:delay"
TAG_ORIGIN = "resonate:origin"
TAG_BRANCH = "resonate:branch"
TAG_PARENT = "resonate:parent"
TAG_SCHEDULE = "resonate:schedule"
TAG_PREFIX = "resonate:prefix"

# Fields a stored promise holds beyond its wire record.
_PRIVATE = ("listeners", "callbacks")


class DurableError(Exception):
    """A refusal with the real server's status (400/404/409/422, 401/403) and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def bad(message: str) -> DurableError:
    return DurableError(400, message)


# -- encoding -------------------------------------------------------------------------------
# msgspec's JSON codec: the records and envelopes are encoded and decoded several times a
# step, and it does each in a fraction of the standard library's time (bench/README.md).
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


def dumps(record: Any) -> bytes:
    """Compact JSON (the records, envelopes and pushes as they travel)."""
    return _encode(record)


def loads(raw: bytes | str) -> Any:
    """JSON -> Python; ValueError on malformed input, and on input nested deeper than the
    decoder can follow (a RecursionError would otherwise surface as a 500)."""
    try:
        return _decode(raw)
    except msgspec.DecodeError as e:
        raise ValueError(str(e)) from None
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def promise_wire(p: dict) -> dict:
    """The PromiseRecord a client sees (settledAt only once settled; no nulls)."""
    return {k: v for k, v in p.items() if k not in _PRIVATE}


def task_wire(t: dict) -> dict:
    """The TaskRecord a client sees: `resumes` is a count; ttl and pid only while acquired."""
    out = {"id": t["id"], "state": t["state"], "version": t["version"], "resumes": len(t.get("resumes", ()))}
    if t["state"] == TASK_ACQUIRED:
        out["ttl"] = t["ttl"]
        out["pid"] = t["pid"]
    return out


def schedule_wire(s: dict) -> dict:
    return dict(s)


# -- promise rules --------------------------------------------------------------------------
def is_awaitable(tags: dict) -> bool:
    """Targeted, timer and external promises time out by a timer (§4.5)."""
    return TAG_TARGET in tags or tags.get(TAG_TIMER) == "true" or tags.get(TAG_EXTERNAL) == "true"


def timeout_state(tags: dict) -> str:
    return RESOLVED if tags.get(TAG_TIMER) == "true" else REJECTED_TIMEDOUT


def root_of(promise_id: str) -> str:
    """The origin: everything before the first `:`."""
    return promise_id.split(":", 1)[0]


def branch_prefix(promise_id: str) -> str:
    """Ids of the promises a task replays under this one: children extend an id with
    `:` once (`wf` -> `wf:1`), then with `.` (`wf:1` -> `wf:1.2`)."""
    return promise_id + ("." if ":" in promise_id else ":")


def _extends(promise_id: str, ancestor: str) -> bool:
    return promise_id == ancestor or promise_id.startswith(branch_prefix(ancestor))


def check_value(value: Any, field: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise bad(f"{field} must be an object")
    headers = value.get("headers")
    if headers is not None and (
        not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values())
    ):
        raise bad(f"{field}.headers must map strings to strings")
    data = value.get("data")
    if data is not None and not isinstance(data, str):
        raise bad(f"{field}.data must be a string")
    return {k: v for k, v in value.items() if k in ("headers", "data") and v is not None}


def check_tags(tags: Any) -> dict:
    if tags is None:
        return {}
    if not isinstance(tags, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in tags.items()
    ):
        raise bad("tags must map strings to strings")
    return tags


def check_id(value: Any, field: str = "id") -> str:
    if not isinstance(value, str) or not value:
        raise bad(f"{field} must be a non-empty string")
    if "\x00" in value:
        raise bad(f"{field} must not contain NUL")
    return value


def check_int(value: Any, field: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise bad(f"{field} must be an integer >= {minimum}")
    return value


@dataclass(frozen=True, slots=True)
class PromiseCreate:
    """A checked `promise.create` request."""

    id: str
    timeout_at: int
    param: dict
    tags: dict
    delay_at: int | None  # resonate:delay: the first execute waits until then

    @property
    def target(self) -> str | None:
        return self.tags.get(TAG_TARGET)


def parse_promise_create(data: Any) -> PromiseCreate:
    if not isinstance(data, dict):
        raise bad("data must be an object")
    pid = check_id(data.get("id"))
    timeout_at = check_int(data.get("timeoutAt"), "timeoutAt")
    param = check_value(data.get("param"), "param")
    tags = check_tags(data.get("tags"))
    origin = tags.get(TAG_ORIGIN)
    if origin is not None:
        if ":" in origin or not (pid == origin or pid.startswith(origin + ":")):
            raise bad(f"id {pid!r} does not extend its resonate:origin {origin!r}")
    for tag in (TAG_BRANCH, TAG_PARENT):
        ancestor = tags.get(tag)
        if ancestor is not None and not _extends(pid, ancestor):
            raise bad(f"id {pid!r} does not extend its {tag} {ancestor!r}")
    target = tags.get(TAG_TARGET)
    if target is not None:
        parse_address(target, "Invalid resonate:target address")
    delay_at = None
    if TAG_DELAY in tags:
        try:
            delay_at = int(tags[TAG_DELAY])
        except ValueError:
            raise bad("resonate:delay must be a time in ms") from None
        if target is None:
            raise bad("resonate:delay requires a resonate:target")
        if delay_at >= timeout_at:
            raise bad("resonate:delay must be before timeoutAt")
    return PromiseCreate(pid, timeout_at, param, tags, delay_at)


def parse_settle(data: Any) -> tuple[str, str, dict]:
    if not isinstance(data, dict):
        raise bad("data must be an object")
    pid = check_id(data.get("id"))
    state = data.get("state")
    if state not in SETTLE_STATES:
        raise bad(f"state must be one of {', '.join(sorted(SETTLE_STATES))}")
    return pid, state, check_value(data.get("value"), "value")


# -- addresses ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Address:
    """A `poll://` address: `unicast` reaches one connection (`pid`), anycast any live
    member of `group`, preferring `pid` when it is given and connected."""

    unicast: bool
    group: str  # lower case: a URL host
    pid: str | None


def parse_address(text: Any, problem: str = "Invalid address") -> Address:
    address = _poll_address(text) if isinstance(text, str) else None
    if address is None:
        raise bad(problem)
    return address


@functools.lru_cache(maxsize=4096)  # a workflow names the same few addresses several times
def _poll_address(text: str) -> Address | None:
    try:
        url = urlsplit(text)
        host = url.hostname
    except ValueError:
        return None
    if url.scheme != "poll" or url.username not in ("uni", "any") or not host:
        return None
    pid = url.path.strip("/") or None
    if url.username == "uni" and pid is None:
        return None
    return Address(url.username == "uni", host.lower(), pid)


# -- envelopes ------------------------------------------------------------------------------
def response(kind: str, corr_id: str, status: int, data: Any) -> dict:
    return {
        "kind": kind,
        "head": {"corrId": corr_id, "status": status, "version": PROTOCOL_VERSION},
        "data": data,
    }


def execute_message(task_id: str, version: int) -> dict:
    return {"kind": "execute", "head": {}, "data": {"task": {"id": task_id, "version": version}}}


def unblock_message(promise: dict) -> dict:
    return {"kind": "unblock", "head": {}, "data": {"promise": promise_wire(promise)}}
