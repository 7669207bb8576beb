"""The common Connect call, served without the general Connect app's per-request work.

Almost every call a worker or producer makes is a Connect unary POST, binary or JSON,
uncompressed, to a handler that answers in about a millisecond. The general app
(`connectrpc`'s ASGI application) serves every shape Connect has: GET, compressed
bodies, streams, gRPC and gRPC-Web, a deadline scope and a disconnect watch task per
request. Profiled under `loam dev`, that machinery plus FastAPI's middleware was about
a third of the server's CPU per call. This lane takes the common shape only and hands
everything else to the general app, untouched:

- same endpoints and handlers (the generated ones, so auth and errors are the same);
- the same header checks (`connect-protocol-version`, `connect-timeout-ms`) and the
  same error bodies and statuses (the general app's own error writer);
- a long-poll `Lease` keeps its deadline and still watches for the client going away,
  so a parked lease of a closed connection takes no jobs (answered directly, its HTTP
  server cancels it when the connection closes: `long_poll`). Other calls wait on nothing
  but the store, so they get no deadline scope: a client past its deadline has
  already stopped waiting, and the work is the same either way.

Responses are never compressed: identity is always acceptable to a Connect client,
and these messages are small.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from connectrpc._server_async import EndpointUnary, _ResponseSender
from connectrpc._shared import decode_message
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from loam_common.api.methods import JOBS_METHODS

log = logging.getLogger("loam.gateway")

_CODECS = {"application/proto": "proto", "application/json": "json"}
# The methods that may park until work arrives (their request's `wait_ns`), by path.
_LONG_POLL = frozenset(m.path for m in JOBS_METHODS if m.long_poll)


class UnaryLane:
    """`await lane(scope, receive, send)` serves the request and returns True, or
    returns False before reading anything when the request is not the common shape."""

    def __init__(self, connect_app: Any) -> None:
        self.app = connect_app
        self.endpoints: dict[str, Any] | None = None
        self.codecs = {ct: connect_app._codecs[name] for ct, name in _CODECS.items()}
        self.headers = {ct: [(b"content-type", ct.encode())] for ct in _CODECS}
        self.read_max_bytes = connect_app._read_max_bytes

    def _resolve(self) -> dict[str, Any]:
        endpoints = self.app._resolve_endpoints(self.app._service)
        self.endpoints = {p: e for p, e in endpoints.items() if isinstance(e, EndpointUnary)}
        return self.endpoints

    async def __call__(self, scope: dict, receive: Any, send: Any) -> bool:
        endpoint = (self.endpoints or self._resolve()).get(scope["path"])
        if endpoint is None or scope["method"] != "POST":
            return False
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        if not self.takes(headers):
            return False

        async def body() -> bytes | None:
            return await self._body(receive)

        await self._serve(scope["path"], endpoint, headers, body, receive, send)
        return True

    def takes(self, headers: dict[str, str]) -> bool:
        """Whether a POST with these headers is the common shape this lane serves."""
        return (
            headers.get("content-type", "") in self.codecs
            and headers.get("content-encoding", "identity") == "identity"
        )

    def direct_paths(self) -> list[str]:
        """The paths whose calls the HTTP server may hand to `answer` (direct_http.py):
        every unary method's."""
        return list(self.endpoints or self._resolve())

    @staticmethod
    def long_poll(path: str) -> bool:
        """Whether the method may park until work arrives: its HTTP server must cancel
        the call when the client closes the connection (`Route.cancel_on_close`)."""
        return path in _LONG_POLL

    async def answer(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, list, bytes]:
        """The answer to one call whose body is read (direct_http.py): as `__call__`
        would send it, for a path of `direct_paths` and headers it `takes`."""
        answer = _Answer()

        async def whole() -> bytes:
            self._check_size(len(body))
            return body

        await self._serve(path, (self.endpoints or self._resolve())[path], headers, whole, None, answer)
        return answer.status, answer.headers, answer.body

    async def _serve(self, path: str, endpoint: Any, headers: dict[str, str], read_body: Any,
                     receive: Any, send: Any) -> None:  # fmt: skip
        content_type = headers["content-type"]
        codec = self.codecs[content_type]
        sender = _ResponseSender(send)
        try:
            ctx = LaneContext(headers)
            body = await read_body()
            if body is None:
                return  # the client went away before its request was whole
            request = decode_message(codec, body, endpoint.method.input)
            waits = path in _LONG_POLL and request.wait_ns
            if waits and receive is not None:
                response = await _unless_disconnected(
                    endpoint.function(request, ctx), receive, ctx.timeout_ms
                )
            elif waits:  # answered directly: the HTTP server cancels it if the client leaves
                async with asyncio.timeout(None if ctx.timeout_ms is None else ctx.timeout_ms / 1000):
                    response = await endpoint.function(request, ctx)
            else:
                # No deadline scope here: these calls do not wait on anything but the
                # store, and a client past its deadline has already stopped waiting.
                response = await endpoint.function(request, ctx)
            payload = codec.encode(response)
        except TimeoutError:
            await self.app._handle_error(
                ConnectError(Code.DEADLINE_EXCEEDED, "Request timed out"), None, None, sender
            )
            return
        except Exception as e:  # every failure is answered in Connect's format
            if not isinstance(e, ConnectError):
                log.exception("unexpected error serving %s", path)
            await self.app._handle_error(e, None, None, sender)
            return
        response_headers = [*self.headers[content_type], (b"content-length", b"%d" % len(payload))]
        await send({"type": "http.response.start", "status": 200, "headers": response_headers})
        await send({"type": "http.response.body", "body": payload, "more_body": False})

    async def _body(self, receive: Any) -> bytes | None:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body = message.get("body", b"")
        if not message.get("more_body", False):
            self._check_size(len(body))
            return body
        chunks = [body]
        size = len(body)
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            self._check_size(size)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _check_size(self, size: int) -> None:
        if self.read_max_bytes is not None and size > self.read_max_bytes:
            raise ConnectError(
                Code.RESOURCE_EXHAUSTED, f"message is larger than configured max {self.read_max_bytes}"
            )


class _Answer:
    """A `send` that keeps the answer (status, headers less the length, body)."""

    __slots__ = ("status", "headers", "body")

    def __init__(self) -> None:
        self.status, self.headers, self.body = 500, [], b""

    async def __call__(self, message: dict) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = [h for h in message.get("headers", []) if h[0].lower() != b"content-length"]
        else:
            self.body += message.get("body", b"")


class LaneContext:
    """What the handlers read of a request's context: its headers (lower-case names)
    and its deadline. The checks are Connect's (`connect-protocol-version` must be 1,
    `connect-timeout-ms` at most 10 digits)."""

    __slots__ = ("request_headers", "timeout_ms")

    def __init__(self, headers: dict[str, str]) -> None:
        self.request_headers = headers
        version = headers.get("connect-protocol-version", "1")
        if version != "1":
            raise ConnectError(
                Code.INVALID_ARGUMENT, f"connect-protocol-version must be '1': got '{version}'"
            )
        timeout = headers.get("connect-timeout-ms")
        self.timeout_ms = None
        if timeout:
            if len(timeout) > 10 or not (timeout.isascii() and timeout.isdigit()):
                raise ConnectError(Code.INVALID_ARGUMENT, f"Invalid timeout header: '{timeout}'")
            self.timeout_ms = int(timeout)


async def _unless_disconnected(call: Any, receive: Any, timeout_ms: int | None) -> Any:
    """Run `call`, cancelled if the client disconnects first (or the deadline passes)."""
    task = asyncio.ensure_future(call)
    watch = asyncio.ensure_future(_disconnected(receive))
    try:
        done, _ = await asyncio.wait({task, watch}, timeout=None if timeout_ms is None else timeout_ms / 1000,
                                     return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        if task in done:
            return task.result()
        if watch in done:
            raise ConnectError(Code.CANCELED, "Client disconnected")
        raise TimeoutError
    finally:
        for t in (task, watch):
            if not t.done():
                t.cancel()
        await asyncio.gather(task, watch, return_exceptions=True)


async def _disconnected(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
