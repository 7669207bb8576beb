"""A Watch stream across a `kill -9` of the server: `loam dev` is killed while a
producer is enqueueing and a Server-Sent-Events reader is following the queue; the
server restarts on the same data; the reader resumes with its Last-Event-ID and the
producer retries what failed. The reader ends up with every event of every
acknowledged job exactly once, in sequence order, with no gap."""

from __future__ import annotations

import asyncio
import json
import signal
from collections import Counter

import httpx
from devserver import start_dev_server

from loam import Client
from loam.errors import JobsError

NS = "watch-kill"
QUEUE = "wk"


async def _follow(url: str, last_id: str | None, seen: list[dict], want: int,
                  ready: asyncio.Event | None = None) -> str | None:  # fmt: skip
    """Read the queue's events into `seen` until `want` arrived or the server went away;
    returns the last id read (an event's, or the cursor of the stream's `ready`)."""
    headers = {"x-loam-namespace": NS, **({"last-event-id": last_id} if last_id else {})}
    try:
        async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(30, read=60)) as http:
            async with http.stream("GET", f"/v1/queues/{QUEUE}/events", headers=headers) as r:
                assert r.status_code == 200, await r.aread()
                cur: dict[str, str] = {}
                async for line in r.aiter_lines():
                    if line:
                        field, _, value = line.partition(": ")
                        cur[field] = value
                        continue
                    if cur.get("event", "").startswith("io.loams.dev.jobs."):
                        seen.append(json.loads(cur["data"]))
                        if len(seen) >= want:
                            return cur["id"]
                    elif cur.get("event") == "ready" and ready is not None:
                        ready.set()  # the snapshot is taken: every later change will follow
                    last_id = cur.get("id", last_id)
                    cur = {}
    except (httpx.TransportError, httpx.RemoteProtocolError):
        pass  # killed under us: resume from the last id
    return last_id


async def _produce(holder: dict, done: list[str], stop: asyncio.Event) -> None:
    """Enqueue job after job, each with its own job key, until `stop`; a call that fails
    (the server is down) is made again with the same key."""
    i = 0
    while not stop.is_set():
        try:
            async with Client(holder["url"], namespace=NS, retries=0, timeout=5) as c:
                await c.enqueue(QUEUE, "t", {"i": i}, job_key=f"job-{i}")
            done.append(f"job-{i}")
            i += 1
            await asyncio.sleep(0.02)
        except (JobsError, OSError):
            await asyncio.sleep(0.1)


async def test_a_resumed_watch_misses_nothing_and_repeats_nothing_across_kill_9(tmp_path):
    server = start_dev_server(tmp_path)
    holder = {"url": server.url}
    seen: list[dict] = []
    done: list[str] = []
    try:
        ready, stop = asyncio.Event(), asyncio.Event()
        follower = asyncio.create_task(_follow(server.url, None, seen, 20, ready))
        await asyncio.wait_for(ready.wait(), 30)
        producer = asyncio.create_task(_produce(holder, done, stop))
        last_id = await asyncio.wait_for(follower, 60)
        server.proc.send_signal(signal.SIGKILL)  # mid-stream, and the producer is still going
        server.proc.wait()
        at_kill = len(done)
        server = start_dev_server(tmp_path)
        holder["url"] = server.url
        async with asyncio.timeout(60):
            while len(done) < at_kill + 10:  # production carries on after the restart
                await asyncio.sleep(0.05)
        stop.set()
        await asyncio.wait_for(producer, 30)
        while len(seen) < 2 * len(done):  # added + waiting per job
            last_id = await asyncio.wait_for(_follow(server.url, last_id, seen, 2 * len(done)), 60)
    finally:
        server.stop()

    seqs = [int(ce["id"].rsplit("/", 1)[1]) for ce in seen]
    assert seqs == list(range(1, 2 * len(done) + 1))  # in order, once each, no gap
    kinds = Counter(ce["type"].split(".")[-2] for ce in seen)
    assert kinds == {"added": len(done), "waiting": len(done)}
