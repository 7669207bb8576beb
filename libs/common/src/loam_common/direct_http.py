"""Direct routes: a few small, hot `POST` paths answered without an ASGI scope,
`receive`/`send` messages or a per-request cycle.

Most calls are small POSTs (a producer's enqueue, a worker's completion, a durable
step's two envelopes), and the ASGI round trip around each (the scope, the cycle object,
the messages, the header checks of `send`, the wrappers of whatever sits between the
server and the handler) is work their answer does not need. `direct_protocol(routes,
max_body)` gives the HTTP server's protocol class: a request whose method is `POST`,
whose raw target is one of `routes` (no query string) and whose body has a
`Content-Length` of at most `max_body` is read into bytes and handed to the route's
handler, `await handler(headers, body, checked) -> (status, headers, body)`; its answer is
written as one buffer. Anything else goes to the ASGI app, in order on the same
connection, so a route's handler must answer exactly as the app would (the gateway's
does: it is the same code, `GatewayApp.direct_routes`).

Two protocols do it (decision 0048). A connection starts on `DirectFront`, which reads
HTTP/1.1 itself and answers direct requests from one task per connection: no parser
callbacks, no task, timer or cycle object per request (a fixed answer: 46 µs of server
CPU a request on uvicorn's protocol, 36 here; bench/README.md). The first request it
does not answer (another path or method, HTTP/1.0, `Expect`, `Transfer-Encoding`, an
upgrade, anything it does not parse plainly) hands the connection, with the bytes not
yet answered, to `DirectHttpProtocol`: uvicorn's httptools protocol, which from then on
serves the connection, answering the direct routes from its parser's callbacks and the
rest through ASGI. A malformed request thus gets uvicorn's own answer.

A route is a `Route(answer, takes, cancel_on_close, check)`: `takes(headers)`, when
given, decides from the headers whether the request is one `answer` serves (a shape it
does not serve goes to the ASGI app). `check(headers)`, when given, is the part of the
answer that the headers alone decide (the gateway's request guard): its result is the
handler's third argument, `await handler(headers, body, checked)` (None without a
`check`). `DirectFront` keeps both with the parsed head, so a client that sends the same
headers again (most do: only `Content-Length` changes) pays for neither again; neither
may look at `Content-Length`, which the protocol checks against `max_body` itself. A `cancel_on_close` route's answer is cancelled when its
client closes the connection while it runs: a long-poll, whose wait must end with its
client (a parked lease of a closed connection takes no jobs). `DirectFront` answers such
routes; `DirectHttpProtocol` leaves them to the ASGI app, which watches for the client's
`http.disconnect` itself. `headers` are the request's, by lower-case name (the last of a
repeated one wins), a `LowerCaseHeaders` as the gateway's `header_dict` gives them.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

log = logging.getLogger(__name__)

Answer = tuple[int, list[tuple[bytes, bytes]], bytes]
Handler = Callable[[dict[str, str], bytes, Any], Awaitable[Answer]]


class LowerCaseHeaders(dict[str, str]):
    """A request's headers by lower-case name: one looked up and absent is absent, with
    no search for another casing (`loam_gateway.auth._header`)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Route:
    answer: Handler
    takes: Callable[[dict[str, str]], bool] | None = None
    cancel_on_close: bool = False
    check: Callable[[dict[str, str]], Any] | None = None


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

    _direct: Route | None = None
    _body: bytes = b""
    _header_dict: dict[str, str] = {}

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._direct = None

    def on_headers_complete(self) -> None:
        route = self.routes.get(self.url)
        if route is not None and self._takes_direct():
            headers = LowerCaseHeaders(
                (name.decode("latin-1"), value.decode("latin-1")) for name, value in self.headers
            )
            if route.takes is None or route.takes(headers):
                self._direct, self._body, self._header_dict = route, b"", headers
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
        route = self._direct
        if route is None:
            super().on_message_complete()
            return
        self._direct = None
        parser = self.parser
        cycle = self.cycle = _DirectCycle(parser.get_http_version() != "1.0" and parser.should_keep_alive())
        headers = self._header_dict
        checked = None if route.check is None else route.check(headers)
        task = self.loop.create_task(self._answer(route.answer, headers, self._body, checked, cycle))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    async def _answer(
        self, handler: Handler, headers: dict[str, str], body: bytes, checked: Any, cycle: _DirectCycle
    ) -> None:
        try:
            status, extra, raw = await handler(headers, body, checked)
        except Exception:  # the ASGI path's answer to an app that raised
            log.exception("direct route failed")
            status, extra, raw = _FAILED
        if cycle.disconnected or self.transport.is_closing():
            return
        if self.flow.write_paused:
            await self.flow.drain()
        self.transport.write(
            _response(status, self.server_state.default_headers, extra, raw, cycle.keep_alive)
        )
        cycle.response_complete = True
        if not cycle.keep_alive:
            self.transport.close()
        self.on_response_complete()


def _response(
    status: int,
    default: list[tuple[bytes, bytes]],
    extra: list[tuple[bytes, bytes]],
    raw: bytes,
    keep_alive: bool,
) -> bytes:
    out = [STATUS_LINE[status]]
    for name, value in default:
        out += (name, b": ", value, b"\r\n")
    for name, value in extra:
        out += (name, b": ", value, b"\r\n")
    if not keep_alive:
        out.append(b"connection: close\r\n")
    out += (b"content-length: %d\r\n\r\n" % len(raw), raw)
    return b"".join(out)


#: Distinct request heads a protocol class keeps parsed; past that it starts again (a
#: client whose every head differs costs one parse a request, as with no cache at all).
MAX_HEADS_KEPT = 1024
_UNSEEN = object()

#: A request head longer than this, or one that is not complete by then, is not a
#: direct route's: uvicorn's protocol takes the connection and applies its own limits.
MAX_HEAD = 16 * 1024
#: A `POST` of HTTP/1.1 with header lines of a token, a colon and a value, lines broken by
#: CRLF only, no control character but a tab; obs-text (bytes over 0x7f) is read as Latin-1.
_PLAIN_HEAD = re.compile(
    r"POST ([^ \x00-\x1f\x7f]+) HTTP/1\.1((?:\r\n[-!#$%&'*+.^_`|~0-9A-Za-z]+:[^\x00-\x08\x0a-\x1f\x7f]*)*)"
)


#: A head's `Content-Length` line: its value is cut out of the key a parsed head is kept
#: by (it changes from request to request; nothing else kept with the head depends on it).
_LENGTH = re.compile(rb"\r\n(?i:content-length):[ \t]*([0-9]+)[ \t]*(?=\r\n|\Z)")


def _bare_break(partial: bytes) -> bool:
    """Whether a head still arriving has a CR or LF that is not part of a CRLF (its end
    would never be found by looking for CRLF CRLF)."""
    pairs = partial.count(b"\r\n")
    return partial.count(b"\n") != pairs or partial.count(b"\r") != pairs + partial.endswith(b"\r")


class DirectFront(asyncio.Protocol):
    """Where every connection starts: plain HTTP/1.1 direct requests answered here, in
    order, by `_serve` (one task per connection, woken per request); the first other
    request hands the connection to `fallback` (see the module's docstring).

    Keep-alive, graceful shutdown and the server's request count are uvicorn's: the
    connection is in `server_state.connections` (shutdown closes it when idle, or after
    the answer in flight), its task is in `server_state.tasks` while a request runs (a
    shutdown whose grace period ends cancels it, before the app's lifespan shutdown, as it
    does uvicorn's request tasks: a parked long-poll ends there), an idle connection
    closes after `timeout_keep_alive`, and each answer counts towards
    `limit_max_requests`. A client that goes away while its request runs does not cancel
    it (as on uvicorn's protocol): the answer is dropped; unless its route is
    `cancel_on_close`: then the answer is cancelled."""

    routes: Mapping[str, Route] = {}
    max_body = 0
    fallback: type[HttpToolsProtocol] = HttpToolsProtocol
    #: Request heads already parsed, by the head without its `Content-Length` value, and
    #: what `_parse_head` made of them (the same for every connection of this class). A
    #: client sends the same head again and again but for that value: a dict lookup then
    #: stands in for the parse and the route's `check`.
    heads: dict[bytes, tuple[Route, dict[str, str], Any] | None] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.heads = {}  # a class's own: what a head means depends on its routes

    def __init__(
        self,
        config: uvicorn.Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.config, self.server_state, self.app_state = config, server_state, app_state
        self.loop = _loop or asyncio.get_event_loop()
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.request: tuple[Handler, dict[str, str], bytes, Any, bool] | None = None
        self.busy = False  # a request is parsed and not yet answered
        self.cancel_on_close = False  # the busy request's route: cancelled if the client leaves
        self.keep_alive = True
        self.task: asyncio.Task[None] | None = None
        self.waiter: asyncio.Future[None] | None = None  # `_serve` waiting for a request
        self.drained: asyncio.Future[None] | None = None  # set while the transport's buffer is full
        self.reading = True
        self.idle_since = 0.0
        self.idle_timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.server_state.connections.add(self)  # type: ignore[arg-type]
        if self.config.limit_concurrency is not None:
            self._hand_over()  # its 503 is uvicorn's to give

    def connection_lost(self, exc: Exception | None) -> None:
        self.server_state.connections.discard(self)  # type: ignore[arg-type]
        self._stop_timer()
        if self.task is not None and (self.waiter is not None or (self.busy and self.cancel_on_close)):
            self.task.cancel()  # idle, or a long-poll whose client is gone
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.buffer = self.buffer + data if self.buffer else data
        if not self.busy:
            self._next()
        elif self.reading and len(self.buffer) > self.max_body + MAX_HEAD:
            self.reading = False  # pipelined past what one request may be: wait
            self.transport.pause_reading()  # type: ignore[union-attr]

    def pause_writing(self) -> None:
        self.drained = self.loop.create_future()

    def resume_writing(self) -> None:
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)
        self.drained = None

    # -- uvicorn's server asks ---------------------------------------------------------
    def shutdown(self) -> None:
        if self.busy:
            self.keep_alive = False  # closed after the answer in flight
        else:
            self.transport.close()  # type: ignore[union-attr]

    # -- requests ----------------------------------------------------------------------
    def _next(self) -> None:
        """The next request in the buffer: to `_serve` if it is a direct one, complete;
        nothing yet if it is a direct one still arriving; else the connection is handed
        over."""
        buffer = self.buffer
        if not buffer:
            return
        end = buffer.find(b"\r\n\r\n", 0, MAX_HEAD)
        if end < 0:
            if (
                len(buffer) >= MAX_HEAD
                or not buffer.startswith(b"POST "[: len(buffer)])
                or _bare_break(buffer)
            ):
                self._hand_over()
            return
        head = buffer[:end]
        declared = _LENGTH.search(head)
        key = head if declared is None else head[: declared.start(1)] + head[declared.end(1) :]
        parsed = self.heads.get(key, _UNSEEN)
        if parsed is _UNSEEN:
            parsed = self._parse_head(head.decode("latin-1"))
            if len(self.heads) >= MAX_HEADS_KEPT:
                self.heads.clear()
            self.heads[key] = parsed
        # A parsed head has one Content-Length, a plain decimal: the line found above.
        length = -1 if declared is None else int(declared[1])
        if parsed is None or not 0 <= length <= self.max_body:
            self._hand_over()
            return
        route, headers, checked = parsed
        headers = LowerCaseHeaders(headers)  # the handler's own: it may add to them
        headers["content-length"] = declared[1].decode()  # type: ignore[index]
        start = end + 4
        if len(buffer) < start + length:
            return  # the body is still arriving
        body, self.buffer = buffer[start : start + length], buffer[start + length :]
        keep_alive = "close" not in headers.get("connection", "").lower()
        self.busy = True
        self.cancel_on_close = route.cancel_on_close
        self.request = (route.answer, headers, body, checked, keep_alive)
        if self.task is None:
            self.task = self.loop.create_task(self._serve())
            self.task.add_done_callback(self._ended)
        elif self.waiter is not None:
            self.waiter.set_result(None)
            self.waiter = None
        self.server_state.tasks.add(self.task)

    def _parse_head(self, head: str) -> tuple[Route, dict[str, str], Any] | None:
        """The route, headers and route's `check` of a request head this protocol
        answers, or None: not a direct route's, or not a head it reads without doubt
        (`_PLAIN_HEAD` does not match it, or it repeats its length). Not the length's
        value: the same head with another length reads the same."""
        plain = _PLAIN_HEAD.fullmatch(head)
        route = None if plain is None else self.routes.get(plain[1])
        if route is None:
            return None
        headers = LowerCaseHeaders()
        length = None
        for line in plain[2].split("\r\n")[1:]:  # type: ignore[index]
            name, _, value = line.partition(":")
            name = name.lower()
            value = value.strip(" \t")
            if name == "content-length":
                if length is not None or not value.isdecimal():
                    return None
                length = int(value)
            headers[name] = value
        if length is None:
            return None
        if "transfer-encoding" in headers or "expect" in headers or "upgrade" in headers:
            return None
        if "upgrade" in headers.get("connection", "").lower():
            return None
        if route.takes is not None and not route.takes(headers):
            return None
        return route, headers, None if route.check is None else route.check(headers)

    async def _serve(self) -> None:
        transport = self.transport
        assert transport is not None
        while True:
            assert self.request is not None
            handler, headers, body, checked, keep_alive = self.request
            self.request = None
            try:
                status, extra, raw = await handler(headers, body, checked)
            except Exception:  # the ASGI path's answer to an app that raised
                log.exception("direct route failed")
                status, extra, raw = _FAILED
            if transport.is_closing():
                return
            keep_alive = keep_alive and self.keep_alive
            transport.write(_response(status, self.server_state.default_headers, extra, raw, keep_alive))
            self.server_state.total_requests += 1
            if not keep_alive:
                transport.close()
                return
            if self.drained is not None:
                await self.drained  # the client is not reading: read no more meanwhile
            self.busy = False
            self.server_state.tasks.discard(self.task)  # type: ignore[arg-type]
            if not self.reading:
                self.reading = True
                transport.resume_reading()
            self._next()
            if self.request is None:
                if self.transport is not transport or transport.is_closing():
                    return  # handed over (or closed): this connection is not served here
                self._idle()
                self.waiter = self.loop.create_future()
                await self.waiter

    def _ended(self, task: asyncio.Task[None]) -> None:
        self.server_state.tasks.discard(task)
        if task.cancelled() and self.transport is not None and not self.transport.is_closing():
            self.transport.close()  # cancelled by a shutdown: its answer will not come

    # -- keep-alive --------------------------------------------------------------------
    def _idle(self) -> None:
        """Between requests: one timer per connection, re-armed only when it fires
        early, instead of a timer set and cancelled per request."""
        self.idle_since = self.loop.time()
        if self.idle_timer is None:
            self.idle_timer = self.loop.call_later(self.config.timeout_keep_alive, self._idle_check)

    def _idle_check(self) -> None:
        self.idle_timer = None
        if self.busy or self.buffer or self.transport is None or self.transport.is_closing():
            return  # re-armed when the connection next goes idle
        left = self.idle_since + self.config.timeout_keep_alive - self.loop.time()
        if left > 0:
            self.idle_timer = self.loop.call_later(left, self._idle_check)
        else:
            self.transport.close()

    def _stop_timer(self) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None

    def _hand_over(self) -> None:
        """From here on `fallback` serves this connection, starting with the bytes not
        yet answered (this protocol is idle: nothing of theirs was answered here)."""
        transport, buffer = self.transport, self.buffer
        assert transport is not None
        self.buffer, self.transport = b"", None
        self.server_state.connections.discard(self)  # type: ignore[arg-type]
        self._stop_timer()
        if self.task is not None and self.waiter is not None:
            self.task.cancel()
        if not self.reading:
            transport.resume_reading()
        protocol = self.fallback(self.config, self.server_state, self.app_state, self.loop)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        if buffer:
            protocol.data_received(buffer)


def direct_protocol(routes: Mapping[str, Route], max_body: int) -> type[DirectFront]:
    """The HTTP server's protocol class answering `routes` (raw request targets)
    directly: a `DirectFront` that hands what else it reads to a `DirectHttpProtocol`
    with the same routes but the `cancel_on_close` ones."""
    answered = {path.encode("ascii"): route for path, route in routes.items() if not route.cancel_on_close}
    fallback = type("DirectHttpProtocol", (DirectHttpProtocol,), {"routes": answered, "max_body": max_body})
    return type(
        "DirectFront",
        (DirectFront,),
        {"routes": dict(routes), "max_body": max_body, "fallback": fallback},
    )


__all__ = [
    "Answer",
    "DirectFront",
    "DirectHttpProtocol",
    "Handler",
    "LowerCaseHeaders",
    "Route",
    "direct_protocol",
]
