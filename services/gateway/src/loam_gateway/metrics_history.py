"""The metrics history's sampler: per queue, what the console charts over 1 h, 24 h and
7 d (throughput, failures, depth, the oldest waiting job's age, wait and run time p50 /
p95 / p99), served at `GET /v1/queues/{queue}/metrics?range=1h|24h|7d`.

Every `interval_s` (10 s; ticks aligned to the clock, so the gateways of a deployment
sample together) the gateway reads the store-derived counters and gauges it already
serves at `/metrics` (`Router.metrics_text`, one snapshot for every namespace) and adds
them to the history kept in the store (loam_common.metrics_history: the tiers, the
points, their retention), in transactions of at most SAMPLE_BATCH queues, each of which
reads the queues' wait and run time histograms from the store too (the queue cores
write them there, in process or apart). The history survives a restart, and every
gateway on the store serves the same points.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from loam_common.metrics_history import (
    FIELDS,
    TIERS,
    Totals,
    history_points,
    history_record,
    history_sampled,
    quantile,
    tier_steps_ns,
)

__all__ = ["FIELDS", "RANGES", "MetricsHistory", "Totals", "parse_totals", "quantile"]

log = logging.getLogger("loam.gateway.metrics_history")

DEFAULT_INTERVAL_S = 10.0
#: range name -> (its step in seconds, None: the sample interval; points kept)
RANGES: dict[str, tuple[float | None, int]] = {name: (step, kept) for name, (_, step, kept) in TIERS.items()}
SAMPLE_BATCH = 200  # queues per transaction of a sample
_FAILED_OUTCOMES = ("fail", "retry")

_LINE = re.compile(r'^(loam_jobs_[a-z_]+)\{ns="([^"]*)",queue="([^"]*)"(?:,([a-z]+)="((?:[^"\\]|\\.)*)")?'
                   r'(?:,le="[^"]*")?\} (\S+)$')  # fmt: skip


def parse_totals(text: str, at_ns: int) -> dict[tuple[str, str], Totals]:
    """Per (namespace, queue), the counters and gauges of the metrics text
    (loam_common.metrics). Its histograms are this process's only: the history reads
    the store's (metrics_history.history_record), which every queue core adds to."""
    out: dict[tuple[str, str], Totals] = {}
    for line in text.splitlines():
        if not line.startswith("loam_jobs_"):
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        name, ns, queue, label, label_value, value = m.groups()
        if name == "loam_jobs_dlq_depth" or name.endswith(("_bucket", "_sum", "_count")):
            continue
        t = out.get((ns, queue))
        if t is None:
            t = out[(ns, queue)] = Totals(at_ns)
        v = float(value)
        if name == "loam_jobs_enqueued_total":
            t.enqueued = v
        elif name == "loam_jobs_completed_total":
            if label_value == "ok":
                t.completed += v
            elif label_value in _FAILED_OUTCOMES:
                t.failed += v
        elif name in ("loam_jobs_waiting", "loam_jobs_delayed"):
            t.depth += v
        elif name == "loam_jobs_active":
            t.active = v
        elif name == "loam_jobs_oldest_waiting_seconds":
            t.oldest_wait_s = v
    return out


class MetricsHistory:
    """The sampler over the store's history, and the reads of it."""

    def __init__(
        self, read_text: Callable[[], Awaitable[str]], store: Any, interval_s: float = DEFAULT_INTERVAL_S
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.read_text = read_text
        self.store = store
        self.interval_s = interval_s
        self.steps_ns = tier_steps_ns(interval_s)
        self._task: asyncio.Task | None = None
        self.samples = 0
        self._sampled = asyncio.Event()

    async def record(self, text: str, now_ns: int | None = None) -> None:
        """Take one sample from a metrics text."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        await self._add(parse_totals(text, now_ns), now_ns)

    async def _add(self, totals: dict[tuple[str, str], Totals], now_ns: int) -> None:
        rows = [(ns, queue, t) for (ns, queue), t in totals.items()]
        for i in range(0, len(rows), SAMPLE_BATCH):
            await self.store.transact(history_record, rows[i : i + SAMPLE_BATCH], self.steps_ns)
        await self.store.transact(history_sampled, set(totals), now_ns)
        self.samples += 1
        self._sampled.set()

    async def points(self, ns: str, queue: str, range_: str) -> list[dict[str, float | None]]:
        rows = await self.store.snapshot(history_points, ns, queue, range_)
        return [{f: (None if math.isnan(v) else v) for f, v in zip(FIELDS, row, strict=True)} for row in rows]

    async def sample_once(self) -> None:
        try:
            text = await self.read_text()
            now_ns = time.time_ns()
            # parsed off the loop (a namespace of 1,000 queues is 20,000 lines)
            await self._add(await asyncio.to_thread(parse_totals, text, now_ns), now_ns)
        except Exception:  # noqa: BLE001 - the store may be down for a moment; the next tick tries again
            log.warning("metrics history: could not take a sample", exc_info=True)

    async def wait_for_sample(self, after: int) -> None:
        """Until more than `after` samples were taken (tests wait on this, not a sleep)."""
        while self.samples <= after:
            self._sampled.clear()
            await self._sampled.wait()

    def start(self) -> None:
        async def loop() -> None:
            while True:
                await self.sample_once()
                # to the next multiple of the interval: every gateway samples at the same
                # moments, and the first of them writes the step's point
                await asyncio.sleep(self.interval_s - time.time() % self.interval_s)

        self._task = asyncio.create_task(loop(), name="metrics-history")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
