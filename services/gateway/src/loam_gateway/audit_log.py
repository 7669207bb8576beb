"""The gateway's side of the audit log (loam_common.audit): reading a namespace's log
(`GET /v1/audit`), and the one record the gateway writes itself, a bulk batch's summary.

Every operator action on a job or a queue (retry, remove, promote, cancel, change
priority or delay, edit the payload, pause, resume, drain, clean, obliterate, retry-all,
promote-all, redrive), through REST or Connect, is recorded by the queue core in the
action's own transaction, with the actor the gateway checked (`Access.check` sets it);
so is each job of a bulk batch, with the batch's id. The batch's summary (how many jobs
succeeded and failed, its filter) is written here once the batch is done: it sums up
actions already recorded, so a gateway that stops before it loses only the summary. A
gateway without a store (`loam gateway` without `--store`) keeps no log: `GET /v1/audit`
says so.
"""

from __future__ import annotations

import logging
from typing import Any

from loam_common.audit import Actor, audit_append, audit_page
from loam_common.auth import Principal

log = logging.getLogger("loam.gateway.audit")


class AuditLog:
    def __init__(self, store: Any) -> None:
        self.store = store

    async def record(
        self, p: Principal, action: str, queue: str = "", count: int = 1, detail: str = "", batch: str = ""
    ) -> dict[str, Any] | None:
        """Record a summary. A failure to record is logged, not raised: the actions it
        sums up have happened (and are recorded each), and the caller must hear that."""
        a = Actor.of(p, "rest")
        entry = {
            "action": action, "queue": queue, "job": "", "count": count, "detail": detail[:512],
            "token_id": a.token_id, "role": a.role, "actions": list(a.actions), "via": a.via, "batch": batch,
        }  # fmt: skip
        try:
            return await self.store.transact(audit_append, p.namespace, entry)
        except Exception:  # noqa: BLE001 - see the docstring
            log.exception("audit: could not record %s on %s", action, queue)
            return None

    async def page(
        self, ns: str, before: str, queue: str | None, job: str | None, limit: int
    ) -> tuple[list[dict[str, Any]], str]:
        return await self.store.snapshot(audit_page, ns, before, queue, job, limit)


async def audited(request: Any, p: Principal, action: str, queue: str = "", count: int = 1, detail: str = "",
                  batch: str = "") -> None:  # fmt: skip
    """Record a summary in the app's audit log, if it keeps one."""
    audit: AuditLog | None = getattr(request.app.state, "audit", None)
    if audit is not None:
        await audit.record(p, action, queue, count, detail, batch)
