"""The async client: enqueue, lease, complete; payloads; idempotent retries; typed
errors; admin, query and the result store."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from loam import Client, Outcome, errors
from loam.client import uuid7


async def test_enqueue_lease_complete_roundtrip(client: Client) -> None:
    e = await client.enqueue("emails", "send", {"to": "a@example.com"}, headers={"trace": "t1"})
    assert e.created and e.state == "waiting"
    (job,) = await client.lease("emails", max=10, wait=1)
    assert (job.id, job.name, job.payload, job.attempt) == (e.id, "send", {"to": "a@example.com"}, 1)
    # The server adds a W3C trace context to every job that has none (spec §6.11).
    assert {k: v for k, v in job.headers.items() if k != "traceparent"} == {"trace": "t1"}
    assert job.headers["traceparent"].startswith("00-")
    done = await client.complete(job, Outcome.ok({"sent": True}))
    assert done.state == "completed"
    info = await client.get_job("emails", e.id)
    assert info.state == "completed" and info.result == {"sent": True}


async def test_payload_kinds_survive_the_trip(client: Client) -> None:
    values = [{"a": [1, 2]}, "plain text", b"\x00\xffraw", 42, None]
    for v in values:
        await client.enqueue("kinds", "t", v)
    jobs = await client.lease("kinds", max=10)
    assert [j.payload for j in jobs] == values


async def test_priorities_then_fifo_band_first(client: Client) -> None:
    await client.enqueue("p", "t", "late", priority=5)
    await client.enqueue("p", "t", "early", priority=1)
    await client.enqueue("p", "t", "fifo")
    jobs = await client.lease("p", max=3)
    assert [j.payload for j in jobs] == ["fifo", "early", "late"]


async def test_delay_and_at(client: Client) -> None:
    a = await client.enqueue("d", "t", 1, delay=60)
    b = await client.enqueue("d", "t", 2, at=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    c = await client.enqueue("d", "t", 3, delay=dt.timedelta(seconds=0.3))
    assert (a.state, b.state, c.state) == ("delayed", "delayed", "delayed")
    jobs = await client.lease("d", max=5, wait=5)  # the short one falls due and wakes the poll
    assert [j.payload for j in jobs] == [3]


async def test_every_enqueue_has_an_idempotency_key(client: Client) -> None:
    e = await client.enqueue("k", "t", 1)
    info = await client.get_job("k", e.id)
    assert len(info.raw.opts.idempotency.key) == 36  # a UUIDv7 made by the client
    assert uuid7()[14] == "7"


async def test_retry_after_unavailable_makes_one_job(client: Client, monkeypatch) -> None:
    """The first attempt reaches the server, but its answer is lost: the client retries
    with the same idempotency key and gets the first call's job back."""
    real = client._call
    failed = []

    async def flaky(method, request, **kw):
        result = await real(method, request, **kw)
        if not failed:
            failed.append(request.opts.idempotency.key)
            raise errors.Unavailable("connection reset after the commit")
        assert request.opts.idempotency.key == failed[0]  # reused, not remade
        return result

    monkeypatch.setattr(client, "_call", flaky)
    e = await client.enqueue("idem", "t", {"n": 1})
    monkeypatch.undo()
    assert failed
    counts = await client.queue_counts("idem")
    assert counts["waiting"] == 1
    (job,) = await client.lease("idem", max=5)
    assert job.id == e.id


async def test_same_idempotency_key_same_job_and_conflict(client: Client) -> None:
    a = await client.enqueue("idem2", "t", 1, idempotency_key="order-7")
    b = await client.enqueue("idem2", "t", 1, idempotency_key="order-7")
    assert a.id == b.id
    with pytest.raises(errors.IdempotencyConflict):
        await client.enqueue("idem2", "t", 2, idempotency_key="order-7")
    assert (await client.queue_counts("idem2"))["waiting"] == 1


async def test_no_idempotency_when_turned_off(url: str, ns: str) -> None:
    async with Client(url, namespace=ns, idempotent=False) as c:
        e = await c.enqueue("noidem", "t", 1)
        assert not (await c.get_job("noidem", e.id)).raw.opts.HasField("idempotency")


async def test_bulk_with_a_refused_key(client: Client) -> None:
    await client.enqueue("bulk", "t", 0, job_key="k1")
    results = await client.enqueue_bulk(
        "bulk", [{"name": "t", "payload": 1, "job_key": "k1"}, ("t", 2), ("t", 3, {"priority": 2})]
    )
    assert isinstance(results[0], errors.AlreadyExists)
    assert [r.state for r in results[1:]] == ["waiting", "prioritized"]


async def test_a_bulk_call_has_one_idempotency_key_and_its_retry_adds_nothing(
    client: Client, monkeypatch
) -> None:
    """The first attempt reaches the server, but its answer is lost: the retry carries the
    call's key and gets the first call's jobs back; the jobs carry no key of their own."""
    real = client._call
    sent = []

    async def flaky(method, request, **kw):
        result = await real(method, request, **kw)
        sent.append(request.idempotency.key)
        if len(sent) == 1:
            raise errors.Unavailable("connection reset after the commit")
        return result

    monkeypatch.setattr(client, "_call", flaky)
    results = await client.enqueue_bulk("idem-bulk", [("t", i) for i in range(5)])
    monkeypatch.undo()
    assert len(sent) == 2 and sent[0] == sent[1] and len(sent[0]) == 36
    assert (await client.queue_counts("idem-bulk"))["waiting"] == 5
    jobs = await client.lease("idem-bulk", max=10)
    assert sorted(j.id for j in jobs) == sorted(r.id for r in results)
    assert not (await client.get_job("idem-bulk", results[0].id)).raw.opts.HasField("idempotency")


async def test_a_bulk_call_with_a_key_of_its_callers(client: Client) -> None:
    a = await client.enqueue_bulk("idem-bulk2", [("t", 1), ("t", 2)], idempotency_key="batch-7")
    b = await client.enqueue_bulk("idem-bulk2", [("t", 1), ("t", 2)], idempotency_key="batch-7")
    assert [r.id for r in a] == [r.id for r in b]
    with pytest.raises(errors.IdempotencyConflict):
        await client.enqueue_bulk("idem-bulk2", [("t", 3)], idempotency_key="batch-7")
    with pytest.raises(errors.InvalidArgument, match="idempotency.key"):  # not taken for "none"
        await client.enqueue_bulk("idem-bulk2", [("t", 4)], idempotency_key="")
    none = await client.enqueue_bulk("idem-bulk2", [("t", 1)], idempotency_key=False)
    again = await client.enqueue_bulk("idem-bulk2", [("t", 1)], idempotency_key=False)
    assert none[0].id != again[0].id
    assert (await client.queue_counts("idem-bulk2"))["waiting"] == 4


async def test_typed_errors(client: Client) -> None:
    with pytest.raises(errors.NotFound):
        await client.get_job("nowhere", "01ARZ3NDEKTSV4RRFFQ69G5FAV")
    with pytest.raises(errors.InvalidArgument):
        await client.enqueue("bad/name", "t")
    with pytest.raises(TypeError):
        await client.enqueue("q", "t", colour="red")


async def test_fenced_completion_after_reclaim(client: Client) -> None:
    await client.enqueue("fence", "t", 1, visibility=0.5)
    (first,) = await client.lease("fence")
    await asyncio.sleep(1.5)  # the dev sweeper reclaims the expired lease
    (second,) = await client.lease("fence", wait=5)
    assert second.id == first.id and second.epoch > first.epoch
    with pytest.raises(errors.Fenced) as info:
        await client.complete(first, Outcome.ok())
    assert info.value.current_epoch == second.epoch
    assert (await client.complete(second)).state == "completed"


async def test_extend_and_report(client: Client) -> None:
    await client.enqueue("ext", "t", 1, visibility=5)
    (job,) = await client.lease("ext")
    deadline = await client.extend(job, 60)
    assert deadline > job.deadline_ns
    await client.report(job, progress={"pct": 50}, log="halfway")
    await client.complete_batch([(job, Outcome.ok())])
    info = await client.get_job("ext", job.id)
    assert info.progress == {"pct": 50}
    assert [line.line for line in await client.job_logs("ext", job.id)] == ["halfway"]


async def test_complete_batch_answers_per_item(client: Client) -> None:
    await client.enqueue_bulk("cb", [("t", i) for i in range(3)])
    jobs = await client.lease("cb", max=3)
    results = await client.complete_batch(
        [(jobs[0], Outcome.ok()), (jobs[1], Outcome.fail("no")), (jobs[0], Outcome.ok())]
    )
    assert [getattr(r, "state", None) for r in results[:2]] == ["completed", "failed"]
    assert isinstance(results[2], errors.JobsError)  # already completed
    await client.complete(jobs[2], Outcome.release())
    assert (await client.queue_counts("cb"))["waiting"] == 1


async def test_admin_pause_resume_drain_retry_remove(client: Client) -> None:
    await client.enqueue_bulk("adm", [("t", i) for i in range(4)])
    await client.pause("adm")
    assert (await client.queue_counts("adm"))["paused"] is True
    assert await client.lease("adm", max=4) == []
    await client.resume("adm")
    jobs = await client.lease("adm", max=1)
    await client.complete(jobs[0], Outcome.fail("broken"))
    retried = await client.retry_job("adm", jobs[0].id)
    assert retried.state == "waiting"
    assert await client.remove_job("adm", jobs[0].id) is True
    assert await client.drain("adm") == 3
    assert (await client.queue_counts("adm"))["waiting"] == 0


async def test_query_pages_and_iter_jobs(client: Client) -> None:
    await client.enqueue_bulk("qry", [("a" if i % 2 else "b", i) for i in range(7)])
    page = await client.query("qry", page_size=3)
    assert len(page.jobs) == 3 and page.next_page_token
    ids = [j.id async for j in client.iter_jobs("qry", page_size=2)]
    assert len(ids) == len(set(ids)) == 7
    assert [j.payload async for j in client.iter_jobs("qry", name="a")] == [5, 3, 1]
    assert len([j async for j in client.iter_jobs("qry", states="waiting", limit=4)]) == 4
    assert {q["name"] for q in await client.list_queues()} == {"qry"}


async def test_result_store(client: Client) -> None:
    await client.result_set("r1", {"v": 1}, ttl=60)
    assert await client.result_get("r1") == {"v": 1}
    assert await client.result_get("missing") is None
    assert await client.result_mget(["r1", "missing"]) == [{"v": 1}, None]
    assert await client.result_incr("chord", "a") == 1
    assert await client.result_incr("chord", "a") == 1  # a member counts once
    assert await client.result_incr("chord", "b") == 2
    await client.result_expire("r1", 60)
    await client.result_delete("r1")
    assert await client.result_get("r1") is None
    await client.result_set_many([("m1", {"v": 1}, 60), ("m2", [2], None), ("m1", "last", None)])
    assert await client.result_mget(["m1", "m2"]) == ["last", [2]]
    with pytest.raises(errors.InvalidArgument, match=r"items\[1\]\.key"):
        await client.result_set_many([("m3", 3, None), ("", 4, None)])
    assert await client.result_get("m3") is None  # all or none


async def test_unreachable_server_is_unavailable() -> None:
    async with Client("http://127.0.0.1:1", retries=1) as c:
        with pytest.raises(errors.Unavailable):
            await c.enqueue("q", "t")
