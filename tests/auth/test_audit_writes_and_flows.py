"""A write batch (`POST /v1/writes`) and a flow (`POST /v1/flows`) made over REST are
audited like a REST enqueue: one record written in their own transaction, saying who,
what, when and how many jobs they created (and, for a batch, canceled); a refused one
writes nothing, record included; the same writes over Connect (the SDKs, BullMQ's
FlowProducer, Celery's canvas: the producers' hot path) are not recorded."""

from __future__ import annotations

import httpx
import pytest

from loam_common import auth
from loam_common.jobs import quotas
from loam_gateway.app import create_app
from loam_gateway.audit_log import AuditLog
from loam_gateway.auth import StoreAuthenticator
from loam_gateway.routing import Router
from loam_queue_core import QueueCore
from loam_queue_core.rpc import CoreRpc

CONNECT = "/loam.jobs.v1.JobsService/"


@pytest.fixture
async def gateway(store):
    core = QueueCore(store, quotas=quotas.parse("capped:stored_jobs=2"))
    app = create_app(Router(local=CoreRpc(core)), StoreAuthenticator(store), audit=AuditLog(store))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        yield client


async def bearer(store, ns: str, *actions: str) -> dict[str, str]:
    t, _ = await store.transact(auth.token_create, ns, list(actions), "", None)
    return {"authorization": f"Bearer {t}"}


async def entries(gw, who, query: str = "") -> list[dict]:
    r = await gw.get(f"/v1/audit{query}", headers=who)
    assert r.status_code == 200, r.text
    return r.json()["entries"]


def enqueue_item(queue: str, n: int, **extra) -> dict:
    return {"enqueue": {"queue": queue, "name": "charge", "data": {"n": n}, **extra}}


async def test_a_rest_write_batch_is_recorded_with_the_jobs_it_created_and_canceled(gateway, store):
    operator = await bearer(store, "acme", auth.READ, auth.ADMIN, auth.ENQUEUE)
    who = (await gateway.get("/v1/whoami", headers=operator)).json()["token_id"]
    r = await gateway.post("/v1/writes", json={"items": [enqueue_item("emails", 1), enqueue_item("emails", 2)]},
                           headers=operator)  # fmt: skip
    assert r.status_code == 200, r.text
    first, second = (o["enqueued"]["job"] for o in r.json()["outcomes"])
    # across queues: a cancel, an enqueue, a result; then one job, by an existing key
    items = [{"cancel": {"queue": "emails", "job": first}}, enqueue_item("sms", 3),
             {"result_set": {"key": "order-1", "data": {"ok": True}}}]  # fmt: skip
    r = await gateway.post("/v1/writes", json={"items": items}, headers=operator)
    assert r.status_code == 200, r.text
    for _ in range(2):
        r = await gateway.post("/v1/writes", json={"items": [enqueue_item("emails", 4, job_key="k")]},
                               headers=operator)  # fmt: skip
        assert r.status_code == 200, r.text
    keyed = r.json()["outcomes"][0]["enqueued"]["job"]
    got = [(e["action"], e["queue"], e["job"], e["count"], e["detail"], e["via"], e["token_id"], e["role"])
           for e in await entries(gateway, operator)]  # fmt: skip
    batch = ("jobs.write-batch",)
    assert got == [
        (*batch, "emails", keyed, 0, "1 enqueued, 0 canceled, 0 results set", "rest", who, "operator"),
        (*batch, "emails", keyed, 1, "1 enqueued, 0 canceled, 0 results set", "rest", who, "operator"),
        (
            *batch,
            "",
            "",
            2,
            "1 enqueued, 1 canceled, 1 results set; queues emails, sms",
            "rest",
            who,
            "operator",
        ),
        (*batch, "emails", "", 2, "2 enqueued, 0 canceled, 0 results set", "rest", who, "operator"),
    ]
    assert (await entries(gateway, operator, "?queue=emails"))[-1]["count"] == 2
    assert [e["job"] for e in await entries(gateway, operator, f"?queue=emails&job={keyed}")] == [
        keyed,
        keyed,
    ]
    assert second != first


async def test_a_refused_write_batch_writes_nothing_not_even_a_record(gateway, store, dump):
    operator = await bearer(store, "acme", auth.READ, auth.ADMIN, auth.ENQUEUE)
    r = await gateway.post("/v1/writes", json={"items": [enqueue_item("emails", 1)]}, headers=operator)
    job = r.json()["outcomes"][0]["enqueued"]["job"]
    r = await gateway.post("/v1/queues/emails/jobs/" + job + ":cancel", headers=operator)
    assert r.status_code == 200, r.text
    before = await dump()
    # the second item refuses the batch (a canceled job cannot be canceled), so the first is undone
    items = [enqueue_item("emails", 2), {"cancel": {"queue": "emails", "job": job}}]
    r = await gateway.post("/v1/writes", json={"items": items}, headers=operator)
    assert r.status_code == 400 or r.status_code == 409, r.text
    assert "items[1]" in r.json()["message"]
    assert await dump() == before
    # a caller that may not write, and bad input: refused before anything runs
    viewer = await bearer(store, "acme", auth.READ)
    before = await dump()
    r = await gateway.post("/v1/writes", json={"items": [enqueue_item("emails", 5)]}, headers=viewer)
    assert r.status_code == 403, r.text
    r = await gateway.post("/v1/writes", json={"items": [{"cancel": None}]}, headers=operator)
    assert r.status_code == 400, r.text
    assert await dump() == before
    # over the namespace's quota: refused in the batch's transaction
    capped = await bearer(store, "capped", auth.READ, auth.ENQUEUE)
    r = await gateway.post("/v1/writes", json={"items": [enqueue_item("q", 1)]}, headers=capped)
    assert r.status_code == 200, r.text
    before = await dump()
    r = await gateway.post("/v1/writes", json={"items": [enqueue_item("q", 2), enqueue_item("q", 3)]},
                           headers=capped)  # fmt: skip
    assert r.status_code == 429, r.text
    assert await dump() == before
    assert [e["count"] for e in await entries(gateway, capped)] == [1]


def graph(flow_id: str, *queues: str) -> dict:
    parent, *children = queues
    nodes = [
        {
            "id": "parent",
            "queue": parent,
            "name": "report",
            "depends_on": [f"c{i}" for i in range(len(children))],
        }
    ]
    nodes += [{"id": f"c{i}", "queue": q, "name": "part", "data": {"i": i}} for i, q in enumerate(children)]
    return {"id": flow_id, "nodes": nodes}


async def test_a_rest_flow_is_recorded_with_the_jobs_it_created(gateway, store):
    operator = await bearer(store, "acme", auth.READ, auth.ADMIN, auth.ENQUEUE)
    who = (await gateway.get("/v1/whoami", headers=operator)).json()["token_id"]
    r = await gateway.post("/v1/flows", json=graph("f1", "reports", "reports", "reports"), headers=operator)
    assert (r.status_code, r.json()["created"]) == (200, True), r.text
    r = await gateway.post("/v1/flows", json=graph("f1", "reports", "reports", "reports"), headers=operator)
    assert (r.status_code, r.json()["created"]) == (200, False), r.text  # the same flow: nothing created
    r = await gateway.post(
        "/v1/flows", json=graph("f2", "reports", "parts", "parts", "parts"), headers=operator
    )
    assert r.status_code == 200, r.text
    got = [(e["action"], e["queue"], e["count"], e["detail"], e["via"], e["token_id"])
           for e in await entries(gateway, operator)]  # fmt: skip
    assert got == [
        ("flow.submit", "", 4, "flow f2: 4 jobs; queues parts, reports", "rest", who),
        ("flow.submit", "reports", 0, "flow f1: 3 jobs", "rest", who),
        ("flow.submit", "reports", 3, "flow f1: 3 jobs", "rest", who),
    ]


async def test_a_refused_flow_writes_nothing_and_connect_flows_and_writes_are_not_recorded(
    gateway, store, dump
):
    operator = await bearer(store, "acme", auth.READ, auth.ADMIN, auth.ENQUEUE)
    capped = await bearer(store, "capped", auth.READ, auth.ENQUEUE)
    r = await gateway.post("/v1/flows", json=graph("f1", "reports", "reports"), headers=operator)
    assert r.status_code == 200, r.text
    before = await dump()
    # the same id with another graph; a cycle; a node of a namespace over its quota
    r = await gateway.post("/v1/flows", json=graph("f1", "reports", "other"), headers=operator)
    assert r.status_code == 409, r.text
    cyclic = {"nodes": [{"id": "a", "queue": "q", "name": "t", "depends_on": ["b"]},
                        {"id": "b", "queue": "q", "name": "t", "depends_on": ["a"]}]}  # fmt: skip
    r = await gateway.post("/v1/flows", json=cyclic, headers=operator)
    assert r.status_code == 400, r.text
    r = await gateway.post("/v1/flows", json=graph("big", "q", "q", "q"), headers=capped)
    assert r.status_code == 429, r.text
    assert await dump() == before
    # over Connect (an SDK's flow or write batch): the producers' path, not recorded
    r = await gateway.post(CONNECT + "Flow", json={"graph": {"nodes": [{"id": "a", "queue": "q",
                                                                         "task": {"name": "t"}}]}},
                           headers=operator)  # fmt: skip
    assert r.status_code == 200, r.text
    r = await gateway.post(CONNECT + "WriteBatch", json={"items": [{"enqueue": {"queue": "q",
                                                                                "task": {"name": "t"}}}]},
                           headers=operator)  # fmt: skip
    assert r.status_code == 200, r.text
    assert [(e["action"], e["count"]) for e in await entries(gateway, operator)] == [("flow.submit", 2)]
