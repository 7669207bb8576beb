"""Quotas per namespace: what one tenant may hold or do, checked inside the transaction
of the write they limit, before it writes anything (so a refusal stores nothing and two
concurrent calls cannot both squeeze under a limit).

| quota            | limits                                              | checked in              |
|------------------|-----------------------------------------------------|-------------------------|
| `enqueue_rate`   | jobs enqueued per second (a one-second window)      | every job-creating call |
| `stored_jobs`    | jobs stored in the namespace, every state           | every job-creating call |
| `payload_bytes`  | payload bytes of the jobs stored in the namespace   | every job-creating call |
| `active_leases`  | jobs leased at once across the namespace            | lease                   |
| `schedules`      | schedules defined                                   | schedule upsert (new id)|

The job-creating calls: enqueue, bulk enqueue, write batches, flows (a new flow id; its
jobs count as one call), exchange publishes (every routed copy, as one call) and schedule
ticks (the sweeper's, and an upsert's `immediately`). 0 means no limit. Exceeding one
raises `QuotaExceeded` (resource_exhausted) naming it, and the whole call stores nothing;
a schedule tick over a quota is skipped instead, its reason in the schedule's
`last_error`, and the schedule fires its next tick as usual (a tick is nobody's call to
refuse, and a schedule must not stop for good because its namespace was full once).

Not checked, but counted: a dead-letter copy (the failed job's record moving to its
dead-letter queue; refusing it would lose the failure it records), its redrive back, a
retry or repeat of a job already stored, and a BullMQ job scheduler's iterations (their
worker advancing the chain; refusing that would stop the schedule for good). Each counts
toward `stored_jobs` and `payload_bytes` like any job (the shard counters see it), so
the namespace's next checked call is refused until room is freed.

Counts come from the per-shard counters every transition keeps in ShardMeta (`counts`
per state, and `payload_bytes`, kept by `QueueTx.insert`, `replace_payload` and
`remove` in the transaction that stores or drops a payload): O(queues x shards) per
check, only in namespaces that have a quota. The rate window is one key per namespace
(`keys.quota_rate_window`).

Where a namespace's quotas come from: its own record (`keys.namespace_quotas`, written by
the admin API, `quotas_set`) when it has one, else the deployment's table (the
services' `--quotas` flag, `parse`); `in_force` reads which. The queue core's Quotas
facade keeps what it read for at most a second, so a change applies at once in the
process that made it and within a second everywhere else, with no read on the hot path.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field, fields

from loam_common import keys
from loam_common.errors import InvalidArgument, JobsError
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import exchanges, flows, schedules
from loam_common.jobs import states as S
from loam_common.jobs.enqueue import job_enqueue, job_enqueue_then_lease
from loam_common.jobs.lease import LeaseResult, job_lease
from loam_common.jobs.new_job import CallKey
from loam_common.jobs.write_batch import EnqueueWrite, write_batch_all_or_none
from loam_common.store.base import Txn

_WINDOW = struct.Struct(">QQ")  # (window start in whole seconds, jobs enqueued in it)


class QuotaExceeded(JobsError):
    code = "resource_exhausted"

    def __init__(self, ns: str, quota: str, limit: int, wanted: int) -> None:
        super().__init__(
            f"namespace {ns!r} is over its {quota} quota ({limit}): this call needs {wanted}; "
            "ask the operator to raise it (loam quotas set), or wait for room"
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

    def __bool__(self) -> bool:  # asked at every enqueue: no dataclasses.fields() call
        return any(vars(self).values())


NAMES = tuple(f.name for f in fields(Quota))
#: the largest limit a quota takes (a protobuf uint64 field, less the sign bit)
MAX_LIMIT = 2**63 - 1


def from_pb(q: pb.NamespaceQuotas) -> Quota:
    return Quota(**{n: getattr(q, n) for n in NAMES})


def to_pb(q: Quota) -> pb.NamespaceQuotas:
    return pb.NamespaceQuotas(**{n: getattr(q, n) for n in NAMES})


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


def in_force(tx: Txn, ns: str, deployment: Quota) -> tuple[Quota, str]:
    """The namespace's quotas now and where they come from: its own record
    ("namespace"), else the deployment's (`deployment`, "deployment")."""
    raw = tx.get(keys.namespace_quotas(ns))
    if raw is None:
        return deployment, "deployment"
    return from_pb(pb.NamespaceQuotas.FromString(raw)), "namespace"


@dataclass
class Usage:
    """What a namespace holds: jobs per state and their payload bytes."""

    jobs: dict[int, int] = field(default_factory=dict)
    payload_bytes: int = 0


def usage(tx: Txn, ns: str) -> Usage:
    """Jobs per state and payload bytes across the namespace's queues, from each
    shard's counters (a queue whose config is gone, obliterated, holds nothing)."""
    out = Usage()
    prefix = keys.queue_registry(ns)
    for k, _ in tx.scan(prefix, keys.prefix_end(prefix)):
        qk = keys.QueueKeys(ns, keys.queue_from_registry_key(ns, k))
        raw_cfg = tx.get(qk.config())
        if raw_cfg is None:
            continue
        shards = max(pb.QueueConfig.FromString(raw_cfg).shards, 1)
        for raw in tx.batch_get([qk.shard_meta(s) for s in range(shards)]).values():
            meta = pb.ShardMeta.FromString(raw)
            out.payload_bytes += max(meta.payload_bytes, 0)
            for st, n in meta.counts.items():
                out.jobs[st] = out.jobs.get(st, 0) + n
    return out


def _totals(tx: Txn, ns: str) -> dict[int, int]:
    """Jobs per state across the namespace's queues."""
    return usage(tx, ns).jobs


def check_enqueue(tx: Txn, ns: str, quota: Quota, jobs: int, payload_bytes: int) -> None:
    """Refuse `jobs` new jobs carrying `payload_bytes` over any of the namespace's quotas;
    count them into the rate window when they fit."""
    if quota.payload_bytes and payload_bytes > quota.payload_bytes:  # too big even for an empty namespace
        raise QuotaExceeded(ns, "payload_bytes", quota.payload_bytes, payload_bytes)
    if quota.stored_jobs or quota.payload_bytes:
        held = usage(tx, ns)
        stored = sum(held.jobs.values())
        if quota.stored_jobs and stored + jobs > quota.stored_jobs:
            raise QuotaExceeded(ns, "stored_jobs", quota.stored_jobs, stored + jobs)
        if quota.payload_bytes and held.payload_bytes + payload_bytes > quota.payload_bytes:
            raise QuotaExceeded(ns, "payload_bytes", quota.payload_bytes, held.payload_bytes + payload_bytes)
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


# Each takes the namespace's quota in force (the facade's Quotas.of) and is used only
# when the namespace has one; without, the facades run the plain transitions.
def job_enqueue_within_quota(
    tx: Txn, ns: str, queue: str, new_jobs, bulk: bool, quota: Quota, call: CallKey | None = None
):
    check_enqueue(tx, ns, quota, len(new_jobs), _payload_bytes(new_jobs))
    return job_enqueue(tx, ns, queue, new_jobs, bulk, call)


def write_batch_within_quota(tx: Txn, ns: str, writes: list, quota: Quota):
    """A write batch (write_batch.py) whose enqueues count as one enqueue call."""
    new_jobs = [w.job for w in writes if isinstance(w, EnqueueWrite)]
    if new_jobs:
        check_enqueue(tx, ns, quota, len(new_jobs), _payload_bytes(new_jobs))
    return write_batch_all_or_none(tx, ns, writes)


def job_enqueue_then_lease_within_quota(
    tx: Txn,
    ns: str,
    queue: str,
    new_jobs,
    bulk: bool,
    lease_args: tuple,
    quota: Quota,
    call: CallKey | None = None,
):
    check_enqueue(tx, ns, quota, len(new_jobs), _payload_bytes(new_jobs))
    worker, max_jobs, names, visibility_ns, subject_batch = lease_args
    try:
        room = lease_room(tx, ns, quota, max_jobs)
    except QuotaExceeded:  # the enqueue goes in; the parked poll just gets nothing
        return job_enqueue(tx, ns, queue, new_jobs, bulk, call), LeaseResult()
    return job_enqueue_then_lease(
        tx, ns, queue, new_jobs, bulk, (worker, room, names, visibility_ns, subject_batch), call
    )


def job_lease_within_quota(tx: Txn, ns: str, queues, worker: str, max_jobs: int, names, shard_offset: int,
                           visibility_ns: int, subject_batch: int, quota: Quota) -> LeaseResult:  # fmt: skip
    room = lease_room(tx, ns, quota, max_jobs)
    return job_lease(tx, ns, queues, worker, room, names, shard_offset, visibility_ns, subject_batch)


def schedule_upsert_within_quota(tx: Txn, ns: str, spec, quota: Quota):
    check_new_schedule(tx, ns, quota, spec.id)
    return schedules.schedule_upsert(tx, ns, spec, _admit(tx, ns, quota))


def flow_submit_within_quota(tx: Txn, ns: str, flow_id: str, rhash: bytes, spec, news, quota: Quota):
    """A new flow's jobs count as one enqueue call; a flow id seen before (a replay,
    which stores nothing) is not checked."""
    if tx.get(keys.flow(ns, flow_id)) is None:
        check_enqueue(tx, ns, quota, len(news), _payload_bytes(news))
    return flows.flow_submit(tx, ns, flow_id, rhash, spec, news)


def enqueue_routed_within_quota(tx: Txn, ns: str, items: list, quota: Quota):
    """An exchange publish: every routed copy counts, as one enqueue call."""
    news = [nj for _queue, nj in items]
    check_enqueue(tx, ns, quota, len(news), _payload_bytes(news))
    return exchanges.enqueue_routed(tx, ns, items)


def sweep_schedules_within_quota(tx: Txn, ns: str, deployment: Quota, limit: int = schedules.SWEEP_BATCH):
    """The sweeper's schedule ticks under the namespace's quotas in force (its own record,
    else `deployment`), read in this transaction: a tick over one is skipped and recorded
    in its schedule's `last_error` (schedules._fire)."""
    quota, _source = in_force(tx, ns, deployment)
    return schedules.sweep_schedules(tx, ns, limit, _admit(tx, ns, quota))


def _admit(tx: Txn, ns: str, quota: Quota) -> schedules.Admit | None:
    """A schedule tick's check (schedules.Admit): None when the namespace has no quota."""
    if not quota:
        return None

    def admit(jobs: int, payload_bytes: int) -> None:
        check_enqueue(tx, ns, quota, jobs, payload_bytes)

    return admit


# -- the admin API (GetQuotas / SetQuotas) ---------------------------------------------
@dataclass(frozen=True)
class QuotaView:
    quota: Quota
    source: str  # "namespace" | "deployment"
    usage: Quota  # what the namespace holds, in the quotas' own terms


def quotas_get(tx: Txn, ns: str, deployment: Quota) -> QuotaView:
    quota, source = in_force(tx, ns, deployment)
    held = usage(tx, ns)
    raw = tx.get(keys.quota_rate_window(ns))
    start, used = _WINDOW.unpack(raw) if raw else (0, 0)
    now_s = tx.now_ns() // 1_000_000_000
    prefix = keys.schedules_all(ns)
    have = len(tx.scan(prefix, keys.prefix_end(prefix), MAX_SCHEDULES_COUNTED))
    return QuotaView(quota, source, Quota(enqueue_rate=used if start == now_s else 0,
                                          stored_jobs=sum(held.jobs.values()), payload_bytes=held.payload_bytes,
                                          active_leases=held.jobs.get(S.ACTIVE, 0), schedules=have))  # fmt: skip


#: schedules counted for usage at most (the check itself stops at the limit)
MAX_SCHEDULES_COUNTED = 100_000


def quotas_set(tx: Txn, ns: str, quota: Quota | None, deployment: Quota) -> QuotaView:
    """Store the namespace's own quotas (whole: a 0 is no limit), or with None drop them
    (back to the deployment's). Takes effect on the next checked call anywhere; what is
    stored already stays, a lower limit only refuses what comes next."""
    if quota is None:
        tx.delete(keys.namespace_quotas(ns))
    else:
        for name in NAMES:
            if getattr(quota, name) > MAX_LIMIT:
                raise InvalidArgument(f"quotas.{name}", f"at most {MAX_LIMIT}")
        tx.put(keys.namespace_quotas(ns), to_pb(quota).SerializeToString())
    return quotas_get(tx, ns, deployment)
