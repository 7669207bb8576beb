"""Schedules and flows through the REST facade of `loam dev` (a subprocess, its sweeper
running every 200 ms): `PUT/GET/DELETE /v1/schedules/{id}`, `GET /v1/schedules`,
`POST /v1/flows`, `GET /v1/flows/{id}` and `GET /v1/queues/{q}/jobs/{job}/children`,
with their errors in the REST shape `{code, message, detail}`; and, in process, the
permissions each route needs (the Connect methods' actions)."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import pytest

from loam_common import auth
from loam_common.connect_client import jobs_client
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_gateway.app import create_app
from loam_gateway.auth import StoreAuthenticator
from loam_gateway.routing import Router
from loam_queue_core import QueueCore
from loam_queue_core.rpc import CoreRpc

NS = "e2e-rest-sched"
MS = 1_000_000
SEC = 1_000_000_000


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def http(dev_server):
    async with httpx.AsyncClient(base_url=f"{dev_server.url}/ns/{NS}", timeout=40) as h:
        yield h


@pytest.fixture
async def rpc(dev_server):
    client = jobs_client(dev_server.url)
    yield client
    await client.close()


HEADERS = {"x-loam-namespace": NS}


def ok(resp: httpx.Response) -> dict:
    assert resp.status_code == 200, resp.text
    return resp.json()


async def test_schedule_upsert_read_list_fire_remove(http):
    q, sid = unique("ticks"), unique("every")
    body = {"queue": q, "name": "tick", "data": {"n": 1}, "every_ns": 300 * MS, "immediately": True,
            "priority": 5, "headers": {"team": "a"}}  # fmt: skip
    first = ok(await http.put(f"/v1/schedules/{sid}", json=body))
    s = first["schedule"]
    assert first["changed"] is True
    assert (s["id"], s["queue"], s["name"], s["payload"]["data"], s["every_ns"]) == (
        sid,
        q,
        "tick",
        {"n": 1},
        300 * MS,
    )
    assert s["count"] == 1 and s["next_ns"] > s["last_tick_ns"] > 0 and s["last_job_id"]
    assert s["misfire"] == "fire_latest" and s["priority"] == 5 and s["headers"] == {"team": "a"}
    again = ok(await http.put(f"/v1/schedules/{sid}", json=body))
    assert again["changed"] is False and again["schedule"]["created_ns"] == s["created_ns"]

    # the dev server's sweeper fires the next ticks
    deadline = time.monotonic() + 15
    while (got := ok(await http.get(f"/v1/schedules/{sid}")))["count"] < 3:
        assert time.monotonic() < deadline, got
        await asyncio.sleep(0.2)
    assert got["last_tick_ns"] > s["last_tick_ns"]
    job = ok(await http.get(f"/v1/queues/{q}/jobs/{got['last_job_id']}"))
    assert job["job"]["headers"]["x-loam-schedule"] == sid and job["job"]["priority"] == 5

    # a new rule replaces the old one: the count starts again
    cron = {**body, "every_ns": None, "immediately": False, "cron": "0 9 * * 1-5", "tz": "Europe/Paris",
            "misfire": "skip"}  # fmt: skip
    replaced = ok(await http.put(f"/v1/schedules/{sid}", json=cron))
    assert replaced["changed"] is True and replaced["schedule"]["count"] == 0
    assert replaced["schedule"]["cron"] == "0 9 * * 1-5" and replaced["schedule"]["tz"] == "Europe/Paris"
    assert replaced["schedule"]["misfire"] == "skip" and replaced["schedule"]["every_ns"] == 0

    other = unique("other")
    ok(await http.put(f"/v1/schedules/{other}", json={"queue": q, "name": "t", "cron": "@daily"}))
    listed = ok(await http.get("/v1/schedules"))
    ids = [x["id"] for x in listed["schedules"]]
    assert {sid, other} <= set(ids) and ids == sorted(ids) and listed["next_page_token"] == ""
    page = ok(await http.get("/v1/schedules", params={"page_size": 1}))
    assert len(page["schedules"]) == 1 and page["next_page_token"]
    rest = ok(
        await http.get("/v1/schedules", params={"page_size": 1000, "page_token": page["next_page_token"]})
    )
    assert [x["id"] for x in page["schedules"] + rest["schedules"]] == ids

    assert ok(await http.delete(f"/v1/schedules/{sid}")) == {"removed": True}
    assert ok(await http.delete(f"/v1/schedules/{sid}")) == {"removed": False}
    r = await http.get(f"/v1/schedules/{sid}")
    assert r.status_code == 404 and r.json()["code"] == "not_found"
    ok(await http.delete(f"/v1/schedules/{other}"))


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"cron": "61 * * * *"}, "spec.cron"),
        ({"cron": "0 * * * *", "tz": "Nowhere/Land"}, "spec.tz"),
        ({"cron": "0 * * * *", "every_ns": SEC}, "spec.every_ns"),
        ({}, "spec.cron"),
        ({"every_ns": SEC, "tz": "UTC"}, "spec.tz"),
        ({"every_ns": SEC, "start_ns": 2 * SEC, "end_ns": SEC}, "spec.end_ns"),
        ({"every_ns": SEC, "data": "x" * 20_000}, "spec.task.payload"),
    ],
)
async def test_bad_schedules_are_400_naming_the_field(http, body, field):
    r = await http.put(f"/v1/schedules/{unique('bad')}", json={"queue": "q", "name": "t", **body})
    assert r.status_code == 400, r.text
    assert r.json()["code"] == "invalid_argument" and r.json()["detail"]["field"] == field


@pytest.mark.parametrize(
    "body",
    [
        {"queue": "q", "name": "t", "every_ns": 10},  # under 1 ms
        {"queue": "q", "name": "t", "every_ns": SEC, "misfire": "sometimes"},
        {"queue": "q", "name": "t", "every_ns": SEC, "job_key": "k"},  # not a schedule field
        {"queue": "q", "every_ns": SEC},
        # past the bounds that keep every tick inside int64 ns: refused, not a 500
        {"queue": "q", "name": "t", "every_ns": 2**63 - 1},
        {"queue": "q", "name": "t", "every_ns": SEC, "offset_ns": 2**63 - 1},
        {"queue": "q", "name": "t", "every_ns": SEC, "start_ns": 2**63 - 1},
    ],
)
async def test_malformed_schedule_bodies_are_400(http, body):
    r = await http.put(f"/v1/schedules/{unique('bad')}", json=body)
    assert r.status_code == 400 and r.json()["code"] == "invalid_argument", r.text


async def test_chord_flow_with_children_values(http, rpc):
    q, fid = unique("flow"), unique("chord")
    graph = {
        "id": fid,
        "nodes": [
            {"id": "h1", "queue": q, "name": "h", "data": 1},
            {"id": "h2", "queue": q, "name": "h", "data": 2, "on_failure": "ignore_dependency"},
            {"id": "cb", "queue": q, "name": "sum", "depends_on": ["h1", "h2"]},
        ],
    }
    r = ok(await http.post("/v1/flows", json=graph))
    assert r["created"] is True and r["flow"] == fid and set(r["jobs"]) == {"h1", "h2", "cb"}
    again = ok(await http.post("/v1/flows", json=graph))
    assert again == {**r, "created": False}
    clash = await http.post("/v1/flows", json={**graph, "nodes": graph["nodes"][:1]})
    assert clash.status_code == 409 and clash.json()["code"] == "already_exists"

    flow = ok(await http.get(f"/v1/flows/{fid}"))
    assert [(j["node"], j["queue"], j["job_id"]) for j in flow["jobs"]] == [
        (n, q, r["jobs"][n]) for n in ("h1", "h2", "cb")
    ]
    cb = r["jobs"]["cb"]
    assert (ok(await http.get(f"/v1/queues/{q}/jobs/{cb}")))["job"]["state"] == "waiting-children"
    pending = ok(await http.get(f"/v1/queues/{q}/jobs/{cb}/children"))
    assert {c["node"]: c["state"] for c in pending["children"]} == {"h1": "pending", "h2": "pending"}
    assert {c["node"]: c["policy"] for c in pending["children"]} == {
        "h1": "fail_parent",
        "h2": "ignore_dependency",
    }

    leased = (await rpc.lease(J.LeaseRequest(queues=[q], worker="w", max=10), headers=HEADERS)).leases
    assert sorted(x.token.job for x in leased) == sorted([r["jobs"]["h1"], r["jobs"]["h2"]])
    for x in leased:
        out = J.Outcome(
            ok=J.Outcome.Ok(
                result=pb.Payload(data=x.task.payload.data + b"0", content_type="application/json")
            )
        )
        await rpc.complete(J.CompleteRequest(token=x.token, outcome=out), headers=HEADERS)
    done = ok(await http.get(f"/v1/queues/{q}/jobs/{cb}/children"))
    assert {c["node"]: (c["state"], c["value"]["data"]) for c in done["children"]} == {
        "h1": ("processed", 10), "h2": ("processed", 20)
    }  # fmt: skip
    assert all(c["finished_ns"] > 0 and c["error"] is None for c in done["children"])
    assert (ok(await http.get(f"/v1/queues/{q}/jobs/{cb}")))["job"]["state"] == "waiting"


async def test_flow_errors(http):
    q = unique("flow")
    cycle = {"nodes": [{"id": "a", "queue": q, "name": "a", "depends_on": ["b"]},
                       {"id": "b", "queue": q, "name": "b", "depends_on": ["a"]}]}  # fmt: skip
    r = await http.post("/v1/flows", json=cycle)
    assert r.status_code == 400 and r.json()["detail"]["field"] == "graph.nodes", r.text
    r = await http.post(
        "/v1/flows", json={"nodes": [{"id": "a", "queue": q, "name": "a", "depends_on": ["zz"]}]}
    )
    assert r.status_code == 400 and r.json()["detail"]["field"] == "graph.nodes[0].depends_on[0]", r.text
    r = await http.post(
        "/v1/flows", json={"nodes": [{"id": "a", "queue": q, "name": "a", "delay_ns": 2**63 - 1}]}
    )
    assert r.status_code == 400 and r.json()["code"] == "invalid_argument", r.text
    r = await http.post("/v1/flows", json={"nodes": []})
    assert r.status_code == 400 and r.json()["code"] == "invalid_argument"
    r = await http.post(
        "/v1/flows", json={"nodes": [{"id": "a", "queue": q, "name": "a", "on_failure": "shrug"}]}
    )
    assert r.status_code == 400
    no_id = ok(await http.post("/v1/flows", json={"nodes": [{"id": "a", "queue": q, "name": "a"}]}))
    assert no_id["flow"] and no_id["created"] is True  # the server names it
    r = await http.get(f"/v1/flows/{unique('nope')}")
    assert r.status_code == 404 and r.json()["code"] == "not_found"
    r = await http.get(f"/v1/queues/{q}/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV/children")
    assert r.status_code == 404 and r.json()["code"] == "not_found"


async def test_openapi_documents_the_routes(http):
    spec = ok(await http.get("/openapi.json"))
    paths = spec["paths"]
    for path, method in [
        ("/v1/schedules/{id}", "put"), ("/v1/schedules/{id}", "get"), ("/v1/schedules/{id}", "delete"),
        ("/v1/schedules", "get"), ("/v1/flows", "post"), ("/v1/flows/{id}", "get"),
        ("/v1/queues/{queue}/jobs/{job}/children", "get"),
    ]:  # fmt: skip
        op = paths[path][method]
        assert {"200", "400", "401", "403", "404", "409", "429", "503", "504"} <= set(op["responses"]), (
            path,
            method,
        )
    assert {"ScheduleBody", "ScheduleView", "FlowBody", "FlowResult", "FlowView", "DependencyView"} <= set(
        spec["components"]["schemas"]
    )


# -- permissions, in process -------------------------------------------------------------------
@pytest.fixture
async def authed(store, tmp_path):
    app = create_app(Router(local=CoreRpc(QueueCore(store, None))), StoreAuthenticator(store))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:

        async def token(*actions: str) -> dict[str, str]:
            t, _ = await store.transact(auth.token_create, "acme", list(actions), "", None)
            return {"authorization": f"Bearer {t}"}

        yield client, token


async def test_routes_need_the_methods_actions(authed):
    http, token = authed
    producer, scheduler, admin = (
        await token(auth.ENQUEUE),
        await token(auth.SCHEDULE),
        await token(auth.ADMIN),
    )
    body = {"queue": "q", "name": "t", "cron": "@daily"}
    r = await http.put("/v1/schedules/s", json=body, headers=producer)
    assert r.status_code == 403 and "jobs:schedule" in r.json()["message"]
    assert (await http.put("/v1/schedules/s", json=body)).status_code == 401
    assert (await http.put("/v1/schedules/s", json=body, headers=scheduler)).status_code == 200
    for path in ("/v1/schedules", "/v1/schedules/s"):
        assert (await http.get(path, headers=producer)).status_code == 403
        assert (await http.get(path, headers=scheduler)).status_code == 200

    graph = {"id": "f", "nodes": [{"id": "a", "queue": "q", "name": "a"}, {"id": "b", "queue": "q", "name": "b",
                                                                            "depends_on": ["a"]}]}  # fmt: skip
    assert (await http.post("/v1/flows", json=graph, headers=scheduler)).status_code == 403
    jobs = (ok(await http.post("/v1/flows", json=graph, headers=producer)))["jobs"]
    assert (await http.get("/v1/flows/f", headers=producer)).status_code == 200
    children = f"/v1/queues/q/jobs/{jobs['b']}/children"
    assert (await http.get(children, headers=producer)).status_code == 403
    assert [c["node"] for c in (ok(await http.get(children, headers=admin)))["children"]] == ["a"]
    assert (await http.delete("/v1/schedules/s", headers=producer)).status_code == 403
    assert (ok(await http.delete("/v1/schedules/s", headers=scheduler)))["removed"] is True
