"""What a producer and a worker rely on, through QueueCore, on every backend: order,
delays, the three uniqueness mechanisms, retries, dead letters, the lease and its
fence, the stalled sweep, reports, payload blobs, long-polls, input checks, the
outbox, per-subject serial jobs and sharding. Time moves only by the manual clock."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from loam_common import keys, validate
from loam_common.errors import (
    AlreadyExists,
    Fenced,
    IdempotencyConflict,
    InvalidArgument,
    InvalidState,
    PayloadTooLarge,
)
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import admin, dlq
from loam_common.jobs import states as S
from loam_common.jobs.complete import Delay, Fail, Ok, RateLimited, Release, Retry
from loam_common.jobs.new_job import Enqueued
from loam_common.jobs.sweeps import STALLED_MESSAGE
from loam_common.store import RESERVED_PREFIX
from loam_queue_core import QueueCore

NS = "acme"
SEC = 1_000_000_000


def task(name: str = "t", data: bytes = b"x") -> pb.TaskSpec:
    return pb.TaskSpec(name=name, payload=pb.Payload(data=data))


def err(message: str = "boom") -> pb.JobError:
    return pb.JobError(code="error", message=message)


async def enqueue(core: QueueCore, queue: str = "q", name: str = "t", data: bytes = b"x", **opts) -> Enqueued:
    return await core.jobs.enqueue(NS, queue, task(name, data), pb.EnqueueOpts(**opts))


async def lease(
    core: QueueCore, queue: str = "q", max_jobs: int = 10, worker: str = "w1", **kw
) -> list[pb.Job]:
    return await core.jobs.lease(NS, [queue], worker, max_jobs, **kw)


async def lease_one(core: QueueCore, queue: str = "q", **kw) -> pb.Job:
    jobs = await lease(core, queue, 1, **kw)
    assert len(jobs) == 1, f"expected one job, got {[j.id for j in jobs]}"
    return jobs[0]


async def ok(core: QueueCore, job: pb.Job, queue: str = "q", result: bytes | None = None):
    return await core.jobs.complete(
        NS, queue, job.id, job.epoch, Ok(pb.Payload(data=result) if result is not None else None)
    )


async def stored(store) -> list[tuple[bytes, bytes]]:
    """Every key the jobs code wrote (the runner's own `\\x00` keys left out)."""
    rows = await store.snapshot(lambda tx: tx.scan(b"", b"\xff\xff"))
    return [(k, v) for k, v in rows if not k.startswith(RESERVED_PREFIX)]


async def drain(core: QueueCore, queue: str = "q") -> list[pb.Job]:
    """Lease everything ready, one at a time, completing each."""
    out = []
    while jobs := await lease(core, queue, 1):
        out.extend(jobs)
        await ok(core, jobs[0], queue)
    return out


# -- order ----------------------------------------------------------------------------------------
async def test_fifo_band_first_then_lower_priority_number_ties_fifo(core, check_invariants):
    ids = {}
    for label, prio in [("p5a", 5), ("f1", 0), ("p1a", 1), ("p5b", 5), ("f2", 0), ("p1b", 1), ("f3", 0)]:
        ids[(await enqueue(core, data=label.encode(), priority=prio)).job_id] = label
    first = await lease(core, max_jobs=2)
    rest = await lease(core, max_jobs=10)
    assert [ids[j.id] for j in first + rest] == ["f1", "f2", "f3", "p1a", "p1b", "p5a", "p5b"]
    assert [j.task.payload.data.decode() for j in first + rest] == [ids[j.id] for j in first + rest]
    assert (await check_invariants())[S.ACTIVE] == 7


async def test_lifo_serves_newest_first(core, check_invariants):
    ids = [(await enqueue(core, data=str(i).encode(), lifo=True)).job_id for i in range(4)]
    got = [j.id for j in await lease(core, max_jobs=2)] + [j.id for j in await lease(core)]
    assert got == list(reversed(ids))
    await check_invariants()


async def test_a_lifo_job_is_served_before_waiting_fifo_jobs(core, check_invariants):
    fifo = [(await enqueue(core, data=b"f")).job_id for _ in range(3)]
    lifo = (await enqueue(core, data=b"l", lifo=True)).job_id
    prio = (await enqueue(core, data=b"p", priority=1)).job_id
    got = [j.id for j in await lease(core, max_jobs=10)]
    assert got == [lifo, *fifo, prio]  # BullMQ: a LIFO job goes to the head of the wait list
    await check_invariants()


async def test_prioritized_jobs_are_reported_prioritized(core, jobs_of, check_invariants):
    a = await enqueue(core, priority=3)
    b = await enqueue(core)
    assert (a.state, b.state) == (S.PRIORITIZED, S.WAITING)
    counts = await check_invariants()
    assert counts[S.PRIORITIZED] == 1 and counts[S.WAITING] == 1


# -- delays -----------------------------------------------------------------------------------------
async def test_delayed_job_is_not_leased_before_due_and_promoted_on_lease(
    core, clock, job_of, check_invariants
):
    e = await enqueue(core, not_before=pb.Delay(delay_ns=10 * SEC))
    assert e.state == S.DELAYED
    assert (await check_invariants())[S.DELAYED] == 1
    assert await lease(core) == []
    clock.advance(10 * SEC - 1)
    assert await lease(core) == []
    clock.advance(1)
    job = await lease_one(core)
    assert job.id == e.job_id
    assert (await job_of(e.job_id)).state == S.ACTIVE
    assert (await check_invariants())[S.ACTIVE] == 1


async def test_delay_at_absolute_time(core, clock, check_invariants):
    at = clock.now_ns() + 60 * SEC
    e = await enqueue(core, not_before=pb.Delay(at_ns=at))
    clock.advance(59 * SEC)
    assert await lease(core) == []
    clock.advance(SEC)
    assert (await lease_one(core)).id == e.job_id
    await check_invariants()


async def test_due_delayed_jobs_keep_their_due_order(core, clock, check_invariants):
    late = await enqueue(core, not_before=pb.Delay(delay_ns=5 * SEC))
    early = await enqueue(core, not_before=pb.Delay(delay_ns=2 * SEC))
    clock.advance(10 * SEC)
    assert [j.id for j in await lease(core)] == [early.job_id, late.job_id]
    await check_invariants()


# -- job_key -------------------------------------------------------------------------------------------
async def test_job_key_same_params_returns_existing(core, jobs_of, check_invariants):
    first = await enqueue(core, job_key="order-1")
    again = await enqueue(core, job_key="order-1")
    assert first.created and not again.created
    assert again.job_id == first.job_id
    assert len(await jobs_of()) == 1
    await check_invariants()


async def test_job_key_different_params_is_already_exists_and_changes_nothing(
    core, store, jobs_of, check_invariants
):
    first = await enqueue(core, job_key="order-1", data=b"a")
    before = await store.snapshot(lambda tx: tx.scan(b"t/", b"t0"))
    with pytest.raises(AlreadyExists) as ei:
        await enqueue(core, job_key="order-1", data=b"b")
    assert ei.value.existing == first.job_id
    with pytest.raises(AlreadyExists):
        await enqueue(core, job_key="order-1", data=b"a", priority=4)
    assert await store.snapshot(lambda tx: tx.scan(b"t/", b"t0")) == before
    assert (await jobs_of())[first.job_id].task.payload.data == b"a"
    await check_invariants()


async def test_job_key_is_free_again_once_the_job_is_removed(core, configure, check_invariants):
    await configure("q", retention={"completed_count": 0})
    first = await enqueue(core, job_key="k")
    await ok(core, await lease_one(core))
    second = await enqueue(core, job_key="k", data=b"other")
    assert second.created and second.job_id != first.job_id
    await check_invariants()


# -- idempotency key ---------------------------------------------------------------------------------
async def test_idempotent_retry_returns_the_first_answer(core, jobs_of, check_invariants):
    first = await enqueue(core, idempotency=pb.Idempotency(key="req-1"))
    again = await enqueue(core, idempotency=pb.Idempotency(key="req-1"))
    assert first.created
    assert (again.job_id, again.state) == (first.job_id, first.state)
    assert len(await jobs_of()) == 1
    await check_invariants()


async def test_idempotent_retry_returns_the_first_answer_created_too(core):
    first = await enqueue(core, idempotency=pb.Idempotency(key="req-1"))
    again = await enqueue(core, idempotency=pb.Idempotency(key="req-1"))
    assert again == first


async def test_idempotent_retry_of_a_job_keyed_from_the_counter_returns_the_first_answer(core, jobs_of):
    # The record compares the request as sent, not the job key the server gave it.
    first = await enqueue(core, job_key_from_counter=True, idempotency=pb.Idempotency(key="req-1"))
    again = await enqueue(core, job_key_from_counter=True, idempotency=pb.Idempotency(key="req-1"))
    assert first.created and first.job_key
    assert (again.job_id, again.state) == (first.job_id, first.state)
    assert len(await jobs_of()) == 1


async def test_idempotency_key_for_a_different_request_conflicts_and_changes_nothing(
    core, store, check_invariants
):
    await enqueue(core, data=b"a", idempotency=pb.Idempotency(key="req-1"))
    before = await store.snapshot(lambda tx: tx.scan(b"t/", b"t0"))
    with pytest.raises(IdempotencyConflict):
        await enqueue(core, data=b"b", idempotency=pb.Idempotency(key="req-1"))
    assert await store.snapshot(lambda tx: tx.scan(b"t/", b"t0")) == before
    await check_invariants()


async def test_an_idempotent_retry_compares_every_option_but_the_key_itself(core, jobs_of):
    # The first request's options are the key alone (the SDK's default); a retry that adds
    # an option is another request, one that only names another TTL for the key is not.
    first = await enqueue(core, idempotency=pb.Idempotency(key="req-1"))
    with pytest.raises(IdempotencyConflict):
        await enqueue(core, priority=3, idempotency=pb.Idempotency(key="req-1"))
    again = await enqueue(core, idempotency=pb.Idempotency(key="req-1", ttl_ns=3600 * SEC))
    assert again == first
    prioritized = await enqueue(core, priority=3, idempotency=pb.Idempotency(key="req-2"))
    with pytest.raises(IdempotencyConflict):
        await enqueue(core, idempotency=pb.Idempotency(key="req-2"))
    assert set(await jobs_of()) == {first.job_id, prioritized.job_id}


async def test_idempotency_record_expires_after_its_ttl_and_the_sweep_drops_it(
    core, store, clock, sweep, check_invariants
):
    k = keys.QueueKeys(NS, "q")
    first = await enqueue(core, data=b"a", idempotency=pb.Idempotency(key="req-1", ttl_ns=60 * SEC))
    clock.advance(59 * SEC)
    with pytest.raises(IdempotencyConflict):
        await enqueue(core, data=b"b", idempotency=pb.Idempotency(key="req-1", ttl_ns=60 * SEC))
    clock.advance(2 * SEC)
    await sweep()

    def records(tx):  # the records and their expiry index (`Q ik/`, `Q ike/`; format 2's `i/`, `ie/`)
        return tx.scan(k.q + b"i", k.q + b"j")

    assert await store.snapshot(records) == []
    second = await enqueue(core, data=b"b", idempotency=pb.Idempotency(key="req-1"))
    assert second.created and second.job_id != first.job_id
    await check_invariants()


async def test_an_idempotent_retry_of_a_big_payload_leaves_no_blob_behind(core, tmp_path):
    # The retry's payload went to the blob store before its transaction found the key:
    # the answer names the first call's job, so the retry's blob is nobody's.
    data = os.urandom(16 * 1024 + 1)
    first = await enqueue(core, data=data, idempotency=pb.Idempotency(key="req-1"))
    again = await enqueue(core, data=data, idempotency=pb.Idempotency(key="req-1"))
    assert again == first
    assert len([p for p in (tmp_path / "blobs").rglob("*") if p.is_file()]) == 1


async def test_a_job_key_sent_again_with_the_same_big_payload_is_the_same_request(core, jobs_of, tmp_path):
    data = os.urandom(16 * 1024 + 1)
    first = await enqueue(core, data=data, job_key="k")
    again = await enqueue(core, data=data, job_key="k")
    assert (again.job_id, again.created) == (first.job_id, False)
    with pytest.raises(AlreadyExists):
        await enqueue(core, data=os.urandom(16 * 1024 + 1), job_key="k")
    assert len(await jobs_of()) == 1
    assert len([p for p in (tmp_path / "blobs").rglob("*") if p.is_file()]) == 1


# -- a bulk call's idempotency key -------------------------------------------------------------------
def bulk_items(*names: str, **opts) -> list[tuple[pb.TaskSpec, pb.EnqueueOpts | None]]:
    return [(task(n), pb.EnqueueOpts(**opts) if opts else None) for n in names]


async def enqueue_bulk(core: QueueCore, items, key: str | None = "call-1", ttl_ns: int = 0, queue: str = "q"):
    call = pb.Idempotency(key=key, ttl_ns=ttl_ns) if key is not None else None
    return await core.jobs.enqueue_bulk(NS, queue, items, call)


async def test_a_bulk_calls_retry_gets_its_first_answers_item_for_item_and_adds_nothing(
    core, jobs_of, check_invariants
):
    await enqueue(core, job_key="taken")
    items = [
        (task("a"), None),
        (task("b"), pb.EnqueueOpts(job_key="taken")),
        (task("c"), pb.EnqueueOpts(priority=2)),
    ]
    first = await enqueue_bulk(core, items)
    assert first[0].created and first[2].state == S.PRIORITIZED
    assert isinstance(first[1], AlreadyExists)
    before = set(await jobs_of())
    again = await enqueue_bulk(core, [(task("a"), None), (task("b"), pb.EnqueueOpts(job_key="taken")),
                                      (task("c"), pb.EnqueueOpts(priority=2))])  # fmt: skip
    assert again[0] == first[0] and again[2] == first[2]
    assert (again[1].code, again[1].message) == (first[1].code, first[1].message)
    assert set(await jobs_of()) == before and len(before) == 3
    await check_invariants()


async def test_a_bulk_call_of_no_jobs_with_a_key_writes_nothing(core, store):
    assert await enqueue_bulk(core, []) == []
    assert await stored(store) == []


async def test_a_bulk_calls_jobs_carry_no_key_of_their_own(core, job_of):
    (e,) = await enqueue_bulk(core, bulk_items("a"))
    assert not (await job_of(e.job_id)).opts.HasField("idempotency")


async def test_a_bulk_calls_key_with_other_jobs_is_refused_and_changes_nothing(core, store, check_invariants):
    await enqueue_bulk(core, bulk_items("a", "b"))
    before = await store.snapshot(lambda tx: tx.scan(b"t/", b"t0"))
    for other in (
        bulk_items("a"),
        bulk_items("a", "b", "c"),
        bulk_items("b", "a"),
        bulk_items("a", "b", priority=1),
    ):
        with pytest.raises(IdempotencyConflict):
            await enqueue_bulk(core, other)
    with pytest.raises(IdempotencyConflict):  # one job's enqueue under the call's key
        await enqueue(core, name="a", idempotency=pb.Idempotency(key="call-1"))
    assert await store.snapshot(lambda tx: tx.scan(b"t/", b"t0")) == before
    await check_invariants()


async def test_a_single_enqueues_key_refuses_a_bulk_call_with_it(core, jobs_of):
    await enqueue(core, name="a", idempotency=pb.Idempotency(key="call-1"))
    with pytest.raises(IdempotencyConflict):
        await enqueue_bulk(core, bulk_items("a"))
    assert len(await jobs_of()) == 1


async def test_a_bulk_calls_retry_compares_its_jobs_without_their_trace_context(core, jobs_of):
    def traced(parent: str) -> list:
        t = task("a")
        t.headers["traceparent"] = f"00-{parent * 32}-{'1' * 16}-01"
        return [(t, None)]

    first = await enqueue_bulk(core, traced("a"))
    assert await enqueue_bulk(core, traced("b")) == first
    assert len(await jobs_of()) == 1


async def test_a_bulk_calls_key_expires_after_its_ttl_and_the_sweep_drops_it(
    core, store, clock, sweep, jobs_of, check_invariants
):
    k = keys.QueueKeys(NS, "q")
    first = await enqueue_bulk(core, bulk_items("a"), ttl_ns=60 * SEC)
    clock.advance(59 * SEC)
    assert await enqueue_bulk(core, bulk_items("a"), ttl_ns=60 * SEC) == first
    clock.advance(2 * SEC)
    await sweep()
    assert await store.snapshot(lambda tx: tx.scan(k.q + b"i", k.q + b"j")) == []
    second = await enqueue_bulk(core, bulk_items("a"))
    assert second[0].created and second[0].job_id != first[0].job_id
    assert len(await jobs_of()) == 2
    await check_invariants()


@pytest.mark.parametrize(
    "call, field",
    [(pb.Idempotency(key=""), "idempotency.key"), (pb.Idempotency(key="k", ttl_ns=-1), "idempotency.ttl_ns"),
     (pb.Idempotency(key="k" * 1025), "idempotency.key")],
)  # fmt: skip
async def test_a_bad_bulk_call_key_is_refused_before_anything_is_written(core, store, call, field):
    with pytest.raises(InvalidArgument) as ei:
        await core.jobs.enqueue_bulk(NS, "q", bulk_items("a"), call)
    assert ei.value.field == field
    assert await stored(store) == []


async def test_a_bulk_calls_retry_while_a_poll_waits_gives_the_poll_nothing_new(core, jobs_of):
    first = await enqueue_bulk(core, bulk_items("a"))
    await ok(core, await lease_one(core))
    poll = asyncio.create_task(lease(core, max_jobs=5, wait_ns=20 * SEC))
    async with asyncio.timeout(5):
        while core.waiters.parked(NS, "q") == 0:  # parked: the retry is handed to it
            await asyncio.sleep(0.001)
    assert await enqueue_bulk(core, bulk_items("a")) == first
    await asyncio.sleep(0.05)
    assert not poll.done()  # told to look again, it found nothing and waits on
    e = await enqueue(core, name="b")
    assert [j.id for j in await asyncio.wait_for(poll, 10)] == [e.job_id]
    assert len(await jobs_of()) == 2


# -- dedup -------------------------------------------------------------------------------------------
def dd(mode=pb.DEDUP_MODE_SIMPLE, **kw) -> pb.Dedup:
    return pb.Dedup(id="d1", mode=mode, **kw)


async def test_dedup_simple_while_the_job_is_not_finished(core, events_of, jobs_of, check_invariants):
    first = await enqueue(core, dedup=dd())
    dup = await enqueue(core, data=b"other", dedup=dd())
    assert not dup.created and dup.job_id == first.job_id
    assert "deduplicated" in [e.event for e in await events_of(job_id=first.job_id)]
    job = await lease_one(core)
    dup = await enqueue(core, dedup=dd())  # active is not finished
    assert dup.job_id == first.job_id
    await ok(core, job)
    after = await enqueue(core, dedup=dd())
    assert after.created and after.job_id != first.job_id
    assert len(await jobs_of()) == 2
    await check_invariants()


async def test_dedup_throttle_holds_for_its_ttl_even_after_the_job_finished(core, clock, check_invariants):
    first = await enqueue(core, dedup=dd(pb.DEDUP_MODE_THROTTLE, ttl_ns=10 * SEC))
    await ok(core, await lease_one(core))
    clock.advance(9 * SEC)
    assert (await enqueue(core, dedup=dd(pb.DEDUP_MODE_THROTTLE, ttl_ns=10 * SEC))).job_id == first.job_id
    clock.advance(SEC)
    later = await enqueue(core, dedup=dd(pb.DEDUP_MODE_THROTTLE, ttl_ns=10 * SEC))
    assert later.created and later.job_id != first.job_id
    await check_invariants()


async def test_dedup_debounce_replace_takes_the_newest_data_and_delay(core, clock, job_of, check_invariants):
    d = dd(pb.DEDUP_MODE_DEBOUNCE, ttl_ns=5 * SEC, replace=True)
    first = await enqueue(core, data=b"v1", dedup=d, not_before=pb.Delay(delay_ns=5 * SEC))
    clock.advance(2 * SEC)
    second = await enqueue(core, data=b"v2", dedup=d, not_before=pb.Delay(delay_ns=5 * SEC))
    assert not second.created and second.job_id == first.job_id
    assert (await job_of(first.job_id)).due_ns == clock.now_ns() + 5 * SEC
    clock.advance(3 * SEC)  # the first call's due time
    assert await lease(core) == []
    clock.advance(2 * SEC)
    job = await lease_one(core)
    assert (job.id, job.task.payload.data) == (first.job_id, b"v2")
    await check_invariants()


async def test_dedup_replace_job_takes_the_place_of_a_delayed_job(
    core, clock, job_of, jobs_of, check_invariants
):
    d = dd(pb.DEDUP_MODE_THROTTLE, ttl_ns=5 * SEC, replace_job=True)
    later = pb.Delay(delay_ns=5 * SEC)
    first = await enqueue(core, data=b"v1", dedup=d, not_before=later)
    clock.advance(2 * SEC)
    second = await enqueue(core, data=b"v2", dedup=d, not_before=later)
    assert second.created and second.job_id != first.job_id
    assert await job_of(first.job_id) is None  # removed, not updated
    clock.advance(5 * SEC)  # due; the id expired 5 s after the first add, not the second
    job = await lease_one(core)
    assert (job.id, job.task.payload.data) == (second.job_id, b"v2")
    third = await enqueue(core, data=b"v3", dedup=d, not_before=later)
    assert third.created and len(await jobs_of()) == 2
    # Past delayed, a duplicate is dropped: no replacement, no second job.
    simple = dd(replace_job=True)
    a = await enqueue(core, queue="s", dedup=simple)
    assert (await enqueue(core, queue="s", dedup=simple)).job_id == a.job_id
    await check_invariants()


@pytest.mark.parametrize("extend", [False, True])
async def test_dedup_debounce_extend_moves_the_ttl(core, clock, extend, check_invariants):
    d = dd(pb.DEDUP_MODE_DEBOUNCE, ttl_ns=5 * SEC, extend=extend)
    first = await enqueue(core, dedup=d)
    clock.advance(4 * SEC)
    assert (await enqueue(core, dedup=d)).job_id == first.job_id
    clock.advance(3 * SEC)  # 7 s after the first, 3 s after the duplicate
    again = await enqueue(core, dedup=d)
    assert again.created is (not extend)
    await check_invariants()


async def test_dedup_keep_last_if_active_runs_the_last_duplicate_once_after(core, jobs_of, check_invariants):
    d = dd(keep_last_if_active=True)
    first = await enqueue(core, data=b"v1", dedup=d)
    job = await lease_one(core)
    for data in (b"v2", b"v3"):
        dup = await enqueue(core, data=data, dedup=d)
        assert not dup.created and dup.job_id == first.job_id
    assert len(await jobs_of()) == 1
    await ok(core, job)
    rerun = await lease(core)
    assert [j.task.payload.data for j in rerun] == [b"v3"]
    assert rerun[0].id != first.job_id
    await ok(core, rerun[0])
    assert await lease(core) == []
    assert (await check_invariants())[S.COMPLETED] == 2


# -- attempts and backoff ---------------------------------------------------------------------------
async def test_fixed_backoff_retries_then_exhausts_into_failed(
    core, clock, job_of, events_of, check_invariants
):
    e = await enqueue(core, attempts=3, backoff=pb.Backoff(kind=pb.BACKOFF_KIND_FIXED, base_ns=10 * SEC))
    for attempt in (1, 2):
        job = await lease_one(core)
        assert job.attempt == attempt - 1
        done = await core.jobs.complete(NS, "q", job.id, job.epoch, Retry(err(f"try {attempt}")))
        assert done.state == S.DELAYED
        stored = await job_of(e.job_id)
        assert stored.due_ns == clock.now_ns() + 10 * SEC
        assert stored.attempt == attempt
        clock.advance(10 * SEC - 1)
        assert await lease(core) == []
        clock.advance(1)
    job = await lease_one(core)
    done = await core.jobs.complete(NS, "q", job.id, job.epoch, Retry(err("last")))
    assert done.state == S.FAILED
    stored = await job_of(e.job_id)
    assert stored.state == S.FAILED and stored.attempt == 3
    assert [x.message for x in stored.errors] == ["try 1", "try 2", "last"]
    names = [x.event for x in await events_of(job_id=e.job_id)]
    assert names[-2:] == ["failed", "retries-exhausted"]
    assert await lease(core) == []
    assert (await check_invariants())[S.FAILED] == 1


async def test_exponential_backoff_doubles_up_to_its_cap(core, clock, job_of, check_invariants):
    b = pb.Backoff(kind=pb.BACKOFF_KIND_EXPONENTIAL, base_ns=SEC, max_ns=3 * SEC)
    e = await enqueue(core, attempts=5, backoff=b)
    for expected in (1, 2, 3, 3):
        job = await lease_one(core)
        await core.jobs.complete(NS, "q", job.id, job.epoch, Retry(err()))
        assert (await job_of(e.job_id)).due_ns == clock.now_ns() + expected * SEC
        clock.advance(expected * SEC)
    await check_invariants()


async def test_queue_default_backoff_and_attempts_apply(core, configure, clock, job_of, check_invariants):
    await configure("q", attempts=2, backoff={"kind": pb.BACKOFF_KIND_FIXED, "base_ns": 7 * SEC})
    e = await enqueue(core)
    job = await lease_one(core)
    await core.jobs.complete(NS, "q", job.id, job.epoch, Retry(err()))
    assert (await job_of(e.job_id)).due_ns == clock.now_ns() + 7 * SEC
    clock.advance(7 * SEC)
    job = await lease_one(core)
    assert (await core.jobs.complete(NS, "q", job.id, job.epoch, Retry(err()))).state == S.FAILED
    await check_invariants()


async def test_retry_after_overrides_backoff(core, clock, job_of, check_invariants):
    e = await enqueue(core, attempts=2, backoff=pb.Backoff(kind=pb.BACKOFF_KIND_FIXED, base_ns=100 * SEC))
    job = await lease_one(core)
    await core.jobs.complete(NS, "q", job.id, job.epoch, Retry(err(), after_ns=3 * SEC))
    assert (await job_of(e.job_id)).due_ns == clock.now_ns() + 3 * SEC
    await check_invariants()


# -- dead letters -------------------------------------------------------------------------------------
async def test_fail_with_dead_letter_moves_to_the_dlq_and_redrive_brings_it_back(
    core, store, configure, jobs_of, check_invariants
):
    await configure("q", dead_letter_queue="q-dlq")
    e = await enqueue(core, data=b"payload", attempts=3)
    job = await lease_one(core)
    done = await core.jobs.complete(NS, "q", job.id, job.epoch, Fail(err("bad input"), dead_letter=True))
    assert done.state == S.DEAD_LETTERED
    assert (await jobs_of())[e.job_id].state == S.DEAD_LETTERED
    (letter,) = (await jobs_of("q-dlq")).values()
    assert letter.state == S.WAITING and letter.origin_queue == "q"
    assert letter.task.headers[dlq.ORIGIN_JOB] == e.job_id
    assert "bad input" in letter.task.headers[dlq.ERRORS]
    assert await lease(core) == []

    assert await store.transact(admin.queue_redrive_dead_letters, NS, "q-dlq", 10) == 1
    assert await jobs_of("q-dlq") == {}
    again = await lease_one(core)
    assert again.id != e.job_id and again.task.payload.data == b"payload"
    assert dlq.ORIGIN_QUEUE not in again.task.headers
    assert again.attempts_max == 3
    await check_invariants("q", "q-dlq")


async def test_exhausted_attempts_dead_letter_when_the_queue_says_so(
    core, configure, jobs_of, check_invariants
):
    await configure("q", dead_letter_queue="dlq", dead_letter_on_exhausted=True)
    e = await enqueue(core, attempts=1)
    job = await lease_one(core)
    assert (await core.jobs.complete(NS, "q", job.id, job.epoch, Retry(err()))).state == S.DEAD_LETTERED
    assert [j.task.headers[dlq.ORIGIN_JOB] for j in (await jobs_of("dlq")).values()] == [e.job_id]
    await check_invariants("q", "dlq")


async def test_fail_without_a_dlq_stays_failed(core, jobs_of, check_invariants):
    e = await enqueue(core, attempts=5)
    job = await lease_one(core)
    assert (
        await core.jobs.complete(NS, "q", job.id, job.epoch, Fail(err(), dead_letter=True))
    ).state == S.FAILED
    assert (await jobs_of())[e.job_id].attempt == 0  # Fail is final; it does not retry
    assert (await check_invariants())[S.FAILED] == 1


# -- release, delay, rate limited ----------------------------------------------------------------------
async def test_release_does_not_spend_an_attempt(core, clock, job_of, check_invariants):
    e = await enqueue(core, attempts=1)
    for _ in range(3):
        job = await lease_one(core)
        assert (await core.jobs.complete(NS, "q", job.id, job.epoch, Release())).state == S.WAITING
    job = await lease_one(core)
    assert job.attempt == 0
    await core.jobs.complete(NS, "q", job.id, job.epoch, Release(after_ns=5 * SEC))
    assert (await job_of(e.job_id)).state == S.DELAYED
    assert await lease(core) == []
    clock.advance(5 * SEC)
    job = await lease_one(core)
    # The one attempt is still there: this retry exhausts it.
    assert (await core.jobs.complete(NS, "q", job.id, job.epoch, Retry(err()))).state == S.FAILED
    await check_invariants()


async def test_delay_until_reschedules_without_spending_an_attempt(core, clock, job_of, check_invariants):
    e = await enqueue(core, attempts=1)
    job = await lease_one(core)
    until = clock.now_ns() + 30 * SEC
    assert (await core.jobs.complete(NS, "q", job.id, job.epoch, Delay(until))).state == S.DELAYED
    stored = await job_of(e.job_id)
    assert (stored.due_ns, stored.attempt) == (until, 0)
    clock.advance(30 * SEC - 1)
    assert await lease(core) == []
    clock.advance(1)
    assert (await lease_one(core)).id == e.job_id
    await check_invariants()


async def test_rate_limited_outcome_blocks_the_queue_until_the_time_passes(core, clock, check_invariants):
    a = await enqueue(core)
    b = await enqueue(core)
    job = await lease_one(core)
    assert job.id == a.job_id
    await core.jobs.complete(NS, "q", job.id, job.epoch, RateLimited(20 * SEC))
    assert await lease(core) == []  # neither the released job nor the other one
    clock.advance(20 * SEC - 1)
    assert await lease(core) == []
    clock.advance(1)
    assert {j.id for j in await lease(core)} == {a.job_id, b.job_id}
    await check_invariants()


async def test_rate_limit_returns_at_most_max_per_window(core, configure, clock, check_invariants):
    await configure("q", rate_limit={"max": 2, "duration_ns": 10 * SEC})
    for _ in range(5):
        await enqueue(core)
    assert len(await lease(core, max_jobs=5)) == 2
    assert await lease(core, max_jobs=5) == []
    clock.advance(10 * SEC)
    assert len(await lease(core, max_jobs=1)) == 1
    assert len(await lease(core, max_jobs=5)) == 1
    clock.advance(10 * SEC)
    assert len(await lease(core, max_jobs=5)) == 1
    assert (await check_invariants())[S.ACTIVE] == 5


async def test_global_concurrency_caps_active_jobs(core, configure, check_invariants):
    await configure("q", concurrency=2)
    for _ in range(4):
        await enqueue(core)
    first = await lease(core, max_jobs=4)
    assert len(first) == 2
    assert await lease(core, max_jobs=4, worker="w2") == []
    await ok(core, first[0])
    assert len(await lease(core, max_jobs=4, worker="w2")) == 1
    assert await lease(core, max_jobs=4) == []
    assert (await check_invariants())[S.ACTIVE] == 2


async def test_paused_queue_leases_nothing_and_keeps_its_jobs(core, configure, check_invariants):
    e = await enqueue(core)
    await configure("q", paused=True)
    assert await lease(core) == []
    assert (await check_invariants())[S.WAITING] == 1
    await configure("q", paused=False)
    assert (await lease_one(core)).id == e.job_id


async def test_names_filter_leases_only_those_tasks(core, check_invariants):
    await enqueue(core, name="a")
    b = await enqueue(core, name="b")
    await enqueue(core, name="a")
    got = await lease(core, names=["b", "c"])
    assert [j.id for j in got] == [b.job_id]
    assert [j.task.name for j in await lease(core)] == ["a", "a"]
    await check_invariants()


async def test_expired_job_is_discarded_with_an_expired_event(
    core, clock, job_of, events_of, check_invariants
):
    e = await enqueue(core, expires_ns=clock.now_ns() + 5 * SEC)
    keep = await enqueue(core)
    clock.advance(6 * SEC)
    assert [j.id for j in await lease(core)] == [keep.job_id]
    stored = await job_of(e.job_id)
    assert stored.state == S.CANCELED and stored.errors[-1].code == "expired"
    assert [x.event for x in await events_of(job_id=e.job_id)][-1] == "expired"
    assert await lease(core) == []
    await check_invariants()


# -- leases and fencing ----------------------------------------------------------------------------------
async def test_late_complete_before_the_sweep_succeeds(core, configure, clock, check_invariants):
    await configure("q", visibility_ns=10 * SEC)
    await enqueue(core)
    job = await lease_one(core)
    clock.advance(60 * SEC)  # long past the deadline, but nobody reclaimed it
    assert (await ok(core, job)).state == S.COMPLETED
    await check_invariants()


async def test_stale_epoch_after_the_stalled_sweep_is_fenced(
    core, configure, clock, sweep, job_of, check_invariants
):
    await configure("q", visibility_ns=10 * SEC)
    e = await enqueue(core)
    old = await lease_one(core)
    clock.advance(11 * SEC)
    await sweep()
    with pytest.raises(Fenced) as fi:
        await ok(core, old)
    assert fi.value.current_epoch == old.epoch + 1
    new = await lease_one(core, worker="w2")
    assert new.epoch > old.epoch
    with pytest.raises(Fenced) as fi:
        await core.jobs.complete(NS, "q", old.id, old.epoch, Fail(err()))
    assert fi.value.current_epoch == new.epoch
    with pytest.raises(Fenced):
        await core.jobs.extend(NS, "q", old.id, old.epoch, 5 * SEC)
    with pytest.raises(Fenced):
        await core.jobs.report(NS, "q", old.id, old.epoch, progress=b"1")
    assert (await ok(core, new, result=b"r")).state == S.COMPLETED
    stored = await job_of(e.job_id)
    assert stored.state == S.COMPLETED and stored.result.data == b"r"
    await check_invariants()


async def test_complete_twice_is_refused(core, check_invariants):
    await enqueue(core)
    job = await lease_one(core)
    await ok(core, job)
    with pytest.raises(InvalidState):
        await ok(core, job)
    assert (await check_invariants())[S.COMPLETED] == 1


async def test_extend_is_capped_by_the_timeout_and_refused_past_it(core, clock, job_of, check_invariants):
    await enqueue(core, visibility_ns=10 * SEC, timeout_ns=20 * SEC)
    job = await lease_one(core)
    start = clock.now_ns()
    assert job.deadline_ns == start + 10 * SEC
    clock.advance(5 * SEC)
    assert await core.jobs.extend(NS, "q", job.id, job.epoch, 10 * SEC) == start + 15 * SEC
    assert await core.jobs.extend(NS, "q", job.id, job.epoch, 60 * SEC) == start + 20 * SEC
    assert (await job_of(job.id)).deadline_ns == start + 20 * SEC
    clock.advance(15 * SEC)
    with pytest.raises(InvalidState):
        await core.jobs.extend(NS, "q", job.id, job.epoch, SEC)
    await check_invariants()


async def test_extend_keeps_the_job_from_the_stalled_sweep(core, configure, clock, sweep, check_invariants):
    await configure("q", visibility_ns=10 * SEC)
    await enqueue(core)
    job = await lease_one(core)
    clock.advance(8 * SEC)
    await core.jobs.extend(NS, "q", job.id, job.epoch, 10 * SEC)
    clock.advance(8 * SEC)  # past the first deadline, before the extended one
    await sweep()
    assert (await ok(core, job)).state == S.COMPLETED
    await check_invariants()


# -- the stalled sweep ------------------------------------------------------------------------------------
async def test_stalled_job_goes_back_to_waiting_then_fails_past_max_stalled(
    core, configure, clock, sweep, job_of, events_of, check_invariants
):
    await configure("q", visibility_ns=10 * SEC)
    e = await enqueue(core, attempts=5)
    await lease_one(core)
    clock.advance(10 * SEC + 1)  # just past the deadline
    await sweep()
    stored = await job_of(e.job_id)
    assert (stored.state, stored.stalled) == (S.WAITING, 1)
    assert [x.event for x in await events_of(job_id=e.job_id)][-2:] == ["stalled", "waiting"]
    await lease_one(core, worker="w2")
    clock.advance(10 * SEC + 1)
    await sweep()
    stored = await job_of(e.job_id)
    assert stored.state == S.FAILED
    assert stored.errors[-1].message == STALLED_MESSAGE
    assert await lease(core) == []
    await check_invariants()


async def test_the_sweeper_applies_retention_by_age_and_leaves_idle_queues_without_a_write(
    core, store, configure, clock, sweep, jobs_of, check_invariants, monkeypatch
):
    await configure("q", retention=pb.Retention(completed_age_ns=10 * SEC))
    await configure("idle")
    for _ in range(2):
        await enqueue(core)
        await core.jobs.complete(NS, "q", (job := await lease_one(core)).id, job.epoch, Ok())
    await enqueue(core, "idle")
    writes = 0
    transact = store.transact

    async def counted(*args, **kwargs):
        nonlocal writes
        writes += 1
        return await transact(*args, **kwargs)

    monkeypatch.setattr(store, "transact", counted)
    assert (await sweep()).retained == 0
    assert writes == 0  # nothing due anywhere: the pass only read
    assert len(await jobs_of()) == 2
    clock.advance(11 * SEC)
    assert (await sweep()).retained == 2
    assert await jobs_of() == {} and len(await jobs_of("idle")) == 1
    await check_invariants("q", "idle")


async def test_max_stalled_minus_one_is_unlimited(core, configure, clock, sweep, job_of, check_invariants):
    await configure("q", visibility_ns=10 * SEC, max_stalled=-1)
    e = await enqueue(core)
    for n in range(1, 6):
        await lease_one(core)
        clock.advance(10 * SEC + 1)
        await sweep()
        stored = await job_of(e.job_id)
        assert (stored.state, stored.stalled) == (S.WAITING, n)
    await check_invariants()


async def test_hard_timeout_is_a_retryable_timeout_failure(core, clock, sweep, job_of, check_invariants):
    e = await enqueue(core, attempts=2, visibility_ns=20 * SEC, timeout_ns=30 * SEC)
    job = await lease_one(core)
    clock.advance(15 * SEC)
    assert await core.jobs.extend(NS, "q", job.id, job.epoch, 60 * SEC) == clock.now_ns() + 15 * SEC
    clock.advance(15 * SEC + 1)
    await sweep()
    stored = await job_of(e.job_id)
    assert stored.state in S.READY and stored.attempt == 1 and stored.stalled == 0
    assert stored.errors[-1].code == "timeout"
    with pytest.raises(Fenced):
        await ok(core, job)
    await lease_one(core)
    clock.advance(30 * SEC + 1)
    await sweep()
    stored = await job_of(e.job_id)
    assert stored.state == S.FAILED and [x.code for x in stored.errors] == ["timeout", "timeout"]
    await check_invariants()


# -- report -----------------------------------------------------------------------------------------------
def read_log(tx, job_id):
    k = keys.QueueKeys(NS, "q")
    return [
        pb.LogLine.FromString(v).line for _k, v in tx.scan(k.logs(job_id), keys.prefix_end(k.logs(job_id)))
    ]


async def test_report_progress_log_and_data(core, store, configure, job_of, events_of, check_invariants):
    await configure("q", log_cap=3)
    e = await enqueue(core, data=b"v1")
    job = await lease_one(core)
    await core.jobs.report(NS, "q", job.id, job.epoch, progress=b'{"pct": 40}')
    assert (await job_of(e.job_id)).progress == b'{"pct": 40}'
    assert [x.data for x in await events_of(job_id=e.job_id) if x.event == "progress"] == [b'{"pct": 40}']
    with pytest.raises(InvalidArgument):
        await core.jobs.report(NS, "q", job.id, job.epoch, progress=b"not json")
    for i in range(5):
        await core.jobs.report(NS, "q", job.id, job.epoch, log_line=f"line {i}")
    assert await store.snapshot(read_log, e.job_id) == ["line 2", "line 3", "line 4"]
    assert (await job_of(e.job_id)).log_count == 5
    await core.jobs.report(NS, "q", job.id, job.epoch, data=pb.Payload(data=b"v2"))
    await core.jobs.complete(NS, "q", job.id, job.epoch, Release())
    assert (await lease_one(core)).task.payload.data == b"v2"
    await check_invariants()


# -- payloads ----------------------------------------------------------------------------------------------
async def test_large_payload_goes_to_the_blob_store_and_comes_back_inline(
    core, job_of, blobs, check_invariants
):
    data = os.urandom(16 * 1024 + 1)
    e = await enqueue(core, data=data)
    stored = await job_of(e.job_id)
    assert stored.task.payload.data == b"" and stored.task.payload.blob_ref
    assert stored.task.payload.size == len(data)
    assert await blobs.get(stored.task.payload.blob_ref) == data
    job = await lease_one(core)
    assert job.task.payload.data == data
    await check_invariants()


async def test_payload_at_the_inline_limit_stays_inline(core, job_of):
    e = await enqueue(core, data=b"y" * 16 * 1024)
    assert (await job_of(e.job_id)).task.payload.data == b"y" * 16 * 1024


async def test_payload_over_the_limit_is_refused_with_nothing_stored(store, blobs, tmp_path):
    core = QueueCore(store, blobs, payload_limit=64 * 1024)
    with pytest.raises(PayloadTooLarge) as pi:
        await enqueue(core, data=b"z" * (64 * 1024 + 1))
    assert pi.value.limit == 64 * 1024
    assert await stored(store) == []
    assert not (tmp_path / "blobs").exists() or not any((tmp_path / "blobs").rglob("*"))


async def test_a_big_data_report_goes_to_the_blob_store_and_the_old_blob_is_collected(
    core, store, blobs, job_of, tmp_path
):
    from loam_common import keys

    e = await enqueue(core, data=b"small")
    job = await lease_one(core)
    big, bigger = os.urandom(20 * 1024), os.urandom(30 * 1024)
    await core.jobs.report(NS, "q", job.id, job.epoch, data=pb.Payload(data=big))
    first = (await job_of(e.job_id)).task.payload
    assert first.data == b"" and first.blob_ref and first.size == len(big)
    assert await blobs.get(first.blob_ref) == big
    await core.jobs.report(NS, "q", job.id, job.epoch, data=pb.Payload(data=bigger))
    second = (await job_of(e.job_id)).task.payload
    assert second.blob_ref != first.blob_ref and await blobs.get(second.blob_ref) == bigger
    gc = await store.snapshot(lambda tx: tx.get(keys.blob_gc(NS, first.blob_ref)))
    assert gc is not None  # the replaced blob is marked for the sweeper to delete

    with pytest.raises(Fenced):  # a stale epoch: nothing changes, its blob is not left behind
        await core.jobs.report(NS, "q", job.id, job.epoch - 1, data=pb.Payload(data=os.urandom(40 * 1024)))
    assert (await job_of(e.job_id)).task.payload == second
    assert {p.name for p in (tmp_path / "blobs").rglob("*") if p.is_file()} == {
        p.name for p in (tmp_path / "blobs").rglob("*") if p.is_file() and p.read_bytes() in (big, bigger)
    }


async def test_update_data_moves_a_big_payload_to_the_blob_store(core, blobs, job_of):
    e = await enqueue(core, data=b"small")
    data = os.urandom(20 * 1024)
    await core.jobs.update_data(NS, "q", e.job_id, pb.Payload(data=data))
    stored_payload = (await job_of(e.job_id)).task.payload
    assert stored_payload.blob_ref and await blobs.get(stored_payload.blob_ref) == data
    assert (await lease_one(core)).task.payload.data == data


async def test_a_data_report_over_the_limit_is_refused(store, blobs, job_of):
    core = QueueCore(store, blobs, payload_limit=64 * 1024)
    e = await enqueue(core, data=b"small")
    job = await lease_one(core)
    with pytest.raises(PayloadTooLarge):
        await core.jobs.report(NS, "q", job.id, job.epoch, data=pb.Payload(data=b"z" * (64 * 1024 + 1)))
    assert (await job_of(e.job_id)).task.payload.data == b"small"


async def test_blob_of_a_refused_enqueue_is_deleted(core, tmp_path, check_invariants):
    await enqueue(core, data=b"small", job_key="k")
    with pytest.raises(AlreadyExists):
        await enqueue(core, data=os.urandom(20 * 1024), job_key="k")
    assert not [p for p in (tmp_path / "blobs").rglob("*") if p.is_file()]
    await check_invariants()


# -- long-poll ------------------------------------------------------------------------------------------------
async def test_long_poll_wakes_when_a_job_is_enqueued(core, check_invariants):
    loop = asyncio.get_running_loop()
    returned = asyncio.Event()
    started = loop.time()
    poll = asyncio.create_task(lease(core, max_jobs=1, wait_ns=20 * SEC))
    poll.add_done_callback(lambda _t: returned.set())
    async with asyncio.timeout(5):
        while core.waiters.parked(NS, "q") == 0:  # the poll found nothing and parked
            await asyncio.sleep(0.001)
    assert not returned.is_set()
    e = await enqueue(core)
    await asyncio.wait_for(returned.wait(), 10)
    assert loop.time() - started < 10  # well before the 20 s wait
    assert [j.id for j in poll.result()] == [e.job_id]
    assert core.waiters.parked(NS, "q") == 0
    await check_invariants()


async def test_long_poll_wakes_when_a_job_is_released(core, check_invariants):
    await enqueue(core)
    job = await lease_one(core)
    poll = asyncio.create_task(lease(core, max_jobs=1, wait_ns=20 * SEC, worker="w2"))
    async with asyncio.timeout(5):
        while core.waiters.parked(NS, "q") == 0:
            await asyncio.sleep(0.001)
    await core.jobs.complete(NS, "q", job.id, job.epoch, Release())
    got = await asyncio.wait_for(poll, 10)
    assert [j.id for j in got] == [job.id]
    await check_invariants()


async def test_long_poll_of_a_dead_letter_queue_wakes_when_a_job_is_dead_lettered(
    core, configure, check_invariants
):
    await configure("q", dead_letter_queue="q-dlq")
    await enqueue(core)
    job = await lease_one(core)
    poll = asyncio.create_task(lease(core, "q-dlq", max_jobs=1, wait_ns=20 * SEC, worker="w2"))
    async with asyncio.timeout(5):
        while core.waiters.parked(NS, "q-dlq") == 0:
            await asyncio.sleep(0.001)
    await core.jobs.complete(NS, "q", job.id, job.epoch, Fail(err(), dead_letter=True))
    (letter,) = await asyncio.wait_for(poll, 5)  # woken by the commit, not by the wait's end
    assert letter.task.headers[dlq.ORIGIN_JOB] == job.id
    await check_invariants("q", "q-dlq")


@pytest.mark.parametrize("bulk", [False, True])
async def test_long_poll_takes_a_delayed_job_due_before_the_time_it_sleeps_until(core, clock, bulk):
    await enqueue(core, not_before=pb.Delay(delay_ns=365 * 24 * 3600 * SEC))  # due in a year
    poll = asyncio.create_task(lease(core, max_jobs=1, wait_ns=20 * SEC))
    async with asyncio.timeout(5):
        while core.waiters.parked(NS, "q") == 0:  # it sleeps until the year-away job is due
            await asyncio.sleep(0.001)
    soon = pb.EnqueueOpts(not_before=pb.Delay(delay_ns=SEC // 5))
    if bulk:
        (e,) = await core.jobs.enqueue_bulk(NS, "q", [(task("t", b"x"), soon)])
    else:
        e = await core.jobs.enqueue(NS, "q", task("t", b"x"), soon)
    clock.advance(SEC)  # the new job is due now, by the store's clock
    got = await asyncio.wait_for(poll, 5)  # not the poll's 20 s, nor a year
    assert [j.id for j in got] == [e.job_id]


# -- an enqueue hands its job to a sleeping poll (decision 0023) ---------------------------------
@pytest.mark.parametrize("bulk", [False, True])
async def test_an_enqueue_leases_for_a_sleeping_poll_in_its_own_transaction(
    core, count_transactions, check_invariants, bulk
):
    poll = await _parked_poll(core)
    txs = count_transactions()
    if bulk:
        (e,) = await core.jobs.enqueue_bulk(NS, "q", [(task("t", b"x"), None)])
    else:
        e = await enqueue(core)
    (got,) = await asyncio.wait_for(poll, 5)
    assert (got.id, got.state, got.worker) == (e.job_id, S.ACTIVE, "w2")
    assert e.created and txs == ["job_enqueue_then_lease"]  # the poll did not read again
    assert core.waiters.parked(NS, "q") == 0
    counts = await check_invariants()
    assert counts[S.ACTIVE] == 1


async def test_a_bulk_enqueue_hands_what_the_sleeping_poll_asks_for_and_wakes_another_for_the_rest(core):
    first = await _parked_poll(core, max_jobs=2)
    second = asyncio.create_task(lease(core, max_jobs=2, wait_ns=20 * SEC, worker="w3"))
    async with asyncio.timeout(5):
        while core.waiters.parked(NS, "q") < 2:
            await asyncio.sleep(0.001)
    res = await core.jobs.enqueue_bulk(NS, "q", [(task("t", b"x"), None) for _ in range(3)])
    got1, got2 = await asyncio.wait_for(asyncio.gather(first, second), 5)
    assert [j.id for j in got1] == [r.job_id for r in res[:2]]  # in queue order
    assert [j.id for j in got2] == [res[2].job_id]


async def test_a_sleeping_poll_that_wants_other_tasks_is_not_handed_the_job(core):
    poll = asyncio.create_task(lease(core, max_jobs=1, wait_ns=20 * SEC, worker="w2", names=["other"]))
    async with asyncio.timeout(5):
        while core.waiters.parked(NS, "q") == 0:
            await asyncio.sleep(0.001)
    await enqueue(core, name="t")
    await asyncio.sleep(0.05)
    assert not poll.done()  # it read again and sleeps on
    assert [j.task.name for j in await lease(core)] == ["t"]
    wanted = await enqueue(core, name="other")
    assert [j.id for j in await asyncio.wait_for(poll, 5)] == [wanted.job_id]


def _slow_enqueue_then_lease(monkeypatch, seconds: float) -> None:
    """The hand-off transaction takes `seconds` (in the store's writer thread)."""
    from loam_queue_core.facade import jobs as core_module

    real = core_module.job_enqueue_then_lease

    def job_enqueue_then_lease(*args):
        time.sleep(seconds)
        return real(*args)

    monkeypatch.setattr(core_module, "job_enqueue_then_lease", job_enqueue_then_lease)


async def test_a_poll_whose_wait_ends_while_an_enqueue_leases_for_it_gets_the_job(core, monkeypatch):
    poll = asyncio.create_task(lease(core, max_jobs=1, wait_ns=SEC // 5, worker="w2"))
    async with asyncio.timeout(5):
        while core.waiters.parked(NS, "q") == 0:
            await asyncio.sleep(0.001)
    _slow_enqueue_then_lease(monkeypatch, 0.5)  # ends after the poll's 0.2 s wait
    e = await enqueue(core)
    assert [j.id for j in await asyncio.wait_for(poll, 5)] == [e.job_id]  # not an empty answer


async def test_a_job_leased_for_a_poll_that_left_goes_back_to_the_queue(core, monkeypatch, check_invariants):
    poll = await _parked_poll(core)
    _slow_enqueue_then_lease(monkeypatch, 0.3)
    enqueuing = asyncio.create_task(enqueue(core))
    await asyncio.sleep(0.1)  # the enqueue has claimed the poll and is in its transaction
    poll.cancel()  # the worker hangs up
    e = await asyncio.wait_for(enqueuing, 5)
    again = await lease_one(core, worker="w3")
    assert (again.id, again.worker) == (e.job_id, "w3")
    await check_invariants()


async def test_a_poll_gets_the_job_of_an_enqueue_whose_caller_left_mid_transaction(core, monkeypatch):
    # The producer hangs up while the transaction runs; the transaction still commits,
    # so the job leased for the poll must reach it, not wait for its lease to lapse.
    poll = await _parked_poll(core)
    _slow_enqueue_then_lease(monkeypatch, 0.3)
    enqueuing = asyncio.create_task(enqueue(core))
    await asyncio.sleep(0.1)
    enqueuing.cancel()
    (got,) = await asyncio.wait_for(poll, 5)
    assert (got.state, got.worker) == (S.ACTIVE, "w2")


# -- a worker that stops waiting ends its polls (EndLeaseWait) -------------------------------------
async def test_ending_a_workers_wait_answers_its_sleeping_poll_at_once_and_no_other(core):
    mine = await _parked_poll(core)
    other = asyncio.create_task(lease(core, max_jobs=1, wait_ns=20 * SEC, worker="w3"))
    async with asyncio.timeout(5):
        while core.waiters.sleeping(NS, "q") < 2:
            await asyncio.sleep(0.001)
    assert core.jobs.end_lease_wait(NS, ["q"], "w2") == 1
    assert await asyncio.wait_for(mine, 5) == []  # not after its 20 s
    await asyncio.sleep(0.05)
    assert not other.done()  # another worker's poll waits on
    e = await enqueue(core)
    assert [j.id for j in await asyncio.wait_for(other, 5)] == [e.job_id]


async def test_an_ended_poll_gets_the_job_an_enqueue_is_leasing_for_it(core, monkeypatch, check_invariants):
    # The worker stops waiting while an enqueue's transaction leases for its poll: the job
    # must reach the worker in the answer, not stay active with nobody to run it.
    poll = await _parked_poll(core)
    _slow_enqueue_then_lease(monkeypatch, 0.3)
    enqueuing = asyncio.create_task(enqueue(core))
    await asyncio.sleep(0.1)  # claimed, in its transaction
    core.jobs.end_lease_wait(NS, ["q"], "w2")
    e = await asyncio.wait_for(enqueuing, 5)
    (got,) = await asyncio.wait_for(poll, 5)
    assert (got.id, got.state, got.worker) == (e.job_id, S.ACTIVE, "w2")
    await check_invariants()


async def test_an_ended_poll_reading_answers_with_what_it_read_and_does_not_wait(core, monkeypatch):
    from loam_queue_core.facade import jobs as core_module

    real = core_module.job_lease
    reading = asyncio.Event()
    loop = asyncio.get_running_loop()

    def slow_lease(*args):
        loop.call_soon_threadsafe(reading.set)
        time.sleep(0.3)
        return real(*args)

    monkeypatch.setattr(core_module, "job_lease", slow_lease)
    poll = asyncio.create_task(lease(core, max_jobs=1, wait_ns=20 * SEC, worker="w2"))
    await asyncio.wait_for(reading.wait(), 5)
    assert core.jobs.end_lease_wait(NS, ["q"], "w2") == 1  # parked, still reading
    assert await asyncio.wait_for(poll, 5) == []  # answered after its read, no sleep


async def test_an_end_that_arrives_before_its_poll_ends_that_poll_once(core):
    assert core.jobs.end_lease_wait(NS, ["q"], "w2") == 0  # nothing waits yet
    assert await asyncio.wait_for(lease(core, max_jobs=1, wait_ns=20 * SEC, worker="w2"), 5) == []
    again = asyncio.create_task(lease(core, max_jobs=1, wait_ns=20 * SEC, worker="w2"))
    await asyncio.sleep(0.05)
    assert not again.done()  # only the one poll was ended
    e = await enqueue(core)
    assert [j.id for j in await asyncio.wait_for(again, 5)] == [e.job_id]


async def test_ending_a_wait_needs_the_worker(core):
    with pytest.raises(InvalidArgument):
        core.jobs.end_lease_wait(NS, ["q"], "")


async def test_a_refused_enqueue_leaves_the_claimed_poll_waiting(core, check_invariants):
    await enqueue(core, job_key="k")
    await lease_one(core)
    poll = await _parked_poll(core)
    with pytest.raises(AlreadyExists):
        await enqueue(core, data=b"other", job_key="k")
    await asyncio.sleep(0.05)
    assert not poll.done()
    e = await enqueue(core)
    assert [j.id for j in await asyncio.wait_for(poll, 5)] == [e.job_id]
    await check_invariants()


async def test_long_poll_with_nothing_returns_empty(core):
    assert await lease(core, wait_ns=SEC // 5) == []
    assert core.waiters.parked(NS, "q") == 0


# -- bad input ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("queue", "opts", "field"),
    [
        ("a/b", {}, "queue"),
        ("", {}, "queue"),
        ("x" * 129, {}, "queue"),
        ("q q", {}, "queue"),
        ("q", {"not_before": pb.Delay(delay_ns=-1)}, "task.opts.not_before.delay_ns"),
        ("q", {"not_before": pb.Delay(at_ns=-5)}, "task.opts.not_before.at_ns"),
        ("q", {"priority": 2**21}, "task.opts.priority"),
        ("q", {"priority": 3, "lifo": True}, "task.opts.lifo"),
        ("q", {"visibility_ns": -1}, "task.opts.visibility_ns"),
        ("q", {"dedup": pb.Dedup(id="d", mode=pb.DEDUP_MODE_THROTTLE)}, "task.opts.dedup.ttl_ns"),
        ("q", {"idempotency": pb.Idempotency(key="")}, "task.opts.idempotency.key"),
    ],
)
async def test_bad_enqueue_input_names_the_field_and_stores_nothing(core, store, queue, opts, field):
    with pytest.raises(InvalidArgument) as ei:
        await core.jobs.enqueue(NS, queue, task(), pb.EnqueueOpts(**opts))
    assert ei.value.field == field
    assert await stored(store) == []


async def test_highest_priority_is_accepted(core, check_invariants):
    assert (await enqueue(core, priority=2**21 - 1)).created
    await check_invariants()


async def test_bad_namespace_and_task_name_are_refused(core, store):
    # The namespace is checked where it enters (a credential, a header): the one check.
    with pytest.raises(InvalidArgument) as ei:
        validate.namespace("a/b")
    assert ei.value.field == "namespace"
    with pytest.raises(InvalidArgument) as ei:
        await core.jobs.enqueue(NS, "q", task(name=""))
    assert ei.value.field == "task.name"
    assert await stored(store) == []


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"queues": ["ok", "a/b"]}, "queues[1]"),
        ({"queues": []}, "queues"),
        ({"max_jobs": 0}, "max"),
        ({"wait_ns": -1}, "wait_ns"),
    ],
)
async def test_bad_lease_input_names_the_field(core, store, kw, field):
    args = {"queues": ["q"], "max_jobs": 1, "wait_ns": 0} | kw
    with pytest.raises(InvalidArgument) as ei:
        await core.jobs.lease(NS, args["queues"], "w", args["max_jobs"], wait_ns=args["wait_ns"])
    assert ei.value.field == field
    assert await stored(store) == []


async def test_lease_on_an_unknown_queue_creates_nothing(core, store):
    assert await lease(core, "never-used") == []
    assert await stored(store) == []


@pytest.mark.parametrize(
    ("opts", "field"),
    [
        # only options that are checked alone (BullMQ's and the SDK's usual jobs)
        (pb.EnqueueOpts(job_key_from_counter=True, attempts=validate.MAX_ATTEMPTS + 1), "attempts"),
        (pb.EnqueueOpts(job_key="k" * 1025, job_key_keeps_first=True, attempts=1), "job_key"),
        (pb.EnqueueOpts(job_key="k", idempotency=pb.Idempotency(key="")), "idempotency.key"),
        (pb.EnqueueOpts(idempotency=pb.Idempotency(key="i", ttl_ns=-1)), "idempotency.ttl_ns"),
        # with one more option, the rest are checked too
        (pb.EnqueueOpts(job_key_from_counter=True, lifo=True, priority=1), "lifo"),
        (pb.EnqueueOpts(attempts=1, timeout_ns=1, visibility_ns=2), "visibility_ns"),
    ],
)
async def test_bulk_enqueue_checks_the_options_each_job_sets(core, jobs_of, opts, field):
    with pytest.raises(InvalidArgument) as ei:
        await core.jobs.enqueue_bulk(
            NS, "q", [(task(), pb.EnqueueOpts(job_key_from_counter=True)), (task(), opts)]
        )
    assert ei.value.field == f"jobs[1].opts.{field}"
    assert await jobs_of() == {}


async def test_bulk_enqueue_refuses_bad_input_whole_and_isolates_key_clashes(core, jobs_of, check_invariants):
    with pytest.raises(InvalidArgument) as ei:
        await core.jobs.enqueue_bulk(NS, "q", [(task(), None), (task(), pb.EnqueueOpts(priority=2**22))])
    assert ei.value.field == "jobs[1].opts.priority"
    assert await jobs_of() == {}
    await enqueue(core, job_key="taken", data=b"a")
    res = await core.jobs.enqueue_bulk(
        NS,
        "q",
        [
            (task(data=b"1"), None),
            (task(data=b"b"), pb.EnqueueOpts(job_key="taken")),
            (task(data=b"3"), None),
        ],
    )
    assert isinstance(res[1], AlreadyExists)
    assert res[0].created and res[2].created
    assert len(await jobs_of()) == 3
    # A bulk call of one job answers the same way: its error in its slot, not raised.
    (alone,) = await core.jobs.enqueue_bulk(NS, "q", [(task(data=b"c"), pb.EnqueueOpts(job_key="taken"))])
    assert isinstance(alone, AlreadyExists) and len(await jobs_of()) == 3
    # Idempotency keys: a reused key with another request is refused in its slot, the
    # same request again gets the first answer, a new key goes in.
    first = await enqueue(core, data=b"i", idempotency=pb.Idempotency(key="req-1"))
    res = await core.jobs.enqueue_bulk(
        NS,
        "q",
        [
            (task(data=b"other"), pb.EnqueueOpts(idempotency=pb.Idempotency(key="req-1"))),
            (task(data=b"i"), pb.EnqueueOpts(idempotency=pb.Idempotency(key="req-1"))),
            (task(data=b"new"), pb.EnqueueOpts(idempotency=pb.Idempotency(key="req-2"))),
        ],
    )
    assert isinstance(res[0], IdempotencyConflict)
    assert res[1].job_id == first.job_id and res[2].created
    assert len(await jobs_of()) == 5
    await check_invariants()


# -- the outbox ---------------------------------------------------------------------------------------------
async def test_outbox_records_a_jobs_life_in_order(core, events_of, check_invariants):
    e = await enqueue(core)
    job = await lease_one(core)
    await ok(core, job, result=b"42")
    evs = await events_of(job_id=e.job_id)
    assert [x.event for x in evs] == ["added", "waiting", "active", "completed"]
    assert [x.seq for x in evs] == sorted(x.seq for x in evs)
    assert evs[2].worker == "w1" and evs[2].epoch == job.epoch
    assert evs[3].state == S.COMPLETED and evs[3].prev_state == S.ACTIVE and evs[3].data == b"42"
    await check_invariants()


async def test_outbox_records_delay_retry_and_failure(core, clock, events_of, check_invariants):
    e = await enqueue(core, attempts=2, not_before=pb.Delay(delay_ns=SEC))
    clock.advance(SEC)
    job = await lease_one(core)
    await core.jobs.complete(NS, "q", job.id, job.epoch, Retry(err()))
    job = await lease_one(core)
    await core.jobs.complete(NS, "q", job.id, job.epoch, Retry(err()))
    assert [x.event for x in await events_of(job_id=e.job_id)] == [
        "added",
        "delayed",
        "waiting",
        "active",
        "waiting",  # retry with no backoff: straight back
        "active",
        "failed",
        "retries-exhausted",
    ]
    await check_invariants()


async def test_every_state_change_writes_an_outbox_row(
    core, configure, clock, sweep, store, events_of, jobs_of
):
    """Across a mixed workload, each job's outbox rows replay to its stored state."""
    await configure("q", visibility_ns=10 * SEC, max_stalled=-1)
    await enqueue(core, priority=2)
    await enqueue(core, not_before=pb.Delay(delay_ns=5 * SEC))
    await enqueue(core, attempts=3)
    jobs = await lease(core, max_jobs=2)
    await ok(core, jobs[0])
    await core.jobs.complete(NS, "q", jobs[1].id, jobs[1].epoch, Retry(err(), after_ns=SEC))
    clock.advance(6 * SEC)
    jobs = await lease(core, max_jobs=1)
    clock.advance(20 * SEC)
    await sweep()
    final_states = {j.id: j.state for j in (await jobs_of()).values()}
    last = {}
    for ev in await events_of():
        if ev.job_id and ev.event not in ("added", "progress", "deduplicated", "retries-exhausted"):
            last[ev.job_id] = ev.state
    assert last == final_states


# -- per-subject serial jobs -------------------------------------------------------------------------------------
async def test_second_job_of_a_subject_waits_for_the_first(core, check_invariants):
    a1 = await enqueue(core, subject="acct-1", data=b"a1")
    a2 = await enqueue(core, subject="acct-1", data=b"a2")
    b1 = await enqueue(core, subject="acct-2", data=b"b1")
    got = await lease(core)
    assert {j.id for j in got} == {a1.job_id, b1.job_id}
    counts = await check_invariants()
    assert counts[S.WAITING] == 1 and counts[S.ACTIVE] == 2
    assert await lease(core) == []
    await ok(core, next(j for j in got if j.id == b1.job_id))
    assert await lease(core) == []  # finishing another subject frees nothing here
    await ok(core, next(j for j in got if j.id == a1.job_id))
    assert [j.id for j in await lease(core)] == [a2.job_id]
    await check_invariants()


async def test_subject_jobs_run_in_fifo_order(core, check_invariants):
    ids = [(await enqueue(core, subject="s", priority=p)).job_id for p in (5, 1, 3, 0)]
    order = [j.id for j in await drain(core)]
    assert order == ids
    assert (await check_invariants())[S.COMPLETED] == 4


async def test_a_retried_job_holds_its_subject_when_its_policy_says_so(core, clock, check_invariants):
    # (By default the jobs behind run during the backoff: tests/core/test_subjects.py.)
    first = await enqueue(
        core,
        subject="s",
        attempts=2,
        backoff=pb.Backoff(kind=pb.BACKOFF_KIND_FIXED, base_ns=10 * SEC, hold_subject=True),
    )
    second = await enqueue(core, subject="s")
    other = await enqueue(core, subject="t")
    job = await lease_one(core)
    assert job.id == first.job_id
    await core.jobs.complete(NS, "q", job.id, job.epoch, Retry(err()))
    assert [j.id for j in await lease(core)] == [other.job_id]
    clock.advance(10 * SEC)
    job = await lease_one(core)
    assert job.id == first.job_id
    await ok(core, job)
    assert [j.id for j in await lease(core)] == [second.job_id]
    await check_invariants()


async def test_a_failed_job_frees_its_subject(core, check_invariants):
    await enqueue(core, subject="s")
    second = await enqueue(core, subject="s")
    job = await lease_one(core)
    await core.jobs.complete(NS, "q", job.id, job.epoch, Fail(err()))
    assert [j.id for j in await lease(core)] == [second.job_id]
    await check_invariants()


async def test_a_delayed_job_behind_its_subject_keeps_its_due_time(core, clock, check_invariants):
    first = await enqueue(core, subject="s")
    second = await enqueue(core, subject="s", not_before=pb.Delay(delay_ns=60 * SEC))
    await ok(core, await lease_one(core))
    assert await lease(core) == []
    clock.advance(60 * SEC)
    assert (await lease_one(core)).id == second.job_id
    assert first.job_id != second.job_id
    await check_invariants()


# -- shards ------------------------------------------------------------------------------------------------------
async def test_sharded_queue_delivers_every_job_exactly_once(core, configure, check_invariants, events_of):
    await configure("q", shards=4)
    ids = {(await enqueue(core, data=str(i).encode())).job_id for i in range(40)}
    ids |= {r.job_id for r in await core.jobs.enqueue_bulk(NS, "q", [(task(), None) for _ in range(20)])}
    seen: list[str] = []
    while jobs := await lease(core, max_jobs=3):
        seen.extend(j.id for j in jobs)
        for j in jobs:
            await ok(core, j)
    assert len(seen) == len(set(seen)) == 60
    assert set(seen) == ids
    counts = await check_invariants()
    assert counts == {S.COMPLETED: 60}
    assert len({e.shard for e in await events_of()}) > 1


# -- more of the lease ----------------------------------------------------------------------------------------
async def test_expired_jobs_at_the_head_do_not_hide_ready_ones(core, clock, check_invariants):
    for _ in range(3):
        await enqueue(core, expires_ns=clock.now_ns() + SEC)
    live = [(await enqueue(core)).job_id for _ in range(2)]
    clock.advance(2 * SEC)
    assert [j.id for j in await lease(core, max_jobs=2)] == live
    counts = await check_invariants()
    assert counts[S.CANCELED] == 3 and counts[S.ACTIVE] == 2


async def test_complete_many_answers_each_item_and_one_fenced_token_spoils_nothing(
    core, configure, clock, sweep, check_invariants
):
    await configure("q", visibility_ns=10 * SEC)
    await enqueue(core)
    stale = await lease_one(core)
    clock.advance(10 * SEC + 1)
    await sweep()
    for _ in range(2):
        await enqueue(core)
    jobs = await lease(core, max_jobs=3, worker="w2")
    assert len(jobs) == 3
    res = await core.jobs.complete_many(
        NS,
        [
            ("q", jobs[0].id, jobs[0].epoch, Ok()),
            ("q", stale.id, stale.epoch, Ok()),
            ("q", jobs[1].id, jobs[1].epoch, Fail(err())),
            ("q", jobs[2].id, jobs[2].epoch, Release()),
        ],
    )
    assert isinstance(res[1], Fenced)
    assert [r.state for r in (res[0], res[2], res[3])] == [S.COMPLETED, S.FAILED, S.WAITING]
    counts = await check_invariants()
    assert counts == {S.COMPLETED: 1, S.FAILED: 1, S.WAITING: 1}


async def test_complete_then_lease_takes_what_the_completions_freed_in_one_call(
    core, configure, check_invariants
):
    await configure("q", concurrency=2)
    first = [(await enqueue(core)).job_id for _ in range(2)]
    later = [(await enqueue(core)).job_id for _ in range(3)]
    held = await lease(core, max_jobs=5)
    assert [j.id for j in held] == first  # the queue's concurrency holds the rest back
    res, leased = await core.jobs.complete_many_then_lease(
        NS, [("q", j.id, j.epoch, Ok()) for j in held], ["q"], "w", 5
    )
    assert [r.state for r in res] == [S.COMPLETED, S.COMPLETED]
    assert [j.id for j in leased] == later[:2]  # the two slots the completions freed
    assert all(j.state == S.ACTIVE and j.epoch == 1 and j.worker == "w" for j in leased)
    counts = await check_invariants()
    assert counts == {S.COMPLETED: 2, S.ACTIVE: 2, S.WAITING: 1}


async def test_complete_then_lease_with_bad_lease_arguments_changes_nothing(core, check_invariants):
    await enqueue(core)
    job = await lease_one(core)
    with pytest.raises(InvalidArgument) as e:
        await core.jobs.complete_many_then_lease(NS, [("q", job.id, job.epoch, Ok())], ["q"], "w", 0)
    assert e.value.field == "lease.max"
    counts = await check_invariants()
    assert counts == {S.ACTIVE: 1}


async def _parked_poll(core, max_jobs: int = 1, **kw) -> asyncio.Task:
    poll = asyncio.create_task(lease(core, max_jobs=max_jobs, wait_ns=20 * SEC, worker="w2", **kw))
    async with asyncio.timeout(5):
        while core.waiters.sleeping(NS, "q") == 0:  # it read nothing and waits
            await asyncio.sleep(0.001)
    return poll


async def test_long_poll_wakes_when_a_subject_frees_its_next_job(core, check_invariants):
    await enqueue(core, subject="s")
    second = await enqueue(core, subject="s")
    first = await lease_one(core)
    poll = await _parked_poll(core)
    await ok(core, first)
    assert [j.id for j in await asyncio.wait_for(poll, 5)] == [second.job_id]
    await check_invariants()


@pytest.mark.parametrize("batched", [False, True])
async def test_long_poll_wakes_when_a_concurrency_slot_frees(core, configure, check_invariants, batched):
    await configure("q", concurrency=1)
    await enqueue(core)
    second = await enqueue(core)
    first = await lease_one(core)
    poll = await _parked_poll(core)
    if batched:  # BullMQ's moveToFinished: a batch that also leases, for another worker
        await core.jobs.complete_many_then_lease(NS, [("q", first.id, first.epoch, Ok())], ["other"], "w1", 1)
    else:
        await ok(core, first)
    assert [j.id for j in await asyncio.wait_for(poll, 5)] == [second.job_id]
    await check_invariants()


async def test_long_poll_wakes_when_a_job_is_retried(core, check_invariants):
    await enqueue(core, attempts=2)
    job = await lease_one(core)
    poll = await _parked_poll(core)
    await core.jobs.complete(NS, "q", job.id, job.epoch, Retry(err(), after_ns=0))
    assert [j.id for j in await asyncio.wait_for(poll, 5)] == [job.id]
    await check_invariants()


async def test_long_poll_wakes_when_the_last_kept_duplicate_is_enqueued(core, check_invariants):
    d = dd(keep_last_if_active=True)
    await enqueue(core, data=b"v1", dedup=d)
    job = await lease_one(core)
    await enqueue(core, data=b"v2", dedup=d)  # kept until the running one finishes
    poll = await _parked_poll(core)
    await ok(core, job)
    assert [j.task.payload.data for j in await asyncio.wait_for(poll, 5)] == [b"v2"]
    await check_invariants()


async def test_a_completion_that_frees_nothing_leaves_a_parked_poll_asleep(core, count_transactions):
    # With no concurrency limit, subject, flow or duplicate, finishing a job makes no other
    # job leasable: a parked poll woken for it would only read the queue and park again.
    await enqueue(core)
    await enqueue(core)
    one, two = await lease(core, max_jobs=2)
    poll = await _parked_poll(core)
    txs = count_transactions()
    await ok(core, one)
    await core.jobs.complete_many_then_lease(NS, [("q", two.id, two.epoch, Ok())], ["q"], "w1", 1)
    await asyncio.sleep(0.05)
    assert "job_lease" not in txs and not poll.done()
    e = await enqueue(core)  # the poll still answers the next job
    assert [j.id for j in await asyncio.wait_for(poll, 5)] == [e.job_id]


@pytest.mark.parametrize(
    ("opts", "field"),
    [
        ({"not_before": pb.Delay(delay_ns=2**63 - 1)}, "opts.not_before.delay_ns"),
        ({"not_before": pb.Delay(at_ns=2**63 - 1)}, "opts.not_before.at_ns"),
        ({"visibility_ns": 2**62}, "opts.visibility_ns"),
        ({"expires_ns": 2**63 - 1}, "opts.expires_ns"),
    ],
)
async def test_times_past_int64_are_refused_not_crashed(core, jobs_of, opts, field):
    with pytest.raises(InvalidArgument) as e:
        await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"), pb.EnqueueOpts(**opts))
    assert e.value.field.endswith(field)
    assert await jobs_of() == {}
