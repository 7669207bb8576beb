"""The Spark Connect proxy: one port in front of every namespace's Sail.

Each call to `/spark.connect.SparkConnectService/<Method>`:
1. is authenticated from its `authorization: Bearer <token>` metadata (the same
   authenticator as the gateway's; the token needs `jobs:engine`), before anything
   starts: a missing or wrong token is `UNAUTHENTICATED`, a token without the action
   `PERMISSION_DENIED` — both codes PySpark does not retry;
2. has its session id read from the first request message (field 1 of every Spark
   Connect request; `session_id`), so it stays on the server that holds the session;
3. goes to the namespace's Sail (`SailPool`, started on demand), or with
   `x-loam-engine: jvm` metadata (`sc://host:port/;x-loam-engine=jvm`) to its Apache
   Spark Connect server (spark/jvm.py); a server that cannot start is
   `FAILED_PRECONDITION`, never `UNAVAILABLE`, which PySpark retries for ten minutes;
4. is relayed as HTTP/2 frames both ways (spark/relay.py): the answers, streams,
   status, error details (Spark's ErrorInfo in `grpc-status-details-bin`, from which
   PySpark rebuilds `AnalysisException`), cancellations and flow control are the
   server's own bytes. Only the client's header blocks are decoded and written again.

A client connection is bound to the namespace and engine of its first admitted call
and relayed over one upstream connection of its own; a later call on it with another
namespace's token or another engine is refused, not sent elsewhere. Nothing of the
client's credentials goes upstream: the metadata is filtered and the namespace added as
`x-loam-namespace`. Decision 0044 has why frames rather than gRPC's own server and
channel (a gRPC relay in Python costs ~1 ms a call).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from loam_common.auth import ENGINE, Principal
from loam_common.errors import JobsError
from loam_engines.spark.h2 import Status
from loam_engines.spark.relay import ClientConnection
from loam_engines.spark.sail import BackendUnavailable, SailBackend, SailPool, SessionLost

log = logging.getLogger("loam.engines.spark.proxy")

SERVICE = "/spark.connect.SparkConnectService/"
RELEASE_SESSION = SERVICE + "ReleaseSession"
NAMESPACE_HEADER = "x-loam-namespace"
ENGINE_HEADER = "x-loam-engine"
DEFAULT_ENGINE = "sail"
_DROP_HEADERS = frozenset(
    {"authorization", "user-agent", "te", "content-type", NAMESPACE_HEADER, ENGINE_HEADER}
)
# What stays with the client: the transport headers below go upstream as they came.
_TRANSPORT_HEADERS = frozenset({"te", "content-type"})
_ERROR_CODES = {
    "unauthenticated": Status.UNAUTHENTICATED,
    "permission_denied": Status.PERMISSION_DENIED,
    "invalid_argument": Status.INVALID_ARGUMENT,
    "not_found": Status.NOT_FOUND,
}


class Authenticator(Protocol):
    async def authenticate(self, headers: Mapping[str, str]) -> Principal: ...


def session_id(raw: bytes) -> str | None:
    """Field 1 (a string) of a serialised Spark Connect request, without its protos:
    protobuf writes fields in number order, so it leads the message when set. None
    when it is not there or the bytes are not a message."""
    try:
        return _field_one(raw)
    except IndexError:
        return None


def _field_one(raw: bytes) -> str | None:
    i, n = 0, len(raw)
    while i < n:
        key, i = _varint(raw, i)
        field, wire = key >> 3, key & 7
        if wire == 2:
            size, i = _varint(raw, i)
            if field == 1:
                if i + size > n:
                    return None
                try:
                    return raw[i : i + size].decode()
                except UnicodeDecodeError:
                    return None
            i += size
        elif wire == 0:
            _, i = _varint(raw, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            return None
        if field > 1:  # past field 1: it is not set
            return None
    return None


def _varint(raw: bytes, i: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        if i >= len(raw):
            raise IndexError("truncated varint")
        b = raw[i]
        i += 1
        out |= (b & 0x7F) << shift
        if not b & 0x80:
            return out, i
        shift += 7


def request_session(head: bytes) -> tuple[bool, str | None]:
    """The session id of a call from the first bytes of its request stream (gRPC's
    5-byte message prefix, then the message): (whether those bytes settle it, the id).
    Unsettled until field 1 is whole; settled with None when the message has no field 1
    first or is compressed (the proxy does not decompress)."""
    if len(head) < 5:
        return False, None
    if head[0]:  # a compressed message
        return True, None
    size = int.from_bytes(head[1:5])
    whole = len(head) >= 5 + size
    message = head[5 : 5 + size]
    try:
        key, i = _varint(message, 0)
        if key != 0x0A:  # field 1, length-delimited: were it set, it would come first
            return True, None
        length, i = _varint(message, i)
    except IndexError:
        return whole, None
    if i + length > len(message):
        return whole, None
    try:
        return True, message[i : i + length].decode()
    except UnicodeDecodeError:
        return True, None


def upstream_metadata(incoming: Any, ns: str) -> list[tuple[str, Any]]:
    """The call's own metadata as its server sees it: the namespace first, nothing of the
    client's credentials, routing or transport."""
    out = [(NAMESPACE_HEADER, ns)]
    for key, value in incoming or ():
        k = key.lower()
        if k in _DROP_HEADERS or k.startswith((":", "grpc-")):
            continue
        out.append((k, value))
    return out


def upstream_headers(
    headers: list[tuple[str, str]], ns: str, authorization: str | None
) -> list[tuple[str, str]]:
    """A call's header list as it goes upstream: HTTP/2's and gRPC's own fields as the
    client sent them (pseudo-headers first, `te`, `content-type`, `grpc-timeout`, ...),
    then `upstream_metadata`, then the server's own credential if it wants one."""
    out = [(k, v) for k, v in headers if k[0] == ":" or k in _TRANSPORT_HEADERS or k.startswith("grpc-")]
    out += upstream_metadata([(k, v) for k, v in headers if k[0] != ":"], ns)
    if authorization:
        out.append(("authorization", authorization))
    return out


@dataclass(frozen=True, slots=True)
class Admitted:
    """A call let through: its namespace and engine, and the server acquired for it."""

    ns: str
    engine: str
    pool: SailPool
    backend: SailBackend


class SparkConnectProxy:
    """`await proxy.start()` -> the bound port; `await proxy.stop()`."""

    service_prefix = SERVICE
    release_session = RELEASE_SESSION

    def __init__(
        self, authenticator: Authenticator, pools: Mapping[str, SailPool], *, host: str = "127.0.0.1",
        port: int = 15002,
    ) -> None:  # fmt: skip
        self.authenticator = authenticator
        self.pools = dict(pools)  # engine name (x-loam-engine) -> its pool; "sail" by default
        self.host = host
        self.port = port
        self.connections: set[ClientConnection] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        loop = asyncio.get_running_loop()
        # No SO_REUSEPORT: a second server on the same port must fail to bind, not share
        # the port and half the calls.
        try:
            server = await loop.create_server(lambda: ClientConnection(self), self.host, self.port,
                                              reuse_port=False)  # fmt: skip
        except OSError:
            raise OSError(f"cannot bind the Spark Connect proxy to {self.host}:{self.port}: "
                          "is the port in use?") from None  # fmt: skip
        self._server = server
        self.port = server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self, grace_s: float = 2.0) -> None:
        """Stop taking connections; let the calls in flight finish for up to `grace_s`."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        connections = list(self.connections)
        for conn in connections:
            conn.drain()
        if connections:
            waits = [asyncio.ensure_future(c.idle.wait()) for c in connections]
            await asyncio.wait(waits, timeout=grace_s)
            for w in waits:
                w.cancel()
        for conn in connections:
            conn.abort()
        with contextlib.suppress(TimeoutError):  # every connection is gone; do not hang on a loop's quirks
            await asyncio.wait_for(server.wait_closed(), 1.0)

    @property
    def url(self) -> str:
        # `localhost`, not 127.0.0.1: PySpark sends `;token=` over plaintext only to it.
        return f"sc://localhost:{self.port}"

    # -- one call (relay.py asks) ------------------------------------------------------------
    request_session = staticmethod(request_session)
    upstream_headers = staticmethod(upstream_headers)

    async def admit(
        self, headers: Mapping[str, str], session: str | None, bound: Admitted | None
    ) -> Admitted | tuple[Status, str]:
        """Check a call and acquire its server: `Admitted`, or (status, message) to refuse
        it with. `bound`: what the call's connection already serves, if anything."""
        try:
            principal = await self.authenticator.authenticate(headers)
        except JobsError as e:
            return _ERROR_CODES.get(e.code, Status.UNAUTHENTICATED), e.message
        ns = principal.namespace
        if not principal.can(ENGINE):
            return Status.PERMISSION_DENIED, f"this token lacks the 'jobs:engine' action in namespace {ns!r}"
        engine = headers.get(ENGINE_HEADER, DEFAULT_ENGINE)
        pool = self.pools.get(engine)
        if pool is None:
            return (Status.INVALID_ARGUMENT,
                    f"{ENGINE_HEADER}: {engine!r} is not an engine here: use {', '.join(self.pools)}")  # fmt: skip
        if bound is not None and bound.ns != ns:
            return (Status.PERMISSION_DENIED,
                    f"this connection serves namespace {bound.ns!r}: open another one for namespace {ns!r}")  # fmt: skip
        if bound is not None and bound.engine != engine:
            return (Status.INVALID_ARGUMENT,
                    f"this connection serves the {bound.engine} engine: open another one for {engine}")  # fmt: skip
        try:
            backend = await pool.acquire(ns, session)
        except SessionLost as e:
            return Status.FAILED_PRECONDITION, str(e)
        except BackendUnavailable as e:
            log.warning("namespace %s: %s", ns, e)
            return Status.FAILED_PRECONDITION, str(e)
        except (OSError, RuntimeError) as e:  # spawning failed: still not a code PySpark retries
            log.exception("namespace %s: starting its %s server failed", ns, engine)
            return Status.FAILED_PRECONDITION, f"the {engine} server cannot start: {e}"
        return Admitted(ns, engine, pool, backend)
