"""Quotas per namespace: what one tenant may hold or do, checked inside the transaction
of the write they limit, before it writes anything (so a refusal stores nothing and two
concurrent calls cannot both squeeze under a limit).

| quota            | limits                                              | checked in              |
|------------------|-----------------------------------------------------|-------------------------|
| `enqueue_rate`   | jobs enqueued per second (a one-second window)      | enqueue, bulk, writes   |
| `stored_jobs`    | jobs stored in the namespace, every state           | enqueue, bulk, writes   |
| `payload_bytes`  | payload bytes of one enqueue call (all its jobs)    | enqueue, bulk, writes   |
| `active_leases`  | jobs leased at once across the namespace            | lease                   |
| `schedules`      | schedules defined                                   | schedule upsert (new id)|

0 means no limit. Exceeding one raises `QuotaExceeded` (resource_exhausted) naming it.
Counts come from the per-queue counters every transition keeps (O(queues x shards) per
check, only in namespaces that have a quota); the rate window is one key per namespace
(`keys.quota_rate_window`). Configured by the services' `--quotas` flag (`parse`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field, fields

from loam_common import keys
from loam_common.errors import InvalidArgument, JobsError
from loam_common.jobs import admin, schedules
from loam_common.jobs import states as S
from loam_common.jobs.enqueue import job_enqueue, job_enqueue_then_lease
from loam_common.jobs.lease import LeaseResult, job_lease
from loam_common.jobs.write_batch import EnqueueWrite, write_batch_all_or_none
from loam_common.store.base import Txn

_WINDOW = struct.Struct(">QQ")  # (window start in whole seconds, jobs enqueued in it)


class QuotaExceeded(JobsError):
    code = "resource_exhausted"

    def __init__(self, ns: str, quota: str, limit: int, wanted: int) -> None:
        super().__init__(
            f"namespace {ns!r} is over its {quota} quota ({limit}): this call needs {wanted}; "
            "ask the operator to raise it (--quotas), or wait for room"
        )
        self.ns, self.quota, self.limit, self.wanted = ns, quota, limit, wanted
        self.args = (ns, quota, limit, wanted)


@dataclass(frozen=True)
class Quota:
    enqueue_rate: int = 0
    stored_jobs: int = 0
    payload_bytes: int = 0
    active_leases: int = 0
    schedules: int = 0

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))


NAMES = tuple(f.name for f in fields(Quota))


@dataclass(frozen=True)
class QuotaTable:
    """Every namespace's quota: its own entry, else `default`."""

    default: Quota = Quota()
    by_namespace: dict[str, Quota] = field(default_factory=dict)

    def of(self, ns: str) -> Quota:
        return self.by_namespace.get(ns, self.default)


def parse(text: str | None) -> QuotaTable:
    """`*:stored_jobs=100000;alpha:stored_jobs=10,enqueue_rate=5` (namespace `*`: every
    namespace without an entry of its own)."""
    default, table = Quota(), {}
    for entry in (text or "").split(";"):
        if not entry.strip():
            continue
        ns, sep, body = entry.partition(":")
        if not sep:
            raise InvalidArgument("quotas", f"{entry!r}: use NAMESPACE:quota=N,quota=N")
        values = {}
        for item in body.split(","):
            name, eq, number = item.strip().partition("=")
            if name not in NAMES or not eq or not number.strip().isdigit():
                raise InvalidArgument(
                    "quotas", f"{item.strip()!r}: use one of {', '.join(NAMES)} = a whole number"
                )
            values[name] = int(number)
        quota = Quota(**values)
        if ns.strip() == "*":
            default = quota
        else:
            table[ns.strip()] = quota
    return QuotaTable(default, table)


def _totals(tx: Txn, ns: str) -> dict[int, int]:
    """Jobs per state across the namespace's queues."""
    out: dict[int, int] = {}
    prefix = keys.queue_registry(ns)
    for k, _ in tx.scan(prefix, keys.prefix_end(prefix)):
        counts = admin.queue_counts(tx, ns, keys.queue_from_registry_key(ns, k))
        for st, n in admin.counts_by_state_name(counts).items():
            out[S.BY_NAME[st]] = out.get(S.BY_NAME[st], 0) + n
    return out


def check_enqueue(tx: Txn, ns: str, quota: Quota, jobs: int, payload_bytes: int) -> None:
    """Refuse `jobs` new jobs carrying `payload_bytes` over any of the namespace's quotas;
    count them into the rate window when they fit."""
    if quota.payload_bytes and payload_bytes > quota.payload_bytes:
        raise QuotaExceeded(ns, "payload_bytes", quota.payload_bytes, payload_bytes)
    if quota.stored_jobs:
        stored = sum(_totals(tx, ns).values())
        if stored + jobs > quota.stored_jobs:
            raise QuotaExceeded(ns, "stored_jobs", quota.stored_jobs, stored + jobs)
    if quota.enqueue_rate:
        key = keys.quota_rate_window(ns)
        now_s = tx.now_ns() // 1_000_000_000
        raw = tx.get(key)
        start, used = _WINDOW.unpack(raw) if raw else (now_s, 0)
        if start != now_s:
            start, used = now_s, 0
        if used + jobs > quota.enqueue_rate:
            raise QuotaExceeded(ns, "enqueue_rate", quota.enqueue_rate, used + jobs)
        tx.put(key, _WINDOW.pack(start, used + jobs))


def lease_room(tx: Txn, ns: str, quota: Quota, wanted: int) -> int:
    """How many of `wanted` jobs a lease may take under `active_leases`; QuotaExceeded
    when the namespace holds its whole allowance already."""
    if not quota.active_leases:
        return wanted
    active = _totals(tx, ns).get(S.ACTIVE, 0)
    room = quota.active_leases - active
    if room <= 0:
        raise QuotaExceeded(ns, "active_leases", quota.active_leases, active + 1)
    return min(wanted, room)


def check_new_schedule(tx: Txn, ns: str, quota: Quota, schedule_id: str) -> None:
    """Refuse a schedule id the namespace does not have yet when it has its allowance."""
    if not quota.schedules or tx.get(keys.schedule(ns, schedule_id)) is not None:
        return
    prefix = keys.schedules_all(ns)
    have = len(tx.scan(prefix, keys.prefix_end(prefix), quota.schedules))
    if have >= quota.schedules:
        raise QuotaExceeded(ns, "schedules", quota.schedules, have + 1)


# -- the transitions, within a quota ------------------------------------------------------
def _payload_bytes(new_jobs) -> int:
    return sum(nj.task.payload.size or len(nj.task.payload.data) for nj in new_jobs)


def job_enqueue_within_quota(tx: Txn, ns: str, queue: str, new_jobs, bulk: bool, quota: Quota):
    check_enqueue(tx, ns, quota, len(new_jobs), _payload_bytes(new_jobs))
    return job_enqueue(tx, ns, queue, new_jobs, bulk)


def write_batch_within_quota(tx: Txn, ns: str, writes: list, quota: Quota):
    """A write batch (write_batch.py) whose enqueues count as one enqueue call."""
    new_jobs = [w.job for w in writes if isinstance(w, EnqueueWrite)]
    if new_jobs:
        check_enqueue(tx, ns, quota, len(new_jobs), _payload_bytes(new_jobs))
    return write_batch_all_or_none(tx, ns, writes)


def job_enqueue_then_lease_within_quota(
    tx: Txn, ns: str, queue: str, new_jobs, bulk: bool, lease_args: tuple, quota: Quota
):
    check_enqueue(tx, ns, quota, len(new_jobs), _payload_bytes(new_jobs))
    worker, max_jobs, names, visibility_ns, subject_batch = lease_args
    try:
        room = lease_room(tx, ns, quota, max_jobs)
    except QuotaExceeded:  # the enqueue goes in; the parked poll just gets nothing
        return job_enqueue(tx, ns, queue, new_jobs, bulk), LeaseResult()
    return job_enqueue_then_lease(
        tx, ns, queue, new_jobs, bulk, (worker, room, names, visibility_ns, subject_batch)
    )


def job_lease_within_quota(tx: Txn, ns: str, queues, worker: str, max_jobs: int, names, shard_offset: int,
                           visibility_ns: int, subject_batch: int, quota: Quota) -> LeaseResult:  # fmt: skip
    room = lease_room(tx, ns, quota, max_jobs)
    return job_lease(tx, ns, queues, worker, room, names, shard_offset, visibility_ns, subject_batch)


def schedule_upsert_within_quota(tx: Txn, ns: str, spec, quota: Quota):
    check_new_schedule(tx, ns, quota, spec.id)
    return schedules.schedule_upsert(tx, ns, spec)
