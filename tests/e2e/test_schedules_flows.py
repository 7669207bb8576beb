"""Schedules and flows end to end through `loam dev` (a subprocess, its sweeper running
every 200 ms): Schedule / GetSchedule / ListSchedules / Unschedule and Flow / GetFlow /
JobAdmin.Children over Connect JSON (plain HTTP) and Connect binary (the generated
client), with errors turned back into the typed JobsErrors."""

from __future__ import annotations

import base64
import uuid
from typing import Any

import httpx
import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from google.protobuf import json_format
from protobuf.wkt import Any as AnyMsg

from loam_common import errors as E
from loam_common.connect_client import jobs_client
from loam_common.connect_errors import from_connect
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb

NS = "e2e-sched"
HEADERS = {"x-loam-namespace": NS}
MS = 1_000_000
SEC = 1_000_000_000


class Api:
    def __init__(self, url: str, kind: str) -> None:
        self.kind = kind
        self.client = jobs_client(url)
        self.http = httpx.AsyncClient(base_url=url, timeout=40)

    async def call(self, method: str, req: Any) -> Any:
        if self.kind == "binary":
            try:
                return await getattr(self.client, method)(req, headers=HEADERS)
            except ConnectError as e:
                raise from_connect(e) from e
        name = req.DESCRIPTOR.name.removesuffix("Request")
        r = await self.http.post(
            f"/loam.jobs.v1.JobsService/{name}",
            content=json_format.MessageToJson(req),
            headers={"content-type": "application/json", **HEADERS},
        )
        if r.status_code != 200:
            body = r.json()
            details = [
                AnyMsg(
                    type_url="type.googleapis.com/" + d["type"], value=base64.b64decode(d["value"] + "===")
                )
                for d in body.get("details", ())
            ]
            raise from_connect(ConnectError(Code(body["code"]), body.get("message", ""), details=details))
        return json_format.Parse(r.text, getattr(J, f"{name}Response")())

    async def lease(self, queue: str, wait_ns: int = 0, max_jobs: int = 10) -> list[J.Lease]:
        r = await self.call(
            "lease", J.LeaseRequest(queues=[queue], worker="w", max=max_jobs, wait_ns=wait_ns)
        )
        return list(r.leases)

    async def ok(self, lease: J.Lease, data: bytes) -> None:
        req = J.CompleteRequest(
            token=lease.token, outcome=J.Outcome(ok=J.Outcome.Ok(result=pb.Payload(data=data)))
        )
        await self.call("complete", req)


@pytest.fixture(params=["json", "binary"])
def api(request, dev_server) -> Api:
    return Api(dev_server.url, request.param)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def test_schedule_fires_and_is_readable_and_removable(api):
    q, sid = unique("ticks"), unique("every-300ms")
    spec = pb.ScheduleSpec(
        id=sid,
        every_ns=300 * MS,
        immediately=True,
        queue=q,
        task=pb.TaskSpec(name="tick", payload=pb.Payload(data=b"{}")),
    )
    r = await api.call("schedule", J.ScheduleRequest(spec=spec))
    assert r.id == sid and r.changed and r.schedule.count == 1 and r.schedule.next_ns
    (first,) = await api.lease(q)  # the immediate tick, enqueued by the Schedule call
    assert first.task.headers["x-loam-schedule"] == sid
    later = await api.lease(q, wait_ns=5 * SEC)  # a tick the dev server's sweeper fired
    assert later and later[0].task.headers["x-loam-schedule"] == sid
    assert int(later[0].task.headers["x-loam-tick"]) > int(first.task.headers["x-loam-tick"])

    again = await api.call("schedule", J.ScheduleRequest(spec=spec))
    assert again.changed is False
    got = (await api.call("get_schedule", J.GetScheduleRequest(id=sid))).schedule
    assert got.count >= 2 and got.every_ns == 300 * MS and got.queue == q
    listed = await api.call("list_schedules", J.ListSchedulesRequest(page_size=1000))
    assert sid in [s.id for s in listed.schedules]

    assert (await api.call("unschedule", J.UnscheduleRequest(id=sid))).removed is True
    assert (await api.call("unschedule", J.UnscheduleRequest(id=sid))).removed is False
    with pytest.raises(E.NotFound):
        await api.call("get_schedule", J.GetScheduleRequest(id=sid))


async def test_bad_schedules_name_their_field(api):
    bad = pb.ScheduleSpec(id=unique("bad"), cron="61 * * * *", queue="q", task=pb.TaskSpec(name="t"))
    with pytest.raises(E.InvalidArgument) as e:
        await api.call("schedule", J.ScheduleRequest(spec=bad))
    assert e.value.field == "spec.cron"
    bad = pb.ScheduleSpec(
        id=unique("bad"), cron="0 * * * *", tz="Nowhere/Land", queue="q", task=pb.TaskSpec(name="t")
    )
    with pytest.raises(E.InvalidArgument) as e:
        await api.call("schedule", J.ScheduleRequest(spec=bad))
    assert e.value.field == "spec.tz"


async def test_an_iteration_driven_schedule_is_never_fired_by_the_server(api):
    """BullMQ's job schedulers: the client enqueues each iteration with the record, the
    worker that takes one advances the chain once; the sweeper leaves it alone."""
    q, sid = unique("chain"), unique("bullmq")
    tpl = pb.TaskSpec(name="tick", payload=pb.Payload(data=b"{}"))
    spec = pb.ScheduleSpec(id=sid, every_ns=200 * MS, queue=q, task=tpl, driver=pb.SCHEDULE_DRIVER_ITERATIONS)

    def step(next_ms: int, delay_ns: int = 0, **fields) -> J.ScheduleRequest:
        opts = pb.EnqueueOpts(job_key=f"repeat:{sid}:{next_ms}")
        if delay_ns:
            opts.not_before.delay_ns = delay_ns
        return J.ScheduleRequest(
            spec=pb.ScheduleSpec(id=sid) if fields.get("advance") else spec,
            next_ns=next_ms * MS,
            iteration_task=tpl,
            iteration_opts=opts,
            **fields,
        )

    r = await api.call("schedule", step(1000))
    assert r.changed and r.iteration_job_id and r.schedule.count == 1
    assert r.schedule.driver == pb.SCHEDULE_DRIVER_ITERATIONS
    (first,) = await api.lease(q)
    assert first.task.headers["x-loam-schedule"] == sid and first.opts.job_key == f"repeat:{sid}:1000"
    adv = step(1200, 60 * SEC, advance=True, if_next_ns=1000 * MS)
    assert (await api.call("schedule", adv)).changed is True
    assert (await api.call("schedule", adv)).changed is False  # a second worker: no second advance
    assert not await api.lease(q, wait_ns=SEC)  # one second of sweeps: nothing fired by the server
    got = (await api.call("get_schedule", J.GetScheduleRequest(id=sid))).schedule
    assert (got.count, got.next_ns) == (2, 1200 * MS)
    with pytest.raises(E.AlreadyExists):  # the iteration's key is taken
        await api.call("schedule", step(1200))
    server = J.ScheduleRequest(
        spec=pb.ScheduleSpec(id=unique("srv"), every_ns=SEC, queue=q, task=tpl), next_ns=1
    )
    with pytest.raises(E.InvalidArgument):
        await api.call("schedule", server)
    assert (await api.call("unschedule", J.UnscheduleRequest(id=sid))).removed is True


async def test_chord_flow_with_children_values(api):
    q, fid = unique("flow"), unique("chord")

    def node(nid: str, *deps: str) -> pb.FlowNode:
        return pb.FlowNode(id=nid, queue=q, task=pb.TaskSpec(name=nid), depends_on=list(deps))

    graph = pb.FlowSpec(id=fid, nodes=[node("h1"), node("h2"), node("cb", "h1", "h2")])
    r = await api.call("flow", J.FlowRequest(graph=graph))
    assert r.created and r.flow == fid and set(r.jobs) == {"h1", "h2", "cb"}
    again = await api.call("flow", J.FlowRequest(graph=graph))
    assert again.created is False and dict(again.jobs) == dict(r.jobs)

    group = await api.lease(q)
    assert sorted(x.task.name for x in group) == ["h1", "h2"]
    assert all(x.parent.job_id == r.jobs["cb"] for x in group)
    for x in group:
        await api.ok(x, x.task.name.encode())
    (cb,) = await api.lease(q)
    assert cb.token.job == r.jobs["cb"]
    assert (cb.children.pending, cb.children.completed, cb.children.failed) == (0, 2, 0)
    children = await api.call(
        "job_admin", J.JobAdminRequest(queue=q, job=cb.token.job, op=J.JobOp(children=J.JobOp.Children()))
    )
    assert {c.node: c.value.data for c in children.children} == {"h1": b"h1", "h2": b"h2"}
    flow = (await api.call("get_flow", J.GetFlowRequest(id=fid))).flow
    assert {j.node: j.job_id for j in flow.jobs} == dict(r.jobs)


async def test_bad_flows_name_their_field(api):
    q = unique("flow")
    cycle = pb.FlowSpec(
        nodes=[
            pb.FlowNode(id="a", queue=q, task=pb.TaskSpec(name="a"), depends_on=["b"]),
            pb.FlowNode(id="b", queue=q, task=pb.TaskSpec(name="b"), depends_on=["a"]),
        ]
    )
    with pytest.raises(E.InvalidArgument) as e:
        await api.call("flow", J.FlowRequest(graph=cycle))
    assert e.value.field == "graph.nodes"
