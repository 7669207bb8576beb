"""A bulk batch's audit summary is written when the batch starts and kept up to date as
its jobs are acted on: each job's action raises the summary's count in its own
transaction, and the gateway rewrites its detail with the batch's record. So a batch
whose process dies between two chunks leaves a summary saying how far it got (its count
is exactly the jobs whose actions committed), not no summary at all."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from loam_common import auth
from loam_gateway import rest_batches
from loam_gateway.app import create_app
from loam_gateway.audit_log import AuditLog
from loam_gateway.auth import StoreAuthenticator
from loam_gateway.routing import Router
from loam_queue_core import QueueCore
from loam_queue_core.rpc import CoreRpc


@pytest.fixture
async def parts(store):
    router = Router(local=CoreRpc(QueueCore(store)))
    app = create_app(router, StoreAuthenticator(store), audit=AuditLog(store))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        yield client, router


async def test_a_batch_that_dies_between_chunks_leaves_a_summary_of_how_far_it_got(parts, store, monkeypatch):
    gateway, router = parts
    monkeypatch.setattr(rest_batches, "PAGE", 2)  # chunks of 2 jobs
    monkeypatch.setattr(rest_batches, "WRITE_EVERY_S", 0.0)  # the record (and summary detail) after each job
    t, _ = await store.transact(auth.token_create, "acme", sorted(auth.ACTIONS), "", None)
    admin = {"authorization": f"Bearer {t}"}
    ids = []
    for i in range(5):
        r = await gateway.post(
            "/v1/queues/emails/jobs", json={"name": "charge", "data": {"n": i}}, headers=admin
        )
        ids.append(r.json()["job"])

    # the process "dies" as the second chunk starts: its first job's call never returns
    calls = 0
    stuck = asyncio.Event()
    real_call = router.call

    async def call(ns, method, request, **kw):
        nonlocal calls
        if method == "job_admin":
            calls += 1
            if calls == 3:
                stuck.set()
                await asyncio.Event().wait()
        return await real_call(ns, method, request, **kw)

    monkeypatch.setattr(router, "call", call)
    r = await gateway.post("/v1/queues/emails/batches", json={"action": "remove", "ids": ids}, headers=admin)
    assert r.status_code == 202, r.text
    batch = r.json()["id"]
    async with asyncio.timeout(30):
        await stuck.wait()
    (task,) = rest_batches._running
    task.cancel()  # nothing of the batch runs any more: no end, no last update
    await asyncio.gather(task, return_exceptions=True)

    entries = (await gateway.get("/v1/audit", headers=admin)).json()["entries"]
    ours = [e for e in entries if e["batch"] == batch]
    *each, summary = ours  # the summary is the batch's first record
    assert (summary["action"], summary["count"]) == ("batch.remove", 2)
    assert summary["detail"] == f"batch {batch}: running, 2 done: 2 succeeded, 0 failed"
    assert sorted(e["job"] for e in each) == sorted(ids[:2])
    assert {e["action"] for e in each} == {"job.remove"}
    # the jobs after the stop are untouched
    for job in ids[2:]:
        r = await gateway.get(f"/v1/queues/emails/jobs/{job}", headers=admin)
        assert r.json()["job"]["state"] == "waiting", r.text


async def test_a_summary_counts_only_what_committed(parts, store):
    """A refused job (not found) does not raise the count; the summary is final, with its
    filter, by the time the batch's record says done."""
    gateway, _router = parts
    t, _ = await store.transact(auth.token_create, "acme", sorted(auth.ACTIONS), "", None)
    admin = {"authorization": f"Bearer {t}"}
    for i in range(3):
        r = await gateway.post(
            "/v1/queues/emails/jobs", json={"name": "charge", "data": {"n": i}}, headers=admin
        )
        assert r.status_code == 200, r.text
    body = {"action": "cancel", "filter": {"state": "waiting", "name": "charge"}}
    batch = (await gateway.post("/v1/queues/emails/batches", json=body, headers=admin)).json()
    while batch["state"] != "done":
        batch = (await gateway.get(f"/v1/batches/{batch['id']}?after_version={batch['version']}&wait_ms=10000",
                                   headers=admin)).json()  # fmt: skip
    summary = [e for e in (await gateway.get("/v1/audit", headers=admin)).json()["entries"]
               if e["action"] == "batch.cancel"]  # fmt: skip
    assert [(s["count"], s["detail"]) for s in summary] == [
        (
            3,
            f'batch {batch["id"]}: 3 succeeded, 0 failed; filter {{"state":"waiting","name":"charge","field":"any"}}',
        )
    ]
    # a batch refused before it starts (an unknown queue) writes no summary
    r = await gateway.post("/v1/queues/nope/batches", json={"action": "remove", "ids": ["x"]}, headers=admin)
    assert r.status_code == 404, r.text
    actions = [e["action"] for e in (await gateway.get("/v1/audit", headers=admin)).json()["entries"]]
    assert actions.count("batch.remove") == 0
