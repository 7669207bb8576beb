"""`create_durable_app(core, hub, authenticate)`: the Resonate protocol over HTTP, as a
plain ASGI app the gateway mounts (at `/resonate`) or `loam-durable` serves alone.

- `POST {base}/`: one request envelope `{kind, head: {corrId, version, auth?}, data}`
  in, one response envelope `{kind, head: {corrId, status, version}, data}` out, with
  the HTTP status equal to `head.status` (200 on success, 300 for a suspend redirect,
  a string `data` on every refusal).
- `POST {base}/internal/push`: a peer serving the same store hands over a push whose
  stream may be here (peers.py); internal: the deployment's token, else loopback only.
- `POST {base}/internal/outbox`: a process without connections (a sweeper's durable
  timers) wrote pushes to the store's outbox: drain it now (peers.OutboxNotice);
  internal, as above.
- `GET {base}/poll/{group}/{pid}`: the push channel, Server-Sent Events: each push one
  `data: <json>` line; a `: keepalive` comment every `KEEPALIVE_S` so proxies keep the
  stream open. Authenticated by the `Authorization` header only.

Parsing and mapping only: the checks of each kind's data and the transactions are in
`DurableCore`. The namespace comes from `authenticate(headers, action)`, which the
gateway resolves exactly as for its other transports (a bearer token, or in dev on
loopback the `x-loam-namespace` header that a `/ns/<ns>/` prefix sets).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from loam_common.errors import JobsError, PermissionDenied, Unauthenticated
from loam_common.store.base import StoreUnavailable
from loam_durable.facade import DurableCore
from loam_durable.hub import Hub
from loam_durable.peers import OUTBOX_PATH, PUSH_PATH, internal_allowed
from loam_durable.records import PROTOCOL_VERSION, DurableError, dumps, loads, response

log = logging.getLogger(__name__)

KEEPALIVE_S = 15.0
MAX_BODY = 16 * 1024 * 1024

#: (headers, action) -> namespace; raises Unauthenticated / PermissionDenied / InvalidArgument
Authenticate = Callable[[Mapping[str, str], str], Awaitable[str]]

CONSUME = "jobs:consume"
SCHEDULE = "jobs:schedule"


def action_of(kind: str) -> str:
    """The Loam action a request kind needs: schedules need jobs:schedule, the rest is
    what a worker does (create, settle, lease), jobs:consume."""
    return SCHEDULE if kind.startswith("schedule.") else CONSUME


def _status_of(error: Exception) -> tuple[int, str]:
    if isinstance(error, DurableError):
        return error.status, error.message
    if isinstance(error, Unauthenticated):
        return 401, error.message
    if isinstance(error, PermissionDenied):
        return 403, error.message
    if isinstance(error, JobsError):
        return (400 if error.code == "invalid_argument" else 500), error.message
    if isinstance(error, StoreUnavailable):
        return 503, "store unavailable"
    log.exception("durable request failed", exc_info=error)
    return 500, "internal error"


async def _read_body(receive: Callable[[], Awaitable[dict]]) -> bytes | None:
    chunks = []
    size = 0
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return None
        chunk = msg.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return b""
        chunks.append(chunk)
        if not msg.get("more_body"):
            return b"".join(chunks)


async def _send_json(
    send: Callable[[dict], Awaitable[None]], status: int, body: Any, extra_headers: list | None = None
) -> None:
    await _send_raw_json(send, status, dumps(body), extra_headers)


async def _send_raw_json(
    send: Callable[[dict], Awaitable[None]], status: int, raw: bytes, extra_headers: list | None = None
) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(raw))]
    if extra_headers:
        headers += extra_headers
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": raw})


def _headers(scope: dict) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}


class DurableApp:
    #: the largest request body; a larger one is refused as not being a JSON object
    max_body = MAX_BODY

    def __init__(
        self, core: DurableCore, hub: Hub, authenticate: Authenticate, internal_token: str | None = None
    ) -> None:
        self.core = core
        self.hub = hub
        self.authenticate = authenticate
        self.internal_token = internal_token or None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":  # served alone: nothing to start or stop here
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        path = scope.get("path", "")
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        method = scope["method"]
        if path in ("", "/") and method == "POST":
            await self._envelope(scope, receive, send)
        elif path == PUSH_PATH and method == "POST":
            await self._push(scope, receive, send)
        elif path == OUTBOX_PATH and method == "POST":
            await self._outbox(scope, receive, send)
        elif path.startswith("/poll/") and method == "GET":
            await self._poll(scope, receive, send, path[len("/poll/") :])
        elif path in ("/promises", "/tasks", "/schedules") or path.startswith(
            ("/promises/", "/tasks/", "/schedules/")
        ):
            await _send_json(send, 410, "Gone: this server speaks the envelope protocol at POST /")
        else:
            await _send_json(
                send, 404, "Not found: POST / takes requests, GET /poll/{group}/{pid} streams pushes"
            )

    # -- POST / ----------------------------------------------------------------------------
    async def _envelope(self, scope: dict, receive: Any, send: Any) -> None:
        body = await _read_body(receive)
        if body is None:
            return
        await self.envelope(body, _headers(scope), send)

    async def envelope(
        self, body: bytes, headers: dict[str, str], send: Any, extra_headers: list | None = None
    ) -> None:
        """Answer one request envelope whose body has been read. `headers` by lower-case
        name, this call's own (it may add to them); `extra_headers` go on the answer (the
        gateway's CORS headers)."""
        status, raw = await self.answer(body, headers)
        await _send_raw_json(send, status, raw, extra_headers)

    async def answer(self, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        """The HTTP status and JSON body of the answer to one request envelope (see
        `envelope`); every refusal is an envelope too, a body over `max_body` (or b"")
        refused as not being a JSON object."""
        kind, corr_id = "", ""
        try:
            try:
                req = loads(body) if len(body) <= self.max_body else None
            except ValueError:
                raise DurableError(400, "Request body must be a JSON object") from None
            if not isinstance(req, dict):
                raise DurableError(400, "Request body must be a JSON object")
            kind = req.get("kind") if isinstance(req.get("kind"), str) else ""
            head = req.get("head")
            if not isinstance(head, dict):
                raise DurableError(400, "head must be an object")
            corr_id = head.get("corrId") if isinstance(head.get("corrId"), str) else ""
            if head.get("version") != PROTOCOL_VERSION:
                raise DurableError(
                    400, f"Unsupported version {head.get('version')!r}: this server speaks {PROTOCOL_VERSION}"
                )
            if not self.core.knows(kind):
                raise DurableError(400, f"Unknown request kind {kind!r}")
            data = req.get("data")
            if not isinstance(data, dict):
                raise DurableError(400, "data must be an object")
            auth = head.get("auth")
            if isinstance(auth, str) and auth:
                headers["authorization"] = f"Bearer {auth}"
            ns = await self.authenticate(headers, action_of(kind))
            status, out = await self.core.request(ns, kind, data)
        except Exception as e:  # noqa: BLE001 - every refusal becomes an envelope
            status, message = _status_of(e)
            return status, dumps(response(kind, corr_id, status, message))
        return status, dumps(response(kind, corr_id, status, out))

    async def _internal_body(self, scope: dict, receive: Any, send: Any) -> bytes | None:
        """The body of a call between this deployment's processes, or None when there is
        nothing to answer (the caller went away) or it was answered already (a caller
        without the internal token: 401)."""
        body = await _read_body(receive)
        if body is None:
            return None
        client = scope.get("client")
        if not internal_allowed(_headers(scope), client[0] if client else None, self.internal_token):
            await _send_json(send, 401, "internal calls need this deployment's internal token")
            return None
        return body

    # -- POST /internal/push ----------------------------------------------------------------
    async def _push(self, scope: dict, receive: Any, send: Any) -> None:
        """A push a peer could not deliver: to this process's streams only (never held
        here and never forwarded again: the peer decides what happens if nobody takes it)."""
        body = await self._internal_body(scope, receive, send)
        if body is None:
            return
        try:
            req = loads(body)
            ns, address, message = req["ns"], req["address"], req["message"]
            if not isinstance(ns, str) or not isinstance(address, str) or not isinstance(message, dict):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            await _send_json(send, 400, "a push is {ns, address, message}")
            return
        await _send_json(send, 200, {"delivered": self.hub.send(ns, address, message, hold=False)})

    # -- POST /internal/outbox --------------------------------------------------------------
    async def _outbox(self, scope: dict, receive: Any, send: Any) -> None:
        """The store's outbox has pushes: wake this process's drain (it reads every
        namespace's outbox, so the body only has to be well formed)."""
        body = await self._internal_body(scope, receive, send)
        if body is None:
            return
        try:
            req = loads(body)
            if not isinstance(req, dict) or not isinstance(req.get("ns"), str):
                raise TypeError
        except (ValueError, TypeError):
            await _send_json(send, 400, "an outbox notice is {ns}")
            return
        waiting = self.core.outbox_waiting
        if waiting is not None:
            waiting()
        await _send_json(send, 200, {"draining": waiting is not None})

    # -- GET /poll/{group}/{pid} -------------------------------------------------------------
    async def _poll(self, scope: dict, receive: Any, send: Any, rest: str) -> None:
        group, _, pid = rest.partition("/")
        if not group or not pid or "/" in pid:
            await _send_json(send, 400, "the push channel is GET /poll/{group}/{pid}")
            return
        try:
            ns = await self.authenticate(_headers(scope), CONSUME)
        except Exception as e:  # noqa: BLE001
            status, message = _status_of(e)
            await _send_json(send, status, message)
            return
        conn = self.hub.connect(ns, group, pid)
        disconnected = asyncio.ensure_future(_wait_disconnect(receive))

        def gone(_: asyncio.Future) -> None:  # no push goes to it from now on
            self.hub.disconnect(conn)
            conn.wake()

        disconnected.add_done_callback(gone)
        loop = asyncio.get_running_loop()
        # A keep-alive comment after each KEEPALIVE_S with nothing written: a tick wakes
        # the writer only then (no timer set and cancelled per push).
        written_at = loop.time()

        def tick() -> None:
            nonlocal ticker
            due = written_at + KEEPALIVE_S - loop.time()
            if due <= 0:
                conn.wake()
                due = KEEPALIVE_S
            ticker = loop.call_later(due, tick)

        ticker = loop.call_later(KEEPALIVE_S, tick)
        try:
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"),
                                    (b"x-accel-buffering", b"no")]})  # fmt: skip
            await send({"type": "http.response.body", "body": b": connected\n\n", "more_body": True})
            while True:
                chunk = await conn.wait()  # every push waiting, in one go
                if not conn.open:
                    break
                body = chunk.encode() if chunk else b": keepalive\n\n"
                await send({"type": "http.response.body", "body": body, "more_body": True})
                written_at = loop.time()
        except OSError:
            pass
        finally:
            ticker.cancel()
            self.hub.disconnect(conn)
            disconnected.cancel()


async def _wait_disconnect(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def create_durable_app(
    core: DurableCore, hub: Hub, authenticate: Authenticate, internal_token: str | None = None
) -> DurableApp:
    return DurableApp(core, hub, authenticate, internal_token)
