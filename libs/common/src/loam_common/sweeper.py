"""`Sweeper.run_once()`: one pass of every sweep over every queue shard this process
owns — stalled leases, due delayed jobs, retention, expired idempotency records and
results, dropped blobs, old commit tokens. The sweeper service calls it in a loop and
decides ownership (`owns`); tests call it directly with a manual clock."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from loam_common import keys
from loam_common.blobs import BlobStore
from loam_common.jobs import sweeps
from loam_common.store.runner import Store

COMMIT_TOKEN_AGE_NS = 3600 * 1_000_000_000


def _owns_everything(ns: str, queue: str, shard: int) -> bool:
    return True


@dataclass
class SweepReport:
    stalled: int = 0
    promoted: int = 0
    retained: int = 0
    idempotency: int = 0
    results: int = 0
    blobs: int = 0
    # queues where jobs became ready, for waking long-polls
    woke: set[tuple[str, str]] = field(default_factory=set)


class Sweeper:
    def __init__(
        self,
        store: Store,
        blobs: BlobStore | None = None,
        *,
        owns: Callable[[str, str, int], bool] = _owns_everything,
        on_ready: Callable[[str, str], None] | None = None,
    ) -> None:
        self.store = store
        self.blobs = blobs
        self.owns = owns
        self.on_ready = on_ready

    async def run_once(self) -> SweepReport:
        rep = SweepReport()
        namespaces = await self.store.snapshot(sweeps.list_namespaces)
        for ns in namespaces:
            for queue in await self.store.snapshot(sweeps.list_queues, ns):
                await self._sweep_queue(ns, queue, rep)
            rep.results += await self._drain(self._sweep_results, ns)
            rep.blobs += await self._collect_blobs(ns)
        await self.store.sweep_commit_tokens(self.store.clock.now_ns() - COMMIT_TOKEN_AGE_NS)
        if self.on_ready is not None:
            for ns, queue in rep.woke:
                self.on_ready(ns, queue)
        return rep

    async def _sweep_queue(self, ns: str, queue: str, rep: SweepReport) -> None:
        shards = await self.store.snapshot(sweeps.queue_shards, ns, queue)
        owned_any = False
        for shard in range(shards):
            if not self.owns(ns, queue, shard):
                continue
            owned_any = True
            stalled = await self._drain(sweeps.sweep_stalled, ns, queue, shard)
            promoted = await self._drain(sweeps.sweep_delayed, ns, queue, shard)
            rep.stalled += stalled
            rep.promoted += promoted
            if stalled or promoted:
                rep.woke.add((ns, queue))
        if owned_any and self.owns(ns, queue, 0):  # queue-wide sweeps run with shard 0
            rep.retained += await self.store.transact(sweeps.sweep_retention, ns, queue)
            rep.idempotency += await self._drain(sweeps.sweep_idempotency, ns, queue)

    async def _drain(self, fn, *args) -> int:
        """Run a batch sweep until a batch comes back short."""
        total = 0
        while True:
            n = await self.store.transact(fn, *args)
            total += n
            if n < sweeps.BATCH:
                return total

    @staticmethod
    def _sweep_results(tx, ns: str) -> int:
        from loam_common import results

        return results.sweep_results(tx, ns, sweeps.BATCH)

    async def _collect_blobs(self, ns: str) -> int:
        if self.blobs is None:
            return 0
        prefix = keys.blob_gc_all(ns)

        def pending(tx):
            return [k for k, _ in tx.scan(prefix, keys.prefix_end(prefix), limit=sweeps.BATCH)]

        def forget(tx, done):
            for k in done:
                tx.delete(k)

        gone = await self.store.snapshot(pending)
        for k in gone:
            await self.blobs.delete(k[len(prefix) :].decode())
        if gone:
            await self.store.transact(forget, gone)
        return len(gone)
