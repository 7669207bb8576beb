"""The gateway's Connect JobsService: for each call, resolve the caller (namespace and
actions), check the method's action, and hand the request to the Router. Nothing else
happens here; the REST facade uses the same `Access` and the same Router.

The action each method needs is its `action` in the method table
(loam_common.api.methods), as is every REST-only operation's; an operation the table
marks as a read is also open to a `jobs:read` token (the console's viewer role).
Without an
authenticator (dev, loopback only) every action is allowed and the namespace is the
`x-loam-namespace` header (which a `/ns/<ns>/...` URL prefix sets, see
`NamespacePrefix`), or `default`. With one, the namespace comes from the credential
only; a request that names another namespace is refused.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Mapping
from typing import Any

from loam_common import auth
from loam_common.api.headers import NAMESPACE_HEADER
from loam_common.api.methods import STREAM_PATHS, Method, Operation
from loam_common.api.service import JobsServiceHandlers
from loam_common.api.stream_writes import coalesce_streams
from loam_common.audit import ACTOR, Actor
from loam_common.auth import Principal
from loam_common.errors import PermissionDenied
from loam_gateway.auth import Authenticator, DevAuthenticator, require
from loam_gateway.routing import Router

# The same few callers call again and again (a token's principal is cached, the dev one is
# equal each time): their actors are made once.
_actor_of = functools.lru_cache(maxsize=4096)(Actor.of)


class Access:
    """Who is calling and whether they may: `await access.check(headers, operation)`,
    with the operation's row of the method table."""

    def __init__(self, authenticator: Authenticator | None = None) -> None:
        self.authenticator = authenticator
        self._dev = DevAuthenticator() if authenticator is None else None

    async def check(self, headers: Mapping[str, str], operation: Operation, via: str = "rest") -> Principal:
        """The caller, allowed `operation`; from here on the request acts for them (the
        actor its audited actions record, loam_common.audit, carried to a remote core by
        the Router)."""
        principal = await self.identify(headers)
        if self._dev is None and not (not operation.writes and principal.can(auth.READ)):
            require(principal, operation.action)
        ACTOR.set(_actor_of(principal, via))
        return principal

    async def identify(self, headers: Mapping[str, str]) -> Principal:
        """The caller, whatever they may do (the console's sign-in asks which namespace
        and actions a token holds)."""
        if self._dev is not None:
            return await self._dev.authenticate(headers)
        principal = await self.authenticator.authenticate(headers)
        named = headers.get(NAMESPACE_HEADER)
        if named and named != principal.namespace:
            raise PermissionDenied(
                f"this token is for namespace {principal.namespace!r}, not {named!r}; "
                "the namespace comes from the token: drop the header or the /ns/ prefix"
            )
        return principal


class GatewayJobsService(JobsServiceHandlers):
    """The gateway's JobsService: each method checks its action, then goes to the Router."""

    def __init__(self, router: Router, access: Access) -> None:
        self.router = router
        self.access = access

    async def dispatch(self, method: Method, request: Any, ctx: Any) -> Any:
        principal = await self.access.check(ctx.request_headers, method, via="connect")
        return await self.router.call(principal.namespace, method.name, request, timeout_ms=ctx.timeout_ms)

    async def dispatch_stream(self, method: Method, request: Any, ctx: Any) -> AsyncIterator[Any]:
        principal = await self.access.check(ctx.request_headers, method, via="connect")
        async for item in self.router.stream(principal.namespace, method.name, request):
            yield item


class NamespacePrefix:
    """ASGI middleware: `/ns/<ns>/rest/of/path` is served as `/rest/of/path` with the
    `x-loam-namespace: <ns>` header, for Connect and REST alike (dev namespaces in the
    URL; with auth on, a prefix naming another namespace than the token's is refused).

    With `connect_app`, Connect calls go straight to it: the hot path skips FastAPI's
    routing and exception layers, which the Connect app does not use."""

    def __init__(self, app: Any, connect_app: Any = None) -> None:
        self.app = app
        # Watch's messages leave a loop turn's at a time (loam_common.api.stream_writes).
        self.connect_app = None if connect_app is None else coalesce_streams(connect_app, STREAM_PATHS)
        self.connect_prefix = connect_app.path + "/" if connect_app is not None else None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            if scope["path"].startswith("/ns/"):
                scope = strip_namespace(scope)
            if self.connect_prefix is not None and scope["path"].startswith(self.connect_prefix):
                await self.connect_app(scope, receive, send)
                return
        await self.app(scope, receive, send)


def strip_namespace(scope: dict) -> dict:
    ns, sep, rest = scope["path"][4:].partition("/")
    if not (ns and sep):
        return scope
    scope = dict(scope)
    scope["path"] = "/" + rest
    if scope.get("raw_path"):
        scope["raw_path"] = b"/" + scope["raw_path"][4:].partition(b"/")[2]
    header = NAMESPACE_HEADER.encode()
    scope["headers"] = [(k, v) for k, v in scope.get("headers", ()) if k.lower() != header]
    scope["headers"].append((header, ns.encode()))
    return scope
