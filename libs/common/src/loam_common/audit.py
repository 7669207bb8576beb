"""The audit log: who did what to which queue or job, when, with which token and role
(the operator actions on jobs and queues, through REST or Connect). One JSON record per
action under `t/<ns>/audit/<at_ns><nonce>` (keys.py), so a namespace's log reads newest
first by one reverse scan, and a namespace's tenants see only their own.

Who is acting travels as an `Actor` in a context variable (`ACTOR`): the gateway sets it
once it has checked the caller's credential (REST and Connect alike), the Router carries
it to a remote queue core in the `x-loam-actor` header (trusted only on an internal
call), and the core's facade writes the record in the action's own transaction
(`AuditStep`), so an action and its record commit together or not at all. Work that no
caller started (sweeps, schedules, the engine runner) has no actor and is not audited.
A bulk batch's actor also names the batch's summary record (`Actor.summary`), whose
count each of the batch's actions raises in its own transaction.

Records older than RETENTION_NS are deleted by the append that finds them (a few at a
time), so the log needs no sweeper of its own.
"""

from __future__ import annotations

import base64
import binascii
import contextvars
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from loam_common import auth, keys
from loam_common.api.headers import ACTOR_HEADER
from loam_common.errors import InvalidArgument
from loam_common.store.base import Txn

RETENTION_NS = 90 * 86_400 * 10**9
TRIM_PER_APPEND = 64
PAGE_MAX = 500
EXAMINED_MAX = 5_000  # entries a filtered read looks at before it returns a cursor


DETAIL_MAX = 512
_HEADER_MAX = 2048


def role_of(actions: Iterable[str]) -> str:
    """The console's roles (docs/console.md) as sets of actions."""
    actions = frozenset(actions)
    if actions >= auth.ACTIONS - {auth.READ}:
        return "admin"
    if auth.ADMIN in actions:
        return "operator"
    if auth.READ in actions:
        return "viewer"
    return "other"


@dataclass(frozen=True, slots=True)
class Actor:
    """Who an action is taken for: the token's id ("" without auth), the role its actions
    make, its actions, the transport it came by (rest, connect), the bulk batch it is a
    part of ("" for a single action), and the id of that batch's summary record, whose
    count each of the batch's actions raises in its own transaction ("" for none)."""

    token_id: str
    role: str
    actions: tuple[str, ...]
    via: str
    batch: str = ""
    summary: str = ""

    @classmethod
    def of(cls, principal: auth.Principal, via: str) -> Actor:
        return cls(principal.token_id, role_of(principal.actions), tuple(sorted(principal.actions)), via)

    def in_batch(self, batch_id: str, summary: str = "") -> Actor:
        return replace(self, batch=batch_id, summary=summary)

    def header(self) -> str:
        """The actor as the `x-loam-actor` header of an internal call."""
        fields = [self.token_id, self.role, list(self.actions), self.via, self.batch]
        if self.summary:
            fields.append(self.summary)
        return json.dumps(fields, separators=(",", ":"))

    @classmethod
    def from_header(cls, text: str) -> Actor:
        """The actor of an internal call's header; InvalidArgument if it is not one."""
        try:
            if len(text) > _HEADER_MAX:
                raise ValueError("too long")
            token_id, role, actions, via, batch, *more = json.loads(text)
            summary = more.pop() if len(more) == 1 else ""
            if more or not all(isinstance(x, str) for x in (token_id, role, via, batch, summary, *actions)):
                raise ValueError("not strings")
            if summary:
                _suffix(summary)  # a record id, or InvalidArgument
        except (ValueError, TypeError) as e:
            raise InvalidArgument(ACTOR_HEADER, f"is not an actor: {e}") from None
        return cls(token_id, role, tuple(actions), via, batch, summary)


# Who the current request acts for; None outside a caller's request (sweeps, timers).
ACTOR: contextvars.ContextVar[Actor | None] = contextvars.ContextVar("loam_actor", default=None)


def current_actor() -> Actor | None:
    return ACTOR.get()


@dataclass(frozen=True, slots=True)
class AuditStep:
    """One transaction of an audited action, as a transition: `step(tx, ...)` runs the
    action's own transition, then records it in the same transaction: a new record for
    the action's first transaction, or (`record_id`, for the later transactions of an
    action done in bounded batches, such as a drain) the jobs this one touched added to
    the record's count. `count` says how many jobs the transition's result touched;
    `job_of`, when given, which job it names (known only once it ran: an enqueue whose
    key found the existing job), instead of `job`."""

    ns: str
    actor: Actor
    action: str
    queue: str
    job: str = ""
    detail: str = ""
    count: Callable[[Any], int] = lambda _result: 1
    record_id: str = ""
    job_of: Callable[[Any], str] | None = None

    def __call__(self, tx: Txn, fn: Callable[..., Any], *args: Any) -> tuple[Any, str]:
        result = fn(tx, *args)
        n = self.count(result)
        if self.actor.summary:  # a part of a bulk batch: its summary counts it as it commits
            audit_add_count(tx, self.ns, self.actor.summary, n)
        if self.record_id:
            audit_add_count(tx, self.ns, self.record_id, n)
            return result, self.record_id
        a = self.actor
        job = self.job if self.job_of is None else self.job_of(result)
        entry = {
            "action": self.action, "queue": self.queue, "job": job, "count": n,
            "detail": self.detail[:DETAIL_MAX], "token_id": a.token_id, "role": a.role,
            "actions": list(a.actions), "via": a.via, "batch": a.batch,
        }  # fmt: skip
        return result, audit_append(tx, self.ns, entry)["id"]


def audit_add_count(tx: Txn, ns: str, record_id: str, n: int) -> None:
    """Add `n` jobs to the count of the record `record_id` (a later batch of its action)."""
    if not n:
        return
    key = keys.audit_all(ns) + _suffix(record_id)
    raw = tx.get(key)
    if raw is None:  # trimmed by the retention meanwhile: nothing left to add to
        return
    record = json.loads(raw)
    record["count"] = int(record.get("count", 0)) + n
    tx.put(key, json.dumps(record, separators=(",", ":")).encode())


def audit_set_detail(tx: Txn, ns: str, record_id: str, detail: str) -> None:
    """Rewrite the detail of the record `record_id` (a bulk batch's summary, as the batch
    goes on); its count is left as the batch's actions raised it."""
    key = keys.audit_all(ns) + _suffix(record_id)
    raw = tx.get(key)
    if raw is None:  # trimmed by the retention meanwhile
        return
    record = json.loads(raw)
    record["detail"] = detail[:DETAIL_MAX]
    tx.put(key, json.dumps(record, separators=(",", ":")).encode())


def audit_append(tx: Txn, ns: str, entry: dict[str, Any]) -> dict[str, Any]:
    """Add one record (its `at_ns` is the store's clock; its `id` the key's suffix), and
    drop a few of those past the retention."""
    start = keys.audit_all(ns)
    at_ns = tx.now_ns()
    newest = tx.scan(start, keys.prefix_end(start), limit=1, reverse=True)
    if newest:  # strictly after the newest, so the log's order is the order of the actions
        at_ns = max(at_ns, keys.U64.unpack_from(newest[0][0], len(start))[0] + 1)
    nonce = os.urandom(8)
    key = keys.audit_entry(ns, at_ns, nonce)
    record = {**entry, "at_ns": at_ns, "id": _cursor(key, ns)}
    tx.put(key, json.dumps(record, separators=(",", ":")).encode())
    expired = tx.scan(start, keys.audit_entry(ns, max(at_ns - RETENTION_NS, 0), b""), limit=TRIM_PER_APPEND)
    for old, _ in expired:
        tx.delete(old)
    return record


def audit_page(
    tx: Txn, ns: str, before: str = "", queue: str | None = None, job: str | None = None, limit: int = 50
) -> tuple[list[dict[str, Any]], str]:
    """Records newest first, after the cursor `before` (a record's id), of one queue
    (and job) when given; and the cursor of the next page ("" at the end). A filtered
    read looks at EXAMINED_MAX records at most, then returns what it found and a cursor."""
    if not 1 <= limit <= PAGE_MAX:
        raise InvalidArgument("limit", f"must be 1..{PAGE_MAX}")
    start = keys.audit_all(ns)
    end = keys.prefix_end(start) if not before else start + _suffix(before)
    out: list[dict[str, Any]] = []
    examined = 0
    while True:
        rows = tx.scan(start, end, limit=256, reverse=True)
        for key, value in rows:
            examined += 1
            record = json.loads(value)
            if (queue is None or record.get("queue") == queue) and (job is None or record.get("job") == job):
                out.append(record)
                if len(out) == limit:
                    return out, _cursor(key, ns)
            if examined >= EXAMINED_MAX:
                return out, _cursor(key, ns)
        if len(rows) < 256:
            return out, ""
        end = rows[-1][0]


def _cursor(key: bytes, ns: str) -> str:
    return base64.urlsafe_b64encode(key[len(keys.audit_all(ns)) :]).decode().rstrip("=")


def _suffix(cursor: str) -> bytes:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 16:
        raise InvalidArgument("before", "is not an audit record id from this log")
    return raw
