"""`Queues`: a queue's settings and state, and the ops over all of its jobs.

Bulk ops (drain, clean, retry-all, promote-all, redrive, trim) run their batch
transaction again while a batch comes back full, so one call covers a whole queue with
each transaction bounded."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loam_common import events, metrics, validate
from loam_common.errors import InvalidArgument
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import admin
from loam_common.jobs import states as S
from loam_common.jobs.complete import queue_minute_metrics
from loam_common.store.base import Txn
from loam_common.store.runner import Store
from loam_common.validate import Namespace


@dataclass(frozen=True, slots=True)
class QueueState:
    """A queue's settings, counts by state and open rate-limit window."""

    config: pb.QueueConfig
    counts: pb.QueueCounts
    rate_limit_ttl_ns: int
    rate_limit_used: int
    activity: pb.QueueActivity | None = None  # metrics.queue_activity


class Queues:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def create(self, ns: Namespace, queue: str, config: pb.QueueConfig) -> tuple[pb.QueueConfig, bool]:
        return await self.store.transact(admin.queue_create, ns, _queue(queue), config)

    async def update(
        self, ns: Namespace, queue: str, config: pb.QueueConfig, fields: list[str] | None
    ) -> pb.QueueConfig:
        return await self.store.transact(admin.queue_update, ns, _queue(queue), config, fields)

    async def pause(self, ns: Namespace, queue: str) -> None:
        await self.store.transact(admin.queue_pause, ns, _queue(queue))

    async def resume(self, ns: Namespace, queue: str) -> None:
        await self.store.transact(admin.queue_resume, ns, _queue(queue))

    async def state(self, ns: Namespace, queue: str) -> QueueState:
        return await self.store.snapshot(_state, ns, _queue(queue))

    async def metrics(self, ns: Namespace, queue: str, kind: str) -> pb.MetricsRecord:
        """BullMQ's per-minute metrics of `kind` (completed or failed)."""
        if kind not in ("completed", "failed"):
            raise InvalidArgument("op.metrics.kind", "is completed or failed")
        return await self.store.snapshot(queue_minute_metrics, ns, _queue(queue), kind)

    async def workers(self, ns: Namespace, queue: str) -> list[pb.Worker]:
        return await self.store.snapshot(admin.queue_workers, ns, _queue(queue), 0)

    async def names(self, ns: Namespace) -> list[str]:
        """The namespace's queue names."""
        return await self.store.snapshot(admin.queue_list, ns, "", admin.MAX_BATCH)

    async def names_with_counts(self, ns: Namespace) -> list[tuple[str, pb.QueueCounts]]:
        """The namespace's queues with their counts, in one snapshot (the console's list)."""
        return await self.store.snapshot(admin.queue_list_counts, ns, "", admin.MAX_BATCH)

    async def set_rate_limit(
        self, ns: Namespace, queue: str, max_jobs: int, duration_ns: int, sharded: bool
    ) -> pb.QueueConfig:
        return await self.store.transact(
            admin.queue_set_rate_limit, ns, _queue(queue), max_jobs, duration_ns, sharded
        )

    async def rate_limit_for(self, ns: Namespace, queue: str, for_ns: int) -> None:
        await self.store.transact(admin.queue_rate_limit_for, ns, _queue(queue), for_ns)

    async def set_concurrency(self, ns: Namespace, queue: str, concurrency: int) -> pb.QueueConfig:
        return await self.store.transact(admin.queue_set_concurrency, ns, _queue(queue), concurrency)

    # -- ops over the queue's jobs -------------------------------------------------------
    async def drain(self, ns: Namespace, queue: str, delayed: bool, limit: int = 0) -> int:
        """Remove waiting (and with `delayed`, delayed) jobs: up to `limit`, or (0) all."""
        if not limit:
            return await self._repeat(admin.queue_drain, ns, _queue(queue), delayed, admin.BATCH)
        total = 0
        while total < limit:
            batch = min(admin.BATCH, limit - total)
            n = await self.store.transact(admin.queue_drain, ns, _queue(queue), delayed, batch)
            total += n
            if n < batch:
                break
        return total

    async def clean(self, ns: Namespace, queue: str, state: int, grace_ns: int, limit: int) -> int:
        """Remove finished jobs older than `grace_ns`: up to `limit`, or (0) all of them."""
        state = state or S.COMPLETED
        if limit:
            return len(
                await self.store.transact(admin.queue_clean, ns, _queue(queue), state, grace_ns, limit)
            )
        return await self._repeat(_clean_count, ns, _queue(queue), state, grace_ns, admin.BATCH)

    async def obliterate(self, ns: Namespace, queue: str, force: bool) -> int:
        """Remove the queue and everything in it; the number of keys removed."""
        removed = 0
        while True:
            r = await self.store.transact(
                admin.queue_obliterate, ns, _queue(queue), force, admin.OBLITERATE_BATCH
            )
            removed += r.removed_keys
            if r.done:
                return removed

    async def retry_all(self, ns: Namespace, queue: str, state: int) -> int:
        return await self._repeat(admin.queue_retry_all, ns, _queue(queue), state or S.FAILED, admin.BATCH)

    async def promote_all(self, ns: Namespace, queue: str) -> int:
        return await self._repeat(admin.queue_promote_all, ns, _queue(queue), admin.BATCH)

    async def redrive_dead_letters(self, ns: Namespace, queue: str, limit: int) -> int:
        """Dead letters back to the queues they came from: up to `limit`, or (0) all."""
        if limit:
            return await self.store.transact(admin.queue_redrive_dead_letters, ns, _queue(queue), limit)
        return await self._repeat(admin.queue_redrive_dead_letters, ns, _queue(queue), admin.BATCH)

    async def trim_events(self, ns: Namespace, queue: str, before_ns: int) -> int:
        validate.non_negative("op.trim_events.before_ns", before_ns)
        return await self._repeat(events.event_log_trim, ns, _queue(queue), before_ns, events.BATCH)

    async def _repeat(self, fn: Callable[..., int], ns: Namespace, queue: str, *args: Any) -> int:
        """Run a batched op (its last argument is the batch size) until a batch is short."""
        batch, total = args[-1], 0
        while True:
            n = await self.store.transact(fn, ns, queue, *args)
            total += n
            if n < batch:
                return total


def _queue(queue: str) -> str:
    return validate.name("queue", queue)


def _state(tx: Txn, ns: Namespace, queue: str) -> QueueState:
    ttl, used = admin.queue_rate_window(tx, ns, queue)
    counts = admin.queue_counts(tx, ns, queue)
    return QueueState(
        admin.queue_config(tx, ns, queue), counts, ttl, used, metrics.queue_activity(tx, ns, queue)
    )


def _clean_count(tx: Txn, ns: Namespace, queue: str, state: int, grace_ns: int, limit: int) -> int:
    return len(admin.queue_clean(tx, ns, queue, state, grace_ns, limit))
