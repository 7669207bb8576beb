"""`HistogramFlush`: this process's wait and run time observations, added to the store's
per-queue histograms (loam_common.metrics_history.histograms_add) every `interval`
seconds, so the metrics history has percentiles whichever process ran the jobs.

The observations are the ones `/metrics` serves (loam_common.metrics.PROCESS, filled by
the core's effect sink); a pass takes what was observed since the last one, and gives it
back when its transaction fails, so the next pass writes it. A pass with nothing new
does not touch the store. The interval is a batching window, not a poll: it bounds how
late a job shows in the history and how many transactions the histograms cost (one per
core per interval at most, whatever the load)."""

from __future__ import annotations

import logging

from loam_common.loop import Loop
from loam_common.metrics import PROCESS, ProcessMetrics
from loam_common.metrics_history import histograms_add
from loam_common.store.runner import Store

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 1.0
FLUSH_BATCH = 200  # queues per transaction, as the history's sampler writes them


class HistogramFlush(Loop):
    name = "histogram-flush"

    def __init__(
        self, store: Store, interval: float = DEFAULT_INTERVAL_S, observed: ProcessMetrics = PROCESS
    ) -> None:
        super().__init__(interval)
        self.store = store
        self.observed = observed

    async def run_once(self) -> int:
        """Write what was observed since the last pass, in transactions of at most
        FLUSH_BATCH queues; returns the queues written."""
        taken = self.observed.take()
        rows = list(taken.by_queue().items())
        for i in range(0, len(rows), FLUSH_BATCH):
            try:
                await self.store.transact(histograms_add, dict(rows[i : i + FLUSH_BATCH]))
            except BaseException:  # this batch and the next ones go in the next pass
                self.observed.give_back(taken.only({queue for queue, _ in rows[i:]}))
                raise
        return len(rows)

    async def on_stop(self) -> None:
        try:
            await self.run_once()  # a core stopping in order loses nothing
        except Exception:  # noqa: BLE001 - stopping goes on; these observations are lost
            log.warning("could not write the last histogram observations", exc_info=True)
