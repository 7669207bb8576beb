"""Quotas per namespace (loam_common.jobs.quotas): each one refused with
resource_exhausted naming the quota, nothing partial stored, other namespaces untouched;
on the SQLite store through the core, and through Connect and REST."""

from __future__ import annotations

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
