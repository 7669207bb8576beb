"""Bulk job actions as tracked batches (REST, for the console and every client).

- `POST /v1/queues/{queue}/batches` `{action, ids | filter}` starts one: retry, remove,
  cancel or promote every job of a selection (up to MAX_IDS ids) or every job matching a
  filter (a state, a task name, a search text as in `jobs:search`, an error signature
  as in `failures`). It answers at once
  (202) with the batch record; the jobs are acted on one by one in the gateway, each
  its own JobAdmin call (so one refusal, a job that moved meanwhile, does not stop the
  others), and the record is rewritten as it goes.
- `GET /v1/batches/{id}?after_version=N&wait_ms=M` reads the record; with
  `after_version`, it waits up to `wait_ms` for a newer one (a long poll on the result
  store, not a loop), so a page follows the progress as it happens.

The record is a result key of the namespace (`loam:batch:<id>`, kept BATCH_TTL_NS), so
it is as tenant-scoped and as durable as the result store, and every gateway can read
it; it says who started it (the token id), what, when, how many jobs and which failed:
the audit trail of a bulk action. A batch runs in the gateway process that took it:
if that process stops, the record stays `running` with the count it reached.

In the audit log (loam_gateway.audit_log) the batch has a summary, written before its
first job is acted on, whose count each job's action raises in its own transaction, and
whose detail the gateway rewrites with the record (how many done, succeeded, failed);
each job's action has its own record too, with the batch's id.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from connectrpc.errors import ConnectError
from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, Field, model_validator

from loam_common.api.methods import operation
from loam_common.audit import ACTOR, current_actor
from loam_common.auth import Principal
from loam_common.errors import InvalidArgument, NotFound
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S
from loam_gateway.audit_log import AuditLog
from loam_gateway.job_search import SearchField, error_signature, job_matches
from loam_gateway.redaction import Redactor
from loam_gateway.rest import ERROR_RESPONSES, QueueName, StateName, _Model, _proto, redactor

log = logging.getLogger("loam.gateway.batches")

BatchAction = Literal["retry", "remove", "cancel", "promote"]
MAX_IDS = 10_000
MAX_FAILURES_KEPT = 100
BATCH_TTL_NS = 7 * 86_400 * 10**9
WRITE_EVERY_S = 0.25  # how often a running batch rewrites its record
PAGE = 200
WAIT_MAX_MS = 30_000
_running: set[asyncio.Task] = set()  # strong references: a task nobody holds may be collected


class BatchFilter(_Model):
    state: StateName = Field(description="the jobs in this state")
    name: str | None = Field(None, max_length=256, description="only this task name")
    text: str | None = Field(None, min_length=1, max_length=256, description="only jobs containing this text")
    field: SearchField = Field("any", description="where to look for the text")
    signature: str | None = Field(
        None, max_length=256, description="only jobs with this error signature (GET .../failures)"
    )


class BatchBody(_Model):
    action: BatchAction
    ids: list[Annotated[str, Field(min_length=1, max_length=1024)]] | None = Field(
        None, max_length=MAX_IDS, description="these jobs (ids or job keys)"
    )
    filter: BatchFilter | None = Field(
        None, description="every job matching this, as listed when the batch runs"
    )

    @model_validator(mode="after")
    def _one_selection(self) -> BatchBody:
        if (self.ids is None) == (self.filter is None):
            raise ValueError("give ids or filter, not both or neither")
        if self.ids is not None and not self.ids:
            raise ValueError("ids is empty")
        return self


class BatchFailure(BaseModel):
    job: str
    code: str
    message: str


class BatchView(BaseModel):
    id: str
    queue: str
    action: BatchAction
    selection: Literal["ids", "filter"]
    filter: BatchFilter | None = None
    state: Literal["running", "done"]
    total: int | None = Field(description="jobs selected; unknown (null) for a filter until it is done")
    done: int = Field(description="jobs acted on so far, succeeded or not")
    succeeded: int
    failed: int
    failures: list[BatchFailure] = Field(description=f"the first {MAX_FAILURES_KEPT} failures")
    started_ns: int
    finished_ns: int
    by: str = Field(description="the token id that started it (empty without auth)")
    version: int = Field(0, description="pass as after_version to wait for the next change")


def batch_key(batch_id: str) -> str:
    return f"loam:batch:{batch_id}"


_OPS = {"retry": lambda: J.JobOp(retry={}), "remove": lambda: J.JobOp(remove={}),
        "cancel": lambda: J.JobOp(cancel={}), "promote": lambda: J.JobOp(promote={})}  # fmt: skip


async def _selected(router, ns: str, queue: str, body: BatchBody, redact: Redactor | None = None):
    """The job ids to act on, a chunk at a time."""
    if body.ids is not None:
        for i in range(0, len(body.ids), PAGE):
            yield body.ids[i : i + PAGE]
        return
    f = body.filter
    needle = f.text.lower() if f.text else None
    token = ""
    while True:
        req = J.QueryRequest(
            queue=queue, states=[S.BY_NAME[f.state]], name=f.name or "", page_size=PAGE, page_token=token
        )
        r = await router.call(ns, "query", req)
        yield [
            j.id
            for j in r.jobs
            if (needle is None or job_matches(j, needle, f.field, redact))
            and (f.signature is None or error_signature(j) == f.signature)
        ]
        token = r.next_page_token
        if not token:
            return


async def _save(router, ns: str, view: BatchView) -> None:
    value = pb.Payload(
        data=view.model_dump_json(exclude={"version"}).encode(), content_type="application/json"
    )
    await router.call(
        ns, "result_set", J.ResultSetRequest(key=batch_key(view.id), value=value, ttl_ns=BATCH_TTL_NS)
    )


def summary_detail(view: BatchView) -> str:
    """The batch's audit summary: how far it got, and its filter."""
    what = f"batch {view.id}: " + (f"running, {view.done} done: " if view.state == "running" else "")
    what += f"{view.succeeded} succeeded, {view.failed} failed"
    if view.filter is not None:
        what += f"; filter {view.filter.model_dump_json(exclude_none=True)}"
    return what


async def run_batch(
    router, ns: str, view: BatchView, body: BatchBody, redact: Redactor | None = None,
    on_progress: Callable[[BatchView], Awaitable[None]] | None = None,
) -> None:  # fmt: skip
    """Act on every selected job, rewriting the record (and, first, `on_progress`: the
    audit summary) every WRITE_EVERY_S and once done, so a reader that sees the record
    done sees the summary's last word."""

    async def save() -> None:
        if on_progress is not None:
            await on_progress(view)
        await _save(router, ns, view)

    last_write = time.monotonic()
    try:
        async for chunk in _selected(router, ns, view.queue, body, redact):
            for job in chunk:
                try:
                    await router.call(
                        ns, "job_admin", J.JobAdminRequest(queue=view.queue, job=job, op=_OPS[view.action]())
                    )
                    view.succeeded += 1
                except ConnectError as e:
                    view.failed += 1
                    if len(view.failures) < MAX_FAILURES_KEPT:
                        view.failures.append(BatchFailure(job=job, code=e.code.value, message=e.message))
                view.done += 1
                if time.monotonic() - last_write > WRITE_EVERY_S:
                    await save()
                    last_write = time.monotonic()
    except Exception as e:
        log.exception("batch %s stopped", view.id)
        view.failures.append(BatchFailure(job="", code="internal", message=f"the batch stopped: {e}"))
    view.state = "done"
    view.total = view.done if view.total is None else view.total
    view.finished_ns = time.time_ns()
    await save()


def build_batches_router() -> APIRouter:
    api = APIRouter(prefix="/v1", responses=ERROR_RESPONSES)

    def caller(name: str):
        op = operation(name)  # a name not in the method table fails as the router is built

        async def dep(request: Request) -> Principal:
            return await request.app.state.access.check(request.headers, op)

        return Depends(dep)

    @api.post("/queues/{queue}/batches", response_model=BatchView, status_code=202, tags=["jobs"],
              summary="Retry, remove, cancel or promote many jobs as one tracked batch")  # fmt: skip
    async def start(
        request: Request, queue: QueueName, body: BatchBody, p: Principal = caller("job_admin")
    ) -> BatchView:
        router = request.app.state.router
        # the queue must exist (and be this namespace's): a typo is an error now, not a failed batch
        await router.call(
            p.namespace,
            "queue_admin",
            _proto(lambda: J.QueueAdminRequest(queue=queue, op=J.QueueOp(counts={}))),
        )
        view = BatchView(
            id=secrets.token_hex(8), queue=queue, action=body.action, selection="ids" if body.ids else "filter",
            filter=body.filter, state="running", total=len(body.ids) if body.ids else None, done=0, succeeded=0,
            failed=0, failures=[], started_ns=time.time_ns(), finished_ns=0, by=p.token_id,
        )  # fmt: skip
        # the summary first: a batch is never acted on unrecorded
        audit: AuditLog | None = getattr(request.app.state, "audit", None)
        summary = ""
        if audit is not None:
            summary = await audit.start_batch(p, f"batch.{body.action}", queue, view.id, summary_detail(view))
        await _save(router, p.namespace, view)

        async def progress(now: BatchView) -> None:
            if audit is not None:
                await audit.set_detail(p.namespace, summary, summary_detail(now))

        runner = run_batch(
            router, p.namespace, view.model_copy(deep=True), body, redactor(request, p), progress
        )
        # each job's action is audited by the core, as a part of this batch, and raises
        # the summary's count in its own transaction
        context = contextvars.copy_context()
        actor = context.run(current_actor)
        if actor is not None:
            context.run(ACTOR.set, actor.in_batch(view.id, summary))
        task = asyncio.create_task(runner, context=context)
        _running.add(task)
        task.add_done_callback(_running.discard)
        return view

    @api.get("/batches/{id}", response_model=BatchView, tags=["jobs"],
             summary="A batch's progress; with after_version, wait for the next change")  # fmt: skip
    async def get(
        request: Request,
        id: Annotated[str, Path(pattern=r"^[0-9a-f]{16}$", description="the batch id")],
        after_version: Annotated[
            int, Query(ge=0, description="wait until the record is newer than this")
        ] = 0,
        wait_ms: Annotated[
            int, Query(ge=0, le=WAIT_MAX_MS, description="how long to wait (with after_version)")
        ] = 0,
        p: Principal = caller("job_get"),
    ) -> BatchView:
        req = J.ResultGetRequest(key=batch_key(id), after_version=after_version,
                                 wait_ns=wait_ms * 1_000_000 if after_version else 0)  # fmt: skip
        r = await request.app.state.router.call(p.namespace, "result_get", req)
        if not r.found:
            raise NotFound(f"no batch {id!r} (or it is older than its retention)")
        try:
            doc: dict[str, Any] = json.loads(r.value.data)
        except ValueError:
            raise InvalidArgument("id", "does not name a batch") from None
        return BatchView(**doc, version=r.version)

    return api
