"""The audit log: who did what to which queue or job, when, with which token and role
(the console's actions and every REST write on jobs and queues). One JSON record per
action under `t/<ns>/audit/<at_ns><nonce>` (keys.py), so a namespace's log reads newest
first by one reverse scan, and a namespace's tenants see only their own.

Records older than RETENTION_NS are deleted by the append that finds them (a few at a
time), so the log needs no sweeper of its own.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from typing import Any

from loam_common import keys
from loam_common.errors import InvalidArgument
from loam_common.store.base import Txn

RETENTION_NS = 90 * 86_400 * 10**9
TRIM_PER_APPEND = 64
PAGE_MAX = 500
EXAMINED_MAX = 5_000  # entries a filtered read looks at before it returns a cursor


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
