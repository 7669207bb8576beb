"""What the gateway checks of every HTTP request before any route sees it: the browser
and size defences (docs/security.md, decision 0030).

In order, each refusal a JSON `{code, message}` and nothing read past the headers:

1. **Host**: the `Host` header must be an allowed host (DNS rebinding: a page on
   `attacker.example` that re-resolves its name to 127.0.0.1 still sends its own host).
   Default: the loopback names, plus the bound address; any host only when auth is on
   and the server binds a non-loopback address (browsers never send a bearer token on
   their own, so a rebinding page gains nothing there).
2. **Origin**: a request with an `Origin` must come from the server itself (its host,
   any allowed host) or an allowed origin; `Origin: null` is refused.
3. **CORS**: preflights are answered for the allowed origins only; their responses
   carry `Access-Control-Allow-Origin`. Nothing else gets CORS headers, so by default a
   browser lets only same-origin pages (the console) read answers.
4. **Non-simple writes**: a POST must be a request a browser sends only after a
   preflight: a content type other than the three form types, or a header outside the
   CORS safelist (`authorization`, `x-loam-namespace`, `x-requested-with`, ...). A
   cross-origin form or `fetch(..., {mode: "no-cors"})` is neither. (PUT, PATCH and
   DELETE are never sent cross-origin without a preflight.)
5. **Size**: a body longer than `max_body_bytes` gets 413 (not 429: clients retry that),
   by its `content-length` before reading, or as soon as a chunked body passes it.
6. **Authentication first**: with auth on, an API path's credential is checked before
   its body is read or parsed (401 for a 50 MB body costs nothing).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from loam_common.direct_http import LowerCaseHeaders
from loam_common.errors import JobsError
from loam_common.serving import is_loopback

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
#: Room for the largest payload (64 MiB, loam_common.jobs.queue.DEFAULT_PAYLOAD_LIMIT)
#: as base64 in a JSON body. Connect requests keep connectrpc's own 4 MiB read limit.
DEFAULT_MAX_BODY_BYTES = 90 * 1024 * 1024
# PUT, PATCH and DELETE are never simple: a browser preflights them cross-origin.
_SIMPLE_METHODS = frozenset({"POST"})
_SIMPLE_TYPES = frozenset({"", "text/plain", "multipart/form-data", "application/x-www-form-urlencoded"})
# Headers a browser may send cross-origin without a preflight (the CORS safelist), and
# those it sets itself; any other header means the page passed a preflight.
_SIMPLE_HEADERS = frozenset({
    "accept", "accept-language", "content-language", "content-type", "range", "host", "origin",
    "referer", "user-agent", "content-length", "connection", "cookie", "accept-encoding", "dnt",
    "cache-control", "pragma", "te", "upgrade-insecure-requests", "priority", "keep-alive",
})  # fmt: skip
_CORS_HEADERS = "authorization, content-type, x-loam-namespace, x-requested-with, connect-protocol-version, connect-timeout-ms"  # noqa: E501
# The paths the guard does not authenticate: no credential needed (health, the API's
# description, the console's files), their own check (/metrics), or their own check and
# error format (the Resonate protocol answers in its envelope).
_OPEN_PREFIXES = (
    "/healthz",
    "/readyz",
    "/openapi.json",
    "/docs",
    "/redoc",
    "/console",
    "/metrics",
    "/resonate",
)


@dataclass(frozen=True)
class GuardPolicy:
    """`hosts`: the Host names served (None: any). `origins`: cross-origin pages allowed
    to call (`scheme://host[:port]`, exact). `auth_first`: check credentials before the
    body (auth on)."""

    hosts: frozenset[str] | None = LOOPBACK_HOSTS
    origins: frozenset[str] = frozenset()
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES

    @classmethod
    def for_server(
        cls,
        bind_host: str,
        auth_enabled: bool,
        hosts: str | Iterable[str] | None = None,
        origins: str | Iterable[str] | None = None,
        max_body_bytes: int | None = None,
    ) -> GuardPolicy:
        """The policy of a server bound to `bind_host`: configured lists (comma-separated
        text or names; `*` for any host) or the defaults of the module docstring."""
        host_list = _split(hosts)
        if host_list is None:
            wildcard = bind_host in ("0.0.0.0", "::", "")
            if auth_enabled and (wildcard or not is_loopback(bind_host)):
                allowed = None
            else:
                allowed = LOOPBACK_HOSTS | ({_host_only(bind_host)} if not wildcard else set())
        else:
            allowed = None if "*" in host_list else frozenset(_host_only(h) for h in host_list)
        origin_list = _split(origins) or []
        for o in origin_list:
            if not _origin_key(o):
                raise ValueError(f"allowed origin {o!r} is not scheme://host[:port]")
        return cls(
            hosts=frozenset(allowed) if allowed is not None else None,
            origins=frozenset(o.rstrip("/").lower() for o in origin_list),
            max_body_bytes=max_body_bytes or DEFAULT_MAX_BODY_BYTES,
        )


def _split(value: str | Iterable[str] | None) -> list[str] | None:
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else list(value)
    items = [x.strip() for x in items if x.strip()]
    return items or None


def _host_only(host: str) -> str:
    """`host[:port]` or `[v6]:port` without the port, lower case, brackets dropped."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    if host.count(":") == 1:
        return host.partition(":")[0]
    return host


def _origin_key(origin: str) -> str | None:
    parts = urlsplit(origin.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return f"{parts.scheme}://{parts.netloc}".lower()


class Refused(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class BodyTooLarge(Exception):
    pass


def refusal_body(r: Refused) -> dict[str, str]:
    return {"code": r.code, "message": r.message}


async def _answer(send: Any, status: int, body: dict, extra: list | None = None) -> None:
    raw = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(raw)), *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": raw, "more_body": False})


class RequestGuard:
    """`await guard(scope, receive, send, app)`: run `app` on a request that passes the
    checks of the module docstring, or answer the refusal."""

    def __init__(self, policy: GuardPolicy, authenticator: Any = None) -> None:
        self.policy = policy
        self.authenticator = authenticator

    async def __call__(self, scope: dict, receive: Any, send: Any, app: Any) -> None:
        headers = header_dict(scope)
        try:
            cors = self._check_origin(headers)
            if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
                return await self._preflight(send, cors)
            self.check_write(scope["method"], headers)
            await self.check_credential(scope["path"], headers)
        except Refused as r:
            return await _answer(send, r.status, refusal_body(r))
        await self._run(scope, receive, send, app, cors)

    def check_write(self, method: str, headers: dict[str, str]) -> None:
        """Checks 5 (the declared size) and 4 (a write a browser sends only after a
        preflight); Refused if either fails."""
        self._check_size(headers)
        self._check_not_simple(method, headers)

    async def check_open_post(self, scope: dict, headers: dict[str, str], send: Any) -> list | None:
        """Checks 1, 2, 4 and 5 of a POST to an open path (one that authenticates itself,
        so check 6 does not apply), for a transport served ahead of `__call__` that reads
        its body itself within `policy.max_body_bytes` (the Resonate envelope): the CORS
        headers its answer must carry, or None when it was refused here (already answered)."""
        try:
            return self.open_post_headers(scope["method"], headers)
        except Refused as r:
            await _answer(send, r.status, refusal_body(r))
            return None

    def post_verdict(self, headers: dict[str, str]) -> list[tuple[bytes, bytes]] | Refused:
        """What the headers alone decide of a POST whose body has been read within
        `policy.max_body_bytes`, for a caller that answers by itself: the CORS headers
        its answer carries, or the Refused to answer with (its status and
        `refusal_body`). A direct route's `check`: kept with a request head seen before
        (loam_common.direct_http), so it must not depend on `Content-Length`, which
        those routes check against `policy.max_body_bytes` themselves (check 5). A path
        that does not authenticate itself needs `check_credential` as well, each time."""
        try:
            cors = self._check_origin(headers)
            self._check_not_simple("POST", headers)
        except Refused as r:
            return r
        return _cors_headers(cors) if cors is not None else []

    async def check_credential(self, path: str, headers: dict[str, str]) -> None:
        """Check 6: a path that does not authenticate itself needs a valid credential."""
        if self.authenticator is not None and _needs_credential(path):
            try:
                await self.authenticator.authenticate(headers)
            except JobsError as e:
                raise Refused(401, "unauthenticated", str(e)) from None

    def open_post_headers(self, method: str, headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
        """`check_open_post` for a caller that answers by itself: the CORS headers, or
        Refused (its status and `refusal_body`)."""
        cors = self._check_origin(headers)
        self.check_write(method, headers)
        return _cors_headers(cors) if cors is not None else []

    async def too_large(self, send: Any) -> None:
        """The answer to a body that grew past `policy.max_body_bytes` while being read."""
        await _answer(send, 413, {"code": "invalid_argument", "message": self._too_large()})

    def _check_origin(self, headers: dict[str, str]) -> str | None:
        """The Host check, then the Origin's: the origin to name in CORS headers (an
        allowed cross-origin caller), or None (no Origin, or the server's own)."""
        host = headers.get("host", "")
        hosts = self.policy.hosts
        if hosts is not None and _host_only(host) not in hosts:
            raise Refused(
                403, "permission_denied",
                f"host {host[:64]!r} is not served here: add it with --allowed-hosts (LOAM_ALLOWED_HOSTS)",
            )  # fmt: skip
        origin = headers.get("origin")
        if origin is None:
            return None
        key = _origin_key(origin)
        if key is not None and key in self.policy.origins:
            return key
        if key is not None:
            origin_host = urlsplit(key).netloc
            if origin_host == host.lower() or (hosts is not None and _host_only(origin_host) in hosts):
                return None  # the server's own pages
        raise Refused(
            403, "permission_denied",
            f"origin {origin[:64]!r} may not call this server: add it with --allowed-origins (LOAM_ALLOWED_ORIGINS)",
        )  # fmt: skip

    async def _preflight(self, send: Any, cors: str | None) -> None:
        if cors is None:  # same-origin pages need no preflight; nobody else may call
            return await _answer(
                send, 403, {"code": "permission_denied", "message": "no cross-origin access"}
            )
        extra = _cors_headers(cors) + [
            (b"access-control-allow-methods", b"GET, POST, PUT, DELETE"),
            (b"access-control-allow-headers", _CORS_HEADERS.encode()),
            (b"access-control-max-age", b"600"),
        ]
        await send({"type": "http.response.start", "status": 204, "headers": extra})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _check_size(self, headers: dict[str, str]) -> None:
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.policy.max_body_bytes:
            raise Refused(413, "invalid_argument", self._too_large(int(length)))

    def _too_large(self, size: int | None = None) -> str:
        got = f"{size} bytes" if size is not None else "longer"
        return f"the request body is {got}; the limit is {self.policy.max_body_bytes} bytes"

    @staticmethod
    def _check_not_simple(method: str, headers: dict[str, str]) -> None:
        if method not in _SIMPLE_METHODS:
            return
        media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media not in _SIMPLE_TYPES:
            return
        if any(name not in _SIMPLE_HEADERS and not name.startswith("sec-") for name in headers):
            return
        raise Refused(
            403, "permission_denied",
            "a write needs content-type application/json (or a header such as x-requested-with): "
            "a browser sends this request cross-origin without asking",
        )  # fmt: skip

    async def _run(self, scope: dict, receive: Any, send: Any, app: Any, cors: str | None) -> None:
        limit = self.policy.max_body_bytes
        seen = 0
        too_large = answered = False

        async def limited_receive() -> dict:
            nonlocal seen, too_large
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    too_large = True
                    raise BodyTooLarge
            return message

        async def guarded_send(message: dict) -> None:
            nonlocal answered
            if too_large:  # whatever the app made of the exception, the answer is 413
                if not answered:
                    answered = True
                    await _answer(send, 413, {"code": "invalid_argument", "message": self._too_large()})
                return
            if message["type"] == "http.response.start":
                answered = True
                if cors is not None:
                    message = dict(message, headers=[*message.get("headers", []), *_cors_headers(cors)])
            await send(message)

        try:
            await app(scope, limited_receive, guarded_send)
        except Exception:  # the body's overflow, or whatever the app made of it
            if not too_large:
                raise
        if too_large and not answered:
            await _answer(send, 413, {"code": "invalid_argument", "message": self._too_large()})


def header_dict(scope: dict) -> dict[str, str]:
    """A request's headers by lower-case name (the last of a repeated one wins)."""
    return LowerCaseHeaders((k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope["headers"])


def _cors_headers(origin: str) -> list[tuple[bytes, bytes]]:
    return [(b"access-control-allow-origin", origin.encode()), (b"vary", b"Origin")]


def _needs_credential(path: str) -> bool:
    if path.startswith("/ns/"):
        path = "/" + path[4:].partition("/")[2]
    return path != "/" and not path.startswith(_OPEN_PREFIXES)


def guard_flags(parser: Any, env: Any) -> None:
    """The policy's flags on a gateway command (`loam dev`, `loam gateway`)."""
    parser.add_argument("--allowed-hosts", default=env.get("LOAM_ALLOWED_HOSTS"),
                        help="Host names served, comma-separated, '*' for any "
                             "(default: the loopback names and the bound address)")  # fmt: skip
    parser.add_argument("--allowed-origins", default=env.get("LOAM_ALLOWED_ORIGINS"),
                        help="cross-origin pages that may call, as scheme://host[:port], comma-separated "
                             "(default: none; the console is same-origin)")  # fmt: skip
    parser.add_argument("--max-body-bytes", type=int, default=int(env.get("LOAM_MAX_BODY_BYTES") or 0) or None,
                        help=f"the largest request body (default {DEFAULT_MAX_BODY_BYTES})")  # fmt: skip


def guard_policy(args: Any) -> GuardPolicy:
    return GuardPolicy.for_server(
        args.host, args.auth, args.allowed_hosts, args.allowed_origins, args.max_body_bytes
    )
