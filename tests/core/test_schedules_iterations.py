"""Iteration-driven schedules (BullMQ's job schedulers): the client computes each next
time and the server stores the rule, the template and the chain, enqueues each
iteration's job with the record in one transaction, and never fires them itself."""

from __future__ import annotations

from dataclasses import replace

import pytest

from loam_common.errors import AlreadyExists, InvalidArgument
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import admin, schedules, sweeps
from loam_common.jobs import states as S

NS = "acme"
SEC = 1_000_000_000
ITER = pb.SCHEDULE_DRIVER_ITERATIONS


def template() -> pb.TaskSpec:
    return pb.TaskSpec(name="tpl", payload=pb.Payload(data=b'{"a":1}'))


def request(
    sid: str = "s", *, next_ns: int, key: str | None = None, delay_ns: int = 0, **fields
) -> schedules.Iteration:
    advance = fields.pop("advance", False)
    if_next_ns = fields.pop("if_next_ns", 0)
    replace = fields.pop("replace_job_id", "")
    spec = pb.ScheduleSpec(id=sid, queue="q", task=template(), driver=ITER)
    if not fields:
        spec.every_ns = 5 * SEC
    for k, v in fields.items():
        setattr(spec, k, v)
    task = opts = None
    if key is not None:
        task, opts = template(), pb.EnqueueOpts(job_key=key)
        if delay_ns:
            opts.not_before.delay_ns = delay_ns
    return schedules.Iteration(spec, next_ns, advance, if_next_ns, task, opts, replace_job_id=replace)


async def test_upsert_stores_the_chain_and_its_iteration_and_the_sweeper_leaves_it(
    core, clock, sweep, jobs_of, check_invariants
):
    it = await core.schedules.iterate(
        NS, request(next_ns=1000 * SEC, key="repeat:s:1000000", delay_ns=5 * SEC)
    )
    assert it.changed and it.job is not None and it.job.created
    rec = await core.schedules.get(NS, "s")
    assert (rec.driver, rec.next_ns, rec.count, rec.last_job_id) == (ITER, 1000 * SEC, 1, it.job.job_id)
    job = (await jobs_of())[it.job.job_id]
    assert job.state == S.DELAYED and job.opts.job_key == "repeat:s:1000000"
    assert job.task.headers[schedules.HEADER_SCHEDULE] == "s"
    for _ in range(3):  # the rule is every 5 s; the server fires nothing itself
        clock.advance(60 * SEC)
        await sweep()
    assert [j.opts.job_key for j in (await jobs_of()).values()] == ["repeat:s:1000000"]
    assert (await core.schedules.get(NS, "s")).count == 1
    await check_invariants()


async def test_a_rule_the_server_cannot_parse_or_dates_in_the_past_are_the_clients(core):
    # A custom repeat strategy (RRULE text) on a client clock years behind the server's.
    rrule, end = "RRULE:FREQ=SECONDLY;INTERVAL=2", 1_486_481_100 * SEC
    req = request(next_ns=1_486_481_042 * SEC, key="repeat:s:1486481042000", cron=rrule, end_ns=end)
    it = await core.schedules.iterate(NS, req)
    assert it.schedule.cron.startswith("RRULE") and it.schedule.next_ns == 1_486_481_042 * SEC


async def test_advance_counts_once_under_its_guard(core, jobs_of):
    await core.schedules.iterate(NS, request(next_ns=10 * SEC, key="repeat:s:10000"))
    adv = request(next_ns=15 * SEC, key="repeat:s:15000", delay_ns=5 * SEC, advance=True, if_next_ns=10 * SEC)
    first = await core.schedules.iterate(NS, adv)
    second = await core.schedules.iterate(NS, adv)  # a second worker finishing the same iteration
    assert first.changed and not second.changed
    rec = await core.schedules.get(NS, "s")
    assert (rec.count, rec.next_ns, rec.last_job_id) == (2, 15 * SEC, first.job.job_id)
    assert sorted(j.opts.job_key for j in (await jobs_of()).values()) == ["repeat:s:10000", "repeat:s:15000"]
    # The rule and template stay as the upsert set them.
    assert rec.every_ns == 5 * SEC and rec.task.payload.data == b'{"a":1}'


async def test_advance_onto_a_taken_iteration_changes_nothing(core, jobs_of):
    await core.schedules.iterate(NS, request(next_ns=10 * SEC, key="repeat:s:10000"))
    await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="x"), pb.EnqueueOpts(job_key="repeat:s:15000"))
    adv = request(next_ns=15 * SEC, key="repeat:s:15000", advance=True, if_next_ns=10 * SEC)
    adv.iteration_opts.job_key_keeps_first = True
    it = await core.schedules.iterate(NS, adv)
    assert not it.changed
    rec = await core.schedules.get(NS, "s")
    assert (rec.count, rec.next_ns) == (1, 10 * SEC)


async def test_upsert_onto_a_taken_key_refuses_and_changes_nothing(core):
    await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="x"), pb.EnqueueOpts(job_key="repeat:s:10000"))
    with pytest.raises(AlreadyExists):
        await core.schedules.iterate(NS, request(next_ns=10 * SEC, key="repeat:s:10000"))
    assert [r.id for r in (await core.schedules.list(NS))[0]] == []


async def test_upsert_replaces_a_pending_iteration_and_keeps_the_count(core, jobs_of):
    await core.schedules.iterate(NS, request(next_ns=10 * SEC, key="repeat:s:10000"))
    adv = request(next_ns=15 * SEC, key="repeat:s:15000", delay_ns=SEC, advance=True, if_next_ns=10 * SEC)
    second = await core.schedules.iterate(NS, adv)
    it = await core.schedules.iterate(
        NS,
        request(next_ns=20 * SEC, key="repeat:s:20000", replace_job_id=second.job.job_id, every_ns=7 * SEC),
    )
    assert it.replaced and it.schedule.count == 2 and it.schedule.every_ns == 7 * SEC
    assert sorted(j.opts.job_key for j in (await jobs_of()).values()) == ["repeat:s:10000", "repeat:s:20000"]


async def test_drain_and_clean_leave_the_pending_iteration_and_remove_takes_it(core, store, jobs_of):
    it = await core.schedules.iterate(NS, request(next_ns=10 * SEC, key="repeat:s:10000"))
    await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="plain"))
    await core.jobs.enqueue(
        NS, "q", pb.TaskSpec(name="later"), pb.EnqueueOpts(not_before=pb.Delay(delay_ns=SEC))
    )
    assert await store.transact(admin.queue_drain, NS, "q", True) == 2
    assert list(await jobs_of()) == [it.job.job_id]
    assert await store.transact(admin.queue_clean, NS, "q", S.WAITING, 0) == []
    assert await core.schedules.remove(NS, "s")
    assert list(await jobs_of()) == [it.job.job_id]  # waiting, not delayed: it stays, as in BullMQ
    it = await core.schedules.iterate(NS, request(next_ns=20 * SEC, key="repeat:s:20000", delay_ns=SEC))
    assert await core.schedules.remove(NS, "s")
    assert it.job.job_id not in await jobs_of()


async def test_server_driven_schedules_refuse_the_iteration_fields(core):
    req = request(next_ns=10 * SEC)
    req.spec.driver = pb.SCHEDULE_DRIVER_SERVER
    with pytest.raises(InvalidArgument):
        schedules.check_iteration(req)
    req = request(next_ns=10 * SEC, key="k")
    req.iteration_opts.job_key = ""
    with pytest.raises(InvalidArgument, match="iteration_opts.job_key"):
        schedules.check_iteration(req)


async def test_a_replaced_cron_rule_may_take_the_key_of_an_iteration_a_worker_holds(core, jobs_of):
    cron = "*/10 * * * * *"
    first = await core.schedules.iterate(NS, request(next_ns=10 * SEC, key="repeat:s:10000", cron=cron))
    await core.jobs.lease(NS, ["q"], "w", 1, 0)
    adv = request(next_ns=20 * SEC, key="repeat:s:20000", delay_ns=SEC, advance=True, if_next_ns=10 * SEC)
    second = await core.schedules.iterate(NS, adv)
    every = request(next_ns=10 * SEC, key="repeat:s:10000", replace_job_id=second.job.job_id)
    with pytest.raises(AlreadyExists):  # an `every` rule moves on to the next free slot instead
        await core.schedules.iterate(NS, every)
    it = await core.schedules.iterate(
        NS,
        request(
            next_ns=10 * SEC, key="repeat:s:10000", delay_ns=SEC, replace_job_id=second.job.job_id, cron=cron
        ),
    )
    assert it.replaced and it.job.created and it.job.job_id != first.job.job_id
    jobs = await jobs_of()
    assert jobs[first.job.job_id].state == S.ACTIVE and jobs[it.job.job_id].state == S.DELAYED
    # Without a replaced iteration, a taken key refuses the upsert.
    with pytest.raises(AlreadyExists):
        await core.schedules.iterate(NS, request(next_ns=20 * SEC, key="repeat:s:10000", cron=cron))


async def test_an_upsert_guarded_by_what_it_read_changes_nothing_after_another_write(core, clock, jobs_of):
    fresh = replace(request(next_ns=10 * SEC, key="repeat:s:10000"), if_updated_ns=0)  # no record yet
    first = await core.schedules.iterate(NS, fresh)
    assert first.changed
    clock.advance(SEC)
    late = replace(request(next_ns=11 * SEC, key="repeat:s:11000"), if_updated_ns=0)
    # read before the first write: refused, read again
    assert not (await core.schedules.iterate(NS, late)).changed
    late = replace(late, if_updated_ns=first.schedule.updated_ns, replace_job_id=first.job.job_id)
    again = await core.schedules.iterate(NS, late)
    assert again.changed and again.replaced
    assert [j.opts.job_key for j in (await jobs_of()).values()] == ["repeat:s:11000"]


async def test_an_iteration_is_never_failed_for_stalling(core, store, clock, jobs_of, configure):
    await configure("q", ns=NS, max_stalled=0)
    it = await core.schedules.iterate(NS, request(next_ns=10 * SEC, key="repeat:s:10000"))
    plain = await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="plain"))
    for _ in range(2):
        await core.jobs.lease(NS, ["q"], "w", 2, 0, visibility_ns=SEC)
        clock.advance(2 * SEC)
        await store.transact(sweeps.sweep_stalled, NS, "q", 0)
    jobs = await jobs_of()
    assert jobs[it.job.job_id].state != S.FAILED and jobs[it.job.job_id].stalled == 2
    assert jobs[plain.job_id].state == S.FAILED  # an ordinary job stalled past the limit
