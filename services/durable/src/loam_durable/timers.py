"""The durable timers as small loops, each with a `run_once()` a test can call.

`DurableTimers`: each pass lists the namespaces holding durable state, takes fenced
ownership of them (kind "durable", one pseudo-shard `(ns, "", 0)` per namespace, the
same leases the job sweeps use, so several sweepers split the namespaces and a sweeper
whose lease was taken writes nothing more), then fires what is due in each owned one:
promise timeouts (durable sleeps among them), task lease expiries (how a killed worker
is noticed) and retries (the resend of a lost `execute`), schedule fires and the starts
Loam schedules' ticks asked for; once per namespace, the search index of promises
stored before it existed (a batch a pass until done); and every
`RETENTION_EVERY` passes deletes the trees of roots settled longer ago than the
namespace's retention TTL. Run by the sweeper service and, in process, by `loam dev`.

`DurableOutbox`: in the process that holds the SSE connections, moves the pushes that a
timer process without connections wrote to the store's outbox onto the connections. It
runs when that process is told (`POST {base}/internal/outbox`, sent after the timers'
commit by peers.OutboxNotice) and otherwise only every `interval` (5 s), which recovers
a notice that was lost.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from loam_common import keys
from loam_common.loop import Loop
from loam_common.ownership import DEFAULT_TTL_NS, OwnershipLost, ShardOwnership, run_fenced
from loam_common.store.base import Txn
from loam_common.store.runner import Store
from loam_durable import transitions as tr
from loam_durable.facade import DurableCore, next_cron
from loam_durable.records import loads

log = logging.getLogger(__name__)

KIND = "durable"
RETENTION_EVERY = 50
MAX_BATCHES_PER_PASS = 20


def durable_namespaces(tx: Txn) -> list[str]:
    prefix = keys.durable_namespaces()
    return [k[len(prefix) :].decode() for k, _ in tx.scan(prefix, keys.prefix_end(prefix))]


@dataclass
class TimersReport:
    fired: int = 0
    expired_roots: int = 0


class DurableTimers(Loop):
    name = "durable-timers"

    def __init__(
        self, core: DurableCore, owner_id: str, interval: float = 0.2, *, ttl_ns: int = DEFAULT_TTL_NS
    ) -> None:
        super().__init__(interval)
        self.core = core
        self.store: Store = core.store
        self.ownership = ShardOwnership(self.store, KIND, owner_id, ttl_ns)
        self.owner_id = owner_id
        self._runs = 0  # counted here: the sweeper service calls run_once from its own pass
        self._indexed: set[str] = set()  # namespaces whose older promises are in the search index

    async def run_once(self) -> TimersReport:
        rep = TimersReport()
        namespaces = await self.store.snapshot(durable_namespaces)
        fences = await self.ownership.refresh([(ns, "", 0) for ns in namespaces])
        sweep_retention = self._runs % RETENTION_EVERY == 0
        self._runs += 1
        for (ns, _, _), fence in fences.items():
            try:
                for _ in range(MAX_BATCHES_PER_PASS):
                    timers, fx = await self.store.transact(
                        run_fenced, fence, tr.run, ns, self.core.retry_ms, self.core.hub is None,
                        tr.timers_fire_due, next_cron,
                    )  # fmt: skip
                    self.core.deliver(fx)
                    rep.fired += timers.fired
                    if not timers.more:
                        break
                if ns not in self._indexed:
                    done, _ = await self.store.transact(
                        run_fenced,
                        fence,
                        tr.run,
                        ns,
                        self.core.retry_ms,
                        self.core.hub is None,
                        tr.search_index_backfill,
                    )
                    if done:
                        self._indexed.add(ns)
                if sweep_retention:
                    n, fx = await self.store.transact(
                        run_fenced,
                        fence,
                        tr.run,
                        ns,
                        self.core.retry_ms,
                        self.core.hub is None,
                        tr.retention_sweep,
                    )
                    self.core.deliver(fx)
                    rep.expired_roots += n
            except OwnershipLost:
                log.info("durable timers %s: lost namespace %s to another sweeper", self.owner_id, ns)
                self.ownership.lost((ns, "", 0))
        return rep

    async def on_stop(self) -> None:
        if self.core.outbox_notice is not None:
            await self.core.outbox_notice.close()
        try:
            await self.ownership.release_all()
        except Exception:
            log.exception("durable timers %s: could not release their leases", self.owner_id)


def outbox_take(tx: Txn, ns: str, limit: int = 500) -> list[tuple[str, dict]]:
    prefix = keys.durable_outbox_all(ns)
    rows = tx.scan(prefix, keys.prefix_end(prefix), limit=limit)
    out = []
    for key, value in rows:
        tx.delete(key)
        rec = loads(value)
        out.append((rec["address"], rec["message"]))
    return out


OUTBOX_INTERVAL_S = 5.0


class DurableOutbox(Loop):
    name = "durable-outbox"

    def __init__(self, core: DurableCore, interval: float = OUTBOX_INTERVAL_S) -> None:
        super().__init__(interval)
        self.core = core
        assert core.hub is not None, "the outbox is drained where the connections are"
        core.outbox_waiting = self.wake

    async def run_once(self) -> int:
        sent = 0
        for ns in await self.core.store.snapshot(durable_namespaces):
            for address, message in await self.core.store.transact(outbox_take, ns):
                self.core.push(ns, address, message)
                sent += 1
        return sent
