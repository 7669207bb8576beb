"""The Spark Connect proxy: one gRPC port in front of every namespace's Sail.

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
4. is relayed as raw bytes both ways, any shape (unary and streams look alike on the
   wire), with the upstream's status, details and trailing metadata (Spark's ErrorInfo
   in `grpc-status-details-bin`, from which PySpark rebuilds `AnalysisException`), and
   cancelled upstream when the client goes away. The methods Spark Connect defines as
   unary (`UNARY`) take a unary path on both sides, which spares the per-call cost of
   the stream machinery; any other method, known or not, is relayed as a stream.

Nothing of the client's credentials goes upstream: the metadata is filtered and the
namespace added as `x-loam-namespace`.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol

import grpc

from loam_common.auth import ENGINE, Principal
from loam_common.errors import JobsError
from loam_engines.spark.sail import CHANNEL_OPTIONS, BackendUnavailable, SailPool, SessionLost

log = logging.getLogger("loam.engines.spark.proxy")

SERVICE = "/spark.connect.SparkConnectService/"
RELEASE_SESSION = SERVICE + "ReleaseSession"
UNARY = frozenset(SERVICE + m for m in ("Config", "AnalyzePlan", "Interrupt", "ReleaseExecute", "ReleaseSession",
                                        "ArtifactStatus", "FetchErrorDetails", "CloneSession", "GetStatus"))  # fmt: skip
NAMESPACE_HEADER = "x-loam-namespace"
ENGINE_HEADER = "x-loam-engine"
DEFAULT_ENGINE = "sail"
_DROP_HEADERS = frozenset(
    {"authorization", "user-agent", "te", "content-type", NAMESPACE_HEADER, ENGINE_HEADER}
)
_ERROR_CODES = {
    "unauthenticated": grpc.StatusCode.UNAUTHENTICATED,
    "permission_denied": grpc.StatusCode.PERMISSION_DENIED,
    "invalid_argument": grpc.StatusCode.INVALID_ARGUMENT,
    "not_found": grpc.StatusCode.NOT_FOUND,
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


def upstream_metadata(incoming: Any, ns: str) -> list[tuple[str, Any]]:
    out = [(NAMESPACE_HEADER, ns)]
    for key, value in incoming or ():
        k = key.lower()
        if k in _DROP_HEADERS or k.startswith((":", "grpc-")):
            continue
        out.append((k, value))
    return out


def call_headers(incoming: Any) -> dict[str, str]:
    """The call's text metadata by lower-case name (binary `-bin` values left out)."""
    return {k.lower(): v for k, v in incoming or () if isinstance(v, str)}


def downstream_trailers(trailers: Any) -> tuple[tuple[str, Any], ...]:
    """The upstream's trailing metadata a client may see: everything but gRPC's own
    reserved keys, except the error details PySpark needs."""
    out = []
    for key, value in trailers or ():
        k = key.lower()
        if k.startswith("grpc-") and k != "grpc-status-details-bin":
            continue
        out.append((k, value))
    return tuple(out)  # grpc.aio wants a tuple


class SparkConnectProxy:
    """`await proxy.start()` -> the bound port; `await proxy.stop()`."""

    def __init__(
        self,
        authenticator: Authenticator,
        pools: Mapping[str, SailPool],
        *,
        host: str = "127.0.0.1",
        port: int = 15002,
        on_call: Callable[[str, str], Awaitable[None]] | None = None,
    ) -> None:
        self.authenticator = authenticator
        self.pools = dict(pools)  # engine name (x-loam-engine) -> its pool; "sail" by default
        self.host = host
        self.port = port
        self.on_call = on_call
        self._server: grpc.aio.Server | None = None

    async def start(self) -> int:
        if self.port:
            # Ask the OS first: gRPC would log its own error line for a taken port (and
            # tools that watch `loam dev`'s output for "ready" read "already" in it).
            with socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind((self.host, self.port))
                except OSError:
                    raise OSError(f"cannot bind the Spark Connect proxy to {self.host}:{self.port}: "
                                  "is the port in use?") from None  # fmt: skip
        # No SO_REUSEPORT (gRPC's default on Linux): a second server on the same port
        # must fail to bind, not share the port and half the calls.
        server = grpc.aio.server(options=[*CHANNEL_OPTIONS, ("grpc.so_reuseport", 0)])
        server.add_generic_rpc_handlers((_Handler(self),))
        try:
            bound = server.add_insecure_port(f"{self.host}:{self.port}")
        except RuntimeError:
            bound = 0
        if not bound:
            raise OSError(
                f"cannot bind the Spark Connect proxy to {self.host}:{self.port}: is the port in use?"
            )
        await server.start()
        self._server = server
        self.port = bound
        return bound

    async def stop(self, grace_s: float = 2.0) -> None:
        if self._server is not None:
            await self._server.stop(grace_s)
            self._server = None

    @property
    def url(self) -> str:
        # `localhost`, not 127.0.0.1: PySpark sends `;token=` over plaintext only to it.
        return f"sc://localhost:{self.port}"

    # -- one call --------------------------------------------------------------------------
    async def _principal(self, context: grpc.aio.ServicerContext, headers: Mapping[str, str]) -> Principal:
        try:
            principal = await self.authenticator.authenticate(headers)
            if not principal.can(ENGINE):
                await context.abort(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"this token lacks the 'jobs:engine' action in namespace {principal.namespace!r}",
                )
        except JobsError as e:
            await context.abort(_ERROR_CODES.get(e.code, grpc.StatusCode.UNAUTHENTICATED), e.message)
        return principal

    async def _route(
        self, context: grpc.aio.ServicerContext, first: bytes | None
    ) -> tuple[SailPool, Any, str | None, list[tuple[str, Any]]]:
        """Authenticate the call and find its server: (pool, backend acquired for the call,
        session id, upstream metadata). Aborts the call with the code PySpark expects."""
        incoming = context.invocation_metadata()
        headers = call_headers(incoming)
        principal = await self._principal(context, headers)
        ns = principal.namespace
        engine = headers.get(ENGINE_HEADER, DEFAULT_ENGINE)
        pool = self.pools.get(engine)
        if pool is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"{ENGINE_HEADER}: {engine!r} is not an engine here: use {', '.join(self.pools)}")  # fmt: skip
        session = session_id(first) if first is not None else None
        try:
            backend = await pool.acquire(ns, session)
        except SessionLost as e:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        except BackendUnavailable as e:
            log.warning("namespace %s: %s", ns, e)
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        except (OSError, RuntimeError) as e:  # spawning failed: still not a code PySpark retries
            log.exception("namespace %s: starting its %s server failed", ns, engine)
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"the {engine} server cannot start: {e}")
        metadata = upstream_metadata(incoming, ns)
        if backend.authorization:
            metadata.append(("authorization", backend.authorization))
        return pool, backend, session, metadata

    async def relay_unary(self, method: str, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        pool, backend, session, metadata = await self._route(context, request)
        call = backend.unary(method)(request, metadata=metadata)
        closed = False
        try:
            reply = await call
            trailers = downstream_trailers(await call.trailing_metadata())
            if trailers:
                context.set_trailing_metadata(trailers)
            closed = method == RELEASE_SESSION
            return reply
        except grpc.aio.AioRpcError as e:
            await context.abort(e.code(), e.details() or "", downstream_trailers(e.trailing_metadata()))
        finally:
            if not call.done():
                call.cancel()  # the client went away first: so does the upstream call
            pool.release(backend, session, closed)

    async def relay(
        self, method: str, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        try:
            first = await anext(requests)
        except StopAsyncIteration:
            first = None
        pool, backend, session, metadata = await self._route(context, first)

        async def upstream_requests() -> AsyncIterator[bytes]:
            if first is not None:
                yield first
            async for item in requests:
                yield item

        call = backend.channel.stream_stream(method)(upstream_requests(), metadata=metadata)
        closed = False
        try:
            async for item in call:
                yield item
            trailers = downstream_trailers(await call.trailing_metadata())
            if trailers:
                context.set_trailing_metadata(trailers)
            closed = method == RELEASE_SESSION
        except grpc.aio.AioRpcError as e:
            await context.abort(e.code(), e.details() or "", downstream_trailers(e.trailing_metadata()))
        finally:
            call.cancel()
            pool.release(backend, session, closed)


class _Handler(grpc.GenericRpcHandler):
    def __init__(self, proxy: SparkConnectProxy) -> None:
        self.proxy = proxy

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method = details.method
        if not method.startswith(SERVICE):
            return None  # UNIMPLEMENTED
        proxy = self.proxy
        if method in UNARY:

            async def unary(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
                return await proxy.relay_unary(method, request, context)

            return grpc.unary_unary_rpc_method_handler(unary)

        # grpc.aio wants an async generator function here, not a callable returning one.
        async def relay(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext):
            async for item in proxy.relay(method, requests, context):
                yield item

        return grpc.stream_stream_rpc_method_handler(relay)
