"""Input the probe of issue 23 got through, each refused now with a clear error that
changes nothing, on REST and on Connect: deep JSON (and reads of it), strict Connect JSON,
strict REST numbers, out-of-range values, dot names, long names, and the message for a
completion that never had a lease."""

from __future__ import annotations

import base64
import json

import pytest
from gateway_kit import JSON, SVC

from loam_common import keys, validate
from loam_common.errors import Fenced
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs.complete import Ok


def nested(depth: int):
    value: object = 0
    for _ in range(depth):
        value = [value]
    return value


async def enqueue_rest(http, queue: str, body: dict):
    return await http.post(f"/v1/queues/{queue}/jobs", json=body)


async def enqueue_connect(http, body: dict | None, raw: bytes | None = None):
    return await http.post(
        SVC + "Enqueue", content=raw if raw is not None else json.dumps(body), headers=JSON
    )


async def job_count(http, queue: str) -> int:
    r = await http.get(f"/v1/queues/{queue}/jobs")
    if r.status_code == 404:
        return 0
    assert r.status_code == 200, r.text
    return len(r.json()["jobs"])


@pytest.mark.parametrize("depth", [validate.MAX_JSON_DEPTH + 1, 300, 990])
async def test_deep_json_is_refused_on_rest_and_connect_and_stores_nothing(http, depth):
    r = await enqueue_rest(http, "deep", {"name": "t", "data": nested(depth)})
    assert r.status_code == 400 and "nests deeper" in r.json()["message"], r.text
    data = base64.b64encode(json.dumps(nested(depth)).encode()).decode()
    task = {"name": "t", "payload": {"data": data, "content_type": "application/json"}}
    r = await enqueue_connect(http, {"queue": "deep", "task": task})
    assert r.status_code == 400 and "nests deeper" in r.json()["message"], r.text
    assert await job_count(http, "deep") == 0


async def test_json_at_the_depth_limit_is_stored_and_read_back(http):
    value = nested(validate.MAX_JSON_DEPTH - 1)
    r = await enqueue_rest(http, "ok", {"name": "t", "data": value})
    assert r.status_code == 200, r.text
    (job,) = (await http.get("/v1/queues/ok/jobs")).json()["jobs"]
    assert job["payload"]["data"] == value


async def test_a_deep_payload_stored_by_any_path_never_breaks_a_read(http, core, sqlite_store):
    # A record an older server (or any path without the check) could have left behind.
    e = await core.jobs.enqueue("default", "old", pb.TaskSpec(name="t"), pb.EnqueueOpts())
    raw = json.dumps(nested(900)).encode()

    def plant(tx) -> None:
        key = keys.QueueKeys("default", "old").job(e.job_id)
        job = pb.Job.FromString(tx.get(key))
        job.task.payload.CopyFrom(pb.Payload(data=raw, content_type="application/json", size=len(raw)))
        job.progress = raw
        tx.put(key, job.SerializeToString())

    await sqlite_store.transact(plant)
    r = await http.get("/v1/queues/old/jobs")
    assert r.status_code == 200, r.text
    (job,) = r.json()["jobs"]
    assert base64.b64decode(job["payload"]["data_base64"]) == raw
    assert (await http.get(f"/v1/queues/old/jobs/{e.job_id}")).status_code == 200


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"queue": "s", "task": {"name": "t"}, "opt": {"priority": 1}}, 'no field named "opt"'),
        ({"queue": "s", "task": {"name": "t", "payload": {"data": "!!!notb64"}}}, "task.payload.data: is not valid base64"),
        ({"queue": "s", "task": {"name": "t", "payload": {"data": "abcde"}}}, "is not valid base64"),
        ({"queue": "s", "task": {"name": "t"}, "opts": {"mode": 99}}, "99 is not a known Mode"),
        ({"queue": "s", "task": {"name": "t"}, "opts": {"attempts": 4294967295}}, "at most 100000"),
        ({"queue": "..", "task": {"name": "t"}}, "must not be only dots"),
    ],
)  # fmt: skip
async def test_connect_json_is_strict(http, body, says):
    r = await enqueue_connect(http, body)
    assert r.status_code == 400 and r.json()["code"] == "invalid_argument", r.text
    assert says in r.json()["message"]
    assert await job_count(http, "s") == 0


@pytest.mark.parametrize("raw", [b"null", b"[]", b'"x"', b"3", b"{", b"\xff"])
async def test_a_connect_body_that_is_not_one_object_is_refused_plainly(http, raw):
    r = await enqueue_connect(http, None, raw)
    assert r.status_code == 400 and r.json()["code"] == "invalid_argument", r.text
    assert "TypeError" not in r.text and "NoneType" not in r.text


async def test_valid_base64_of_either_alphabet_is_stored_as_sent(http):
    for data in ("aGk=", "aGk", "-_8=", "+/8="):
        r = await enqueue_connect(http, {"queue": "b64", "task": {"name": "t", "payload": {"data": data}}})
        assert r.status_code == 200, (data, r.text)
    jobs = (await http.get("/v1/queues/b64/jobs")).json()["jobs"]
    stored = sorted(base64.b64decode(j["payload"]["data_base64"]) for j in jobs)
    assert stored == sorted([b"hi", b"hi", b"\xfb\xff", b"\xfb\xff"])


@pytest.mark.parametrize(
    ("field", "value"),
    [("priority", "3"), ("priority", True), ("attempts", "2"), ("lifo", 1), ("delay_ns", 1.5),
     ("attempts", 4294967295), ("attempts", validate.MAX_ATTEMPTS + 1)],
)  # fmt: skip
async def test_rest_takes_numbers_and_booleans_as_they_are(http, field, value):
    r = await enqueue_rest(http, "coerce", {"name": "t", field: value})
    assert r.status_code == 400 and r.json()["code"] == "invalid_argument", r.text
    assert field in r.json()["message"]
    assert await job_count(http, "coerce") == 0


@pytest.mark.parametrize("queue", [".", "..", "..."])
async def test_dot_names_are_refused(http, core, queue):
    r = await http.post(f"/v1/queues/{queue.replace('.', '%2E')}/jobs", json={"name": "t"})
    assert r.status_code in (400, 404), r.text
    r = await enqueue_connect(http, {"queue": queue, "task": {"name": "t"}})
    assert r.status_code == 400 and "only dots" in r.json()["message"], r.text


async def test_a_long_name_is_not_echoed_whole(http):
    name = "a" * 10_000
    r = await enqueue_connect(http, {"queue": name, "task": {"name": "t"}})
    assert r.status_code == 400
    message = r.json()["message"]
    assert len(message) < 300 and "10000 characters" in message


async def test_completing_a_never_leased_job_says_so(core):
    e = await core.jobs.enqueue("acme", "q", pb.TaskSpec(name="t"), pb.EnqueueOpts())
    with pytest.raises(Fenced) as fi:
        await core.jobs.complete("acme", "q", e.job_id, 1, Ok(None))
    message = str(fi.value)
    assert "never been leased" in message and "reclaimed" not in message and "is stale" in message


async def test_completing_with_a_future_epoch_does_not_claim_a_reclaim(core):
    await core.jobs.enqueue("acme", "q", pb.TaskSpec(name="t"), pb.EnqueueOpts())
    (job,) = await core.jobs.lease("acme", ["q"], "w", 1)
    with pytest.raises(Fenced) as fi:
        await core.jobs.complete("acme", "q", job.id, job.epoch + 5, Ok(None))
    assert "reclaimed" not in str(fi.value)
    assert (await core.jobs.complete("acme", "q", job.id, job.epoch, Ok(None))).state
