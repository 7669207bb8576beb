"""`RelayService`: keeps each queue's event log (spec §6.6) for the shards this process
owns through fenced ownership leases (kind "relay"): trims it by time, and moves into it
any outbox rows an earlier server left (this one writes each event straight into the
log, decision 0020). Each pass (`run_once`):

1. lists the queue shards (including those of obliterated queues whose last outbox
   rows are still to relay) and refreshes its leases,
2. finds which owned shards have outbox rows (one snapshot), and relays each in
   batches: copy to `ev/<shard><seq>` and delete from the outbox, fenced by the
   shard's lease (`events.outbox_relay`; with `one_transaction=False`, the copy and
   the delete are two transactions, which is just as correct: the copy is idempotent
   by sequence),
3. every `trim_every_s` (store clock), deletes the events older than `retention_ns`.

Latency: a pass every `interval` (100 ms by default) while passes find work, backing
off to `idle_interval` (1 s) while they find none; `wake()` runs one at once. The
outbox is read with one short scan per owned shard, every `outbox_every_s` (10 s) while
nothing turns up, so most idle passes cost two small reads and no write. Readers never wait for the relay: `events.events_after` reads the rows
not yet relayed from the outbox too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from loam_common import events
from loam_common.loop import Loop
from loam_common.ownership import (
    DEFAULT_TTL_NS,
    Fence,
    OwnershipLost,
    ShardId,
    ShardLister,
    ShardOwnership,
    run_fenced,
)
from loam_common.store.runner import Store

log = logging.getLogger(__name__)

KIND = "relay"


@dataclass
class RelayReport:
    copied: int = 0
    trimmed: int = 0
    lost: set[ShardId] = field(default_factory=set)


class RelayService(Loop):
    name = "relay"

    def __init__(
        self,
        store: Store,
        owner_id: str,
        *,
        interval: float = 0.1,
        ttl_ns: int = DEFAULT_TTL_NS,
        retention_ns: int = events.DEFAULT_RETENTION_NS,
        trim_every_s: float = 60.0,
        batch: int = events.BATCH,
        one_transaction: bool = True,
        idle_interval: float = 1.0,
        outbox_every_s: float = 10.0,
    ) -> None:
        super().__init__(interval)
        # Passes that find nothing to copy back off, doubling the wait up to
        # `idle_interval`; one that copies goes back to `interval`. An idle server then
        # reads every shard's outbox once a second, not ten times. Nobody waits for the
        # relay (readers see the outbox too), so the back-off delays only the copy.
        self.base_interval = interval
        self.idle_interval = max(idle_interval, interval)
        self.store = store
        self.owner_id = owner_id
        self.ownership = ShardOwnership(store, KIND, owner_id, ttl_ns)
        self.lister = ShardLister(store, orphans=True)  # lists again only when queues change
        self.retention_ns = retention_ns
        self.trim_every_ns = int(trim_every_s * 1e9)
        self.batch = batch
        self.one_transaction = one_transaction
        self._next_trim_ns = 0
        # Outbox rows come only from a server older than decision 0020, and readers see
        # them where they are: an idle relay looks for them every `outbox_every_s` (and on
        # the pass after one that copied, or after what it owns changed), not every pass.
        # At 10,000 queues a look is 10,000 short scans, most of an idle pass.
        self.outbox_every_ns = int(outbox_every_s * 1e9)
        self._next_outbox_ns = 0
        self._looked_at: object = None  # the fences the last look covered
        self._owned: list[ShardId] = []
        self.copied = 0  # events relayed by this process, for tests and metrics

    async def run_once(self) -> RelayReport:
        rep = RelayReport()
        shards = await self.lister.shards()
        fences = await self.ownership.refresh(shards)
        now = self.store.clock.now_ns()
        if fences is not self._looked_at or now >= self._next_outbox_ns:
            if fences is not self._looked_at:
                self._owned = sorted(fences)
            self._looked_at, self._next_outbox_ns = fences, now + self.outbox_every_ns
            pending = await self.store.snapshot(events.outbox_pending, self._owned)
            for shard_id in pending:
                try:
                    rep.copied += await self._relay_shard(fences[shard_id])
                except OwnershipLost:
                    rep.lost.add(shard_id)
            if rep.copied:
                self._next_outbox_ns = 0  # look again on the next pass
        if now >= self._next_trim_ns:
            self._next_trim_ns = now + self.trim_every_ns
            before = now - self.retention_ns
            for shard_id, fence in fences.items():
                if shard_id in rep.lost:
                    continue
                try:
                    rep.trimmed += await self._drain(fence, events.event_log_trim_shard, *shard_id, before)
                except OwnershipLost:
                    rep.lost.add(shard_id)
        for shard_id in rep.lost:
            log.info("relay %s: lost %s to another relay", self.owner_id, shard_id)
            self.ownership.lost(shard_id)
        self.copied += rep.copied
        busy = rep.copied or rep.trimmed
        self.interval = self.base_interval if busy else min(self.interval * 2, self.idle_interval)
        return rep

    async def _relay_shard(self, fence: Fence) -> int:
        if self.one_transaction:
            return await self._drain(fence, events.outbox_relay, *fence.shard_id)
        total = 0
        while True:
            last = await self.store.transact(
                run_fenced, fence, events.outbox_copy, *fence.shard_id, self.batch
            )
            if not last:
                return total
            n = await self.store.transact(
                run_fenced, fence, events.outbox_delete_through, *fence.shard_id, last
            )
            total += n
            if n < self.batch:
                return total

    async def _drain(self, fence: Fence, fn, *args) -> int:
        total = 0
        while True:
            n = await self.store.transact(run_fenced, fence, fn, *args, self.batch)
            total += n
            if n < self.batch:
                return total

    async def on_stop(self) -> None:
        try:
            await self.ownership.release_all()
        except Exception:
            log.exception("relay %s: could not release its leases", self.owner_id)
