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


@contextlib.asynccontextmanager
async def served(app) -> AsyncIterator[str]:
    """Serve `app` until the block ends; yields its base URL, `http://127.0.0.1:<port>`."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
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
