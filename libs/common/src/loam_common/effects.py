"""The effects of a transition: what a process does once a transaction has committed.

A transition never wakes anyone itself: it declares what its commit makes possible on
its transaction (`tx.declare(Ready(ns, queue))`), and the store runner, once the
transaction has committed, hands the declared effects to the sinks of its store
(`Store.add_sink`), on the caller's event loop, before the caller gets its answer.
A savepoint rolled back drops the effects declared inside it, so a refused transition
declares nothing.

The sinks are per store, not per process: the queue core's (`loam_queue_core.effects`)
wakes its parked leases and result long-polls, tells its Watch streams, and records
lease and run metrics and spans; the sweeper's, in a process of its own, forwards
`Ready` to the queue core that owns the queue over HTTP. A store with no sink drops
them (a gateway's, a relay's).

| effect          | declared by                                        | what a sink does            |
|-----------------|----------------------------------------------------|-----------------------------|
| `Ready`         | `QueueTx.insert`/`move` (a job leasable now or when | wake up to `n` parked polls |
|                 | due), admin ops that free capacity (`n = ALL`)      | of the queue                |
| `Handed`        | an enqueue that leased its jobs for a sleeping poll | no wake for those jobs      |
| `Changed`       | any transition that wrote a queue's events          | wake its Watch streams      |
| `ResultChanged` | a write to a result key                             | wake the key's long-polls   |
| `Leased`        | `job_lease`                                         | lease latency, lease spans  |
| `Finished`      | a completion                                        | run time, complete spans    |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

#: `Ready.n` for "every parked poll of the queue": capacity freed for any number of jobs.
ALL = -1


@dataclass(frozen=True, slots=True)
class Ready:
    """Up to `n` jobs of the queue can be leased now or once due (`ALL`: any number).
    `jobs` names new jobs this is for, so an enqueue that hands them to a poll in the
    same transaction can take their wake-ups back (`Handed`)."""

    ns: str
    queue: str
    n: int = 1
    jobs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Handed:
    """These jobs went to a sleeping poll in the transaction that made them: their
    `Ready` wakes nobody else."""

    jobs: frozenset[str]


@dataclass(frozen=True, slots=True)
class Changed:
    """The queue's event log grew."""

    ns: str
    queue: str


@dataclass(frozen=True, slots=True)
class ResultChanged:
    ns: str
    key: str


@dataclass(frozen=True, slots=True)
class Leased:
    """Jobs leased to `worker`, with how long each waited since it became leasable."""

    ns: str
    worker: str
    jobs: tuple
    waited_ns: tuple[int, ...]
    at_ns: int


@dataclass(slots=True)  # not frozen: one a completed job (jobs/new_job.py says why)
class Finished:
    """A leased job's outcome was recorded: `outcome` is its kind (ok, retry, ...)."""

    ns: str
    queue: str
    job: str
    outcome: str
    state: int
    task: str
    run_ns: int
    traceparent: str
    at_ns: int


Effect = Ready | Handed | Changed | ResultChanged | Leased | Finished


class EffectSink(Protocol):
    def run(self, effects: list[Effect]) -> None:
        """The effects of one committed transition, in the order they were declared.
        Runs on the caller's event loop; must not block and should not raise (the
        commit has happened: a failure here is logged, never the caller's error)."""
        ...


def ready_counts(effects: list[Effect]) -> dict[tuple[str, str], int]:
    """The wake-ups a batch of effects asks for, per (ns, queue): the sum of `Ready.n`
    (`ALL` if any asks for all), less the jobs handed to a poll in the same transaction."""
    handed: frozenset[str] = frozenset()
    for e in effects:
        if type(e) is Handed:
            handed = handed | e.jobs
    out: dict[tuple[str, str], int] = {}
    for e in effects:
        if type(e) is not Ready:
            continue
        n = e.n
        if handed and e.jobs:
            n -= sum(1 for j in e.jobs if j in handed)
        key = (e.ns, e.queue)
        have = out.get(key, 0)
        out[key] = ALL if (n == ALL or have == ALL) else have + n
    return out
