"""The REST routes `/v1/engines/flink/...` over real HTTP: the gateway app (uvicorn on a free
port) with the Flink facade mounted, driving a Flink SQL aggregation on the real cluster:
upload, deploy, status, suspend, resume (the counts continue), logs, cancel; bad requests
answered with the gateway's error shape; another namespace sees nothing."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from flinktest import COUNTS_SQL, NS, sql_counts, sql_gaps, sql_state_disagrees, wait_counts
from inproc import served

from loam_engines.flink import cli as flink_cli
from loam_gateway.app import create_app
from loam_gateway.routing import Router
from loam_queue_core.core import QueueCore
from loam_queue_core.rpc import CoreRpc


@pytest.fixture
async def gateway(engine):
    store = engine.lifecycle.recorder.store
    app = create_app(Router(local=CoreRpc(QueueCore(store))))
    app.state.flink = engine
    async with (
        served(app) as url,
        httpx.AsyncClient(
            base_url=f"{url}/v1/engines/flink", timeout=180, headers={"x-loam-namespace": NS}
        ) as http,
    ):
        yield http


async def test_a_flink_sql_job_suspended_and_resumed_over_rest_keeps_counting(gateway, flink_cluster):
    http, out = gateway, flink_cluster.taskmanager_out
    tag = "sqlrest"

    r = await http.post(
        "/artifacts", params={"filename": "counts.sql"}, content=COUNTS_SQL.format(tag=tag).encode()
    )
    assert r.status_code == 200, r.text
    artifact = r.json()["artifact"]
    assert r.json()["kind"] == "sql"

    since = out.stat().st_size
    r = await http.post("/deployments", json={"name": "counts", "artifact": artifact})
    assert r.status_code == 201, r.text
    assert (r.json()["state"], r.json()["version"], r.json()["kind"]) == ("RUNNING", 1, "sql")

    r = await http.get("/deployments/counts")
    body = r.json()
    assert (
        body["job"]["state"] == "RUNNING" and body["job"]["all_running"] and body["job"]["checkpoints"] >= 1
    )
    await wait_counts(out, tag, since, lambda ps: len({k for k, n in ps if n >= 5}) == 3)

    r = await http.post("/deployments/counts:suspend")
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "SUSPENDED" and r.json()["savepoints"][-1]["reason"] == "suspend"
    before = dict(sql_counts(out, tag, since))  # the last count of each key
    since = out.stat().st_size

    r = await http.post("/deployments/counts:resume")
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "RUNNING"
    resumed = await wait_counts(out, tag, since, lambda ps: len({k for k, _ in ps}) == 3)
    first = {}
    for k, n in resumed:
        first.setdefault(k, n)
    assert all(first[k] == before[k] + 1 for k in before), (before, first)
    assert sql_state_disagrees(out, tag) == []  # every count agrees with the ids it has seen
    assert sql_gaps(out, tag) == []  # and no id's update went missing across the suspend

    r = await http.get("/deployments/counts/logs")
    texts = [line["text"] for line in r.json()["lines"]]
    assert any("suspended" in t for t in texts) and any("resume v1" in t for t in texts)

    r = await http.get("/deployments")
    assert [d["name"] for d in r.json()["deployments"]] == ["counts"]
    r = await http.get("/deployments/counts", headers={"x-loam-namespace": "someone-else"})
    assert r.status_code == 404 and r.json()["code"] == "not_found"

    # bad requests: the gateway's error shape, and the job keeps running
    r = await http.post("/deployments/counts:resume")
    assert r.status_code == 400 and r.json()["code"] == "failed_precondition", r.text
    assert "cannot resume 'counts': it is RUNNING" in r.json()["message"]
    r = await http.post("/deployments", json={"name": "other", "artifact": "0" * 64 + "/x.sql"})
    assert r.status_code == 404 and "no artifact" in r.json()["message"]
    r = await http.post("/deployments", json={"name": "other", "artifact": artifact, "sql": "SELECT 1"})
    assert r.status_code == 400 and r.json()["code"] == "invalid_argument"
    r = await http.post("/deployments/counts:upgrade", json={"artifact": artifact, "bogus": 1})
    assert r.status_code == 400 and r.json()["code"] == "invalid_argument"
    r = await http.post("/artifacts", params={"filename": "job.exe"}, content=b"x")
    assert r.status_code == 400 and ".jar, .py or .sql" in r.json()["message"]
    r = await http.post("/deployments/counts:rollback", json={"version": 7})
    assert r.status_code in (400, 404)
    r = await http.get("/deployments/counts")
    assert r.json()["state"] == "RUNNING" and r.json()["job"]["state"] == "RUNNING"

    # the CLI drives the same routes
    server = str(http.base_url).removesuffix("/v1/engines/flink/").removesuffix("/v1/engines/flink")

    def cli(*args: str):
        return asyncio.to_thread(flink_cli.run, ["--url", server, "-n", NS, *args])

    assert [d["name"] for d in (await cli("ls"))["deployments"]] == ["counts"]
    assert (await cli("savepoint", "counts"))["reason"] == "savepoint"
    assert (await cli("status", "counts"))["job"]["state"] == "RUNNING"
    with pytest.raises(SystemExit):
        await cli("resume", "counts")
    assert (await cli("cancel", "counts"))["state"] == "CANCELLED"


async def test_a_server_without_the_flink_engine_says_so(engine):
    app = create_app(Router(local=CoreRpc(QueueCore(engine.lifecycle.recorder.store))))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as http:
        r = await http.get("/v1/engines/flink/deployments")
    assert r.status_code == 400 and r.json()["code"] == "failed_precondition"
    assert "no Flink engine" in r.json()["message"]
