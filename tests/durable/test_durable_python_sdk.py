"""Durable mode with the stock Python SDK (resonate-sdk 0.8.1): worker processes and a
client against a real `loam dev`, over real HTTP and SSE (the protocol notes' §7).

Each step body of a workflow appends its name to a side file, so "finished steps are
never run again" is counted, not assumed."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from durable_kit import counts_of, envelope, wait_for
from resonate.resonate import Resonate
from resonate.types import Value

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def counts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("counts") / "counts"


@pytest.fixture(scope="module")
def workers(durable_url: str, counts: Path):
    """One worker in `workers` and one in `other`, for the whole module."""
    from durable_kit import Worker

    started = [Worker(durable_url, "workers", counts), Worker(durable_url, "other", counts)]
    yield started
    for w in started:
        w.stop()


def client(url: str, fn, timeout: float = 30):
    """Run `fn(resonate)` with a fresh SDK client in its own group, then stop it."""

    async def main():
        r = Resonate(url=url, group="client-" + uuid.uuid4().hex[:8])
        try:
            return await asyncio.wait_for(fn(r), timeout)
        finally:
            await r.stop()

    return asyncio.run(main())


def test_basic_workflow_runs_each_step_once(durable_url, workers, counts):
    async def go(r):
        return await r.options(target="workers").rpc("basic-1", "wf", "x").result()

    assert client(durable_url, go) == "x+step1+step2+step3"
    c = counts_of(counts)
    assert (c["step1"], c["step2"], c["step3"]) == (1, 1, 1)


def test_same_id_again_returns_the_result_without_running_anything(durable_url, workers, counts):
    async def go(r):
        return await r.options(target="workers").rpc("basic-1", "wf", "x").result()

    before = counts_of(counts)
    _, task = envelope(durable_url, "task.get", {"id": "basic-1"})
    assert client(durable_url, go) == "x+step1+step2+step3"
    assert counts_of(counts) == before
    _, again = envelope(durable_url, "task.get", {"id": "basic-1"})
    assert again["data"]["task"] == task["data"]["task"] and task["data"]["task"]["state"] == "fulfilled"


def test_a_killed_worker_resumes_elsewhere_without_rerunning_finished_steps(
    durable_url, start_worker, tmp_path
):
    crash_counts = tmp_path / "counts"
    w1 = start_worker("crashers", crash_counts, "--die-in", "step2")

    async def go(r):
        handle = r.options(target="crashers").rpc("crash-1", "wf", "y")
        await asyncio.to_thread(w1.proc.wait, 30)  # dies inside step 2, holding the lease
        assert w1.proc.returncode == 9
        # its lease is still held: a fenced write at the version it held is refused,
        # and the resume below happens only once the lease (3 s) lapses
        start_worker("crashers", crash_counts)
        return await handle.result()

    assert client(durable_url, go) == "y+step1+step2+step3"
    c = counts_of(crash_counts)
    assert (c["step1"], c["step2"], c["step3"]) == (1, 2, 1)
    # the dead worker's lease version no longer writes: stale fence -> 409, nothing changes
    _, task = envelope(durable_url, "task.get", {"id": "crash-1"})
    assert task["data"]["task"]["state"] == "fulfilled" and task["data"]["task"]["version"] >= 2
    status, resp = envelope(durable_url, "task.fence", {
        "id": "crash-1", "version": 1,
        "action": {"kind": "promise.create", "head": {"corrId": "c", "version": "2026-04-01"},
                   "data": {"id": "crash-1:99", "timeoutAt": 2**53, "param": {}, "tags": {}}},
    })  # fmt: skip
    assert status == 409 and resp["head"]["status"] == 409
    assert envelope(durable_url, "promise.get", {"id": "crash-1:99"})[0] == 404


def test_rpc_to_another_group_suspends_and_resumes_the_parent(durable_url, workers, counts):
    async def go(r):
        return await r.options(target="workers").rpc("rpc-1", "parent", "z").result()

    assert client(durable_url, go) == "child(z)|z+parent-step"
    c = counts_of(counts)
    assert c["child@other"] == 1 and c["parent-step"] == 1
    assert c["parent-body"] >= 2  # replayed from the top after the child settled
    _, child = envelope(durable_url, "promise.get", {"id": "rpc-1:1"})
    assert child["data"]["promise"]["tags"]["resonate:target"] == "poll://any@other"


def test_durable_sleep_is_woken_by_the_server_timer(durable_url, workers, counts):
    async def go(r):
        return await r.options(target="workers").rpc("sleep-1", "sleeper", 2.0).result()

    started = time.monotonic()
    assert client(durable_url, go) == "slept"
    assert time.monotonic() - started >= 2.0
    c = counts_of(counts)
    assert c["before"] == 1 and c["after"] == 1 and c["sleeper-body"] >= 2
    _, timer = envelope(durable_url, "promise.get", {"id": "sleep-1:2"})
    assert timer["data"]["promise"]["state"] == "resolved"  # a timer settles resolved


def test_schedule_ticks_until_deleted(durable_url, workers, counts):
    async def create(r):
        return await r.options(target="workers").schedule("tick", "*/1 * * * * *", "ticked")

    client(durable_url, create)
    wait_for(lambda: counts_of(counts).get("tick", 0) >= 2, 20, "two ticks")
    client(durable_url, lambda r: r.schedules.delete("tick"))
    _, found = envelope(durable_url, "promise.search", {"tags": {"resonate:schedule": "tick"}, "limit": 100})
    fired = found["data"]["promises"]
    assert fired and all(p["id"].startswith("tick-") for p in fired)
    settled = {p["id"] for p in fired}
    wait_for(lambda: all(envelope(durable_url, "promise.get", {"id": i})[1]["data"]["promise"]["state"] != "pending"
                         for i in settled), 20, "the fired promises to finish")  # fmt: skip
    ticks = counts_of(counts)["tick"]
    assert envelope(durable_url, "schedule.get", {"id": "tick"})[0] == 404
    time.sleep(2.5)
    assert counts_of(counts)["tick"] == ticks  # deleted: no more fires


def test_a_loam_schedule_runs_a_durable_function_once_per_tick(dev_server, durable_url, workers, counts):
    """A Loam schedule (Connect, the loam SDK) whose options say durable mode: each tick
    starts the function on the group's workers as a root promise of its own."""
    from loam import Client

    async def schedule():
        async with Client(dev_server.url, retries=0, timeout=10) as c:
            await c.schedule("billing", "workers", "billed", ["acme", 5], every=1.0, limit=3,
                             durable_function="billed")  # fmt: skip
            info = await c.get_schedule("billing")
            listed = [s async for s in c.iter_schedules()]
            return info, listed

    info, listed = asyncio.run(schedule())
    assert info.raw.opts.durable_function == "billed"
    assert "billing" in [s.id for s in listed]
    wait_for(lambda: counts_of(counts).get("bill:acme:5", 0) >= 3, 30, "three ticks to run")

    async def read():
        async with Client(dev_server.url, retries=0, timeout=10) as c:
            return await c.get_schedule("billing")

    info = asyncio.run(read())
    assert info.raw.count == 3 and info.raw.next_ns == 0  # its limit: done
    _, found = envelope(durable_url, "promise.search", {"tags": {"loam:schedule": "billing"}, "limit": 10})
    fired = found["data"]["promises"]
    assert len(fired) == 3 and info.raw.last_job_id in [p["id"] for p in fired]
    for p in fired:
        assert p["id"] == f"billing-{p['createdAt']}"  # one root promise per tick, named by it
        assert p["tags"]["resonate:target"] == "poll://any@workers"
    wait_for(lambda: all(envelope(durable_url, "promise.get", {"id": p["id"]})[1]["data"]["promise"]["state"] == "resolved"
                         for p in fired), 20, "the ticks' workflows to finish")  # fmt: skip
    time.sleep(1.5)
    assert counts_of(counts)["bill:acme:5"] == 3  # each tick ran once, and no more ticks came


def _rest(base: str, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    import json
    import urllib.error
    import urllib.request

    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        base + path, data=data, method=method, headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_a_durable_schedule_made_through_rest_runs_on_a_stock_worker(
    dev_server, durable_url, workers, counts
):
    """`PUT /v1/schedules/{id}` with mode durable: the group in `queue`, the function in
    `durable_function`, its arguments in `data`; each tick reaches the Python SDK worker."""
    base = dev_server.url
    _, spec = _rest(base, "GET", "/openapi.json")
    body_schema = spec["components"]["schemas"]["ScheduleBody"]["properties"]
    assert "durable_function" in body_schema and "mode" in body_schema

    # bad input is refused and leaves nothing behind
    status, err = _rest(base, "PUT", "/v1/schedules/rest:bad", {"queue": "workers", "name": "billed",
                                                                "mode": "durable", "every_ns": 10**9})  # fmt: skip
    assert status == 400 and "':'" in err["message"]
    status, err = _rest(base, "PUT", "/v1/schedules/rest-bad", {"queue": "workers", "name": "billed",
                                                                "durable_function": "billed", "every_ns": 10**9})  # fmt: skip
    assert status == 400 and "durable_function" in err["message"]
    status, err = _rest(base, "PUT", "/v1/schedules/rest-bad", {"queue": "workers", "name": "billed", "mode": "durable",
                                                                "data_base64": "/wA=", "every_ns": 10**9})  # fmt: skip
    assert status == 400 and "arguments must be JSON" in err["message"]
    assert _rest(base, "GET", "/v1/schedules/rest-bad")[0] == 404

    status, made = _rest(base, "PUT", "/v1/schedules/rest-billing", {
        "queue": "workers", "name": "monthly bill", "mode": "durable", "durable_function": "billed",
        "data": ["rest", 7], "every_ns": 10**9, "limit": 2})  # fmt: skip
    assert status == 200, made
    assert (made["schedule"]["mode"], made["schedule"]["durable_function"]) == ("durable", "billed")
    wait_for(lambda: counts_of(counts).get("bill:rest:7", 0) >= 2, 30, "two ticks to run on the worker")
    status, read = _rest(base, "GET", "/v1/schedules/rest-billing")
    assert status == 200 and read["mode"] == "durable" and read["count"] == 2
    _, found = envelope(
        durable_url, "promise.search", {"tags": {"loam:schedule": "rest-billing"}, "limit": 10}
    )
    assert sorted(p["id"] for p in found["data"]["promises"]) == sorted(
        f"rest-billing-{p['createdAt']}" for p in found["data"]["promises"]
    )
    assert len(found["data"]["promises"]) == 2
    assert _rest(base, "DELETE", "/v1/schedules/rest-billing") == (200, {"removed": True})


def test_a_root_past_its_timeout_is_rejected_timedout(durable_url, workers):
    async def go(r):
        handle = r.options(target="workers", timeout=timedelta(seconds=2)).rpc("timeout-1", "hangs")
        with pytest.raises(Exception):  # noqa: B017 - the SDK's own timeout error
            await handle.result()

    client(durable_url, go)
    _, p = envelope(durable_url, "promise.get", {"id": "timeout-1"})
    assert p["data"]["promise"]["state"] == "rejected_timedout"
    _, t = envelope(durable_url, "task.get", {"id": "timeout-1"})
    assert t["data"]["task"]["state"] == "fulfilled"


def test_external_completion_resumes_the_workflow(durable_url, workers, counts):
    marker = Path(str(counts) + ".external")

    async def go(r):
        handle = r.options(target="workers").rpc("approve-1", "approval")
        promise_id = await asyncio.to_thread(
            wait_for, lambda: marker.exists() and marker.read_text(), 20, "the id"
        )
        other = Resonate(url=durable_url, group="approver")  # another client settles it
        try:
            await other.promises.resolve(promise_id, Value(data="yes"))
        finally:
            await other.stop()
        return await handle.result()

    assert client(durable_url, go) == "approved:yes"


def test_loam_resonate_fills_in_loams_url_and_namespace(dev_server, monkeypatch):
    import loam

    monkeypatch.setenv("LOAM_URL", dev_server.url)
    monkeypatch.setenv("LOAM_NAMESPACE", "helper")
    monkeypatch.delenv("LOAM_TOKEN", raising=False)

    async def go():
        r = loam.resonate(group="helper-client")
        try:
            await r.promises.create("helper-1", timeout_at=2**50, param=Value(data=1), tags={})
        finally:
            await r.stop()

    asyncio.run(go())
    assert envelope(dev_server.url + "/ns/helper/resonate", "promise.get", {"id": "helper-1"})[0] == 200
    assert envelope(dev_server.url + "/resonate", "promise.get", {"id": "helper-1"})[0] == 404


def test_a_restart_of_loam_dev_mid_workflow_loses_nothing(tmp_path):
    """The server stops while a workflow sleeps and comes back on the same port and data:
    the sleep's timer fires after the restart, the worker (which reconnects by itself)
    resumes the workflow, and no finished step runs again."""
    from devserver import start_dev_server
    from durable_kit import RETRY_MS, Worker

    server = start_dev_server(tmp_path / "data", "--durable-retry-ms", str(RETRY_MS))
    url = server.url + "/resonate"
    restart_counts = tmp_path / "counts"
    worker = Worker(url, "restarters", restart_counts)
    try:

        async def begin(r):
            r.options(target="restarters").rpc("restart-1", "sleeper", 3.0)
            await asyncio.to_thread(
                wait_for, lambda: counts_of(restart_counts).get("before") == 1, 20, "before"
            )

        client(url, begin)
        assert server.stop() == 0
        server = start_dev_server(
            tmp_path / "data", "--durable-retry-ms", str(RETRY_MS), "--port", str(server.port)
        )

        def resolved() -> bool:
            status, p = envelope(url, "promise.get", {"id": "restart-1"})
            return status == 200 and p["data"]["promise"]["state"] == "resolved"

        wait_for(resolved, 45, "the workflow to finish after the restart")
        c = counts_of(restart_counts)
        assert c["before"] == 1 and c["after"] == 1
    finally:
        worker.stop()
        server.stop()
