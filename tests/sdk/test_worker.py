"""The native Worker against a real server: exactly-once processing with concurrency,
batched calls, retries then failure, heartbeats past the lease, graceful shutdown."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

from loam import Client, Outcome, Retry, UnrecoverableError, Worker


class Counting:
    """Counts the client's calls by method, to check the hot path batches."""

    def __init__(self, client: Client) -> None:
        self.calls: Counter[str] = Counter()
        real = client._call

        async def call(method, request, **kw):
            self.calls[method.__name__] += 1
            return await real(method, request, **kw)

        client._call = call  # type: ignore[method-assign]


async def test_processes_each_job_once_with_concurrency(client: Client) -> None:
    n = 300
    await client.enqueue_bulk("many", [("t", i) for i in range(n)])
    counting = Counting(client)
    seen: Counter[int] = Counter()
    running = 0
    peak = 0

    async def handler(job):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.002)
        seen[job.payload] += 1
        running -= 1
        return job.payload * 2

    worker = Worker(client, "many", handler, concurrency=16)
    await asyncio.wait_for(worker.run_until_idle(0.5), 60)
    assert sorted(seen) == list(range(n)) and set(seen.values()) == {1}
    assert 1 < peak <= 16
    assert worker.processed == n
    counts = await client.queue_counts("many")
    assert counts["completed"] == n and counts["active"] == 0
    # batches, not a round trip per job
    assert counting.calls["lease"] < n / 5, counting.calls
    assert counting.calls["complete_batch"] < n / 5, counting.calls
    assert counting.calls["complete"] == 0
    (job,) = [j async for j in client.iter_jobs("many", states="completed", limit=1)]
    assert job.result == job.payload * 2


async def test_sync_handlers_run_in_threads(client: Client) -> None:
    await client.enqueue_bulk("sync", [("t", i) for i in range(40)])
    threads: set[str] = set()
    lock = threading.Lock()

    def handler(job):
        with lock:
            threads.add(threading.current_thread().name)
        time.sleep(0.01)
        job.progress(100)
        return "ok"

    worker = Worker(client, "sync", handler, concurrency=4)
    await asyncio.wait_for(worker.run_until_idle(0.5), 60)
    assert worker.processed == 40
    assert threads and threading.main_thread().name not in threads
    (job,) = [j async for j in client.iter_jobs("sync", limit=1)]
    assert job.progress == 100 and job.result == "ok"


async def test_retries_per_attempts_then_fails(client: Client) -> None:
    await client.enqueue("flaky", "boom", 1, attempts=3)
    await client.enqueue("flaky", "fatal", 2, attempts=3)
    runs: Counter[str] = Counter()

    async def handler(job):
        runs[job.name] += 1
        job.log(f"attempt {job.attempt}")
        if job.name == "boom":
            raise ValueError(f"boom {job.attempt}")
        raise UnrecoverableError("cannot ever work")

    worker = Worker(client, "flaky", handler, concurrency=2)
    await asyncio.wait_for(worker.run_until_idle(0.7), 60)
    assert runs == {"boom": 3, "fatal": 1}
    jobs = {j.name: j async for j in client.iter_jobs("flaky")}
    assert jobs["boom"].state == "failed" and jobs["boom"].attempt == 3
    assert [e.message for e in jobs["boom"].errors] == [
        "ValueError: boom 1",
        "ValueError: boom 2",
        "ValueError: boom 3",
    ]
    assert "Traceback" in jobs["boom"].errors[0].stacktrace
    assert jobs["fatal"].state == "failed"
    assert [e.message for e in jobs["fatal"].errors] == ["UnrecoverableError: cannot ever work"]
    logs = await client.job_logs("flaky", jobs["boom"].id)
    assert [line.line for line in logs] == ["attempt 1", "attempt 2", "attempt 3"]


async def test_retry_after_and_returned_outcomes(client: Client) -> None:
    await client.enqueue("steer", "again", 1, attempts=2)
    await client.enqueue("steer", "later", 2)
    runs: Counter[str] = Counter()

    async def handler(job):
        runs[job.name] += 1
        if job.name == "again" and job.attempt == 1:
            raise Retry(after=0.2)
        if job.name == "later":
            return Outcome.delay(time.time() + 3600)
        return "done"

    worker = Worker(client, "steer", handler)
    await asyncio.wait_for(worker.run_until_idle(1.5), 60)
    assert runs == {"again": 2, "later": 1}
    counts = await client.queue_counts("steer")
    assert counts["completed"] == 1 and counts["delayed"] == 1


async def test_heartbeat_keeps_a_long_job(client: Client) -> None:
    """Visibility 1 s, a 4 s handler: the worker extends at a third of the lease, so
    the sweeper never reclaims the job and it runs once."""
    await client.enqueue("long", "t", 1, visibility=1)
    runs = 0

    async def handler(job):
        nonlocal runs
        runs += 1
        await asyncio.sleep(4)

    worker = Worker(client, "long", handler, concurrency=2, wait=1)
    await asyncio.wait_for(worker.run_until_idle(1.0), 60)
    assert runs == 1
    (job,) = [j async for j in client.iter_jobs("long")]
    assert job.state == "completed" and job.stalled == 0 and job.epoch == 1


async def test_without_heartbeat_the_job_would_be_reclaimed(client: Client) -> None:
    """The control for the test above: a lease left alone for 3 s is taken back."""
    await client.enqueue("idle", "t", 1, visibility=1)
    (job,) = await client.lease("idle")
    await asyncio.sleep(3)
    info = await client.get_job("idle", job.id)
    assert info.stalled == 1 and info.state in ("waiting", "active")


async def test_graceful_shutdown_releases_prefetched_jobs(client: Client) -> None:
    await client.enqueue_bulk("grace", [("t", i) for i in range(6)])
    started = asyncio.Event()
    finish = asyncio.Event()
    ran: list[int] = []

    async def handler(job):
        ran.append(job.payload)
        started.set()
        await finish.wait()
        return "finished"

    worker = Worker(client, "grace", handler, concurrency=1, prefetch=5, wait=1)
    task = worker.start()
    await asyncio.wait_for(started.wait(), 30)
    while len(worker._buffer) < 5:  # the prefetched jobs are in hand
        await asyncio.sleep(0.01)
    worker.stop()
    await asyncio.sleep(0.3)
    assert not task.done()  # waits for the running job
    finish.set()
    await asyncio.wait_for(task, 30)
    assert ran == [0]
    assert worker.released == 5
    counts = await client.queue_counts("grace")
    assert counts["completed"] == 1 and counts["waiting"] == 5 and counts["active"] == 0
    back = await client.lease("grace", max=10)  # at once: no waiting out a lease
    assert sorted(j.payload for j in back) == [1, 2, 3, 4, 5]
    assert all(j.attempt == 1 for j in back)  # releasing spent no attempt


async def test_an_idle_worker_stops_without_waiting_out_its_long_poll(client: Client) -> None:
    worker = Worker(client, "idle-stop", lambda job: None, wait=30)
    task = worker.start()
    while not client_waits(worker):
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.3)  # the Lease is parked on the server
    worker.stop()
    await asyncio.wait_for(task, 10)  # its 30 s poll was ended, not run out
    assert await client.lease("idle-stop", wait=0) == []


def client_waits(worker: Worker) -> bool:
    return any(t.get_name() == "loam-lease" and not t.done() for t in asyncio.all_tasks())


async def test_handlers_by_name(client: Client) -> None:
    await client.enqueue_bulk("named", [("add", [1, 2]), ("mul", [3, 4]), ("other", 0)])

    worker = Worker(
        client, "named", {"add": lambda j: sum(j.payload), "mul": lambda j: j.payload[0] * j.payload[1]}
    )
    await asyncio.wait_for(worker.run_until_idle(0.5), 60)
    results = {j.name: (j.state, j.result) async for j in client.iter_jobs("named")}
    assert results == {"add": ("completed", 3), "mul": ("completed", 12), "other": ("waiting", None)}


async def test_an_idle_workers_job_starts_before_its_next_poll_is_sent(client: Client) -> None:
    """A job reaching an idle worker's long poll runs at once: its handler starts before
    the worker builds and sends its next Lease, not after (that order is part of the
    latency from enqueue to start when a worker waits)."""
    order: list[str] = []
    real = client._call

    async def call(method, request, **kw):
        if method.__name__ != "lease":
            return await real(method, request, **kw)
        order.append("poll sent")
        response = await real(method, request, **kw)
        if response.leases:
            order.append("jobs received")
        return response

    client._call = call  # type: ignore[method-assign]
    started = asyncio.Event()

    async def handler(job):
        order.append("handler started")
        started.set()

    worker = Worker(client, "starts-first", handler, concurrency=4)
    running = worker.start()
    while not client_waits(worker):
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # the poll is parked on the server
    await client.enqueue("starts-first", "t")
    await asyncio.wait_for(started.wait(), 10)
    await asyncio.sleep(0.1)
    worker.stop()
    await asyncio.wait_for(running, 10)
    received = order.index("jobs received")
    assert order[received + 1 : received + 3] == ["handler started", "poll sent"], order
