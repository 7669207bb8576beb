"""Fixtures for the queue-core tests: every test that takes `core` or `store` runs once
per backend (memory and LMDB), on a ManualClock the test moves by hand.

- `clock`, `store`, `blobs`, `core`, `configure`: from tests/conftest.py.
- `sweep`: one `Sweeper.run_once()` pass over every queue.
- `jobs_of` / `job_of` / `events_of`: read job records and outbox rows in one snapshot.
- `count_transactions`: `txs = count_transactions()` lists, from then on, the transitions
  `core.store.transact` runs.
- `check_invariants`: the per-shard counts (ShardMeta) equal the job records per state,
  and every job has exactly the index entry its state calls for. Call it at the end of
  a test; it returns the per-state counts.
"""

from __future__ import annotations

from collections import Counter

import pytest

from loam_common import keys
from loam_common.gen.loam.jobs.v1 import events_pb2
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S
from loam_common.sweeper import Sweeper

NS = "acme"
BACKENDS = ["memory", "lmdb"]


@pytest.fixture
def sweep(store, blobs):
    sweeper = Sweeper(store, blobs)

    async def _sweep():
        return await sweeper.run_once()

    return _sweep


@pytest.fixture
def count_transactions(core, monkeypatch):
    def start() -> list[str]:
        names: list[str] = []
        transact = core.store.transact

        async def counted(fn, *args, **kw):
            names.append(fn.__name__)
            return await transact(fn, *args, **kw)

        monkeypatch.setattr(core.store, "transact", counted)
        return names

    return start


# -- reading state ---------------------------------------------------------------------------
def read_jobs(tx, ns: str, queue: str) -> dict[str, pb.Job]:
    k = keys.QueueKeys(ns, queue)
    return {
        pb.Job.FromString(v).id: pb.Job.FromString(v)
        for _k, v in tx.scan(k.jobs(), keys.prefix_end(k.jobs()))
    }


def read_events(tx, ns: str, queue: str) -> list[events_pb2.JobEvent]:
    k = keys.QueueKeys(ns, queue)
    raw = tx.get(k.config())
    shards = max(pb.QueueConfig.FromString(raw).shards, 1) if raw else 1
    out = []
    for shard in range(shards):
        prefix = k.event_log_shard(shard)
        out.extend(events_pb2.JobEvent.FromString(v) for _k, v in tx.scan(prefix, keys.prefix_end(prefix)))
    return out


@pytest.fixture
def jobs_of(store):
    async def _jobs(queue: str = "q", ns: str = NS) -> dict[str, pb.Job]:
        return await store.snapshot(read_jobs, ns, queue)

    return _jobs


@pytest.fixture
def job_of(store):
    async def _job(job_id: str, queue: str = "q", ns: str = NS) -> pb.Job | None:
        def read(tx):
            raw = tx.get(keys.QueueKeys(ns, queue).job(job_id))
            return pb.Job.FromString(raw) if raw is not None else None

        return await store.snapshot(read)

    return _job


@pytest.fixture
def events_of(store):
    """The outbox rows of a queue, per shard in sequence order; filtered to one job if given."""

    async def _events(queue: str = "q", job_id: str | None = None, ns: str = NS) -> list[events_pb2.JobEvent]:
        evs = await store.snapshot(read_events, ns, queue)
        return [e for e in evs if job_id is None or e.job_id == job_id]

    return _events


# -- the invariant ------------------------------------------------------------------------------
def invariant_problems(tx, ns: str, queue: str) -> tuple[list[str], Counter]:
    """What is wrong with a queue's bookkeeping, and its per-state job counts.

    - the sum over shards of ShardMeta.counts equals the job records per state;
    - each shard's counts equal that shard's records;
    - the ready, delayed, active, state and subject-backlog indexes hold exactly one entry
      per job that belongs in them, pointing at a record in that state;
    - outbox sequences per shard are 1..outbox_seq with no gap.
    """
    k = keys.QueueKeys(ns, queue)
    problems: list[str] = []
    raw = tx.get(k.config())
    if raw is None:
        jobs = read_jobs(tx, ns, queue)
        return ([f"no config but {len(jobs)} jobs"] if jobs else []), Counter()
    shards = max(pb.QueueConfig.FromString(raw).shards, 1)
    jobs = read_jobs(tx, ns, queue)
    by_state: Counter = Counter(j.state for j in jobs.values())
    counted: Counter = Counter()
    for shard in range(shards):
        mraw = tx.get(k.shard_meta(shard))
        meta = pb.ShardMeta.FromString(mraw) if mraw else pb.ShardMeta()
        shard_counts = Counter({st: n for st, n in meta.counts.items() if n})
        shard_jobs = Counter(j.state for j in jobs.values() if j.shard == shard)
        if shard_counts != shard_jobs:
            problems.append(
                f"shard {shard}: meta counts {_named(shard_counts)} != job records {_named(shard_jobs)}"
            )
        counted.update(shard_counts)
        behind = sum(
            1 for j in jobs.values() if j.shard == shard and j.state in S.READY and j.subject_blocked
        )
        if meta.subject_waiting != behind:
            problems.append(
                f"shard {shard}: meta subject_waiting {meta.subject_waiting} != {behind} in backlogs"
            )
        prefix = k.event_log_shard(shard)
        seqs = [
            keys.U64.unpack_from(key, len(prefix))[0] for key, _ in tx.scan(prefix, keys.prefix_end(prefix))
        ]
        if seqs and seqs != list(range(seqs[0], meta.outbox_seq + 1)):
            problems.append(f"shard {shard}: event seqs {seqs[:5]}... not contiguous up to {meta.outbox_seq}")
    if counted != by_state:
        problems.append(f"queue counts {_named(counted)} != job records {_named(by_state)}")

    def index(prefix: bytes) -> list[tuple[bytes, bytes]]:
        return tx.scan(prefix, keys.prefix_end(prefix))

    expected: dict[bytes, str] = {}
    for j in jobs.values():
        if j.state in S.READY and j.subject_blocked:
            expected[k.subject_backlog_entry(j.opts.subject, j.seq)] = j.id
        elif j.state in S.READY:
            expected[k.ready(j.shard, j.opts.priority, j.seq, j.opts.lifo)] = j.id
        elif j.state == S.ACTIVE:
            expected[k.active(j.shard, j.deadline_ns, j.id)] = j.id
        elif j.state == S.DELAYED:
            expected[k.delayed(j.shard, j.due_ns, j.id)] = j.id
        elif j.state in S.STATE_INDEXED:
            expected[k.state_entry(j.state, j.shard, j.state_ns, j.id)] = j.id
    actual = {}
    for p in (k.q + b"r/", k.q + b"d/", k.q + b"a/", k.q + b"s/", k.subject_backlogs()):
        actual.update({key: key for key, _ in index(p) if not k.is_subject_holder(key)})
    missing = [expected[key] for key in expected if key not in actual]
    extra = [key for key in actual if key not in expected]
    if missing:
        problems.append(f"index entries missing for jobs {missing}")
    if extra:
        problems.append(f"{len(extra)} index entries without a job in that state, e.g. {extra[:3]}")

    # Subjects: one holder per subject, named by its holder key; the others wait in the backlog.
    holders: dict[str, list[str]] = {}
    for j in jobs.values():
        live = j.state not in S.FINISHED and j.state != S.WAITING_CHILDREN
        if j.opts.subject and live and not j.subject_blocked:
            holders.setdefault(j.opts.subject, []).append(j.id)
    for subject, ids in holders.items():
        current = tx.get(k.subject_current(subject))
        # A subject batch: the current job lists the later members leased with it.
        run = set(jobs[current.decode()].subject_run) if current and current.decode() in jobs else set()
        if current is None or current.decode() not in ids or set(ids) - run - {current.decode()}:
            problems.append(f"subject {subject!r}: holders {ids}, its holder key says {current!r}")
    for key, value in index(k.subject_backlogs()):
        if k.is_subject_holder(key) and not any(value.decode() in ids for ids in holders.values()):
            problems.append(f"{key!r} names {value!r}, which does not hold its subject")
    # A live job flagged as its subject's holder is the one its holder key names (its
    # finish lets the subject go on the flag's word, without reading the key).
    for j in jobs.values():
        if j.holds_subject and j.state not in S.FINISHED:
            current = tx.get(k.subject_current(j.opts.subject))
            if current != j.id.encode():
                problems.append(
                    f"job {j.id} is flagged as holding {j.opts.subject!r}, its key says {current!r}"
                )
    return problems, by_state


def _named(c: Counter) -> dict[str, int]:
    return {S.name(st): n for st, n in sorted(c.items()) if n}


@pytest.fixture
def check_invariants(store):
    async def _check(*queues: str, ns: str = NS) -> Counter:
        total: Counter = Counter()
        for queue in queues or ("q",):
            problems, by_state = await store.snapshot(invariant_problems, ns, queue)
            assert not problems, f"queue {queue!r}: " + "; ".join(problems)
            total.update(by_state)
        return total

    return _check


@pytest.fixture
def queue_problems():
    """`invariant_problems(tx, ns, queue) -> (problems, counts)` itself, for tests that
    run their own event loop (the hypothesis state machine)."""
    return invariant_problems
