"""Schedules (spec §8.1) on every backend with a manual clock: each tick enqueues exactly
one job, whatever the sweepers do (two racing, one killed mid-transaction, one that was
down, a clock that jumps); cron in a time zone across daylight-saving changes; limit,
start/end, offset, immediately; upsert by id; input checks that change nothing."""

from __future__ import annotations

import asyncio
import random
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from loam_common.errors import InvalidArgument, NotFound
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import schedules
from loam_common.jobs import states as S
from loam_common.jobs.complete import Ok
from loam_common.schedule_rules import CronRule, parse_cron, parse_tz
from loam_common.store import RESERVED_PREFIX, Fault, FaultPlan, MemoryBackend, Store
from loam_common.sweeper import Sweeper
from loam_queue_core import QueueCore

NS = "acme"
SEC = 1_000_000_000
MIN = 60 * SEC
HOUR = 60 * MIN
NY = ZoneInfo("America/New_York")


def spec(
    sid: str = "s", *, queue: str = "q", name: str = "tick", data: bytes = b"{}", **fields
) -> pb.ScheduleSpec:
    opts = fields.pop("opts", None)
    s = pb.ScheduleSpec(
        id=sid, queue=queue, task=pb.TaskSpec(name=name, payload=pb.Payload(data=data)), **fields
    )
    if opts is not None:
        s.opts.CopyFrom(opts)
    return s


def at(tz: ZoneInfo, *args: int, fold: int = 0) -> int:
    return int(datetime(*args, tzinfo=tz, fold=fold).timestamp()) * SEC


def local(t_ns: int, tz: ZoneInfo = NY) -> str:
    return datetime.fromtimestamp(t_ns / SEC, tz).strftime("%m-%d %H:%M:%S %Z")


async def ticks(jobs_of, queue: str = "q", sid: str | None = None) -> list[int]:
    """The tick times of the jobs schedules enqueued into `queue`, in order (repeats kept)."""
    out = [
        int(j.task.headers[schedules.HEADER_TICK])
        for j in (await jobs_of(queue)).values()
        if schedules.HEADER_TICK in j.task.headers
        and (sid is None or j.task.headers[schedules.HEADER_SCHEDULE] == sid)
    ]
    return sorted(out)


async def stored(store) -> list[tuple[bytes, bytes]]:
    rows = await store.snapshot(lambda tx: tx.scan(b"", b"\xff\xff"))
    return [(k, v) for k, v in rows if not k.startswith(RESERVED_PREFIX)]


async def follow(core, clock, sweep, sid: str, until_ns: int) -> None:
    """A sweeper that wakes exactly when each tick is due, until `until_ns`."""
    while True:
        rec = await core.schedules.get(NS, sid)
        if not rec.next_ns or rec.next_ns > until_ns:
            break
        clock.set(rec.next_ns)
        await sweep()
    clock.set(max(clock.now_ns(), until_ns))


# -- every ---------------------------------------------------------------------------------------
async def test_every_fires_one_job_per_tick_and_keeps_its_state(
    core, clock, sweep, jobs_of, check_invariants
):
    t0 = clock.now_ns()
    up = await core.schedules.upsert(NS, spec(every_ns=10 * SEC, opts=pb.EnqueueOpts(priority=3)))
    assert up.changed and up.schedule.next_ns == t0 + 10 * SEC and up.schedule.count == 0
    for _ in range(25):
        clock.advance(SEC)
        await sweep()
    assert await ticks(jobs_of) == [t0 + 10 * SEC, t0 + 20 * SEC]
    rec = await core.schedules.get(NS, "s")
    assert (rec.count, rec.last_tick_ns, rec.next_ns) == (2, t0 + 20 * SEC, t0 + 30 * SEC)
    job = (await jobs_of())[rec.last_job_id]
    assert job.task.name == "tick" and job.task.payload.data == b"{}"
    assert job.opts.priority == 3 and job.state == S.PRIORITIZED
    assert job.task.headers[schedules.HEADER_SCHEDULE] == "s"
    assert job.opts.idempotency.key == schedules.idempotency_key("s", t0 + 20 * SEC)
    await check_invariants()


async def test_many_ticks_with_a_sweeper_at_random_moments(core, clock, sweep, jobs_of):
    t0 = clock.now_ns()
    await core.schedules.upsert(NS, spec("fast", every_ns=SEC, misfire=pb.MISFIRE_POLICY_FIRE_ALL))
    await core.schedules.upsert(NS, spec("cron", cron="*/2 * * * * *", misfire=pb.MISFIRE_POLICY_FIRE_ALL))
    rng = random.Random(7)
    for _ in range(120):
        clock.advance(rng.randrange(0, 3 * SEC))
        await sweep()
    now = clock.now_ns()
    fast = await ticks(jobs_of, sid="fast")
    assert fast == list(range(t0 + SEC, now + 1, SEC))
    cron = await ticks(jobs_of, sid="cron")
    assert cron == [t for t in range((t0 // SEC + 1) * SEC, now + 1, SEC) if (t // SEC) % 2 == 0]


# -- cron, time zones and DST --------------------------------------------------------------------
async def test_cron_in_new_york_across_spring_forward(core, clock, sweep, jobs_of):
    clock.set(at(NY, 2024, 3, 8, 12, 0))
    await core.schedules.upsert(NS, spec("daily", cron="30 2 * * *", tz="America/New_York"))
    await core.schedules.upsert(NS, spec("half", cron="*/30 * * * *", tz="America/New_York"))
    # Only the half-hourly ticks of the night of the change matter; follow both.
    end = at(NY, 2024, 3, 11, 12, 0)
    while clock.now_ns() < end:
        nxt = min([(await core.schedules.get(NS, s)).next_ns for s in ("daily", "half")])
        clock.set(min(nxt, end))
        await sweep()
    daily = [local(t) for t in await ticks(jobs_of, sid="daily")]
    # 02:30 does not exist on March 10: it fires once, at the jump (03:00 EDT).
    assert daily == ["03-09 02:30:00 EST", "03-10 03:00:00 EDT", "03-11 02:30:00 EDT"]
    half = [local(t) for t in await ticks(jobs_of, sid="half")]
    night = [h for h in half if "03-10 00:30" <= h[:11] <= "03-10 04:00"]
    # A wildcard rule skips the hour that does not exist.
    assert night == [
        "03-10 00:30:00 EST",
        "03-10 01:00:00 EST",
        "03-10 01:30:00 EST",
        "03-10 03:00:00 EDT",
        "03-10 03:30:00 EDT",
        "03-10 04:00:00 EDT",
    ]
    assert len(half) == len(set(half))


async def test_cron_in_new_york_across_fall_back(core, clock, sweep, jobs_of):
    clock.set(at(NY, 2024, 11, 1, 12, 0))
    await core.schedules.upsert(NS, spec("fixed", cron="30 1 * * *", tz="America/New_York"))
    await core.schedules.upsert(NS, spec("hourly", cron="0 * * * *", tz="America/New_York"))
    end = at(NY, 2024, 11, 4, 12, 0)
    while clock.now_ns() < end:
        nxt = min([(await core.schedules.get(NS, s)).next_ns for s in ("fixed", "hourly")])
        clock.set(min(nxt, end))
        await sweep()
    fixed = [local(t) for t in await ticks(jobs_of, sid="fixed")]
    # 01:30 happens twice on November 3: a fixed-time rule fires the first time only.
    assert fixed == ["11-02 01:30:00 EDT", "11-03 01:30:00 EDT", "11-04 01:30:00 EST"]
    hourly = await ticks(jobs_of, sid="hourly")
    night = [local(t) for t in hourly if at(NY, 2024, 11, 3, 0, 0) <= t <= at(NY, 2024, 11, 3, 3, 0)]
    # An hourly rule fires every hour of elapsed time, in both passes of 01:00.
    assert night == [
        "11-03 00:00:00 EDT",
        "11-03 01:00:00 EDT",
        "11-03 01:00:00 EST",
        "11-03 02:00:00 EST",
        "11-03 03:00:00 EST",
    ]
    assert all(b - a == HOUR for a, b in zip(hourly, hourly[1:], strict=False))


async def test_cron_across_dst_with_a_coarse_sweeper_fires_the_same_ticks(core, clock, sweep, jobs_of):
    """A sweeper every 7 minutes (ticks late but within the grace) fires the same instants."""
    clock.set(at(NY, 2024, 11, 2, 22, 0))
    await core.schedules.upsert(
        NS, spec("q15", cron="*/15 * * * *", tz="America/New_York", misfire_grace_ns=10 * MIN)
    )
    end = at(NY, 2024, 11, 3, 4, 0)
    while clock.now_ns() < end:
        clock.advance(7 * MIN)
        await sweep()
    got = await ticks(jobs_of, sid="q15")
    rule = CronRule(parse_cron("*/15 * * * *"), parse_tz("America/New_York"))
    want, t = [], at(NY, 2024, 11, 2, 22, 0)
    while (t := rule.next_after(t)) <= clock.now_ns():
        want.append(t)
    assert got == want
    assert len(got) == (clock.now_ns() - at(NY, 2024, 11, 2, 22, 0)) // (
        15 * MIN
    )  # 15 min apart, the extra hour too


def test_rule_six_fields_macros_and_london():
    london = ZoneInfo("Europe/London")
    rule = CronRule(parse_cron("15 30 1 * * *"), london)  # seconds first
    t = rule.next_after(at(london, 2024, 3, 30, 12, 0))
    # 01:30:15 does not exist in London on March 31 (01:00 -> 02:00): fired at the jump.
    assert local(t, london) == "03-31 02:00:00 BST"
    assert local(rule.next_after(t), london) == "04-01 01:30:15 BST"
    daily = CronRule(parse_cron("@daily"), london)
    assert local(daily.next_after(at(london, 2024, 10, 26, 12, 0)), london) == "10-27 00:00:00 BST"
    assert daily.latest_at_or_before(at(london, 2024, 10, 27, 12, 0)) == at(london, 2024, 10, 27, 0, 0)


# -- racing, crashing and restarted sweepers ---------------------------------------------------------
@pytest.fixture
async def second_store(store, clock, tmp_path):
    """Another Store (its own writer thread) over the same data: a second sweeper process."""
    backend = store.backend
    if backend.capabilities.multi_process:  # a store on disk: open it again, as a process would
        other = Store(type(backend)(backend.path, clock=clock))
    else:
        other = Store(backend, close_backend=False)
    yield other
    await other.close()


async def test_two_sweepers_racing_never_enqueue_a_tick_twice(
    core, store, second_store, clock, blobs, jobs_of, check_invariants
):
    t0 = clock.now_ns()
    await core.schedules.upsert(NS, spec("a", every_ns=SEC, misfire=pb.MISFIRE_POLICY_FIRE_ALL))
    await core.schedules.upsert(NS, spec("b", cron="* * * * * *", misfire=pb.MISFIRE_POLICY_FIRE_ALL))
    await core.schedules.upsert(NS, spec("c", every_ns=3 * SEC))
    sweepers = [Sweeper(store, blobs), Sweeper(store, blobs), Sweeper(second_store, blobs)]
    rng = random.Random(11)
    for _ in range(60):
        clock.advance(rng.randrange(0, 2 * SEC))
        await asyncio.gather(*(s.run_once() for s in sweepers))
    now = clock.now_ns()
    a = await ticks(jobs_of, sid="a")
    assert a == list(range(t0 + SEC, now + 1, SEC))
    b = await ticks(jobs_of, sid="b")
    assert b == list(range((t0 // SEC + 1) * SEC, now + 1, SEC))
    c = await ticks(jobs_of, sid="c")
    assert c == list(range(t0 + 3 * SEC, now + 1, 3 * SEC))
    await check_invariants()


async def test_a_sweeper_killed_between_enqueue_and_bookkeeping_leaves_nothing(
    core, store, clock, sweep, jobs_of, monkeypatch
):
    t0 = clock.now_ns()
    await core.schedules.upsert(NS, spec(every_ns=10 * SEC))
    clock.advance(10 * SEC)
    real_save = schedules._save

    def crash(tx, ns, rec):  # the job is enqueued in this transaction; then the process dies
        raise RuntimeError("killed")

    monkeypatch.setattr(schedules, "_save", crash)
    with pytest.raises(RuntimeError):
        await sweep()
    assert await ticks(jobs_of) == []  # rolled back with the bookkeeping
    monkeypatch.setattr(schedules, "_save", real_save)
    await sweep()
    await sweep()
    assert await ticks(jobs_of) == [t0 + 10 * SEC]
    assert (await core.schedules.get(NS, "s")).count == 1


async def test_lost_commit_acknowledgements_do_not_duplicate_ticks(clock, blobs, tmp_path):
    """The memory store loses commit answers (committed or not); the runner's commit tokens
    and the tick's idempotency key keep every tick to one job."""
    faults = FaultPlan(seed=5, conflict=0.1, unknown_committed=0.15, unknown_not_committed=0.15)
    store = Store(MemoryBackend(clock=clock, faults=faults))
    try:
        core = QueueCore(store, blobs)
        t0 = clock.now_ns()
        await core.schedules.upsert(NS, spec(every_ns=SEC, misfire=pb.MISFIRE_POLICY_FIRE_ALL))
        sweeper = Sweeper(store, blobs)
        for _ in range(40):
            clock.advance(SEC)
            await sweeper.run_once()
        jobs = await store.snapshot(lambda tx: tx.scan(b"t/acme/q/q/j/", b"t/acme/q/q/j0"))
        got = sorted(int(pb.Job.FromString(v).task.headers[schedules.HEADER_TICK]) for _, v in jobs)
        assert got == list(range(t0 + SEC, clock.now_ns() + 1, SEC))
        assert faults.injected[Fault.UNKNOWN_COMMITTED] and faults.injected[Fault.UNKNOWN_NOT_COMMITTED]
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (pb.MISFIRE_POLICY_UNSPECIFIED, [10]),  # default: the latest missed tick, once
        (pb.MISFIRE_POLICY_FIRE_LATEST, [10]),
        (pb.MISFIRE_POLICY_SKIP, []),
        (pb.MISFIRE_POLICY_FIRE_ALL, list(range(1, 11))),
    ],
)
async def test_a_restarted_sweeper_catches_up_per_the_misfire_policy(
    core, clock, sweep, jobs_of, policy, expected
):
    t0 = clock.now_ns()
    await core.schedules.upsert(NS, spec(every_ns=MIN, misfire=policy, misfire_grace_ns=10 * SEC))
    clock.advance(10 * MIN + 30 * SEC)  # down for ten ticks; the last is 30 s late
    await sweep()
    assert await ticks(jobs_of) == [t0 + k * MIN for k in expected]
    rec = await core.schedules.get(NS, "s")
    assert rec.next_ns == t0 + 11 * MIN and rec.count == len(expected)
    clock.set(t0 + 11 * MIN)  # back on time: the next tick fires normally
    await sweep()
    assert (await ticks(jobs_of))[-1] == t0 + 11 * MIN


async def test_ticks_within_the_grace_are_on_time_for_every_policy(core, clock, sweep, jobs_of):
    t0 = clock.now_ns()
    await core.schedules.upsert(NS, spec(every_ns=10 * SEC, misfire=pb.MISFIRE_POLICY_SKIP))
    clock.advance(45 * SEC)  # four ticks, all less than 60 s late
    await sweep()
    assert await ticks(jobs_of) == [t0 + k * 10 * SEC for k in (1, 2, 3, 4)]


async def test_a_clock_that_jumps_back_does_not_refire(core, clock, sweep, jobs_of):
    t0 = clock.now_ns()
    await core.schedules.upsert(NS, spec(every_ns=10 * SEC))
    clock.advance(20 * SEC)
    await sweep()
    clock.set(t0 + 5 * SEC)  # the clock jumps back over two fired ticks
    for _ in range(5):
        clock.advance(5 * SEC)
        await sweep()
    assert await ticks(jobs_of) == [t0 + 10 * SEC, t0 + 20 * SEC, t0 + 30 * SEC]


async def test_a_recreated_schedule_cannot_refire_a_tick_its_predecessor_fired(core, clock, sweep, jobs_of):
    t0 = clock.now_ns()
    await core.schedules.upsert(NS, spec(every_ns=10 * SEC, start_ns=t0 + 10 * SEC))
    clock.advance(10 * SEC)
    await sweep()
    assert await core.schedules.remove(NS, "s") is True
    assert await core.schedules.remove(NS, "s") is False
    clock.set(t0 + 5 * SEC)  # a clock jump back, and the same id with another template
    await core.schedules.upsert(NS, spec(every_ns=10 * SEC, start_ns=t0 + 10 * SEC, data=b'{"v":2}'))
    clock.set(t0 + 20 * SEC)
    await sweep()
    assert await ticks(jobs_of) == [t0 + 10 * SEC, t0 + 20 * SEC]  # t0+10 s not enqueued again
    rec = await core.schedules.get(NS, "s")
    assert rec.count == 1 and rec.last_tick_ns == t0 + 20 * SEC and rec.last_error == ""


# -- limit, start, end, offset, immediately ---------------------------------------------------------------
async def test_limit_fires_that_many_ticks_then_stops(core, clock, sweep, jobs_of):
    t0 = clock.now_ns()
    await core.schedules.upsert(NS, spec(every_ns=SEC, limit=3, misfire=pb.MISFIRE_POLICY_FIRE_ALL))
    for _ in range(6):
        clock.advance(SEC)
        await sweep()
    assert await ticks(jobs_of) == [t0 + SEC, t0 + 2 * SEC, t0 + 3 * SEC]
    rec = await core.schedules.get(NS, "s")
    assert (rec.count, rec.next_ns) == (3, 0)
    clock.advance(10 * SEC)
    await sweep()
    assert len(await ticks(jobs_of)) == 3


async def test_start_and_end_bound_the_ticks(core, clock, sweep, jobs_of):
    t0 = clock.now_ns()
    await core.schedules.upsert(NS, spec(every_ns=10 * SEC, start_ns=t0 + 100 * SEC, end_ns=t0 + 130 * SEC))
    await core.schedules.upsert(
        NS, spec("cron", cron="* * * * * *", start_ns=t0 + 5 * SEC, end_ns=t0 + 8 * SEC)
    )
    for _ in range(30):
        clock.advance(5 * SEC)
        await sweep()
    assert await ticks(jobs_of, sid="s") == [t0 + 100 * SEC, t0 + 110 * SEC, t0 + 120 * SEC, t0 + 130 * SEC]
    assert await ticks(jobs_of, sid="cron") == [t0 + k * SEC for k in (5, 6, 7, 8)]
    assert (await core.schedules.get(NS, "s")).next_ns == 0


async def test_offset_shifts_every_tick(core, clock, sweep, jobs_of):
    clock.set(at(NY, 2024, 6, 1, 9, 0))
    await core.schedules.upsert(NS, spec(cron="0 * * * *", tz="America/New_York", offset_ns=5 * MIN))
    await follow(core, clock, sweep, "s", at(NY, 2024, 6, 1, 12, 0))
    assert [local(t) for t in await ticks(jobs_of)] == [
        "06-01 09:05:00 EDT",
        "06-01 10:05:00 EDT",
        "06-01 11:05:00 EDT",
    ]


async def test_immediately_fires_in_the_upsert_then_follows_the_rule(core, clock, sweep, jobs_of):
    t0 = clock.now_ns()
    up = await core.schedules.upsert(NS, spec(every_ns=MIN, immediately=True, limit=2))
    assert up.fired.ticks == 1 and up.schedule.count == 1
    assert await ticks(jobs_of) == [t0]
    jobs = await core.jobs.lease(NS, ["q"], "w", 5)
    assert len(jobs) == 1  # the tick's job is ready at once
    clock.advance(MIN)
    await sweep()
    clock.advance(MIN)
    await sweep()
    assert await ticks(jobs_of) == [t0, t0 + MIN]  # limit 2 counts the immediate tick


# -- upsert, remove, read --------------------------------------------------------------------------------------
async def test_upsert_same_rule_changes_nothing_new_rule_replaces(core, store, clock, sweep, jobs_of):
    t0 = clock.now_ns()
    first = await core.schedules.upsert(NS, spec(every_ns=10 * SEC))
    clock.advance(10 * SEC)
    await sweep()
    before = await stored(store)
    again = await core.schedules.upsert(NS, spec(every_ns=10 * SEC))  # beat restarted, same entry
    assert again.changed is False and again.schedule.count == 1
    assert await stored(store) == before
    clock.advance(3 * SEC)
    new = await core.schedules.upsert(NS, spec(every_ns=60 * SEC))
    assert new.changed and new.schedule.count == 0 and new.schedule.created_ns == first.schedule.created_ns
    assert new.schedule.next_ns == t0 + 13 * SEC + 60 * SEC
    assert new.schedule.last_tick_ns == t0 + 10 * SEC
    due = await store.snapshot(lambda tx: tx.scan(b"t/acme/sdue/", b"t/acme/sdue0"))
    assert len(due) == 1  # the old rule's entry went in the same transaction
    clock.set(t0 + 73 * SEC)
    await sweep()
    assert await ticks(jobs_of) == [t0 + 10 * SEC, t0 + 73 * SEC]


async def test_get_list_and_remove(core, clock, sweep, jobs_of):
    for sid in ("c", "a", "b"):
        await core.schedules.upsert(NS, spec(sid, every_ns=SEC))
    page, token = await core.schedules.list(NS, limit=2)
    assert [r.id for r in page] == ["a", "b"] and token == "b"
    page, token = await core.schedules.list(NS, after=token, limit=2)
    assert [r.id for r in page] == ["c"] and token == ""
    assert await core.schedules.remove(NS, "b") is True
    with pytest.raises(NotFound):
        await core.schedules.get(NS, "b")
    clock.advance(SEC)
    await sweep()
    assert {j.task.headers[schedules.HEADER_SCHEDULE] for j in (await jobs_of()).values()} == {"a", "c"}


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"cron": "61 * * * *"}, "spec.cron"),
        ({"cron": "* * *"}, "spec.cron"),
        ({"cron": "* * * * * * *"}, "spec.cron"),
        ({"cron": "0 0 30 2 *"}, "spec.cron"),  # never matches
        ({"cron": "0 * * * *", "tz": "Mars/Olympus"}, "spec.tz"),
        ({}, "spec.cron"),
        ({"cron": "0 * * * *", "every_ns": SEC}, "spec.every_ns"),
        ({"every_ns": 10}, "spec.every_ns"),
        ({"every_ns": SEC, "tz": "UTC"}, "spec.tz"),
        ({"every_ns": SEC, "immediately": True, "start_ns": 5}, "spec.immediately"),
        ({"every_ns": SEC, "start_ns": 10, "end_ns": 5}, "spec.end_ns"),
        ({"every_ns": SEC, "end_ns": 5}, "spec.end_ns"),  # in the past
        ({"every_ns": SEC, "offset_ns": -1}, "spec.offset_ns"),
        ({"every_ns": SEC, "misfire": 9}, "spec.misfire"),
        ({"every_ns": SEC, "queue": "a/b"}, "spec.queue"),
        ({"every_ns": SEC, "opts": pb.EnqueueOpts(job_key="k")}, "spec.opts.job_key"),
        (
            {"every_ns": SEC, "opts": pb.EnqueueOpts(idempotency=pb.Idempotency(key="k"))},
            "spec.opts.idempotency",
        ),
        ({"every_ns": SEC, "opts": pb.EnqueueOpts(not_before=pb.Delay(delay_ns=5))}, "spec.opts.not_before"),
        ({"every_ns": SEC, "opts": pb.EnqueueOpts(priority=2**22)}, "spec.opts.priority"),
        ({"every_ns": SEC, "data": b"x" * (schedules.PAYLOAD_LIMIT + 1)}, "spec.task.payload"),
    ],
)
async def test_bad_specs_are_refused_naming_the_field_and_change_nothing(core, store, fields, field):
    await core.schedules.upsert(NS, spec("keep", every_ns=SEC))
    before = await stored(store)
    with pytest.raises(InvalidArgument) as e:
        await core.schedules.upsert(NS, spec("keep", **fields))
    assert e.value.field == field, e.value.message
    assert await stored(store) == before


async def test_a_tick_into_a_paused_queue_waits_there(core, clock, sweep, jobs_of, configure):
    await configure("q", paused=True)
    t0 = clock.now_ns()
    await core.schedules.upsert(NS, spec(every_ns=SEC))
    clock.advance(SEC)
    await sweep()
    assert await ticks(jobs_of) == [t0 + SEC]
    assert await core.jobs.lease(NS, ["q"], "w", 1) == []


async def test_scheduled_jobs_run_like_any_job(core, clock, sweep):
    await core.schedules.upsert(NS, spec(every_ns=SEC))
    clock.advance(SEC)
    rep = await sweep()
    assert rep.ticks == 1 and (NS, "q") in rep.woke
    (job,) = await core.jobs.lease(NS, ["q"], "w", 1)
    done = await core.jobs.complete(NS, "q", job.id, job.epoch, Ok())
    assert done.state == S.COMPLETED
