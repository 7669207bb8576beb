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

`ConnectAdapter` is the shared shape of a JobsService implementation that forwards
every method to one dispatch function; the gateway's service uses it too.

Run it with `loam queue-core --store URL --blobs DIR --host 127.0.0.1 --port 7721`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import ipaddress
import logging
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Mapping
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from loam_common import metrics, tracing, validate
from loam_common.blobs import open_blobs
from loam_common.connect_errors import HTTP_STATUS, to_connect
from loam_common.errors import InvalidArgument, JobsError, Unauthenticated
from loam_common.gen.loam.jobs.v1.jobs_connect import JobsServiceASGIApplication
from loam_common.loop import configure_logging
from loam_common.store.runner import open_store
from loam_queue_core.core import QueueCore
from loam_queue_core.rpc import STREAMING, UNARY, CoreRpc

log = logging.getLogger(__name__)

NAMESPACE_HEADER = "x-loam-namespace"
TOKEN_HEADER = "x-loam-internal-token"
DEFAULT_PORT = 7721


# -- the shape of a JobsService that forwards ------------------------------------------------
class ConnectAdapter:
    """Implements the generated `JobsService` Protocol: every unary method calls
    `self.dispatch(method, request, ctx)`, every streaming one `self.dispatch_stream`,
    and any failure leaves as a ConnectError (JobsErrors by their §5.3 code), never as
    Connect's `unknown`."""

    async def dispatch(self, method: str, request: Any, ctx: Any) -> Any:
        raise NotImplementedError

    def dispatch_stream(self, method: str, request: Any, ctx: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


def _unary(method: str):
    async def handler(self: ConnectAdapter, request: Any, ctx: Any) -> Any:
        try:
            return await self.dispatch(method, request, ctx)
        except Exception as e:  # noqa: BLE001 - every failure gets its Connect code
            raise to_connect(e) from e

    handler.__name__ = handler.__qualname__ = method
    return handler


def _streaming(method: str):
    async def handler(self: ConnectAdapter, request: Any, ctx: Any) -> AsyncIterator[Any]:
        try:
            async for item in self.dispatch_stream(method, request, ctx):
                yield item
        except Exception as e:  # noqa: BLE001
            raise to_connect(e) from e

    handler.__name__ = handler.__qualname__ = method
    return handler


for _m in UNARY:
    setattr(ConnectAdapter, _m, _unary(_m))
for _m in STREAMING:
    setattr(ConnectAdapter, _m, _streaming(_m))


# -- who may call ------------------------------------------------------------------------------
def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


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
        try:
            return validate.name("namespace", ns)
        except InvalidArgument as e:
            raise InvalidArgument(NAMESPACE_HEADER, e.message.partition(": ")[2]) from None


class CoreService(ConnectAdapter):
    """The JobsService of a queue-core process: CoreRpc behind the internal-call check."""

    def __init__(self, rpc: CoreRpc, auth: InternalAuth) -> None:
        self.rpc = rpc
        self.auth = auth

    def _ns(self, ctx: Any) -> str:
        return self.auth.namespace(ctx.request_headers, _peer_host(ctx.client_address))

    async def dispatch(self, method: str, request: Any, ctx: Any) -> Any:
        return await getattr(self.rpc, method)(self._ns(ctx), request)

    async def dispatch_stream(self, method: str, request: Any, ctx: Any) -> AsyncIterator[Any]:
        async for item in getattr(self.rpc, method)(self._ns(ctx), request):
            yield item


# -- the ASGI app ------------------------------------------------------------------------------
def error_response(e: BaseException) -> JSONResponse:
    err = to_connect(e)
    return JSONResponse(
        {"code": err.code.value, "message": err.message}, HTTP_STATUS.get(err.code.value, 500)
    )


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
    connect_app = JobsServiceASGIApplication(CoreService(rpc, auth))

    def peer(request: Request) -> str | None:
        return request.client.host if request.client else None

    async def wake(request: Request) -> Response:
        try:
            auth.check(request.headers, peer(request))
            body = await _json_object(request)
            ns = validate.name("ns", body.get("ns"))
            queue = validate.name("queue", body.get("queue"))
        except JobsError as e:
            return error_response(e)
        core.wake_all(ns, queue)
        return JSONResponse({})

    async def queues(request: Request) -> Response:
        try:
            auth.check(request.headers, peer(request))
            body = await _json_object(request)
            names = await rpc.queue_list(validate.name("ns", body.get("ns")))
        except Exception as e:  # noqa: BLE001
            return error_response(e)
        return JSONResponse({"queues": names})

    async def export(request: Request) -> Response:
        try:
            auth.check(request.headers, peer(request))
            body = await _json_object(request)
            ns = validate.name("ns", body.get("ns"))
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
            only = [validate.name("ns", qp["ns"])] if qp.get("ns") else None
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
            Mount(connect_app.path, app=connect_app),
        ],
        lifespan=lifespan,
    )


async def export_bytes(
    store, ns: str, queue: str, since_ns: int, until_ns: int | None, fmt: str
) -> tuple[bytes, str]:
    """A queue's events in [since_ns, until_ns) as `parquet` or `arrow` bytes, and the media type."""
    from loam_common import event_export

    validate.name("namespace", ns)
    validate.name("queue", queue)
    if fmt not in event_export.FORMATS:
        raise InvalidArgument("format", f"one of {', '.join(event_export.FORMATS)}")
    for name, v in (("since_ns", since_ns), ("until_ns", until_ns)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            raise InvalidArgument(name, "must be a non-negative integer (ns since the epoch)")
    table = await event_export.export_events(store, ns, queue, since_ns, until_ns)
    return event_export.table_bytes(table, fmt), event_export.FORMATS[fmt]


def _noop_read(tx) -> None:
    tx.get(b"\x00readyz")


# -- running -----------------------------------------------------------------------------------
class QuietServer(uvicorn.Server):
    """uvicorn's server, minus re-raising SIGINT/SIGTERM after its graceful stop, so a
    stopped service exits 0 once its store is closed."""

    @contextlib.contextmanager
    def capture_signals(self):
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        sigs = (signal.SIGINT, signal.SIGTERM)
        original = {s: signal.signal(s, self.handle_exit) for s in sigs}
        try:
            yield
        finally:
            for s, h in original.items():
                signal.signal(s, h)


def uvicorn_config(app: Any, host: str, port: int, **kw: Any) -> uvicorn.Config:
    log_level = kw.pop("log_level", "warning")
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        log_level=log_level,
        # Per request, uvicorn formats the access line's arguments before the logger
        # drops it, and reads proxy headers nothing here uses: measurable on ~1 ms calls.
        access_log=log_level in ("debug", "trace"),
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=kw.pop("timeout_graceful_shutdown", 3),
        **kw,
    )


def run_async(main: Any) -> Any:
    """`asyncio.run` on uvloop (the loop uvicorn is configured for; `Server.serve()`
    runs on whatever loop it is given)."""
    try:
        import uvloop
    except ImportError:  # uvicorn[standard] brings it; without it, the stdlib loop
        return asyncio.run(main)
    return asyncio.run(main, loop_factory=uvloop.new_event_loop)


class ServeError(RuntimeError):
    """The server could not start (uvicorn logged why: most often the port is in use)."""


def run_server_main(label: str, main: Any) -> int:
    """Run one server process's coroutine to its end; the exit code of a service command
    (0 after Ctrl-C or SIGTERM, 1 when it could not start)."""
    try:
        run_async(main)
    except KeyboardInterrupt:
        pass
    except ServeError as e:
        print(f"{label}: {e}", file=sys.stderr)
        return 1
    return 0


async def serve(app: Any, host: str, port: int, *, on_ready=None, **kw: Any) -> None:
    """Run `app` until SIGINT/SIGTERM; `on_ready(server)` once it accepts connections."""
    server = QuietServer(uvicorn_config(app, host, port, **kw))

    async def announce() -> None:
        while not server.started:
            await asyncio.sleep(0.01)
        if on_ready is not None:
            on_ready(server)

    watcher = asyncio.ensure_future(announce())
    try:
        await server.serve()
    except SystemExit:  # uvicorn exits on a startup failure; make it an error we can report
        raise ServeError(f"cannot serve on {host}:{port}") from None
    finally:
        watcher.cancel()
    if not server.started:
        raise ServeError(f"cannot serve on {host}:{port}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    env = os.environ
    p = argparse.ArgumentParser(prog="loam queue-core", description="Run a Loam queue-core process.")
    p.add_argument(
        "--store", default=env.get("LOAM_STORE"), help="store URL, e.g. sqlite:///abs/path.db (LOAM_STORE)"
    )
    p.add_argument(
        "--blobs", default=env.get("LOAM_BLOBS"), help="blob directory or s3://bucket/prefix (LOAM_BLOBS)"
    )
    p.add_argument("--host", default=env.get("LOAM_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(env.get("LOAM_PORT", DEFAULT_PORT)))
    p.add_argument("--log-level", default=env.get("LOAM_LOG_LEVEL", "warning"))
    args = p.parse_args(argv)
    if not args.store:
        p.error("--store (or LOAM_STORE) is required")
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
        core = QueueCore(store, blobs)
        tracing.configure_from_env("loam-queue-core")
        app = create_app(core, internal_token=token)

        def ready(server: uvicorn.Server) -> None:
            print(f"loam queue-core: ready on http://{args.host}:{args.port}", flush=True)

        try:
            await serve(app, args.host, args.port, on_ready=ready, log_level=args.log_level)
        finally:
            await store.close()

    return run_server_main("loam queue-core", run())


if __name__ == "__main__":
    sys.exit(main())
