"""Quotas per namespace (loam_common.jobs.quotas): each one refused with
resource_exhausted naming the quota, nothing partial stored, other namespaces untouched;
on the SQLite store through the core, and through Connect and REST."""

from __future__ import annotations

import asyncio
import json

import pytest
from gateway_kit import JSON, SVC, client_for

from loam_common.blobs import DirBlobStore
from loam_common.errors import InvalidArgument
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import quotas
from loam_common.jobs.quotas import QuotaExceeded
from loam_common.store import ManualClock, SqliteBackend, Store
from loam_gateway.app import create_app
from loam_gateway.routing import Router
from loam_queue_core import QueueCore
from loam_queue_core.rpc import CoreRpc

SEC = 1_000_000_000


@pytest.fixture
async def quota_core(tmp_path):
    clock = ManualClock()
    store = Store(SqliteBackend(tmp_path / "q.db", clock=clock))
    table = quotas.parse(
        "small:stored_jobs=3,payload_bytes=100,active_leases=2,schedules=1;rate:enqueue_rate=5;*:stored_jobs=1000"
    )
    core = QueueCore(store, DirBlobStore(tmp_path / "blobs"), quotas=table)
    core.clock = clock
    yield core
    await store.close()


def task(data: bytes = b"x") -> pb.TaskSpec:
    return pb.TaskSpec(name="t", payload=pb.Payload(data=data, content_type="application/octet-stream"))


async def stored(core, ns: str, queue: str = "q") -> int:
    rows = dict(await core.queues.names_with_counts(ns))
    if queue not in rows:
        return 0
    return sum(v for f, v in rows[queue].ListFields() if f.name != "paused")


def test_parse_names_every_quota_and_refuses_typos():
    table = quotas.parse("*:stored_jobs=7;a:enqueue_rate=1,schedules=2")
    assert table.of("zzz").stored_jobs == 7 and table.of("a") == quotas.Quota(enqueue_rate=1, schedules=2)
    for bad in ("a:stored=1", "a:stored_jobs=-1", "stored_jobs=1", "a:stored_jobs=x"):
        with pytest.raises(InvalidArgument):
            quotas.parse(bad)


async def test_stored_jobs_refuses_the_whole_bulk_and_stores_nothing(quota_core):
    await quota_core.jobs.enqueue("small", "q", task())
    with pytest.raises(QuotaExceeded, match="stored_jobs") as e:
        await quota_core.jobs.enqueue_bulk("small", "q", [(task(), None)] * 3)
    assert e.value.code == "resource_exhausted"
    assert await stored(quota_core, "small") == 1  # none of the three
    await quota_core.jobs.enqueue_bulk("small", "q", [(task(), None)] * 2)
    assert await stored(quota_core, "small") == 3
    await quota_core.jobs.enqueue("other", "q", task())  # another namespace has its own room


async def test_a_write_batch_counts_its_enqueues_against_the_quota(quota_core):
    await quota_core.jobs.enqueue("small", "q", task())
    writes = [("enqueue", "q", task(), None)] * 3 + [("result_set", "k", pb.Payload(data=b"1"), 0)]
    with pytest.raises(QuotaExceeded, match="stored_jobs"):
        await quota_core.jobs.write_batch("small", writes)
    assert await stored(quota_core, "small") == 1  # nothing of the batch
    assert (await quota_core.results.get("small", "k"))[0] is None
    await quota_core.jobs.write_batch("small", writes[2:])
    assert await stored(quota_core, "small") == 2


async def test_payload_bytes_refuses_an_oversized_call(quota_core):
    with pytest.raises(QuotaExceeded, match="payload_bytes"):
        await quota_core.jobs.enqueue_bulk("small", "q", [(task(b"x" * 60), None)] * 2)
    assert await stored(quota_core, "small") == 0


async def test_enqueue_rate_per_second_window(quota_core):
    await quota_core.jobs.enqueue_bulk("rate", "q", [(task(), None)] * 4)
    await quota_core.jobs.enqueue("rate", "q", task())
    with pytest.raises(QuotaExceeded, match="enqueue_rate"):
        await quota_core.jobs.enqueue("rate", "q", task())
    assert await stored(quota_core, "rate") == 5
    quota_core.clock.advance(SEC)
    await quota_core.jobs.enqueue("rate", "q", task())
    assert await stored(quota_core, "rate") == 6


async def test_active_leases_caps_and_then_refuses(quota_core):
    await quota_core.jobs.enqueue_bulk("small", "q", [(task(), None)] * 3)
    got = await quota_core.jobs.lease("small", ["q"], "w", 10)
    assert len(got) == 2  # capped at the namespace's allowance
    with pytest.raises(QuotaExceeded, match="active_leases"):
        await quota_core.jobs.lease("small", ["q"], "w", 1)


async def test_schedules_count_new_ids_only(quota_core):
    spec = pb.ScheduleSpec(id="a", queue="q", task=pb.TaskSpec(name="t"), every_ns=60 * SEC)
    await quota_core.schedules.upsert("small", spec)
    spec.every_ns = 120 * SEC
    await quota_core.schedules.upsert("small", spec)  # replacing one is not a new one
    with pytest.raises(QuotaExceeded, match="schedules"):
        await quota_core.schedules.upsert("small", pb.ScheduleSpec(id="b", queue="q", task=pb.TaskSpec(name="t"),
                                                                   every_ns=60 * SEC))  # fmt: skip


async def test_quotas_through_connect_and_rest(quota_core):
    async with client_for(create_app(Router(local=CoreRpc(quota_core)))) as http:
        small = {"x-loam-namespace": "small"}
        for _ in range(3):
            r = await http.post("/v1/queues/q/jobs", json={"name": "t"}, headers=small)
            assert r.status_code == 200, r.text
        r = await http.post("/v1/queues/q/jobs", json={"name": "t"}, headers=small)
        assert r.status_code == 429 and r.json()["code"] == "resource_exhausted", r.text
        assert "stored_jobs" in r.json()["message"]
        body = json.dumps({"queue": "q", "jobs": [{"task": {"name": "t"}}]})
        r = await http.post(SVC + "EnqueueBulk", content=body, headers={**JSON, **small})
        assert r.status_code == 429 and "stored_jobs" in r.json()["message"], r.text
        assert len((await http.get("/v1/queues/q/jobs", headers=small)).json()["jobs"]) == 3
        nodes = [
            {"id": "a", "queue": "f", "name": "t"},
            {"id": "b", "queue": "f", "name": "t", "depends_on": ["a"]},
        ]
        r = await http.post("/v1/flows", json={"nodes": nodes}, headers=small)
        assert r.status_code == 429 and "stored_jobs" in r.json()["message"], r.text
        assert await stored(quota_core, "small", "f") == 0


# -- payload_bytes: the bytes a namespace stores -------------------------------------------
async def test_payload_bytes_limits_what_the_namespace_stores_across_calls(quota_core):
    first = await quota_core.jobs.enqueue("small", "q", task(b"x" * 60))
    with pytest.raises(QuotaExceeded, match="payload_bytes") as e:
        await quota_core.jobs.enqueue("small", "other-queue", task(b"y" * 60))  # each call fits; both do not
    assert "needs 120" in str(e.value)
    assert (await quota_core.quotas.get("small")).usage.payload_bytes == 60
    await quota_core.job_admin.remove("small", "q", first.job_id, False)  # removing a job frees its bytes
    assert (await quota_core.quotas.get("small")).usage.payload_bytes == 0
    second = await quota_core.jobs.enqueue("small", "q", task(b"y" * 60))
    await quota_core.job_admin.update_data("small", "q", second.job_id, pb.Payload(data=b"z" * 90))
    assert (await quota_core.quotas.get("small")).usage.payload_bytes == 90  # a new payload replaces the old
    with pytest.raises(QuotaExceeded, match="payload_bytes"):
        await quota_core.jobs.enqueue("small", "q", task(b"x" * 20))
    assert await stored(quota_core, "small") == 1


async def test_draining_a_queue_gives_its_bytes_back(quota_core):
    await quota_core.quotas.set("drained", quotas.Quota(payload_bytes=1000))
    await quota_core.jobs.enqueue_bulk("drained", "q", [(task(b"x" * 300), None)] * 3)
    with pytest.raises(QuotaExceeded, match="payload_bytes"):
        await quota_core.jobs.enqueue("drained", "q", task(b"x" * 300))
    assert await quota_core.queues.drain("drained", "q", False) == 3
    assert (await quota_core.quotas.get("drained")).usage.payload_bytes == 0
    await quota_core.jobs.enqueue("drained", "q", task(b"x" * 300))


# -- the admin API ---------------------------------------------------------------------------
async def test_a_namespace_quota_set_through_the_core_applies_at_once_and_resets(quota_core):
    view = await quota_core.quotas.get("fresh")
    assert view.source == "deployment" and view.quota == quotas.Quota(stored_jobs=1000)  # the `*` entry
    view = await quota_core.quotas.set("fresh", quotas.Quota(stored_jobs=1))
    assert view.source == "namespace" and view.quota == quotas.Quota(stored_jobs=1)
    await quota_core.jobs.enqueue("fresh", "q", task())
    with pytest.raises(QuotaExceeded, match="stored_jobs"):
        await quota_core.jobs.enqueue("fresh", "q", task())
    assert (await quota_core.quotas.get("other")).quota == quotas.Quota(stored_jobs=1000)  # its own only
    view = await quota_core.quotas.set("fresh", None)
    assert view.source == "deployment" and view.usage.stored_jobs == 1
    await quota_core.jobs.enqueue("fresh", "q", task())


async def test_a_second_core_on_the_same_store_sees_a_change_without_restart(quota_core, tmp_path):
    other = QueueCore(
        quota_core.store, DirBlobStore(tmp_path / "blobs2")
    )  # another process's core: no --quotas
    other.quotas.refresh_s = 0.1  # (1 s by default) how long it keeps what it read
    await other.jobs.enqueue("shared", "q", task())  # it has read "no quota" for the namespace
    await quota_core.quotas.set("shared", quotas.Quota(stored_jobs=1))
    await asyncio.sleep(0.2)
    with pytest.raises(QuotaExceeded, match="stored_jobs"):
        await other.jobs.enqueue("shared", "q", task())
    await quota_core.quotas.set("shared", quotas.Quota(active_leases=1))  # replaces the whole record
    await asyncio.sleep(0.2)
    await other.jobs.enqueue("shared", "q", task())
    assert len(await other.jobs.lease("shared", ["q"], "w", 5)) == 1
    with pytest.raises(QuotaExceeded, match="active_leases"):
        await other.jobs.lease("shared", ["q"], "w", 1)


async def test_quota_api_over_rest_and_connect_with_auth(quota_core, tmp_path):
    from loam_common import auth
    from loam_gateway.auth import StoreAuthenticator

    store = quota_core.store
    admin_token, _ = await store.transact(auth.token_create, "small", [auth.ADMIN], "", None)
    operator_token, _ = await store.transact(auth.token_create, "small", [auth.DEPLOYMENT_ADMIN], "", None)
    app = create_app(Router(local=CoreRpc(quota_core)), StoreAuthenticator(store))
    async with client_for(app) as http:
        tenant = {"authorization": f"Bearer {admin_token}"}
        operator = {"authorization": f"Bearer {operator_token}", **JSON}
        r = await http.get("/v1/quotas", headers=tenant)
        assert r.status_code == 200 and r.json()["source"] == "deployment", r.text
        assert r.json()["quotas"]["stored_jobs"] == 3
        # a tenant's jobs:admin cannot lift its own limits, on either transport
        r = await http.put("/v1/quotas", json={"stored_jobs": 10**6}, headers=tenant)
        assert r.status_code == 403 and r.json()["code"] == "permission_denied", r.text
        r = await http.post(SVC + "SetQuotas", content=b'{"reset": true}', headers={**tenant, **JSON})
        assert r.status_code == 403, r.text
        # the operator can; the change applies to the tenant's next call
        r = await http.put("/v1/quotas", json={"stored_jobs": 1}, headers=operator)
        assert r.status_code == 200 and r.json()["source"] == "namespace", r.text
        assert r.json()["quotas"] == {"enqueue_rate": 0, "stored_jobs": 1, "payload_bytes": 0,
                                      "active_leases": 0, "schedules": 0}  # fmt: skip
        r = await http.post(SVC + "GetQuotas", content=b"{}", headers={**tenant, **JSON})
        assert r.status_code == 200 and r.json()["quotas"]["storedJobs"] == "1", r.text
        # bad input is refused and changes nothing
        for body in ({"stored_jobs": -1}, {"stored_jobs": "3"}, {"stored_jobs": 2**64}, {"stored": 1}):
            r = await http.put("/v1/quotas", json=body, headers=operator)
            assert r.status_code == 400 and r.json()["code"] == "invalid_argument", (body, r.text)
        bad = json.dumps({"quotas": {"storedJobs": "5"}, "reset": True}).encode()
        r = await http.post(SVC + "SetQuotas", content=bad, headers=operator)
        assert r.status_code == 400 and "reset" in r.json()["message"], r.text
        r = await http.get("/v1/quotas", headers=tenant)
        assert r.json()["quotas"]["stored_jobs"] == 1
        # reset: the deployment's apply again
        r = await http.delete("/v1/quotas", headers=operator)
        assert (
            r.status_code == 200
            and r.json()["source"] == "deployment"
            and r.json()["quotas"]["stored_jobs"] == 3
        )


# -- the other paths that create jobs: flows, exchange publishes, schedule ticks ------------
def flow(*node_ids: str, data: bytes = b"x") -> pb.FlowSpec:
    return pb.FlowSpec(nodes=[pb.FlowNode(id=n, queue="q", task=task(data)) for n in node_ids])


async def test_a_flow_over_a_quota_is_refused_whole_and_stores_nothing(quota_core):
    await quota_core.jobs.enqueue("small", "q", task())
    with pytest.raises(QuotaExceeded, match="stored_jobs") as e:
        await quota_core.flows.submit("small", flow("a", "b", "c"))  # 1 + 3 > 3
    assert e.value.code == "resource_exhausted"
    assert await stored(quota_core, "small") == 1  # none of the flow's jobs
    with pytest.raises(QuotaExceeded, match="payload_bytes"):
        await quota_core.flows.submit("small", flow("a", "b", data=b"x" * 60))  # 120 bytes > 100
    assert await stored(quota_core, "small") == 1
    sub = await quota_core.flows.submit("small", pb.FlowSpec(id="f", nodes=flow("a", "b").nodes))
    assert sub.created and await stored(quota_core, "small") == 3
    again = await quota_core.flows.submit("small", pb.FlowSpec(id="f", nodes=flow("a", "b").nodes))
    assert not again.created and again.jobs == sub.jobs  # a replay stores nothing: not refused


async def test_a_flow_counts_against_the_enqueue_rate(quota_core):
    await quota_core.jobs.enqueue_bulk("rate", "q", [(task(), None)] * 3)
    with pytest.raises(QuotaExceeded, match="enqueue_rate"):
        await quota_core.flows.submit("rate", flow("a", "b", "c"))  # 3 + 3 > 5 this second
    assert await stored(quota_core, "rate") == 3
    quota_core.clock.advance(SEC)
    await quota_core.flows.submit("rate", flow("a", "b", "c"))
    assert await stored(quota_core, "rate") == 6


async def test_an_exchange_publish_over_a_quota_is_refused_whole(quota_core):
    fanout = pb.EXCHANGE_TYPE_FANOUT
    for q in ("q1", "q2"):
        await quota_core.exchanges.bind("small", "fan", "", q, 0)
    await quota_core.exchanges.bind("small", "direct", "k", "q3", 0)
    await quota_core.jobs.enqueue("small", "q", task())
    routed = await quota_core.exchanges.publish("small", "fan", fanout, "", task(), pb.EnqueueOpts())
    assert [q for q, _ in routed] == ["q1", "q2"]  # 3 stored: the namespace is full
    with pytest.raises(QuotaExceeded, match="stored_jobs") as e:
        await quota_core.exchanges.publish("small", "fan", fanout, "", task(), pb.EnqueueOpts())
    assert e.value.code == "resource_exhausted"
    with pytest.raises(QuotaExceeded, match="stored_jobs"):  # one routed copy: refused too, not in its slot
        await quota_core.exchanges.publish("small", "direct", pb.EXCHANGE_TYPE_DIRECT, "k", task(),
                                           pb.EnqueueOpts())  # fmt: skip
    assert [await stored(quota_core, "small", q) for q in ("q", "q1", "q2", "q3")] == [1, 1, 1, 0]


async def test_an_exchange_publish_counts_every_copy_against_payload_bytes(quota_core):
    for q in ("q1", "q2"):
        await quota_core.exchanges.bind("small", "fan", "", q, 0)
    with pytest.raises(QuotaExceeded, match="payload_bytes"):  # 2 x 60 > 100, each copy fits
        await quota_core.exchanges.publish("small", "fan", pb.EXCHANGE_TYPE_FANOUT, "", task(b"x" * 60),
                                           pb.EnqueueOpts())  # fmt: skip
    assert await stored(quota_core, "small", "q1") == 0 and await stored(quota_core, "small", "q2") == 0


async def test_a_schedule_tick_over_a_quota_is_skipped_recorded_and_the_next_one_runs(quota_core):
    from loam_common.sweeper import Sweeper

    sweeper = Sweeper(quota_core.store, quotas=quotas.parse("small:stored_jobs=3"))  # the deployment's
    spec = pb.ScheduleSpec(id="tick", queue="sched", task=pb.TaskSpec(name="t"), every_ns=60 * SEC)
    await quota_core.schedules.upsert("small", spec)
    first = await quota_core.jobs.enqueue_bulk("small", "q", [(task(), None)] * 3)  # the namespace is full
    quota_core.clock.advance(60 * SEC)
    report = await sweeper.run_once()  # does not raise: the tick is skipped
    assert report.ticks == 0
    rec = await quota_core.schedules.get("small", "tick")
    assert "stored_jobs" in rec.last_error and rec.count == 0 and rec.next_ns > rec.last_tick_ns > 0
    assert await stored(quota_core, "small", "sched") == 0
    await quota_core.job_admin.remove("small", "q", first[0].job_id, False)  # room for one
    quota_core.clock.advance(60 * SEC)
    assert (await sweeper.run_once()).ticks == 1
    rec = await quota_core.schedules.get("small", "tick")
    assert rec.last_error == "" and rec.count == 1 and rec.last_job_id
    assert await stored(quota_core, "small", "sched") == 1


async def test_a_namespace_quota_set_through_the_api_applies_to_schedule_ticks(quota_core):
    from loam_common.sweeper import Sweeper

    sweeper = Sweeper(quota_core.store)  # no deployment table: the namespace's own record counts
    await quota_core.quotas.set("ticked", quotas.Quota(enqueue_rate=1))
    spec = pb.ScheduleSpec(id="tick", queue="sched", task=pb.TaskSpec(name="t"), every_ns=60 * SEC)
    await quota_core.schedules.upsert("ticked", spec)
    quota_core.clock.advance(60 * SEC)
    await quota_core.jobs.enqueue("ticked", "q", task())  # this second's one enqueue
    await sweeper.run_once()
    assert "enqueue_rate" in (await quota_core.schedules.get("ticked", "tick")).last_error
    quota_core.clock.advance(60 * SEC)
    assert (await sweeper.run_once()).ticks == 1
    assert await stored(quota_core, "ticked", "sched") == 1


async def test_a_dead_letter_copy_is_never_refused_but_counts(quota_core):
    from loam_common.jobs.complete import Fail

    await quota_core.queues.create("small", "q", pb.QueueConfig(dead_letter_queue="dlq"))
    await quota_core.jobs.enqueue_bulk("small", "q", [(task(), None)] * 3)  # the namespace is full
    (job,) = await quota_core.jobs.lease("small", ["q"], "w", 1)
    failure = Fail(pb.JobError(code="error", message="boom"), dead_letter=True)
    await quota_core.jobs.complete("small", "q", job.id, job.epoch, failure)
    assert await stored(quota_core, "small", "dlq") == 1  # the failure is kept, over the quota
    assert (await quota_core.quotas.get("small")).usage.stored_jobs == 4
    with pytest.raises(QuotaExceeded, match="stored_jobs"):
        await quota_core.jobs.enqueue("small", "q", task())


async def test_an_immediate_first_tick_over_a_quota_is_skipped_not_the_upsert(quota_core):
    await quota_core.jobs.enqueue_bulk("small", "q", [(task(), None)] * 3)  # the namespace is full
    spec = pb.ScheduleSpec(id="now", queue="sched", task=pb.TaskSpec(name="t"), every_ns=60 * SEC,
                           immediately=True)  # fmt: skip
    up = await quota_core.schedules.upsert("small", spec)
    assert up.fired.ticks == 0 and "stored_jobs" in up.schedule.last_error and up.schedule.next_ns
    assert await stored(quota_core, "small", "sched") == 0


def test_the_sweeper_takes_the_deployment_quotas_and_refuses_a_bad_spec(capsys):
    from loam_sweeper.__main__ import parse_args

    args = parse_args(["--store", "sqlite:///x.db", "--quotas", "small:stored_jobs=3"])
    assert args.quotas.of("small") == quotas.Quota(stored_jobs=3)
    with pytest.raises(SystemExit):
        parse_args(["--store", "sqlite:///x.db", "--quotas", "small:stored=3"])
    assert "--quotas" in capsys.readouterr().err


@pytest.mark.parametrize("name", quotas.NAMES)
def test_any_one_limit_set_makes_the_quotas_count(name):
    """An enqueue checks quotas only when one is set (Quota's truth): each limit alone is."""
    assert not quotas.Quota()
    assert quotas.Quota(**{name: 1})
