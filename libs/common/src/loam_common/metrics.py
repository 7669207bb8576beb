"""Prometheus metrics (spec §6.11), in the text exposition format.

Two kinds, so that the numbers are right however many processes serve a deployment:

- **From the store** (`store_samples`, one snapshot): every counter and gauge.
  Counters are totals kept in each queue shard's `ShardMeta`, in the same transaction
  as the move they count (`QueueTx.insert` / `move`, the stalled sweep, completion),
  so the store is the one place that knows them and no process holds a share of them;
  gauges are `ShardMeta.counts`, the per-state counts every transition already keeps.
  No transition writes anything it did not write before: the totals are fields of the
  shard meta the move rewrites anyway. The one exception is `fenced`: a fenced write
  is refused and rolled back, so the queue core counts it afterwards in a transaction
  of its own (`count_fenced`) — only on that refusal path.
- **Per process** (`Histogram`, `PROCESS`): `loam_jobs_lease_latency_seconds` (how long
  a job had been ready when it was leased) and `loam_jobs_run_seconds` (lease to
  completion, by task). Each queue-core process observes the calls it runs and serves
  its own; Prometheus sums histograms across instances, so scrape every core. Each core
  also adds what it observed, every second or so, to per-queue histograms in the store
  (`ProcessMetrics.take`, loam_common.metrics_history), from which the metrics history
  takes its wait and run percentiles whichever processes ran the jobs.

| metric                                   | type      | labels             |
|------------------------------------------|-----------|--------------------|
| loam_jobs_enqueued_total                 | counter   | ns, queue          |
| loam_jobs_leased_total                   | counter   | ns, queue          |
| loam_jobs_completed_total                | counter   | ns, queue, outcome |
| loam_jobs_stalled_total                  | counter   | ns, queue          |
| loam_jobs_fenced_total                   | counter   | ns, queue          |
| loam_jobs_waiting                        | gauge     | ns, queue, band    |
| loam_jobs_delayed, loam_jobs_active      | gauge     | ns, queue          |
| loam_jobs_oldest_waiting_seconds         | gauge     | ns, queue          |
| loam_jobs_dlq_depth                      | gauge     | ns, queue (the DLQ)|
| loam_jobs_subject_waiting                | gauge     | ns, queue          |
| loam_jobs_subject_admitted_total         | counter   | ns, queue          |
| loam_jobs_subject_wait_seconds_total     | counter   | ns, queue          |
| loam_jobs_lease_takeovers_total          | counter   | ns, queue          |
| loam_jobs_lease_latency_seconds          | histogram | ns, queue          |
| loam_jobs_run_seconds                    | histogram | ns, queue, task    |

`band` is `fifo` (no priority) or `prioritized`; `outcome` is the Complete outcome
(`ok`, `retry`, `fail`, `release`, `delay`, `wait_children`, `rate_limited`). The oldest
waiting age is read from the head of each shard's ready bands (LIFO and priorities make
it an estimate). `loam_jobs_dlq_depth` is, for each queue named as another queue's
dead-letter queue, its jobs not yet taken (waiting, prioritized, delayed).

Subjects (decision 0036): `subject_waiting` is the ready jobs waiting behind their
subject's job (part of `loam_jobs_waiting`); a job that waited for its subject and then
got it counts once in `subject_admitted_total` and its wait in
`subject_wait_seconds_total` (their rates' ratio is the mean wait). A lease takeover is
a lease the stalled sweep took back from a worker that stopped renewing it, so
`loam_jobs_lease_takeovers_total` equals `loam_jobs_stalled_total` under the task-runner
RFC's name. `queue_activity` gives the same figures for one queue (REST, the console).
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from loam_common import keys
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S
from loam_common.store.base import Txn

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OUTCOMES = ("ok", "retry", "fail", "release", "delay", "wait_children", "rate_limited")
MAX_TASK_LABELS = 1000  # distinct task names per process; more are reported as "other"

HELP = {
    "loam_jobs_enqueued_total": (
        "counter",
        "Jobs created in the queue (enqueue, flows, schedules, dead-letter copies).",
    ),
    "loam_jobs_leased_total": ("counter", "Jobs leased (moves to active)."),
    "loam_jobs_completed_total": ("counter", "Completions recorded, by outcome."),
    "loam_jobs_stalled_total": ("counter", "Leases reclaimed by the stalled sweep."),
    "loam_jobs_fenced_total": ("counter", "Writes refused because the lease epoch was stale."),
    "loam_jobs_waiting": ("gauge", "Jobs ready to lease, by band (fifo, prioritized)."),
    "loam_jobs_delayed": ("gauge", "Jobs waiting for their due time."),
    "loam_jobs_active": ("gauge", "Jobs leased to a worker."),
    "loam_jobs_oldest_waiting_seconds": (
        "gauge",
        "How long the oldest ready job has waited (head of the ready index).",
    ),
    "loam_jobs_dlq_depth": ("gauge", "Jobs not yet taken in a dead-letter queue."),
    "loam_jobs_subject_waiting": ("gauge", "Ready jobs waiting behind their subject's job."),
    "loam_jobs_subject_admitted_total": ("counter", "Jobs that waited for their subject, then got it."),
    "loam_jobs_subject_wait_seconds_total": ("counter", "How long those jobs waited for their subject."),
    "loam_jobs_lease_takeovers_total": (
        "counter",
        "Leases taken back from a worker that stopped renewing them (the stalled sweep).",
    ),
    "loam_jobs_lease_latency_seconds": (
        "histogram",
        "How long a job had been ready when it was leased (this process).",
    ),
    "loam_jobs_run_seconds": ("histogram", "Lease to completion, by task (this process)."),
}


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


# -- from the store ----------------------------------------------------------------------------
def count_fenced(tx: Txn, ns: str, queue: str, job_id: str) -> None:
    """Count one refused write (loam_jobs_fenced_total) in the job's shard meta."""
    k = keys.QueueKeys(ns, queue)
    if tx.get(k.config()) is None:
        return
    raw = tx.get(k.job(job_id))
    shard = pb.Job.FromString(raw).shard if raw else 0
    mkey = k.shard_meta(shard)
    mraw = tx.get(mkey)
    meta = pb.ShardMeta.FromString(mraw) if mraw else pb.ShardMeta()
    meta.fenced_total += 1
    tx.put(mkey, meta.SerializeToString())


def _namespaces(tx: Txn) -> list[str]:
    prefix = keys.namespace_registry()
    return [k[len(prefix) :].decode() for k, _ in tx.scan(prefix, keys.prefix_end(prefix))]


def _queues(tx: Txn, ns: str) -> list[str]:
    prefix = keys.queue_registry(ns)
    return [keys.queue_from_registry_key(ns, k) for k, _ in tx.scan(prefix, keys.prefix_end(prefix))]


def _oldest_ready_ns(tx: Txn, k: keys.QueueKeys, shard: int) -> int:
    oldest = 0
    for band in (keys.FIFO_BAND, keys.PRIORITY_BAND):
        prefix = k.ready_band(shard, band)
        head = tx.scan(prefix, keys.prefix_end(prefix), limit=1)
        if head:
            raw = tx.get(k.job(head[0][1].decode()))
            if raw:
                t = pb.Job.FromString(raw).state_ns
                oldest = t if not oldest else min(oldest, t)
    return oldest


def queue_activity(tx: Txn, ns: str, queue: str) -> pb.QueueActivity:
    """One queue's ready and delayed counts, oldest ready age, subject waits and lease
    takeovers, from its shard metas and the head of each shard's ready index."""
    k = keys.QueueKeys(ns, queue)
    prefix = k.shard_metas()
    out = pb.QueueActivity()
    oldest = 0
    for key, value in tx.scan(prefix, keys.prefix_end(prefix)):
        m = pb.ShardMeta.FromString(value)
        ready = m.counts.get(S.WAITING, 0) + m.counts.get(S.PRIORITIZED, 0)
        out.ready += ready
        out.delayed += m.counts.get(S.DELAYED, 0)
        out.subject_waiting += m.subject_waiting
        out.subject_admitted_total += m.subject_admitted_total
        out.subject_wait_ns_total += m.subject_wait_ns_total
        out.lease_takeovers_total += m.stalled_total
        if ready:
            t = _oldest_ready_ns(tx, k, key[len(prefix)])
            oldest = t if not oldest or (t and t < oldest) else oldest
    out.oldest_ready_age_ns = max(tx.now_ns() - oldest, 0) if oldest else 0
    return out


def store_samples(tx: Txn, namespaces: Iterable[str] | None = None) -> list[Sample]:
    """Every store-derived sample, for all namespaces (or these), in one snapshot."""
    out: list[Sample] = []
    now = tx.now_ns()
    for ns in sorted(_namespaces(tx) if namespaces is None else namespaces):
        dlqs: set[str] = set()
        depth: dict[str, int] = {}
        for queue in _queues(tx, ns):
            k = keys.QueueKeys(ns, queue)
            raw = tx.get(k.config())
            if raw is None:
                continue
            cfg = pb.QueueConfig.FromString(raw)
            if cfg.dead_letter_queue:
                dlqs.add(cfg.dead_letter_queue)
            prefix = k.shard_metas()
            tot = pb.ShardMeta()
            counts: dict[int, int] = {}
            completed: dict[str, int] = {}
            oldest = 0
            for key, value in tx.scan(prefix, keys.prefix_end(prefix)):
                m = pb.ShardMeta.FromString(value)
                for f in ("enqueued_total", "leased_total", "stalled_total", "fenced_total"):
                    setattr(tot, f, getattr(tot, f) + getattr(m, f))
                for st, n in m.counts.items():
                    counts[st] = counts.get(st, 0) + n
                for o, n in m.completed_total.items():
                    completed[o] = completed.get(o, 0) + n
                if m.counts.get(S.WAITING, 0) or m.counts.get(S.PRIORITIZED, 0):
                    t = _oldest_ready_ns(tx, k, key[len(prefix)])
                    oldest = t if not oldest or (t and t < oldest) else oldest
            lab = (("ns", ns), ("queue", queue))
            out += [
                Sample("loam_jobs_enqueued_total", lab, tot.enqueued_total),
                Sample("loam_jobs_leased_total", lab, tot.leased_total),
                Sample("loam_jobs_stalled_total", lab, tot.stalled_total),
                Sample("loam_jobs_fenced_total", lab, tot.fenced_total),
            ]
            for o in sorted(set(OUTCOMES) | set(completed)):
                out.append(Sample("loam_jobs_completed_total", (*lab, ("outcome", o)), completed.get(o, 0)))
            out += [
                Sample("loam_jobs_waiting", (*lab, ("band", "fifo")), counts.get(S.WAITING, 0)),
                Sample("loam_jobs_waiting", (*lab, ("band", "prioritized")), counts.get(S.PRIORITIZED, 0)),
                Sample("loam_jobs_delayed", lab, counts.get(S.DELAYED, 0)),
                Sample("loam_jobs_active", lab, counts.get(S.ACTIVE, 0)),
                Sample(
                    "loam_jobs_oldest_waiting_seconds", lab, max(now - oldest, 0) / 1e9 if oldest else 0.0
                ),
            ]
            subjects = pb.ShardMeta()
            for _key, value in tx.scan(prefix, keys.prefix_end(prefix)):
                m = pb.ShardMeta.FromString(value)
                subjects.subject_waiting += m.subject_waiting
                subjects.subject_admitted_total += m.subject_admitted_total
                subjects.subject_wait_ns_total += m.subject_wait_ns_total
            out += [
                Sample("loam_jobs_subject_waiting", lab, subjects.subject_waiting),
                Sample("loam_jobs_subject_admitted_total", lab, subjects.subject_admitted_total),
                Sample("loam_jobs_subject_wait_seconds_total", lab, subjects.subject_wait_ns_total / 1e9),
                Sample("loam_jobs_lease_takeovers_total", lab, tot.stalled_total),
            ]
            depth[queue] = counts.get(S.WAITING, 0) + counts.get(S.PRIORITIZED, 0) + counts.get(S.DELAYED, 0)
        for dlq in sorted(dlqs):
            out.append(Sample("loam_jobs_dlq_depth", (("ns", ns), ("queue", dlq)), depth.get(dlq, 0)))
    return out


# -- per process -----------------------------------------------------------------------------------
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
RUN_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


class Histogram:
    """A Prometheus histogram per label set, in this process's memory."""

    def __init__(self, name: str, buckets: tuple[float, ...], label_names: tuple[str, ...]) -> None:
        self.name = name
        self.buckets = tuple(sorted(buckets))
        self.label_names = label_names
        self._series: dict[tuple[str, ...], list] = {}  # labels -> [bucket counts..., sum, count]
        self._taken: dict[tuple[str, ...], list[int]] = {}  # labels -> per-bucket counts at the last take
        self._lock = threading.Lock()

    def observe(self, value: float, *labels: str) -> None:
        self.observe_many((value,), *labels)

    def observe_many(self, values: Iterable[float], *labels: str) -> None:
        """Several observations of one label set under one lock (a batch's jobs)."""
        buckets, n_buckets, where = self.buckets, len(self.buckets), bisect.bisect_left
        with self._lock:
            s = self._series.get(labels)
            if s is None:
                s = self._series[labels] = [0] * (n_buckets + 2)
            for value in values:
                i = where(buckets, value)
                if i < n_buckets:
                    s[i] += 1
                s[-2] += value
                s[-1] += 1

    def series(self) -> int:
        return len(self._series)

    def take(self) -> dict[tuple[str, ...], list[int]]:
        """Per label set, the observations made since the last take, per bucket (not
        cumulative; one more after the buckets for those past the largest bound): what a
        queue core adds to the store's histograms (loam_common.metrics_history)."""
        n = len(self.buckets)
        out: dict[tuple[str, ...], list[int]] = {}
        with self._lock:
            for labels, s in self._series.items():
                now = [*s[:n], s[-1] - sum(s[:n])]
                before = self._taken.get(labels)
                delta = now if before is None else [a - b for a, b in zip(now, before, strict=True)]
                if any(delta):
                    out[labels] = delta
                    self._taken[labels] = now
        return out

    def give_back(self, taken: dict[tuple[str, ...], list[int]]) -> None:
        """Undo a take whose observations did not reach the store: the next take has them."""
        with self._lock:
            for labels, delta in taken.items():
                self._taken[labels] = [b - d for b, d in zip(self._taken[labels], delta, strict=True)]

    def samples(self) -> list[Sample]:
        out = []
        with self._lock:
            items = sorted(self._series.items())
        for labels, s in items:
            lab = tuple(zip(self.label_names, labels, strict=True))
            cum = 0
            for le, n in zip(self.buckets, s, strict=False):
                cum += n
                out.append(Sample(self.name + "_bucket", (*lab, ("le", _num(le))), cum))
            out.append(Sample(self.name + "_bucket", (*lab, ("le", "+Inf")), s[-1]))
            out.append(Sample(self.name + "_sum", lab, s[-2]))
            out.append(Sample(self.name + "_count", lab, s[-1]))
        return out


@dataclass(frozen=True, slots=True)
class Taken:
    """The observations `ProcessMetrics.take` took: per series, per bucket."""

    lease: dict[tuple[str, ...], list[int]]
    run: dict[tuple[str, ...], list[int]]

    def only(self, queues: set[tuple[str, str]]) -> Taken:
        """The observations of these (namespace, queue)s only."""
        return Taken(
            {labels: c for labels, c in self.lease.items() if labels[:2] in queues},
            {labels: c for labels, c in self.run.items() if labels[:2] in queues},
        )

    def by_queue(self) -> dict[tuple[str, str], tuple[dict[float, int], dict[float, int]]]:
        """Per (namespace, queue): the wait and run observations, per bucket bound (the
        last bound +Inf), the run times of every task summed."""
        out: dict[tuple[str, str], tuple[dict[float, int], dict[float, int]]] = {}
        for series, bounds, which in ((self.lease, LATENCY_BUCKETS, 0), (self.run, RUN_BUCKETS, 1)):
            for labels, counts in series.items():
                into = out.setdefault((labels[0], labels[1]), ({}, {}))[which]
                for bound, n in zip((*bounds, math.inf), counts, strict=True):
                    if n:
                        into[bound] = into.get(bound, 0) + n
        return out


class ProcessMetrics:
    def __init__(self) -> None:
        self.lease_latency = Histogram("loam_jobs_lease_latency_seconds", LATENCY_BUCKETS, ("ns", "queue"))
        self.run_seconds = Histogram("loam_jobs_run_seconds", RUN_BUCKETS, ("ns", "queue", "task"))
        self._tasks: set[str] = set()

    def observe_lease(self, ns: str, queue: str, *waited_ns: int) -> None:
        self.lease_latency.observe_many((max(w, 0) / 1e9 for w in waited_ns), ns, queue)

    def observe_run(self, ns: str, queue: str, task: str, *run_ns: int) -> None:
        if task not in self._tasks:
            if len(self._tasks) >= MAX_TASK_LABELS:
                task = "other"
            else:
                self._tasks.add(task)
        self.run_seconds.observe_many((max(r, 0) / 1e9 for r in run_ns), ns, queue, task)

    def samples(self) -> list[Sample]:
        return self.lease_latency.samples() + self.run_seconds.samples()

    def take(self) -> Taken:
        """The wait and run observations since the last take (the queue core's histogram
        flush writes them to the store; `give_back` if it could not)."""
        return Taken(self.lease_latency.take(), self.run_seconds.take())

    def give_back(self, taken: Taken) -> None:
        self.lease_latency.give_back(taken.lease)
        self.run_seconds.give_back(taken.run)


#: this process's histograms (the queue core observes into them)
PROCESS = ProcessMetrics()


# -- the text format ------------------------------------------------------------------------------
def _num(v: float) -> str:
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 2**53):
        return str(int(v))
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _family(name: str) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and name[: -len(suffix)] in HELP:
            return name[: -len(suffix)]
    return name


def render(samples: Iterable[Sample]) -> str:
    """The Prometheus text format (0.0.4): HELP and TYPE once per family, families in
    the order of HELP, then the samples."""
    by_family: dict[str, list[Sample]] = {}
    for s in samples:
        by_family.setdefault(_family(s.name), []).append(s)
    lines: list[str] = []
    for fam in [f for f in HELP if f in by_family] + [f for f in by_family if f not in HELP]:
        typ, help_ = HELP.get(fam, ("untyped", ""))
        lines.append(f"# HELP {fam} {help_}")
        lines.append(f"# TYPE {fam} {typ}")
        for s in by_family[fam]:
            lab = ",".join(f'{k}="{_escape(v)}"' for k, v in s.labels)
            lines.append(f"{s.name}{{{lab}}} {_num(s.value)}" if lab else f"{s.name} {_num(s.value)}")
    return "\n".join(lines) + "\n"


def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples of a text exposition (for tests and `loam` tools): {(name, labels): value}."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, rest = head.partition("{")
        labels: list[tuple[str, str]] = []
        rest = rest[:-1] if rest.endswith("}") else rest
        i = 0
        while i < len(rest):
            eq = rest.index("=", i)
            key = rest[i:eq].lstrip(",")
            j, val = eq + 2, []
            while rest[j] != '"':
                if rest[j] == "\\":
                    j += 1
                    val.append({"n": "\n"}.get(rest[j], rest[j]))
                else:
                    val.append(rest[j])
                j += 1
            labels.append((key, "".join(val)))
            i = j + 1
        out[(name, tuple(labels))] = float(value)
    return out


async def render_store(store, namespaces: Iterable[str] | None = None, *, process: bool = True) -> str:
    """The whole exposition for a process with a store: store samples (+ its histograms)."""
    only = list(namespaces) if namespaces is not None else None
    samples = await store.snapshot(store_samples, only)
    if process:
        own = PROCESS.samples()
        if only is not None:  # a caller sees the series of its own namespaces, no others
            allowed = set(only)
            own = [s for s in own if dict(s.labels).get("ns") in allowed]
        samples += own
    return render(samples)
