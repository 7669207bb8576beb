"""The namespace's quotas over REST (the admin API of issue 23; Connect: GetQuotas,
SetQuotas):

- `GET /v1/quotas`: the quotas in force, where they come from, and what the namespace
  holds now (jobs:admin);
- `PUT /v1/quotas`: replace the namespace's own quotas whole, a missing or 0 field is
  no limit (deployment:admin);
- `DELETE /v1/quotas`: drop them, back to the deployment's `--quotas` (deployment:admin).

The namespace is the caller's; a change applies without a restart, within a second on
every queue core (loam_queue_core.facade.quotas).
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import Field

from loam_common.api.methods import operation
from loam_common.auth import Principal
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs.quotas import MAX_LIMIT, NAMES
from loam_gateway.rest import ERROR_RESPONSES, _Model, _proto

Limit = Annotated[int, Field(ge=0, le=MAX_LIMIT)]


class QuotaValues(_Model):
    enqueue_rate: Limit = Field(0, description="jobs enqueued per second; 0: no limit")
    stored_jobs: Limit = Field(0, description="jobs stored, every state; 0: no limit")
    payload_bytes: Limit = Field(0, description="payload bytes of the jobs stored; 0: no limit")
    active_leases: Limit = Field(0, description="jobs leased at once; 0: no limit")
    schedules: Limit = Field(0, description="schedules defined; 0: no limit")


class QuotasView(_Model):
    quotas: QuotaValues = Field(description="in force now")
    source: Literal["namespace", "deployment"] = Field(
        description="namespace: set through this API; deployment: the server's --quotas"
    )
    usage: QuotaValues = Field(description="what the namespace holds now (enqueue_rate: this second's)")


def _values(q: pb.NamespaceQuotas) -> QuotaValues:
    return QuotaValues(**{n: getattr(q, n) for n in NAMES})


def _view(r: J.GetQuotasResponse | J.SetQuotasResponse) -> QuotasView:
    return QuotasView(quotas=_values(r.quotas), source=r.source, usage=_values(r.usage))


def build_quotas_router() -> APIRouter:
    api = APIRouter(prefix="/v1", responses=ERROR_RESPONSES, tags=["quotas"])

    def caller(name: str):
        op = operation(name)  # a name not in the method table fails as the router is built

        async def dep(request: Request) -> Principal:
            return await request.app.state.access.check(request.headers, op)

        return Depends(dep)

    async def call(
        request: Request, p: Principal, method: str, req
    ) -> J.GetQuotasResponse | J.SetQuotasResponse:
        return await request.app.state.router.call(p.namespace, method, req)

    @api.get("/quotas", response_model=QuotasView, summary="The namespace's quotas and what it holds")
    async def quotas_get(request: Request, p: Principal = caller("get_quotas")) -> QuotasView:
        return _view(await call(request, p, "get_quotas", J.GetQuotasRequest()))

    @api.put("/quotas", response_model=QuotasView,
             summary="Replace the namespace's quotas (deployment:admin); 0 or missing: no limit")  # fmt: skip
    async def quotas_put(
        request: Request, body: QuotaValues, p: Principal = caller("set_quotas")
    ) -> QuotasView:
        req = _proto(lambda: J.SetQuotasRequest(quotas=pb.NamespaceQuotas(**body.model_dump())))
        return _view(await call(request, p, "set_quotas", req))

    @api.delete("/quotas", response_model=QuotasView,
                summary="Drop the namespace's quotas: the deployment's (--quotas) apply again")  # fmt: skip
    async def quotas_delete(request: Request, p: Principal = caller("set_quotas")) -> QuotasView:
        return _view(await call(request, p, "set_quotas", J.SetQuotasRequest(reset=True)))

    return api
