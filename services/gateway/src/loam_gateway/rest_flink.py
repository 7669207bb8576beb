"""The REST routes of Flink on Loam (`/v1/engines/flink/...`): parse, call the Flink facade
(`loam_engines.flink.facade.FlinkEngine`, found at `app.state.flink`), return its view.

    POST /v1/engines/flink/artifacts?filename=job.jar     body: the file   -> {artifact, kind, size}
    GET  /v1/engines/flink/deployments                                      -> {deployments: [...]}
    POST /v1/engines/flink/deployments                     {name, artifact | sql, ...}
    GET  /v1/engines/flink/deployments/{name}              the record, with Flink's view of the job
    GET  /v1/engines/flink/deployments/{name}/logs         the lifecycle log
    POST /v1/engines/flink/deployments/{name}:savepoint | :suspend | :resume | :upgrade | :rollback | :cancel

Every route needs the `jobs:engine` action; the namespace is the caller's. A server that runs
no Flink engine answers 400 `failed_precondition`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from loam_common.api.methods import operation
from loam_common.auth import Principal
from loam_common.errors import InvalidArgument, JobsError
from loam_gateway.rest import ERROR_RESPONSES

DeploymentName = Annotated[str, Path(description="the deployment name: 1-128 of A-Z a-z 0-9 . _ : @ -")]
MAX_ARTIFACT_BYTES = 256 * 1024 * 1024


class JobSpecBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    artifact: str | None = Field(None, max_length=300, description="an uploaded artifact (`<sha256>/<file>`)")
    sql: str | None = Field(
        None, max_length=1_000_000, description="Flink SQL statements, instead of an artifact"
    )
    entry_class: str | None = Field(None, max_length=512, description="a jar job's main class")
    args: list[str] = Field(default_factory=list, max_length=256, description="the program's arguments")
    parallelism: int = Field(1, ge=1, le=256)
    config: dict[str, str] = Field(default_factory=dict, description="Flink options for this job")
    allow_non_restored_state: bool = Field(
        False, description="start even if savepoint state has no operator to go to"
    )
    upgrade_mode: Literal["savepoint", "last-state", "stateless"] = Field(
        "savepoint", description="how an upgrade to this version carries the state"
    )


class DeployBody(JobSpecBody):
    name: str = Field(max_length=128, description="the deployment name")
    savepoint: str | None = Field(None, max_length=4096, description="start from this savepoint")
    savepoint_interval_s: int = Field(0, ge=0, le=366 * 86400, description="a savepoint this often (0: none)")


class ResumeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    savepoint: str | None = Field(
        None, max_length=4096, description="a recorded savepoint; default the newest"
    )


class RollbackBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: int | None = Field(
        None, ge=1, description="the version to run; default the one before the current"
    )
    savepoint: str | None = Field(
        None, max_length=4096, description="a recorded savepoint; default that version's newest"
    )


class NoFlinkEngine(JobsError):
    # A state of this server, not a fault: the caller can act on it, so not a 5xx.
    code = "failed_precondition"


def _spec(body: JobSpecBody) -> dict[str, Any]:
    return body.model_dump(include=set(JobSpecBody.model_fields))


_ENGINE_OPERATION = operation("submit_engine_job")  # the action every engine call needs: jobs:engine


async def _caller(request: Request) -> Principal:
    return await request.app.state.access.check(request.headers, _ENGINE_OPERATION)


Caller = Annotated[Principal, Depends(_caller)]  # module level: the annotations are strings


def build_flink_router() -> APIRouter:
    api = APIRouter(prefix="/v1/engines/flink", responses=ERROR_RESPONSES, tags=["flink"])

    def engine(request: Request):
        found = getattr(request.app.state, "flink", None)
        if found is None:
            raise NoFlinkEngine(
                "this server runs no Flink engine (make engines-flink, then start the engine runner)"
            )
        return found

    @api.post("/artifacts", summary="Upload a job artifact (.jar, .py, .sql) as the request body")
    async def upload(request: Request, p: Caller,
                     filename: Annotated[str, Query(max_length=128, description="the artifact's file name")]) -> dict:  # fmt: skip
        flink = engine(request)
        data = bytearray()
        async for chunk in request.stream():
            data += chunk
            if len(data) > MAX_ARTIFACT_BYTES:
                raise InvalidArgument("artifact", f"is larger than {MAX_ARTIFACT_BYTES} bytes")
        return await flink.artifact_put(p.namespace, filename, bytes(data))

    @api.get("/deployments", summary="The namespace's Flink deployments")
    async def list_deployments(request: Request, p: Caller) -> dict:
        return {"deployments": await engine(request).deployment_list(p.namespace)}

    @api.post("/deployments", status_code=201, summary="Deploy a jar, PyFlink or SQL job")
    async def deploy(request: Request, p: Caller, body: Annotated[DeployBody, Body()]) -> dict:
        return await engine(request).deployment_create(p.namespace, body.name, _spec(body), body.savepoint,
                                                       body.savepoint_interval_s)  # fmt: skip

    @api.get("/deployments/{name}", summary="A deployment: its record and Flink's view of its job")
    async def get(request: Request, name: DeploymentName, p: Caller) -> dict:
        return await engine(request).deployment_get(p.namespace, name)

    @api.get("/deployments/{name}/logs", summary="The deployment's lifecycle log, oldest first")
    async def logs(request: Request, name: DeploymentName, p: Caller,
                   limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> dict:  # fmt: skip
        return {"lines": await engine(request).deployment_logs(p.namespace, name, limit)}

    @api.post("/deployments/{name}:savepoint", summary="Take a savepoint; the job keeps running")
    async def savepoint(request: Request, name: DeploymentName, p: Caller) -> dict:
        return await engine(request).deployment_savepoint(p.namespace, name)

    @api.post("/deployments/{name}:suspend", summary="Stop the job with a savepoint")
    async def suspend(request: Request, name: DeploymentName, p: Caller) -> dict:
        return await engine(request).deployment_suspend(p.namespace, name)

    @api.post("/deployments/{name}:resume", summary="Run the suspended job again from a savepoint")
    async def resume(request: Request, name: DeploymentName, p: Caller,
                     body: Annotated[ResumeBody | None, Body()] = None) -> dict:  # fmt: skip
        return await engine(request).deployment_resume(p.namespace, name, body.savepoint if body else None)

    @api.post("/deployments/{name}:upgrade", summary="Stop with a savepoint, run a new version from it")
    async def upgrade(
        request: Request, name: DeploymentName, p: Caller, body: Annotated[JobSpecBody, Body()]
    ) -> dict:
        return await engine(request).deployment_upgrade(p.namespace, name, _spec(body))

    @api.post("/deployments/{name}:rollback", summary="Run a recorded version from a recorded savepoint")
    async def rollback(request: Request, name: DeploymentName, p: Caller,
                       body: Annotated[RollbackBody | None, Body()] = None) -> dict:  # fmt: skip
        b = body or RollbackBody()
        return await engine(request).deployment_rollback(p.namespace, name, b.version, b.savepoint)

    @api.post("/deployments/{name}:cancel", summary="Cancel the job (no savepoint)")
    async def cancel(request: Request, name: DeploymentName, p: Caller) -> dict:
        return await engine(request).deployment_cancel(p.namespace, name)

    return api
