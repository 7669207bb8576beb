"""`Queues`: a queue's settings and state, and the ops over all of its jobs.

Bulk ops (drain, clean, retry-all, promote-all, redrive, trim) run their batch
transaction again while a batch comes back full, so one call covers a whole queue with
each transaction bounded. The operator actions (settings changes, pause, resume and the
bulk ops but the trim) are audited in their own transactions when a caller is acting (facade.audited):
one record per call, counting the jobs each of its transactions touched."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf import text_format

from loam_common import events, metrics, validate
from loam_common.errors import InvalidArgument
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import admin
from loam_common.jobs import states as S
from loam_common.jobs.complete import queue_minute_metrics
from loam_common.store.base import Txn
from loam_common.store.runner import Store
from loam_common.validate import Namespace
from loam_queue_core.facade.audited import AuditedAction, jobs_touched, none_touched


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
        action = AuditedAction(self.store, ns, "queue.create", _queue(queue), detail=_settings(config),
                               count=none_touched)  # fmt: skip
        return await action.transact(admin.queue_create, ns, queue, config)

    async def update(
        self, ns: Namespace, queue: str, config: pb.QueueConfig, fields: list[str] | None
    ) -> pb.QueueConfig:
        detail = _settings(config, fields)
        action = AuditedAction(
            self.store, ns, "queue.update", _queue(queue), detail=detail, count=none_touched
        )
        return await action.transact(admin.queue_update, ns, queue, config, fields)

    async def pause(self, ns: Namespace, queue: str) -> None:
        action = AuditedAction(self.store, ns, "queue.pause", _queue(queue), count=none_touched)
        await action.transact(admin.queue_pause, ns, queue)

    async def resume(self, ns: Namespace, queue: str) -> None:
        action = AuditedAction(self.store, ns, "queue.resume", _queue(queue), count=none_touched)
        await action.transact(admin.queue_resume, ns, queue)

    async def state(self, ns: Namespace, queue: str) -> QueueState:
        return await self.store.snapshot(_state, ns, _queue(queue), inline=True)  # a record a shard

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
        detail = f"max {max_jobs} per {duration_ns} ns{', sharded' if sharded else ''}"
        action = AuditedAction(self.store, ns, "queue.set_rate_limit", _queue(queue), detail=detail,
                               count=none_touched)  # fmt: skip
        return await action.transact(admin.queue_set_rate_limit, ns, queue, max_jobs, duration_ns, sharded)

    async def rate_limit_for(self, ns: Namespace, queue: str, for_ns: int) -> None:
        # a worker's own call (BullMQ's rateLimit from a processor): not audited, as the
        # other writes of a worker are not
        await self.store.transact(admin.queue_rate_limit_for, ns, _queue(queue), for_ns)

    async def set_concurrency(self, ns: Namespace, queue: str, concurrency: int) -> pb.QueueConfig:
        action = AuditedAction(self.store, ns, "queue.set_concurrency", _queue(queue),
                               detail=f"concurrency {concurrency}", count=none_touched)  # fmt: skip
        return await action.transact(admin.queue_set_concurrency, ns, queue, concurrency)

    # -- ops over the queue's jobs -------------------------------------------------------
    async def drain(self, ns: Namespace, queue: str, delayed: bool, limit: int = 0) -> int:
        """Remove waiting (and with `delayed`, delayed) jobs: up to `limit`, or (0) all."""
        detail = (
            f"delayed too{f', limit {limit}' if limit else ''}"
            if delayed
            else (f"limit {limit}" if limit else "")
        )
        action = AuditedAction(
            self.store, ns, "queue.drain", _queue(queue), detail=detail, count=jobs_touched
        )
        if not limit:
            return await self._repeat(action.transact, admin.queue_drain, ns, queue, delayed, admin.BATCH)
        total = 0
        while total < limit:
            batch = min(admin.BATCH, limit - total)
            n = await action.transact(admin.queue_drain, ns, queue, delayed, batch)
            total += n
            if n < batch:
                break
        return total

    async def clean(self, ns: Namespace, queue: str, state: int, grace_ns: int, limit: int) -> int:
        """Remove finished jobs older than `grace_ns`: up to `limit`, or (0) all of them."""
        state = state or S.COMPLETED
        detail = f"{S.name(state)} older than {grace_ns} ns{f', limit {limit}' if limit else ''}"
        action = AuditedAction(
            self.store, ns, "queue.clean", _queue(queue), detail=detail, count=jobs_touched
        )
        if limit:
            return await action.transact(_clean_count, ns, queue, state, grace_ns, limit)
        return await self._repeat(action.transact, _clean_count, ns, queue, state, grace_ns, admin.BATCH)

    async def obliterate(self, ns: Namespace, queue: str, force: bool) -> int:
        """Remove the queue and everything in it; the number of keys removed."""
        removed = 0
        detail = "forced" if force else ""
        action = AuditedAction(
            self.store, ns, "queue.obliterate", _queue(queue), detail=detail, count=none_touched
        )
        while True:
            r = await action.transact(admin.queue_obliterate, ns, queue, force, admin.OBLITERATE_BATCH)
            removed += r.removed_keys
            if r.done:
                return removed

    async def retry_all(self, ns: Namespace, queue: str, state: int) -> int:
        state = state or S.FAILED
        action = AuditedAction(
            self.store, ns, "queue.retry_all", _queue(queue), S.name(state), count=jobs_touched
        )
        return await self._repeat(action.transact, admin.queue_retry_all, ns, queue, state, admin.BATCH)

    async def promote_all(self, ns: Namespace, queue: str) -> int:
        action = AuditedAction(self.store, ns, "queue.promote_all", _queue(queue), count=jobs_touched)
        return await self._repeat(action.transact, admin.queue_promote_all, ns, queue, admin.BATCH)

    async def redrive_dead_letters(self, ns: Namespace, queue: str, limit: int) -> int:
        """Dead letters back to the queues they came from: up to `limit`, or (0) all."""
        detail = f"limit {limit}" if limit else ""
        action = AuditedAction(self.store, ns, "queue.redrive_dead_letters", _queue(queue), detail=detail,
                               count=jobs_touched)  # fmt: skip
        if limit:
            return await action.transact(admin.queue_redrive_dead_letters, ns, queue, limit)
        return await self._repeat(action.transact, admin.queue_redrive_dead_letters, ns, queue, admin.BATCH)

    async def trim_events(self, ns: Namespace, queue: str, before_ns: int) -> int:
        validate.non_negative("op.trim_events.before_ns", before_ns)
        # housekeeping of the event log, not an action on jobs: not audited
        return await self._repeat(
            self.store.transact, events.event_log_trim, ns, _queue(queue), before_ns, events.BATCH
        )

    @staticmethod
    async def _repeat(transact: Callable[..., Awaitable[int]], fn: Callable[..., int], ns: Namespace, queue: str,
                      *args: Any) -> int:  # fmt: skip
        """Run a batched op (its last argument is the batch size) through `transact` (the
        store's, or an AuditedAction's) until a batch is short."""
        batch, total = args[-1], 0
        while True:
            n = await transact(fn, ns, queue, *args)
            total += n
            if n < batch:
                return total


def _queue(queue: str) -> str:
    return validate.name("queue", queue)


def _settings(config: pb.QueueConfig, fields: list[str] | None = None) -> str:
    """A settings change as the audit record's detail: the fields it sets, and their values."""
    text = text_format.MessageToString(config, as_one_line=True)
    return f"{', '.join(fields)}: {text}" if fields else text


def _state(tx: Txn, ns: Namespace, queue: str) -> QueueState:
    ttl, used = admin.queue_rate_window(tx, ns, queue)
    counts = admin.queue_counts(tx, ns, queue)
    return QueueState(
        admin.queue_config(tx, ns, queue), counts, ttl, used, metrics.queue_activity(tx, ns, queue)
    )


def _clean_count(tx: Txn, ns: Namespace, queue: str, state: int, grace_ns: int, limit: int) -> int:
    return len(admin.queue_clean(tx, ns, queue, state, grace_ns, limit))
