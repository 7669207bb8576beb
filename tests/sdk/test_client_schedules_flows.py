"""Schedules and flows from the SDK against the dev server (`loam_server`, its sweeper
running every 200 ms): upserts that change nothing, an `every` schedule the sweeper
fires, and chains / chords run by a `loam.Worker` in order, the last node reading its
children's values. Plus the node builders (chain, group, chord) on their own."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import time
import zoneinfo

import pytest

import loam
from loam import Client, FlowNode, Outcome, SyncClient, Worker, chain, chord, errors, group
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb

TIMEOUT = 60  # generous: a loaded CI machine


async def eventually(check, timeout: float = TIMEOUT, every: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        assert time.monotonic() < deadline, f"not true after {timeout}s: {value!r}"
        await asyncio.sleep(every)


# -- schedules -------------------------------------------------------------------------------
async def test_the_same_rule_twice_changes_nothing(client: Client) -> None:
    first = await client.schedule("nightly", "reports", "build", {"kind": "daily"}, cron="0 3 * * *",
                                  tz="Europe/Paris", priority=4, headers={"team": "data"})  # fmt: skip
    assert first.changed is True and first.count == 0
    assert (first.id, first.queue, first.name, first.payload) == (
        "nightly",
        "reports",
        "build",
        {"kind": "daily"},
    )
    assert first.cron == "0 3 * * *" and first.tz == "Europe/Paris" and first.misfire == "fire_latest"
    assert first.headers == {"team": "data"} and first.opts.priority == 4
    assert (
        first.next_run is not None and first.next_run.astimezone(zoneinfo.ZoneInfo("Europe/Paris")).hour == 3
    )

    again = await client.schedule("nightly", "reports", "build", {"kind": "daily"}, cron="0 3 * * *",
                                  tz=zoneinfo.ZoneInfo("Europe/Paris"), priority=4, headers={"team": "data"})  # fmt: skip
    assert again.changed is False
    assert again.to_dict() == {**first.to_dict(), "changed": False}  # the record did not move

    got = await client.get_schedule("nightly")
    assert got.changed is None and got.to_dict() == {
        k: v for k, v in first.to_dict().items() if k != "changed"
    }

    moved = await client.schedule("nightly", "reports", "build", {"kind": "daily"}, cron="0 4 * * *",
                                  tz="Europe/Paris", priority=4, headers={"team": "data"})  # fmt: skip
    assert (
        moved.changed is True and moved.updated_ns > first.updated_ns and moved.created_ns == first.created_ns
    )

    await client.schedule("hourly", "reports", "tick", cron="@hourly", misfire="skip")
    listed = await client.list_schedules()
    assert [s.id for s in listed] == ["hourly", "nightly"] and listed[0].misfire == "skip"
    assert [s.id async for s in client.iter_schedules(page_size=1)] == ["hourly", "nightly"]
    assert await client.unschedule("hourly") is True
    assert await client.unschedule("hourly") is False
    with pytest.raises(errors.NotFound):
        await client.get_schedule("hourly")


async def test_every_schedule_fires_through_the_sweeper(client: Client) -> None:
    s = await client.schedule("beat", "beats", "beat", {"n": 1}, every=0.3, limit=3, attempts=2)
    assert s.changed and s.every == dt.timedelta(seconds=0.3) and s.count == 0 and s.next_run is not None
    ran: list[loam.LeasedJob] = []

    async def handler(job: loam.LeasedJob) -> None:
        ran.append(job)

    async def three_ran() -> bool:
        return len(ran) >= 3

    worker = Worker(client, "beats", handler, concurrency=2, wait=1)
    worker.start()
    try:
        await eventually(three_ran)
    finally:
        await worker.shutdown()
    done = await client.get_schedule("beat")
    assert done.count == 3 and done.next_run is None and done.last_job_id  # the limit is reached
    assert len(ran) == 3 and all(
        j.payload == {"n": 1} and j.headers["x-loam-schedule"] == "beat" for j in ran
    )
    ticks = [int(j.headers["x-loam-tick"]) for j in ran]
    assert sorted(ticks) == ticks and len(set(ticks)) == 3
    assert all(b - a >= 300_000_000 for a, b in itertools.pairwise(ticks))
    assert ran[0].opts.attempts == 2
    assert (await client.queue_counts("beats"))["completed"] == 3


async def test_immediately_fires_with_the_upsert(client: Client) -> None:
    s = await client.schedule("now", "imm", "t", every=3600, immediately=True)
    assert s.count == 1 and s.last_run is not None and s.last_job_id
    (job,) = await client.lease("imm", wait=5)
    assert job.id == s.last_job_id


async def test_bad_schedules_are_refused(client: Client) -> None:
    with pytest.raises(errors.InvalidArgument) as e:
        await client.schedule("x", "q", "t", every=60, delay=5)  # every tick is enqueued when due
    assert e.value.field == "spec.opts.not_before"
    with pytest.raises(errors.InvalidArgument) as e:
        await client.schedule("x", "q", "t")  # no rule
    assert e.value.field == "spec.cron"
    with pytest.raises(errors.InvalidArgument) as e:
        await client.schedule("x", "q", "t", cron="0 3 * * *", tz="Mars/Olympus")
    assert e.value.field == "spec.tz"
    with pytest.raises(ValueError, match="misfire"):
        await client.schedule("x", "q", "t", every=60, misfire="whenever")
    with pytest.raises(TypeError):
        await client.schedule("x", "q", "t", every=60, color="red")
    assert await client.list_schedules() == []


async def test_a_ready_made_spec_is_accepted(client: Client) -> None:
    """What the Celery beat adapter sends: a ScheduleSpec, alone."""
    spec = pb.ScheduleSpec(id="raw", every_ns=60 * 10**9, queue="q", task=pb.TaskSpec(name="t"))
    assert (await client.schedule(spec)).changed is True
    assert (await client.schedule(spec)).changed is False
    with pytest.raises(TypeError):
        await client.schedule(spec, "q", "t")


# -- flows -----------------------------------------------------------------------------------
async def run_until(client: Client, queue: str, handler, done: asyncio.Event, **kw) -> Worker:
    worker = Worker(client, queue, handler, wait=1, **kw)
    worker.start()
    try:
        await asyncio.wait_for(done.wait(), TIMEOUT)
    finally:
        await worker.shutdown()
    return worker


async def test_chain_runs_in_order_and_the_last_node_reads_its_child(client: Client) -> None:
    order: list[str] = []
    seen: dict[str, dict] = {}
    done = asyncio.Event()

    async def handler(job: loam.LeasedJob):
        order.append(job.name)
        seen[job.name] = await client.children_values(job.queue, job.id)
        if job.name == "load":
            done.set()
        return {"by": job.name, "input": job.payload}

    flow = chain(
        FlowNode("extract", "etl", "extract", {"src": "s3://bucket/x"}),
        FlowNode("transform", "etl", "transform", 2),
        FlowNode("load", "etl", "load", 3),
    )
    info = await client.flow(flow, id="etl-1")
    assert info.created is True and list(info.jobs) == ["extract", "transform", "load"]
    assert info.queues == {"extract": "etl", "transform": "etl", "load": "etl"}
    assert (await client.get_job(*info.job("load"))).state == "waiting-children"
    await run_until(client, "etl", handler, done, concurrency=4)
    assert order == ["extract", "transform", "load"]
    assert seen["extract"] == {}
    assert seen["transform"] == {"extract": {"by": "extract", "input": {"src": "s3://bucket/x"}}}
    assert seen["load"] == {"transform": {"by": "transform", "input": 2}}

    again = await client.flow(flow, id="etl-1")  # the same id and graph: the same jobs
    assert again.created is False and again.jobs == info.jobs
    got = await client.get_flow("etl-1")
    assert got.jobs == info.jobs and got.queues == info.queues and got.created_ns > 0
    with pytest.raises(errors.AlreadyExists):
        await client.flow(chain(FlowNode("other", "etl", "x")), id="etl-1")


async def test_chord_header_runs_first_and_the_body_sums_its_values(client: Client) -> None:
    finished: list[str] = []
    done = asyncio.Event()
    total: list[int] = []

    async def part(job: loam.LeasedJob) -> int:
        await asyncio.sleep(0.01 * job.payload)
        finished.append(job.raw.task.name + str(job.payload))
        return job.payload * 10

    async def add(job: loam.LeasedJob) -> int:
        values = await client.children_values(job.queue, job.id)
        assert set(values) == {"p1", "p2", "p3"}
        finished.append("add")
        total.append(sum(values.values()))
        done.set()
        return total[0]

    flow = chord([FlowNode(f"p{i}", "math", "part", i) for i in (1, 2, 3)], FlowNode("sum", "math", "add"))
    info = await client.flow(flow)
    assert info.id and info.created  # the client named the flow: its retries make it once
    await run_until(client, "math", {"part": part, "add": add}, done, concurrency=3)
    assert finished[-1] == "add" and sorted(finished[:3]) == ["part1", "part2", "part3"]
    assert total == [60]
    children = await client.children(*info.job("sum"))
    assert {c.key: (c.state, c.value, c.job_id) for c in children} == {
        f"p{i}": ("processed", i * 10, info.jobs[f"p{i}"]) for i in (1, 2, 3)
    }
    body = await eventually(lambda: _completed(client, *info.job("sum")))
    assert body.result == 60


async def _completed(client: Client, queue: str, job: str):
    j = await client.get_job(queue, job)
    return j if j.state == "completed" else None


async def test_a_failure_policy_lets_the_body_run(client: Client) -> None:
    done = asyncio.Event()
    got: list[list[loam.Child]] = []

    async def handler(job: loam.LeasedJob):
        if job.name == "flaky":
            raise loam.UnrecoverableError("no luck")
        if job.name == "body":
            got.append(await client.children(job.queue, job.id))
            done.set()
        return "fine"

    flow = chord(
        [FlowNode("ok", "pol", "steady"), FlowNode("bad", "pol", "flaky", on_failure="ignore")],
        FlowNode("body", "pol", "body"),
    )
    info = await client.flow(flow)
    await run_until(client, "pol", handler, done)
    (children,) = got
    by = {c.key: c for c in children}
    assert by["ok"].state == "processed" and by["ok"].value == "fine"
    assert by["bad"].state == "ignored" and by["bad"].policy == "ignore_dependency"
    assert "no luck" in by["bad"].error.message
    assert await client.children_values(*info.job("body")) == {"ok": "fine"}


async def test_a_node_without_a_policy_fails_its_dependents(client: Client) -> None:
    info = await client.flow([FlowNode("a", "fail", "a"), FlowNode("b", "fail", "b", depends_on=["a"])])
    (job,) = await client.lease("fail", wait=5)
    await client.complete(job, Outcome.fail("broken"))
    b = await client.get_job(*info.job("b"))
    assert b.state == "failed" and b.errors[-1].code == "child-failed"


async def test_flow_refusals(client: Client) -> None:
    with pytest.raises(errors.InvalidArgument) as e:
        await client.flow(
            [FlowNode("a", "q", "a", depends_on=["b"]), FlowNode("b", "q", "b", depends_on=["a"])]
        )
    assert e.value.field == "graph.nodes"
    with pytest.raises(errors.InvalidArgument) as e:  # a node others depend on is linked by depends_on
        await client.flow(
            [FlowNode("a", "q", "a", parent=("q", "x")), FlowNode("b", "q", "b", depends_on=["a"])]
        )
    assert e.value.field == "graph.nodes[0].opts.parent"
    with pytest.raises(errors.NotFound):  # a node nothing depends on may join a job outside the flow
        await client.flow([FlowNode("a", "q", "a", parent=("q", "x"))])
    with pytest.raises(errors.NotFound):
        await client.get_flow("no-such-flow")
    with pytest.raises(TypeError):
        await client.flow(FlowNode("a", "q", "a"))  # one node: give a list


def test_sync_client_has_the_calls(url: str, ns: str) -> None:
    with SyncClient(url, namespace=ns) as c:
        assert c.schedule("s", "q", "t", every=30).changed is True
        assert [s.id for s in c.list_schedules()] == ["s"] and [s.id for s in c.iter_schedules()] == ["s"]
        assert c.get_schedule("s").every == dt.timedelta(seconds=30)
        info = c.flow(group(FlowNode("a", "q", "a"), FlowNode("b", "q", "b")), id="g")
        assert c.get_flow("g").jobs == info.jobs
        assert c.children("q", info.jobs["a"]) == [] and c.children_values("q", info.jobs["a"]) == {}
        assert c.unschedule("s") is True


# -- the builders, no server -------------------------------------------------------------------
def deps(flow: loam.Flow) -> dict[str, list[str]]:
    return {n.id: n.depends_on for n in flow.nodes}


def test_chain_group_chord_nest_like_celery() -> None:
    a, b, c, d, e = (FlowNode(x, "q", x) for x in "abcde")
    assert deps(chain(a, b, c)) == {"a": [], "b": ["a"], "c": ["b"]}
    assert deps(group(a, b, c)) == {"a": [], "b": [], "c": []}
    assert deps(chord([a, b], c)) == {"a": [], "b": [], "c": ["a", "b"]}
    assert deps(chain(a, group(b, c), d)) == {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}
    assert deps(chain(group(a, chain(b, c)), d)) == {"a": [], "b": [], "c": ["b"], "d": ["a", "c"]}
    assert deps(chord(group(a, b), chain(c, d))) == {"a": [], "b": [], "c": ["a", "b"], "d": ["c"]}
    assert deps(chain(chord([a, b], c), group(d, e))) == {
        "a": [],
        "b": [],
        "c": ["a", "b"],
        "d": ["c"],
        "e": ["c"],
    }
    assert a.depends_on == [] and b.depends_on == []  # the helpers copy the nodes they are given
    assert chain(a, b, id="x").to_pb().id == "x"


def test_nodes_build_their_messages() -> None:
    parent = FlowNode("p", "q", "report", {"k": 1}, priority=3, attempts=2, headers={"h": "v"},
                      depends_on=[FlowNode("c1", "q", "x"), "c2"], on_failure="continueParentOnFailure")  # fmt: skip
    m = parent.to_pb()
    assert (m.id, m.queue, m.task.name, list(m.depends_on)) == ("p", "q", "report", ["c1", "c2"])
    assert m.task.payload.data == b'{"k":1}' and m.task.headers["h"] == "v"
    assert m.opts.priority == 3 and m.opts.attempts == 2 and m.on_failure == pb.FAILURE_POLICY_CONTINUE_PARENT
    for name, value in [("fail_parent", pb.FAILURE_POLICY_FAIL_PARENT), ("ignore", pb.FAILURE_POLICY_IGNORE_DEPENDENCY),
                        ("remove-dependency", pb.FAILURE_POLICY_REMOVE_DEPENDENCY)]:  # fmt: skip
        assert FlowNode("n", "q", "t", on_failure=name).on_failure == value
    with pytest.raises(ValueError, match="on_failure"):
        FlowNode("n", "q", "t", on_failure="shrug")
    with pytest.raises(TypeError, match="colour"):
        FlowNode("n", "q", "t", colour="red")
    with pytest.raises(ValueError, match="used twice"):
        group(FlowNode("n", "q", "t"), FlowNode("n", "q", "t"))
