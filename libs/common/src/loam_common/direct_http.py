"""Direct routes: a few small, hot `POST` paths answered from the HTTP parser's own
callbacks, without an ASGI scope, `receive`/`send` messages or a per-request cycle.

Most calls are small POSTs (a producer's enqueue, a worker's completion, a durable
step's two envelopes), and the ASGI round trip around each (the scope, the cycle object,
the messages, the header checks of `send`, the wrappers of whatever sits between the
server and the handler) is work their answer does not need: about a tenth of a single
enqueue's server CPU (bench/README.md). `direct_protocol(routes, max_body)` is uvicorn's httptools
protocol with one change: a request whose method is `POST`, whose raw target is one of
`routes` (no query string) and whose body has a `Content-Length` of at most `max_body`
is read into bytes and handed to the route's handler, `await handler(headers, body) ->
(status, headers, body)`; its answer is written as one buffer. Anything else, a request
pipelined behind one still running included, goes to the ASGI app as before, so a
route's handler must answer exactly as the app would (the gateway's does: it is the
same code, `GatewayApp.direct_routes`).

A route is a `Route(answer, takes)`: `takes(headers)`, when given, decides from the
headers whether the request is one `answer` serves (a shape it does not serve goes to
the ASGI app). `headers` are the request's, by lower-case name (the last of a repeated
one wins), as the gateway's `header_dict` gives them. Keep-alive, `Connection: close`, HTTP/1.0,
graceful shutdown and the keep-alive timer are uvicorn's own (`on_response_complete`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

log = logging.getLogger(__name__)

Answer = tuple[int, list[tuple[bytes, bytes]], bytes]
Handler = Callable[[dict[str, str], bytes], Awaitable[Answer]]


@dataclass(frozen=True, slots=True)
class Route:
    answer: Handler
    takes: Callable[[dict[str, str]], bool] | None = None


_FAILED: Answer = (500, [(b"content-type", b"text/plain; charset=utf-8")], b"Internal Server Error")


class _DirectCycle:
    """What uvicorn's protocol asks of the request in flight (`self.cycle`): whether its
    answer is written, whether the connection stays open after it, whether the client
    went away (`connection_lost` sets it and calls `message_event.set()`)."""

    __slots__ = ("response_complete", "keep_alive", "disconnected")

    def __init__(self, keep_alive: bool) -> None:
        self.response_complete = False
        self.keep_alive = keep_alive
        self.disconnected = False

    @property
    def message_event(self) -> _DirectCycle:
        return self

    def set(self) -> None:  # nothing waits on a direct request's body: it is read already
        pass


class DirectHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol; `direct_protocol` makes one with its routes."""

    routes: Mapping[bytes, Route] = {}
    max_body = 0

    _direct: Handler | None = None
    _body: bytes = b""
    _header_dict: dict[str, str] = {}

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._direct = None

    def on_headers_complete(self) -> None:
        route = self.routes.get(self.url)
        if route is not None and self._takes_direct():
            headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in self.headers}
            if route.takes is None or route.takes(headers):
                self._direct, self._body, self._header_dict = route.answer, b"", headers
                return
        super().on_headers_complete()

    def _takes_direct(self) -> bool:
        parser = self.parser
        if parser.get_method() != b"POST" or self.expect_100_continue or parser.should_upgrade():
            return False
        if self.cycle is not None and not self.cycle.response_complete:
            return False  # pipelined behind a request in flight: uvicorn queues it in order
        if self.limit_concurrency is not None:
            return False  # its 503 is uvicorn's to give
        length = None
        for name, value in self.headers:
            if name == b"content-length":
                length = value
            elif name == b"transfer-encoding":
                return False
        return length is not None and length.isdigit() and int(length) <= self.max_body

    def on_body(self, body: bytes) -> None:
        if self._direct is None:
            super().on_body(body)
        else:
            self._body += body  # at most max_body: its Content-Length said so

    def on_message_complete(self) -> None:
        handler = self._direct
        if handler is None:
            super().on_message_complete()
            return
        self._direct = None
        parser = self.parser
        cycle = self.cycle = _DirectCycle(parser.get_http_version() != "1.0" and parser.should_keep_alive())
        task = self.loop.create_task(self._answer(handler, self._header_dict, self._body, cycle))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    async def _answer(
        self, handler: Handler, headers: dict[str, str], body: bytes, cycle: _DirectCycle
    ) -> None:
        try:
            status, extra, raw = await handler(headers, body)
        except Exception:  # the ASGI path's answer to an app that raised
            log.exception("direct route failed")
            status, extra, raw = _FAILED
        if cycle.disconnected or self.transport.is_closing():
            return
        if self.flow.write_paused:
            await self.flow.drain()
        out = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            out += (name, b": ", value, b"\r\n")
        for name, value in extra:
            out += (name, b": ", value, b"\r\n")
        if not cycle.keep_alive:
            out.append(b"connection: close\r\n")
        out += (b"content-length: %d\r\n\r\n" % len(raw), raw)
        self.transport.write(b"".join(out))
        cycle.response_complete = True
        if not cycle.keep_alive:
            self.transport.close()
        self.on_response_complete()


def direct_protocol(routes: Mapping[str, Route], max_body: int) -> type[DirectHttpProtocol]:
    """uvicorn's httptools protocol answering `routes` (raw request targets) directly."""
    encoded = {path.encode("ascii"): route for path, route in routes.items()}
    return type("DirectHttpProtocol", (DirectHttpProtocol,), {"routes": encoded, "max_body": max_body})


__all__ = ["Answer", "DirectHttpProtocol", "Handler", "Route", "direct_protocol"]
