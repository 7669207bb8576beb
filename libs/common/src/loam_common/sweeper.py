"""`Sweeper.run_once()`: one pass of every sweep over every queue shard this process
owns — due schedule ticks, stalled leases, due delayed jobs, retention, expired
idempotency records and results, dropped blobs, old commit tokens. The sweeper service calls it in a loop and
decides ownership (`owns`); tests call it directly with a manual clock.

Which queues a pass looks at: the queue shards whose place in the store-wide due index
(`keys.due_entry`) has come. Every transition that gives a shard sweep work (a lease, a
delay, a retention age, an idempotency record) moves its place earlier, and after
sweeping a shard the pass puts it at its next due time (`sweeps.reschedule_due`). So an
idle queue costs a pass nothing. Every `FULL_PASS_NS` of store time (and on a process's
first pass) a full pass reads every queue instead, as a backstop, and places each one.

With `fence` (the sweeper service's fenced ownership leases, `loam_common.ownership`),
every sweep transaction of a shard first checks that this process still holds that
shard's lease, in the same transaction; a shard whose lease was taken over stops being
swept at once and is reported in `SweepReport.lost`. Queue-wide sweeps (retention,
idempotency) run under shard 0's lease, namespace-wide ones (schedules, results, blobs)
under `(ns, "", 0)`, and the commit-token sweep under `("", "", 0)`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from loam_common import keys, results
from loam_common.blobs import BlobStore
from loam_common.jobs import quotas, schedules, sweeps
from loam_common.jobs.quotas import QuotaTable
from loam_common.ownership import Fence, OwnershipLost, run_fenced
from loam_common.store.runner import Store

COMMIT_TOKEN_AGE_NS = 3600 * 1_000_000_000
FULL_PASS_NS = 60 * 1_000_000_000
RESCHEDULE_BATCH = 200  # queues whose due-index places one transaction recomputes


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
    ticks: int = 0  # schedule ticks fired (each enqueued one job)
    # queues where jobs became ready, for waking long-polls
    woke: set[tuple[str, str]] = field(default_factory=set)
    # shards whose fenced write was refused: another sweeper owns them now
    lost: set[tuple[str, str, int]] = field(default_factory=set)


class Sweeper:
    def __init__(
        self,
        store: Store,
        blobs: BlobStore | None = None,
        *,
        owns: Callable[[str, str, int], bool] = _owns_everything,
        on_ready: Callable[[str, str], None] | None = None,
        fence: Callable[[str, str, int], Fence | None] | None = None,
        quotas: QuotaTable | None = None,
    ) -> None:
        """`quotas`: the deployment's (the `--quotas` flag), which schedule ticks are
        checked against in a namespace without quotas of its own."""
        self.store = store
        self.quotas = quotas or QuotaTable()
        self.blobs = blobs
        self.owns = owns
        self.on_ready = on_ready
        self.fence = fence
        self._next_full_ns = 0  # the first pass reads every queue (and places it in the index)

    async def run_once(self) -> SweepReport:
        rep = SweepReport()
        now = self.store.clock.now_ns()
        full = now >= self._next_full_ns
        placed: list[tuple[str, str, list[int]]] = []  # queue shards to place in the due index
        namespaces = await self.store.snapshot(sweeps.namespace_list)
        for ns in namespaces:
            ns_due = await self.store.snapshot(sweeps.namespace_due, ns) if self.owns(ns, "", 0) else None
            if ns_due is not None and ns_due.schedules:  # first: the queues below see the ticks' jobs
                try:
                    await self._fire_schedules(ns, rep)
                except OwnershipLost:
                    rep.lost.add((ns, "", 0))
            if full:
                queues = await self.store.snapshot(sweeps.queue_list_registered, ns)
                # One read for the namespace first: most queues have nothing due most passes,
                # and a sweep transaction that finds nothing still costs a trip through the writer.
                for queue, due in zip(
                    queues, await self.store.snapshot(sweeps.due_many, ns, queues), strict=True
                ):
                    if due is not None:
                        await self._sweep_queue(ns, queue, due, rep)
                        owned = [s for s in range(due.shards) if self.owns(ns, queue, s)]
                        if owned:
                            placed.append((ns, queue, owned))
            if ns_due is not None:
                try:
                    if ns_due.results:
                        rep.results += await self._drain(
                            self._sweep_results, ns, fence=self._fence(ns, "", 0)
                        )
                    rep.blobs += await self._collect_blobs(ns)
                except OwnershipLost:
                    rep.lost.add((ns, "", 0))
        if full:
            self._next_full_ns = now + FULL_PASS_NS
        else:
            placed = await self._sweep_due_index(rep)
        for i in range(0, len(placed), RESCHEDULE_BATCH):
            wrong = await self.store.snapshot(sweeps.misplaced, placed[i : i + RESCHEDULE_BATCH])
            if wrong:
                await self.store.transact(sweeps.reschedule_due_many, wrong)
        if self.owns("", "", 0):
            await self.store.sweep_commit_tokens(COMMIT_TOKEN_AGE_NS)
        if self.on_ready is not None:
            for ns, queue in rep.woke:
                self.on_ready(ns, queue)
        return rep

    async def _sweep_due_index(self, rep: SweepReport) -> list[tuple[str, str, list[int]]]:
        """Sweep the owned queue shards whose due-index place has come; returns them, to
        be placed at their next due time."""
        by_queue: dict[tuple[str, str], list[int]] = {}
        after = b""
        while True:
            page = await self.store.snapshot(sweeps.due_shards, after)
            for _key, ns, queue, shard in page:
                if self.owns(ns, queue, shard):
                    by_queue.setdefault((ns, queue), []).append(shard)
            if len(page) < sweeps.DUE_PAGE:
                break
            after = page[-1][0]
        for ns, queue in by_queue:
            due = await self.store.snapshot(sweeps.due, ns, queue)
            if due is not None:
                await self._sweep_queue(ns, queue, due, rep)
        return [(ns, queue, shards) for (ns, queue), shards in by_queue.items()]

    async def _sweep_queue(self, ns: str, queue: str, due: sweeps.Due, rep: SweepReport) -> None:
        owned_any = False
        for shard in range(due.shards):
            if not self.owns(ns, queue, shard):
                continue
            owned_any = True
            if shard not in due.stalled and shard not in due.delayed:
                continue
            fence = self._fence(ns, queue, shard)
            try:
                if shard in due.stalled:
                    stalled = await self._drain(sweeps.sweep_stalled, ns, queue, shard, fence=fence)
                    rep.stalled += stalled
                    if stalled:
                        rep.woke.add((ns, queue))
                if shard in due.delayed:
                    promoted = await self._drain(sweeps.sweep_delayed, ns, queue, shard, fence=fence)
                    rep.promoted += promoted
                    if promoted:
                        rep.woke.add((ns, queue))
            except OwnershipLost:
                rep.lost.add((ns, queue, shard))
        queue_wide = due.retention or due.idempotency
        if queue_wide and owned_any and self.owns(ns, queue, 0) and (ns, queue, 0) not in rep.lost:
            # queue-wide sweeps run with shard 0
            fence = self._fence(ns, queue, 0)
            try:
                if due.retention:
                    rep.retained += await self._once(sweeps.sweep_retention, ns, queue, fence=fence)
                if due.idempotency:
                    rep.idempotency += await self._drain(sweeps.sweep_idempotency, ns, queue, fence=fence)
            except OwnershipLost:
                rep.lost.add((ns, queue, 0))

    async def _fire_schedules(self, ns: str, rep: SweepReport) -> None:
        """Fire the due ticks of the namespace's schedules; each tick's job is enqueued in
        the transaction that advances its schedule (schedules.py), so two sweepers or a
        restarted one never fire a tick twice. A tick over one of the namespace's quotas
        is skipped and recorded in its schedule (quotas.sweep_schedules_within_quota)."""
        fence = self._fence(ns, "", 0)
        deployment = self.quotas.of(ns)
        while True:
            fired = await self._once(quotas.sweep_schedules_within_quota, ns, deployment, fence=fence)
            rep.ticks += fired.ticks
            rep.woke.update((ns, queue) for queue in fired.ready_queues)
            if fired.schedules < schedules.SWEEP_BATCH:
                return

    def _fence(self, ns: str, queue: str, shard: int) -> Fence | None:
        return self.fence(ns, queue, shard) if self.fence is not None else None

    async def _once(self, fn, *args, fence: Fence | None = None):
        if fence is None:
            return await self.store.transact(fn, *args)
        return await self.store.transact(run_fenced, fence, fn, *args)

    async def _drain(self, fn, *args, fence: Fence | None = None) -> int:
        """Run a batch sweep until a batch comes back short."""
        total = 0
        while True:
            n = await self._once(fn, *args, fence=fence)
            total += n
            if n < sweeps.BATCH:
                return total

    @staticmethod
    def _sweep_results(tx, ns: str) -> int:
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
            await self._once(forget, gone, fence=self._fence(ns, "", 0))
        return len(gone)
