"""`CoreEffects`: the queue core's effect sink (loam_common.effects), the one place
where what a committed transition declared happens: parked leases and result
long-polls woken (`Waiters`), Watch streams told (`EventHub`), lease latency and run
time observed (`loam_common.metrics`), and, with tracing on, one span per leased and
per completed job. The sweeper's cross-process wake arrives here too
(`/internal/v1/wake` -> `wake_queue`)."""

from __future__ import annotations

from loam_common import tracing
from loam_common.effects import ALL, Changed, Effect, Finished, Leased, ResultChanged, ready_counts
from loam_common.metrics import PROCESS as METRICS
from loam_queue_core.waiters import Waiters
from loam_queue_core.watch import EventHub

# Result-key long-polls park in the queue waiters under this prefix: queue names cannot
# contain `/`, so the two never meet.
RESULT_WAIT_PREFIX = "results/"


class CoreEffects:
    def __init__(self, waiters: Waiters, hub: EventHub) -> None:
        self.waiters = waiters
        self.hub = hub

    def run(self, effects: list[Effect]) -> None:
        for (ns, queue), n in ready_counts(effects).items():
            if n:
                self.waiters.wake(ns, queue, n)
        runs: dict[tuple[str, str, str], list[int]] = {}  # observed once per (ns, queue, task)
        for e in effects:
            kind = type(e)
            if kind is Changed:
                if self.hub.streams:
                    self.hub.notify(e.ns, e.queue)
            elif kind is ResultChanged:
                self.waiters.wake(e.ns, RESULT_WAIT_PREFIX + e.key, ALL)
            elif kind is Leased:
                _leased(e)
            elif kind is Finished:
                runs.setdefault((e.ns, e.queue, e.task), []).append(e.run_ns)
                if tracing.tracer is not None:
                    _trace_finished(e)
        for (ns, queue, task), run_ns in runs.items():
            METRICS.observe_run(ns, queue, task, *run_ns)

    def wake_queue(self, ns: str, queue: str) -> None:
        """Every parked lease and Watch stream of the queue looks again: another process
        (the sweeper) committed jobs there that may be leasable."""
        self.waiters.wake(ns, queue, ALL)
        self.hub.notify(ns, queue)


def _leased(e: Leased) -> None:
    waited_by_queue: dict[str, list[int]] = {}
    for job, waited in zip(e.jobs, e.waited_ns, strict=False):
        waited_by_queue.setdefault(job.queue, []).append(waited)
    for queue, waited in waited_by_queue.items():
        METRICS.observe_lease(e.ns, queue, *waited)
    if tracing.tracer is None:
        return
    for job in e.jobs:
        span = tracing.start_span(
            f"lease {job.queue}", "consumer", job.task.headers.get("traceparent"),
            {"messaging.system": "loam", "messaging.destination.name": job.queue,
             "messaging.message.id": job.id, "loam.ns": e.ns, "loam.worker": e.worker,
             "loam.attempt": job.attempt + 1, "loam.epoch": job.epoch},
            e.at_ns,
        )  # fmt: skip
        span.end()


def _trace_finished(e: Finished) -> None:
    span = tracing.start_span(
        f"complete {e.queue}", "consumer", e.traceparent,
        {"messaging.system": "loam", "messaging.destination.name": e.queue, "messaging.message.id": e.job,
         "loam.ns": e.ns, "loam.outcome": e.outcome, "loam.state": e.state},
        e.at_ns,
    )  # fmt: skip
    span.end()
