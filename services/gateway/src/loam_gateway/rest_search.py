"""Finding jobs (REST, for the console and every client): search, failures grouped by
cause, export. Each walks the job list's own cursor (Query) and checks each job with
the rules of job_search.py, so its cost is bounded per call, never a scan of a queue.

- `GET /v1/queues/{queue}/jobs:search`: jobs whose id or key, task name, payload,
  result or error text contains a text, by state, a page at a time. It walks the job
  list's own cursor (Query) and checks each job, so a call examines at most
  SEARCH_EXAMINED jobs or runs SEARCH_BUDGET_S, then answers with what it found and the
  cursor to go on from: a page may be short, or empty, with a next token.
  Payloads kept in the blob store (over 16 KiB) are not searched.
- `GET /v1/queues/{queue}/failures?state=failed`: the failed (or dead-lettered) jobs
  grouped by error signature (job_search.error_signature): count, first and last seen,
  a few job ids; over the newest FAILURES_EXAMINED of them. A group's jobs are retried
  or removed by a batch whose filter names the signature.
- `GET /v1/queues/{queue}/jobs:export?format=ndjson|json|csv`: the jobs of a filter
  (states, task name, search text), streamed as they are listed, up to EXPORT_MAX.
"""

from __future__ import annotations

import csv
import io
import time
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from loam_common.api.methods import operation
from loam_common.auth import Principal
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.jobs import states as S
from loam_gateway.job_search import SearchField, error_signature, job_matches
from loam_gateway.rest import ERROR_RESPONSES, JobView, QueueName, StateName, _proto, job_view, redactor

SEARCH_EXAMINED = 20_000  # jobs one search call looks at, at most
SEARCH_BUDGET_S = 0.3  # and about this long
SEARCH_CHUNK = 200  # jobs per Query inside a search
FAILURES_EXAMINED = 20_000  # failed jobs one grouping looks at, newest first
GROUP_SAMPLE = 5
EXPORT_MAX = 1_000_000  # jobs in one export
EXPORT_CSV_COLUMNS = ("id", "queue", "name", "state", "priority", "attempt", "attempts_max", "job_key", "worker",
                      "created_ns", "processed_ns", "finished_ns", "state_ns", "last_error")  # fmt: skip


class SearchPage(BaseModel):
    jobs: list[JobView]
    next_page_token: str = Field(description="go on from here (page_token); empty: every job was examined")
    examined: int = Field(description="jobs looked at by this call")


class FailureGroup(BaseModel):
    signature: str = Field(
        description="the last error's code and message with numbers, ids and quoted values blanked"
    )
    count: int
    first_seen_ns: int
    last_seen_ns: int
    example: str = Field(description="one full message of the group")
    jobs: list[str] = Field(description=f"up to {GROUP_SAMPLE} job ids, newest first")


class FailureGroups(BaseModel):
    groups: list[FailureGroup] = Field(description="largest first")
    examined: int
    complete: bool = Field(
        description="false: there were more failed jobs than were examined (the newest were)"
    )


def build_search_router() -> APIRouter:
    api = APIRouter()

    def caller(name: str):
        op = operation(name)  # a name not in the method table fails as the router is built

        async def dep(request: Request) -> Principal:
            return await request.app.state.access.check(request.headers, op)

        return Depends(dep)

    @api.get("/v1/queues/{queue}/jobs:search", response_model=SearchPage, tags=["jobs"], responses=ERROR_RESPONSES,
             summary="Jobs whose id, task name, payload, result or error contains a text, newest first")  # fmt: skip
    async def search(
        request: Request,
        queue: QueueName,
        text: Annotated[str, Query(min_length=1, max_length=256, description="the text to find (any case)")],
        field: Annotated[
            SearchField, Query(alias="in", description="where to look; any: everywhere")
        ] = "any",
        state: Annotated[
            list[StateName] | None, Query(description="one or more states; none: all jobs")
        ] = None,
        name: Annotated[str | None, Query(max_length=256, description="only this task name")] = None,
        page_size: Annotated[int, Query(ge=1, le=200, description="stop once this many are found")] = 50,
        page_token: Annotated[str, Query(max_length=4096)] = "",
        p: Principal = caller("query"),
    ) -> SearchPage:
        needle, token, examined, found = text.lower(), page_token, 0, []
        redact = redactor(request, p)
        deadline = time.monotonic() + SEARCH_BUDGET_S
        states = [S.BY_NAME[x] for x in state or ()]

        def page(at: str) -> J.QueryRequest:
            return _proto(
                lambda: J.QueryRequest(
                    queue=queue, states=states, name=name or "", page_size=SEARCH_CHUNK, page_token=at
                )
            )

        while True:
            req = page(token)
            r = await request.app.state.router.call(p.namespace, "query", req)
            examined += len(r.jobs)
            found += [j for j in r.jobs if job_matches(j, needle, field, redact)]
            token = r.next_page_token
            if (
                not token
                or len(found) >= page_size
                or examined >= SEARCH_EXAMINED
                or time.monotonic() > deadline
            ):
                break
        return SearchPage(jobs=[job_view(j, redact) for j in found], next_page_token=token, examined=examined)

    @api.get("/v1/queues/{queue}/failures", response_model=FailureGroups, tags=["jobs"], responses=ERROR_RESPONSES,
             summary="Failed jobs grouped by error signature: count, first and last seen")  # fmt: skip
    async def failures(
        request: Request, queue: QueueName,
        state: Annotated[Literal["failed", "dead-lettered"], Query(description="which failures")] = "failed",
        p: Principal = caller("query"),
    ) -> FailureGroups:  # fmt: skip
        groups: dict[str, FailureGroup] = {}
        token, examined = "", 0

        def page(at: str) -> J.QueryRequest:
            return _proto(
                lambda: J.QueryRequest(queue=queue, states=[S.BY_NAME[state]], page_size=500, page_token=at)
            )

        while examined < FAILURES_EXAMINED:
            req = page(token)
            r = await request.app.state.router.call(p.namespace, "query", req)
            for j in r.jobs:
                sig = error_signature(j)
                at = j.errors[-1].at_ns if j.errors else j.state_ns
                g = groups.get(sig)
                if g is None:
                    g = groups[sig] = FailureGroup(signature=sig, count=0, first_seen_ns=at, last_seen_ns=at,
                                                   example=j.errors[-1].message if j.errors else "", jobs=[])  # fmt: skip
                g.count += 1
                g.first_seen_ns, g.last_seen_ns = min(g.first_seen_ns, at), max(g.last_seen_ns, at)
                if len(g.jobs) < GROUP_SAMPLE:
                    g.jobs.append(j.id)
            examined += len(r.jobs)
            token = r.next_page_token
            if not token:
                break
        ordered = sorted(groups.values(), key=lambda g: (-g.count, -g.last_seen_ns))
        return FailureGroups(groups=ordered, examined=examined, complete=not token)

    @api.get("/v1/queues/{queue}/jobs:export", tags=["jobs"], response_class=StreamingResponse,
             responses={**ERROR_RESPONSES, 200: {"content": {"application/x-ndjson": {}, "application/json": {},
                                                            "text/csv": {}}}},
             summary="The jobs matching a filter as NDJSON, JSON or CSV, streamed")  # fmt: skip
    async def export(
        request: Request, queue: QueueName,
        format: Annotated[Literal["ndjson", "json", "csv"], Query(description="one job per line, one array, or CSV")] = "ndjson",
        state: Annotated[list[StateName] | None, Query(description="one or more states; none: all jobs")] = None,
        name: Annotated[str | None, Query(max_length=256, description="only this task name")] = None,
        text: Annotated[str | None, Query(min_length=1, max_length=256, description="only jobs containing this text")] = None,
        field: Annotated[SearchField, Query(alias="in", description="where to look for the text")] = "any",
        limit: Annotated[int, Query(ge=0, le=EXPORT_MAX, description="at most this many; 0: up to the maximum")] = 0,
        p: Principal = caller("query"),
    ) -> StreamingResponse:  # fmt: skip
        router = request.app.state.router
        states = [S.BY_NAME[x] for x in state or ()]
        needle = text.lower() if text else None
        cap = limit or EXPORT_MAX
        redact = redactor(request, p)

        def query(token: str) -> J.QueryRequest:
            return _proto(
                lambda: J.QueryRequest(
                    queue=queue, states=states, name=name or "", page_size=500, page_token=token
                )
            )

        first = await router.call(p.namespace, "query", query(""))  # a bad queue or filter is an HTTP error

        def row(view: JobView) -> str:
            d = view.model_dump()
            d["last_error"] = view.errors[-1].message if view.errors else ""
            out = io.StringIO()
            csv.writer(out).writerow([d[c] for c in EXPORT_CSV_COLUMNS])
            return out.getvalue()

        async def body():
            n, r = 0, first
            if format == "csv":
                yield row_header()
            elif format == "json":
                yield "["
            while True:
                for j in r.jobs:
                    if n >= cap:
                        break
                    if needle is not None and not job_matches(j, needle, field, redact):
                        continue
                    view = job_view(j, redact)
                    if format == "csv":
                        yield row(view)
                    else:
                        sep = "," if format == "json" and n else ""
                        yield sep + view.model_dump_json() + ("\n" if format == "ndjson" else "")
                    n += 1
                if n >= cap or not r.next_page_token:
                    break
                r = await router.call(p.namespace, "query", query(r.next_page_token))
            if format == "json":
                yield "]"

        def row_header() -> str:
            out = io.StringIO()
            csv.writer(out).writerow(EXPORT_CSV_COLUMNS)
            return out.getvalue()

        media = {"ndjson": "application/x-ndjson", "json": "application/json", "csv": "text/csv"}[format]
        return StreamingResponse(body(), media_type=media,
                                 headers={"content-disposition": f'attachment; filename="{queue}-jobs.{format}"'})  # fmt: skip

    return api
