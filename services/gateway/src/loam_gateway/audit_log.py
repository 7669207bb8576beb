"""The gateway's side of the audit log (loam_common.audit): every REST write on a job or
a queue (retry, remove, promote, cancel, change priority, edit-and-retry, pause,
resume, drain, clean, redrive, a bulk batch, enqueue) is recorded with who made it
(token id, role, actions), what, on which queue and job, how many jobs it touched and
when, once the action has succeeded.

The record is written by the gateway right after the action, in its own transaction on
the same store: the action itself runs in the queue core (another process in a
deployment), which does not know the caller's token. A gateway that stops between the
action and the record loses that record (decision 0034). A gateway without a store
(`loam gateway` without `--store`) keeps no log: `GET /v1/audit` says so.
"""

from __future__ import annotations

import logging
from typing import Any

from loam_common import auth
from loam_common.audit import audit_append, audit_page
from loam_common.auth import Principal

log = logging.getLogger("loam.gateway.audit")


def role_of(actions: frozenset[str]) -> str:
    """The console's roles (docs/console.md) as sets of actions."""
    if actions >= auth.ACTIONS - {auth.READ}:
        return "admin"
    if auth.ADMIN in actions:
        return "operator"
    if auth.READ in actions:
        return "viewer"
    return "other"


class AuditLog:
    def __init__(self, store: Any) -> None:
        self.store = store

    async def record(
        self, p: Principal, action: str, queue: str = "", job: str = "", count: int = 1, detail: str = ""
    ) -> dict[str, Any] | None:
        """Record an action that succeeded. A failure to record is logged, not raised: the
        action has happened, and the caller must hear that it did."""
        entry = {
            "action": action, "queue": queue, "job": job, "count": count, "detail": detail[:512],
            "token_id": p.token_id, "role": role_of(p.actions), "actions": sorted(p.actions),
        }  # fmt: skip
        try:
            return await self.store.transact(audit_append, p.namespace, entry)
        except Exception:  # noqa: BLE001 - see the docstring
            log.exception("audit: could not record %s on %s/%s", action, queue, job)
            return None

    async def page(
        self, ns: str, before: str, queue: str | None, job: str | None, limit: int
    ) -> tuple[list[dict[str, Any]], str]:
        return await self.store.snapshot(audit_page, ns, before, queue, job, limit)


async def audited(request: Any, p: Principal, action: str, queue: str = "", job: str = "", count: int = 1,
                  detail: str = "") -> None:  # fmt: skip
    """Record `action` in the app's audit log, if it keeps one."""
    audit: AuditLog | None = getattr(request.app.state, "audit", None)
    if audit is not None:
        await audit.record(p, action, queue, job, count, detail)
