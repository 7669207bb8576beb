"""A pure-Python HTTP transport for the SDK's Connect client, over httpx.

pyqwest (the SDK's default HTTP library) runs requests on a tokio runtime whose threads
do not survive `fork()`: in a child forked after the parent made a request, every call
times out. Celery's prefork pool forks children (and re-forks them after a crash or
`max_tasks_per_child`), and those children store results and publish messages. So a
process that was forked uses this transport instead (connection.py decides)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import httpx
import pyqwest

logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request otherwise


class HttpxTransport:
    """A pyqwest `Transport` (`execute(request) -> Response`) over `httpx.AsyncClient`."""

    def __init__(self, max_connections: int = 64) -> None:
        # Idle connections are dropped before the server's keep-alive timeout (5 s) can
        # close one under a request.
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections,
                              keepalive_expiry=2.0)  # fmt: skip
        self._client = httpx.AsyncClient(timeout=None, limits=limits)

    async def execute(self, request: pyqwest.Request) -> pyqwest.Response:
        body = await _read(request.content)
        headers = list(request.headers.items())
        for attempt in (1, 2):
            try:
                r = await self._client.request(
                    request.method, str(request.url), headers=headers, content=body
                )
                break
            except httpx.TimeoutException as e:
                raise TimeoutError(str(e)) from e
            except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError) as e:
                # A kept-alive connection the server closed as the request went out: once
                # more on a fresh one. Repeating is safe: writes carry keys or fencing
                # tokens, and a Lease whose answer was lost only holds its jobs until
                # their leases lapse.
                if attempt == 2:
                    raise ConnectionError(f"{type(e).__name__}: {e}") from e
            except httpx.TransportError as e:
                raise ConnectionError(f"{type(e).__name__}: {e}") from e
        return pyqwest.Response(status=r.status_code, headers=pyqwest.Headers(list(r.headers.items())),
                                content=r.content)  # fmt: skip

    async def aclose(self) -> None:
        await self._client.aclose()


async def _read(content: object) -> bytes:
    if content is None:
        return b""
    if isinstance(content, (bytes, bytearray, memoryview)):
        return bytes(content)
    chunks = []
    async for chunk in content:  # type: ignore[attr-defined]
        chunks.append(bytes(chunk))
    return b"".join(chunks)


__all__ = ["AsyncIterator", "HttpxTransport"]
