"""The REST facade's event routes (the console, curl): Watch as Server-Sent Events,
the Arrow / Parquet export, and the admin trim of the event log.

`GET /v1/queues/{queue}/events` and `GET /v1/queues/{queue}/jobs/{job}/events` stream
`text/event-stream`:

    event: snapshot        data: {"counts": {...}} | {"job": {...}}   (the state now)
    event: ready           id: <cursor>                               (events follow)
    event: io.loams.dev.jobs.<name>.v1   id: <cursor>   data: <CloudEvent, JSON structured mode>
    id: <cursor> + ": heartbeat"                                      (keeps the line, moves the cursor)

The `id` of every message is the Watch cursor (base64url), so a browser's EventSource
resumes by itself with `Last-Event-ID`; `?cursor=` does the same by hand. A resumed
stream sends no snapshot. `?data=json` puts the event's JSON mapping in `data`
(`datacontenttype: application/json`) instead of the protobuf in `data_base64`;
`?limit=N` ends the stream after N events (curl, tests). These two routes are left out
of `/openapi.json`: OpenAPI has no way to describe an endless event stream (and a
schema fuzzer would wait on one forever).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import AsyncIterator
from typing import Annotated, Literal

from fastapi import APIRouter, Body, Depends, Header, Query, Request, Response
from fastapi.responses import StreamingResponse
from google.protobuf import json_format
from pydantic import BaseModel, ConfigDict, Field

from loam_common import cloudevents
from loam_common.api.methods import operation
from loam_common.auth import Principal
from loam_common.errors import InvalidArgument
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_gateway.redaction import Redactor
from loam_gateway.rest import (
    ERROR_RESPONSES,
    INT64,
    JobRef,
    QueueActionResult,
    QueueName,
    _proto,
    counts_view,
    job_view,
    redactor,
)

SSE_MEDIA_TYPE = "text/event-stream"


Cursor = Annotated[
    str | None, Query(max_length=8192, description="resume after this cursor (an event's `id`)")
]
LastEventId = Annotated[
    str | None, Header(alias="last-event-id", max_length=8192, description="EventSource's resume")
]
Limit = Annotated[
    int, Query(ge=0, le=1_000_000, description="end the stream after this many events; 0: never")
]
DataMode = Annotated[
    Literal["protobuf", "json"], Query(description="event data: protobuf (data_base64) or json")
]


class TrimBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    before_ns: int = Field(
        ge=0, le=INT64, description="delete the events older than this (ns since the epoch)"
    )


def encode_cursor(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise InvalidArgument(
            "cursor", "is not a cursor this server sent (Last-Event-ID / ?cursor=)"
        ) from None


def sse(
    event: str | None = None, data: str | None = None, id_: str | None = None, comment: str | None = None
) -> bytes:
    lines = []
    if id_ is not None:
        lines.append(f"id: {id_}")
    if event is not None:
        lines.append(f"event: {event}")
    if comment is not None:
        lines.append(f": {comment}")
    if data is not None:
        lines.extend(f"data: {line}" for line in data.split("\n"))
    return ("\n".join(lines) + "\n\n").encode()


def cloud_event_json(ns: str, ev, data_mode: str) -> dict:
    if data_mode == "json":
        out = cloudevents.attributes(ns, ev)
        out["datacontenttype"] = "application/json"
        out["data"] = json_format.MessageToDict(ev, preserving_proto_field_name=True)
        return out
    return cloudevents.to_structured(ns, ev)


def redact_event(ev, redact: Redactor):
    """The event with its JSON data (progress, a return value) redacted."""
    if not ev.data:
        return ev
    try:
        shown = json.dumps(redact(json.loads(ev.data)), ensure_ascii=False).encode()
    except (ValueError, UnicodeDecodeError):  # not JSON: no fields to hide
        return ev
    out = type(ev)()
    out.CopyFrom(ev)
    out.data = shown
    return out


def render(ns: str, item: J.WatchResponse, data_mode: str, redact: Redactor | None = None) -> bytes:
    cursor = encode_cursor(item.cursor) if item.cursor else None
    kind = item.WhichOneof("item")
    if kind == "event":
        ev = redact_event(item.event, redact) if redact is not None else item.event
        return sse(
            cloudevents.event_type(item.event.event),
            json.dumps(cloud_event_json(ns, ev, data_mode)),
            cursor,
        )
    if kind == "snapshot":
        return sse("snapshot", json.dumps({"job": job_view(item.snapshot, redact).model_dump()}))
    if item.HasField("counts"):
        return sse("snapshot", json.dumps({"counts": counts_view(item.counts).model_dump()}))
    if item.HasField("schedule") or item.HasField("flow"):
        which = "schedule" if item.HasField("schedule") else "flow"
        body = json_format.MessageToDict(getattr(item, which), preserving_proto_field_name=True)
        return sse("snapshot", json.dumps({which: body}))
    if item.ready:
        return sse("ready", "{}", cursor)
    return sse(None, None, cursor, "heartbeat")


def build_events_router() -> APIRouter:
    api = APIRouter(prefix="/v1", responses=ERROR_RESPONSES)

    def caller(name: str):
        """The route's caller, checked for the action the method table gives `name`."""
        op = operation(name)  # a name not in the table fails here, as the router is built

        async def dep(request: Request) -> Principal:
            return await request.app.state.access.check(request.headers, op)

        return Depends(dep)

    async def stream(
        request: Request, p: Principal, req: J.WatchRequest, limit: int, data_mode: str
    ) -> StreamingResponse:
        it = request.app.state.router.stream(p.namespace, "watch", req)
        first = await anext(it)  # a refusal (no such job, a stale cursor) is an HTTP error, not a stream

        async def body() -> AsyncIterator[bytes]:
            n = 0
            redact = redactor(request, p)
            try:
                item = first
                while True:
                    yield render(p.namespace, item, data_mode, redact)
                    if item.HasField("event"):
                        n += 1
                        if limit and n >= limit:
                            return
                    item = await anext(it)
            finally:
                await it.aclose()

        return StreamingResponse(body(), media_type=SSE_MEDIA_TYPE,
                                 headers={"cache-control": "no-cache", "x-accel-buffering": "no"})  # fmt: skip

    def watch_request(selector: J.Selector, cursor: str | None, last_event_id: str | None) -> J.WatchRequest:
        given = cursor or last_event_id
        return J.WatchRequest(selector=selector, cursor=decode_cursor(given) if given else b"")

    @api.get("/queues/{queue}/events", tags=["events"], response_class=StreamingResponse,
             summary="Watch a queue: its counts, then its events (Server-Sent Events, CloudEvents)",
             include_in_schema=False)  # fmt: skip
    async def queue_events(
        request: Request, queue: QueueName, cursor: Cursor = None, last_event_id: LastEventId = None,
        limit: Limit = 0, data: DataMode = "protobuf", p: Principal = caller("watch"),
    ) -> StreamingResponse:  # fmt: skip
        req = _proto(lambda: watch_request(J.Selector(queue=queue), cursor, last_event_id))
        return await stream(request, p, req, limit, data)

    @api.get("/queues/{queue}/jobs/{job}/events", tags=["events"], response_class=StreamingResponse,
             summary="Watch a job: its record, then its events (Server-Sent Events, CloudEvents)",
             include_in_schema=False)  # fmt: skip
    async def job_events(
        request: Request, queue: QueueName, job: JobRef, cursor: Cursor = None, last_event_id: LastEventId = None,
        limit: Limit = 0, data: DataMode = "protobuf", p: Principal = caller("watch"),
    ) -> StreamingResponse:  # fmt: skip
        sel = _proto(lambda: J.Selector(job=J.LeaseToken(queue=queue, job=job)))
        return await stream(request, p, watch_request(sel, cursor, last_event_id), limit, data)

    @api.get("/queues/{queue}/events:export", tags=["events"], response_class=Response,
             summary="A queue's events in a time range as Parquet or Arrow (spec 002 §4 columns)",
             responses={200: {"content": {"application/vnd.apache.parquet": {}, "application/vnd.apache.arrow.file": {}}}})  # fmt: skip
    async def export(
        request: Request, queue: QueueName,
        since_ns: Annotated[int, Query(ge=0, le=INT64, description="from this time (ns), inclusive")] = 0,
        until_ns: Annotated[int | None, Query(ge=0, le=INT64, description="to this time (ns), exclusive")] = None,
        format: Annotated[Literal["parquet", "arrow"], Query(description="Parquet, or the Arrow IPC file format")] = "parquet",
        p: Principal = caller("events_export"),
    ) -> Response:  # fmt: skip
        data, media = await request.app.state.router.export_events(
            p.namespace, queue, since_ns, until_ns, format
        )
        ext = "parquet" if format == "parquet" else "arrow"
        return Response(data, media_type=media,
                        headers={"content-disposition": f'attachment; filename="{queue}-events.{ext}"'})  # fmt: skip

    @api.post("/queues/{queue}/events:trim", response_model=QueueActionResult, tags=["events"],
              summary="Delete the queue's events older than a time from its event log")  # fmt: skip
    async def trim(
        request: Request, queue: QueueName, body: TrimBody = Body(...), p: Principal = caller("queue_admin")
    ) -> QueueActionResult:
        op = J.QueueOp(trim_events=J.QueueOp.TrimEvents(before_ns=body.before_ns))
        r = await request.app.state.router.call(
            p.namespace, "queue_admin", _proto(lambda: J.QueueAdminRequest(queue=queue, op=op))
        )
        return QueueActionResult(affected=r.affected)

    return api
