"""Subjects, complete (spec 003, decision 0036), through QueueCore on every backend:
LMDB, SQLite, the memory MVCC store, and the memory store with a fault plan (write
conflicts, region errors, unknown commit outcomes) that the runner must hide, with group
commit and without it (one transaction per call, the path TiKV takes).

- replacement on enqueue: whichever runs later is kept; a started job is left alone;
- atomic write batches: enqueue / cancel-if-not-started / result set, all or none;
- subject batch leases: a run of one subject's consecutive jobs of one task name,
  completed in one call, kept in order when its worker's lease lapses mid-run;
- retries: by default the jobs behind run during the backoff; `hold_subject` makes
  them wait; a job waiting to retry can be canceled; a permanent error is not retried;
- placement: only the named worker leases the job, and its subject waits for it.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from loam_common.errors import InvalidArgument, InvalidState, NotFound
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S
from loam_common.jobs.complete import Ok, Retry
from loam_common.jobs.new_job import Enqueued
from loam_common.jobs.write_batch import Canceled, ResultStored
from loam_common.store import FaultPlan, LmdbBackend, ManualClock, MemoryBackend, SqliteBackend, Store
from loam_queue_core import QueueCore

NS = "acme"
SEC = 1_000_000_000
KEEP_LATER = pb.SUBJECT_REPLACE_KEEP_LATER


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["lmdb", "sqlite", "memory", "memory-faults", "memory-txn-faults"])
async def store(request, tmp_path, clock):
    kind = request.param
    if kind == "lmdb":
        backend = LmdbBackend(tmp_path / "jobs.lmdb", clock=clock)
    elif kind == "sqlite":
        backend = SqliteBackend(tmp_path / "jobs.db", clock=clock)
    elif kind == "memory":
        backend = MemoryBackend(clock=clock)
    else:
        faults = FaultPlan(seed=25, conflict=0.15, region_read=0.02, region_commit=0.05,
                           unknown_committed=0.08, unknown_not_committed=0.08)  # fmt: skip
        backend = MemoryBackend(clock=clock, faults=faults)
        if kind == "memory-txn-faults":  # one transaction per call: the path TiKV takes
            backend.capabilities = dataclasses.replace(backend.capabilities, group_commit=False)
    s = Store(backend)
    yield s
    await s.close()


def task(name: str = "t", data: bytes = b"x") -> pb.TaskSpec:
    return pb.TaskSpec(name=name, payload=pb.Payload(data=data))


async def enqueue(core: QueueCore, name: str = "t", queue: str = "q", **opts) -> Enqueued:
    return await core.jobs.enqueue(NS, queue, task(name), pb.EnqueueOpts(**opts))


async def lease(core: QueueCore, max_jobs: int = 10, worker: str = "w1", **kw) -> list[pb.Job]:
    return await core.jobs.lease(NS, ["q"], worker, max_jobs, **kw)


async def ok(core: QueueCore, job: pb.Job) -> None:
    await core.jobs.complete(NS, job.queue, job.id, job.epoch, Ok())


def delay(seconds: int) -> pb.Delay:
    return pb.Delay(delay_ns=seconds * SEC)


# -- replacement -----------------------------------------------------------------------------------
async def test_a_later_replacement_drops_the_earlier_job(core, job_of, check_invariants):
    first = await enqueue(core, "evict", subject="file-1", replace=KEEP_LATER, not_before=delay(60))
    second = await enqueue(core, "evict", subject="file-1", replace=KEEP_LATER, not_before=delay(120))
    assert second.created and second.dropped == first.job_id
    assert await job_of(first.job_id) is None
    assert (await job_of(second.job_id)).due_ns == (await job_of(second.job_id)).created_ns + 120 * SEC
    assert (await check_invariants()) == {S.DELAYED: 1}


async def test_an_earlier_replacement_keeps_the_later_job(core, job_of, check_invariants):
    later = await enqueue(core, "evict", subject="file-1", replace=KEEP_LATER, not_before=delay(120))
    sooner = await enqueue(core, "evict", subject="file-1", replace=KEEP_LATER, not_before=delay(60))
    assert not sooner.created
    assert sooner.job_id == later.job_id and sooner.dropped not in ("", later.job_id)
    assert await job_of(sooner.dropped) is None
    assert (await check_invariants()) == {S.DELAYED: 1}


async def test_a_replacement_of_another_task_or_subject_is_added_beside(core, check_invariants):
    await enqueue(core, "evict", subject="file-1", replace=KEEP_LATER, not_before=delay(60))
    other_task = await enqueue(core, "fetch", subject="file-1", replace=KEEP_LATER, not_before=delay(90))
    other_subject = await enqueue(core, "evict", subject="file-2", replace=KEEP_LATER, not_before=delay(90))
    assert other_task.created and not other_task.dropped
    assert other_subject.created and not other_subject.dropped
    assert (await check_invariants())[S.DELAYED] == 3  # delayed jobs never hold their subject


async def test_a_started_job_is_left_alone_and_the_replacement_added_beside(core, clock, check_invariants):
    first = await enqueue(core, "evict", subject="file-1", replace=KEEP_LATER)
    (running,) = await lease(core)
    assert running.id == first.job_id
    second = await enqueue(core, "evict", subject="file-1", replace=KEEP_LATER, not_before=delay(60))
    assert second.created and not second.dropped
    await ok(core, running)
    clock.advance(60 * SEC)
    assert [j.id for j in await lease(core)] == [second.job_id]
    await check_invariants()


async def test_a_waiting_job_behind_its_subject_is_replaced_in_the_backlog(core, clock, check_invariants):
    blocker = await enqueue(core, "write", subject="file-1")
    first = await enqueue(core, "evict", subject="file-1", replace=KEEP_LATER)
    second = await enqueue(core, "evict", subject="file-1", replace=KEEP_LATER, not_before=delay(30))
    assert second.dropped == first.job_id
    (job,) = await lease(core)
    assert job.id == blocker.job_id
    await ok(core, job)
    assert await lease(core) == []  # the replacement is not due yet
    clock.advance(30 * SEC)
    assert [j.id for j in await lease(core)] == [second.job_id]
    await check_invariants()


async def test_a_plain_delayed_job_is_replaced_by_a_later_replacement(core, clock, job_of, check_invariants):
    plain = await enqueue(core, "evict", subject="file-1", not_before=delay(60))
    replacement = await enqueue(core, "evict", subject="file-1", replace=KEEP_LATER, not_before=delay(120))
    assert replacement.created and replacement.dropped == plain.job_id
    assert await job_of(plain.job_id) is None
    clock.advance(60 * SEC)
    assert await lease(core) == []  # the dropped job does not run at its old time
    clock.advance(60 * SEC)
    assert [j.id for j in await lease(core)] == [replacement.job_id]
    await check_invariants()


async def test_a_plain_delayed_job_running_later_is_kept(core, job_of, check_invariants):
    plain = await enqueue(core, "evict", subject="file-1", not_before=delay(120))
    replacement = await enqueue(core, "evict", subject="file-1", replace=KEEP_LATER, not_before=delay(60))
    assert not replacement.created and replacement.job_id == plain.job_id
    assert await job_of(replacement.dropped) is None
    assert (await check_invariants()) == {S.DELAYED: 1}


async def test_plain_waiting_jobs_of_the_subject_are_replaced(core, clock, job_of, check_invariants):
    holder = await enqueue(core, "evict", subject="file-1")  # the subject's job, not leased
    behind = await enqueue(core, "evict", subject="file-1")  # in the subject's backlog
    other_task = await enqueue(core, "write", subject="file-1")
    replacement = await enqueue(core, "evict", subject="file-1", replace=KEEP_LATER, not_before=delay(30))
    assert replacement.created and replacement.dropped in (holder.job_id, behind.job_id)
    assert await job_of(holder.job_id) is None and await job_of(behind.job_id) is None
    assert [j.id for j in await lease(core)] == [other_task.job_id]  # the subject passed on
    await check_invariants()


async def test_several_plain_jobs_the_latest_running_is_kept_the_others_dropped(
    core, job_of, check_invariants
):
    soon = await enqueue(core, "evict", subject="file-1", not_before=delay(30))
    latest = await enqueue(core, "evict", subject="file-1", not_before=delay(300))
    waiting = await enqueue(core, "evict", subject="file-1")
    replacement = await enqueue(core, "evict", subject="file-1", replace=KEEP_LATER, not_before=delay(60))
    assert not replacement.created and replacement.job_id == latest.job_id
    for dropped in (soon, waiting):
        assert await job_of(dropped.job_id) is None
    assert (await check_invariants()) == {S.DELAYED: 1}


async def test_a_started_plain_job_is_left_alone(core, clock, job_of, check_invariants):
    plain = await enqueue(core, "evict", subject="file-1")
    (running,) = await lease(core)
    assert running.id == plain.job_id
    replacement = await enqueue(core, "evict", subject="file-1", replace=KEEP_LATER, not_before=delay(60))
    assert replacement.created and not replacement.dropped
    assert (await job_of(plain.job_id)).state == S.ACTIVE
    await ok(core, running)
    clock.advance(60 * SEC)
    assert [j.id for j in await lease(core)] == [replacement.job_id]
    await check_invariants()


async def test_a_plain_job_waiting_to_retry_is_left_alone(core, clock, job_of, check_invariants):
    backoff = pb.Backoff(kind=pb.BACKOFF_KIND_FIXED, base_ns=60 * SEC)
    plain = await enqueue(core, "evict", subject="file-1", attempts=2, backoff=backoff)
    (running,) = await lease(core)
    await core.jobs.complete(
        NS, "q", running.id, running.epoch, Retry(pb.JobError(code="error", message="busy"))
    )
    assert (await job_of(plain.job_id)).state == S.DELAYED
    replacement = await enqueue(core, "evict", subject="file-1", replace=KEEP_LATER, not_before=delay(30))
    assert replacement.created and not replacement.dropped
    assert (await check_invariants()) == {S.DELAYED: 2}


async def test_a_replacement_racing_a_lease_of_a_plain_job(core, job_of, check_invariants):
    for i in range(8):
        subject = f"file-{i}"
        first = await enqueue(core, "evict", subject=subject)
        leased, second = await asyncio.gather(
            lease(core, worker=f"w{i}"),
            enqueue(core, "evict", subject=subject, replace=KEEP_LATER, not_before=delay(60)),
        )
        assert second.created
        if second.dropped:
            assert second.dropped == first.job_id and leased == []
            assert await job_of(first.job_id) is None
        else:
            assert [j.id for j in leased] == [first.job_id]
            await ok(core, leased[0])
    await check_invariants()


async def test_replace_needs_a_subject(core):
    with pytest.raises(InvalidArgument, match="replace"):
        await enqueue(core, "evict", replace=KEEP_LATER)


async def test_a_replacement_racing_a_lease_ends_one_way_or_the_other(core, job_of, check_invariants):
    for i in range(8):
        subject = f"file-{i}"
        first = await enqueue(core, "evict", subject=subject, replace=KEEP_LATER)
        leased, second = await asyncio.gather(
            lease(core, worker=f"w{i}"),
            enqueue(core, "evict", subject=subject, replace=KEEP_LATER, not_before=delay(60)),
        )
        assert second.created
        if second.dropped:  # the replacement came first: the first job is gone, nothing to lease
            assert second.dropped == first.job_id and leased == []
            assert await job_of(first.job_id) is None
        else:  # the lease came first: the running job is left alone
            assert [j.id for j in leased] == [first.job_id]
            await ok(core, leased[0])
    await check_invariants()


# -- atomic write batches --------------------------------------------------------------------------
async def test_a_write_batch_applies_every_item(core, job_of, check_invariants):
    cleanup = await enqueue(core, "cleanup", not_before=delay(300))
    out = await core.jobs.write_batch(
        NS,
        [
            ("enqueue", "q", task("commit"), pb.EnqueueOpts(subject="upload-1")),
            ("cancel", "q", cleanup.job_id, "the write claimed its shards"),
            ("result_set", "upload-1", pb.Payload(data=b'"done"'), 0),
            ("enqueue", "other", task("notify"), None),
        ],
    )
    assert isinstance(out[0], Enqueued) and out[0].created
    assert out[1] == Canceled(cleanup.job_id)
    assert out[2] == ResultStored("upload-1")
    assert isinstance(out[3], Enqueued)
    assert (await job_of(cleanup.job_id)).state == S.CANCELED
    assert (await core.results.get(NS, "upload-1"))[0].data == b'"done"'
    assert (await check_invariants("q", "other")) == {S.WAITING: 2, S.CANCELED: 1}


async def test_a_refused_item_refuses_the_batch_and_names_its_index(core, store, jobs_of, check_invariants):
    running = await enqueue(core, "upload")
    await lease(core)
    before = await jobs_of()
    with pytest.raises(InvalidState, match=r"items\[2\]"):
        await core.jobs.write_batch(
            NS,
            [
                ("enqueue", "q", task("commit"), None),
                ("result_set", "upload-1", pb.Payload(data=b"1"), 0),
                ("cancel", "q", running.job_id, ""),
            ],
        )
    assert await jobs_of() == before  # nothing enqueued
    assert (await core.results.get(NS, "upload-1"))[0] is None  # nothing set
    with pytest.raises(NotFound, match=r"items\[0\]"):
        await core.jobs.write_batch(NS, [("cancel", "q", "no-such-job", "")])
    with pytest.raises(InvalidArgument, match=r"items\[1\]"):
        await core.jobs.write_batch(NS, [("result_set", "k", pb.Payload(data=b"1"), 0),
                                         ("enqueue", "q", task(""), None)])  # fmt: skip
    await check_invariants()


async def test_a_write_batch_is_bounded(core):
    with pytest.raises(InvalidArgument, match="at most 1000"):
        await core.jobs.write_batch(
            NS, [("result_set", f"k{i}", pb.Payload(data=b"1"), 0) for i in range(1001)]
        )
    with pytest.raises(InvalidArgument, match="at least one"):
        await core.jobs.write_batch(NS, [])


async def test_write_batches_racing_leases_cancel_or_refuse_whole(core, job_of, jobs_of, check_invariants):
    """Each batch cancels a job a worker is leasing at the same moment and enqueues its
    follow-up: either the lease won (the batch is refused whole: no follow-up) or the
    batch did (the job is canceled and never leased)."""
    for i in range(8):
        target = await enqueue(core, "cleanup", subject=f"u{i}")
        batch = core.jobs.write_batch(
            NS, [("enqueue", "q", task("commit", str(i).encode()), None), ("cancel", "q", target.job_id, "")]
        )
        leased, outcome = await asyncio.gather(lease(core, worker=f"w{i}"), batch, return_exceptions=True)
        assert not isinstance(leased, BaseException), leased
        if isinstance(outcome, InvalidState):
            assert target.job_id in [j.id for j in leased]
            assert not any(j.task.name == "commit" and j.task.payload.data == str(i).encode()
                           for j in (await jobs_of()).values())  # fmt: skip
        else:
            assert not isinstance(outcome, BaseException), outcome
            assert target.job_id not in [j.id for j in leased]
            assert (await job_of(target.job_id)).state == S.CANCELED
        for j in leased:
            await ok(core, j)
    await check_invariants()


# -- subject batch leases --------------------------------------------------------------------------
async def test_a_subject_batch_stops_at_another_task_name(core, check_invariants):
    ids = [
        (await enqueue(core, name, subject="space-1")).job_id
        for name in ("register",) * 3 + ("drop", "register")
    ]
    other = await enqueue(core, "register", subject="space-2")
    leased = await lease(core, max_jobs=10, subject_batch=10)
    assert [j.id for j in leased] == ids[:3] + [other.job_id]
    await check_invariants()
    # The whole run completed in one call; then the next task name's job, then the rest.
    results = await core.jobs.complete_many(NS, [("q", j.id, j.epoch, Ok()) for j in leased])
    assert all(r.state == S.COMPLETED for r in results)
    assert [j.id for j in await lease(core, subject_batch=10)] == [ids[3]]
    await check_invariants()


async def test_a_subject_batch_is_bounded_by_its_size_and_the_lease_max(core, check_invariants):
    ids = [(await enqueue(core, "register", subject="s")).job_id for _ in range(6)]
    assert [j.id for j in await lease(core, max_jobs=10, subject_batch=2)] == ids[:2]
    await check_invariants()
    await core.jobs.complete_many(NS, [("q", i, 1, Ok()) for i in ids[:2]])
    assert [j.id for j in await lease(core, max_jobs=3, subject_batch=10)] == ids[2:5]
    await check_invariants()


async def test_a_subject_batch_holds_its_subject_until_its_last_job_finishes(core, check_invariants):
    ids = [(await enqueue(core, "register", subject="s")).job_id for _ in range(3)]
    run = await lease(core, max_jobs=2, subject_batch=2)
    assert [j.id for j in run] == ids[:2]
    await ok(core, run[0])
    assert await lease(core) == []  # the run's second job still holds the subject
    await check_invariants()
    await ok(core, run[1])
    assert [j.id for j in await lease(core)] == [ids[2]]
    await check_invariants()


async def test_a_subject_batch_completed_out_of_order_still_holds_until_all_finish(core, check_invariants):
    ids = [(await enqueue(core, "register", subject="s")).job_id for _ in range(4)]
    run = await lease(core, max_jobs=3, subject_batch=3)
    await ok(core, run[2])
    await ok(core, run[0])
    assert await lease(core) == []
    await ok(core, run[1])
    assert [j.id for j in await lease(core)] == [ids[3]]
    await check_invariants()


async def test_a_lapsed_subject_batch_runs_again_in_order(core, clock, sweep, jobs_of, check_invariants):
    """The worker finished one job of its run and vanished: the rest come back in
    order, none twice, and the subject's later jobs still wait for them."""
    ids = [(await enqueue(core, "register", subject="s")).job_id for _ in range(5)]
    run = await lease(core, max_jobs=4, subject_batch=4)
    assert [j.id for j in run] == ids[:4]
    await ok(core, run[0])
    clock.advance(31 * SEC)  # past the queue's 30 s lease
    await sweep()
    await check_invariants()
    order = [ids[0]]
    while leased := await lease(core, max_jobs=1, worker="w2"):
        order.extend(j.id for j in leased)
        await ok(core, leased[0])
    assert order == ids
    assert {j.state for j in (await jobs_of()).values()} == {S.COMPLETED}
    await check_invariants()


async def test_a_run_member_handed_back_waits_at_the_front_of_its_subject(core, check_invariants):
    from loam_common.jobs.complete import Release

    ids = [(await enqueue(core, "register", subject="s")).job_id for _ in range(3)]
    run = await lease(core, max_jobs=2, subject_batch=2)
    await core.jobs.complete(NS, "q", run[1].id, run[1].epoch, Release())
    assert await lease(core) == []  # back behind the running first job, not beside it
    await ok(core, run[0])
    assert [j.id for j in await lease(core, max_jobs=1)] == [ids[1]]
    await check_invariants()


async def test_a_run_holder_handed_back_after_an_earlier_job_of_its_run_goes_behind_it(
    core, job_of, check_invariants
):
    """The first job finished: the subject is the run's last job's (decision 0042). An
    earlier job of the run handed back waits at the front; when the holder is handed
    back too, nothing of the run is running: they run again in their order."""
    from loam_common.jobs.complete import Release

    ids = [(await enqueue(core, "register", subject="s")).job_id for _ in range(5)]
    run = await lease(core, max_jobs=4, subject_batch=4)
    assert [j.id for j in run] == ids[:4]
    await ok(core, run[0])
    assert list((await job_of(ids[3])).subject_run) == ids[1:4]  # holds it for the ones before it
    await core.jobs.complete(NS, "q", run[1].id, run[1].epoch, Release())
    await ok(core, run[2])
    assert await lease(core) == []  # the holder still runs
    await core.jobs.complete(NS, "q", run[3].id, run[3].epoch, Release())
    await check_invariants()
    order = []
    while leased := await lease(core, max_jobs=1, worker="w2"):
        order.append(leased[0].id)
        await ok(core, leased[0])
    assert order == [ids[1], ids[3], ids[4]]
    await check_invariants()


async def test_a_run_holder_handed_back_while_its_run_runs_passes_the_subject_on(
    core, job_of, check_invariants
):
    """The holder goes back while the later jobs of its run still run: the subject goes
    to the run's last job (flagged as its holder, so its finish need not read its key), and
    the old holder waits at the front of the backlog, no longer flagged."""
    from loam_common.jobs.complete import Release

    ids = [(await enqueue(core, "register", subject="s")).job_id for _ in range(4)]
    run = await lease(core, max_jobs=3, subject_batch=3)
    assert (await job_of(ids[0])).holds_subject
    await core.jobs.complete(NS, "q", run[0].id, run[0].epoch, Release())
    await check_invariants()
    assert not (await job_of(ids[0])).holds_subject
    assert (await job_of(ids[2])).holds_subject
    await ok(core, run[1])
    assert await lease(core) == []  # the run's last job still holds the subject
    await ok(core, run[2])
    order = []
    while leased := await lease(core, max_jobs=1, worker="w2"):
        order.append(leased[0].id)
        await ok(core, leased[0])
    assert order == [ids[0], ids[3]]
    await check_invariants()


async def test_a_holder_stored_before_the_holder_flag_still_passes_its_subject_on(
    core, store, check_invariants
):
    """A job that became its subject's holder before `holds_subject` existed has no
    flag: its finish reads its holder key and lets the subject go as before."""
    from loam_common import keys

    ids = [(await enqueue(core, "register", subject="s")).job_id for _ in range(3)]
    jk = keys.QueueKeys(NS, "q").job(ids[0])

    def as_stored_before(tx):
        job = pb.Job.FromString(tx.get(jk))
        job.holds_subject = False
        tx.put(jk, job.SerializeToString())

    await store.transact(as_stored_before)
    (first,) = await lease(core, max_jobs=3)
    assert first.id == ids[0] and not first.holds_subject
    await ok(core, first)
    assert [j.id for j in await lease(core, max_jobs=3)] == [ids[1]]
    await check_invariants()


# -- retries ---------------------------------------------------------------------------------------
BACKOFF = pb.Backoff(kind=pb.BACKOFF_KIND_FIXED, base_ns=10 * SEC)
HOLDING = pb.Backoff(kind=pb.BACKOFF_KIND_FIXED, base_ns=10 * SEC, hold_subject=True)


async def fail_once(core: QueueCore, job: pb.Job, **error) -> None:
    await core.jobs.complete(
        NS, "q", job.id, job.epoch, Retry(pb.JobError(code="error", message="x", **error))
    )


async def test_by_default_the_jobs_behind_run_during_the_backoff(core, clock, check_invariants):
    first = await enqueue(core, subject="s", attempts=2, backoff=BACKOFF)
    second = await enqueue(core, subject="s")
    (job,) = await lease(core)
    await fail_once(core, job)
    (job,) = await lease(core)
    assert job.id == second.job_id
    await check_invariants()
    await ok(core, job)
    clock.advance(10 * SEC)
    (job,) = await lease(core)
    assert job.id == first.job_id and job.attempt == 1
    await ok(core, job)
    assert (await check_invariants()) == {S.COMPLETED: 2}


async def test_a_due_retry_runs_before_the_jobs_that_arrived_behind_it(core, clock, check_invariants):
    first = await enqueue(core, subject="s", attempts=2, backoff=BACKOFF)
    second = await enqueue(core, subject="s")
    third = await enqueue(core, subject="s")
    (job,) = await lease(core)
    await fail_once(core, job)
    (running,) = await lease(core)
    assert running.id == second.job_id
    clock.advance(10 * SEC)
    assert await lease(core) == []  # the retry is due, and waits at the front of the subject
    await ok(core, running)
    assert [j.id for j in await lease(core, max_jobs=1)] == [first.job_id]
    await check_invariants()
    assert third.job_id


async def test_a_retry_policy_can_hold_the_subject(core, clock, check_invariants):
    first = await enqueue(core, subject="s", attempts=2, backoff=HOLDING)
    second = await enqueue(core, subject="s")
    other = await enqueue(core, subject="t")
    (job, o) = await lease(core)
    assert (job.id, o.id) == (first.job_id, other.job_id)
    await fail_once(core, job)
    assert await lease(core) == []
    clock.advance(10 * SEC)
    (job,) = await lease(core)
    assert job.id == first.job_id
    await ok(core, job)
    assert [j.id for j in await lease(core)] == [second.job_id]
    await check_invariants()


async def test_the_queues_backoff_can_hold_the_subject(core, configure, clock, check_invariants):
    await configure("q", attempts=2, backoff=HOLDING)
    await enqueue(core, subject="s")
    await enqueue(core, subject="s")
    (job,) = await lease(core)
    await fail_once(core, job)
    assert await lease(core) == []
    await check_invariants()


@pytest.mark.parametrize("backoff", [BACKOFF, HOLDING], ids=["stepped-aside", "holding"])
async def test_a_job_waiting_to_retry_can_be_canceled(core, backoff, job_of, check_invariants):
    first = await enqueue(core, subject="s", attempts=3, backoff=backoff)
    second = await enqueue(core, subject="s")
    (job,) = await lease(core)
    await fail_once(core, job)
    await core.job_admin.cancel(NS, "q", first.job_id)
    assert (await job_of(first.job_id)).state == S.CANCELED
    assert [j.id for j in await lease(core)] == [second.job_id]
    await check_invariants()


async def test_a_permanent_error_is_not_retried(core, job_of, check_invariants):
    first = await enqueue(core, subject="s", attempts=5, backoff=BACKOFF)
    second = await enqueue(core, subject="s")
    (job,) = await lease(core)
    await fail_once(core, job, permanent=True)
    rec = await job_of(first.job_id)
    assert rec.state == S.FAILED and rec.errors[-1].permanent
    assert [j.id for j in await lease(core)] == [second.job_id]
    await check_invariants()


# -- placement -------------------------------------------------------------------------------------
async def test_a_placed_job_is_leased_only_by_its_worker_and_its_subject_waits(core, check_invariants):
    placed = await enqueue(core, "evict", subject="file-1", placement="node-b")
    behind = await enqueue(core, "read", subject="file-1")
    free = await enqueue(core, "read", subject="file-2")
    assert [j.id for j in await lease(core, worker="node-a")] == [free.job_id]
    assert await lease(core, worker="node-a") == []
    (job,) = await lease(core, worker="node-b")
    assert job.id == placed.job_id
    await ok(core, job)
    assert [j.id for j in await lease(core, worker="node-a")] == [behind.job_id]
    await check_invariants()


async def test_a_subject_batch_stops_at_a_job_placed_elsewhere(core, check_invariants):
    a = await enqueue(core, "register", subject="s")
    await enqueue(core, "register", subject="s", placement="node-b")
    assert [j.id for j in await lease(core, worker="node-a", subject_batch=5)] == [a.job_id]
    await check_invariants()


# -- metrics ---------------------------------------------------------------------------------------
async def test_queue_activity_and_metrics_count_subject_waits_and_takeovers(core, store, clock, sweep):
    from loam_common import metrics

    first = await enqueue(core, subject="s")
    await enqueue(core, subject="s")
    await enqueue(core, subject="s")
    await enqueue(core, not_before=delay(60))
    clock.advance(5 * SEC)
    act = await store.snapshot(metrics.queue_activity, NS, "q")
    assert (act.ready, act.delayed, act.subject_waiting) == (3, 1, 2)
    assert act.oldest_ready_age_ns == 5 * SEC
    (job,) = await lease(core, max_jobs=1)
    assert job.id == first.job_id
    clock.advance(2 * SEC)
    await ok(core, job)  # the second job waited 7 s for its subject
    (job,) = await lease(core, max_jobs=1)
    clock.advance(31 * SEC)
    await sweep()  # its worker stopped renewing: taken over
    act = await store.snapshot(metrics.queue_activity, NS, "q")
    assert (act.subject_waiting, act.subject_admitted_total) == (1, 1)
    assert act.subject_wait_ns_total == 7 * SEC and act.lease_takeovers_total == 1
    samples = {(s.name, s.labels): s.value for s in await store.snapshot(metrics.store_samples, [NS])}
    lab = (("ns", NS), ("queue", "q"))
    assert samples[("loam_jobs_subject_waiting", lab)] == 1
    assert samples[("loam_jobs_subject_wait_seconds_total", lab)] == 7.0
    assert samples[("loam_jobs_lease_takeovers_total", lab)] == 1
