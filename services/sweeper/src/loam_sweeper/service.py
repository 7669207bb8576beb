"""`SweeperService`: the sweeper process's loop. Each pass (`run_once`):

1. lists the queue shards in the store (plus the namespace-wide pseudo-shards),
2. refreshes its fenced ownership leases (`loam_common.ownership`, kind "sweeper"):
   heartbeat, rendezvous over the live sweepers, take / renew / release,
3. runs `Sweeper.run_once()` over the shards it owns, every sweep transaction fenced
   by the shard's lease, so a sweeper whose shard was taken over writes nothing more,
4. wakes the long-polls of each queue where jobs became ready (stalled jobs reclaimed,
   delayed jobs promoted, schedule ticks): the sweep transitions declare `Ready`
   (loam_common.effects); in a process of its own the sweeper's effect sink,
   `RemoteWake`, collects them and the pass ends with a POST of `{"ns", "queue"}` to
   `<core>/internal/v1/wake` of the queue core that owns each queue (rendezvous over
   the queue-core URLs, the function the gateway routes with). Sharing a store object
   with a queue core (`loam dev`), the core's own sink wakes them.
5. fires the durable timers (`durable`, a loam_durable DurableTimers: promise timeouts,
   task leases and retries, Resonate schedules), when given.

`stop()` lets the current pass finish, then releases every lease and leaves the
membership, so the other sweepers take the shards over at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Sequence

from loam_common import rendezvous
from loam_common.api.headers import TOKEN_HEADER
from loam_common.blobs import BlobStore
from loam_common.effects import Effect, ready_counts
from loam_common.jobs.quotas import QuotaTable
from loam_common.loop import Loop
from loam_common.ownership import DEFAULT_TTL_NS, ShardLister, ShardOwnership
from loam_common.store.runner import Store
from loam_common.sweeper import Sweeper, SweepReport

log = logging.getLogger(__name__)

KIND = "sweeper"
WAKE_PATH = "/internal/v1/wake"
WAKE_TIMEOUT_S = 2.0


class SweeperService(Loop):
    name = "sweeper"

    def __init__(
        self,
        store: Store,
        blobs: BlobStore | None,
        owner_id: str,
        queue_cores: Sequence[str] | None = None,
        interval: float = 0.2,
        *,
        ttl_ns: int = DEFAULT_TTL_NS,
        internal_token: str | None = None,
        durable: Loop | None = None,
        quotas: QuotaTable | None = None,
    ) -> None:
        """`quotas`: the deployment's per-namespace quotas (`--quotas`), which schedule
        ticks are checked against where a namespace has none of its own."""
        super().__init__(interval)
        self.durable = durable
        self.store = store
        self.owner_id = owner_id
        self.queue_cores = [c.rstrip("/") for c in queue_cores or ()]
        self.internal_token = (
            internal_token if internal_token is not None else os.environ.get("LOAM_INTERNAL_TOKEN")
        )
        self.remote_wake = RemoteWake()
        if self.queue_cores:
            store.add_sink(self.remote_wake)
        self.ownership = ShardOwnership(store, KIND, owner_id, ttl_ns)
        self.lister = ShardLister(store, namespace_wide=True)  # lists again only when queues change
        self.sweeper = Sweeper(
            store, blobs, owns=self.ownership.owns, fence=self.ownership.fence, quotas=quotas
        )
        self._http = None
        self.wakes_sent = 0
        self.wakes_failed = 0

    async def run_once(self) -> SweepReport:
        shards = await self.lister.shards()
        await self.ownership.refresh(shards)
        rep = await self.sweeper.run_once()
        for shard_id in rep.lost:
            log.info("sweeper %s: lost %s to another sweeper", self.owner_id, shard_id)
            self.ownership.lost(shard_id)
        if self.durable is not None:
            await self.durable.run_once()
        woke = self.remote_wake.take()
        if woke:
            await self._wake(woke)
        return rep

    async def on_stop(self) -> None:
        self.store.remove_sink(self.remote_wake)
        if self.durable is not None:
            await self.durable.on_stop()
        try:
            await self.ownership.release_all()
        except Exception:  # the store may be gone; the leases then expire on their own
            log.exception("sweeper %s: could not release its leases", self.owner_id)

    # -- waking the queue cores --------------------------------------------------------------
    async def _wake(self, queues: set[tuple[str, str]]) -> None:
        await asyncio.gather(
            *(
                self._post_wake(rendezvous.queue_owner(ns, queue, self.queue_cores), ns, queue)
                for ns, queue in sorted(queues)
            )
        )

    async def _post_wake(self, core: str, ns: str, queue: str) -> None:
        """Best effort: a core that misses a wake still finds the jobs when its parked
        leases time out or a worker polls again."""
        if self._http is None:
            from pyqwest import Client

            self._http = Client()
        headers = {"content-type": "application/json"}
        if self.internal_token:
            headers[TOKEN_HEADER] = self.internal_token
        body = json.dumps({"ns": ns, "queue": queue}).encode()
        try:
            resp = await asyncio.wait_for(
                self._http.post(core + WAKE_PATH, headers=headers, content=body), WAKE_TIMEOUT_S
            )
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {resp.content[:200]!r}")
            self.wakes_sent += 1
        except Exception as e:  # noqa: BLE001 - a failed wake only delays a lease
            self.wakes_failed += 1
            log.warning("sweeper %s: could not wake %s for %s/%s: %s", self.owner_id, core, ns, queue, e)


class RemoteWake:
    """The sweeper process's effect sink: the queues its sweeps made jobs leasable in,
    collected until the pass ends (`take`) and then woken on their owning cores."""

    def __init__(self) -> None:
        self._queues: set[tuple[str, str]] = set()

    def run(self, effects: list[Effect]) -> None:
        self._queues.update(q for q, n in ready_counts(effects).items() if n)

    def take(self) -> set[tuple[str, str]]:
        queues, self._queues = self._queues, set()
        return queues
