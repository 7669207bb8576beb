"""What the core gives @loam/bullmq (adapters/bullmq) that BullMQ's backend needs, on
every backend: job keys from a per-queue counter (BullMQ's decimal auto ids), the job
key on events, enqueue answers and dependency records, a parent named by its job key,
the lease length a worker asks for (lockDuration), progress and logs from any client,
removing a job with its pending children, a queue update that names its fields, and
the worker's stalled options as queue settings (skipStalledCheck, stalledInterval)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from loam_common.errors import InvalidArgument, JobsError
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import admin, job_admin
from loam_common.jobs import states as S
from loam_common.jobs.complete import Fail, Ok, Release, Retry, WaitChildren
from loam_queue_core.rpc import CoreRpc, fill_lease

NS = "acme"
SEC = 1_000_000_000


def lease_of(job: pb.Job) -> J.Lease:
    """The Lease a worker receives for `job`."""
    lease = J.Lease()
    fill_lease(lease, job)
    return lease


def task(name: str = "t") -> pb.TaskSpec:
    return pb.TaskSpec(name=name, payload=pb.Payload(data=b"{}"))


async def test_counter_keys_are_decimal_per_queue_and_leave_custom_keys_alone(core, check_invariants):
    auto = pb.EnqueueOpts(job_key_from_counter=True)
    a = await core.jobs.enqueue(NS, "q", task(), auto)
    b = await core.jobs.enqueue(NS, "q", task(), auto)
    other = await core.jobs.enqueue(NS, "other", task(), auto)
    custom = await core.jobs.enqueue(
        NS, "q", task(), pb.EnqueueOpts(job_key="mine", job_key_from_counter=True)
    )
    bulk = await core.jobs.enqueue_bulk(NS, "q", [(task(), auto), (task(), auto)])
    assert [a.job_key, b.job_key, other.job_key, custom.job_key] == ["1", "2", "1", "mine"]
    assert [r.job_key for r in bulk] == ["3", "4"]
    assert a.job_id != "1"  # the job id stays a ULID; the key is BullMQ's id
    await check_invariants("q", "other")


async def test_events_carry_the_job_key(core, events_of):
    r = await core.jobs.enqueue(NS, "q", task(), pb.EnqueueOpts(job_key="k1"))
    evs = await events_of("q", r.job_id)
    assert evs and all(e.job_key == "k1" for e in evs)


async def test_a_child_names_its_parent_by_job_key(core, store, job_of, check_invariants):
    parent = await core.jobs.enqueue(NS, "p", task("parent"), pb.EnqueueOpts(job_key="P1"))
    [leased] = await core.jobs.lease(NS, ["p"], "w", 1)
    child = await core.jobs.enqueue(
        NS, "c", task("child"), pb.EnqueueOpts(job_key="C1", parent=pb.ParentRef(queue="p", job_id="P1"))
    )
    [dep] = await core.flows.children(NS, "p", parent.job_id)
    assert (dep.job_id, dep.job_key, dep.queue) == (child.job_id, "C1", "c")
    stored = await job_of(child.job_id, "c")
    assert stored.parents[0].job_id == parent.job_id  # the link holds the id
    done = await core.jobs.complete(NS, "p", leased.id, leased.epoch, WaitChildren())
    assert done.state == S.WAITING_CHILDREN
    await check_invariants("p", "c")


async def test_a_lease_takes_the_visibility_the_worker_asks_for(core, clock):
    await core.jobs.enqueue(NS, "q", task())
    [job] = await core.jobs.lease(NS, ["q"], "w", 1, 0, None, 2 * SEC)
    assert job.deadline_ns == clock.now_ns() + 2 * SEC


async def test_progress_and_logs_from_any_client(core, store, events_of):
    r = await core.jobs.enqueue(NS, "q", task())
    job = await store.transact(job_admin.job_set_progress, NS, "q", r.job_id, b'{"pct": 5}')
    assert job.progress == b'{"pct": 5}'
    assert [e.event for e in await events_of("q", r.job_id)][-1] == "progress"
    for i in range(4):
        n = await store.transact(job_admin.job_add_log, NS, "q", r.job_id, f"line {i}", 3)
    assert n == 3
    logs = await store.snapshot(job_admin.job_logs, NS, "q", r.job_id)
    assert [entry.line for entry in logs.lines] == ["line 1", "line 2", "line 3"]
    assert await store.transact(job_admin.job_clear_logs, NS, "q", r.job_id, 1) == 1
    logs = await store.snapshot(job_admin.job_logs, NS, "q", r.job_id)
    assert [entry.line for entry in logs.lines] == ["line 3"]


async def test_log_counts_and_trims_through_the_queues_cap_keep_and_clear(core, store, configure):
    """addLog's answer is the lines the job holds, whatever dropped the older ones: the
    queue's cap, a `keep`, a clear; lines logged after a clear count from there."""
    await configure("q", log_cap=5)
    r = await core.jobs.enqueue(NS, "q", task())

    async def log(line: str, keep: int = 0) -> int:
        return await store.transact(job_admin.job_add_log, NS, "q", r.job_id, line, keep)

    async def lines() -> list[str]:
        return [e.line for e in (await store.snapshot(job_admin.job_logs, NS, "q", r.job_id)).lines]

    assert [await log(f"a{i}") for i in range(8)] == [1, 2, 3, 4, 5, 5, 5, 5]  # the cap keeps 5
    assert await lines() == ["a3", "a4", "a5", "a6", "a7"]
    assert await log("b", keep=2) == 2 and await lines() == ["a7", "b"]
    assert await log("c", keep=10) == 3  # a keep above what is held drops nothing
    assert await store.transact(job_admin.job_clear_logs, NS, "q", r.job_id, 0) == 0
    assert await lines() == []
    assert await log("d") == 1 and await lines() == ["d"]


async def test_get_names_a_job_by_id_or_key_and_refuses_what_is_not_there(core):
    from loam_common.errors import NotFound

    rpc = CoreRpc(core)
    made = await core.jobs.enqueue(NS, "q", task(), pb.EnqueueOpts(job_key="K"))

    async def get(queue: str, ref: str) -> pb.Job:
        return (await rpc.job_admin(NS, J.JobAdminRequest(queue=queue, job=ref, op=J.JobOp(get={})))).job

    assert (await get("q", made.job_id)).id == made.job_id
    assert (await get("q", "K")).id == made.job_id
    for queue, ref in (("q", "nope"), ("other", "K")):
        with pytest.raises(NotFound):
            await get(queue, ref)
    with pytest.raises(InvalidArgument, match="job"):
        await get("q", "a/b")


async def test_a_batch_of_reports_applies_each_in_order_and_refuses_one_alone(
    core, store, events_of, check_invariants
):
    """JobAdminBatch (many processors' updateProgress and log in one call): each item is
    answered as JobAdmin answers it; a refused item gets its error in its slot, changes
    nothing, and the items after it still apply."""
    rpc = CoreRpc(core)
    a = await core.jobs.enqueue(NS, "q", task())
    b = await core.jobs.enqueue(NS, "q", task(), pb.EnqueueOpts(job_key="B"))
    Item, Op = J.JobAdminBatchItem, J.JobOp
    r = await rpc.job_admin_batch(NS, J.JobAdminBatchRequest(queue="q", items=[
        Item(job=a.job_id, op=Op(progress=Op.Progress(progress=b'{"pct": 5}'))),
        Item(job="B", op=Op(add_log=Op.AddLog(line="b0"))),  # by its job key
        Item(job="nope", op=Op(progress=Op.Progress(progress=b"1"))),
        Item(job=a.job_id, op=Op(progress=Op.Progress(progress=b"{not json"))),
        Item(job="B", op=Op(add_log=Op.AddLog(line="b1"))),
        Item(job="B", op=Op(add_log=Op.AddLog(line="b2", keep=2))),
    ]))  # fmt: skip
    kinds = [x.WhichOneof("result") for x in r.results]
    assert kinds == ["response", "response", "error", "error", "response", "response"]
    assert not r.results[0].response.HasField("job")  # a progress is not answered with the job
    assert [x.response.log_count for x in r.results[1::4]] == [1, 2]
    assert (r.results[2].error.code, r.results[3].error.code) == ("not_found", "invalid_argument")
    assert (
        await core.job_admin.get(NS, "q", a.job_id)
    ).progress == b'{"pct": 5}'  # the refused one did not land
    lines = (await store.snapshot(job_admin.job_logs, NS, "q", b.job_id)).lines
    assert [x.line for x in lines] == ["b1", "b2"]
    assert [e.event for e in await events_of("q", a.job_id)].count("progress") == 1
    await check_invariants("q")


@pytest.mark.parametrize(
    ("item", "field"),
    [
        (J.JobAdminBatchItem(job="", op=J.JobOp(progress=J.JobOp.Progress(progress=b"1"))), "items[1].job"),
        (J.JobAdminBatchItem(job="x", op=J.JobOp(remove=J.JobOp.Remove())), "items[1].op"),
        (J.JobAdminBatchItem(job="x"), "items[1].op"),
    ],
)
async def test_a_malformed_report_refuses_the_whole_batch(core, store, item, field):
    rpc = CoreRpc(core)
    a = await core.jobs.enqueue(NS, "q", task())
    log = J.JobAdminBatchItem(job=a.job_id, op=J.JobOp(add_log=J.JobOp.AddLog(line="first")))
    with pytest.raises(InvalidArgument, match=re.escape(field)):
        await rpc.job_admin_batch(NS, J.JobAdminBatchRequest(queue="q", items=[log, item]))
    assert (await store.snapshot(job_admin.job_logs, NS, "q", a.job_id)).lines == []
    with pytest.raises(InvalidArgument, match="queue"):
        await rpc.job_admin_batch(NS, J.JobAdminBatchRequest(queue="", items=[log]))


async def test_remove_with_children_takes_the_tree_unless_a_job_of_it_is_active(
    core, store, job_of, check_invariants
):
    from loam_common.errors import InvalidState

    parent = await core.jobs.enqueue(NS, "p", task("parent"), pb.EnqueueOpts(job_key="P"))
    kids = [
        await core.jobs.enqueue(
            NS, "c", task(), pb.EnqueueOpts(job_key=f"K{i}", parent=pb.ParentRef(queue="p", job_id="P"))
        )
        for i in range(2)
    ]
    [running] = await core.jobs.lease(NS, ["c"], "w", 1)
    try:
        await store.transact(job_admin.job_remove, NS, "p", parent.job_id, False, True)
    except InvalidState:
        pass
    else:
        raise AssertionError("a tree with an active job was removed")
    assert await job_of(parent.job_id, "p") is not None
    await core.jobs.complete(NS, "c", running.id, running.epoch, Ok())  # processed children go too
    await store.transact(job_admin.job_remove, NS, "p", parent.job_id, False, True)
    assert await job_of(parent.job_id, "p") is None
    assert [await job_of(k.job_id, "c") for k in kids] == [None, None]
    await check_invariants("p", "c")


async def test_remove_child_dependency_releases_a_parent_left_with_nothing_pending(core, store, job_of):
    parent = await core.jobs.enqueue(NS, "p", task("parent"), pb.EnqueueOpts(job_key="P"))
    [leased] = await core.jobs.lease(NS, ["p"], "w", 1)
    child = await core.jobs.enqueue(
        NS, "c", task(), pb.EnqueueOpts(job_key="K", parent=pb.ParentRef(queue="p", job_id="P"))
    )
    await core.jobs.complete(NS, "p", leased.id, leased.epoch, WaitChildren())
    assert await store.transact(job_admin.job_remove_child_dependency, NS, "c", child.job_id)
    assert (await job_of(parent.job_id, "p")).state == S.WAITING
    assert not (await job_of(child.job_id, "c")).parents
    assert not await store.transact(job_admin.job_remove_child_dependency, NS, "c", child.job_id)


async def test_a_taken_key_keeps_the_first_job_when_asked(core, events_of):
    first = await core.jobs.enqueue(NS, "q", task("a"), pb.EnqueueOpts(job_key="k", job_key_keeps_first=True))
    again = await core.jobs.enqueue(
        NS,
        "q",
        pb.TaskSpec(name="b", payload=pb.Payload(data=b"{}")),
        pb.EnqueueOpts(job_key="k", job_key_keeps_first=True),
    )
    assert (again.job_id, again.created, again.job_key) == (first.job_id, False, "k")
    assert [e.event for e in await events_of("q", first.job_id)][-1] == "duplicated"


async def test_the_job_a_dedup_id_points_at(core, store):
    r = await core.jobs.enqueue(NS, "q", task(), pb.EnqueueOpts(job_key="d1", dedup=pb.Dedup(id="x")))
    job = await store.snapshot(job_admin.job_get_dedup, NS, "q", "x")
    assert job.id == r.job_id
    await store.transact(job_admin.job_remove_dedup_key, NS, "q", "x")
    from loam_common.errors import NotFound

    try:
        await store.snapshot(job_admin.job_get_dedup, NS, "q", "x")
    except NotFound:
        pass
    else:
        raise AssertionError("a removed dedup id still points at a job")


async def test_retry_can_keep_the_attempts_spent(core, store):
    r = await core.jobs.enqueue(NS, "q", task())
    [job] = await core.jobs.lease(NS, ["q"], "w", 1)
    await core.jobs.complete(NS, "q", job.id, job.epoch, Retry(pb.JobError(code="e", message="x")))
    kept = await store.transact(job_admin.job_retry, NS, "q", r.job_id, True)
    assert kept.attempt == 1  # exhausted by its retry: that run is counted already
    [job] = await core.jobs.lease(NS, ["q"], "w", 1)
    await core.jobs.complete(NS, "q", job.id, job.epoch, Ok())
    again = await store.transact(job_admin.job_retry, NS, "q", r.job_id, True)
    assert again.attempt == 2  # a completed run counts as an attempt when kept
    [job] = await core.jobs.lease(NS, ["q"], "w", 1)
    await core.jobs.complete(NS, "q", job.id, job.epoch, Ok())
    reset = await store.transact(job_admin.job_retry, NS, "q", r.job_id)
    assert reset.attempt == 0


async def test_an_outcome_can_bring_the_retention(core, job_of):
    r = await core.jobs.enqueue(NS, "q", task())
    [job] = await core.jobs.lease(NS, ["q"], "w", 1)
    await core.jobs.complete(NS, "q", job.id, job.epoch, Ok(retention=pb.Retention(completed_count=0)))
    assert await job_of(r.job_id) is None


async def test_retention_ages_go_by_the_workers_clock_when_the_outcome_brings_it(
    core, jobs_of, check_invariants
):
    """BullMQ judges removeOnComplete {age} by the worker's timestamp: a worker whose clock
    says 1 s passed between finishes keeps only the jobs of the last `age` seconds, though
    the store's clock did not move."""
    keep_3s = pb.Retention(completed_age_ns=3 * SEC)
    for i in range(6):
        await core.jobs.enqueue(NS, "q", task())
        [job] = await core.jobs.lease(NS, ["q"], "w", 1)
        await core.jobs.complete(NS, "q", job.id, job.epoch, Ok(retention=keep_3s, clock_ns=i * SEC))
    left = await jobs_of()
    assert sorted(j.finished_ns for j in left.values()) == [3 * SEC, 4 * SEC, 5 * SEC]  # 2 s is 3 s old
    await check_invariants()
    # Without the worker's clock, ages go by the store's: nothing here is 3 s old.
    await core.jobs.enqueue(NS, "q", task())
    [job] = await core.jobs.lease(NS, ["q"], "w", 1)
    await core.jobs.complete(NS, "q", job.id, job.epoch, Ok(retention=keep_3s))
    assert len(await jobs_of()) == 4


async def test_one_finish_by_the_workers_clock_removes_every_job_past_the_age(
    core, clock, jobs_of, check_invariants
):
    """Ages judged by the worker's clock: a finish that brings a clock far ahead removes
    every older job at once (more than one page of the index), oldest first, and stops at
    the first job finished within the age."""
    keep_100s = pb.Retention(completed_age_ns=100 * SEC)
    for i in range(25):
        await core.jobs.enqueue(NS, "q", task())
        [job] = await core.jobs.lease(NS, ["q"], "w", 1)
        # 20 jobs finished at 1..20 s, the next four at 301..304 s by the worker's clock
        at = (i + 1) * SEC if i < 20 else (281 + i) * SEC
        await core.jobs.complete(NS, "q", job.id, job.epoch, Ok(retention=keep_100s, clock_ns=at))
        clock.advance(SEC // 1000)  # the store's clock orders the index
    left = await jobs_of()
    # the 21st finish (301 s) removed the 20 jobs older than 201 s; none since was due
    assert sorted(j.finished_ns // SEC for j in left.values()) == [301, 302, 303, 304, 305]
    await check_invariants()


async def test_a_finished_job_records_the_workers_clock_when_the_outcome_brings_it(core, job_of):
    """BullMQ's finishedOn is the worker's timestamp: a completion or a failure that
    brings the worker's clock records it as the job's finished time; one that does not,
    the store's."""
    finished = {}
    for name, outcome in (("ok", Ok(clock_ns=7 * SEC)), ("fail", Fail(pb.JobError(code="x"), clock_ns=9 * SEC)),
                          ("store", Ok())):  # fmt: skip
        r = await core.jobs.enqueue(NS, "q", task())
        [job] = await core.jobs.lease(NS, ["q"], "w", 1)
        await core.jobs.complete(NS, "q", job.id, job.epoch, outcome)
        stored = await job_of(r.job_id)
        finished[name] = (S.name(stored.state), stored.finished_ns)
    assert finished["ok"] == ("completed", 7 * SEC) and finished["fail"] == ("failed", 9 * SEC)
    assert finished["store"][0] == "completed" and finished["store"][1] not in (0, 7 * SEC, 9 * SEC)


async def test_rate_limit_for_blocks_leases_and_zero_lifts_it(core, store, clock):
    await core.jobs.enqueue(NS, "q", task())
    await store.transact(admin.queue_rate_limit_for, NS, "q", 2 * SEC)
    assert await core.jobs.lease(NS, ["q"], "w", 1) == []
    ttl, _ = await store.snapshot(admin.queue_rate_window, NS, "q")
    assert ttl == 2 * SEC
    await store.transact(admin.queue_rate_limit_for, NS, "q", 0)
    assert len(await core.jobs.lease(NS, ["q"], "w", 1)) == 1


async def test_rate_limit_for_replaces_the_open_window(core, store, clock, configure):
    await configure("q", ns=NS, rate_limit=pb.RateLimit(max=1, duration_ns=SEC))
    for _ in range(3):
        await core.jobs.enqueue(NS, "q", task())
    assert len(await core.jobs.lease(NS, ["q"], "w", 5)) == 1  # the window is used up for 1 s
    await store.transact(admin.queue_rate_limit_for, NS, "q", SEC // 1000)
    ttl, _ = await store.snapshot(admin.queue_rate_window, NS, "q")
    assert ttl == SEC // 1000  # BullMQ's rateLimit(1): 1 ms, not what was left of the window
    clock.advance(SEC // 100)
    assert len(await core.jobs.lease(NS, ["q"], "w", 5)) == 1  # a fresh window, with its own max


async def test_keep_waiting_policy_waits_on_a_failed_child_and_forgets_a_removed_one(
    core, store, job_of, check_invariants
):
    keep = {"queue": "p", "job_id": "P", "keep_waiting_on_failure": True}
    parent = await core.jobs.enqueue(NS, "p", task("parent"), pb.EnqueueOpts(job_key="P"))
    [leased] = await core.jobs.lease(NS, ["p"], "w", 1)
    a = await core.jobs.enqueue(NS, "c", task(), pb.EnqueueOpts(job_key="A", parent=pb.ParentRef(**keep)))
    await core.jobs.enqueue(NS, "c", task(), pb.EnqueueOpts(job_key="B", parent=pb.ParentRef(**keep)))
    await core.jobs.complete(NS, "p", leased.id, leased.epoch, WaitChildren())
    [ja, jb] = await core.jobs.lease(NS, ["c"], "w", 2)
    await core.jobs.complete(NS, "c", ja.id, ja.epoch, Fail(pb.JobError(code="e", message="boom")))
    p = await job_of(parent.job_id, "p")
    assert (p.state, p.pending_children) == (S.WAITING_CHILDREN, 2)  # the failed child still counts
    await store.transact(job_admin.job_remove, NS, "c", a.job_id)  # removed: forgotten
    await core.jobs.complete(NS, "c", jb.id, jb.epoch, Ok())
    assert (await job_of(parent.job_id, "p")).state == S.WAITING
    await check_invariants("p", "c")


async def test_the_finish_that_empties_a_queue_emits_drained(core, events_of):
    for _ in range(2):
        await core.jobs.enqueue(NS, "q", task())
    jobs = await core.jobs.lease(NS, ["q"], "w", 2)
    for j in jobs:
        await core.jobs.complete(NS, "q", j.id, j.epoch, Ok())
    drained = [e for e in await events_of("q") if e.event == "drained"]
    assert [e.detail for e in drained] == ["idle"]


async def test_a_deferred_stalled_failure_rides_on_the_next_lease(core, configure, clock, sweep, job_of):
    await configure("q", ns=NS, max_stalled=0, defer_stalled_failure=True)
    r = await core.jobs.enqueue(NS, "q", task())
    await core.jobs.lease(NS, ["q"], "w", 1, 0, None, SEC)
    clock.advance(2 * SEC)
    await sweep()
    job = await job_of(r.job_id)
    assert (job.state, job.deferred_failure) == (S.WAITING, "job stalled more than allowable limit")
    [again] = await core.jobs.lease(NS, ["q"], "w", 1)
    assert lease_of(again).deferred_failure == "job stalled more than allowable limit"


async def test_skip_stalled_check_leaves_an_expired_lease_to_its_worker(
    core, configure, clock, sweep, job_of
):
    """BullMQ's skipStalledCheck: the sweep never reclaims the queue's leases, so the
    worker that was slow to renew still completes its job."""
    await configure("q", ns=NS, skip_stalled_check=True)
    r = await core.jobs.enqueue(NS, "q", task())
    [job] = await core.jobs.lease(NS, ["q"], "w", 1, 0, None, SEC)
    clock.advance(60 * SEC)
    assert (await sweep()).stalled == 0
    assert (await job_of(r.job_id)).state == S.ACTIVE
    done = await core.jobs.complete(NS, "q", job.id, job.epoch, Ok())
    assert done.state == S.COMPLETED


async def test_a_stalled_interval_reclaims_at_the_first_check_after_expiry(
    core, configure, clock, sweep, job_of
):
    """BullMQ's stalledInterval: the queue's leases are checked at multiples of it, so an
    expired lease is reclaimed at the next check, not the moment it expires."""
    interval = 10 * SEC
    await configure("q", ns=NS, stalled_interval_ns=interval)
    clock.set(clock.now_ns() - clock.now_ns() % interval + 1)  # just after a check
    r = await core.jobs.enqueue(NS, "q", task())
    await core.jobs.lease(NS, ["q"], "w", 1, 0, None, SEC)
    clock.advance(5 * SEC)  # expired 4 s ago; the next check is 5 s away
    assert (await sweep()).stalled == 0
    assert (await job_of(r.job_id)).state == S.ACTIVE
    clock.advance(5 * SEC)  # the check
    assert (await sweep()).stalled == 1
    assert (await job_of(r.job_id)).stalled == 1


async def test_a_negative_stalled_interval_is_refused(core, store):
    with pytest.raises(InvalidArgument, match="stalled_interval_ns"):
        await store.transact(admin.queue_create, NS, "q", pb.QueueConfig(stalled_interval_ns=-1))


async def test_a_retry_that_resets_the_attempts_marks_the_epoch_and_leases_carry_it(core, store):
    r = await core.jobs.enqueue(NS, "q", task())
    [job] = await core.jobs.lease(NS, ["q"], "w", 1)
    await core.jobs.complete(NS, "q", job.id, job.epoch, Fail(pb.JobError(code="e", message="boom")))
    reset = await store.transact(job_admin.job_retry, NS, "q", r.job_id)
    assert reset.retry_epoch == job.epoch  # leases after this one are the new starts
    [again] = await core.jobs.lease(NS, ["q"], "w", 1)
    lease = lease_of(again)
    assert (lease.retry_epoch, lease.token.epoch) == (job.epoch, job.epoch + 1)
    assert lease.last_error.message == "boom"  # a retried job brings its last error


async def test_a_retry_to_ready_comes_after_the_delayed_jobs_already_due(core, clock):
    first = await core.jobs.enqueue(NS, "q", task("first"), pb.EnqueueOpts(attempts=2))
    [job] = await core.jobs.lease(NS, ["q"], "w", 1)
    delayed = pb.EnqueueOpts(not_before=pb.Delay(delay_ns=SEC))
    due = [(await core.jobs.enqueue(NS, "q", task(f"d{i}"), delayed)).job_id for i in range(2)]
    clock.advance(2 * SEC)  # due, and no sweep has promoted them yet
    await core.jobs.complete(NS, "q", job.id, job.epoch, Retry(pb.JobError(code="e", message="x"), 0))
    order = [j.id for j in await core.jobs.lease(NS, ["q"], "w", 3)]
    assert order == [*due, first.job_id]


async def test_a_released_job_keeps_its_place(core):
    ids = [
        (await core.jobs.enqueue(NS, "q", task(f"j{i}"), pb.EnqueueOpts(priority=10))).job_id
        for i in range(3)
    ]
    [first] = await core.jobs.lease(NS, ["q"], "w", 1)
    assert first.id == ids[0]
    await core.jobs.complete(NS, "q", first.id, first.epoch, Release())
    assert [j.id for j in await core.jobs.lease(NS, ["q"], "w", 3)] == ids  # not behind the others


async def test_per_minute_metrics_by_the_workers_clock(core, store):
    from loam_common.jobs.complete import queue_minute_metrics

    minute = 60_000
    t0 = 1_486_459_440_000  # on a minute boundary, as the worker's clock says
    # (the worker's time of each finish, the outcome): two in the first minute, one two
    # minutes later, then a failure
    finishes = [(t0, "ok"), (t0 + 1_000, "ok"), (t0 + 2 * minute + 5, "ok"), (t0 + 3 * minute, "fail")]
    for at_ms, kind in finishes:
        await core.jobs.enqueue(NS, "q", task())
        [job] = await core.jobs.lease(NS, ["q"], "w", 1)
        out = Ok() if kind == "ok" else Fail(pb.JobError(code="e", message="x"))
        out = dataclasses.replace(out, metrics=(at_ms, 10))
        await core.jobs.complete(NS, "q", job.id, job.epoch, out)
    done = await store.snapshot(queue_minute_metrics, NS, "q", "completed")
    # 2 jobs before the minute turned, then a minute with none (newest first)
    assert (done.count, list(done.points), done.prev_count, done.prev_ms) == (
        3,
        [0, 2],
        2,
        t0 + 2 * minute + 5,
    )
    failed = await store.snapshot(queue_minute_metrics, NS, "q", "failed")
    assert (failed.count, list(failed.points)) == (1, [])
    await core.jobs.enqueue(NS, "q", task())
    [job] = await core.jobs.lease(NS, ["q"], "w", 1)
    await core.jobs.complete(
        NS, "q", job.id, job.epoch, dataclasses.replace(Ok(), metrics=(t0 + 60 * minute, 3))
    )
    capped = await store.snapshot(queue_minute_metrics, NS, "q", "completed")
    assert list(capped.points) == [0, 0, 1]  # at most max_data_points, the newest kept


async def test_a_counter_key_taken_by_hand_returns_the_job_that_holds_it(core, events_of, check_invariants):
    by_hand = await core.jobs.enqueue(NS, "q", task("mine"), pb.EnqueueOpts(job_key="2"))
    auto = pb.EnqueueOpts(job_key_from_counter=True)
    bulk = await core.jobs.enqueue_bulk(NS, "q", [(task(), auto), (task(), auto), (task(), auto)])
    assert [(r.job_key, r.created) for r in bulk] == [("1", True), ("2", False), ("3", True)]
    assert bulk[1].job_id == by_hand.job_id
    assert "duplicated" in [e.event for e in await events_of("q", by_hand.job_id)]
    counts = await check_invariants("q")
    assert counts[S.WAITING] == 3


async def test_a_job_refused_for_its_parent_takes_no_counter_key(core, check_invariants):
    # As in BullMQ, whose add checks the parent before it counts (addStandardJob.lua).
    auto = pb.EnqueueOpts(job_key_from_counter=True)
    orphan = pb.EnqueueOpts(job_key_from_counter=True, parent=pb.ParentRef(queue="q", job_id="gone"))
    bulk = await core.jobs.enqueue_bulk(NS, "q", [(task(), auto), (task(), orphan), (task(), auto)])
    assert isinstance(bulk[1], JobsError)
    assert [bulk[0].job_key, bulk[2].job_key] == ["1", "2"]
    assert (await core.jobs.enqueue(NS, "q", task(), auto)).job_key == "3"
    counts = await check_invariants("q")
    assert counts[S.WAITING] == 3


async def test_an_update_naming_fields_leaves_the_other_settings_alone(core):
    # A worker applying its options must not undo a rate limit set since it read the config.
    rpc = CoreRpc(core)
    await core.jobs.enqueue(NS, "q", task())
    limit = J.QueueOp.SetRateLimit(rate_limit=pb.RateLimit(max=1, duration_ns=SEC))
    await rpc.queue_admin(NS, J.QueueAdminRequest(queue="q", op=J.QueueOp(set_rate_limit=limit)))
    only = J.QueueOp.Update(
        config=pb.QueueConfig(max_stalled=3, defer_stalled_failure=True, attempts=9),
        fields=["max_stalled", "defer_stalled_failure"],
    )
    r = await rpc.queue_admin(NS, J.QueueAdminRequest(queue="q", op=J.QueueOp(update=only)))
    assert (r.config.max_stalled, r.config.defer_stalled_failure) == (3, True)
    assert (r.config.rate_limit.max, r.config.rate_limit.duration_ns) == (1, SEC)  # kept
    assert r.config.attempts == 1  # not named: unchanged
