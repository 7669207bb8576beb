"""Durable mode inside the gateway. `DurableMount(core, hub)` is the `durable` argument of
`create_app`:

- `asgi(access)`: the Resonate-protocol app (loam_durable) mounted at `/resonate`,
  authenticated by the gateway's own `Access`, so a Resonate SDK's token resolves to a
  namespace and actions exactly as a Connect or REST call's does (`Authorization:
  Bearer` or the envelope's `head.auth`; without auth, in dev on loopback, the
  `/ns/<ns>/` prefix or the default namespace);
- `rest_router()`: visibility in the REST facade, `GET /v1/durable/executions` (the root
  promises, a page at a time), `GET /v1/durable/promises/{id}` (a
  promise tree: each promise's state and timing, each task's state and attempts) and
  `GET`/`PUT /v1/durable/retention` (how long settled workflows are kept), jobs:admin.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Path, Query, Request
from loam_durable.app import SCHEDULE, DurableApp, create_durable_app
from loam_durable.facade import DurableCore
from loam_durable.hub import Hub
from loam_durable.records import DurableError
from pydantic import BaseModel, ConfigDict, Field

from loam_common.api.methods import operation
from loam_common.errors import InvalidArgument, NotFound
from loam_gateway.connect import Access
from loam_gateway.rest import ERROR_RESPONSES


class DurableNode(BaseModel):
    model_config = ConfigDict(extra="allow")
    promise: dict[str, Any] = Field(
        description="the Resonate PromiseRecord (state, tags, timeoutAt, createdAt, settledAt)"
    )
    parent: str | None = Field(None, description="the promise this one was created under")
    task: dict[str, Any] | None = Field(
        None, description="its task: state, version, attempts (acquires so far)"
    )
    timedOut: bool | None = Field(None, description="pending past its timeout, until a timer settles it")


class DurableTree(BaseModel):
    root: str
    promises: list[DurableNode]


class DurableExecution(BaseModel):
    model_config = ConfigDict(extra="allow")
    promise: dict[str, Any] = Field(description="the root's Resonate PromiseRecord (id, state, tags, times)")
    timedOut: bool | None = Field(None, description="pending past its timeout, until a timer settles it")


class DurableExecutions(BaseModel):
    executions: list[DurableExecution]
    cursor: str | None = Field(
        None,
        description="pass as `cursor` for the next page; absent when none follows (a full page may be followed by an empty one)",
    )


class DurableRetention(BaseModel):
    retention_ms: int = Field(ge=1, le=10 * 365 * 24 * 3600 * 1000,
                              description="settled workflows (a root and every promise under it) are deleted this long after the root settled")  # fmt: skip


class DurableMount:
    def __init__(self, core: DurableCore, hub: Hub, internal_token: str | None = None) -> None:
        self.core = core
        self.hub = hub
        self.internal_token = internal_token

    def asgi(self, access: Access) -> DurableApp:
        consume, schedule = operation("resonate"), operation("resonate_schedule")

        async def authenticate(headers: Mapping[str, str], action: str) -> str:
            return (await access.check(headers, schedule if action == SCHEDULE else consume)).namespace

        return create_durable_app(self.core, self.hub, authenticate, self.internal_token)

    def rest_router(self) -> APIRouter:
        api = APIRouter(prefix="/v1/durable", tags=["durable"], responses=ERROR_RESPONSES)
        core = self.core

        admin = operation("durable_admin")

        async def namespace(request: Request) -> str:
            return (await request.app.state.access.check(request.headers, admin)).namespace

        @api.get("/promises/{promise_id}", response_model=DurableTree, response_model_exclude_none=True,
                 summary="A durable promise and every promise under it, with their tasks")  # fmt: skip
        async def promise_tree(
            request: Request, promise_id: Annotated[str, Path(min_length=1, max_length=1024)]
        ) -> Any:
            ns = await namespace(request)
            try:
                return await core.tree(ns, promise_id)
            except DurableError as e:
                raise NotFound(e.message) from None

        @api.get("/executions", response_model=DurableExecutions, response_model_exclude_none=True,
                 summary="The durable executions (root promises), in id order, a page at a time")  # fmt: skip
        async def executions(
            request: Request,
            state: Annotated[Literal["pending", "resolved", "rejected"] | None, Query()] = None,
            id_prefix: Annotated[str, Query(max_length=1024, description="roots whose id starts so")] = "",
            cursor: Annotated[str, Query(max_length=1024)] = "",
            limit: Annotated[int, Query(ge=1, le=200)] = 50,
        ) -> Any:
            return await core.executions(await namespace(request), state, id_prefix, cursor, limit)

        @api.get("/retention", response_model=DurableRetention, summary="How long settled workflows are kept")
        async def retention_get(request: Request) -> Any:
            return DurableRetention(retention_ms=await core.get_retention(await namespace(request)))

        @api.put(
            "/retention", response_model=DurableRetention, summary="Set how long settled workflows are kept"
        )
        async def retention_put(request: Request, body: Annotated[DurableRetention, Body()]) -> Any:
            ns = await namespace(request)
            try:
                cfg = await core.set_retention(ns, body.retention_ms)
            except DurableError as e:
                raise InvalidArgument("retention_ms", e.message) from None
            return DurableRetention(retention_ms=cfg["retentionMs"])

        return api
