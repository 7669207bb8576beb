"""Durable mode split over processes, as docker-compose runs it: queue core, gateway and
sweeper as separate processes on one SQLite file. The gateway serves the Resonate
protocol; the durable timers run in the sweeper, which has no SSE connections, so its
pushes go through the store's outbox to the gateway, which drains it when the sweeper
tells it to. A workflow that sleeps (its wake-up is the sweeper's timer) and a worker
killed mid-step (its lease lapses in the sweeper) both finish."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from devserver import free_port
from durable_kit import Worker, counts_of, envelope, wait_for
from resonate.resonate import Resonate

pytestmark = pytest.mark.timeout(120)


class Service:
    def __init__(self, name: str, args: list[str], log: Path, extra_env: dict | None = None) -> None:
        self.log = log
        self._out = open(log, "wb")  # noqa: SIM115 - closed in stop()
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOAM_")} | (extra_env or {})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", *args], env=env, stdout=self._out, stderr=subprocess.STDOUT
        )
        wait_for(lambda: b"ready" in log.read_bytes() or self.proc.poll() is not None, 30, f"{name} ready")
        assert self.proc.poll() is None, log.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._out.close()


def test_timers_in_the_sweeper_reach_workers_through_the_gateway(tmp_path):
    store = f"sqlite:///{tmp_path / 'loam.db'}"
    core_port, gw_port = free_port(), free_port()
    core_url = f"http://127.0.0.1:{core_port}"
    services = [
        Service(
            "queue-core",
            ["loam_queue_core.server", "--store", store, "--port", str(core_port)],
            tmp_path / "core.log",
        )
    ]
    # The gateway's own read of the outbox is made an hour apart: every push of the
    # sweeper's timers below reaches the worker only because the sweeper's notice wakes it.
    services.append(Service("gateway", ["loam_gateway", "--queue-cores", core_url, "--store", store, "--port", str(gw_port),
                                        "--durable-outbox-interval", "3600"], tmp_path / "gateway.log"))  # fmt: skip
    services.append(Service("sweeper", ["loam_sweeper", "--store", store, "--queue-cores", core_url, "--id", "sw-1",
                                        "--interval", "0.2"], tmp_path / "sweeper.log"))  # fmt: skip
    url = f"http://127.0.0.1:{gw_port}/resonate"
    counts = tmp_path / "counts"
    workers = [Worker(url, "split", counts)]
    try:

        async def go():
            r = Resonate(url=url, group="split-client-" + uuid.uuid4().hex[:6])
            try:
                return await asyncio.wait_for(
                    r.options(target="split").rpc("split-sleep", "sleeper", 1.0).result(), 60
                )
            finally:
                await r.stop()

        started = time.monotonic()
        assert asyncio.run(go()) == "slept"
        assert time.monotonic() - started < 40  # not the gateway's hourly read
        c = counts_of(counts)
        assert c["before"] == 1 and c["after"] == 1

        # a worker killed inside step 2: the sweeper sees its lease lapse and re-sends
        crash = tmp_path / "crash"
        dying = Worker(url, "split-crash", crash, "--die-in", "step2")
        workers.append(dying)
        envelope(url, "promise.create", {"id": "split-crash-1", "timeoutAt": 2**50, "param": _param("wf", "q"),
                                         "tags": {"resonate:target": "poll://any@split-crash"}})  # fmt: skip
        dying.proc.wait(30)
        workers.append(Worker(url, "split-crash", crash))
        wait_for(lambda: envelope(url, "promise.get", {"id": "split-crash-1"})[1]["data"]["promise"]["state"] == "resolved",
                 45, "the crashed workflow to finish")  # fmt: skip
        c = counts_of(crash)
        assert (c["step1"], c["step2"], c["step3"]) == (1, 2, 1)
    finally:
        for w in workers:
            w.stop()
        for s in reversed(services):
            s.stop()


def test_a_push_reaches_a_stream_on_another_gateway(tmp_path):
    """Two gateways serve /resonate over one store; no sweeper runs, so no retry timer can
    stand in for a lost push. A worker streams from gateway A, a client from gateway B:
    the client's rpc (made through B) reaches the worker as an `execute` (B hands it to
    A), and the result reaches the client as an `unblock` (the worker's fulfil, made
    through A, is handed to B)."""
    store = f"sqlite:///{tmp_path / 'loam.db'}"
    core_port, a_port, b_port = free_port(), free_port(), free_port()
    core_url = f"http://127.0.0.1:{core_port}"
    services = [Service("queue-core", ["loam_queue_core.server", "--store", store, "--port", str(core_port)],
                        tmp_path / "core.log")]  # fmt: skip
    for name, port in (("gateway-a", a_port), ("gateway-b", b_port)):
        services.append(Service(name, ["loam_gateway", "--queue-cores", core_url, "--store", store, "--port", str(port)],
                                tmp_path / f"{name}.log"))  # fmt: skip
    url_a, url_b = f"http://127.0.0.1:{a_port}/resonate", f"http://127.0.0.1:{b_port}/resonate"
    counts = tmp_path / "counts"
    worker = Worker(url_a, "on-a", counts)
    try:

        async def go(promise_id: str):
            r = Resonate(url=url_b, group="client-on-b-" + uuid.uuid4().hex[:6])
            try:
                return await asyncio.wait_for(
                    r.options(target="on-a").rpc(promise_id, "wf", "m").result(), 30
                )
            finally:
                await r.stop()

        assert asyncio.run(go("across-1")) == "m+step1+step2+step3"
        assert asyncio.run(go("across-2")) == "m+step1+step2+step3"
        c = counts_of(counts)
        assert (c["step1"], c["step2"], c["step3"]) == (2, 2, 2)
        # a push for a stream nobody has is refused by no one and taken by no one
        status, _ = envelope(url_b, "promise.create", {"id": "nobody-1", "timeoutAt": 2**50, "param": _param("wf", "q"),
                                                       "tags": {"resonate:target": "poll://any@no-such-group"}})  # fmt: skip
        assert status == 200
    finally:
        worker.stop()
        for s in reversed(services):
            s.stop()


def test_the_push_hand_over_is_internal(tmp_path):
    """`POST /resonate/internal/push` delivers to this gateway's streams only when the
    caller has the deployment's internal token (here one is configured)."""
    import json
    import urllib.error
    import urllib.request

    store = f"sqlite:///{tmp_path / 'loam.db'}"
    core_port, port = free_port(), free_port()
    env_token = {"LOAM_INTERNAL_TOKEN": "s3cret"}
    services = [Service("queue-core", ["loam_queue_core.server", "--store", store, "--port", str(core_port)],
                        tmp_path / "core.log", env_token)]  # fmt: skip
    services.append(Service("gateway", ["loam_gateway", "--queue-cores", f"http://127.0.0.1:{core_port}", "--store",
                                        store, "--port", str(port)], tmp_path / "gateway.log", env_token))  # fmt: skip
    try:
        body = json.dumps(
            {"ns": "default", "address": "poll://any@g", "message": {"kind": "execute"}}
        ).encode()

        def post(
            headers: dict, path: str = "/internal/push", payload: dict | None = None
        ) -> tuple[int, object]:
            data = body if payload is None else json.dumps(payload).encode()
            req = urllib.request.Request(f"http://127.0.0.1:{port}/resonate{path}", data=data,
                                         headers={"content-type": "application/json", **headers}, method="POST")  # fmt: skip
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    return resp.status, json.loads(resp.read())
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())

        assert post({})[0] == 401
        assert post({"x-loam-internal-token": "wrong"})[0] == 401
        assert post({"x-loam-internal-token": "s3cret"}) == (200, {"delivered": False})  # no stream of g here
        # the sweeper's outbox notice: the same rule
        assert post({}, "/internal/outbox", {"ns": "default"})[0] == 401
        assert post({"x-loam-internal-token": "s3cret"}, "/internal/outbox", {"ns": 1})[0] == 400
        assert post({"x-loam-internal-token": "s3cret"}, "/internal/outbox", {"ns": "default"}) == (
            200,
            {"draining": True},
        )
    finally:
        for s in reversed(services):
            s.stop()


def _param(func: str, *args: str) -> dict:
    import base64
    import json

    data = json.dumps({"func": func, "args": list(args), "kwargs": {}, "version": 1}).encode()
    return {"data": base64.b64encode(data).decode()}


def test_loam_durable_serves_the_protocol_alone(tmp_path):
    port = free_port()
    service = Service("durable", ["loam_durable", "--store", f"sqlite:///{tmp_path / 'loam.db'}", "--port", str(port)],
                      tmp_path / "durable.log")  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        status, resp = envelope(
            url, "promise.create", {"id": "alone", "timeoutAt": 2**50, "param": {}, "tags": {}}
        )
        assert status == 200 and resp["data"]["promise"]["state"] == "pending"
        assert envelope(url, "promise.get", {"id": "alone"})[0] == 200
        assert envelope(url, "promise.get", {"id": "alone"}, version="1999-01-01")[0] == 400
    finally:
        service.stop()
