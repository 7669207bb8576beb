"""`Results`: the result store (Celery's result backend, chord counters, BullMQ's
return values kept apart from jobs), with a long-poll on a key's version. Each write
declares `ResultChanged`, which wakes the key's long-polls once committed.

A call of one key, or of a batch of at most `INLINE_JOBS`, is small and its caller waits
for it, so it runs on the event loop (`inline`) where the store commits there: a hop to
the store's writer or a reader thread and back costs more than the work (a Celery worker
writes every task's result through `set_many`). Larger batches go to those threads."""

from __future__ import annotations

import asyncio

from loam_common import results, validate
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.store.runner import Store
from loam_common.validate import Namespace
from loam_queue_core.effects import RESULT_WAIT_PREFIX
from loam_queue_core.facade.jobs import INLINE_JOBS
from loam_queue_core.waiters import Waiters


class Results:
    def __init__(self, store: Store, waiters: Waiters) -> None:
        self.store = store
        self.waiters = waiters

    async def get(
        self, ns: Namespace, key: str, wait_ns: int = 0, after_version: int = 0
    ) -> tuple[pb.Payload | None, int]:
        """The value under `key` and its version; with `wait_ns`, while the version is
        `after_version`, wait for a write to the key up to wait_ns."""
        validate.in_range("wait_ns", wait_ns, 0, validate.MAX_WAIT_NS)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + wait_ns / 1e9
        slot = [RESULT_WAIT_PREFIX + key]
        while True:
            fut = self.waiters.park(ns, slot) if wait_ns else None
            try:
                value, version = await self.store.snapshot(results.result_get_versioned, ns, key, inline=True)
                left = give_up - loop.time()
                if fut is None or version != after_version or left <= 0:
                    return value, version
                try:
                    await asyncio.wait_for(asyncio.shield(fut), left)
                except TimeoutError:
                    pass
            finally:
                if fut is not None:
                    self.waiters.unpark(ns, slot, fut)

    async def get_many(self, ns: Namespace, keys: list[str]) -> list[pb.Payload | None]:
        return await self.store.snapshot(results.result_mget, ns, keys, inline=len(keys) <= INLINE_JOBS)

    async def set(self, ns: Namespace, key: str, value: pb.Payload, ttl_ns: int) -> None:
        await self.store.transact(results.result_set, ns, key, value, ttl_ns, inline=True)

    async def set_many(self, ns: Namespace, items: list[tuple[str, pb.Payload, int]]) -> None:
        """(key, value, ttl_ns) each, all or none."""
        await self.store.transact(results.result_set_many, ns, items, inline=len(items) <= INLINE_JOBS)

    async def delete(self, ns: Namespace, key: str) -> bool:
        return await self.store.transact(results.result_delete, ns, key, inline=True)

    async def add(self, ns: Namespace, key: str, member: str, ttl_ns: int | None) -> tuple[int, bool]:
        """Add `member` to the counter `key`: its size, and whether this call added it
        (ttl_ns None leaves the key's TTL as it is, as Redis INCR does)."""
        return await self.store.transact(results.result_add, ns, key, member, ttl_ns, inline=True)

    async def expire(self, ns: Namespace, key: str, ttl_ns: int) -> bool:
        return await self.store.transact(results.result_expire, ns, key, ttl_ns, inline=True)
