"""What the console shows of the past, for every client:

- `GET /v1/queues/{queue}/metrics?range=1h|24h|7d`: the queue's metrics history
  (loam_gateway.metrics_history): throughput, failures, depth, oldest waiting age, wait
  and run time percentiles, a point per step.
- `GET /v1/audit?queue=&job=&before=&limit=`: the namespace's audit log, newest first
  (loam_gateway.audit_log): who did what to which queue or job, when.

Both are reads, open to a `jobs:read` token.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field

from loam_common import validate
from loam_common.api.methods import operation
from loam_common.audit import PAGE_MAX
from loam_common.auth import Principal
from loam_common.errors import InvalidArgument
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_gateway.audit_log import AuditLog
from loam_gateway.metrics_history import RANGES, MetricsHistory
from loam_gateway.rest import ERROR_RESPONSES, QueueName, _proto

RangeName = Literal["1h", "24h", "7d"]


class MetricsPoint(BaseModel):
    t_ns: int = Field(description="the end of the step this point covers")
    enqueued: int = Field(description="jobs created in the step")
    completed: int = Field(description="jobs completed (outcome ok) in the step")
    failed: int = Field(description="attempts that failed in the step (outcomes fail and retry)")
    depth: int = Field(description="jobs waiting, prioritized or delayed at the end of the step")
    active: int = Field(description="jobs held by workers at the end of the step")
    oldest_wait_s: float = Field(
        description="how long the next job to serve had waited, at the end of the step"
    )
    wait_p50_s: float | None = Field(
        description="ready to leased, of the jobs leased in the step; null: none"
    )
    wait_p95_s: float | None
    wait_p99_s: float | None
    run_p50_s: float | None = Field(description="leased to completed, of the jobs completed in the step")
    run_p95_s: float | None
    run_p99_s: float | None


class MetricsHistoryView(BaseModel):
    queue: str
    range: RangeName
    step_ns: int = Field(description="the time a point covers")
    enabled: bool = Field(description="false: this gateway keeps no history")
    points: list[MetricsPoint] = Field(description="oldest first; empty until two samples were taken")


class AuditEntry(BaseModel):
    id: str = Field(description="pass as `before` to read the entries older than this one")
    at_ns: int
    action: str = Field(description="job.retry, job.remove, queue.pause, batch.retry, ...")
    queue: str
    job: str = Field(description="the job id; empty for a queue or batch action")
    count: int = Field(description="jobs the action touched")
    detail: str
    token_id: str = Field(description="the token that acted; empty without auth")
    role: str = Field(description="viewer, operator, admin or other, from the token's actions")
    actions: list[str]
    via: str = Field("", description="the transport the action came by: rest or connect")
    batch: str = Field("", description="the bulk batch this action was a part of (its id); empty if none")


class AuditPage(BaseModel):
    entries: list[AuditEntry] = Field(description="newest first")
    next_before: str = Field(description="pass as `before` for the next page; empty at the end")
    enabled: bool = Field(description="false: this gateway has no store to keep the log in")


def build_history_router() -> APIRouter:
    api = APIRouter(prefix="/v1", responses=ERROR_RESPONSES)

    def caller(name: str):
        op = operation(name)  # a name not in the method table fails as the router is built

        async def dep(request: Request) -> Principal:
            return await request.app.state.access.check(request.headers, op)

        return Depends(dep)

    @api.get("/queues/{queue}/metrics", response_model=MetricsHistoryView, tags=["queues"],
             summary="The queue's metrics history: throughput, failures, depth, wait and run time")  # fmt: skip
    async def queue_metrics(
        request: Request, queue: QueueName,
        range: Annotated[RangeName, Query(description="1h (a point per sample), 24h (5 min), 7d (1 h)")] = "1h",
        p: Principal = caller("queue_get"),
    ) -> MetricsHistoryView:  # fmt: skip
        # a queue that does not exist is a 404, not an empty chart
        req = _proto(lambda: J.QueueAdminRequest(queue=queue, op=J.QueueOp(counts={})))
        await request.app.state.router.call(p.namespace, "queue_admin", req)
        history: MetricsHistory | None = getattr(request.app.state, "metrics_history", None)
        if history is None:
            step = int((RANGES[range][0] or 0) * 1e9)
            return MetricsHistoryView(queue=queue, range=range, step_ns=step, enabled=False, points=[])
        points = [MetricsPoint(**x) for x in await history.points(p.namespace, queue, range)]
        return MetricsHistoryView(queue=queue, range=range, step_ns=history.steps_ns[range], enabled=True,
                                  points=points)  # fmt: skip

    @api.get("/audit", response_model=AuditPage, tags=["audit"],
             summary="The audit log: who did what to which queue or job, newest first")  # fmt: skip
    async def audit(
        request: Request,
        queue: Annotated[str | None, Query(max_length=128, description="only this queue's entries")] = None,
        job: Annotated[str | None, Query(max_length=256, description="only this job's (with queue)")] = None,
        before: Annotated[str, Query(max_length=64, description="an entry's id: the entries older than it")] = "",
        limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = 50,
        p: Principal = caller("queue_list"),
    ) -> AuditPage:  # fmt: skip
        if queue is not None:
            validate.name("queue", queue)
        if job is not None and queue is None:
            raise InvalidArgument("job", "give the job's queue too")
        log: AuditLog | None = getattr(request.app.state, "audit", None)
        if log is None:
            return AuditPage(entries=[], next_before="", enabled=False)
        entries, next_before = await log.page(p.namespace, before, queue, job, limit)
        return AuditPage(entries=[AuditEntry(**e) for e in entries], next_before=next_before, enabled=True)

    return api
