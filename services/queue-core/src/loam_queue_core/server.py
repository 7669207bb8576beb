"""The queue-core process: `CoreRpc` served as the Connect JobsService for gateways,
plus the internal endpoints the other services call.

Callers are other Loam services, not users: the namespace arrives in the
`x-loam-namespace` header, and is accepted only with `x-loam-internal-token` equal to
the configured internal token (`LOAM_INTERNAL_TOKEN`); with no token configured, only
from loopback peers. Endpoints:

- `/loam.jobs.v1.JobsService/*`  Connect (JSON and binary, gRPC-Web)
- `POST /internal/v1/wake`   `{"ns": .., "queue": ..}`: wake the queue's parked leases
  (the sweeper calls it after it reclaimed or promoted jobs)
- `POST /internal/v1/queues` `{"ns": ..}`: the namespace's queue names (REST listing)
- `POST /internal/v1/events/export` `{"ns", "queue", "since_ns", "until_ns", "format"}`:
  the queue's events as Parquet or Arrow (loam_common.event_export), for the gateway
- `GET /metrics`: Prometheus text (loam_common.metrics): the store-derived counters and
  gauges of every namespace, and this process's histograms; same check as internal
  calls (the token may also come as `authorization: Bearer <token>`, for scrapers);
  `?scope=store` leaves the histograms out (the gateway serves that part)
- `GET /healthz`, `GET /readyz` (ready = the store answers a read)

The Connect service is built from the method table (loam_common.api.service); the
header names are loam_common.api.headers; running the process is loam_common.serving.

Run it with `loam queue-core --store URL --blobs DIR --host 127.0.0.1 --port 7721`.
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import logging
import os
import sys
from collections.abc import AsyncIterator, Mapping
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from loam_common import metrics, tracing, validate
from loam_common.api import codec as api_codec
from loam_common.api.headers import ACTOR_HEADER, NAMESPACE_HEADER, TOKEN_HEADER
from loam_common.api.methods import STREAM_PATHS, Method
from loam_common.api.service import JobsServiceHandlers
from loam_common.api.stream_writes import coalesce_streams
from loam_common.audit import ACTOR, Actor
from loam_common.blobs import open_blobs
from loam_common.errors import InvalidArgument, JobsError, Unauthenticated
from loam_common.event_export import export_bytes
from loam_common.gen.loam.jobs.v1.jobs_connect import JobsServiceASGIApplication
from loam_common.jobs import quotas
from loam_common.loop import configure_logging
from loam_common.serving import error_response, is_loopback, run_server_main, serve
from loam_common.store.runner import open_store
from loam_queue_core.core import QueueCore
from loam_queue_core.histogram_flush import DEFAULT_INTERVAL_S as FLUSH_INTERVAL_S
from loam_queue_core.rpc import CoreRpc

log = logging.getLogger(__name__)

DEFAULT_PORT = 7721


# -- who may call ------------------------------------------------------------------------------
def _peer_host(address: str | None) -> str | None:
    """`"127.0.0.1:5000"` / `"::1:5000"` -> the host part."""
    return address.rpartition(":")[0] if address else None


class InternalAuth:
    """The internal-call check: the shared token when one is configured, else loopback."""

    def __init__(self, token: str | None) -> None:
        self.token = token or None

    def check(self, headers: Mapping[str, str], peer_host: str | None) -> None:
        if self.token is not None:
            given = headers.get(TOKEN_HEADER) or ""
            if not hmac.compare_digest(given.encode(), self.token.encode()):
                raise Unauthenticated(
                    f"queue-core: internal calls need the {TOKEN_HEADER} header of this deployment"
                )
        elif not is_loopback(peer_host):
            raise Unauthenticated(
                f"queue-core: no internal token is configured (LOAM_INTERNAL_TOKEN), so only loopback peers may call; "
                f"{peer_host} may not"
            )

    def namespace(self, headers: Mapping[str, str], peer_host: str | None) -> str:
        self.check(headers, peer_host)
        ns = headers.get(NAMESPACE_HEADER)
        if not ns:
            raise InvalidArgument(NAMESPACE_HEADER, "is required on internal calls")
        return validate.namespace(ns, NAMESPACE_HEADER)


class CoreService(JobsServiceHandlers):
    """The JobsService of a queue-core process: CoreRpc behind the internal-call check."""

    def __init__(self, rpc: CoreRpc, auth: InternalAuth) -> None:
        self.rpc = rpc
        self.auth = auth

    def _ns(self, ctx: Any) -> str:
        """The call's namespace, once the internal-call check passed; and who the call acts
        for (the gateway's `x-loam-actor`), whom the facade's audited actions record."""
        ns = self.auth.namespace(ctx.request_headers, _peer_host(ctx.client_address))
        actor = ctx.request_headers.get(ACTOR_HEADER)
        ACTOR.set(Actor.from_header(actor) if actor else None)
        return ns

    async def dispatch(self, method: Method, request: Any, ctx: Any) -> Any:
        return await getattr(self.rpc, method.name)(self._ns(ctx), request)

    async def dispatch_stream(self, method: Method, request: Any, ctx: Any) -> AsyncIterator[Any]:
        async for item in getattr(self.rpc, method.name)(self._ns(ctx), request):
            yield item


# -- the ASGI app ------------------------------------------------------------------------------
async def _json_object(request: Request) -> dict:
    try:
        body = await request.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise InvalidArgument("body", "send a JSON object")
    return body


def _engine_rpc(core: QueueCore, rpc: CoreRpc):  # noqa: ANN202 - loam_engines.rpc.EngineRpc or None
    """The engine runs' JobsService methods, when loam_engines is installed: they need
    only the store, the blobs and this core; the runner itself runs elsewhere."""
    try:
        from loam_engines.rpc import EngineRpc
        from loam_engines.service import EngineRuns
    except ImportError:
        return None
    return EngineRpc(EngineRuns(core.store, core.blobs, rpc))


def create_app(core: QueueCore, *, internal_token: str | None = None, on_shutdown=None) -> Starlette:
    rpc = CoreRpc(core)
    rpc.engines = _engine_rpc(core, rpc)
    auth = InternalAuth(internal_token)
    connect_app = JobsServiceASGIApplication(CoreService(rpc, auth), codecs=api_codec.codecs())

    def peer(request: Request) -> str | None:
        return request.client.host if request.client else None

    async def wake(request: Request) -> Response:
        try:
            auth.check(request.headers, peer(request))
            body = await _json_object(request)
            ns = validate.namespace(body.get("ns"), "ns")
            queue = validate.name("queue", body.get("queue"))
        except JobsError as e:
            return error_response(e)
        core.effects.wake_queue(ns, queue)
        return JSONResponse({})

    async def queues(request: Request) -> Response:
        try:
            auth.check(request.headers, peer(request))
            body = await _json_object(request)
            names = await core.queues.names(validate.namespace(body.get("ns"), "ns"))
        except Exception as e:  # noqa: BLE001
            return error_response(e)
        return JSONResponse({"queues": names})

    async def export(request: Request) -> Response:
        try:
            auth.check(request.headers, peer(request))
            body = await _json_object(request)
            ns = validate.namespace(body.get("ns"), "ns")
            queue = validate.name("queue", body.get("queue"))
            data, media = await export_bytes(core.store, ns, queue, body.get("since_ns") or 0, body.get("until_ns"),
                                             body.get("format") or "parquet")  # fmt: skip
        except Exception as e:  # noqa: BLE001
            return error_response(e)
        return Response(data, media_type=media)

    async def metrics_endpoint(request: Request) -> Response:
        headers = dict(request.headers)
        bearer = headers.get("authorization", "")
        if auth.token is not None and bearer.lower().startswith("bearer ") and TOKEN_HEADER not in headers:
            headers[TOKEN_HEADER] = bearer[7:].strip()
        try:
            auth.check(headers, peer(request))
            qp = request.query_params
            only = [validate.namespace(qp["ns"], "ns")] if qp.get("ns") else None
            text = await metrics.render_store(core.store, only, process=qp.get("scope") != "store")
        except Exception as e:  # noqa: BLE001
            return error_response(e)
        return Response(text, media_type=metrics.CONTENT_TYPE)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        try:
            await core.store.snapshot(_noop_read)
        except Exception as e:  # noqa: BLE001
            return JSONResponse({"status": "unavailable", "message": str(e)}, 503)
        return JSONResponse({"status": "ready"})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        try:
            yield
        finally:
            if on_shutdown is not None:
                await on_shutdown()

    return Starlette(
        routes=[
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/internal/v1/wake", wake, methods=["POST"]),
            Route("/internal/v1/queues", queues, methods=["POST"]),
            Route("/internal/v1/events/export", export, methods=["POST"]),
            Route("/metrics", metrics_endpoint),
            Mount(
                connect_app.path, app=coalesce_streams(connect_app, STREAM_PATHS)
            ),  # Watch: api/stream_writes.py
        ],
        lifespan=lifespan,
    )


def _noop_read(tx) -> None:
    tx.get(b"\x00readyz")


# -- running -----------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    env = os.environ
    p = argparse.ArgumentParser(prog="loam queue-core", description="Run a Loam queue-core process.")
    p.add_argument(
        "--store",
        default=env.get("LOAM_STORE"),
        help="store URL, e.g. lmdb:///abs/dir or sqlite:///abs/path.db (LOAM_STORE)",
    )
    p.add_argument(
        "--blobs", default=env.get("LOAM_BLOBS"), help="blob directory or s3://bucket/prefix (LOAM_BLOBS)"
    )
    p.add_argument("--host", default=env.get("LOAM_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(env.get("LOAM_PORT", DEFAULT_PORT)))
    p.add_argument("--log-level", default=env.get("LOAM_LOG_LEVEL", "warning"))
    p.add_argument("--quotas", default=env.get("LOAM_QUOTAS"),
                   help="per-namespace quotas, e.g. '*:stored_jobs=100000;alpha:enqueue_rate=50' "
                        "(enqueue_rate, stored_jobs, payload_bytes, active_leases, schedules; 0 = none)")  # fmt: skip
    p.add_argument("--histogram-flush", type=float,
                   default=float(env.get("LOAM_HISTOGRAM_FLUSH_S", FLUSH_INTERVAL_S)),
                   help="seconds between two writes of this core's wait and run time observations to the store, "
                        "where the metrics history reads them (LOAM_HISTOGRAM_FLUSH_S)")  # fmt: skip
    args = p.parse_args(argv)
    if not args.store:
        p.error("--store (or LOAM_STORE) is required")
    if not args.histogram_flush > 0:
        p.error("--histogram-flush must be a positive number of seconds")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(args.log_level)
    token = os.environ.get("LOAM_INTERNAL_TOKEN") or None
    if token is None and not is_loopback(args.host):
        log.warning("no LOAM_INTERNAL_TOKEN: only loopback peers will be served, whatever --host says")

    async def run() -> None:
        store = open_store(args.store)
        blobs = open_blobs(args.blobs) if args.blobs else None
        core = QueueCore(
            store, blobs, quotas=quotas.parse(args.quotas), histogram_flush_s=args.histogram_flush
        )
        tracing.configure_from_env("loam-queue-core")
        app = create_app(core, internal_token=token)
        flush = core.histogram_flush  # the history's wait and run times, from this core

        def ready(server: uvicorn.Server) -> None:
            print(f"loam queue-core: ready on http://{args.host}:{args.port}", flush=True)

        try:
            flush.start()
            await serve(app, args.host, args.port, on_ready=ready, log_level=args.log_level)
        finally:
            await flush.stop()
            await store.close()

    return run_server_main("loam queue-core", run())


if __name__ == "__main__":
    sys.exit(main())
