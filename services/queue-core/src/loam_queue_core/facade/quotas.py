"""`Quotas`: a namespace's quotas as the admin API reads and writes them (GetQuotas,
SetQuotas; `loam quotas get|set`). The limits themselves are checked inside the
transactions they limit (loam_common.jobs.quotas, run by the Jobs and Schedules
facades); this facade only stores a namespace's own record, which those checks read on
their next call, in every process."""

from __future__ import annotations

from loam_common.jobs import quotas
from loam_common.jobs.quotas import Quota, QuotaTable, QuotaView
from loam_common.store.runner import Store
from loam_common.validate import Namespace


class Quotas:
    def __init__(self, store: Store, table: QuotaTable | None = None) -> None:
        self.store = store
        self.table = table or QuotaTable()  # the deployment's (--quotas)

    async def get(self, ns: Namespace) -> QuotaView:
        return await self.store.snapshot(quotas.quotas_get, ns, self.table.of(ns))

    async def set(self, ns: Namespace, quota: Quota | None) -> QuotaView:
        """Replace the namespace's own quotas whole; None drops them (the deployment's apply)."""
        return await self.store.transact(quotas.quotas_set, ns, quota, self.table.of(ns))
