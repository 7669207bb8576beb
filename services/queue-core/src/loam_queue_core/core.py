"""`QueueCore`: one queue core, put together: a store, its blob store, the long-poll
waiters and Watch hub of this process, the effect sink that serves them (effects.py),
and one facade per entity (facade/). Transports call the facades; nothing else here
runs a transaction."""

from __future__ import annotations

from loam_common.blobs import BlobStore
from loam_common.jobs.queue import DEFAULT_PAYLOAD_LIMIT
from loam_common.jobs.quotas import QuotaTable
from loam_common.store.runner import Store
from loam_queue_core.effects import CoreEffects
from loam_queue_core.facade.exchanges import Exchanges
from loam_queue_core.facade.flows import Flows
from loam_queue_core.facade.job_admin import JobAdmin
from loam_queue_core.facade.jobs import Jobs
from loam_queue_core.facade.payloads import Payloads
from loam_queue_core.facade.queues import Queues
from loam_queue_core.facade.quotas import Quotas
from loam_queue_core.facade.results import Results
from loam_queue_core.facade.schedules import Schedules
from loam_queue_core.histogram_flush import DEFAULT_INTERVAL_S as FLUSH_INTERVAL_S
from loam_queue_core.histogram_flush import HistogramFlush
from loam_queue_core.waiters import Waiters
from loam_queue_core.watch import EventHub


class QueueCore:
    def __init__(
        self,
        store: Store,
        blobs: BlobStore | None = None,
        *,
        payload_limit: int = DEFAULT_PAYLOAD_LIMIT,
        quotas: QuotaTable | None = None,
        histogram_flush_s: float = FLUSH_INTERVAL_S,
    ) -> None:
        """`quotas`: the deployment's limits per namespace (loam_common.jobs.quotas, the
        `--quotas` flag); none by default. A namespace's own quotas (`self.quotas`, the
        admin API) replace them for that namespace. `histogram_flush_s`: how often the
        core's wait and run time observations go to the store (`self.histogram_flush`,
        a loop its process starts and stops)."""
        self.store = store
        self.blobs = blobs
        self.waiters = Waiters()  # parked leases and result long-polls of this process
        self.hub = EventHub()  # Watch streams of this process (watch.py)
        # What the transitions committed through this store make happen.
        self.effects = CoreEffects(self.waiters, self.hub)
        store.add_sink(self.effects)
        payloads = Payloads(blobs, payload_limit)
        self.quotas = Quotas(store, quotas or QuotaTable())
        self.jobs = Jobs(store, payloads, self.waiters, self.quotas)
        self.job_admin = JobAdmin(store, self.jobs)
        self.queues = Queues(store)
        self.results = Results(store, self.waiters)
        self.schedules = Schedules(store, self.quotas)
        self.flows = Flows(store, payloads, self.quotas)
        self.exchanges = Exchanges(store, payloads, self.jobs)
        self.histogram_flush = HistogramFlush(store, histogram_flush_s)

    def close(self) -> None:
        """Stop serving this store's effects (the store itself is its owner's to close)."""
        self.store.remove_sink(self.effects)
