"""Metrics history in the store: per queue, the points the console charts over 1 h, 24 h
and 7 d, kept as rows of the store (keys.py: `t/<ns>/mhp/...` points, `t/<ns>/mhl/...`
where each tier's next point starts), so the history outlives a gateway and every
gateway of a deployment reads the same one.

| tier | a point per        | kept           |
|------|--------------------|----------------|
| 1h   | the sample interval (10 s) | 360 steps (1 h)  |
| 24h  | 5 min              | 288 steps (24 h) |
| 7d   | 1 h                | 168 steps (7 d)  |

A point covers the step before it: the jobs enqueued, completed (outcome ok) and failed
(outcomes fail and retry: failed attempts) in it, from the difference of the store's
totals at its two ends (so a point is exact whatever the step), the depth (waiting,
prioritized, delayed), the active jobs and the oldest waiting age at its end, and the
wait (ready to leased) and run (leased to completed) percentiles of the jobs of the step,
from the difference of the histograms' buckets (interpolated within a bucket, as
Prometheus' histogram_quantile; NaN, shown as null, when no job was seen).

The histograms are rows of the store too (`t/<ns>/mhh/<queue>`, `histograms_add`): each
queue core observes the leases and completions it runs in memory and adds them to the
queue's row every second or so (loam_queue_core.histogram_flush). So the percentiles
are the same whether the cores run in the gateway's process (`loam dev`) or apart, and
whichever core ran a queue's jobs (adding is how several cores' observations merge); a
core that dies loses at most its last second of observations, and a sample sees a job
within that second of its lease or completion.

Steps are aligned to the clock (a point closes when a sample falls in a later step than
the tier's last one), and a sample is one transaction that reads each tier's last end
before it writes: so two gateways sampling the same store write each step once, whoever
comes first, and a restarted gateway carries on from the rows it finds. The sample that
writes a point deletes a few of the tier's points past its age, and a queue gone from
the metrics (obliterated) loses its history (`history_sampled`).
"""

from __future__ import annotations

import bisect
import json
import math
import struct
from dataclasses import dataclass, field

from loam_common import keys
from loam_common.store.base import Txn

#: tier name -> (its id in keys, its step in seconds (None: the sample interval), steps kept)
TIERS: dict[str, tuple[int, float | None, int]] = {
    "1h": (0, None, 360),
    "24h": (1, 300.0, 288),
    "7d": (2, 3600.0, 168),
}
#: the columns of a point, in the order of its row
FIELDS = ("t_ns", "enqueued", "completed", "failed", "depth", "active", "oldest_wait_s",
          "wait_p50_s", "wait_p95_s", "wait_p99_s", "run_p50_s", "run_p95_s", "run_p99_s")  # fmt: skip
ROW = struct.Struct("<" + "d" * len(FIELDS))
TRIM_PER_POINT = 16  # old points a new point deletes at most (it adds one)
FORGET_PER_SAMPLE = 2_000  # keys of gone queues one sample deletes at most
NAMESPACES_MAX = 100_000


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

    def encode(self) -> bytes:
        return json.dumps(
            [self.at_ns, self.enqueued, self.completed, self.failed, self.depth, self.active,
             self.oldest_wait_s, list(self.wait.items()), list(self.run.items())],
            separators=(",", ":"),
        ).encode()  # fmt: skip

    @classmethod
    def decode(cls, raw: bytes) -> Totals:
        at, enq, ok, fail, depth, active, oldest, wait, run = json.loads(raw)
        return cls(at, enq, ok, fail, depth, active, oldest, dict(map(tuple, wait)), dict(map(tuple, run)))


def quantile(q: float, before: dict[float, float], after: dict[float, float]) -> float:
    """The q-quantile of the observations between two cumulative bucket readings
    (Prometheus' histogram_quantile); NaN when there were none."""
    bounds = sorted(after)
    if before and max(before.values()) > max(after.values(), default=0.0):
        before = {}  # the histograms were reset (deleted with their queue): count from zero
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


def tier_steps_ns(interval_s: float) -> dict[str, int]:
    """Each tier's step for a sampler taking a sample every `interval_s`."""
    return {name: int((step or interval_s) * 1e9) for name, (_, step, _) in TIERS.items()}


def histograms_add(
    tx: Txn, observed: dict[tuple[str, str], tuple[dict[float, int], dict[float, int]]]
) -> None:
    """Add a queue core's new observations to the store's histograms: per (namespace,
    queue), the wait and run times per bucket bound (metrics.Taken.by_queue)."""
    for (ns, queue), (wait, run) in observed.items():
        key = keys.metrics_histograms(ns, queue)
        raw = tx.get(key)
        have = json.loads(raw) if raw else {"wait": [], "run": []}
        for name, new in (("wait", wait), ("run", run)):
            merged = dict(map(tuple, have[name]))
            for bound, n in new.items():
                merged[bound] = merged.get(bound, 0) + n
            have[name] = sorted(merged.items())
        tx.put(key, json.dumps(have, separators=(",", ":")).encode())


def _cumulative(per_bucket: list) -> dict[float, float]:
    """Per-bucket counts as Prometheus' cumulative ones (le -> observations at most le)."""
    out, total = {}, 0.0
    for bound, n in sorted(map(tuple, per_bucket)):
        total += n
        out[bound] = total
    return out


def history_record(tx: Txn, samples: list[tuple[str, str, Totals]], steps_ns: dict[str, int]) -> int:
    """Add one sample of these (namespace, queue, totals) to every tier: a point for each
    tier whose step ended since its last one. The totals' histograms are the store's
    (`histograms_add`), read here. A queue with no rows yet starts from zero at the
    store's previous sample, by any gateway (so the jobs it ran before this one are in its
    first step), or, with none, at this sample. Returns the points written."""
    sampled = tx.get(keys.metrics_sampled())
    new_from_ns = keys.U64.unpack(sampled)[0] if sampled else 0
    written = 0
    for ns, queue, cur in samples:
        raw_hist = tx.get(keys.metrics_histograms(ns, queue))
        if raw_hist is not None:
            hist = json.loads(raw_hist)
            cur.wait, cur.run = _cumulative(hist["wait"]), _cumulative(hist["run"])
        for name, (tier, _step, kept) in TIERS.items():
            step = steps_ns[name]
            last_key = keys.metrics_last(ns, queue, tier)
            raw = tx.get(last_key)
            if raw is None:
                if not new_from_ns:
                    tx.put(last_key, cur.encode())
                    continue
                last = Totals(new_from_ns)
            else:
                last = Totals.decode(raw)
            if cur.at_ns // step <= last.at_ns // step:
                if raw is None:
                    tx.put(last_key, last.encode())
                continue
            tx.put(keys.metrics_point(ns, queue, tier, cur.at_ns), ROW.pack(*point(last, cur)))
            tx.put(last_key, cur.encode())
            written += 1
            start = keys.metrics_points(ns, queue, tier)
            cutoff = keys.metrics_point(ns, queue, tier, max(cur.at_ns - kept * step, 0) + 1)
            for old, _ in tx.scan(start, cutoff, limit=TRIM_PER_POINT):
                tx.delete(old)
    return written


def history_points(tx: Txn, ns: str, queue: str, tier_name: str) -> list[tuple[float, ...]]:
    """A queue's points of one tier, oldest first."""
    start = keys.metrics_points(ns, queue, TIERS[tier_name][0])
    return [ROW.unpack(v) for _, v in tx.scan(start, keys.prefix_end(start))]


def history_sampled(tx: Txn, present: set[tuple[str, str]], at_ns: int) -> int:
    """End a sample taken at `at_ns` of the `present` queues: remember when it was taken
    (where a queue first seen by the next one starts), and delete the history of the
    queues of registered namespaces that are not present (gone from the metrics), at most
    FORGET_PER_SAMPLE keys, the rest next time. Returns the keys deleted."""
    sampled = tx.get(keys.metrics_sampled())
    if sampled is None or keys.U64.unpack(sampled)[0] < at_ns:
        tx.put(keys.metrics_sampled(), keys.U64.pack(at_ns))
    deleted = 0
    registry = keys.namespace_registry()
    for ns_key, _ in tx.scan(registry, keys.prefix_end(registry), limit=NAMESPACES_MAX):
        ns = ns_key[len(registry) :].decode()
        start = keys.metrics_last_all(ns)
        gone: dict[str, list[bytes]] = {}
        for key, _ in tx.scan(start, keys.prefix_end(start)):
            queue = key[len(start) : -2].decode()  # <queue>/<tier u8>
            if (ns, queue) not in present:
                gone.setdefault(queue, []).append(key)
        hist_start = keys.metrics_histograms_all(ns)
        for key, _ in tx.scan(hist_start, keys.prefix_end(hist_start)):
            if (ns, key[len(hist_start) :].decode()) not in present:
                tx.delete(key)
                deleted += 1
        for queue, last_keys in gone.items():
            prefix = keys.metrics_points(ns, queue)
            rows = tx.scan(prefix, keys.prefix_end(prefix), limit=FORGET_PER_SAMPLE - deleted)
            for key, _ in rows:
                tx.delete(key)
            deleted += len(rows)
            if deleted >= FORGET_PER_SAMPLE:
                return deleted
            for key in last_keys:  # its points are gone: now it is
                tx.delete(key)
            deleted += len(last_keys)
    return deleted
