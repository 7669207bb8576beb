"""Subjects through the SDK, the CLI and REST, against a real `loam dev` server: a
replacement says which job it kept, a write batch is all or none, a subject batch is
leased and completed in one call each, a PermanentError is not retried, a placed job
goes only to its worker."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from loam import Client, Outcome, PermanentError, Worker
from loam.errors import InvalidState, JobsError
from loam_common.api.headers import NAMESPACE_HEADER
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as jpb

LOAM = str(Path(sys.executable).with_name("loam"))


async def test_a_replacement_names_the_job_kept_and_the_one_dropped(client: Client) -> None:
    first = await client.enqueue("files", "evict", {"path": "/a"}, subject="a", replace=True, delay=60)
    later = await client.enqueue("files", "evict", {"path": "/a"}, subject="a", replace=True, delay=120)
    assert later.created and later.dropped == first.id
    sooner = await client.enqueue(
        "files", "evict", {"path": "/a"}, subject="a", replace="keep_later", delay=5
    )
    assert (sooner.id, sooner.created) == (later.id, False) and sooner.dropped
    assert (await client.queue_counts("files"))["delayed"] == 1


async def test_a_write_batch_is_all_or_none(client: Client) -> None:
    cleanup = await client.enqueue("uploads", "cleanup", delay=300)
    out = await client.write_batch(
        [
            {"enqueue": {"queue": "uploads", "name": "commit", "payload": {"upload": 1}, "subject": "u1"}},
            {"cancel": {"queue": "uploads", "job": cleanup.id, "reason": "claimed"}},
            {"result_set": {"key": "upload:1", "value": "done"}},
        ]
    )
    assert out[0].created and out[1:] == [cleanup.id, "upload:1"]
    assert (await client.get_job("uploads", cleanup.id)).state == "canceled"
    assert await client.result_get("upload:1") == "done"
    (running,) = await client.lease("uploads", max=1)
    with pytest.raises(InvalidState, match=r"items\[1\]"):
        await client.write_batch(
            [
                {"enqueue": {"queue": "uploads", "name": "commit", "payload": 2}},
                {"cancel": {"queue": "uploads", "job": running.id}},
            ]
        )
    assert (await client.queue_counts("uploads"))["waiting"] == 0  # the batch's enqueue was not kept


async def test_a_subject_batch_is_leased_and_completed_in_one_call_each(client: Client) -> None:
    ids = [(await client.enqueue("spaces", "register", i, subject="space-1")).id for i in range(4)]
    await client.enqueue("spaces", "drop", subject="space-1")
    run = await client.lease("spaces", max=10, subject_batch=10)
    assert [j.id for j in run] == ids
    done = await client.complete_batch([(j.token, Outcome.ok()) for j in run])
    assert [d.state for d in done] == ["completed"] * 4
    (nxt,) = await client.lease("spaces", max=10, subject_batch=10)
    assert nxt.name == "drop"


async def test_a_permanent_error_is_not_retried_and_a_placed_job_waits_for_its_worker(client: Client) -> None:
    await client.enqueue("perm", "abort", subject="s", attempts=5, backoff=1)
    await client.enqueue("perm", "after", subject="s", placement="node-b")
    seen: list[str] = []

    def handler(job):
        seen.append(job.name)
        if job.name == "abort":
            raise PermanentError("the blob was accepted: an abort cannot succeed")

    worker = Worker(client, "perm", handler, worker="node-a", wait=0.2)
    task = asyncio.create_task(worker.run())
    try:
        for _ in range(200):
            if (await client.queue_counts("perm"))["failed"] == 1:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # node-a must not take the placed job in this time
    finally:
        worker.stop()
        await task
    assert seen == ["abort"]
    (failed,) = [j async for j in client.iter_jobs("perm", states=["failed"])]
    assert failed.raw.errors[-1].permanent and failed.raw.attempt == 1
    (placed,) = await client.lease("perm", worker="node-b")
    assert placed.name == "after"


async def test_rest_enqueue_replacement_and_write_batch(url: str, ns: str) -> None:
    async with httpx.AsyncClient(base_url=url, headers={NAMESPACE_HEADER: ns}) as http:
        body = {"name": "evict", "subject": "f", "replace": "keep_later", "delay_ns": 60 * 10**9}
        first = (await http.post("/v1/queues/files/jobs", json=body)).json()
        r = await http.post("/v1/queues/files/jobs", json={**body, "delay_ns": 120 * 10**9})
        assert r.status_code == 200 and r.json()["dropped"] == first["job"]
        r = await http.post("/v1/writes", json={"items": [
            {"enqueue": {"queue": "files", "name": "read", "subject": "g"}},
            {"cancel": {"queue": "files", "job": r.json()["job"]}},
            {"result_set": {"key": "k", "data": {"ok": True}}},
        ]})  # fmt: skip
        assert r.status_code == 200, r.text
        out = r.json()["outcomes"]
        assert out[0]["enqueued"]["created"] and out[2]["result_stored"] == "k"
        r = await http.post("/v1/writes", json={"items": [{"cancel": {"queue": "files", "job": "nope"}}]})
        assert r.status_code == 404 and "items[0]" in r.json()["message"]
        r = await http.post("/v1/writes", json={"items": [{}]})
        assert r.status_code == 400
        r = await http.get("/v1/queues/files")
        activity = r.json()["activity"]
        assert activity["delayed"] == 0 and activity["ready"] == 1 and activity["lease_takeovers_total"] == 0


def test_cli_write_and_replace(url: str, ns: str) -> None:
    def loam(*args: str, stdin: str | None = None):
        p = subprocess.run([LOAM, *args, "--json", "--url", url, "--namespace", ns], input=stdin,
                           capture_output=True, text=True, timeout=60)  # fmt: skip
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    first = loam("jobs", "add", "files", "evict", "--subject", "a", "--replace", "--delay", "60")
    second = loam("jobs", "add", "files", "evict", "--subject", "a", "--replace", "--delay", "90")
    assert second["dropped"] == first["id"]
    items = [
        {"enqueue": {"queue": "files", "name": "read"}},
        {"cancel": {"queue": "files", "job": second["id"]}},
    ]
    out = loam("jobs", "write", "-", stdin=json.dumps(items))
    assert out[0]["created"] and out[1] == second["id"]


KILLED_WORKER = """
import asyncio, json, sys
from loam import Client, Outcome

async def main():
    async with Client(sys.argv[1], namespace=sys.argv[2]) as c:
        run = await c.lease("batch", max=6, subject_batch=6, worker="doomed")
        for job in run[:2]:  # two of the run done, then the process dies mid-batch
            await c.complete(job.token, Outcome.ok(job.payload))
        print(json.dumps([[j.id, j.epoch] for j in run]), flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_a_worker_killed_mid_subject_batch_loses_no_job_and_keeps_the_order(
    client: Client, url, ns
) -> None:
    """A real worker process leases a run of one subject, completes two, and is killed:
    the rest come back once its lease lapses, each job completes once, in order."""
    import signal

    ids = [
        (await client.enqueue("batch", "register", i, subject="space-1", visibility=1)).id for i in range(8)
    ]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", KILLED_WORKER, url, ns, stdout=asyncio.subprocess.PIPE
    )
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        leased = json.loads(line)
        assert [i for i, _e in leased] == ids[:6]
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    order = ids[:2]
    for _ in range(600):  # the sweeper takes the run back once its 1 s lease lapses
        run = await client.lease("batch", max=8, subject_batch=8, wait=1)
        if run:
            order += [j.id for j in run]
            await client.complete_batch([(j.token, Outcome.ok(j.payload)) for j in run])
        if len(order) >= 8:
            break
    assert order == ids  # each once, in enqueue order
    jobs = [await client.get_job("batch", i) for i in ids]
    assert [j.state for j in jobs] == ["completed"] * 8
    assert [j.raw.finished_ns for j in jobs] == sorted(j.raw.finished_ns for j in jobs)
    stale = [(jpb.LeaseToken(queue="batch", job=i, epoch=e), Outcome.ok()) for i, e in leased[2:]]
    refused = await client.complete_batch(stale)  # the killed worker's leases are fenced
    assert all(isinstance(r, JobsError) and "stale" in str(r) for r in refused), refused


async def test_a_worker_leasing_subject_batches_runs_each_subject_in_order(client: Client) -> None:
    for i in range(6):
        for subject in ("a", "b"):
            await client.enqueue("wbatch", "step", {"s": subject, "i": i}, subject=subject)
    running: dict[str, int] = {"a": 0, "b": 0}
    order: dict[str, list[int]] = {"a": [], "b": []}
    overlap = False

    async def handler(job):
        nonlocal overlap
        s = job.payload["s"]
        running[s] += 1
        overlap = overlap or running[s] > 1
        order[s].append(job.payload["i"])
        await asyncio.sleep(0.01)
        running[s] -= 1

    worker = Worker(client, "wbatch", handler, concurrency=8, subject_batch=6, wait=0.2)
    await worker.run_until_idle(idle=1.0)
    assert not overlap
    assert order == {"a": list(range(6)), "b": list(range(6))}


async def test_a_worker_stopped_mid_subject_batch_hands_back_the_jobs_behind_in_order(client: Client) -> None:
    for i in range(6):
        await client.enqueue("wstop", "step", {"i": i}, subject="a")
    ran: list[int] = []
    first_started = asyncio.Event()
    let_go = asyncio.Event()

    async def slow_first(job):
        ran.append(job.payload["i"])
        first_started.set()
        await let_go.wait()

    worker = Worker(client, "wstop", slow_first, concurrency=4, subject_batch=6, wait=0.2)
    task = worker.start()
    await asyncio.wait_for(first_started.wait(), 10)
    assert worker._in_hand() == 6  # one running, five behind it, none started beside it
    worker.stop()
    let_go.set()
    await asyncio.wait_for(task, 10)
    assert ran == [0] and worker.released == 5

    async def record(job):
        ran.append(job.payload["i"])

    await Worker(client, "wstop", record, concurrency=4, subject_batch=6, wait=0.2).run_until_idle(idle=1.0)
    assert ran == list(range(6))
    assert (await client.queue_counts("wstop"))["completed"] == 6
