"""The events over HTTP, against `loam dev` (the dev_server fixture): Watch as
Server-Sent Events with CloudEvents, resumed with Last-Event-ID; Watch over Connect
through the gateway; `/metrics`; the Parquet export; the admin trim."""

from __future__ import annotations

import asyncio
import json

import httpx
import pyarrow as pa

from loam_common import cloudevents, event_export, metrics
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.gen.loam.jobs.v1.jobs_connect import JobsServiceClient

NS = "events-e2e"
H = {"x-loam-namespace": NS}


async def _enqueue(http: httpx.AsyncClient, queue: str, n: int) -> list[str]:
    out = []
    for i in range(n):
        r = await http.post(f"/v1/queues/{queue}/jobs", json={"name": "t", "data": {"i": i}}, headers=H)
        assert r.status_code == 200, r.text
        out.append(r.json()["job"])
    return out


async def _sse(http: httpx.AsyncClient, path: str, headers: dict | None = None, **params) -> list[dict]:
    """Read an SSE stream to its end (the server stops after `limit` events)."""
    messages, cur = [], {}
    async with (
        asyncio.timeout(20),
        http.stream("GET", path, params=params, headers={**H, **(headers or {})}) as r,
    ):
        assert r.status_code == 200, await r.aread()
        assert r.headers["content-type"].startswith("text/event-stream")
        async for line in r.aiter_lines():
            if not line:
                if cur:
                    messages.append(cur)
                cur = {}
            elif line.startswith(":"):
                cur["comment"] = line[1:].strip()
            else:
                field, _, value = line.partition(": ")
                cur[field] = cur.get(field, "") + value if field == "data" and field in cur else value
    return messages


async def test_sse_queue_events_are_cloudevents_and_resume_with_last_event_id(dev_server):
    async with httpx.AsyncClient(base_url=dev_server.url, timeout=20) as http:
        await _enqueue(http, "sse", 1)

        async def later() -> None:
            await asyncio.sleep(0.3)
            await _enqueue(http, "sse", 2)

        bg = asyncio.create_task(later())
        first = await _sse(http, "/v1/queues/sse/events", limit=3)
        await bg
        assert first[0]["event"] == "snapshot" and json.loads(first[0]["data"])["counts"]["waiting"] == 1
        assert first[1]["event"] == "ready" and first[1]["id"]
        evs = [m for m in first if m.get("event", "").startswith("io.loams.dev.jobs.")]
        assert [m["event"] for m in evs] == ["io.loams.dev.jobs.added.v1", "io.loams.dev.jobs.waiting.v1",
                                             "io.loams.dev.jobs.added.v1"]  # fmt: skip
        ces = [json.loads(m["data"]) for m in evs]
        for m, ce in zip(evs, ces, strict=True):
            attrs, ev = cloudevents.from_structured(ce)
            assert attrs == cloudevents.attributes(NS, ev)
            assert ce["type"] == m["event"] and ce["source"] == f"/loam/jobs/{NS}/sse"
            assert ce["id"] == f"{NS}/sse/0/{ev.seq}" and ce["tenantid"].endswith(f"/{NS}")
        # Resume after the second event: exactly the third, then what follows.
        rest = await _sse(http, "/v1/queues/sse/events", headers={"last-event-id": evs[1]["id"]}, limit=2)
        assert rest[0]["event"] == "ready" and "snapshot" not in [m.get("event") for m in rest]
        resumed = [json.loads(m["data"])["id"] for m in rest if "data" in m and m.get("event") != "ready"]
        assert resumed == [ces[2]["id"], f"{NS}/sse/0/{int(ces[2]['id'].rsplit('/', 1)[1]) + 1}"]
        # A job's own stream, with the event as JSON data.
        job = (await _enqueue(http, "sse", 1))[0]
        reader = asyncio.create_task(_sse(http, f"/v1/queues/sse/jobs/{job}/events", data="json", limit=1))
        await asyncio.sleep(0.3)
        r = await http.post("/loam.jobs.v1.JobsService/Lease", json={"queues": ["sse"], "worker": "w", "max": 10},
                            headers=H)  # fmt: skip
        assert r.status_code == 200
        mine = await asyncio.wait_for(reader, 15)
        assert json.loads(mine[0]["data"])["job"]["id"] == job
        ce = json.loads(mine[-1]["data"])
        assert (
            ce["datacontenttype"] == "application/json"
            and ce["data"]["event"] == "active"
            and ce["subject"] == job
        )
        # Refusals are HTTP errors, not streams.
        r = await http.get("/v1/queues/sse/jobs/nope/events", headers=H)
        assert r.status_code == 404 and r.json()["code"] == "not_found"
        r = await http.get("/v1/queues/sse/events", params={"cursor": "AAAA"}, headers=H)
        assert r.status_code == 400 and r.json()["code"] == "invalid_argument"


async def test_connect_watch_through_the_gateway(dev_server):
    client = JobsServiceClient(dev_server.url)
    try:
        async with httpx.AsyncClient(base_url=dev_server.url) as http:
            await _enqueue(http, "cw", 2)
            items = []

            async def read() -> None:
                async for item in client.watch(J.WatchRequest(selector=J.Selector(queue="cw")), headers=H):
                    items.append(item)
                    if len([i for i in items if i.HasField("event")]) == 2:
                        return

            reader = asyncio.create_task(read())
            await asyncio.sleep(0.3)
            await _enqueue(http, "cw", 1)
            await asyncio.wait_for(reader, 10)
        assert items[0].counts.waiting == 2 and items[1].ready
        evs = [i for i in items if i.HasField("event")]
        assert [i.event.event for i in evs] == ["added", "waiting"]
        assert dict(evs[0].cloudevent)["type"] == "io.loams.dev.jobs.added.v1"
    finally:
        await client.close()


async def test_metrics_export_and_trim(dev_server):
    async with httpx.AsyncClient(base_url=dev_server.url, timeout=20) as http:
        await _enqueue(http, "mx", 4)
        r = await http.post(
            "/loam.jobs.v1.JobsService/Lease", json={"queues": ["mx"], "worker": "w", "max": 2}, headers=H
        )
        for lease in r.json()["leases"]:
            done = await http.post("/loam.jobs.v1.JobsService/Complete",
                                   json={"token": lease["token"], "outcome": {"ok": {}}}, headers=H)  # fmt: skip
            assert done.status_code == 200
        r = await http.get("/metrics")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        parsed = metrics.parse(r.text)
        lab = (("ns", NS), ("queue", "mx"))
        assert parsed[("loam_jobs_enqueued_total", lab)] == 4
        assert parsed[("loam_jobs_leased_total", lab)] == 2
        assert parsed[("loam_jobs_completed_total", (*lab, ("outcome", "ok")))] == 2
        assert parsed[("loam_jobs_waiting", (*lab, ("band", "fifo")))] == 2
        assert parsed[("loam_jobs_run_seconds_count", (*lab, ("task", "t")))] == 2
        # Export: the rows are the events (4 added + 4 waiting + 2 active + 2 completed).
        r = await http.get("/v1/queues/mx/events:export", headers=H)
        assert r.status_code == 200 and r.headers["content-type"] == "application/vnd.apache.parquet"
        table = event_export.read_table(pa.BufferReader(r.content))
        rows = table.drop_columns(["time"]).to_pylist()
        assert sorted(row["data"]["event"] for row in rows) == sorted(
            ["added"] * 4 + ["waiting"] * 4 + ["active"] * 2 + ["completed"] * 2
        )
        assert all(
            event_export.event_from_data(row["data"]).SerializeToString(deterministic=True) == row["data_raw"]
            for row in rows
        )
        r = await http.get(
            "/v1/queues/mx/events:export", params={"format": "arrow", "since_ns": 2**62}, headers=H
        )
        assert (
            r.status_code == 200
            and event_export.read_table(pa.BufferReader(r.content), "arrow").num_rows == 0
        )
        # Trim everything before now: the log is emptied (the outbox rows the relay has
        # not moved yet stay until it does).
        await asyncio.sleep(0.5)  # the in-process relay moves the outbox
        r = await http.post("/v1/queues/mx/events:trim", json={"before_ns": 2**62}, headers=H)
        assert r.status_code == 200 and r.json()["affected"] == 12
        r = await http.get("/v1/queues/mx/events:export", headers=H)
        assert event_export.read_table(pa.BufferReader(r.content)).num_rows == 0
