"""What the web console needs that the rest of the REST facade did not have, for every
client, documented in `/openapi.json`; and the console's static files at `/console`.

- `GET /v1/whoami`: the caller's namespace and actions (the console shows only what the
  token may do), whether auth is on.
- `GET /v1/queues:stats`: per queue, what the counts do not say: the oldest waiting
  job's age and the totals since the queue was made (enqueued, leased, completed by
  outcome, stalled). Read from the store-derived metrics in one snapshot for the whole
  namespace, so it costs the same as one scrape of `/metrics`.
- `GET /v1/queues/{queue}/workers`: the workers that leased from the queue, most
  recently seen first (which job each holds is the `worker` of the active jobs).
- `POST /v1/queues/{queue}/jobs/{job}:change-priority`: BullMQ's changePriority.
- `GET /v1/events?queue=a&queue=b`: the events of up to MAX_QUEUES queues in one
  Server-Sent Events stream (a browser holds about six connections to a server, so a
  page showing many queues cannot open a stream per queue). The messages are those of
  rest_events; a snapshot carries `queue`; the `id` is one cursor for every queue
  (each queue's Watch cursor), so `Last-Event-ID` / `?cursor=` resumes them all.
  Left out of `/openapi.json` like the other streams.
- `POST /v1/queues/{queue}/jobs/{job}:retry-with-payload`: replace a finished job's
  payload, then retry it ("edit, then retry"); a job that cannot be retried is refused
  before its payload changes.
- `GET /v1/queues/{queue}/dead-letters:preview`: what a redrive of this dead-letter
  queue would move, and where each job would go, before doing it.
- `GET /v1/queues/{queue}/jobs:search`, `.../failures`, `.../jobs:export`: finding jobs
  (rest_search.py).
- `POST /v1/queues/{queue}/batches`, `GET /v1/batches/{id}`: bulk actions as tracked
  batches (rest_batches.py).
- `GET /console/...`: the built single-page app (console/dist, `make console`); any
  path under it that is not a file gets index.html, so deep links load the app.

Reads are open to a `jobs:read` token (the viewer role, loam_gateway.connect.READABLE);
writes need the method's own action.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from loam_common import cloudevents, validate
from loam_common.api.methods import operation
from loam_common.auth import Principal
from loam_common.errors import InvalidArgument, InvalidState
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.jobs import states as S
from loam_common.jobs.dlq import ORIGIN_QUEUE
from loam_gateway.rest import (
    ERROR_RESPONSES,
    PRIORITY_MAX,
    JobActionResult,
    JobRef,
    JobView,
    QueueName,
    _Model,
    _proto,
    counts_view,
    job_view,
    payload_in,
    redactor,
)
from loam_gateway.rest_batches import build_batches_router
from loam_gateway.rest_events import (
    SSE_MEDIA_TYPE,
    Cursor,
    DataMode,
    LastEventId,
    Limit,
    cloud_event_json,
    redact_event,
    sse,
)
from loam_gateway.rest_search import build_search_router

CONSOLE_DIR_ENV = "LOAM_CONSOLE_DIR"
MAX_QUEUES = 50  # queues in one /v1/events stream


class WhoAmI(BaseModel):
    namespace: str
    actions: list[str] = Field(description="what this credential may do: jobs:read, jobs:admin, ...")
    auth: bool = Field(description="false: the server runs without auth (loopback only, every action)")
    token_id: str = Field(description="the token's public id; empty without auth")
    expires_ns: int = Field(description="when the token expires (ns since the epoch); 0: never")


class QueueStats(BaseModel):
    name: str
    oldest_waiting_age_ns: int = Field(description="how long the next job to serve has waited; 0: none waits")
    enqueued_total: int
    leased_total: int
    stalled_total: int
    completed_total: dict[str, int] = Field(description="completions by outcome: ok, fail, retry, ...")


class QueueStatsList(BaseModel):
    at_ns: int = Field(description="when these were read (the server's clock, ns)")
    queues: list[QueueStats]


class WorkerView(BaseModel):
    id: str
    last_seen_ns: int
    queues: list[str]


class WorkerList(BaseModel):
    workers: list[WorkerView]


class ChangePriorityBody(_Model):
    priority: int = Field(ge=0, le=PRIORITY_MAX, description="0: the FIFO band; 1.. lower first")
    lifo: bool = False


RETRYABLE = ("completed", "failed", "dead-lettered", "canceled")


class PayloadBody(_Model):
    data: Any = Field(None, description="the new payload as JSON")
    data_base64: str | None = Field(None, description="the new payload's bytes, instead of data")
    content_type: str | None = Field(None, max_length=256)


class RedriveMove(BaseModel):
    job: JobView
    to_queue: str = Field(description="the queue it goes back to; empty: it has none and stays")


class RedrivePreview(BaseModel):
    ready: int = Field(description="the dead letters a redrive takes (waiting and prioritized)")
    sample: list[RedriveMove] = Field(description="up to `limit` of them, with where each goes")
    to_queues: dict[str, int] = Field(description="in the sample: how many go to each queue ('' : none)")


# one sample of the Prometheus text: name{labels} value
_SAMPLE = re.compile(r"^(loam_jobs_[a-z_]+)\{([^}]*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_stats(text: str, now_ns: int) -> QueueStatsList:
    """The per-queue figures of the store-derived metrics text (loam_common.metrics)."""
    by_queue: dict[str, QueueStats] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is None:
            continue
        name, labels, value = m.group(1), dict(_LABEL.findall(m.group(2))), float(m.group(3))
        queue = labels.get("queue")
        if queue is None:
            continue
        q = by_queue.get(queue)
        if q is None and name != "loam_jobs_dlq_depth":
            q = by_queue[queue] = QueueStats(name=queue, oldest_waiting_age_ns=0, enqueued_total=0,
                                             leased_total=0, stalled_total=0, completed_total={})  # fmt: skip
        if name == "loam_jobs_oldest_waiting_seconds":
            q.oldest_waiting_age_ns = int(value * 1e9)
        elif name == "loam_jobs_enqueued_total":
            q.enqueued_total = int(value)
        elif name == "loam_jobs_leased_total":
            q.leased_total = int(value)
        elif name == "loam_jobs_stalled_total":
            q.stalled_total = int(value)
        elif name == "loam_jobs_completed_total" and "outcome" in labels:
            q.completed_total[labels["outcome"]] = int(value)
    return QueueStatsList(at_ns=now_ns, queues=sorted(by_queue.values(), key=lambda q: q.name))


def encode_cursors(cursors: dict[str, bytes]) -> str:
    raw = json.dumps(
        {q: base64.b64encode(c).decode() for q, c in sorted(cursors.items())}, separators=(",", ":")
    )
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursors(text: str) -> dict[str, bytes]:
    try:
        raw = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        if not isinstance(raw, dict):
            raise ValueError
        return {str(q): base64.b64decode(c, validate=True) for q, c in raw.items()}
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError):
        raise InvalidArgument(
            "cursor", "is not a cursor this stream sent (Last-Event-ID / ?cursor=)"
        ) from None


async def merged_watch(router, ns: str, queues: list[str], cursors: dict[str, bytes]):
    """One Watch per queue, merged: yields (queue, WatchResponse). Each stream's first
    message is awaited before this returns, so a refusal (no such queue, a stale cursor)
    is an HTTP error rather than a broken stream."""
    its = {q: router.stream(ns, "watch", J.WatchRequest(selector=J.Selector(queue=q), cursor=cursors.get(q, b"")))
           for q in queues}  # fmt: skip
    firsts = {}
    try:
        for q, it in its.items():
            firsts[q] = await anext(it)
    except BaseException:
        for it in its.values():
            await it.aclose()
        raise
    out: asyncio.Queue = asyncio.Queue(maxsize=256)

    async def pump(q: str, it) -> None:
        await out.put((q, firsts[q]))
        async for item in it:
            await out.put((q, item))

    tasks = [asyncio.create_task(pump(q, it)) for q, it in its.items()]

    async def items() -> AsyncIterator[tuple[str, J.WatchResponse]]:
        try:
            while True:
                yield await out.get()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for it in its.values():
                await it.aclose()

    return items()


def console_dir() -> Path | None:
    """console/dist: $LOAM_CONSOLE_DIR, else the repo's own build next to this package."""
    given = os.environ.get(CONSOLE_DIR_ENV)
    if given:
        return Path(given)
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "console" / "dist"
        if candidate.is_dir():
            return candidate
    return None


NOT_BUILT = """<!doctype html><html lang="en"><meta charset="utf-8"><title>Loam console</title>
<body style="font-family:system-ui;max-width:40rem;margin:3rem auto">
<h1>The console is not built</h1><p>Run <code>make console</code> in the repository, then reload.</p></body></html>"""


def build_console_router() -> APIRouter:
    api = APIRouter()

    def caller(name: str):
        op = operation(name)  # a name not in the method table fails as the router is built

        async def dep(request: Request) -> Principal:
            return await request.app.state.access.check(request.headers, op)

        return Depends(dep)

    @api.get("/v1/whoami", response_model=WhoAmI, tags=["console"], responses=ERROR_RESPONSES,
             summary="The caller's namespace and actions")  # fmt: skip
    async def whoami(request: Request) -> WhoAmI:
        access = request.app.state.access
        p = await access.identify(request.headers)
        return WhoAmI(namespace=p.namespace, actions=sorted(p.actions), auth=access.authenticator is not None,
                      token_id=p.token_id, expires_ns=p.expires_ns)  # fmt: skip

    @api.get("/v1/queues:stats", response_model=QueueStatsList, tags=["queues"], responses=ERROR_RESPONSES,
             summary="Per queue: the oldest waiting job's age and the totals since the queue was made")  # fmt: skip
    async def queue_stats(request: Request, p: Principal = caller("queue_list")) -> QueueStatsList:
        text = await request.app.state.router.metrics_text(p.namespace)
        return parse_stats(text, time.time_ns())

    @api.get("/v1/events", tags=["events"], response_class=StreamingResponse, include_in_schema=False,
             summary="Watch several queues in one stream (Server-Sent Events, CloudEvents)")  # fmt: skip
    async def events(
        request: Request,
        queue: Annotated[list[str], Query(min_length=1, max_length=MAX_QUEUES, description="the queues to watch")],
        cursor: Cursor = None, last_event_id: LastEventId = None, limit: Limit = 0, data: DataMode = "protobuf",
        p: Principal = caller("watch"),
    ) -> StreamingResponse:  # fmt: skip
        queues = list(dict.fromkeys(queue))
        for q in queues:
            validate.name("queue", q)
        given = cursor or last_event_id
        cursors = decode_cursors(given) if given else {}
        items = await merged_watch(request.app.state.router, p.namespace, queues, cursors)

        redact = redactor(request, p)

        async def body() -> AsyncIterator[bytes]:
            n = 0
            try:
                async for q, item in items:
                    if item.cursor:
                        cursors[q] = item.cursor
                    kind = item.WhichOneof("item")
                    if kind == "event":
                        ev = redact_event(item.event, redact) if redact is not None else item.event
                        doc = cloud_event_json(p.namespace, ev, data)
                        yield sse(
                            cloudevents.event_type(item.event.event), json.dumps(doc), encode_cursors(cursors)
                        )
                        n += 1
                        if limit and n >= limit:
                            return
                    elif item.HasField("counts"):
                        yield sse(
                            "snapshot",
                            json.dumps({"queue": q, "counts": counts_view(item.counts).model_dump()}),
                        )
                    elif item.ready:
                        yield sse("ready", json.dumps({"queue": q}), encode_cursors(cursors))
                    elif kind is None:
                        yield sse(None, None, encode_cursors(cursors), "heartbeat")
            finally:
                await items.aclose()

        return StreamingResponse(body(), media_type=SSE_MEDIA_TYPE,
                                 headers={"cache-control": "no-cache", "x-accel-buffering": "no"})  # fmt: skip

    @api.get("/v1/queues/{queue}/workers", response_model=WorkerList, tags=["queues"], responses=ERROR_RESPONSES,
             summary="The workers that leased from the queue, most recently seen first")  # fmt: skip
    async def workers(request: Request, queue: QueueName, p: Principal = caller("workers")) -> WorkerList:
        req = _proto(lambda: J.QueueAdminRequest(queue=queue, op=J.QueueOp(workers={})))
        r = await request.app.state.router.call(p.namespace, "queue_admin", req)
        return WorkerList(workers=[WorkerView(id=w.id, last_seen_ns=w.last_seen_ns, queues=list(w.queues))
                                   for w in r.workers])  # fmt: skip

    @api.post("/v1/queues/{queue}/jobs/{job}:retry-with-payload", response_model=JobActionResult, tags=["jobs"],
              responses=ERROR_RESPONSES, summary="Replace a finished job's payload, then retry it")  # fmt: skip
    async def retry_with_payload(
        request: Request, queue: QueueName, job: JobRef, body: PayloadBody, p: Principal = caller("job_admin"),
    ) -> JobActionResult:  # fmt: skip
        router = request.app.state.router
        payload = payload_in(body.data, body.data_base64, body.content_type)

        async def op(o: J.JobOp) -> J.JobAdminResponse:
            return await router.call(
                p.namespace, "job_admin", _proto(lambda: J.JobAdminRequest(queue=queue, job=job, op=o))
            )

        state = S.name((await op(J.JobOp(get={}))).job.state)
        if state not in RETRYABLE:
            raise InvalidState(job, state, "retry", f"job {job!r} is {state}: only a finished job is retried")
        await op(J.JobOp(update_data=J.JobOp.UpdateData(data=payload)))
        r = await op(J.JobOp(retry={}))
        view = job_view(r.job, redactor(request, p)) if r.HasField("job") else None
        return JobActionResult(job=view, removed=r.removed)

    @api.get("/v1/queues/{queue}/dead-letters:preview", response_model=RedrivePreview, tags=["queues"],
             responses=ERROR_RESPONSES, summary="What a redrive of this dead-letter queue would move, and where")  # fmt: skip
    async def redrive_preview(
        request: Request, queue: QueueName,
        limit: Annotated[int, Query(ge=1, le=200, description="how many dead letters to show")] = 20,
        p: Principal = caller("query"),
    ) -> RedrivePreview:  # fmt: skip
        router = request.app.state.router
        counts = (await router.call(p.namespace, "queue_admin",
                                    _proto(lambda: J.QueueAdminRequest(queue=queue, op=J.QueueOp(counts={}))))).counts  # fmt: skip
        req = _proto(lambda: J.QueryRequest(queue=queue, states=[S.WAITING, S.PRIORITIZED], page_size=limit))
        jobs = (await router.call(p.namespace, "query", req)).jobs
        redact = redactor(request, p)
        sample = [
            RedriveMove(job=job_view(j, redact), to_queue=j.task.headers.get(ORIGIN_QUEUE) or j.origin_queue)
            for j in jobs
        ]
        to_queues: dict[str, int] = {}
        for m in sample:
            to_queues[m.to_queue] = to_queues.get(m.to_queue, 0) + 1
        return RedrivePreview(ready=counts.waiting + counts.prioritized, sample=sample, to_queues=to_queues)

    @api.post("/v1/queues/{queue}/jobs/{job}:change-priority", response_model=JobActionResult, tags=["jobs"],
              responses=ERROR_RESPONSES, summary="Change a waiting job's priority (BullMQ changePriority)")  # fmt: skip
    async def change_priority(
        request: Request, queue: QueueName, job: JobRef,
        body: Annotated[ChangePriorityBody, Body()], p: Principal = caller("job_admin"),
    ) -> JobActionResult:  # fmt: skip
        op = J.JobOp(change_priority=J.JobOp.ChangePriority(priority=body.priority, lifo=body.lifo))
        req = _proto(lambda: J.JobAdminRequest(queue=queue, job=job, op=op))
        r = await request.app.state.router.call(p.namespace, "job_admin", req)
        view = job_view(r.job, redactor(request, p)) if r.HasField("job") else None
        return JobActionResult(job=view, removed=r.removed)

    api.include_router(build_search_router())
    api.include_router(build_batches_router())

    # -- the single-page app ---------------------------------------------------------------
    @api.get("/console", include_in_schema=False)
    async def console_root() -> Response:
        return RedirectResponse("/console/", status_code=308)

    @api.get("/console/{path:path}", include_in_schema=False)
    async def console_files(path: str) -> Response:
        root = console_dir()
        if root is None or not (root / "index.html").is_file():
            return HTMLResponse(NOT_BUILT, status_code=503)
        if path:
            file = (root / path).resolve()
            if file.is_file() and file.is_relative_to(root.resolve()):
                # hashed names (assets/app-<hash>.js) never change: cache them for good
                immutable = file.parent.name == "assets"
                cache = "public, max-age=31536000, immutable" if immutable else "no-cache"
                return FileResponse(file, headers={"cache-control": cache})
            if file.suffix and file.parent.name == "assets":  # a missing asset, not a page
                return Response("not found", status_code=404, media_type="text/plain")
        return FileResponse(root / "index.html", headers={"cache-control": "no-cache"})

    return api
