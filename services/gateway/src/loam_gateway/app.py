"""`create_app(router, authenticator)`: the gateway's ASGI app.

- `/loam.jobs.v1.JobsService/*`: Connect JobsService (JSON, binary, gRPC-Web)
- `/v1/...`: the REST facade (rest.py, rest_events.py, rest_console.py; engine runs in
  rest_engines.py, Flink deployments in rest_flink.py), documented at `/openapi.json`
- `/console/`: the web console (console/, built by `make console`)
- `/healthz` (the process is up), `/readyz` (it can serve: the store or the cores answer)
- `/metrics`: Prometheus text (loam_common.metrics); without auth every namespace, with
  auth a token with jobs:admin sees its own namespace's series only, and a token with
  deployment:admin every namespace's
- with OTEL_TRACES_EXPORTER set, the app is instrumented (loam_common.tracing)
- `/ns/<ns>/...`: any of the above in a dev namespace (connect.NamespacePrefix)

Errors outside the Connect app all take one shape, `{code, message, detail}`, with
Connect's code names and HTTP statuses, so REST clients and the console read one format.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from connectrpc.errors import ConnectError
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from google.protobuf import json_format
from starlette.exceptions import HTTPException as StarletteHTTPException

from loam_common import auth, metrics, tracing
from loam_common.api import codec as api_codec
from loam_common.api.methods import operation
from loam_common.connect_errors import HTTP_STATUS, error_detail, to_connect
from loam_common.direct_http import Route
from loam_common.errors import JobsError
from loam_common.gen.loam.jobs.v1.jobs_connect import JobsServiceASGIApplication
from loam_gateway.audit_log import AuditLog
from loam_gateway.auth import Authenticator
from loam_gateway.connect import Access, GatewayJobsService, NamespacePrefix, strip_namespace
from loam_gateway.guard import GuardPolicy, Refused, RequestGuard, header_dict, refusal_body
from loam_gateway.list_lane import JobListLane
from loam_gateway.metrics_history import MetricsHistory
from loam_gateway.redaction import Redaction
from loam_gateway.rest import build_router
from loam_gateway.rest_console import build_console_router
from loam_gateway.rest_engines import build_engines_router
from loam_gateway.rest_events import build_events_router
from loam_gateway.rest_flink import build_flink_router
from loam_gateway.rest_history import build_history_router
from loam_gateway.rest_quotas import build_quotas_router
from loam_gateway.routing import Router
from loam_gateway.unary_lane import UnaryLane

DEFAULT_PORT = 7720

DURABLE_BASE = "/resonate"
DURABLE_PREFIX = DURABLE_BASE + "/"
_ENVELOPE_PATHS = frozenset({DURABLE_BASE, DURABLE_PREFIX})
_JSON = (b"content-type", b"application/json")
_STATUS_CODES = {404: "not_found", 405: "unimplemented", 401: "unauthenticated", 403: "permission_denied",
                 413: "invalid_argument", 415: "invalid_argument"}  # fmt: skip


def error_json(err: ConnectError) -> JSONResponse:
    code = err.code.value
    body: dict[str, Any] = {"code": code, "message": err.message}
    detail = error_detail(err)
    if detail is not None:
        body["detail"] = json_format.MessageToDict(detail, preserving_proto_field_name=True)
    return JSONResponse(body, status_code=HTTP_STATUS.get(code, 500))


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for e in exc.errors()[:5]:
        loc = ".".join(str(x) for x in e.get("loc", ()) if x != "body") or "body"
        parts.append(f"{loc}: {e.get('msg', 'is invalid')}")
    return "; ".join(parts) or "invalid request"


class GatewayApp(FastAPI):
    """FastAPI, with the common Connect call served first by the `UnaryLane` and the job
    list by the `JobListLane`, before FastAPI's middleware; anything the lanes do not
    take goes the usual way."""

    unary_lane: UnaryLane | None = None
    #: the console's job list, served the same way (list_lane.py)
    list_lane: JobListLane | None = None
    #: the Resonate-protocol app, served straight from here too: a durable step is two
    #: small requests, and FastAPI's routing and middleware would cost more than the step
    durable_app: Any = None

    #: the browser, size and auth-first checks every HTTP request passes first (guard.py)
    guard: RequestGuard | None = None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            if self.guard is not None:
                if (
                    self.durable_app is not None
                    and scope["method"] == "POST"
                    and scope["path"] in _ENVELOPE_PATHS
                ):
                    await self._durable_envelope(self.guard, scope, receive, send)
                    return
                await self.guard(scope, receive, send, self._serve)
                return
        await self._serve(scope, receive, send)

    def direct_routes(self) -> tuple[dict[str, Route], int]:
        """The paths the HTTP server answers without ASGI (loam_common.direct_http), with
        the largest body they take: the durable envelope, answered as `_durable_envelope`
        answers it, and the unary Connect calls of the common shape, as the request
        guard and the `UnaryLane` answer them."""
        guard, durable, lane = self.guard, self.durable_app, self.unary_lane
        if guard is None:
            return {}, 0
        routes: dict[str, Route] = {}
        if durable is not None:

            async def envelope(
                headers: dict[str, str], body: bytes, cors: list | Refused
            ) -> tuple[int, list, bytes]:
                if isinstance(cors, Refused):
                    return _refused(cors)
                status, raw = await durable.answer(body, headers)
                return status, [_JSON, *cors], raw

            routes |= dict.fromkeys(_ENVELOPE_PATHS, Route(envelope, check=guard.post_verdict))
        if lane is not None:
            for path in lane.direct_paths():
                routes[path] = Route(
                    _connect_call(guard, lane, path), lane.takes, lane.long_poll(path), guard.post_verdict
                )
        return routes, guard.policy.max_body_bytes

    async def _durable_envelope(self, guard: RequestGuard, scope: dict, receive: Any, send: Any) -> None:
        """`POST /resonate/`, a durable step's two requests: the guard's checks on headers
        decoded once, the body read here within the guard's limit, then the envelope,
        with none of the per-message wrapping the general path puts around an app.
        (`/ns/<ns>/resonate/`, the dev namespace prefix, takes the general path.)"""
        headers = header_dict(scope)
        extra = await guard.check_open_post(scope, headers, send)
        if extra is None:
            return  # refused, answered
        limit = guard.policy.max_body_bytes
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await guard.too_large(send)
                return
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        await self.durable_app.envelope(body, headers, send, extra)

    async def _serve(self, scope: dict, receive: Any, send: Any) -> None:
        lanes = (self.unary_lane, self.list_lane, self.durable_app)
        if scope["type"] == "http" and any(lane is not None for lane in lanes):
            lane_scope = strip_namespace(scope) if scope["path"].startswith("/ns/") else scope
            path = lane_scope["path"]
            if self.durable_app is not None and (path.startswith(DURABLE_PREFIX) or path == DURABLE_BASE):
                root = lane_scope.get("root_path", "") + DURABLE_BASE
                await self.durable_app(dict(lane_scope, root_path=root), receive, send)
                return
            if self.unary_lane is not None and await self.unary_lane(lane_scope, receive, send):
                return
            if self.list_lane is not None and await self.list_lane(lane_scope, receive, send):
                return
        await super().__call__(scope, receive, send)


def _refused(r: Refused) -> tuple[int, list, bytes]:
    """The request guard's answer to a refusal, for a direct route."""
    return r.status, [_JSON], json.dumps(refusal_body(r)).encode()


def _connect_call(guard: RequestGuard, lane: UnaryLane, path: str) -> Any:
    """A unary Connect method's direct route: the request guard's checks (those of the
    headers alone made once per head: `RequestGuard.post_verdict`), then the lane."""

    async def call(headers: dict[str, str], body: bytes, cors: list | Refused) -> tuple[int, list, bytes]:
        if isinstance(cors, Refused):
            return _refused(cors)
        try:
            await guard.check_credential(path, headers)
        except Refused as r:
            return _refused(r)
        status, out, payload = await lane.answer(path, headers, body)
        return status, [*out, *cors], payload

    return call


def create_app(
    router: Router,
    authenticator: Authenticator | None = None,
    *,
    on_startup: Callable[[], Awaitable[None]] | None = None,
    on_shutdown: Callable[[], Awaitable[None]] | None = None,
    durable: Any = None,
    guard: GuardPolicy | None = None,
    redaction: Redaction | None = None,
    audit: AuditLog | None = None,
    metrics_history: MetricsHistory | None = None,
) -> FastAPI:
    """The gateway app. `on_startup` / `on_shutdown` run in its lifespan (dev starts its
    sweeper there and closes the store). `durable` (a durable_mount.DurableMount) adds
    durable mode: the Resonate-protocol app at `/resonate` and `/v1/durable/...`. `guard`
    is the request policy (guard.py); by default a loopback server's. `redaction`: the
    payload fields REST hides (loam_gateway.redaction); `audit`: the audit log `/v1/audit`
    reads (the core writes each action's record; loam_gateway.audit_log); `metrics_history`: the sampler behind
    `/v1/queues/{q}/metrics`, started and stopped with the app."""
    access = Access(authenticator)
    metrics_operation = operation("metrics")

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if on_startup is not None:
            await on_startup()
        if metrics_history is not None:
            metrics_history.start()
        try:
            yield
        finally:
            if metrics_history is not None:
                await metrics_history.stop()
            await router.close()
            if on_shutdown is not None:
                await on_shutdown()

    app = GatewayApp(
        title="Loam Jobs",
        version="1",
        description=(
            "The REST facade of Loam Jobs (the console, curl). The full API is the Connect service "
            "`loam.jobs.v1.JobsService` at `/loam.jobs.v1.JobsService/<Method>`. In dev (no auth), "
            "prefix any path with `/ns/<namespace>` or send `x-loam-namespace` to pick a namespace; "
            "with auth, send `authorization: Bearer <token>`: the token names the namespace."
        ),
        lifespan=lifespan,
    )
    app.state.router = router
    app.state.access = access
    app.state.redaction = redaction or Redaction()
    app.state.audit = audit
    app.state.metrics_history = metrics_history

    @app.exception_handler(ConnectError)
    async def _connect_error(request: Request, exc: ConnectError) -> JSONResponse:
        return error_json(exc)

    @app.exception_handler(JobsError)
    async def _jobs_error(request: Request, exc: JobsError) -> JSONResponse:
        return error_json(to_connect(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(
            {"code": "invalid_argument", "message": _validation_message(exc)}, status_code=400
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_CODES.get(exc.status_code, "invalid_argument" if exc.status_code < 500 else "internal")
        return JSONResponse({"code": code, "message": str(exc.detail)}, status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))  # fmt: skip

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        ok = await router.ready()
        return JSONResponse({"status": "ready" if ok else "unavailable"}, status_code=200 if ok else 503)

    @app.get("/metrics", include_in_schema=False)
    async def prometheus(request: Request) -> Response:
        ns = None
        if access.authenticator is not None:  # auth on: the token's namespace only,
            principal = await access.identify(request.headers)
            if not principal.can(auth.DEPLOYMENT_ADMIN):  # but the operator's sees them all
                ns = (await access.check(request.headers, metrics_operation)).namespace
        return Response(await router.metrics_text(ns), media_type=metrics.CONTENT_TYPE)

    if durable is not None:
        app.durable_app = durable.asgi(access)
        app.include_router(durable.rest_router())
    app.include_router(build_router())
    app.include_router(build_events_router())
    app.include_router(build_flink_router())
    app.include_router(build_console_router())  # /v1/whoami, queues:stats, ...; /console
    app.include_router(build_history_router())  # /v1/queues/{q}/metrics, /v1/audit
    app.include_router(build_quotas_router())  # /v1/quotas
    app.include_router(build_engines_router())
    connect_app = JobsServiceASGIApplication(GatewayJobsService(router, access), codecs=api_codec.codecs())
    app.mount(connect_app.path, connect_app)
    app.add_middleware(NamespacePrefix, connect_app=connect_app)
    app.unary_lane = UnaryLane(connect_app)
    app.list_lane = JobListLane(app.state, error_json)
    # By default: with auth, any Host (an in-process app knows no bind address); without,
    # the loopback names. The commands pass their bind address and flags.
    policy = guard or GuardPolicy.for_server(
        "0.0.0.0" if authenticator else "127.0.0.1", authenticator is not None
    )
    app.guard = RequestGuard(policy, authenticator)
    return tracing.instrument_asgi(app)
