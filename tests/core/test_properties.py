"""Random interleavings of enqueue, lease, extend, complete, worker crashes, clock moves
and sweeps, through QueueCore on the memory backend with its fault plan on (write
conflicts, region errors, commits whose acknowledgement is lost): the runner must hide
every fault, and these must hold after every step. The same machine runs, fewer
examples, on a real LMDB store (no faults: what it checks there is the backend's reads,
scans, savepoints and commits under the real state machine):

- no acknowledged enqueue is lost (nothing here removes jobs);
- no job has two outcomes: it reaches `completed` at most once, with at most one
  `completed` outbox row, and a finished job is never leased again;
- a lease hands each (job, epoch) out once, and the store holds what it handed out;
- a complete or extend with a stale epoch is refused with Fenced naming the current one;
- per shard, a lease takes the head of the ready order (FIFO band first, lower priority
  number first, FIFO ties, LIFO newest first) among the jobs ready at that moment, and
  returns fewer than asked only when nothing else was ready;
- subjects (decision 0036): at most one active job per subject, or one subject batch
  (consecutive jobs of its backlog, leased together); jobs enqueued without a delay run
  in enqueue order; a delayed job (enqueued delayed, or waiting to retry) holds nobody
  up unless its retry policy holds the subject; a replacement drops only a job that has
  not started, and keeps whichever runs later;
- the per-shard counts equal the job records, and every index matches its records.
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from loam_common import ids, keys
from loam_common.errors import Fenced, InvalidState
from loam_common.gen.loam.jobs.v1 import events_pb2
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S
from loam_common.jobs.complete import Fail, Ok, Release, Retry
from loam_common.jobs.queue import QueueTx
from loam_common.store import FaultPlan, LmdbBackend, ManualClock, MemoryBackend, Store
from loam_common.sweeper import Sweeper
from loam_queue_core import QueueCore

NS, Q = "acme", "q"
SEC = 1_000_000_000
VISIBILITY = 10 * SEC
INJECTED: Counter = Counter()  # faults injected over the whole run, checked at the end
_ID_SEQ = itertools.count()


def deterministic_ulid(now_ms: int | None = None) -> str:
    """Job ids that are the same on every replay of an example: a job's shard is a hash
    of its id, so random ids would make hypothesis's replays (and shrinking) diverge."""
    return ids._encode(1_700_000_000_000, 10) + ids._encode(next(_ID_SEQ), 16)


def deterministic_ulids(n: int, now_ms: int | None = None) -> list[str]:
    return [deterministic_ulid() for _ in range(n)]


@dataclass
class Snapshot:
    now: int
    jobs: dict[str, pb.Job]
    next_seq: list[int]
    events: list[events_pb2.JobEvent]


def read_all(tx, shards: int) -> Snapshot:
    k = keys.QueueKeys(NS, Q)
    jobs = {}
    for _k, v in tx.scan(k.jobs(), keys.prefix_end(k.jobs())):
        j = pb.Job.FromString(v)
        jobs[j.id] = j
    next_seq, events = [], []
    for shard in range(shards):
        raw = tx.get(k.shard_meta(shard))
        next_seq.append(pb.ShardMeta.FromString(raw).next_seq if raw else 0)
        p = k.event_log_shard(shard)
        events.extend(events_pb2.JobEvent.FromString(v) for _k, v in tx.scan(p, keys.prefix_end(p)))
    return Snapshot(tx.now_ns(), jobs, next_seq, events)


def configure(tx, shards: int, max_stalled: int) -> None:
    with QueueTx(tx, NS, Q) as qt:
        qt.cfg.visibility_ns = VISIBILITY
        qt.cfg.shards = shards
        qt.cfg.max_stalled = max_stalled
        qt.ensure_exists()
        qt.save_config()


def ready_key(job: pb.Job, seq: int) -> tuple:
    """The order a lease serves a shard in: LIFO jobs newest first, then FIFO jobs by
    seq, then prioritized jobs by priority and seq (BullMQ's order)."""
    if job.opts.priority:
        return (2, job.opts.priority, seq)
    return (0, 0, -seq) if job.opts.lifo else (1, 0, seq)


def lease_candidates(snap: Snapshot, shard: int) -> list[str]:
    """The jobs of a shard a lease may take, best first: the ready ones, then the due
    delayed ones, which the lease promotes (in due order) with the next sequences. A due
    job that did not hold its subject while delayed takes it if nobody holds it (a retry
    keeps its sequence), else it joins the subject's backlog and is no candidate."""
    ready = [
        j for j in snap.jobs.values() if j.shard == shard and j.state in S.READY and not j.subject_blocked
    ]
    due = sorted(
        (j for j in snap.jobs.values() if j.shard == shard and j.state == S.DELAYED and j.due_ns <= snap.now),
        key=lambda j: (j.due_ns, j.id),
    )
    held = {
        j.opts.subject
        for j in snap.jobs.values()
        if j.opts.subject
        and not j.subject_blocked
        and j.state not in S.FINISHED
        and j.state != S.WAITING_CHILDREN
    }
    keyed = [(ready_key(j, j.seq), j.id) for j in ready]
    seq = snap.next_seq[shard]
    for j in due:
        kept_seq = j.seq if j.subject_blocked and j.seq else 0
        if not kept_seq:
            seq += 1
        if j.subject_blocked:
            if j.opts.subject in held:
                continue  # into the subject's backlog
            held.add(j.opts.subject)
        keyed.append((ready_key(j, kept_seq or seq), j.id))
    return [job_id for _key, job_id in sorted(keyed)]


class QueueMachine(RuleBasedStateMachine):
    problems = None  # set by the test: conftest's invariant_problems

    def __init__(self) -> None:
        super().__init__()
        global _ID_SEQ
        _ID_SEQ = itertools.count()
        self.loop = asyncio.new_event_loop()
        self.clock = ManualClock()
        self.store: Store | None = None
        self.enq_order: dict[str, int] = {}  # job id -> enqueue order
        # Numbers for enq_order: a replacement removes entries, so its size is no order.
        self.enq_count = itertools.count()
        self.held: list[tuple[str, int]] = []  # tokens of live workers
        self.lost: list[tuple[str, int]] = []  # tokens of workers that vanished
        self.handed: set[tuple[str, int]] = set()
        self.done: set[tuple[str, int]] = set()  # tokens whose complete was answered
        self.completed: set[str] = set()
        self.finished: set[str] = set()
        self.prev: Snapshot | None = None
        self.bulk_calls = itertools.count()
        self.last_bulk: tuple[str, list, list] | None = None  # its key, job specs, answers

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def snap(self) -> Snapshot:
        return self.run(self.store.snapshot(read_all, self.shards))

    @initialize(
        seed=st.integers(0, 2**32 - 1), shards=st.sampled_from([1, 2]), max_stalled=st.sampled_from([1, -1])
    )
    def setup(self, seed: int, shards: int, max_stalled: int) -> None:
        self.plan = FaultPlan(
            seed=seed,
            conflict=0.10,
            region_read=0.03,
            region_commit=0.05,
            unknown_committed=0.08,
            unknown_not_committed=0.08,
        )
        self.shards = shards
        self.store = Store(self.backend())
        self.core = QueueCore(self.store)
        self.sweeper = Sweeper(self.store)
        self.run(self.store.transact(configure, shards, max_stalled))

    def backend(self):
        return MemoryBackend(clock=self.clock, faults=self.plan)

    def teardown(self) -> None:
        if self.store is not None:
            INJECTED.update(self.plan.injected)
            self.run(self.store.close())
        self.loop.close()

    # -- rules ------------------------------------------------------------------------------
    job_specs = st.fixed_dictionaries(
        {
            "priority": st.sampled_from([0, 0, 0, 1, 2, 7]),
            "lifo": st.booleans(),
            "delay": st.sampled_from([0, 0, 0, 3 * SEC, 15 * SEC]),
            "subject": st.sampled_from(["", "", "a", "b"]),
            "attempts": st.integers(1, 3),
            "backoff": st.sampled_from([0, 5 * SEC]),
            "hold": st.booleans(),
        }
    )

    @staticmethod
    def _opts(priority, lifo, delay, subject, attempts, backoff, hold) -> pb.EnqueueOpts:
        opts = pb.EnqueueOpts(
            priority=priority,
            lifo=lifo and not priority,
            subject=subject,
            attempts=attempts,
            backoff=pb.Backoff(kind=pb.BACKOFF_KIND_FIXED, base_ns=backoff, hold_subject=hold),
        )
        if delay:
            opts.not_before.delay_ns = delay
        return opts

    @rule(specs=st.lists(job_specs, min_size=1, max_size=4))
    def enqueue(self, specs) -> None:
        opts = [self._opts(**spec) for spec in specs]
        if len(opts) == 1:
            results = [self.run(self.core.jobs.enqueue(NS, Q, pb.TaskSpec(name="t"), opts[0]))]
        else:
            key = f"call-{next(self.bulk_calls)}"
            call = pb.Idempotency(key=key)
            results = self.run(
                self.core.jobs.enqueue_bulk(NS, Q, [(pb.TaskSpec(name="t"), o) for o in opts], call)
            )
            self.last_bulk = (key, specs, results)
        for res in results:
            assert res.created and res.job_id not in self.enq_order
            self.enq_order[res.job_id] = next(self.enq_count)

    @precondition(lambda self: self.last_bulk is not None)
    @rule()
    def retry_bulk(self) -> None:
        """The last bulk call sent again with its key, whatever happened to its jobs
        since: its first answers, and nothing written."""
        key, specs, first = self.last_bulk  # type: ignore[misc]
        items = [(pb.TaskSpec(name="t"), self._opts(**spec)) for spec in specs]
        before = self.snap()
        again = self.run(self.core.jobs.enqueue_bulk(NS, Q, items, pb.Idempotency(key=key)))
        assert again == first
        assert self.snap().jobs == before.jobs

    @rule(max_jobs=st.integers(1, 4))
    def lease(self, max_jobs: int) -> None:
        before = self.snap()
        got = self.run(self.core.jobs.lease(NS, [Q], "w", max_jobs))
        after = self.snap()
        assert len(got) <= max_jobs
        assert len({j.id for j in got}) == len(got)
        for j in got:
            token = (j.id, j.epoch)
            assert token not in self.handed, f"{token} handed out twice"
            assert j.id not in self.finished, f"finished job {j.id} leased again"
            stored = after.jobs[j.id]
            assert (stored.state, stored.epoch) == (S.ACTIVE, j.epoch), "the store lost or re-ran the lease"
            self.handed.add(token)
            self.held.append(token)
        # Per shard: what it took is the head of its ready order, in order.
        for shard in range(self.shards):
            took = [j.id for j in got if j.shard == shard]
            cands = lease_candidates(before, shard)
            assert took == cands[: len(took)], f"shard {shard}: leased {took}, ready order {cands}"
            if len(got) < max_jobs:
                assert took == cands, f"shard {shard}: left {set(cands) - set(took)} ready"
        self._check_subjects(before, got)

    def _check_subjects(self, before: Snapshot, got: list[pb.Job], batch: int = 1) -> None:
        """One job (or one batch) per subject at a time; FIFO among jobs enqueued without
        a delay; a retry holding its subject holds it."""
        by_subject: dict[str, list[pb.Job]] = {}
        for j in got:
            if j.opts.subject:
                by_subject.setdefault(j.opts.subject, []).append(j)
        for subject, run in by_subject.items():
            assert len(run) <= batch, f"subject {subject}: {len(run)} jobs leased at once"
            same = [x for x in before.jobs.values() if x.opts.subject == subject]
            assert not any(x.state == S.ACTIVE for x in same), f"subject {subject} leased while active"
            got_ids = {j.id for j in run}
            assert not any(
                x.state == S.DELAYED and not x.subject_blocked and x.id not in got_ids for x in same
            ), f"subject {subject} leased while a retry held it"
            first = run[0]
            if first.epoch == 1 and not first.opts.HasField("not_before"):
                earlier = [
                    x.id
                    for x in same
                    if x.state in S.READY
                    and x.epoch == 0
                    and not x.opts.HasField("not_before")
                    and self.enq_order[x.id] < self.enq_order[first.id]
                ]
                assert not earlier, f"subject {subject}: FIFO broken, {earlier} enqueued before {first.id}"
            # The rest of a batch: the head of the subject's backlog, in order (a delayed
            # job the lease found due joins the backlog behind it first).
            backlog = [x.id for x in sorted(
                (x for x in same if x.state in S.READY and x.subject_blocked), key=lambda x: x.seq
            )]  # fmt: skip
            due = {x.id for x in same if x.state == S.DELAYED and x.due_ns <= before.now}
            members = [j.id for j in run[1:]]
            from_backlog = [m for m in members if m not in due]
            assert set(members) <= set(backlog) | due and from_backlog == backlog[: len(from_backlog)], (
                f"subject {subject}: batch {[j.id for j in run]} is not its backlog's head {backlog}"
            )

    @rule(max_jobs=st.integers(2, 6), batch=st.integers(2, 4))
    def lease_subject_batch(self, max_jobs: int, batch: int) -> None:
        before = self.snap()
        got = self.run(self.core.jobs.lease(NS, [Q], "w", max_jobs, subject_batch=batch))
        after = self.snap()
        assert len(got) <= max_jobs
        for j in got:
            token = (j.id, j.epoch)
            assert token not in self.handed, f"{token} handed out twice"
            assert j.id not in self.finished, f"finished job {j.id} leased again"
            assert (after.jobs[j.id].state, after.jobs[j.id].epoch) == (S.ACTIVE, j.epoch)
            self.handed.add(token)
            self.held.append(token)
        self._check_subjects(before, got, batch)

    @rule(subject=st.sampled_from(["a", "b"]), delay=st.sampled_from([0, 3 * SEC, 15 * SEC]))
    def enqueue_plain_evict(self, subject: str, delay: int) -> None:
        """A job of the replacements' task name enqueued without replace: a later
        replacement finds it all the same."""
        opts = pb.EnqueueOpts(subject=subject)
        if delay:
            opts.not_before.delay_ns = delay
        res = self.run(self.core.jobs.enqueue(NS, Q, pb.TaskSpec(name="evict"), opts))
        assert res.created and not res.dropped
        self.enq_order[res.job_id] = next(self.enq_count)

    @rule(subject=st.sampled_from(["a", "b"]), delay=st.sampled_from([0, 3 * SEC, 15 * SEC]))
    def enqueue_replacement(self, subject: str, delay: int) -> None:
        before = self.snap()
        opts = pb.EnqueueOpts(subject=subject, replace=pb.SUBJECT_REPLACE_KEEP_LATER)
        if delay:
            opts.not_before.delay_ns = delay
        res = self.run(self.core.jobs.enqueue(NS, Q, pb.TaskSpec(name="evict"), opts))
        after = self.snap()
        # Every job of (subject, "evict") that has not started, however it was enqueued.
        not_started = {
            j.id: j
            for j in before.jobs.values()
            if j.opts.subject == subject
            and j.task.name == "evict"
            and j.epoch == 0
            and j.state in (S.WAITING, S.PRIORITIZED, S.DELAYED)
        }
        new_runs_at = before.now + delay
        if res.created:  # the new one runs latest: every earlier one not started is gone
            self.enq_order[res.job_id] = next(self.enq_count)
            assert all((j.due_ns or j.created_ns) < new_runs_at for j in not_started.values())
            assert (res.dropped in not_started) == bool(not_started)
        else:  # an earlier one runs latest: it stays, the new one and the others go
            kept = not_started[res.job_id]
            assert (kept.due_ns or kept.created_ns) >= new_runs_at
            assert all(
                (kept.due_ns or kept.created_ns) >= (j.due_ns or j.created_ns) for j in not_started.values()
            )
            assert res.job_id in after.jobs and res.dropped not in after.jobs
        for job_id in not_started:
            if job_id != res.job_id:
                assert job_id not in after.jobs, f"{job_id} not started, not replaced"
                del self.enq_order[job_id]

    def _pick(self, data, tokens: list) -> tuple[str, int]:
        return tokens.pop(data.draw(st.integers(0, len(tokens) - 1)))

    def _expect(self, token: tuple[str, int], fn):
        """Run a fenced call and check its answer against the job as it was just before."""
        job_id, epoch = token
        job = self.snap().jobs[job_id]
        if job.epoch != epoch:
            try:
                self.run(fn())
            except Fenced as e:
                assert e.current_epoch == job.epoch
                return None
            raise AssertionError(f"stale epoch {epoch} (current {job.epoch}) was accepted")
        if job.state != S.ACTIVE:
            try:
                self.run(fn())
            except InvalidState:
                return None
            raise AssertionError(f"{job_id} is {S.name(job.state)} and took a second outcome")
        return (self.run(fn()),)

    @precondition(lambda self: self.held)
    @rule(data=st.data(), by=st.integers(1, 20))
    def extend(self, data, by: int) -> None:
        token = self._pick(data, self.held)
        out = self._expect(token, lambda: self.core.jobs.extend(NS, Q, *token, by * SEC))
        if out is not None:
            assert out[0] == self.clock.now_ns() + by * SEC
            self.held.append(token)

    @precondition(lambda self: self.held or self.lost)
    @rule(
        data=st.data(), kind=st.sampled_from(["ok", "ok", "retry", "fail", "release"]), zombie=st.booleans()
    )
    def complete(self, data, kind: str, zombie: bool) -> None:
        tokens = self.lost if (zombie and self.lost) or not self.held else self.held
        token = self._pick(data, tokens)
        err = pb.JobError(code="error", message="boom")
        outcome = {
            "ok": Ok(),
            "retry": Retry(err),
            "fail": Fail(err),
            "release": Release(),
        }[kind]
        out = self._expect(token, lambda: self.core.jobs.complete(NS, Q, *token, outcome))
        self.done.add(token)
        if out is None:
            return
        state = out[0].state
        if kind == "ok":
            assert state == S.COMPLETED
            assert token[0] not in self.completed, f"{token[0]} completed twice"
            self.completed.add(token[0])
        if state in S.FINISHED:
            self.finished.add(token[0])

    @precondition(lambda self: self.done)
    @rule(data=st.data())
    def replay_complete(self, data) -> None:
        """A token that already had its answer, or was reclaimed, is refused."""
        token = sorted(self.done)[data.draw(st.integers(0, len(self.done) - 1))]
        out = self._expect(token, lambda: self.core.jobs.complete(NS, Q, *token, Ok()))
        assert out is None, f"{token} completed after its lease was answered"

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def crash(self, data) -> None:
        self.lost.append(self._pick(data, self.held))

    @rule(seconds=st.sampled_from([1, 3, 5, 11]))
    def advance(self, seconds: int) -> None:
        self.clock.advance(seconds * SEC)

    @rule()
    def sweep(self) -> None:
        self.run(self.sweeper.run_once())
        snap = self.snap()
        for job_id in self.enq_order:
            j = snap.jobs[job_id]
            if j.state == S.ACTIVE:
                assert j.deadline_ns >= snap.now, f"{job_id} is active past its deadline after a sweep"
            if j.state in S.FINISHED:
                self.finished.add(job_id)

    # -- invariants ---------------------------------------------------------------------------
    @invariant()
    def consistent(self) -> None:
        if self.store is None:
            return
        problems, _counts = self.run(self.store.snapshot(type(self).problems, NS, Q))
        assert not problems, "; ".join(problems)
        snap = self.snap()
        missing = set(self.enq_order) - set(snap.jobs)
        assert not missing, f"acknowledged enqueues lost: {missing}"
        assert set(snap.jobs) == set(self.enq_order), "a job nobody enqueued appeared"
        completed_rows = Counter(e.job_id for e in snap.events if e.event == "completed")
        assert all(n == 1 for n in completed_rows.values()), f"two completed rows: {completed_rows}"
        assert set(completed_rows) == self.completed
        assert {j.id for j in snap.jobs.values() if j.state == S.COMPLETED} == self.completed
        active_subjects: dict[str, set[str]] = {}
        for j in snap.jobs.values():
            if j.state == S.ACTIVE and j.opts.subject:
                active_subjects.setdefault(j.opts.subject, set()).add(j.id)
        for subject, active in active_subjects.items():
            # Several only as one subject batch: one job holds the rest in its run.
            assert len(active) == 1 or any(
                active - {x.id} <= set(x.subject_run)
                for x in snap.jobs.values()
                if x.opts.subject == subject and not x.subject_blocked
            ), f"two active jobs of subject {subject}: {active}"
        # Sequences only grow: a job that (re)entered the ready order is behind every
        # job that was already there.
        if self.prev is not None:
            for j in snap.jobs.values():
                old = self.prev.jobs.get(j.id)
                if j.state in S.READY and (old is None or old.seq != j.seq):
                    assert j.seq > self.prev.next_seq[j.shard], f"{j.id} re-entered the ready order ahead"
        self.prev = snap


class LmdbQueueMachine(QueueMachine):
    def backend(self):
        self.dir = tempfile.mkdtemp(prefix="loam-props-")
        return LmdbBackend(f"{self.dir}/store.lmdb", clock=self.clock)

    def teardown(self) -> None:
        super().teardown()
        if self.store is not None:
            shutil.rmtree(self.dir, ignore_errors=True)


def test_random_interleavings_keep_the_queue_consistent(queue_problems, monkeypatch):
    monkeypatch.setattr(ids, "new_ulid", deterministic_ulid)
    monkeypatch.setattr(ids, "new_ulids", deterministic_ulids)
    QueueMachine.problems = staticmethod(queue_problems)
    INJECTED.clear()
    run_state_machine_as_test(
        QueueMachine,
        settings=settings(
            max_examples=40,
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
    # The faults really happened, so the invariants above held through them.
    assert INJECTED, "the fault plan injected nothing"
    assert len(INJECTED) >= 3, f"too few kinds of fault: {dict(INJECTED)}"


def test_random_interleavings_on_lmdb(queue_problems, monkeypatch):
    monkeypatch.setattr(ids, "new_ulid", deterministic_ulid)
    monkeypatch.setattr(ids, "new_ulids", deterministic_ulids)
    LmdbQueueMachine.problems = staticmethod(queue_problems)
    run_state_machine_as_test(
        LmdbQueueMachine,
        settings=settings(
            max_examples=15,
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


@pytest.mark.parametrize("shards", [1, 2])
def test_lease_candidates_model(shards):
    """The test's own ready-order model, on a hand-made shard: LIFO, FIFO, then priority."""

    def job(i, prio=0, lifo=False, seq=0, state=S.WAITING, due=0):
        return pb.Job(
            id=f"j{i}", state=state, seq=seq, due_ns=due, opts=pb.EnqueueOpts(priority=prio, lifo=lifo)
        )

    jobs = [
        job(1, prio=2, seq=1),
        job(2, seq=2),
        job(3, lifo=True, seq=3),
        job(4, lifo=True, seq=4),
        job(5, seq=5),
        job(6, prio=1, seq=6),
        job(7, state=S.DELAYED, due=5),
    ]
    snap = Snapshot(now=10, jobs={j.id: j for j in jobs}, next_seq=[7] * shards, events=[])
    assert lease_candidates(snap, 0) == ["j4", "j3", "j2", "j5", "j7", "j6", "j1"]
