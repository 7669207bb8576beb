"""`Quotas`: each namespace's quotas in force, for the facades whose transactions check
them (Jobs, Schedules: `of`), and as the admin API reads and writes them (GetQuotas,
SetQuotas; `loam quotas get|set`: `get`, `set`).

A namespace's own record (set through the API) replaces the deployment's `--quotas`
entry for it. `of` keeps what it read for `refresh_s` (one second by default): the hot
path reads nothing, a change made here applies to the next call at once, and one made
through another process within `refresh_s`. The limits themselves are checked inside
the transactions they limit (loam_common.jobs.quotas)."""

from __future__ import annotations

import time

from loam_common.jobs import quotas
from loam_common.jobs.quotas import Quota, QuotaTable, QuotaView
from loam_common.store.runner import Store
from loam_common.validate import Namespace


class Quotas:
    def __init__(self, store: Store, table: QuotaTable | None = None, refresh_s: float = 1.0) -> None:
        self.store = store
        self.table = table or QuotaTable()  # the deployment's (--quotas)
        self.refresh_s = refresh_s
        self._in_force: dict[str, tuple[Quota, float]] = {}  # ns -> (quota, monotonic time read)

    async def of(self, ns: Namespace) -> Quota:
        """The namespace's quotas in force (falsy: none), at most `refresh_s` old."""
        got = self._in_force.get(ns)
        now = time.monotonic()
        if got is not None and now - got[1] < self.refresh_s:
            return got[0]
        # A record or two, read on the loop: a hop to a reader thread would land on the
        # enqueue that happens to come once `refresh_s` has passed (its latency's tail).
        quota, _source = await self.store.snapshot(quotas.in_force, ns, self.table.of(ns), inline=True)
        self._in_force[ns] = (quota, now)
        return quota

    async def get(self, ns: Namespace) -> QuotaView:
        return await self.store.snapshot(quotas.quotas_get, ns, self.table.of(ns))

    async def set(self, ns: Namespace, quota: Quota | None) -> QuotaView:
        """Replace the namespace's own quotas whole; None drops them (the deployment's apply)."""
        view = await self.store.transact(quotas.quotas_set, ns, quota, self.table.of(ns))
        self._in_force[ns] = (view.quota, time.monotonic())
        return view
