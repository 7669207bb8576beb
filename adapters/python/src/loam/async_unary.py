"""JobsService's unary calls on the caller's event loop: `AsyncUnaryClient`, what a
`Client` uses for every call (all of JobsService's methods the SDK calls are unary).

The generated Connect client runs on pyqwest, whose requests go to a runtime thread of
its own and whose answers come back through the loop's self-pipe: two thread hand-offs
per call on top of the network. On a loaded machine each is a wait for a CPU. Measured
against `loam dev` (one enqueue after another), the client spent ~0.4 ms of CPU a call
that way. Here a call writes its request on a kept-alive asyncio connection and reads
the answer on the same loop, as `loam.blocking` does for a thread.

Connect's unary protocol, binary codec, no compression: a POST of the serialized
request; 200 with the serialized response, or a JSON error body read by connectrpc's
own wire format. One connection per call in flight (a pool of idle ones per client and
process). A call that is cancelled or times out closes its connection, so the server
sees the client go (a long-poll Lease abandoned this way takes no jobs). A kept-alive
connection the server closed as the request went out is dialled again once: the server
closes only idle connections, so the request was not read, and every write carries
what makes a repeat harmless anyway (an idempotency or job key, a fencing token)."""

from __future__ import annotations

import asyncio
import functools
import os
import ssl
from typing import Any
from urllib.parse import urlsplit

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from loam.blocking import UNARY, _error

#: idle connections kept per client (a worker's concurrent leases, extends and completions)
POOL_IDLE = 64
_STALE = (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


class _Conn:
    __slots__ = ("reader", "writer", "pid")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.pid = reader, writer, os.getpid()

    def close(self) -> None:
        if self.pid == os.getpid():  # a connection of the parent process is not ours to shut
            self.writer.close()


class AsyncUnaryClient:
    """`await client.enqueue(request, headers=..., timeout_ms=...)` and the like, as the
    generated async client names them, returning the response or raising ConnectError."""

    def __init__(self, url: str, *, timeout_ms: int | None = None) -> None:
        """`timeout_ms`: a call's deadline when it gives none (None: no deadline)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self._host = parts.hostname
        self._port = parts.port or (443 if self._ssl else 80)
        self._prefix = parts.path.rstrip("/")
        authority = parts.netloc.rsplit("@", 1)[-1]
        self._head = (
            f"Host: {authority}\r\ncontent-type: application/proto\r\nconnect-protocol-version: 1\r\n"
        )
        self._idle: list[_Conn] = []
        self._closed = False
        self._timeout_ms = timeout_ms

    def __getattr__(self, name: str) -> Any:
        try:
            path, response = UNARY[name]
        except KeyError:
            raise AttributeError(name) from None
        call = functools.partial(self._unary, self._prefix + path, response)
        call.__name__ = name  # type: ignore[attr-defined]  # the worker names failed calls by it
        setattr(self, name, call)  # found directly next time
        return call

    async def _connect(self) -> tuple[_Conn, bool]:
        """An idle connection of this process, or a new one; and whether it was idle."""
        idle, pid = self._idle, os.getpid()
        while idle:
            conn = idle.pop()
            if conn.pid == pid and not conn.reader.at_eof():
                return conn, True
            conn.close()
        try:
            reader, writer = await asyncio.open_connection(self._host, self._port, ssl=self._ssl)
        except OSError as e:
            raise ConnectError(Code.UNAVAILABLE, f"{type(e).__name__}: {e}") from e
        return _Conn(reader, writer), False

    async def _unary(self, path: str, response: Any, request: Any, *, headers: dict[str, str],
                     timeout_ms: int | None = None) -> Any:  # fmt: skip
        if self._closed:
            raise ConnectError(Code.UNAVAILABLE, "client is closed")
        body = request.SerializeToString()
        if timeout_ms is None:
            timeout_ms = self._timeout_ms
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        if timeout_ms:
            extra += f"connect-timeout-ms: {timeout_ms}\r\n"
        head = f"POST {path} HTTP/1.1\r\n{self._head}{extra}content-length: {len(body)}\r\n\r\n".encode(
            "latin-1"
        )
        try:
            async with asyncio.timeout(timeout_ms / 1000 if timeout_ms else None):
                status, data, keep = await self._exchange(head + body)
        except TimeoutError:
            raise ConnectError(Code.DEADLINE_EXCEEDED, "Request timed out") from None
        if status == 200:
            return response.FromString(data)
        raise _error(status, data)

    async def get(self, path: str, *, headers: dict[str, str]) -> tuple[int, bytes]:
        """A plain `GET {url}{path}` on the same kept-alive connections: (status, body).
        For the few REST reads the SDK makes (`Client.list_queues`)."""
        if self._closed:
            raise ConnectError(Code.UNAVAILABLE, "client is closed")
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        head = f"GET {self._prefix}{path} HTTP/1.1\r\n{self._head}{extra}\r\n".encode("latin-1")
        status, data, _ = await self._exchange(head)
        return status, data

    async def _exchange(self, message: bytes) -> tuple[int, bytes, bool]:
        while True:
            conn, reused = await self._connect()
            done = False
            try:
                conn.writer.write(message)
                status, data, keep = await _read_response(conn.reader)
                done = True
            except _STALE as e:
                if not reused:
                    raise ConnectError(Code.UNAVAILABLE, f"{type(e).__name__}: {e}") from e
                continue  # the server had closed that idle connection: dial again
            except OSError as e:
                raise ConnectError(Code.UNAVAILABLE, f"{type(e).__name__}: {e}") from e
            except ValueError as e:  # not an HTTP answer (another server on that port?)
                raise ConnectError(Code.UNAVAILABLE, f"not an HTTP answer: {e}") from e
            finally:
                # Kept only when its answer was read whole: cancelled, timed out or broken
                # mid-call, it is closed, and the server sees the client go.
                if done and keep and not self._closed and len(self._idle) < POOL_IDLE:
                    self._idle.append(conn)
                else:
                    conn.close()
            return status, data, keep

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """One HTTP/1.1 response: its status, its body and whether the connection stays open."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    if not version.startswith("HTTP/") or not rest[:3].isdigit():
        raise ValueError(lines[0][:80])
    status = int(rest[:3])
    length, chunked, keep = None, False, version == "HTTP/1.1"
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "transfer-encoding":
            chunked = "chunked" in value.lower()
        elif name == "connection":
            keep = value.strip().lower() == "keep-alive" or (keep and value.strip().lower() != "close")
    if chunked:
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass  # trailers
                break
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
        return status, b"".join(parts), keep
    if length is None:  # the body runs to the end of the connection
        return status, await reader.read(), False
    return status, await reader.readexactly(length), keep
