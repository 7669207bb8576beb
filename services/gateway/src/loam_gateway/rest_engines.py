"""Engine runs over REST, under `/v1/engines/...`: the same JobsService engine calls as
Connect (SubmitEngineJob, GetEngineRun, ListEngineRuns, ListEngineRunLogs,
ControlEngineJob), the same access checks (jobs:engine), mapped onto JSON.

- `POST /v1/engines/spark/runs`: submit a PySpark script (`source` as text or
  `source_base64`) as a SparkBatch run, or with `"jvm": true` a SparkSubmit run; with
  `schedule` nothing runs now and the schedule's id comes back;
- `GET /v1/engines/runs` (newest first), `GET /v1/engines/runs/{run}`;
- `GET /v1/engines/runs/{run}/logs?after=N&wait_ms=M`: the lines after N, waiting up
  to M ms for the next one;
- `GET /v1/engines/runs/{run}/logs:stream`: the log as Server-Sent Events (`event: line`,
  `id` the line's number, `data` the line as JSON), each line as it is written, then
  `event: end` once the run is over; `Last-Event-ID` (or `?after=`) resumes. Left out of
  `/openapi.json`, like the other event streams;
- `POST /v1/engines/runs/{run}/cancel`;
- `POST /v1/engines/flink/runs`: deploy a Flink job (a jar or PyFlink script as
  `source_base64`, or `sql`) as a run that lasts as long as the deployment;
- `POST /v1/engines/runs/{run}/{action}`: any other control action — `restart` of a
  finished Spark run; `savepoint`, `suspend`, `resume`, `upgrade`, `rollback`, `cancel`,
  `status` of a Flink run (its record's `flink` says when they are done).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Header, Path, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from loam_common.api.methods import operation
from loam_common.auth import Principal
from loam_common.errors import InvalidArgument
from loam_common.gen.loam.jobs.v1 import engines_pb2 as E
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_gateway.rest import ERROR_RESPONSES, _proto

INT64 = 2**63 - 1
STATES = {
    E.ENGINE_RUN_STATE_QUEUED: "queued",
    E.ENGINE_RUN_STATE_RUNNING: "running",
    E.ENGINE_RUN_STATE_RETRYING: "retrying",
    E.ENGINE_RUN_STATE_SUCCEEDED: "succeeded",
    E.ENGINE_RUN_STATE_FAILED: "failed",
    E.ENGINE_RUN_STATE_CANCELED: "canceled",
}
KINDS = {E.ENGINE_KIND_SAIL: "sail", E.ENGINE_KIND_SPARK_JVM: "spark-jvm", E.ENGINE_KIND_FLINK: "flink"}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EngineScheduleBody(_Model):
    id: str = Field(min_length=1, max_length=128)
    cron: str | None = Field(None, max_length=256)
    every_s: float | None = Field(None, gt=0, le=10**9)
    tz: str | None = Field(None, max_length=64)


class SparkRunBody(_Model):
    entrypoint: str = Field(description="the script's file name, e.g. nightly.py", max_length=256)
    source: str | None = Field(None, description="the script, as text")
    source_base64: str | None = Field(None, description="the script, base64")
    args: list[str] = Field(default_factory=list, max_length=256)
    conf: dict[str, str] = Field(default_factory=dict)
    jvm: bool = Field(False, description="spark-submit on Apache Spark (RDD / SparkContext code)")
    attempts: int = Field(1, ge=1, le=100)
    timeout_s: float = Field(0, ge=0, le=7 * 24 * 3600, description="per attempt; 0 = one hour")
    name: str = Field("", max_length=256)
    schedule: EngineScheduleBody | None = None


class FlinkSpecBody(_Model):
    entrypoint: str = Field(
        "", max_length=128, description="the artifact's file name: job.jar, job.py or job.sql"
    )
    source_base64: str | None = Field(None, description="the jar, PyFlink script or SQL file, base64")
    sql: str | None = Field(None, max_length=1_000_000, description="Flink SQL statements, instead of a file")
    entry_class: str = Field("", max_length=512, description="a jar job's main class")
    args: list[str] = Field(default_factory=list, max_length=256)
    parallelism: int = Field(0, ge=0, le=256, description="0 = 1")
    config: dict[str, str] = Field(default_factory=dict, description="Flink options of this job")
    allow_non_restored_state: bool = False
    upgrade_mode: Literal["", "savepoint", "last-state", "stateless"] = Field(
        "", description="how an upgrade to this version carries the state (default savepoint)"
    )


class FlinkDeployBody(FlinkSpecBody):
    deployment: str = Field(max_length=128, description="the deployment's name")
    savepoint: str = Field("", max_length=4096, description="start from this savepoint")
    savepoint_interval_s: int = Field(
        0, ge=0, le=366 * 86400, description="a savepoint this often (0 = none)"
    )


class EngineActionBody(_Model):
    savepoint: str = Field("", max_length=4096, description="resume / rollback: a recorded savepoint")
    version: int = Field(
        0, ge=0, le=2**32 - 1, description="rollback: the version to run (0 = the one before)"
    )
    upgrade: FlinkSpecBody | None = Field(None, description="upgrade: the new version")


class FlinkSavepointView(BaseModel):
    path: str
    version: int
    reason: str
    taken_ns: int


class FlinkLiveView(BaseModel):
    """What Flink's REST API said of the job at the last `status` action."""

    seq: int
    read_ns: int
    job_id: str
    state: str
    all_running: bool
    restarts: int
    checkpoints_completed: int
    checkpoints_failed: int
    last_checkpoint_path: str
    last_checkpoint_ns: int
    savepoint_in_progress: bool
    restored_from: str
    error: str


class FlinkStatusView(BaseModel):
    deployment: str
    state: str
    version: int
    versions: int
    job_id: str
    savepoints: list[FlinkSavepointView]
    pending_action: str
    last_error: str
    actions_requested: int
    actions_done: int
    last_action: str
    last_action_error: str
    timings_ms: dict[str, float]
    status_requested: int = 0
    live: FlinkLiveView | None = None


class EngineAttemptView(BaseModel):
    attempt: int
    started_ns: int
    finished_ns: int
    exit_code: int | None
    error: str
    pid: int


class EngineRunView(BaseModel):
    id: str
    name: str
    engine: str
    kind: str
    entrypoint: str
    state: str
    created_ns: int
    started_ns: int
    finished_ns: int
    exit_code: int | None
    error: str
    schedule: str
    attempts: list[EngineAttemptView]
    log_count: int
    restarted_from: str = ""
    flink: FlinkStatusView | None = None


class EngineSubmitResult(BaseModel):
    run: EngineRunView | None = None
    schedule: str | None = None


class EngineRunList(BaseModel):
    runs: list[EngineRunView]
    next_page_token: str


class EngineLogLineView(BaseModel):
    n: int
    at_ns: int
    stream: str
    line: str


class EngineLogPage(BaseModel):
    lines: list[EngineLogLineView]
    finished: bool


def flink_view(f: E.FlinkStatus) -> FlinkStatusView:
    return FlinkStatusView(
        deployment=f.deployment, state=f.state, version=f.version, versions=f.versions, job_id=f.job_id,
        savepoints=[FlinkSavepointView(path=s.path, version=s.version, reason=s.reason, taken_ns=s.taken_ns)
                    for s in f.savepoints],
        pending_action=f.pending_action, last_error=f.last_error, actions_requested=f.actions_requested,
        actions_done=f.actions_done, last_action=f.last_action, last_action_error=f.last_action_error,
        timings_ms=dict(f.timings_ms), status_requested=f.status_requested,
        live=FlinkLiveView(**{k.name: getattr(f.live, k.name) for k in f.live.DESCRIPTOR.fields}) if f.live.seq else None,
    )  # fmt: skip


def run_view(r: E.EngineRun) -> EngineRunView:
    kind = r.job.WhichOneof("spec") or ""
    return EngineRunView(
        id=r.id,
        name=r.job.name,
        engine=KINDS.get(r.job.engine, "unspecified"),
        kind=kind,
        entrypoint=getattr(r.job, kind).entrypoint if kind else "",
        state=STATES.get(r.state, "unspecified"),
        created_ns=r.created_ns,
        started_ns=r.started_ns,
        finished_ns=r.finished_ns,
        exit_code=r.exit_code if r.HasField("exit_code") else None,
        error=r.error,
        schedule=r.schedule,
        attempts=[
            EngineAttemptView(
                attempt=a.attempt,
                started_ns=a.started_ns,
                finished_ns=a.finished_ns,
                exit_code=a.exit_code if a.HasField("exit_code") else None,
                error=a.error,
                pid=a.pid,
            )  # fmt: skip
            for a in r.attempts
        ],
        log_count=r.log_count,
        restarted_from=r.restarted_from,
        flink=flink_view(r.flink) if kind == "flink" else None,
    )


def _source(body: SparkRunBody) -> bytes:
    if (body.source is None) == (body.source_base64 is None):
        raise InvalidArgument("source", "send the script as exactly one of source or source_base64")
    if body.source is not None:
        return body.source.encode()
    try:
        return base64.b64decode(body.source_base64, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArgument("source_base64", "is not base64") from None


def flink_spec(body: FlinkSpecBody) -> E.FlinkDeployment:
    spec = E.FlinkDeployment(entrypoint=body.entrypoint, sql=body.sql or "", entry_class=body.entry_class,
                             parallelism=body.parallelism, allow_non_restored_state=body.allow_non_restored_state,
                             upgrade_mode=body.upgrade_mode)  # fmt: skip
    if body.source_base64 is not None:
        try:
            spec.source = base64.b64decode(body.source_base64, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgument("source_base64", "is not base64") from None
    spec.args.extend(body.args)
    spec.config.update(body.config)
    return spec


def submit_request(body: SparkRunBody) -> J.SubmitEngineJobRequest:
    job = E.EngineJob(name=body.name, attempts=body.attempts, timeout_ns=int(body.timeout_s * 1e9))
    spec = job.spark_submit if body.jvm else job.spark_batch
    spec.entrypoint = body.entrypoint
    spec.source = _source(body)
    spec.args.extend(body.args)
    spec.conf.update(body.conf)
    req = J.SubmitEngineJobRequest(job=job)
    if body.schedule is not None:
        s = body.schedule
        if (s.cron is None) == (s.every_s is None):
            raise InvalidArgument("schedule", "give exactly one of cron or every_s")
        req.schedule.id = s.id
        if s.cron is not None:
            req.schedule.cron = s.cron
            req.schedule.tz = s.tz or ""
        else:
            req.schedule.every_ns = int(s.every_s * 1e9)
    return req


RunId = Annotated[str, Path(description="the run id", max_length=128)]


def build_engines_router() -> APIRouter:
    api = APIRouter(prefix="/v1/engines", responses=ERROR_RESPONSES, tags=["engines"])

    def caller(name: str):
        """The route's caller, checked for the action the method table gives `name`."""
        op = operation(name)  # a name not in the table fails here, as the router is built

        async def dep(request: Request) -> Principal:
            return await request.app.state.access.check(request.headers, op)

        return Depends(dep)

    async def call(request: Request, p: Principal, method: str, req: Any) -> Any:
        return await request.app.state.router.call(p.namespace, method, req)

    @api.post(
        "/spark/runs", response_model=EngineSubmitResult, summary="Submit a PySpark script as an engine run"
    )
    async def submit(
        request: Request, body: Annotated[SparkRunBody, Body()], p: Principal = caller("submit_engine_job")
    ) -> EngineSubmitResult:
        resp = await call(request, p, "submit_engine_job", submit_request(body))
        if body.schedule is not None:
            return EngineSubmitResult(schedule=resp.schedule)
        return EngineSubmitResult(run=run_view(resp.record))

    @api.post("/flink/runs", response_model=EngineRunView, summary="Deploy a Flink job as an engine run")
    async def deploy_flink(
        request: Request, body: Annotated[FlinkDeployBody, Body()], p: Principal = caller("submit_engine_job")
    ) -> EngineRunView:
        def build() -> J.SubmitEngineJobRequest:
            spec = flink_spec(body)
            spec.deployment = body.deployment
            spec.savepoint = body.savepoint
            spec.savepoint_interval_s = body.savepoint_interval_s
            return J.SubmitEngineJobRequest(job=E.EngineJob(flink=spec))

        return run_view((await call(request, p, "submit_engine_job", _proto(build))).record)

    @api.get("/runs", response_model=EngineRunList, summary="The namespace's engine runs, newest first")
    async def list_runs(
        request: Request,
        page_size: Annotated[int, Query(ge=1, le=1000)] = 100,
        page_token: Annotated[str, Query(max_length=128)] = "",
        p: Principal = caller("list_engine_runs"),
    ) -> EngineRunList:
        req = J.ListEngineRunsRequest(page_size=page_size, page_token=page_token)
        resp = await call(request, p, "list_engine_runs", req)
        return EngineRunList(runs=[run_view(r) for r in resp.runs], next_page_token=resp.next_page_token)

    @api.get("/runs/{run}", response_model=EngineRunView, summary="One engine run")
    async def get_run(request: Request, run: RunId, p: Principal = caller("get_engine_run")) -> EngineRunView:
        resp = await call(request, p, "get_engine_run", J.GetEngineRunRequest(run=run))
        return run_view(resp.record)

    @api.get(
        "/runs/{run}/logs", response_model=EngineLogPage, summary="A run's output lines, optionally waiting"
    )
    async def logs(
        request: Request,
        run: RunId,
        after: Annotated[int, Query(ge=0, le=2**32 - 1)] = 0,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
        wait_ms: Annotated[int, Query(ge=0, le=30_000)] = 0,
        p: Principal = caller("list_engine_run_logs"),
    ) -> EngineLogPage:
        req = J.ListEngineRunLogsRequest(run=run, after=after, limit=limit, wait_ns=wait_ms * 1_000_000)
        resp = await call(request, p, "list_engine_run_logs", req)
        return EngineLogPage(
            lines=[EngineLogLineView(n=x.n, at_ns=x.at_ns, stream=x.stream, line=x.line) for x in resp.lines],
            finished=resp.finished,
        )

    @api.get("/runs/{run}/logs:stream", response_class=StreamingResponse, include_in_schema=False,
             summary="A run's log as Server-Sent Events, line by line, until the run is over")  # fmt: skip
    async def stream_logs(
        request: Request,
        run: RunId,
        after: Annotated[int, Query(ge=0, le=2**32 - 1)] = 0,
        last_event_id: Annotated[str | None, Header(alias="last-event-id", max_length=16)] = None,
        p: Principal = caller("list_engine_run_logs"),
    ) -> StreamingResponse:
        start = int(last_event_id) if last_event_id and last_event_id.isdigit() else after
        # The first page before the stream starts: a run that does not exist is a 404, not a stream.
        first = await call(
            request, p, "list_engine_run_logs", J.ListEngineRunLogsRequest(run=run, after=start)
        )

        async def body() -> AsyncIterator[bytes]:
            page, n = first, start
            while True:
                for x in page.lines:
                    n = x.n
                    line = {"n": x.n, "at_ns": x.at_ns, "stream": x.stream, "line": x.line}
                    yield f"event: line\nid: {x.n}\ndata: {json.dumps(line)}\n\n".encode()
                if page.finished:
                    yield b"event: end\ndata: {}\n\n"
                    return
                if not page.lines:
                    yield b": waiting\n\n"  # keeps proxies from closing a quiet stream
                if await request.is_disconnected():
                    return
                # Long-polls the run's log: woken by the next line, or after 25 s with none.
                req = J.ListEngineRunLogsRequest(run=run, after=n, wait_ns=25 * 10**9)
                page = await call(request, p, "list_engine_run_logs", req)

        return StreamingResponse(body(), media_type="text/event-stream",
                                 headers={"cache-control": "no-cache", "x-accel-buffering": "no"})  # fmt: skip

    @api.post("/runs/{run}/cancel", response_model=EngineRunView, summary="Cancel an engine run")
    async def cancel(
        request: Request, run: RunId, p: Principal = caller("control_engine_job")
    ) -> EngineRunView:
        req = J.ControlEngineJobRequest(run=run, action=E.EngineAction(action="cancel"))
        resp = await call(request, p, "control_engine_job", req)
        return run_view(resp.record)

    @api.post("/runs/{run}/{action}", response_model=EngineRunView,
              summary="A control action: restart (Spark); savepoint, suspend, resume, upgrade, rollback, status (Flink)")  # fmt: skip
    async def control(
        request: Request,
        run: RunId,
        action: Annotated[str, Path(max_length=32, description="the action")],
        body: Annotated[EngineActionBody | None, Body()] = None,
        p: Principal = caller("control_engine_job"),
    ) -> EngineRunView:
        b = body or EngineActionBody()

        def build() -> J.ControlEngineJobRequest:
            act = E.EngineAction(action=action, savepoint=b.savepoint, version=b.version)
            if b.upgrade is not None:
                act.flink.CopyFrom(flink_spec(b.upgrade))
            return J.ControlEngineJobRequest(run=run, action=act)

        resp = await call(request, p, "control_engine_job", _proto(build))
        return run_view(resp.record)

    return api
