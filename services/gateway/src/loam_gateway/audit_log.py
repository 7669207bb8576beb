"""The gateway's side of the audit log (loam_common.audit): reading a namespace's log
(`GET /v1/audit`), and the one record the gateway writes itself, a bulk batch's summary.

Every operator action on a job or a queue (retry, remove, promote, cancel, change
priority or delay, edit the payload, pause, resume, drain, clean, obliterate, retry-all,
promote-all, redrive), through REST or Connect, is recorded by the queue core in the
action's own transaction, with the actor the gateway checked (`Access.check` sets it);
so is each job of a bulk batch, with the batch's id. The batch's summary is written here
when the batch starts, before any of its jobs is acted on (`start_batch`): each job's
action raises the summary's count in its own transaction (the actor carries the
summary's id, loam_common.audit), and the gateway rewrites its detail as the batch goes
on and when it ends (how many succeeded and failed, its filter). So a gateway that dies
mid-batch leaves a summary counting exactly the jobs acted on, saying it was running.
A gateway without a store (`loam gateway` without `--store`) keeps no log:
`GET /v1/audit` says so.
"""

from __future__ import annotations

import logging
from typing import Any

from loam_common.audit import Actor, audit_append, audit_page, audit_set_detail
from loam_common.auth import Principal

log = logging.getLogger("loam.gateway.audit")


class AuditLog:
    def __init__(self, store: Any) -> None:
        self.store = store

    async def start_batch(self, p: Principal, action: str, queue: str, batch: str, detail: str) -> str:
        """Write a bulk batch's summary as it starts (count 0; its jobs' actions raise it)
        and return its id. Raises when it cannot: the batch is not started unrecorded."""
        a = Actor.of(p, "rest")
        entry = {
            "action": action, "queue": queue, "job": "", "count": 0, "detail": detail[:512],
            "token_id": a.token_id, "role": a.role, "actions": list(a.actions), "via": a.via, "batch": batch,
        }  # fmt: skip
        return (await self.store.transact(audit_append, p.namespace, entry))["id"]

    async def set_detail(self, ns: str, record_id: str, detail: str) -> None:
        """Bring a batch summary's detail up to date; a failure is logged (the next update,
        or the batch's end, tries again), not raised into the batch."""
        try:
            await self.store.transact(audit_set_detail, ns, record_id, detail)
        except Exception:  # noqa: BLE001 - see the docstring
            log.warning("audit: could not update the summary %s", record_id, exc_info=True)

    async def page(
        self, ns: str, before: str, queue: str | None, job: str | None, limit: int
    ) -> tuple[list[dict[str, Any]], str]:
        return await self.store.snapshot(audit_page, ns, before, queue, job, limit)
