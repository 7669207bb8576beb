"""The REST the console added for every client (rest_console, rest_search, rest_batches), through the
gateway app with a `StoreAuthenticator`: whoami, the viewer role (`jobs:read` reads and
may change nothing), change-priority, the queue stats, the several-queue event stream
resumed from its cursor, and the console's static files with the deep-link fallback."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from loam_common import auth
from loam_common.blobs import DirBlobStore
from loam_gateway.app import create_app
from loam_gateway.auth import StoreAuthenticator
from loam_gateway.routing import Router
from loam_queue_core import QueueCore
from loam_queue_core.rpc import CoreRpc


@pytest.fixture
async def gateway(store, tmp_path):
    core = QueueCore(store, DirBlobStore(tmp_path / "blobs"))
    app = create_app(Router(local=CoreRpc(core)), StoreAuthenticator(store))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        yield client


@pytest.fixture
def token(store):
    async def _token(ns: str, *actions: str) -> dict[str, str]:
        t, _ = await store.transact(auth.token_create, ns, list(actions), "", None)
        return {"authorization": f"Bearer {t}"}

    return _token


async def enqueue(gw, who, queue: str, name: str = "send") -> str:
    r = await gw.post(f"/v1/queues/{queue}/jobs", json={"name": name, "data": {"n": 1}}, headers=who)
    assert r.status_code == 200, r.text
    return r.json()["job"]


def sse_messages(text: str) -> list[dict[str, str]]:
    out = []
    for block in text.split("\n\n"):
        msg: dict[str, str] = {}
        for line in block.splitlines():
            key, _, value = line.partition(": ")
            if key in ("id", "event", "data"):
                msg[key] = value
        if msg:
            out.append(msg)
    return out


async def test_whoami_names_the_tokens_namespace_and_actions(gateway, token):
    viewer = await token("acme", auth.READ)
    r = await gateway.get("/v1/whoami", headers=viewer)
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["namespace"], body["actions"], body["auth"]) == ("acme", ["jobs:read"], True)
    assert len(body["token_id"]) == 16
    r = await gateway.get("/v1/whoami")
    assert (r.status_code, r.json()["code"]) == (401, "unauthenticated")
    r = await gateway.get("/v1/whoami", headers={**viewer, "x-loam-namespace": "rival"})
    assert (r.status_code, r.json()["code"]) == (403, "permission_denied")


async def test_a_viewer_reads_everything_and_changes_nothing(gateway, token, dump):
    admin = await token("acme", *sorted(auth.ACTIONS - {auth.READ}))
    viewer = await token("acme", auth.READ)
    job = await enqueue(gateway, admin, "emails")
    for path in ("/v1/queues", "/v1/queues:stats", "/v1/queues/emails", "/v1/queues/emails/jobs?state=waiting",
                 f"/v1/queues/emails/jobs/{job}", f"/v1/queues/emails/jobs/{job}/children",
                 "/v1/queues/emails/workers", "/v1/schedules"):  # fmt: skip
        r = await gateway.get(path, headers=viewer)
        assert r.status_code == 200, (path, r.text)
    before = await dump()
    for method, path, body in [
        ("POST", f"/v1/queues/emails/jobs/{job}:cancel", None),
        ("POST", f"/v1/queues/emails/jobs/{job}:remove", None),
        ("POST", f"/v1/queues/emails/jobs/{job}:change-priority", {"priority": 3}),
        ("POST", "/v1/queues/emails:pause", None),
        ("POST", "/v1/queues/emails:drain", None),
        ("POST", "/v1/queues/emails/jobs", {"name": "x"}),
        ("PUT", "/v1/schedules/s", {"queue": "emails", "name": "x", "every_ns": 10**9}),
    ]:
        r = await gateway.request(method, path, json=body, headers=viewer)
        assert (r.status_code, r.json()["code"]) == (403, "permission_denied"), (path, r.text)
    assert await dump() == before
    # jobs:read is its own action: it does not come with jobs:admin, and admin alone still reads
    r = await gateway.get("/v1/queues/emails", headers=await token("acme", auth.ENQUEUE))
    assert r.status_code == 403


async def test_change_priority_moves_a_waiting_job_and_refuses_bad_input(gateway, token, dump):
    admin = await token("acme", auth.ADMIN, auth.ENQUEUE)
    job = await enqueue(gateway, admin, "emails")
    r = await gateway.post(
        f"/v1/queues/emails/jobs/{job}:change-priority", json={"priority": 9}, headers=admin
    )
    assert r.status_code == 200, r.text
    assert (r.json()["job"]["priority"], r.json()["job"]["state"]) == (9, "prioritized")
    before = await dump()
    for body in ({"priority": -1}, {"priority": 2**21}, {}, {"priority": 1, "extra": 1}):
        r = await gateway.post(f"/v1/queues/emails/jobs/{job}:change-priority", json=body, headers=admin)
        assert (r.status_code, r.json()["code"]) == (400, "invalid_argument"), (body, r.text)
    r = await gateway.post("/v1/queues/emails/jobs/nope:change-priority", json={"priority": 1}, headers=admin)
    assert r.status_code == 404
    assert await dump() == before


async def test_queue_stats_give_the_oldest_waiting_age_and_totals(gateway, token, clock):
    # A namespace of its own: the metrics the stats read are per process, and other
    # tests in the same run count jobs of their queues in the usual namespaces.
    admin = await token("stats-only", auth.ADMIN, auth.ENQUEUE)
    other = await token("rival", auth.ADMIN, auth.ENQUEUE)
    await enqueue(gateway, admin, "emails")
    await enqueue(gateway, admin, "emails")
    await enqueue(gateway, other, "hidden")
    clock.advance(5 * 10**9)
    r = await gateway.get("/v1/queues:stats", headers=admin)
    assert r.status_code == 200, r.text
    (emails,) = r.json()["queues"]  # the rival's queue is not listed
    assert emails["name"] == "emails" and emails["enqueued_total"] == 2
    assert emails["oldest_waiting_age_ns"] >= 5 * 10**9


async def test_one_stream_carries_several_queues_and_resumes_from_its_cursor(gateway, token):
    admin = await token("acme", auth.ADMIN, auth.ENQUEUE, auth.CONSUME)
    await enqueue(gateway, admin, "a")
    await enqueue(gateway, admin, "b")

    async def watch(limit: int, cursor: str | None = None) -> list[dict[str, str]]:
        params = {
            "queue": ["a", "b"],
            "data": "json",
            "limit": limit,
            **({"cursor": cursor} if cursor else {}),
        }
        r = await gateway.get("/v1/events", params=params, headers=admin)
        assert r.status_code == 200, r.text
        return sse_messages(r.text)

    streaming = asyncio.create_task(watch(4))
    await asyncio.sleep(0.2)  # the stream has taken its snapshot
    ja, jb = await enqueue(gateway, admin, "a", "first"), await enqueue(gateway, admin, "b", "second")
    msgs = await asyncio.wait_for(streaming, 10)
    snapshots = [json.loads(m["data"]) for m in msgs if m.get("event") == "snapshot"]
    assert sorted(s["queue"] for s in snapshots) == ["a", "b"]
    assert {s["queue"]: s["counts"]["waiting"] for s in snapshots} == {"a": 1, "b": 1}
    events = [m for m in msgs if m.get("event", "").startswith("io.loams.dev.jobs.")]
    seen = {json.loads(e["data"])["data"]["job_id"] for e in events}
    assert seen == {ja, jb}

    # resume after the last event: what follows, nothing repeated, both queues still watched
    resumed = asyncio.create_task(watch(2, events[-1]["id"]))
    await asyncio.sleep(0.2)
    jc = await enqueue(gateway, admin, "b", "third")
    later = [
        m for m in await asyncio.wait_for(resumed, 10) if m.get("event", "").startswith("io.loams.dev.jobs.")
    ]
    assert [(m["event"], json.loads(m["data"])["data"]["job_id"]) for m in later] == [
        ("io.loams.dev.jobs.added.v1", jc),
        ("io.loams.dev.jobs.waiting.v1", jc),
    ]
    assert not any(m.get("event") == "snapshot" for m in await asyncio.wait_for(resumed, 0))

    r = await gateway.get("/v1/events", params={"queue": "a", "cursor": "not-a-cursor!"}, headers=admin)
    assert (r.status_code, r.json()["code"]) == (400, "invalid_argument")
    r = await gateway.get("/v1/events", params={"queue": [f"q{i}" for i in range(51)]}, headers=admin)
    assert r.status_code == 400


async def test_the_console_is_served_with_deep_links(gateway, tmp_path, monkeypatch):
    dist = tmp_path / "dist"
    (dist / "assets").mkdir(parents=True)
    (dist / "index.html").write_text("<!doctype html><title>app</title>")
    (dist / "assets" / "app-abc.js").write_text("console.log(1)")
    (tmp_path / "secret.txt").write_text("no")
    monkeypatch.setenv("LOAM_CONSOLE_DIR", str(dist))
    r = await gateway.get("/console/queues/emails/jobs/1?state=failed")
    assert r.status_code == 200 and "<title>app</title>" in r.text
    assert r.headers["cache-control"] == "no-cache"
    r = await gateway.get("/console/assets/app-abc.js")
    assert r.status_code == 200 and "immutable" in r.headers["cache-control"]
    assert (await gateway.get("/console/assets/app-gone.js")).status_code == 404
    r = await gateway.get("/console/..%2Fsecret.txt")
    assert "no" != r.text and "<title>app</title>" in r.text
    r = await gateway.get("/console")
    assert r.status_code == 308 and r.headers["location"] == "/console/"
    monkeypatch.setenv("LOAM_CONSOLE_DIR", str(tmp_path / "missing"))
    r = await gateway.get("/console/")
    assert r.status_code == 503 and "make console" in r.text


async def test_the_queue_list_counts_every_queue_of_the_namespace_only(gateway, token):
    admin = await token("acme", auth.ADMIN, auth.ENQUEUE)
    rival = await token("rival", auth.ADMIN, auth.ENQUEUE)
    for queue, n in (("a", 3), ("b", 1)):
        for _ in range(n):
            await enqueue(gateway, admin, queue)
    await enqueue(gateway, rival, "c")
    r = await gateway.post("/v1/queues/b:pause", headers=admin)
    assert r.status_code == 200, r.text
    r = await gateway.get("/v1/queues", headers=admin)
    got = {q["name"]: (q["counts"]["waiting"], q["counts"]["paused"]) for q in r.json()["queues"]}
    assert got == {"a": (3, False), "b": (1, True)}


async def test_search_finds_jobs_by_payload_error_and_id_and_goes_on_by_cursor(gateway, token, monkeypatch):
    from loam_gateway import rest_search

    admin = await token("acme", auth.ADMIN, auth.ENQUEUE, auth.CONSUME)
    ids = []
    for i in range(30):
        r = await gateway.post("/v1/queues/emails/jobs", json={"name": "send", "data": {"to": f"user{i}@Example.com"}},
                               headers=admin)  # fmt: skip
        ids.append(r.json()["job"])

    async def search(**params) -> dict:
        r = await gateway.get("/v1/queues/emails/jobs:search", params=params, headers=admin)
        assert r.status_code == 200, r.text
        return r.json()

    got = await search(text="USER7@example", **{"in": "payload"})
    assert [j["id"] for j in got["jobs"]] == [ids[7]] and got["next_page_token"] == ""
    assert (await search(text=ids[3][-10:], **{"in": "id"}))["jobs"][0]["id"] == ids[3]
    assert (await search(text="user7", **{"in": "error"}))["jobs"] == []
    assert len((await search(text="example.com", state="waiting"))["jobs"]) == 30

    # a call that examines few jobs answers short, and the cursor finds the rest, each once
    monkeypatch.setattr(rest_search, "SEARCH_CHUNK", 4)
    monkeypatch.setattr(rest_search, "SEARCH_EXAMINED", 8)
    seen, token_ = [], ""
    while True:
        page = await search(text="user1", page_token=token_) if token_ else await search(text="user1")
        assert page["examined"] <= 8
        seen += [j["id"] for j in page["jobs"]]
        token_ = page["next_page_token"]
        if not token_:
            break
    assert sorted(seen) == sorted(ids[i] for i in (1, *range(10, 20)))

    for bad in ({"text": ""}, {"text": "x", "in": "nowhere"}, {"text": "x", "page_size": 0}):
        r = await gateway.get("/v1/queues/emails/jobs:search", params=bad, headers=admin)
        assert (r.status_code, r.json()["code"]) == (400, "invalid_argument"), bad


async def wait_batch(gw, who, batch: dict) -> dict:
    """Follow a batch by long polls on its record until it is done."""
    for _ in range(200):
        if batch["state"] == "done":
            return batch
        r = await gw.get(f"/v1/batches/{batch['id']}", params={"after_version": batch["version"], "wait_ms": 2000},
                         headers=who)  # fmt: skip
        assert r.status_code == 200, r.text
        batch = r.json()
    raise AssertionError("the batch did not finish")


async def test_a_batch_acts_on_a_selection_or_a_filter_and_records_failures(gateway, token, dump):
    admin = await token("acme", auth.ADMIN, auth.ENQUEUE)
    viewer = await token("acme", auth.READ)
    ids = [await enqueue(gateway, admin, "emails", "send" if i % 2 else "ping") for i in range(10)]

    r = await gateway.post("/v1/queues/emails/batches", json={"action": "cancel", "ids": [*ids[:3], "missing"]},
                           headers=admin)  # fmt: skip
    assert r.status_code == 202, r.text
    done = await wait_batch(gateway, viewer, r.json() | {"version": 0})
    assert (done["total"], done["done"], done["succeeded"], done["failed"]) == (4, 4, 3, 1)
    assert done["failures"][0]["job"] == "missing" and done["failures"][0]["code"] == "not_found"
    assert done["by"] and done["finished_ns"] >= done["started_ns"]
    assert (await gateway.get("/v1/queues/emails", headers=admin)).json()["counts"]["canceled"] == 3

    # every waiting job named "ping": the filter is read when the batch runs
    body = {"action": "remove", "filter": {"state": "waiting", "name": "ping"}}
    r = await gateway.post("/v1/queues/emails/batches", json=body, headers=admin)
    done = await wait_batch(gateway, admin, r.json() | {"version": 0})
    assert (done["total"], done["succeeded"], done["failed"]) == (
        3,
        3,
        0,
    )  # ids 4, 6, 8 (0 and 2 were canceled)
    r = await gateway.get("/v1/queues/emails/jobs", params={"state": "waiting"}, headers=admin)
    assert sorted(j["id"] for j in r.json()["jobs"]) == sorted(ids[i] for i in (3, 5, 7, 9))

    before = await dump()
    for bad in ({"action": "retry"}, {"action": "retry", "ids": []}, {"action": "explode", "ids": ["x"]},
                {"action": "retry", "ids": ["x"], "filter": {"state": "failed"}}):  # fmt: skip
        r = await gateway.post("/v1/queues/emails/batches", json=bad, headers=admin)
        assert (r.status_code, r.json()["code"]) == (400, "invalid_argument"), (bad, r.text)
    r = await gateway.post("/v1/queues/nope/batches", json={"action": "retry", "ids": ["x"]}, headers=admin)
    assert r.status_code == 404
    r = await gateway.post(
        "/v1/queues/emails/batches", json={"action": "retry", "ids": ["x"]}, headers=viewer
    )
    assert r.status_code == 403
    assert await dump() == before
    assert (await gateway.get("/v1/batches/0123456789abcdef", headers=admin)).status_code == 404


async def test_edit_then_retry_and_the_redrive_preview(gateway, token, dump):
    admin = await token("acme", *sorted(auth.ACTIONS))
    for queue, cfg in (("orders-dlq", {}), ("orders", {"dead_letter_queue": "orders-dlq", "attempts": 1})):
        r = await gateway.post("/loam.jobs.v1.JobsService/QueueAdmin", headers=admin,
                               json={"queue": queue, "op": {"create": {"config": {"name": queue, **cfg}}}})  # fmt: skip
        assert r.status_code == 200, r.text
    first = await enqueue(gateway, admin, "orders", "charge")
    await enqueue(gateway, admin, "orders", "charge")
    for _ in range(2):
        r = await gateway.post(
            "/loam.jobs.v1.JobsService/Lease", headers=admin, json={"queues": ["orders"], "worker": "w"}
        )
        (lease,) = r.json()["leases"]
        r = await gateway.post("/loam.jobs.v1.JobsService/Complete", headers=admin,
                               json={"token": lease["token"], "outcome": {"fail": {"error": {"message": "bad card"}, "dead_letter": True}}})  # fmt: skip
        assert r.status_code == 200, r.text

    r = await gateway.get("/v1/queues/orders-dlq/dead-letters:preview", headers=admin)
    assert r.status_code == 200, r.text
    preview = r.json()
    assert preview["ready"] == 2 and preview["to_queues"] == {"orders": 2}
    assert {m["job"]["origin_queue"] or "orders" for m in preview["sample"]} == {"orders"}
    assert (await gateway.get("/v1/queues/orders", headers=admin)).json()["counts"][
        "waiting"
    ] == 0  # a preview moves nothing

    # a waiting job is refused before its payload changes
    waiting = await enqueue(gateway, admin, "orders", "charge")
    before = await dump()
    r = await gateway.post(
        f"/v1/queues/orders/jobs/{waiting}:retry-with-payload", json={"data": {"card": "new"}}, headers=admin
    )
    assert (r.status_code, r.json()["code"]) == (400, "failed_precondition"), r.text
    assert await dump() == before
    # a dead-lettered one runs again with the new payload
    r = await gateway.post(
        f"/v1/queues/orders/jobs/{first}:retry-with-payload", json={"data": {"card": "new"}}, headers=admin
    )
    assert r.status_code == 200, r.text
    job = (await gateway.get(f"/v1/queues/orders/jobs/{first}", headers=admin)).json()["job"]
    assert job["state"] == "waiting" and job["payload"]["data"] == {"card": "new"}


async def test_failures_are_grouped_by_signature_and_a_group_is_retried_as_a_batch(gateway, token):
    admin = await token("acme", *sorted(auth.ACTIONS))
    r = await gateway.post("/loam.jobs.v1.JobsService/QueueAdmin", headers=admin,
                           json={"queue": "pay", "op": {"create": {"config": {"name": "pay", "attempts": 1}}}})  # fmt: skip
    assert r.status_code == 200, r.text
    messages = [f"card {1000 + i} declined" for i in range(4)] + [
        "KeyError: 'user_7'",
        "KeyError: 'user_9'",
        "boom",
    ]
    for message in messages:
        await enqueue(gateway, admin, "pay", "charge")
        r = await gateway.post(
            "/loam.jobs.v1.JobsService/Lease", headers=admin, json={"queues": ["pay"], "worker": "w"}
        )
        (lease,) = r.json()["leases"]
        r = await gateway.post("/loam.jobs.v1.JobsService/Complete", headers=admin,
                               json={"token": lease["token"], "outcome": {"fail": {"error": {"message": message, "code": "E"}}}})  # fmt: skip
        assert r.status_code == 200, r.text
    r = await gateway.get("/v1/queues/pay/failures", headers=admin)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["complete"] and body["examined"] == 7
    got = [(g["signature"], g["count"]) for g in body["groups"]]
    assert got == [("E: card # declined", 4), ("E: KeyError: '…'", 2), ("E: boom", 1)]
    assert body["groups"][0]["first_seen_ns"] <= body["groups"][0]["last_seen_ns"]

    r = await gateway.post("/v1/queues/pay/batches", headers=admin,
                           json={"action": "retry", "filter": {"state": "failed", "signature": "E: KeyError: '…'"}})  # fmt: skip
    done = await wait_batch(gateway, admin, r.json() | {"version": 0})
    assert (done["total"], done["succeeded"]) == (2, 2)
    counts = (await gateway.get("/v1/queues/pay", headers=admin)).json()["counts"]
    assert (counts["failed"], counts["waiting"]) == (5, 2)


async def test_export_streams_the_filtered_set_as_ndjson_json_or_csv(gateway, token):
    import csv
    import io

    admin = await token("acme", auth.ADMIN, auth.ENQUEUE)
    for i in range(7):
        await gateway.post(
            "/v1/queues/emails/jobs",
            json={"name": "send" if i % 2 else "ping", "data": {"n": i}},
            headers=admin,
        )
    r = await gateway.get(
        "/v1/queues/emails/jobs:export", params={"format": "ndjson", "name": "send"}, headers=admin
    )
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(x) for x in r.text.splitlines()]
    assert sorted(x["payload"]["data"]["n"] for x in lines) == [1, 3, 5]
    r = await gateway.get("/v1/queues/emails/jobs:export", params={"format": "json", "text": '"n": 4', "in": "payload"},
                          headers=admin)  # fmt: skip
    assert [x["payload"]["data"]["n"] for x in r.json()] == [4]
    r = await gateway.get(
        "/v1/queues/emails/jobs:export", params={"format": "csv", "limit": 2}, headers=admin
    )
    rows = list(csv.reader(io.StringIO(r.text)))
    assert rows[0][:4] == ["id", "queue", "name", "state"] and len(rows) == 3
    r = await gateway.get("/v1/queues/nope/jobs:export", headers=admin)
    assert r.status_code == 404
