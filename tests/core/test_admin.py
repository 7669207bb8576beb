"""Queue and job admin (spec §5.4) as an operator or a BullMQ/Celery adapter uses it, on
every backend: counts, pause, drain, clean, obliterate, retry, cancel, promote,
priorities and delays, logs, workers, dead-letter redrive, config checks. Jobs are
produced and run through QueueCore; admin ops run as one transaction each."""

from __future__ import annotations

import pytest

from loam_common import keys
from loam_common.errors import AlreadyExists, InvalidArgument, InvalidState, NotFound, PayloadTooLarge
from loam_common.gen.loam.jobs.v1 import events_pb2
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import admin, job_admin
from loam_common.jobs import states as S
from loam_common.jobs.complete import Fail, Ok
from loam_common.store import RESERVED_PREFIX

NS = "acme"
SEC = 1_000_000_000


def task(name: str = "t", data: bytes = b"x") -> pb.TaskSpec:
    return pb.TaskSpec(name=name, payload=pb.Payload(data=data))


async def enqueue(core, queue: str = "q", name: str = "t", **opts) -> str:
    return (await core.jobs.enqueue(NS, queue, task(name), pb.EnqueueOpts(**opts))).job_id


async def lease(core, queue: str = "q", n: int = 1, worker: str = "w1") -> list[pb.Job]:
    return await core.jobs.lease(NS, [queue], worker, n)


async def fail(core, job: pb.Job, queue: str = "q", dead_letter: bool = False) -> None:
    outcome = Fail(pb.JobError(code="e", message="boom"), dead_letter)
    await core.jobs.complete(NS, queue, job.id, job.epoch, outcome)


async def ok(core, job: pb.Job, queue: str = "q") -> None:
    await core.jobs.complete(NS, queue, job.id, job.epoch, Ok())


async def counts(store, queue: str = "q") -> dict[str, int]:
    c = await store.transact(admin.queue_counts, NS, queue)
    return {k: v for k, v in admin.counts_by_state_name(c).items() if v}


async def stored(store) -> list[tuple[bytes, bytes]]:
    rows = await store.snapshot(lambda tx: tx.scan(b"", b"\xff\xff"))
    return [(k, v) for k, v in rows if not k.startswith(RESERVED_PREFIX)]


async def event_names(events_of, queue: str = "q", job_id: str | None = None) -> list[str]:
    return [e.event for e in await events_of(queue, job_id)]


async def create(store, queue: str = "q", **fields) -> pb.QueueConfig:
    cfg, _ = await store.transact(admin.queue_create, NS, queue, pb.QueueConfig(**fields))
    return cfg


# -- counts -------------------------------------------------------------------------------------
async def test_counts_follow_every_kind_of_move(store, core, clock, check_invariants):
    await create(store)
    for _ in range(4):
        await enqueue(core)
    await enqueue(core, priority=5)
    await enqueue(core, priority=7)
    await enqueue(core, not_before=pb.Delay(delay_ns=60 * SEC))
    a, b, c = await lease(core, n=3)  # the FIFO band first
    await ok(core, a)
    await fail(core, b)
    canceled = await enqueue(core)
    await store.transact(job_admin.job_cancel, NS, "q", canceled)

    assert await counts(store) == {
        "waiting": 1,
        "prioritized": 2,
        "delayed": 1,
        "active": 1,
        "completed": 1,
        "failed": 1,
        "canceled": 1,
    }
    result = await store.transact(admin.queue_counts, NS, "q")
    assert result.waiting == 1 and result.prioritized == 2 and not result.paused
    await check_invariants()


# -- pause, drain ----------------------------------------------------------------------------------
async def test_pause_keeps_jobs_in_place_and_resume_serves_them(store, core, events_of):
    job_id = await enqueue(core)
    await store.transact(admin.queue_pause, NS, "q")
    assert await lease(core) == []
    c = await store.transact(admin.queue_counts, NS, "q")
    assert c.paused and c.waiting == 1
    await store.transact(admin.queue_resume, NS, "q")
    assert [j.id for j in await lease(core)] == [job_id]
    assert [e for e in await event_names(events_of) if e in ("paused", "resumed")] == ["paused", "resumed"]


async def test_drain_removes_ready_jobs_and_delayed_ones_only_when_asked(store, core, check_invariants):
    for _ in range(3):
        await enqueue(core)
    await enqueue(core, priority=3)
    delayed = await enqueue(core, not_before=pb.Delay(delay_ns=60 * SEC))
    active = (await lease(core))[0]

    assert await store.transact(admin.queue_drain, NS, "q", False) == 3
    assert await counts(store) == {"delayed": 1, "active": 1}
    assert await store.transact(admin.queue_drain, NS, "q", True) == 1
    assert await counts(store) == {"active": 1}
    with pytest.raises(NotFound):
        await store.transact(job_admin.job_get, NS, "q", delayed)
    await ok(core, active)  # the running job was left alone
    await check_invariants()


async def test_drain_also_empties_subject_backlogs(store, core, check_invariants):
    for _ in range(3):
        await enqueue(core, subject="s1")
    assert await store.transact(admin.queue_drain, NS, "q", False) == 3
    assert await counts(store) == {}
    await check_invariants()


async def test_drain_leaves_a_subjects_running_job_and_empties_its_backlog(store, core, check_invariants):
    """The subject's running job is named by a key among the backlogs: drain takes the
    jobs waiting behind it, not the running one (nor its key)."""
    ids = [await enqueue(core, subject="s1") for _ in range(3)]
    (running,) = await lease(core)
    assert running.id == ids[0]
    assert await store.transact(admin.queue_drain, NS, "q", False) == 2
    assert await counts(store) == {"active": 1}
    await check_invariants()
    await ok(core, running)
    assert await lease(core) == []


# -- clean -------------------------------------------------------------------------------------------
async def test_clean_removes_the_oldest_finished_jobs_past_the_grace_up_to_the_limit(
    store, core, clock, check_invariants, events_of
):
    done = []
    for _ in range(5):
        await enqueue(core)
        job = (await lease(core))[0]
        await ok(core, job)
        done.append(job.id)
        clock.advance(10 * SEC)
    # Completed at t0, t0+10, ..., t0+40; now is t0+50. Grace 25 s: the first three qualify.
    removed = await store.transact(admin.queue_clean, NS, "q", S.COMPLETED, 25 * SEC, 2)
    assert removed == done[:2]
    removed = await store.transact(admin.queue_clean, NS, "q", S.COMPLETED, 25 * SEC, 10)
    assert removed == done[2:3]
    assert await counts(store) == {"completed": 2}
    assert (await event_names(events_of)).count("cleaned") == 2
    await check_invariants()


async def test_clean_waiting_by_creation_time_and_refuse_active(store, core, clock, check_invariants):
    old = await enqueue(core)
    clock.advance(100 * SEC)
    new = await enqueue(core)
    assert await store.transact(admin.queue_clean, NS, "q", S.WAITING, 50 * SEC, 0) == [old]
    assert [j.id for j in await lease(core, n=5)] == [new]
    with pytest.raises(InvalidArgument) as e:
        await store.transact(admin.queue_clean, NS, "q", S.ACTIVE, 0, 0)
    assert e.value.field == "state"
    await check_invariants()


# -- obliterate ------------------------------------------------------------------------------------
async def test_obliterate_refuses_active_jobs_unless_forced_then_leaves_nothing(store, core):
    await create(store)
    for _ in range(3):
        await enqueue(core)
    await enqueue(core, not_before=pb.Delay(delay_ns=SEC))
    await lease(core)
    before = await stored(store)
    with pytest.raises(InvalidState) as e:
        await store.transact(admin.queue_obliterate, NS, "q", False)
    assert "active" in e.value.message
    assert await stored(store) == before

    result = await store.transact(admin.queue_obliterate, NS, "q", True)
    assert result.done
    with pytest.raises(NotFound):
        await store.transact(admin.queue_counts, NS, "q")
    q = keys.QueueKeys(NS, "q")
    left = [(k, v) for k, v in await stored(store) if k.startswith(q.all())]
    # Only the shard metas (sequences) and the final event in the log remain.
    assert left and all(k.startswith((q.shard_metas(), q.event_logs())) for k, _ in left)
    logged = [events_pb2.JobEvent.FromString(v).event for k, v in left if k.startswith(q.event_logs())]
    assert logged == ["obliterated"]

    # The queue can be created again, empty, and works.
    await create(store)
    assert await counts(store) == {}
    job_id = await enqueue(core)
    assert [j.id for j in await lease(core)] == [job_id]


async def test_obliterate_in_batches_stays_paused_until_done(store, core):
    for _ in range(10):
        await enqueue(core)
    calls = 0
    while True:
        calls += 1
        result = await store.transact(admin.queue_obliterate, NS, "q", False, 7)
        if result.done:
            break
        assert (await store.transact(admin.queue_counts, NS, "q")).paused
    assert calls > 1
    with pytest.raises(NotFound):
        await store.transact(job_admin.job_get, NS, "q", "anything")


# -- retry, cancel, promote, remove ------------------------------------------------------------------
async def test_retry_of_a_failed_job_starts_its_attempts_over(store, core, check_invariants):
    await enqueue(core, attempts=1)
    job = (await lease(core))[0]
    await fail(core, job)
    assert (await store.transact(job_admin.job_get, NS, "q", job.id)).state == S.FAILED

    retried = await store.transact(job_admin.job_retry, NS, "q", job.id)
    assert retried.state == S.WAITING and retried.attempt == 0 and not retried.finished_ns
    again = (await lease(core))[0]
    assert again.id == job.id and again.epoch > job.epoch
    await ok(core, again)
    assert (await store.transact(job_admin.job_get, NS, "q", job.id)).state == S.COMPLETED
    with pytest.raises(InvalidState):  # only finished jobs retry
        await store.transact(job_admin.job_retry, NS, "q", await enqueue(core))
    await check_invariants()


async def test_retry_all_and_promote_all(store, core, check_invariants):
    for _ in range(3):
        await enqueue(core)
        await fail(core, (await lease(core))[0])
    for _ in range(2):
        await enqueue(core, not_before=pb.Delay(delay_ns=3600 * SEC))
    assert await store.transact(admin.queue_retry_all, NS, "q", S.FAILED, 2) == 2
    assert await counts(store) == {"waiting": 2, "failed": 1, "delayed": 2}
    assert await store.transact(admin.queue_promote_all, NS, "q") == 2
    assert await counts(store) == {"waiting": 4, "failed": 1}
    with pytest.raises(InvalidArgument):
        await store.transact(admin.queue_retry_all, NS, "q", S.WAITING)
    await check_invariants()


async def test_cancel_before_start_and_refuse_a_running_job(store, core, events_of, check_invariants):
    running = await enqueue(core)
    waiting = await enqueue(core)
    delayed = await enqueue(core, not_before=pb.Delay(delay_ns=SEC))
    job = (await lease(core))[0]
    assert job.id == running

    for job_id in (waiting, delayed):
        canceled = await store.transact(job_admin.job_cancel, NS, "q", job_id, "not needed")
        assert canceled.state == S.CANCELED and canceled.errors[-1].message == "not needed"
        assert (await event_names(events_of, job_id=job_id))[-1] == "canceled"
    with pytest.raises(InvalidState) as e:
        await store.transact(job_admin.job_cancel, NS, "q", running)
    assert "worker" in e.value.message
    assert (await store.transact(job_admin.job_get, NS, "q", running)).state == S.ACTIVE
    await ok(core, job)
    with pytest.raises(InvalidState):
        await store.transact(job_admin.job_cancel, NS, "q", running)  # finished
    await check_invariants()


async def test_cancel_frees_the_subject_for_the_next_job(store, core, check_invariants):
    first = await enqueue(core, subject="s")
    second = await enqueue(core, subject="s")
    await store.transact(job_admin.job_cancel, NS, "q", first)
    assert [j.id for j in await lease(core)] == [second]
    await check_invariants()


async def test_promote_refuses_a_job_that_is_not_delayed_and_changes_nothing(store, core, events_of):
    waiting = await enqueue(core)
    before = await stored(store)
    with pytest.raises(InvalidState) as e:
        await store.transact(job_admin.job_promote, NS, "q", waiting)
    assert e.value.from_state == "waiting"
    assert await stored(store) == before

    delayed = await enqueue(core, not_before=pb.Delay(delay_ns=3600 * SEC))
    promoted = await store.transact(job_admin.job_promote, NS, "q", delayed)
    assert promoted.state == S.WAITING and promoted.due_ns == 0
    assert await event_names(events_of, job_id=delayed) == ["added", "delayed", "promoted", "waiting"]
    assert [j.id for j in await lease(core, n=5)] == [waiting, delayed]


async def test_remove_refuses_an_active_job_unless_forced(store, core, check_invariants):
    await enqueue(core)
    job = (await lease(core))[0]
    with pytest.raises(InvalidState):
        await store.transact(job_admin.job_remove, NS, "q", job.id)
    await store.transact(job_admin.job_remove, NS, "q", job.id, True)
    with pytest.raises(NotFound):
        await store.transact(job_admin.job_get, NS, "q", job.id)
    with pytest.raises(NotFound):
        await store.transact(job_admin.job_remove, NS, "q", job.id)
    await check_invariants()


async def test_remove_takes_an_active_job_whose_lease_lapsed(store, core, clock, check_invariants):
    await enqueue(core)
    job = (await lease(core))[0]
    clock.advance(job.deadline_ns - clock.now_ns() + 1)  # the lock expired; no sweep yet
    await store.transact(job_admin.job_remove, NS, "q", job.id)
    with pytest.raises(NotFound):
        await store.transact(job_admin.job_get, NS, "q", job.id)
    await check_invariants()


# -- priority, delay, data, logs ----------------------------------------------------------------------
async def test_change_priority_reorders_ready_jobs(store, core, check_invariants, events_of):
    a = await enqueue(core, priority=1)
    b = await enqueue(core, priority=2)
    c = await enqueue(core)
    await store.transact(job_admin.job_change_priority, NS, "q", c, 3)
    await store.transact(job_admin.job_change_priority, NS, "q", b, 0)
    assert await counts(store) == {"waiting": 1, "prioritized": 2}
    assert "priority-changed" in await event_names(events_of, job_id=b)
    await check_invariants()
    assert [j.id for j in await lease(core, n=5)] == [b, a, c]
    with pytest.raises(InvalidArgument):
        await store.transact(job_admin.job_change_priority, NS, "q", a, 2**21)


async def test_change_delay_moves_the_due_time(store, core, clock, check_invariants):
    job_id = await enqueue(core, not_before=pb.Delay(delay_ns=3600 * SEC))
    changed = await store.transact(job_admin.job_change_delay, NS, "q", job_id, 5 * SEC)
    assert changed.state == S.DELAYED and changed.due_ns == clock.now_ns() + 5 * SEC
    await check_invariants()
    assert await lease(core) == []
    clock.advance(5 * SEC)
    assert [j.id for j in await lease(core)] == [job_id]
    with pytest.raises(InvalidState):
        await store.transact(job_admin.job_change_delay, NS, "q", job_id, SEC)


async def test_a_queues_payload_limit_refuses_a_bigger_job_and_stores_nothing(store, core):
    await create(store, payload_limit=100)
    before = await stored(store)
    with pytest.raises(PayloadTooLarge) as refused:
        await core.jobs.enqueue(NS, "q", task(data=b"x" * 101), pb.EnqueueOpts())
    assert (refused.value.size, refused.value.limit) == (101, 100)
    with pytest.raises(PayloadTooLarge):  # in a bulk call, one too big refuses the call
        await core.jobs.enqueue_bulk(NS, "q", [(task(data=b"ok"), None), (task(data=b"x" * 101), None)])
    assert await stored(store) == before
    assert (await core.jobs.enqueue(NS, "q", task(data=b"x" * 100), pb.EnqueueOpts())).created


async def test_change_priority_with_lifo_puts_the_job_first_of_its_priority(store, core, check_invariants):
    first, second, third = [await enqueue(core, priority=3) for _ in range(3)]
    await store.transact(job_admin.job_change_priority, NS, "q", third, 3, True)
    await store.transact(job_admin.job_change_priority, NS, "q", second, 3, True)
    await enqueue(core, priority=2)  # a better priority still comes first
    await check_invariants()
    order = [j.id for j in await lease(core, n=4)]
    assert order[1:] == [second, third, first]  # LIFO within priority 3: the newest first


async def test_update_data_and_read_logs(store, core):
    await create(store, payload_limit=100)
    await enqueue(core)
    job = (await lease(core))[0]
    for i in range(5):
        await core.jobs.report(NS, "q", job.id, job.epoch, log_line=f"line {i}")
    updated = await store.transact(job_admin.job_update_data, NS, "q", job.id, pb.Payload(data=b"new"))
    assert updated.task.payload.data == b"new"
    with pytest.raises(PayloadTooLarge):
        await store.transact(job_admin.job_update_data, NS, "q", job.id, pb.Payload(data=b"x" * 101))

    logs = await store.transact(job_admin.job_logs, NS, "q", job.id)
    assert logs.count == 5 and [entry.line for entry in logs.lines] == [f"line {i}" for i in range(5)]
    logs = await store.transact(job_admin.job_logs, NS, "q", job.id, 1, 2)
    assert [entry.line for entry in logs.lines] == ["line 1", "line 2"]
    logs = await store.transact(job_admin.job_logs, NS, "q", job.id, 0, 1, False)
    assert [entry.line for entry in logs.lines] == ["line 4", "line 3"]


async def test_remove_dedup_key_lets_a_duplicate_in(store, core):
    first = await enqueue(core, dedup=pb.Dedup(id="d", mode=pb.DEDUP_MODE_SIMPLE))
    assert await enqueue(core, dedup=pb.Dedup(id="d", mode=pb.DEDUP_MODE_SIMPLE)) == first
    assert await store.transact(job_admin.job_remove_dedup_key, NS, "q", "d") is True
    assert await enqueue(core, dedup=pb.Dedup(id="d", mode=pb.DEDUP_MODE_SIMPLE)) != first
    assert await store.transact(job_admin.job_remove_dedup_key, NS, "q", "nope") is False


# -- workers, metrics, dead letters --------------------------------------------------------------------
async def test_workers_and_metrics(store, core, clock):
    await enqueue(core)
    await enqueue(core)
    await lease(core, worker="w1")
    clock.advance(120 * SEC)
    await lease(core, worker="w2")
    workers = await store.transact(admin.queue_workers, NS, "q")
    assert [w.id for w in workers] == ["w2", "w1"]
    recent = await store.transact(admin.queue_workers, NS, "q", 60 * SEC)
    assert [w.id for w in recent] == ["w2"]
    await enqueue(core)
    clock.advance(7 * SEC)
    m = await store.transact(admin.queue_overview, NS, "q")
    assert m.counts.active == 2 and m.workers == 2 and m.oldest_waiting_age_ns == 7 * SEC


async def test_redrive_dead_letters_back_to_their_queue(store, core, check_invariants):
    await create(store, dead_letter_queue="dlq")
    await enqueue(core)
    await fail(core, (await lease(core))[0], dead_letter=True)
    assert await counts(store, "dlq") == {"waiting": 1}
    assert await store.transact(admin.queue_redrive_dead_letters, NS, "dlq", 10) == 1
    assert await counts(store, "dlq") == {}
    assert await counts(store) == {"waiting": 1, "dead-lettered": 1}
    await check_invariants("q", "dlq")


# -- config ------------------------------------------------------------------------------------------
async def test_create_is_idempotent_and_update_changes_settings(store, events_of):
    cfg, created = await store.transact(admin.queue_create, NS, "q", pb.QueueConfig(attempts=3))
    assert created and cfg.shards == 1 and cfg.visibility_ns > 0
    again, created = await store.transact(admin.queue_create, NS, "q", pb.QueueConfig(attempts=3))
    assert not created and again == cfg
    with pytest.raises(AlreadyExists):
        await store.transact(admin.queue_create, NS, "q", pb.QueueConfig(attempts=4))

    cfg = await store.transact(admin.queue_update, NS, "q", pb.QueueConfig(concurrency=2), ["concurrency"])
    assert cfg.concurrency == 2 and cfg.attempts == 3
    cfg = await store.transact(admin.queue_set_rate_limit, NS, "q", 10, SEC)
    assert cfg.rate_limit.max == 10 and cfg.concurrency == 2
    cfg = await store.transact(admin.queue_set_concurrency, NS, "q", 0)
    assert cfg.concurrency == 0
    assert (await event_names(events_of)).count("config-updated") == 3


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"shards": 65}, "config.shards"),
        ({"visibility_ns": -1}, "config.visibility_ns"),
        ({"max_stalled": -2}, "config.max_stalled"),
        ({"rate_limit": pb.RateLimit(max=5)}, "config.rate_limit"),
        ({"rate_limit": pb.RateLimit(duration_ns=SEC)}, "config.rate_limit"),
        ({"dead_letter_queue": "q"}, "config.dead_letter_queue"),
        ({"dead_letter_queue": "bad/name"}, "config.dead_letter_queue"),
        ({"dead_letter_on_exhausted": True}, "config.dead_letter_on_exhausted"),
        ({"retention": pb.Retention(completed_count=-1)}, "config.retention.completed_count"),
        ({"retention": pb.Retention(result_ttl_ns=-1)}, "config.retention.result_ttl_ns"),
    ],
)
async def test_bad_configs_are_refused_naming_the_field(store, fields, field):
    with pytest.raises(InvalidArgument) as e:
        await store.transact(admin.queue_create, NS, "q", pb.QueueConfig(**fields))
    assert e.value.field == field
    assert await stored(store) == []


async def test_shards_cannot_change_while_the_queue_holds_jobs(store, core):
    await create(store)
    await store.transact(admin.queue_update, NS, "q", pb.QueueConfig(shards=4), ["shards"])
    await enqueue(core)
    before = await stored(store)
    with pytest.raises(InvalidArgument) as e:
        await store.transact(admin.queue_update, NS, "q", pb.QueueConfig(shards=2), ["shards"])
    assert e.value.field == "config.shards"
    with pytest.raises(InvalidArgument) as e:
        await store.transact(admin.queue_update, NS, "q", pb.QueueConfig(), ["paused"])
    assert e.value.field == "fields"
    assert await stored(store) == before


@pytest.mark.parametrize(
    "op",
    [
        (admin.queue_update, pb.QueueConfig()),
        (admin.queue_pause,),
        (admin.queue_counts,),
        (admin.queue_drain, False),
        (admin.queue_clean, S.COMPLETED, 0),
        (admin.queue_obliterate, True),
        (admin.queue_workers,),
        (admin.queue_overview,),
        (admin.queue_redrive_dead_letters,),
        (job_admin.job_get, "01J00000000000000000000000"),
        (job_admin.job_cancel, "01J00000000000000000000000"),
    ],
)
async def test_admin_on_an_unknown_queue_is_not_found_and_creates_nothing(store, op):
    fn, *args = op
    with pytest.raises(NotFound):
        await store.transact(fn, NS, "nope", *args)
    assert await stored(store) == []


async def test_bad_queue_names_are_refused(store):
    for bad in ("", "a/b", "x" * 129, "sp ace"):
        with pytest.raises(InvalidArgument) as e:
            await store.transact(admin.queue_create, NS, bad, pb.QueueConfig())
        assert e.value.field == "queue"
    assert await stored(store) == []
