"""Running an HTTP service process, the same way for every service that serves one
(queue core, gateway, `loam dev`): uvicorn on uvloop and httptools with one config
(`uvicorn_config`), `serve(app, host, port)` until SIGINT/SIGTERM, the exit code of a
service command (`run_server_main`), the JSON error body of the internal endpoints
(`error_response`), `is_loopback` for the bind and peer checks, and the access log's
query values redacted (`RedactQuery`).

Needs uvicorn and starlette (the `serve` extra of loam-common), which the serving
services depend on.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ipaddress
import logging
import signal
import sys
import threading
from typing import Any

import uvicorn
from starlette.responses import JSONResponse

from loam_common.connect_errors import HTTP_STATUS, to_connect
from loam_common.direct_http import direct_protocol


def is_loopback(host: str | None) -> bool:
    """Whether `host` (a name or an address, IPv6 with or without brackets) is this machine."""
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def error_response(e: BaseException) -> JSONResponse:
    """`{code, message}` with Connect's code name and HTTP status (JobsErrors by §5.3)."""
    err = to_connect(e)
    return JSONResponse(
        {"code": err.code.value, "message": err.message}, HTTP_STATUS.get(err.code.value, 500)
    )


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


class RedactQuery(logging.Filter):
    """Every query value of an access-log line replaced by `[redacted]` (names kept): a
    token put in a URL by mistake must not land in the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str) and "?" in args[2]:
            record.args = (*args[:2], redact_query(args[2]), *args[3:])
        return True


def redact_query(path: str) -> str:
    """`/p?token=abc&x` -> `/p?token=[redacted]&x`."""
    base, _, query = path.partition("?")
    parts = [(k + "=[redacted]") if sep else k for k, sep, _ in (p.partition("=") for p in query.split("&"))]
    return base + "?" + "&".join(parts)


def _redact_access_log() -> None:
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, RedactQuery) for f in access.filters):
        access.addFilter(RedactQuery())


def uvicorn_config(app: Any, host: str, port: int, **kw: Any) -> uvicorn.Config:
    """`app` may name hot POST paths it answers without ASGI: `app.direct_routes()` ->
    ({raw target: direct_http.Route}, the largest body they take)."""
    log_level = kw.pop("log_level", "warning")
    _redact_access_log()
    direct = getattr(app, "direct_routes", None)
    routes, max_body = direct() if direct is not None else ({}, 0)
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="uvloop",
        http=direct_protocol(routes, max_body) if routes else "httptools",
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
        # What exists once the server is up (modules, the app, its schemas and stores)
        # lives as long as the process: out of the collector's generations, a full
        # collection no longer walks it between requests. A request's objects die by
        # reference count; the young collections the default thresholds start every
        # ~70 durable requests cost ~2.5 us a request (bench/README.md, "Durable steps").
        gc.collect()
        gc.freeze()
        gc.set_threshold(10_000, 50, 100)
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
