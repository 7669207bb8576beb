"""End to end through `loam dev` (a subprocess): the same scenarios through Connect JSON
over plain HTTP (httpx), Connect binary (the generated JobsServiceClient) and the REST
facade. REST has no consuming calls (lease, complete): its scenarios enqueue and look
through REST and consume through Connect binary.

Every client turns an error into the typed JobsError (loam_common.connect_errors), so
the scenarios assert on the same classes and fields whichever wire carried them."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import signal
import time
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from devserver import start_dev_server
from google.protobuf import json_format
from protobuf.wkt import Any as AnyMsg

from loam_common import errors as E
from loam_common.connect_client import jobs_client
from loam_common.connect_errors import DETAIL_TYPE, from_connect
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb

NS = "e2e"
HEADERS = {"x-loam-namespace": NS}
MS = 1_000_000
SEC = 1_000_000_000
_n = itertools.count()


def qname(prefix: str = "q") -> str:
    return f"{prefix}-{next(_n)}-{uuid.uuid4().hex[:6]}"


@dataclass
class Leased:
    queue: str
    job: str
    epoch: int
    name: str
    attempt: int


def _leased(resp: J.LeaseResponse) -> list[Leased]:
    return [Leased(x.token.queue, x.token.job, x.token.epoch, x.task.name, x.attempt) for x in resp.leases]


def _connect_error_from_json(status: int, body: Any) -> ConnectError:
    if not isinstance(body, dict) or "code" not in body:
        raise AssertionError(f"not a Connect error body (HTTP {status}): {body!r}")
    details = [
        AnyMsg(type_url="type.googleapis.com/" + d["type"], value=base64.b64decode(d["value"] + "==="))
        for d in body.get("details", ())
    ]
    return ConnectError(Code(body["code"]), body.get("message", ""), details=details)


# -- the clients ---------------------------------------------------------------------------------
class BinaryApi:
    """Connect binary through the generated client."""

    kind = "binary"

    def __init__(self, url: str) -> None:
        self.client = jobs_client(url)

    async def call(self, method: str, req: Any) -> Any:
        try:
            return await getattr(self.client, method)(req, headers=HEADERS)
        except ConnectError as e:
            raise from_connect(e) from e

    async def enqueue(self, queue: str, name: str, **opts: Any) -> str:
        r = await self.call(
            "enqueue", J.EnqueueRequest(queue=queue, task=pb.TaskSpec(name=name), opts=_opts(**opts))
        )
        return r.enqueued.job

    async def lease(self, queues: list[str], max: int = 10, wait_ns: int = 0) -> list[Leased]:
        return _leased(
            await self.call("lease", J.LeaseRequest(queues=queues, worker="w1", max=max, wait_ns=wait_ns))
        )

    async def complete_ok(self, queue: str, job: str, epoch: int) -> int:
        req = J.CompleteRequest(
            token=J.LeaseToken(queue=queue, job=job, epoch=epoch), outcome=J.Outcome(ok={})
        )
        return (await self.call("complete", req)).completed.state

    async def job_state(self, queue: str, job: str) -> str:
        r = await self.call("job_admin", J.JobAdminRequest(queue=queue, job=job, op=J.JobOp(get={})))
        return pb.JobState.Name(r.job.state).removeprefix("JOB_STATE_").lower().replace("_", "-")

    async def result_set(self, key: str, data: bytes) -> None:
        await self.call("result_set", J.ResultSetRequest(key=key, value=pb.Payload(data=data)))

    async def result_get(self, key: str) -> bytes | None:
        r = await self.call("result_get", J.ResultGetRequest(key=key))
        return r.value.data if r.found else None

    async def result_incr(self, key: str, member: str) -> int:
        return (await self.call("result_incr", J.ResultIncrRequest(key=key, member=member))).size

    async def result_delete(self, key: str) -> None:
        await self.call("result_delete", J.ResultDeleteRequest(key=key))


class JsonApi(BinaryApi):
    """Connect JSON over plain HTTP: what curl does."""

    kind = "json"

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx.AsyncClient(base_url=url, timeout=40)

    async def call(self, method: str, req: Any) -> Any:
        name = req.DESCRIPTOR.name.removesuffix("Request")
        resp_type = getattr(J, f"{name}Response")
        r = await self.http.post(
            f"/loam.jobs.v1.JobsService/{name}",
            content=json_format.MessageToJson(req),
            headers={"content-type": "application/json", **HEADERS},
        )
        if r.status_code != 200:
            raise from_connect(_connect_error_from_json(r.status_code, r.json()))
        assert r.headers["content-type"].startswith("application/json")
        return json_format.Parse(r.text, resp_type())


class RestApi(BinaryApi):
    """The REST facade; consuming goes through Connect binary (REST has none)."""

    kind = "rest"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.http = httpx.AsyncClient(base_url=url + f"/ns/{NS}", timeout=40)

    async def rest(self, method: str, path: str, body: Any = None) -> Any:
        # A body-less POST says it is no form post (the gateway's CSRF check, docs/security.md).
        r = await self.http.request(method, path, json=body, headers={"x-requested-with": "test"})
        if r.status_code >= 400:
            err = r.json()
            assert set(err) <= {"code", "message", "detail"}, err
            detail = err.get("detail")
            details = []
            if detail:
                d = json_format.ParseDict(detail, pb.ErrorDetail())
                details = [AnyMsg(type_url="type.googleapis.com/" + DETAIL_TYPE, value=d.SerializeToString())]
            e = from_connect(ConnectError(Code(err["code"]), err["message"], details=details))
            e.http_status = r.status_code
            raise e
        return r.json() if r.content else None

    async def enqueue(self, queue: str, name: str, **opts: Any) -> str:
        body: dict[str, Any] = {"name": name, "data": {"n": name}}
        body.update({k: v for k, v in opts.items() if k in ("priority", "delay_ns", "job_key")})
        if "visibility_ns" in opts:  # not in the REST body: enqueue that one over Connect
            return await super().enqueue(queue, name, **opts)
        return (await self.rest("POST", f"/v1/queues/{queue}/jobs", body))["job"]

    async def job_state(self, queue: str, job: str) -> str:
        return (await self.rest("GET", f"/v1/queues/{queue}/jobs/{job}"))["job"]["state"]

    async def result_set(self, key: str, data: bytes) -> None:
        await self.rest("PUT", f"/v1/results/{key}", {"data_base64": base64.b64encode(data).decode()})

    async def result_get(self, key: str) -> bytes | None:
        try:
            v = (await self.rest("GET", f"/v1/results/{key}"))["value"]
        except E.NotFound:
            return None
        if v["data_base64"] is not None:
            return base64.b64decode(v["data_base64"])
        return json.dumps(v["data"]).encode()

    async def result_incr(self, key: str, member: str) -> int:
        return (await self.rest("POST", f"/v1/results/{key}:incr", {"member": member}))["size"]

    async def result_delete(self, key: str) -> None:
        await self.rest("DELETE", f"/v1/results/{key}")


def _opts(priority: int = 0, delay_ns: int = 0, visibility_ns: int = 0, job_key: str = "") -> pb.EnqueueOpts:
    o = pb.EnqueueOpts(priority=priority, visibility_ns=visibility_ns, job_key=job_key)
    if delay_ns:
        o.not_before.delay_ns = delay_ns
    return o


CONSUMERS = ["json", "binary"]  # the clients with lease/complete of their own
ALL = ["json", "binary", "rest"]


@pytest.fixture
def make_api(dev_server):
    def make(kind: str):
        return {"json": JsonApi, "binary": BinaryApi, "rest": RestApi}[kind](dev_server.url)

    return make


# -- scenarios -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ALL)
async def test_priorities_delays_and_lease_order(make_api, kind):
    api = make_api(kind)
    q = qname()
    ids = {}
    for name, prio in (("a", 0), ("b", 5), ("c", 1), ("d", 0), ("f", 1)):
        ids[name] = await api.enqueue(q, name, priority=prio)
    ids["e"] = await api.enqueue(q, "e", delay_ns=3600 * SEC)
    assert await api.job_state(q, ids["e"]) == "delayed"
    assert await api.job_state(q, ids["b"]) == "prioritized"
    assert await api.job_state(q, ids["a"]) == "waiting"

    leased = await api.lease([q], max=10)
    # The FIFO band first, then priorities lower first, FIFO within one; delayed jobs wait.
    assert [x.name for x in leased] == ["a", "d", "c", "f", "b"]
    assert all(x.attempt == 1 and x.epoch >= 1 for x in leased)

    # A short delay: a waiting lease gets the job once it falls due.
    t0 = time.monotonic()
    await api.enqueue(q, "soon", delay_ns=300 * MS)
    got = await api.lease([q], max=1, wait_ns=10 * SEC)
    assert [x.name for x in got] == ["soon"]
    assert 0.2 <= time.monotonic() - t0 < 5


@pytest.mark.parametrize("kind", CONSUMERS)
async def test_fenced_completion(make_api, kind):
    api = make_api(kind)
    q = qname()
    job = await api.enqueue(q, "slow", visibility_ns=300 * MS)
    (first,) = await api.lease([q], max=1)
    # The lease runs out; the sweeper reclaims the job and the next lease gets a new epoch.
    (second,) = await api.lease([q], max=1, wait_ns=10 * SEC)
    assert second.job == job and second.epoch > first.epoch

    with pytest.raises(E.Fenced) as err:
        await api.complete_ok(q, job, first.epoch)
    assert err.value.code == "failed_precondition"
    assert err.value.current_epoch == second.epoch
    assert err.value.epoch == first.epoch and err.value.job_id == job
    assert "stale" in err.value.message

    assert await api.complete_ok(q, job, second.epoch) == pb.JOB_STATE_COMPLETED
    assert await api.job_state(q, job) == "completed"


@pytest.mark.parametrize("kind", CONSUMERS)
async def test_long_poll_wakes_on_enqueue(make_api, kind):
    api, producer = make_api(kind), make_api("binary")
    q = qname()
    t0 = time.monotonic()
    parked = asyncio.create_task(api.lease([q], max=1, wait_ns=10 * SEC))
    await asyncio.sleep(0.5)
    assert not parked.done()
    t_enqueue = time.monotonic()
    job = await producer.enqueue(q, "wake")
    got = await asyncio.wait_for(parked, 12)
    t_back = time.monotonic()
    assert [x.job for x in got] == [job]
    assert t_back - t0 < 3, "the parked lease returned near the end of its wait, not on the enqueue"
    assert t_back - t_enqueue < 1


@pytest.mark.parametrize("kind", CONSUMERS)
async def test_a_worker_that_stops_waiting_ends_its_long_poll(make_api, kind):
    # A closing worker asks the server to answer its Lease rather than dropping the call,
    # which could lose jobs leased for it meanwhile; the answer comes now, not in 30 s.
    api = make_api(kind)
    q = qname()
    parked = asyncio.create_task(api.lease([q], max=1, wait_ns=30 * SEC))
    await asyncio.sleep(0.5)
    assert not parked.done()
    ended = await api.call("end_lease_wait", J.EndLeaseWaitRequest(queues=[q], worker="w1"))
    assert ended.ended == 1
    assert await asyncio.wait_for(parked, 10) == []


@pytest.mark.parametrize("kind", ALL)
async def test_errors_and_their_codes(make_api, kind):
    api = make_api(kind)
    with pytest.raises(E.InvalidArgument) as bad:
        await api.enqueue("bad queue!", "x")
    assert bad.value.code == "invalid_argument"
    assert bad.value.field == "queue"
    assert "queue" in bad.value.message
    if kind == "rest":
        assert bad.value.http_status == 400

    q = qname()
    await api.enqueue(q, "x")
    with pytest.raises(E.NotFound) as missing:
        await api.job_state(q, "01ARZ3NDEKTSV4RRFFQ69G5FAV")
    assert missing.value.code == "not_found"
    if kind == "rest":
        assert missing.value.http_status == 404

    with pytest.raises(E.NotFound):
        await api.job_state(qname("never"), "01ARZ3NDEKTSV4RRFFQ69G5FAV")


@pytest.mark.parametrize("kind", CONSUMERS)
async def test_empty_engine_job_and_bad_outcome(make_api, kind):
    api = make_api(kind)
    with pytest.raises(E.InvalidArgument) as err:
        await api.call("submit_engine_job", J.SubmitEngineJobRequest())
    assert err.value.field == "job"
    q = qname()
    await api.enqueue(q, "x")
    (lease,) = await api.lease([q], max=1)
    req = J.CompleteRequest(token=J.LeaseToken(queue=q, job=lease.job, epoch=lease.epoch))
    with pytest.raises(E.InvalidArgument) as bad:
        await api.call("complete", req)
    assert bad.value.field == "outcome"


@pytest.mark.parametrize("kind", ALL)
async def test_results_set_get_incr(make_api, kind):
    api = make_api(kind)
    key = f"res-{uuid.uuid4().hex}"
    assert await api.result_get(key) is None
    await api.result_set(key, b"\x00\x01binary")
    assert await api.result_get(key) == b"\x00\x01binary"
    await api.result_delete(key)
    assert await api.result_get(key) is None

    counter = f"chord-{uuid.uuid4().hex}"
    assert await api.result_incr(counter, "task-1") == 1
    assert await api.result_incr(counter, "task-1") == 1  # a member counts once
    assert await api.result_incr(counter, "task-2") == 2
    assert await api.result_get(counter) == b"2"


async def test_namespaces_are_isolated(dev_server):
    q = qname()
    async with httpx.AsyncClient(base_url=dev_server.url) as http:
        r = await http.post(f"/ns/other/v1/queues/{q}/jobs", json={"name": "x"})
        assert r.status_code == 200, r.text
        r = await http.get(f"/ns/{NS}/v1/queues/{q}")
        assert r.status_code == 404 and r.json()["code"] == "not_found"
        r = await http.get(f"/ns/other/v1/queues/{q}")
        assert r.json()["counts"]["waiting"] == 1
        names = [
            x["name"]
            for x in (await http.get("/v1/queues", headers={"x-loam-namespace": "other"})).json()["queues"]
        ]
        assert q in names
    assert await BinaryApi(dev_server.url).lease([q], max=1) == []  # the e2e namespace sees nothing


async def test_rest_admin_actions(dev_server):
    api, q = RestApi(dev_server.url), qname()
    delayed = await api.enqueue(q, "later", delay_ns=3600 * SEC)
    assert (await api.rest("POST", f"/v1/queues/{q}/jobs/{delayed}:promote"))["job"]["state"] == "waiting"
    with pytest.raises(E.InvalidState) as err:
        await api.rest("POST", f"/v1/queues/{q}/jobs/{delayed}:promote")
    assert err.value.code == "failed_precondition" and err.value.http_status == 400
    keyed = await api.enqueue(q, "keyed", job_key="my-key")
    got = await api.rest("GET", f"/v1/queues/{q}/jobs/my-key")  # a job key works as a job ref
    assert got["job"]["id"] == keyed and got["job"]["payload"]["data"] == {"n": "keyed"}
    assert (await api.rest("POST", f"/v1/queues/{q}/jobs/{keyed}:cancel"))["job"]["state"] == "canceled"
    assert (await api.rest("POST", f"/v1/queues/{q}/jobs/{keyed}:retry"))["job"]["state"] == "waiting"
    assert (await api.rest("POST", f"/v1/queues/{q}:pause"))["counts"]["paused"] is True
    assert await api.lease([q]) == []
    assert (await api.rest("POST", f"/v1/queues/{q}:resume"))["counts"]["paused"] is False
    page = await api.rest("GET", f"/v1/queues/{q}/jobs?state=waiting&page_size=1")
    assert len(page["jobs"]) == 1 and page["next_page_token"]
    page2 = await api.rest(
        "GET", f"/v1/queues/{q}/jobs?state=waiting&page_size=1&page_token={page['next_page_token']}"
    )
    assert {page["jobs"][0]["id"], page2["jobs"][0]["id"]} == {delayed, keyed}
    assert (await api.rest("POST", f"/v1/queues/{q}/jobs/{delayed}:remove"))["removed"] is True
    assert (await api.rest("POST", f"/v1/queues/{q}:drain", {}))["affected"] == 1
    with pytest.raises(E.NotFound):
        await api.rest("POST", f"/v1/queues/{q}/jobs/{keyed}:remove")


async def test_healthz_readyz_openapi(dev_server):
    async with httpx.AsyncClient(base_url=dev_server.url) as http:
        assert (await http.get("/healthz")).json() == {"status": "ok"}
        assert (await http.get("/readyz")).status_code == 200
        spec = (await http.get("/openapi.json")).json()
        assert "/v1/queues/{queue}/jobs" in spec["paths"]


def test_sigterm_stops_cleanly(tmp_path):
    server = start_dev_server(tmp_path / "data")
    assert sum("ready" in line for line in server.lines) == 1
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(15) == 0
    time.sleep(0.1)
    assert any("stopped" in line for line in server.lines), server.lines
    assert (tmp_path / "data" / "loam.lmdb" / "data.mdb").exists()


def test_refuses_non_loopback_without_auth(tmp_path):
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "loam_gateway.dev", "--host", "0.0.0.0", "--port", "0", "--data", str(tmp_path)],
        capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert r.returncode == 2
    assert "refusing to bind" in r.stderr
