"""The gateway's unary lane (loam_gateway/unary_lane.py) against the general Connect app
it stands in front of, through `loam dev` over real HTTP.

A gzip-compressed request is never the lane's (it takes identity only), so sending the
same call once plain and once compressed shows the two paths answer alike: the same
status, the same error body."""

from __future__ import annotations

import asyncio
import gzip
import json
import uuid

import httpx
import pytest

from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb

NS = "lane"
BASE = "/loam.jobs.v1.JobsService/"
PROTO = {"content-type": "application/proto", "x-loam-namespace": NS}
JSON = {"content-type": "application/json", "x-loam-namespace": NS}


def qname() -> str:
    return f"lane-{uuid.uuid4().hex[:8]}"


def both_paths(
    client: httpx.Client, method: str, body: bytes, headers: dict
) -> tuple[httpx.Response, httpx.Response]:
    plain = client.post(BASE + method, content=body, headers=headers)
    packed = client.post(
        BASE + method, content=gzip.compress(body), headers={**headers, "content-encoding": "gzip"}
    )
    return plain, packed


@pytest.fixture
def client(dev_server):
    with httpx.Client(base_url=dev_server.url, timeout=10) as c:
        yield c


def test_success_is_the_same_message_on_both_paths(client):
    q = qname()
    req = J.EnqueueRequest(queue=q, task=pb.TaskSpec(name="t"), opts=pb.EnqueueOpts(job_key="k1"))
    plain, packed = both_paths(client, "Enqueue", req.SerializeToString(), PROTO)
    assert plain.status_code == packed.status_code == 200
    assert plain.headers["content-type"] == "application/proto"
    first, second = J.EnqueueResponse.FromString(plain.content), J.EnqueueResponse.FromString(packed.content)
    assert first.enqueued.created and not second.enqueued.created  # the job key made the second a duplicate
    assert second.enqueued.job == first.enqueued.job
    counts = client.post(BASE + "QueueAdmin", json={"queue": q, "op": {"counts": {}}}, headers=JSON)
    assert counts.status_code == 200, counts.text
    assert counts.json()["counts"]["waiting"] in (1, "1")


@pytest.mark.parametrize("headers", [PROTO, JSON], ids=["proto", "json"])
def test_errors_are_the_same_on_both_paths(client, headers):
    if headers is PROTO:
        body = J.EnqueueRequest(queue="not a valid name!", task=pb.TaskSpec(name="t")).SerializeToString()
    else:
        body = json.dumps({"queue": "not a valid name!", "task": {"name": "t"}}).encode()
    plain, packed = both_paths(client, "Enqueue", body, headers)
    assert plain.status_code == packed.status_code == 400
    assert plain.headers["content-type"] == packed.headers["content-type"] == "application/json"
    assert plain.json() == packed.json()
    assert plain.json()["code"] == "invalid_argument" and "queue" in plain.json()["message"]


def test_undecodable_body_and_bad_headers(client):
    bad = client.post(BASE + "Enqueue", content=b"\xff\xff\xff", headers=PROTO)
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_argument"
    assert bad.json()["message"].startswith("unmarshal message")
    version = client.post(BASE + "Enqueue", content=b"", headers={**PROTO, "connect-protocol-version": "2"})
    assert version.status_code == 400 and "connect-protocol-version" in version.json()["message"]
    timeout = client.post(BASE + "Enqueue", content=b"", headers={**PROTO, "connect-timeout-ms": "-5"})
    assert timeout.status_code == 400 and "timeout" in timeout.json()["message"]
    unknown = client.post(BASE + "NoSuchMethod", content=b"", headers=PROTO)
    assert unknown.status_code == 404


def test_namespace_prefix_reaches_the_lane(client):
    q = qname()
    body = json.dumps({"queue": q, "task": {"name": "t"}}).encode()
    r = client.post(
        f"/ns/{NS}-other{BASE}Enqueue", content=body, headers={"content-type": "application/json"}
    )
    assert r.status_code == 200, r.text
    ours = client.post(BASE + "QueueAdmin", json={"queue": q, "op": {"counts": {}}}, headers=JSON).json()
    theirs = client.post(BASE + "QueueAdmin", json={"queue": q, "op": {"counts": {}}},
                         headers={**JSON, "x-loam-namespace": f"{NS}-other"}).json()  # fmt: skip
    assert ours.get("counts", {}).get("waiting", 0) in (0, "0")
    assert theirs["counts"]["waiting"] in (1, "1")


# A connection's first request is read by the server's own HTTP reader, which answers a
# Lease itself; after a request it does not answer (a GET), uvicorn's protocol and the
# ASGI app serve the connection (loam_common/direct_http.py). Both watch for the client.
FIRST = {"direct": False, "asgi": True}


@pytest.mark.parametrize("handed_over", FIRST.values(), ids=FIRST.keys())
async def test_a_long_poll_abandoned_by_its_client_takes_no_job(dev_server, handed_over):
    q = qname()
    lease = J.LeaseRequest(queues=[q], max=1, wait_ns=5_000_000_000, worker="gone").SerializeToString()
    async with httpx.AsyncClient(base_url=dev_server.url) as c:
        if handed_over:
            assert (await c.get("/healthz")).status_code == 200
        with pytest.raises(httpx.TimeoutException):
            await c.post(BASE + "Lease", content=lease, headers=PROTO, timeout=0.5)  # the client hangs up
    await asyncio.sleep(0.2)
    with httpx.Client(base_url=dev_server.url, timeout=10) as c:
        enq = c.post(
            BASE + "Enqueue",
            content=J.EnqueueRequest(queue=q, task=pb.TaskSpec(name="t")).SerializeToString(),
            headers=PROTO,
        )
        assert enq.status_code == 200
        got = c.post(BASE + "Lease", content=J.LeaseRequest(queues=[q], max=1, worker="here").SerializeToString(),
                     headers=PROTO)  # fmt: skip
        assert got.status_code == 200
        assert len(J.LeaseResponse.FromString(got.content).leases) == 1


@pytest.mark.parametrize("handed_over", FIRST.values(), ids=FIRST.keys())
def test_a_long_poll_answers_within_its_deadline(client, handed_over):
    if handed_over:
        assert client.get("/healthz").status_code == 200
    q = qname()
    lease = J.LeaseRequest(queues=[q], max=1, wait_ns=10_000_000_000, worker="w").SerializeToString()
    r = client.post(BASE + "Lease", content=lease, headers={**PROTO, "connect-timeout-ms": "300"})
    assert r.elapsed.total_seconds() < 5
    if r.status_code == 200:  # the core ends the wait before the deadline: no jobs
        assert len(J.LeaseResponse.FromString(r.content).leases) == 0
    else:
        assert r.json()["code"] == "deadline_exceeded"
