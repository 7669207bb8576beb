"""Credentials for engine children: a run's script reaches the Spark endpoint with a
token of its own namespace, made for the run and revoked after it.

`StoreCredentials` makes real API tokens (loam_common.auth) with only `jobs:engine`,
expiring shortly after the run's timeout, so a leaked one is short-lived and narrow.
`NoCredentials` is for a server without auth (dev, loopback only): the child names its
namespace in the `x-loam-namespace` metadata instead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from loam_common.auth import ENGINE, token_create, token_revoke
from loam_common.store.runner import Store

SLACK_NS = 60 * 10**9


class StoreCredentials:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def mint(
        self, ns: str, ttl_s: float, name: str
    ) -> tuple[str | None, Callable[[], Awaitable[None]]]:
        expires = self.store.clock.now_ns() + int(ttl_s * 1e9) + SLACK_NS
        token, rec = await self.store.transact(token_create, ns, [ENGINE], name[:128], expires)

        async def revoke() -> None:
            await self.store.transact(token_revoke, rec.id)

        return token, revoke


class NoCredentials:
    async def mint(
        self, ns: str, ttl_s: float, name: str
    ) -> tuple[str | None, Callable[[], Awaitable[None]]]:
        async def nothing() -> None:
            return None

        return None, nothing
