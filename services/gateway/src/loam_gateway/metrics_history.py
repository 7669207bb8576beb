"""Metrics history kept on the server: per queue, what the console charts over 1 h,
24 h and 7 d (throughput, failures, depth, the oldest waiting job's age, wait and run
time p50 / p95 / p99), served at `GET /v1/queues/{queue}/metrics?range=1h|24h|7d`.

A sampler in the gateway reads the metrics the gateway already serves at `/metrics`
(`Router.metrics_text`: the store-derived counters and gauges, one snapshot for every
namespace, and, with the core in this process, its wait and run time histograms) every
`interval_s`, and keeps, per queue, three rings of points in this process's memory:

| range | a point per | points |
|-------|-------------|--------|
| 1h    | interval_s (10 s) | 360 |
| 24h   | 5 min       | 288    |
| 7d    | 1 h         | 168    |

A point covers the step before it: the jobs enqueued, completed (outcome ok) and failed
(outcomes fail and retry: failed attempts) in it, from the difference of the store's
totals at its two ends (so a point is exact whatever the step), the depth (waiting,
prioritized, delayed), the active jobs and the oldest waiting age at its end, and the
wait (ready to leased) and run (leased to completed) percentiles of the jobs of the step,
from the difference of the histograms' buckets (interpolated within a bucket, as
Prometheus' histogram_quantile; null when no job was seen). A point is a row of a
float array: about 80 kB per queue with a full week.

The history lives in the gateway process: it starts empty when the gateway starts, and
with several gateways each keeps its own (the counters come from the store, so they
agree). Against remote queue cores the percentiles are absent: the histograms are in the
cores' own `/metrics`. A queue that disappears from the metrics (obliterated) loses its
history at the next sample.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import math
import re
import time
from array import array
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

log = logging.getLogger("loam.gateway.metrics_history")

DEFAULT_INTERVAL_S = 10.0
#: (range name, step in intervals or seconds, points kept)
RANGES: dict[str, tuple[float | None, int]] = {"1h": (None, 360), "24h": (300.0, 288), "7d": (3600.0, 168)}

#: the columns of a point, in the order of its row
FIELDS = ("t_ns", "enqueued", "completed", "failed", "depth", "active", "oldest_wait_s",
          "wait_p50_s", "wait_p95_s", "wait_p99_s", "run_p50_s", "run_p95_s", "run_p99_s")  # fmt: skip
_NF = len(FIELDS)
_FAILED_OUTCOMES = ("fail", "retry")

_LINE = re.compile(r'^(loam_jobs_[a-z_]+)\{ns="([^"]*)",queue="([^"]*)"(?:,([a-z]+)="((?:[^"\\]|\\.)*)")?'
                   r'(?:,le="([^"]*)")?\} (\S+)$')  # fmt: skip


@dataclass(slots=True)
class Totals:
    """One queue's cumulative figures at one moment (from one metrics text)."""

    at_ns: int
    enqueued: float = 0.0
    completed: float = 0.0
    failed: float = 0.0
    depth: float = 0.0
    active: float = 0.0
    oldest_wait_s: float = 0.0
    wait: dict[float, float] = field(default_factory=dict)  # le -> cumulative count
    run: dict[float, float] = field(default_factory=dict)  # summed over tasks


def parse_totals(text: str, at_ns: int) -> dict[tuple[str, str], Totals]:
    """Per (namespace, queue), the figures of the metrics text (loam_common.metrics)."""
    out: dict[tuple[str, str], Totals] = {}
    for line in text.splitlines():
        if not line.startswith("loam_jobs_"):
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        name, ns, queue, label, label_value, le, value = m.groups()
        if label == "le":  # a histogram without a third label (the wait time's)
            le = label_value
        if name == "loam_jobs_dlq_depth":
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
        elif le is not None and name in (
            "loam_jobs_lease_latency_seconds_bucket",
            "loam_jobs_run_seconds_bucket",
        ):
            buckets = t.wait if name.startswith("loam_jobs_lease") else t.run
            bound = math.inf if le == "+Inf" else float(le)
            buckets[bound] = buckets.get(bound, 0.0) + v
    return out


def quantile(q: float, before: dict[float, float], after: dict[float, float]) -> float:
    """The q-quantile of the observations between two cumulative bucket readings
    (Prometheus' histogram_quantile); NaN when there were none."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    if not counts or counts[-1] <= 0:
        return math.nan
    rank = q * counts[-1]
    i = bisect.bisect_left(counts, rank)
    i = min(i, len(bounds) - 1)
    hi = bounds[i]
    lo = bounds[i - 1] if i > 0 else 0.0
    if math.isinf(hi):  # in the +Inf bucket: the largest finite bound is all we know
        return lo
    below = counts[i - 1] if i > 0 else 0.0
    inside = counts[i] - below
    return hi if inside <= 0 else lo + (hi - lo) * (rank - below) / inside


def point(before: Totals, after: Totals) -> tuple[float, ...]:
    """The row for the step from `before` to `after`. A counter that went down (the store
    was reset) counts from zero."""

    def delta(a: float, b: float) -> float:
        return b - a if b >= a else b

    return (
        float(after.at_ns),
        delta(before.enqueued, after.enqueued),
        delta(before.completed, after.completed),
        delta(before.failed, after.failed),
        after.depth,
        after.active,
        after.oldest_wait_s,
        *(quantile(q, before.wait, after.wait) for q in (0.5, 0.95, 0.99)),
        *(quantile(q, before.run, after.run) for q in (0.5, 0.95, 0.99)),
    )


class Ring:
    """Up to `cap` rows of _NF floats, oldest first; grows as it fills, then wraps."""

    __slots__ = ("cap", "rows", "start")

    def __init__(self, cap: int) -> None:
        self.cap, self.rows, self.start = cap, array("d"), 0

    def __len__(self) -> int:
        return len(self.rows) // _NF

    def append(self, row: tuple[float, ...]) -> None:
        if len(self) < self.cap:
            self.rows.extend(row)
            return
        at = self.start * _NF
        self.rows[at : at + _NF] = array("d", row)
        self.start = (self.start + 1) % self.cap

    def __iter__(self):
        n = len(self)
        for i in range(n):
            at = ((self.start + i) % n) * _NF
            yield self.rows[at : at + _NF]


@dataclass(slots=True)
class _Tier:
    step_ns: int
    ring: Ring
    last: Totals | None = None


class MetricsHistory:
    """The rings of every queue, and the loop that fills them."""

    def __init__(
        self, read_text: Callable[[], Awaitable[str]], interval_s: float = DEFAULT_INTERVAL_S
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.read_text = read_text
        self.interval_s = interval_s
        self.steps_ns = {r: int((step or interval_s) * 1e9) for r, (step, _) in RANGES.items()}
        self._series: dict[tuple[str, str], dict[str, _Tier]] = {}
        self._task: asyncio.Task | None = None
        self.samples = 0
        self._last_at = 0
        self._sampled = asyncio.Event()

    def record(self, text: str, now_ns: int | None = None) -> None:
        """Take one sample from a metrics text."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        self._add(parse_totals(text, now_ns), now_ns)

    def _add(self, totals: dict[tuple[str, str], Totals], now_ns: int) -> None:
        for gone in self._series.keys() - totals.keys():
            del self._series[gone]
        slack = int(self.interval_s * 1e9 / 2)  # a tick a little early still closes its step
        for key, cur in totals.items():
            tiers = self._series.get(key)
            if tiers is None:
                # A queue first seen after the first sample is new: it counts from zero at the
                # last sample, so the jobs it ran before this one are in its first step.
                start = Totals(self._last_at) if self.samples else None
                tiers = self._series[key] = {
                    r: _Tier(self.steps_ns[r], Ring(cap), start) for r, (_, cap) in RANGES.items()
                }
            for tier in tiers.values():
                if tier.last is None:
                    tier.last = cur
                elif now_ns - tier.last.at_ns >= tier.step_ns - slack:
                    tier.ring.append(point(tier.last, cur))
                    tier.last = cur
        self.samples += 1
        self._last_at = now_ns
        self._sampled.set()

    def points(self, ns: str, queue: str, range_: str) -> list[dict[str, float | None]]:
        tiers = self._series.get((ns, queue))
        if tiers is None:
            return []
        return [
            {f: (None if math.isnan(v) else v) for f, v in zip(FIELDS, row, strict=True)}
            for row in tiers[range_].ring
        ]

    async def sample_once(self) -> None:
        try:
            text = await self.read_text()
        except Exception:  # noqa: BLE001 - the store may be down for a moment; the next tick tries again
            log.warning("metrics history: could not read the metrics", exc_info=True)
            return
        now_ns = time.time_ns()
        # parsed off the loop (a namespace of 1,000 queues is 20,000 lines); added on it
        self._add(await asyncio.to_thread(parse_totals, text, now_ns), now_ns)

    async def wait_for_sample(self, after: int) -> None:
        """Until more than `after` samples were taken (tests wait on this, not a sleep)."""
        while self.samples <= after:
            self._sampled.clear()
            await self._sampled.wait()

    def start(self) -> None:
        async def loop() -> None:
            while True:
                await self.sample_once()
                await asyncio.sleep(self.interval_s)

        self._task = asyncio.create_task(loop(), name="metrics-history")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
