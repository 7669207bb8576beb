"""Serving an ASGI app with uvicorn inside the test's own event loop, on a loopback socket
bound here first: a port picked, closed and bound again by uvicorn can be taken by another
process in between (a parallel test run did exactly that), and a server that failed to
start left the test waiting for it forever."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import uvicorn

from loam_common.serving import uvicorn_config


@contextlib.asynccontextmanager
async def served(app, *, as_loam_serves: bool = False) -> AsyncIterator[str]:
    """Serve `app` until the block ends; yields its base URL, `http://127.0.0.1:<port>`.
    `as_loam_serves`: with the config the services run (loam_common.serving), so an app's
    direct routes are answered straight from the HTTP parser (direct_http.py)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    if as_loam_serves:
        config = uvicorn_config(app, "127.0.0.1", 0)
        config.lifespan = "off"
    else:
        config = uvicorn.Config(app, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # older uvicorn; newer ones check the thread
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if serving.done():
                serving.result()  # raises what stopped it
                raise RuntimeError("uvicorn stopped before it started")
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await serving
        sock.close()
