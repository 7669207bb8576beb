"""Authentication at the gateway: who is calling, and may they do this.

The transports (Connect, REST) call `await authenticator.authenticate(headers)` once per
request, then `require(principal, action)` for the method's action, and take the
namespace from `principal.namespace` only — never from a request body.

- `StoreAuthenticator(store)`: `authorization: Bearer loam_<id>_<secret>` checked
  against the token records in the store (loam_common.auth). A verified token is cached
  for `cache_ttl_ns` (5 s by default, never past its expiry) so the hot path does not
  read the store on every call. So a revocation takes effect within that window on a
  gateway that has just seen the token; failures are never cached.
- `DevAuthenticator`: no auth configured (`loam dev`, loopback only): every action, in
  the namespace named by the `x-loam-namespace` header or the default one.
- `check_bind(host, auth_enabled)`: without auth the gateway binds loopback only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Protocol

from loam_common import validate
from loam_common.api.headers import NAMESPACE_HEADER
from loam_common.auth import ACTIONS, Principal, token_verify
from loam_common.direct_http import LowerCaseHeaders
from loam_common.errors import PermissionDenied, Unauthenticated
from loam_common.serving import is_loopback
from loam_common.store.runner import Store

__all__ = [
    "Authenticator",
    "DevAuthenticator",
    "Principal",
    "StoreAuthenticator",
    "auth_on",
    "bearer_token",
    "check_bind",
    "require",
]

DEFAULT_CACHE_TTL_NS = 5_000_000_000
DEFAULT_CACHE_SIZE = 10_000
DEV_NAMESPACE = "default"
MISSING_TOKEN = "missing bearer token: send 'authorization: Bearer loam_<id>_<secret>'"


class Authenticator(Protocol):
    async def authenticate(self, headers: Mapping[str, str]) -> Principal:
        """The caller's principal; Unauthenticated if the credential is missing or bad."""
        ...


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """A header by lower-case name, from a case-insensitive mapping (Starlette, Connect),
    the gateway's own `LowerCaseHeaders`, or a plain dict with any casing."""
    value = headers.get(name)
    if value is not None or isinstance(headers, LowerCaseHeaders):
        return value
    for key, v in headers.items():
        if key.lower() == name:
            return v
    return None


def bearer_token(headers: Mapping[str, str]) -> str:
    """The token of `authorization: Bearer <token>`; Unauthenticated if absent."""
    value = _header(headers, "authorization")
    if not value:
        raise Unauthenticated(MISSING_TOKEN)
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthenticated(MISSING_TOKEN)
    return token


def require(principal: Principal, action: str) -> None:
    """PermissionDenied unless the principal holds `action`."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}")  # a bug in the caller, not the user
    if action not in principal.actions:
        raise PermissionDenied(
            f"this token lacks the {action!r} action in namespace {principal.namespace!r}; "
            f"create one with: loam tokens create --namespace {principal.namespace} --actions {action}"
        )


class StoreAuthenticator:
    """Bearer tokens verified against the store, cached briefly. See the module docstring."""

    def __init__(
        self,
        store: Store,
        *,
        cache_ttl_ns: int = DEFAULT_CACHE_TTL_NS,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        self.store = store
        self.cache_ttl_ns = cache_ttl_ns
        self.cache_size = cache_size
        # sha256(token) -> (principal, valid until ns by the store clock). Keyed by a hash
        # so the cache holds no usable secrets.
        self._cache: dict[bytes, tuple[Principal, int]] = {}

    async def authenticate(self, headers: Mapping[str, str]) -> Principal:
        token = bearer_token(headers)
        key = hashlib.sha256(token.encode()).digest()
        now = self.store.clock.now_ns()
        hit = self._cache.get(key)
        if hit is not None:
            principal, until = hit
            if now < until:
                return principal
            del self._cache[key]
        # One record, read on the loop: a hop to a reader thread would land on whichever
        # call comes once the cache entry has lapsed (a tail of the latency).
        principal = await self.store.snapshot(token_verify, token, inline=True)
        if self.cache_ttl_ns > 0:
            until = now + self.cache_ttl_ns
            if principal.expires_ns:
                until = min(until, principal.expires_ns)
            self._remember(key, principal, until, now)
        return principal

    def _remember(self, key: bytes, principal: Principal, until: int, now: int) -> None:
        if len(self._cache) >= self.cache_size:
            self._cache = {k: v for k, v in self._cache.items() if v[1] > now}
            if len(self._cache) >= self.cache_size:
                self._cache.clear()
        self._cache[key] = (principal, until)

    def forget(self) -> None:
        """Drop every cached token (e.g. right after a revocation in this process)."""
        self._cache.clear()


class DevAuthenticator:
    """No auth configured: every action, in the namespace of the `x-loam-namespace`
    header or `namespace`. Only for a gateway bound to loopback (`check_bind`)."""

    def __init__(self, namespace: str = DEV_NAMESPACE) -> None:
        self.namespace = validate.namespace(namespace)
        #: by the header's value (None: absent): a Principal is immutable, and every
        #: request of a dev server asks for one
        self._principals: dict[str | None, Principal] = {}

    async def authenticate(self, headers: Mapping[str, str]) -> Principal:
        named = _header(headers, NAMESPACE_HEADER)
        principal = self._principals.get(named)
        if principal is None:
            ns = validate.namespace(named or self.namespace, NAMESPACE_HEADER)
            principal = Principal(namespace=ns, actions=ACTIONS, token_id="")
            if len(self._principals) < 1024:  # a client naming ever new namespaces gets no cache
                self._principals[named] = principal
        return principal


def auth_on(value: str | None) -> bool:
    """Whether `LOAM_AUTH`'s value turns auth on (`1`, `on`, `true`, `yes`)."""
    return (value or "").strip().lower() in ("1", "on", "true", "yes")


def check_bind(host: str, auth_enabled: bool) -> None:
    """Refuse a non-loopback address when auth is off: unauthenticated enqueue and
    schedule creation are writes (spec §11)."""
    if not auth_enabled and not is_loopback(host):
        raise ValueError(
            f"refusing to bind {host!r} without auth: bind 127.0.0.1, or turn auth on "
            "(LOAM_AUTH=on) and create tokens with `loam tokens create`"
        )
