"""The durable state machine in process, on every embedded store (SQLite, memory, and
memory with a fault plan of conflicts, region errors and unknown commit outcomes), with a
ManualClock: first settle wins, the resend timer re-sends a lost `execute`, a lapsed
lease hands the task back, timeout always wins, schedules catch up, retention deletes
whole settled workflows and nothing else."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json

import pytest
from loam_durable import transitions as tr
from loam_durable.facade import DurableCore
from loam_durable.hub import Hub
from loam_durable.records import DurableError
from loam_durable.timers import DurableTimers

from loam_common import keys
from loam_common.errors import InvalidArgument
from loam_common.events import event_log_read
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import schedules
from loam_common.store import FaultPlan, ManualClock, MemoryBackend, SqliteBackend, Store

NS = "t1"
SEC = 1_000_000_000
TARGET = {"resonate:target": "poll://any@workers"}


class RecordingHub(Hub):
    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, dict]] = []

    def send(self, ns: str, address: str, message: dict) -> bool:
        self.sent.append((address, message))
        return super().send(ns, address, message)

    def executes(self, task_id: str) -> list[int]:
        return [
            m["data"]["task"]["version"]
            for _, m in self.sent
            if m["kind"] == "execute" and m["data"]["task"]["id"] == task_id
        ]


@pytest.fixture(params=["sqlite", "memory", "memory-faults", "memory-txn-faults"])
async def env(request, tmp_path):
    clock = ManualClock()
    faults = FaultPlan(seed=7, conflict=0.1, region_read=0.02, region_commit=0.05, unknown_committed=0.08,
                       unknown_not_committed=0.08) if "faults" in request.param else None  # fmt: skip
    if request.param == "sqlite":
        backend = SqliteBackend(tmp_path / "store.db", clock=clock)
    else:
        backend = MemoryBackend(clock=clock, faults=faults)
        if request.param == "memory-txn-faults":
            backend.capabilities = dataclasses.replace(backend.capabilities, group_commit=False)
    store = Store(backend)
    hub = RecordingHub()
    core = DurableCore(store, hub, retry_ms=30_000)
    yield core, hub, clock
    await store.close()


async def call(core: DurableCore, kind: str, data: dict):
    return await core.request(NS, kind, data)


def create_data(promise_id: str, timeout_at: int, **tags: str) -> dict:
    return {"id": promise_id, "timeoutAt": timeout_at, "param": {}, "tags": tags}


def now_ms(clock: ManualClock) -> int:
    return clock.now_ns() // 1_000_000


async def test_concurrent_settles_settle_once(env):
    core, _, clock = env
    await call(
        core, "promise.create", create_data("race", now_ms(clock) + 60_000, **{"resonate:external": "true"})
    )
    results = await asyncio.gather(*[
        call(core, "promise.settle", {"id": "race", "state": "resolved", "value": {"data": str(i)}}) for i in range(20)
    ])  # fmt: skip
    values = {r[1]["promise"]["value"]["data"] for r in results}
    assert len(values) == 1  # every caller sees the one settle that won
    events = await core.store.snapshot(event_log_read, NS, tr.EVENT_QUEUE, 0, 0, 100)
    assert [e.event for e in events if e.job_id == "race"] == [
        "durable.promise.created",
        "durable.promise.settled",
    ]


async def test_the_resend_timer_sends_a_lost_execute_again_and_a_lapsed_lease_returns_the_task(env):
    core, hub, clock = env
    timers = DurableTimers(core, "sweeper-1")
    await call(core, "promise.create", create_data("job", now_ms(clock) + 3_600_000, **TARGET))
    assert hub.executes("job") == [0]  # nobody was connected: lost
    clock.advance(29 * SEC)
    await timers.run_once()
    assert hub.executes("job") == [0]
    clock.advance(2 * SEC)
    await timers.run_once()
    assert hub.executes("job") == [0, 0]  # resent, same version
    _, acq = await call(core, "task.acquire", {"id": "job", "version": 0, "pid": "w1", "ttl": 5000})
    assert acq["task"]["version"] == 1
    clock.advance(6 * SEC)  # w1 died: no heartbeat
    await timers.run_once()
    assert hub.executes("job") == [0, 0, 1]
    with pytest.raises(DurableError) as e:  # the dead worker's lease no longer writes
        await call(core, "task.fulfill", {"id": "job", "version": 1, "action": {
            "kind": "promise.settle", "data": {"id": "job", "state": "resolved", "value": {}}}})  # fmt: skip
    assert e.value.status == 409
    assert (await call(core, "promise.get", {"id": "job"}))[1]["promise"]["state"] == "pending"


async def test_timeout_always_wins_over_a_lapsed_lease(env):
    core, hub, clock = env
    timers = DurableTimers(core, "sweeper-1")
    await call(core, "task.create", {"pid": "w1", "ttl": 5000, "action": {
        "kind": "promise.create", "data": create_data("short", now_ms(clock) + 2000, **TARGET)}})  # fmt: skip
    clock.advance(10 * SEC)  # past the promise's timeout and the task's lease
    await timers.run_once()
    _, p = await call(core, "promise.get", {"id": "short"})
    assert (
        p["promise"]["state"] == "rejected_timedout"
        and p["promise"]["settledAt"] == p["promise"]["timeoutAt"]
    )
    _, t = await call(core, "task.get", {"id": "short"})
    assert t["task"]["state"] == "fulfilled"
    assert hub.executes("short") == []  # no new work for a settled promise


async def test_a_schedule_fires_every_missed_occurrence_once(env):
    core, hub, clock = env
    clock.set(1_800_000_000 * SEC)  # on a whole second
    timers = DurableTimers(core, "sweeper-1")
    await call(core, "schedule.create", {"id": "tick", "cron": "* * * * * *", "promiseId": "{{.id}}-{{.timestamp}}",
                                         "promiseTimeout": 60_000, "promiseParam": {}, "promiseTags": TARGET})  # fmt: skip
    clock.advance(3 * SEC)
    await timers.run_once()
    await timers.run_once()  # nothing due twice
    fired = [m["data"]["task"]["id"] for _, m in hub.sent if m["kind"] == "execute"]
    base = 1_800_000_000_000
    assert fired == [f"tick-{base + 1000}", f"tick-{base + 2000}", f"tick-{base + 3000}"]
    _, s = await call(core, "schedule.get", {"id": "tick"})
    assert s["schedule"]["lastRunAt"] == base + 3000 and s["schedule"]["nextRunAt"] == base + 4000


async def test_a_loam_schedule_tick_starts_its_durable_function_once(env):
    """A Loam schedule in durable mode (loam_common.jobs.schedules): each tick leaves a
    start for the durable timers, which create the tick's root promise and dispatch it
    once; the same tick again (a re-created schedule firing it anew) starts nothing."""
    core, hub, clock = env
    clock.set(1_800_000_000 * SEC)
    timers = DurableTimers(core, "sweeper-1")
    spec = pb.ScheduleSpec(id="billing", every_ns=SEC, queue="Workers", task=pb.TaskSpec(
        name="billed", payload=pb.Payload(data=b'["acme",5]', content_type="application/json")),
        opts=pb.EnqueueOpts(mode=pb.MODE_DURABLE, durable_function="billed"))  # fmt: skip
    schedules.check_schedule(spec)
    await core.store.transact(schedules.schedule_upsert, NS, spec)
    clock.advance(2 * SEC)
    await core.store.transact(schedules.sweep_schedules, NS)
    await timers.run_once()
    base = 1_800_000_000_000
    ticks = [f"billing-{base + 1000}", f"billing-{base + 2000}"]
    assert [m["data"]["task"]["id"] for _, m in hub.sent if m["kind"] == "execute"] == ticks
    assert {a for a, m in hub.sent if m["kind"] == "execute"} == {"poll://any@workers"}
    _, p = await call(core, "promise.get", {"id": ticks[0]})
    param = json.loads(base64.b64decode(p["promise"]["param"]["data"]))
    assert param == {"func": "billed", "args": ["acme", 5], "kwargs": {}, "version": 1}
    assert p["promise"]["createdAt"] == base + 1000 and p["promise"]["timeoutAt"] == base + 1000 + 86_400_000
    rec = await core.store.snapshot(schedules.schedule_get, NS, "billing")
    assert (rec.count, rec.last_job_id) == (2, ticks[1])

    # the same tick asked for again (two sweepers, a schedule re-created over its past)
    def fire_again(tx, tick_ms):
        promise_id, request = schedules.durable_start_request(rec, tick_ms)
        tx.put(keys.durable_start(NS, tick_ms, promise_id), json.dumps(request).encode())

    await core.store.transact(fire_again, base + 1000)
    assert (await timers.run_once()).fired == 1  # the start was taken, and found its promise
    executes = [m["data"]["task"]["id"] for _, m in hub.sent if m["kind"] == "execute"]
    assert executes == ticks  # nothing new


async def test_a_resonate_schedule_is_read_and_removed_as_a_loam_schedule(env):
    core, hub, clock = env
    clock.set(1_800_000_000 * SEC)
    timers = DurableTimers(core, "sweeper-1")
    param = {
        "data": base64.b64encode(json.dumps({"func": "ticked", "args": [], "kwargs": {}}).encode()).decode()
    }
    await call(core, "schedule.create", {"id": "tick", "cron": "* * * * * *", "promiseId": "{{.id}}-{{.timestamp}}",
                                         "promiseTimeout": 60_000, "promiseParam": param, "promiseTags": TARGET})  # fmt: skip
    rec = await core.store.snapshot(schedules.schedule_get, NS, "resonate:tick")
    assert (rec.queue, rec.opts.mode, rec.opts.durable_function) == ("workers", pb.MODE_DURABLE, "ticked")
    assert rec.next_ns == (1_800_000_000 + 1) * SEC
    assert await core.store.transact(schedules.schedule_remove, NS, "resonate:tick") is True
    assert await core.store.transact(schedules.schedule_remove, NS, "resonate:tick") is False
    with pytest.raises(DurableError) as e:
        await call(core, "schedule.get", {"id": "tick"})
    assert e.value.status == 404
    clock.advance(3 * SEC)
    await timers.run_once()
    assert [m for _, m in hub.sent if m["kind"] == "execute"] == []  # it fires no more


async def test_a_durable_loam_schedule_refuses_what_cannot_start(env):
    base = dict(
        every_ns=SEC, queue="workers", opts=pb.EnqueueOpts(mode=pb.MODE_DURABLE, durable_function="f")
    )
    with pytest.raises(InvalidArgument, match="':'"):
        schedules.check_schedule(pb.ScheduleSpec(id="a:b", task=pb.TaskSpec(name="f"), **base))
    bad_args = pb.TaskSpec(name="f", payload=pb.Payload(data=b"{nope", content_type="application/json"))
    with pytest.raises(InvalidArgument, match="JSON"):
        schedules.check_schedule(pb.ScheduleSpec(id="ab", task=bad_args, **base))
    no_function = dict(base, opts=pb.EnqueueOpts(mode=pb.MODE_DURABLE))
    with pytest.raises(InvalidArgument, match="durable_function"):
        schedules.check_schedule(pb.ScheduleSpec(id="ab", task=pb.TaskSpec(name="f"), **no_function))


async def test_retention_deletes_whole_settled_workflows_only(env):
    core, _, clock = env
    await core.set_retention(NS, 60_000)
    for root in ("done", "running"):
        await call(core, "task.create", {"pid": "w", "ttl": 3_600_000, "action": {
            "kind": "promise.create", "data": create_data(root, now_ms(clock) + 3_600_000, **TARGET)}})  # fmt: skip
        await call(core, "task.fence", {"id": root, "version": 1, "action": {
            "kind": "promise.create", "data": create_data(f"{root}:1", now_ms(clock) + 3_600_000)}})  # fmt: skip
    await call(core, "task.fulfill", {"id": "done", "version": 1, "action": {
        "kind": "promise.settle", "data": {"id": "done", "state": "resolved", "value": {}}}})  # fmt: skip
    clock.advance(61 * SEC)
    await DurableTimers(core, "sweeper-1").run_once()  # its first pass sweeps retention
    for gone in ("done", "done:1"):
        with pytest.raises(DurableError):
            await call(core, "promise.get", {"id": gone})
    assert await core.store.snapshot(lambda tx: tx.get(keys.durable_task(NS, "done"))) is None
    assert (await call(core, "promise.get", {"id": "running:1"}))[1]["promise"]["state"] == "pending"


async def test_bad_input_changes_nothing(env):
    core, _, clock = env

    def dump(tx):
        return [(k, v) for k, v in tx.scan(b"", b"\xff" * 8) if not k.startswith(b"\x00")]

    before = await core.store.snapshot(dump)
    for kind, data in [
        ("promise.create", create_data("x", now_ms(clock) + 1000, **{"resonate:target": "smtp://any@g"})),
        ("promise.create", create_data("x:1", now_ms(clock) + 1000, **{"resonate:origin": "y"})),
        (
            "task.create",
            {"pid": "p", "ttl": 0, "action": {"kind": "promise.create", "data": create_data("x", 1)}},
        ),
        (
            "schedule.create",
            {"id": "s", "cron": "not cron", "promiseId": "p", "promiseTimeout": 1, "promiseTags": TARGET},
        ),
        ("task.suspend", {"id": "nope", "version": 1, "actions": []}),
    ]:
        with pytest.raises(DurableError) as e:
            await call(core, kind, data)
        assert e.value.status == 400, (kind, e.value.message)
    assert await core.store.snapshot(dump) == before
