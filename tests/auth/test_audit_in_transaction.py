"""The audit log written by the queue core in the action's own transaction, for every
transport: a Connect admin call is recorded like a REST one (who, what, when, how many
jobs); a refused or failed action records nothing; an action and its record commit
together (a failure between them undoes both; a lost or retried commit keeps exactly one
of each); an action done in several transactions (a drain) has one record counting
them all; each job of a bulk batch is recorded as a part of it; a remote queue core
records the caller the gateway checked (the actor travels in the internal call); a
person's enqueue over REST and a queue's settings changes are recorded, a producer's
Connect enqueue (the hot path) is not."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from inproc import served

from loam_common import audit, auth, keys
from loam_common.audit import ACTOR, Actor
from loam_common.errors import InvalidArgument
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.jobs import admin, quotas
from loam_common.jobs import states as S
from loam_common.store.memory import Fault, FaultPlan, MemoryBackend
from loam_common.store.runner import Store, open_store
from loam_gateway.app import create_app
from loam_gateway.audit_log import AuditLog
from loam_gateway.auth import StoreAuthenticator
from loam_gateway.routing import Router
from loam_queue_core import QueueCore
from loam_queue_core import server as core_server
from loam_queue_core.rpc import CoreRpc

CONNECT = "/loam.jobs.v1.JobsService/"


@pytest.fixture
async def gateway(store, tmp_path):
    router = Router(local=CoreRpc(QueueCore(store)))
    app = create_app(router, StoreAuthenticator(store), audit=AuditLog(store))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        yield client


async def bearer(store, ns: str, *actions: str) -> dict[str, str]:
    t, _ = await store.transact(auth.token_create, ns, list(actions), "", None)
    return {"authorization": f"Bearer {t}"}


async def enqueue(gw, who, queue: str, n: int = 1) -> list[str]:
    out = []
    for i in range(n):
        r = await gw.post(f"/v1/queues/{queue}/jobs", json={"name": "charge", "data": {"n": i}}, headers=who)
        assert r.status_code == 200, r.text
        out.append(r.json()["job"])
    return out


async def entries(gw, who, query: str = "") -> list[dict]:
    r = await gw.get(f"/v1/audit{query}", headers=who)
    assert r.status_code == 200, r.text
    return r.json()["entries"]


async def actions(gw, who) -> list[dict]:
    """The records but those of the REST enqueues a test makes its jobs with."""
    return [e for e in await entries(gw, who) if e["action"] != "queue.enqueue"]


def audit_rows(tx, ns: str) -> list[dict]:
    start = keys.audit_all(ns)
    return [json.loads(v) for _, v in tx.scan(start, keys.prefix_end(start))]


async def test_connect_admin_calls_are_audited_like_rest(gateway, store):
    operator = await bearer(store, "acme", auth.READ, auth.ADMIN, auth.ENQUEUE)
    who = (await gateway.get("/v1/whoami", headers=operator)).json()["token_id"]
    job, other = await enqueue(gateway, operator, "emails", 2)
    r = await gateway.post(CONNECT + "JobAdmin", json={"queue": "emails", "job": job, "op": {"cancel": {}}},
                           headers=operator)  # fmt: skip
    assert r.status_code == 200, r.text
    r = await gateway.post(
        CONNECT + "QueueAdmin", json={"queue": "emails", "op": {"drain": {}}}, headers=operator
    )
    assert r.status_code == 200 and r.json()["affected"] == "1", r.text
    r = await gateway.post("/v1/queues/emails:pause", headers=operator)
    assert r.status_code == 200, r.text
    got = [
        (e["action"], e["job"], e["count"], e["via"], e["token_id"], e["role"])
        for e in await actions(gateway, operator)
    ]
    assert got == [
        ("queue.pause", "", 0, "rest", who, "operator"),
        ("queue.drain", "", 1, "connect", who, "operator"),
        ("job.cancel", job, 1, "connect", who, "operator"),
    ]
    assert other  # the drained one
    # reads through Connect are not actions: nothing recorded
    r = await gateway.post(CONNECT + "JobAdmin", json={"queue": "emails", "job": job, "op": {"get": {}}},
                           headers=operator)  # fmt: skip
    assert r.status_code == 200
    assert len(await actions(gateway, operator)) == 3


async def test_a_refused_or_failed_action_records_nothing(gateway, store, dump):
    operator = await bearer(store, "acme", auth.READ, auth.ADMIN, auth.ENQUEUE)
    viewer = await bearer(store, "acme", auth.READ)
    (job,) = await enqueue(gateway, operator, "emails")
    before = await dump()
    # the job is waiting, not delayed: promote fails in its transition
    r = await gateway.post(CONNECT + "JobAdmin", json={"queue": "emails", "job": job, "op": {"promote": {}}},
                           headers=operator)  # fmt: skip
    assert r.status_code == 400 and r.json()["code"] == "failed_precondition", r.text
    r = await gateway.post(f"/v1/queues/emails/jobs/{job}:promote", headers=operator)
    assert r.status_code == 400, r.text
    # no such job; and a viewer may not act
    r = await gateway.post(CONNECT + "JobAdmin", json={"queue": "emails", "job": "nope", "op": {"retry": {}}},
                           headers=operator)  # fmt: skip
    assert r.json()["code"] == "not_found", r.text
    r = await gateway.post(
        CONNECT + "QueueAdmin", json={"queue": "emails", "op": {"pause": {}}}, headers=viewer
    )
    assert r.json()["code"] == "permission_denied", r.text
    assert await dump() == before
    assert await actions(gateway, viewer) == []


async def test_an_action_and_its_record_fail_together(gateway, store, dump, monkeypatch):
    """A failure after the action's writes, while its record is written, undoes the action."""
    operator = await bearer(store, "acme", auth.READ, auth.ADMIN, auth.ENQUEUE)
    (job,) = await enqueue(gateway, operator, "emails")
    before = await dump()

    def broken(tx, ns, entry):
        raise RuntimeError("the store failed between the action and its record")

    monkeypatch.setattr(audit, "audit_append", broken)
    r = await gateway.post(CONNECT + "JobAdmin", json={"queue": "emails", "job": job, "op": {"cancel": {}}},
                           headers=operator)  # fmt: skip
    assert r.status_code == 500, r.text
    r = await gateway.post(f"/v1/queues/emails/jobs/{job}:remove", headers=operator)
    assert r.status_code == 500, r.text
    assert await dump() == before  # the job is still waiting, and no record
    monkeypatch.undo()
    r = await gateway.get(f"/v1/queues/emails/jobs/{job}", headers=operator)
    assert r.json()["job"]["state"] == "waiting"


@pytest.mark.parametrize("fault", [Fault.UNKNOWN_COMMITTED, Fault.UNKNOWN_NOT_COMMITTED, Fault.CONFLICT])
async def test_a_lost_or_retried_commit_keeps_one_action_and_one_record(fault):
    faults = FaultPlan()
    store = Store(MemoryBackend(faults=faults))
    try:
        core = QueueCore(store)
        rpc = CoreRpc(core)
        ns = "acme"
        ids = [
            (await rpc.enqueue(ns, J.EnqueueRequest(queue="q", task={"name": "t"}))).enqueued.job
            for _ in range(2)
        ]
        token = ACTOR.set(Actor("t1", "operator", (auth.ADMIN,), "connect"))
        try:
            faults.schedule_commits(fault)
            await rpc.job_admin(ns, J.JobAdminRequest(queue="q", job=ids[0], op=J.JobOp(cancel={})))
        finally:
            ACTOR.reset(token)
        assert faults.injected[fault] == 1
        rows = await store.snapshot(audit_rows, ns)
        assert [(r["action"], r["job"], r["token_id"]) for r in rows] == [("job.cancel", ids[0], "t1")]
        got = await rpc.job_admin(ns, J.JobAdminRequest(queue="q", job=ids[0], op=J.JobOp(get={})))
        assert got.job.state == S.CANCELED
        # without an actor (a sweep, a timer, an in-process caller): the action, no record
        await rpc.job_admin(ns, J.JobAdminRequest(queue="q", job=ids[1], op=J.JobOp(cancel={})))
        assert len(await store.snapshot(audit_rows, ns)) == 1
    finally:
        await store.close()


async def test_an_action_of_several_transactions_has_one_record_counting_them_all(
    gateway, store, monkeypatch
):
    monkeypatch.setattr(admin, "BATCH", 2)  # a drain of 5 jobs: 3 transactions
    operator = await bearer(store, "acme", auth.READ, auth.ADMIN, auth.ENQUEUE)
    await enqueue(gateway, operator, "emails", 5)
    r = await gateway.post(
        CONNECT + "QueueAdmin", json={"queue": "emails", "op": {"drain": {}}}, headers=operator
    )
    assert r.json()["affected"] == "5", r.text
    (entry,) = await actions(gateway, operator)
    assert (entry["action"], entry["count"]) == ("queue.drain", 5)


async def test_each_job_of_a_batch_is_recorded_as_a_part_of_it(gateway, store):
    admin_ = await bearer(store, "acme", *sorted(auth.ACTIONS))
    ids = await enqueue(gateway, admin_, "emails", 3)
    r = await gateway.post("/v1/queues/emails/batches", json={"action": "cancel", "ids": [*ids, "missing"]},
                           headers=admin_)  # fmt: skip
    batch = r.json()
    while batch["state"] != "done":  # the batch record's long poll: wakes on each change
        batch = (await gateway.get(f"/v1/batches/{batch['id']}?after_version={batch['version']}&wait_ms=10000",
                                   headers=admin_)).json()  # fmt: skip
    # the summary was written first (the oldest), and is final once the record is done
    *jobs, summary = await actions(gateway, admin_)
    assert (summary["action"], summary["count"], summary["batch"]) == ("batch.cancel", 3, batch["id"])
    assert sorted((e["action"], e["job"], e["batch"]) for e in jobs) == sorted(
        ("job.cancel", j, batch["id"]) for j in ids
    )


def test_an_actor_header_is_read_back_and_a_bad_one_refused():
    a = Actor("0123", "viewer", (auth.READ,), "rest", "b1")
    assert Actor.from_header(a.header()) == a
    in_batch = a.in_batch("b2", "AAAAAAAAAAAAAAAAAAAAAA")  # with the batch summary's record id
    assert Actor.from_header(in_batch.header()) == in_batch
    for bad in ("", "{}", "[1,2,3,4,5]", '["a","b",["c"],"d"]', "x" * 5000, '["a","b",[],"d","e","not-an-id"]',
                '["a","b",[],"d","e","AAAAAAAAAAAAAAAAAAAAAA","x"]'):  # fmt: skip
        with pytest.raises(InvalidArgument):
            Actor.from_header(bad)


async def test_a_remote_core_records_the_caller_the_gateway_checked(tmp_path):
    """A gateway and a queue core over HTTP (the deployment's shape): the actor rides in
    the internal call, and the core's record names the gateway's caller."""
    store = open_store(f"sqlite:///{tmp_path / 'loam.db'}")
    try:
        async with served(core_server.create_app(QueueCore(store), internal_token="in")) as core_url:
            router = Router(cores=[core_url], internal_token="in")
            try:
                app = create_app(router, StoreAuthenticator(store), audit=AuditLog(store))
                async with httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app), base_url="http://gw"
                ) as gw:
                    operator = await bearer(store, "acme", auth.READ, auth.ADMIN, auth.ENQUEUE)
                    who = (await gw.get("/v1/whoami", headers=operator)).json()["token_id"]
                    (job,) = await enqueue(gw, operator, "emails")
                    r = await gw.post(f"/v1/queues/emails/jobs/{job}:cancel", headers=operator)
                    assert r.status_code == 200, r.text
                    assert [e["action"] for e in await entries(gw, operator)] == [
                        "job.cancel",
                        "queue.enqueue",
                    ]
                    (entry,) = await actions(gw, operator)
                    assert (entry["action"], entry["job"], entry["token_id"], entry["via"]) == (
                        "job.cancel",
                        job,
                        who,
                        "rest",
                    )
            finally:
                await router.close()
    finally:
        await store.close()


async def test_a_rest_enqueue_is_recorded_and_a_producers_connect_enqueue_is_not(gateway, store):
    operator = await bearer(store, "acme", auth.READ, auth.ADMIN, auth.ENQUEUE)
    who = (await gateway.get("/v1/whoami", headers=operator)).json()["token_id"]
    (job,) = await enqueue(gateway, operator, "emails")
    # an SDK's enqueue (Connect), the producers' hot path: not recorded
    r = await gateway.post(CONNECT + "Enqueue", json={"queue": "emails", "task": {"name": "charge"}},
                           headers=operator)  # fmt: skip
    assert r.status_code == 200, r.text
    # the same job key again: the existing job, nothing created
    keyed = {"name": "charge", "data": {"n": 1}, "job_key": "order-7"}
    for _ in range(2):
        r = await gateway.post("/v1/queues/emails/jobs", json=keyed, headers=operator)
        assert r.status_code == 200, r.text
    got = [(e["action"], e["queue"], e["count"], e["via"], e["token_id"], e["detail"])
           for e in await entries(gateway, operator)]  # fmt: skip
    assert got == [
        ("queue.enqueue", "emails", 0, "rest", who, "charge"),
        ("queue.enqueue", "emails", 1, "rest", who, "charge"),
        ("queue.enqueue", "emails", 1, "rest", who, "charge"),
    ]
    assert (await entries(gateway, operator))[-1]["job"] == job
    assert (await entries(gateway, operator, f"?queue=emails&job={job}"))[0]["action"] == "queue.enqueue"


async def test_a_refused_enqueue_records_nothing(store, dump):
    core = QueueCore(store, quotas=quotas.parse("acme:stored_jobs=1"))
    app = create_app(Router(local=CoreRpc(core)), StoreAuthenticator(store), audit=AuditLog(store))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as gw:
        operator = await bearer(store, "acme", auth.READ, auth.ADMIN, auth.ENQUEUE)
        viewer = await bearer(store, "acme", auth.READ)
        await enqueue(gw, operator, "emails")
        before = await dump()
        # over the namespace's quota: refused in the enqueue's transaction
        r = await gw.post("/v1/queues/emails/jobs", json={"name": "charge"}, headers=operator)
        assert r.status_code == 429, r.text
        # bad input, and a caller that may not enqueue
        r = await gw.post("/v1/queues/emails/jobs", json={"name": ""}, headers=operator)
        assert r.status_code == 400, r.text
        r = await gw.post("/v1/queues/emails/jobs", json={"name": "charge"}, headers=viewer)
        assert r.status_code == 403, r.text
        assert await dump() == before
        assert [e["count"] for e in await entries(gw, viewer)] == [1]


async def test_a_queue_settings_change_is_recorded(gateway, store, dump):
    operator = await bearer(store, "acme", auth.READ, auth.ADMIN, auth.ENQUEUE)
    who = (await gateway.get("/v1/whoami", headers=operator)).json()["token_id"]

    async def queue_admin(op: dict, who=operator) -> httpx.Response:
        return await gateway.post(CONNECT + "QueueAdmin", json={"queue": "emails", "op": op}, headers=who)

    assert (await queue_admin({"create": {"config": {"attempts": 3}}})).status_code == 200
    r = await queue_admin({"update": {"config": {"max_stalled": 4}, "fields": ["max_stalled"]}})
    assert r.status_code == 200, r.text
    r = await queue_admin({"set_rate_limit": {"rate_limit": {"max": 10, "duration_ns": "1000000000"}}})
    assert r.status_code == 200, r.text
    assert (await queue_admin({"set_concurrency": {"concurrency": 2}})).status_code == 200
    r = await gateway.post("/v1/queues/emails:pause", headers=operator)
    assert r.status_code == 200, r.text
    got = [(e["action"], e["queue"], e["count"], e["via"], e["token_id"], e["detail"])
           for e in await entries(gateway, operator)]  # fmt: skip
    assert got == [
        ("queue.pause", "emails", 0, "rest", who, ""),
        ("queue.set_concurrency", "emails", 0, "connect", who, "concurrency 2"),
        ("queue.set_rate_limit", "emails", 0, "connect", who, "max 10 per 1000000000 ns"),
        ("queue.update", "emails", 0, "connect", who, "max_stalled: max_stalled: 4"),
        ("queue.create", "emails", 0, "connect", who, "attempts: 3"),
    ]
    # a refused change (a viewer; a bad value) writes neither the setting nor a record
    viewer = await bearer(store, "acme", auth.READ)
    before = await dump()
    assert (await queue_admin({"set_concurrency": {"concurrency": 3}}, viewer)).json()[
        "code"
    ] == "permission_denied"
    r = await queue_admin({"update": {"config": {"shards": 1000}, "fields": ["shards"]}})
    assert r.json()["code"] == "invalid_argument", r.text
    assert await dump() == before


async def test_a_rest_enqueue_handed_to_a_waiting_poll_is_recorded(store):
    """With a worker's poll asleep, the enqueue's transaction also leases for it
    (decision 0023): the record is written in that transaction too, and the job reaches
    the worker."""
    core = QueueCore(store)
    app = create_app(Router(local=CoreRpc(core)), StoreAuthenticator(store), audit=AuditLog(store))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as gw:
        operator = await bearer(store, "acme", auth.READ, auth.ADMIN, auth.ENQUEUE)
        poll = asyncio.create_task(core.jobs.lease("acme", ["emails"], "w1", 1, wait_ns=30 * 10**9))
        async with asyncio.timeout(30):
            while core.waiters.sleeping("acme", "emails") == 0:  # it read nothing and waits
                await asyncio.sleep(0.001)
        (job,) = await enqueue(gw, operator, "emails")
        async with asyncio.timeout(30):
            (leased,) = await poll
        assert leased.id == job
        got = [(e["action"], e["job"], e["count"]) for e in await entries(gw, operator)]
        assert got == [("queue.enqueue", job, 1)]
