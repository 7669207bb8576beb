"""The Resonate envelope protocol at the wire, against a real `loam dev`: status codes and
messages of refusals (and that a refusal changes nothing), the suspend redirect (300),
pushes on the SSE channel, namespaces kept apart, and bearer tokens."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from contextlib import contextmanager

import pytest
from devserver import start_dev_server
from durable_kit import envelope

from loam_common.auth import token_create
from loam_common.store.runner import open_store

FOREVER = 2**53


def create(url: str, promise_id: str, **tags: str) -> tuple[int, dict]:
    return envelope(
        url, "promise.create", {"id": promise_id, "timeoutAt": FOREVER, "param": {}, "tags": tags}
    )


def inner(kind: str, data: dict) -> dict:
    return {"kind": kind, "head": {"corrId": "inner", "version": "2026-04-01"}, "data": data}


@contextmanager
def sse(url: str, group: str, pid: str, token: str | None = None):
    """An open push stream; yields a function that reads the next `data:` message."""
    headers = {"accept": "text/event-stream"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    resp = urllib.request.urlopen(
        urllib.request.Request(f"{url}/poll/{group}/{pid}", headers=headers), timeout=15
    )

    def next_message() -> dict:
        while True:
            line = resp.readline().decode()
            if not line:
                raise EOFError("stream closed")
            if line.startswith("data: "):
                return json.loads(line[6:])

    try:
        yield next_message
    finally:
        resp.close()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "JSON object"),
        (json.dumps({"kind": "promise.nope", "head": {"corrId": "1", "version": "2026-04-01"}, "data": {}}).encode(), "Unknown request kind"),
        (json.dumps({"kind": "promise.get", "head": {"corrId": "1", "version": "2025-01-01"}, "data": {"id": "x"}}).encode(), "Unsupported version"),
        (json.dumps({"kind": "promise.get", "head": {"corrId": "1", "version": "2026-04-01"}, "data": []}).encode(), "data must be an object"),
    ],
)  # fmt: skip
def test_malformed_envelopes_are_400_with_the_request_echoed(durable_url, body, message):
    status, resp = envelope(durable_url, "", None, raw=body)
    assert status == 400 and resp["head"]["status"] == 400
    assert message in resp["data"] and isinstance(resp["data"], str)
    if body.startswith(b"{"):
        sent = json.loads(body)
        assert resp["kind"] == sent["kind"] and resp["head"]["corrId"] == "1"


def test_bad_input_changes_nothing(durable_url):
    status, resp = create(durable_url, "bad-target", **{"resonate:target": "nats://any@workers"})
    assert (status, resp["data"]) == (400, "Invalid resonate:target address")
    assert envelope(durable_url, "promise.get", {"id": "bad-target"})[0] == 404
    status, resp = create(durable_url, "bad-origin:1", **{"resonate:origin": "other"})
    assert status == 400 and envelope(durable_url, "promise.get", {"id": "bad-origin:1"})[0] == 404
    assert create(durable_url, "listen-1")[0] == 200
    status, resp = envelope(
        durable_url, "promise.register_listener", {"awaited": "listen-1", "address": "http://x"}
    )
    assert (status, resp["data"]) == (400, "Invalid listener address")
    status, resp = envelope(durable_url, "promise.settle", {"id": "listen-1", "state": "pending"})
    assert status == 400
    assert (
        envelope(durable_url, "promise.get", {"id": "listen-1"})[1]["data"]["promise"]["state"] == "pending"
    )
    assert envelope(durable_url, "promise.get", {"id": "nope"})[0] == 404
    assert (
        envelope(durable_url, "task.acquire", {"id": "nope", "version": 0, "pid": "p", "ttl": 1000})[0] == 404
    )


def test_create_is_200_and_idempotent_and_the_first_settle_wins(durable_url):
    status, first = create(durable_url, "idem-1")
    assert status == 200 and first["head"]["status"] == 200
    assert "settledAt" not in first["data"]["promise"]
    assert create(durable_url, "idem-1")[1]["data"] == first["data"]
    s1 = envelope(
        durable_url, "promise.settle", {"id": "idem-1", "state": "resolved", "value": {"data": "YQ=="}}
    )
    s2 = envelope(durable_url, "promise.settle", {"id": "idem-1", "state": "rejected", "value": {}})
    assert s1[0] == s2[0] == 200
    assert s2[1]["data"]["promise"]["state"] == "resolved" and s2[1]["data"]["promise"]["value"] == {
        "data": "YQ=="
    }


def test_execute_goes_to_the_group_and_acquire_fences_by_version(durable_url):
    with sse(durable_url, "Fencers", "p1") as next_message:  # groups compare in lower case
        assert create(durable_url, "fence-1", **{"resonate:target": "poll://any@fencers"})[0] == 200
        msg = next_message()
        assert msg == {"kind": "execute", "head": {}, "data": {"task": {"id": "fence-1", "version": 0}}}
    assert (
        envelope(durable_url, "task.acquire", {"id": "fence-1", "version": 5, "pid": "p1", "ttl": 60000})[0]
        == 409
    )
    status, acq = envelope(
        durable_url, "task.acquire", {"id": "fence-1", "version": 0, "pid": "p1", "ttl": 60000}
    )
    assert status == 200 and acq["data"]["task"] == {"id": "fence-1", "state": "acquired", "version": 1,
                                                     "resumes": 0, "ttl": 60000, "pid": "p1"}  # fmt: skip
    assert (
        envelope(durable_url, "task.acquire", {"id": "fence-1", "version": 0, "pid": "p2", "ttl": 60000})[0]
        == 409
    )
    status, resp = envelope(durable_url, "task.fence", {"id": "fence-1", "version": 1, "action": inner(
        "promise.create", {"id": "fence-1:1", "timeoutAt": FOREVER, "param": {}, "tags": {}})})  # fmt: skip
    assert status == 200
    assert (
        resp["data"]["action"]["head"]["status"] == 200 and resp["data"]["action"]["kind"] == "promise.create"
    )
    assert resp["data"]["action"]["data"]["promise"]["id"] == "fence-1:1"
    status, resp = envelope(durable_url, "task.fulfill", {"id": "fence-1", "version": 1, "action": inner(
        "promise.settle", {"id": "fence-1", "state": "resolved", "value": {}})})  # fmt: skip
    assert status == 200 and resp["data"]["promise"]["state"] == "resolved"
    assert envelope(durable_url, "task.get", {"id": "fence-1"})[1]["data"]["task"]["state"] == "fulfilled"


def test_suspend_redirects_when_an_awaited_promise_already_settled(durable_url):
    status, created = envelope(durable_url, "task.create", {"pid": "p", "ttl": 60000, "action": inner(
        "promise.create", {"id": "redir", "timeoutAt": FOREVER, "param": {},
                           "tags": {"resonate:target": "poll://any@nobody"}})})  # fmt: skip
    assert status == 200 and created["data"]["task"]["state"] == "acquired"
    version = created["data"]["task"]["version"]
    child = {
        "id": "redir:1",
        "timeoutAt": FOREVER,
        "param": {},
        "tags": {"resonate:target": "poll://any@nobody"},
    }
    assert (
        envelope(
            durable_url,
            "task.fence",
            {"id": "redir", "version": version, "action": inner("promise.create", child)},
        )[0]
        == 200
    )
    suspend = {
        "id": "redir",
        "version": version,
        "actions": [inner("promise.register_callback", {"awaited": "redir:1", "awaiter": "redir"})],
    }
    envelope(durable_url, "promise.settle", {"id": "redir:1", "state": "resolved", "value": {}})
    status, resp = envelope(durable_url, "task.suspend", suspend)
    assert status == 300 and [p["id"] for p in resp["data"]["preload"]] == ["redir:1"]
    assert envelope(durable_url, "task.get", {"id": "redir"})[1]["data"]["task"]["state"] == "acquired"


def test_a_suspended_task_is_resumed_by_execute_when_its_awaited_settles(durable_url):
    with sse(durable_url, "resumers", "pid-9") as next_message:
        _, created = envelope(durable_url, "task.create", {"pid": "pid-9", "ttl": 60000, "action": inner(
            "promise.create", {"id": "susp", "timeoutAt": FOREVER, "param": {},
                               "tags": {"resonate:target": "poll://any@resumers"}})})  # fmt: skip
        v = created["data"]["task"]["version"]
        child = {"id": "susp:1", "timeoutAt": FOREVER, "param": {}, "tags": {"resonate:external": "true"}}
        envelope(
            durable_url, "task.fence", {"id": "susp", "version": v, "action": inner("promise.create", child)}
        )
        suspend = {
            "id": "susp",
            "version": v,
            "actions": [inner("promise.register_callback", {"awaited": "susp:1", "awaiter": "susp"})],
        }
        assert envelope(durable_url, "task.suspend", suspend)[:1] == (200,)
        assert (
            envelope(
                durable_url,
                "promise.register_listener",
                {"awaited": "susp", "address": "poll://uni@resumers/pid-9"},
            )[0]
            == 200
        )
        envelope(durable_url, "promise.settle", {"id": "susp:1", "state": "resolved", "value": {}})
        assert next_message() == {
            "kind": "execute",
            "head": {},
            "data": {"task": {"id": "susp", "version": v}},
        }
        _, acq = envelope(
            durable_url, "task.acquire", {"id": "susp", "version": v, "pid": "pid-9", "ttl": 60000}
        )
        assert acq["data"]["task"]["resumes"] == 0 and "susp:1" in [p["id"] for p in acq["data"]["preload"]]
        envelope(durable_url, "task.fulfill", {"id": "susp", "version": v + 1, "action": inner(
            "promise.settle", {"id": "susp", "state": "resolved", "value": {"data": "ZG9uZQ=="}})})  # fmt: skip
        unblock = next_message()
        assert unblock["kind"] == "unblock" and unblock["data"]["promise"]["state"] == "resolved"


def test_namespaces_do_not_see_each_other(dev_server):
    a, b = dev_server.url + "/ns/alpha/resonate", dev_server.url + "/ns/beta/resonate"
    assert create(a, "tenant-1")[0] == 200
    assert envelope(b, "promise.get", {"id": "tenant-1"})[0] == 404
    assert envelope(b, "promise.settle", {"id": "tenant-1", "state": "resolved"})[0] == 404
    assert envelope(a, "promise.get", {"id": "tenant-1"})[1]["data"]["promise"]["state"] == "pending"


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory):
    data = tmp_path_factory.mktemp("loam-durable-auth")

    async def tokens():
        store = open_store(f"sqlite:///{data / 'loam.db'}")
        try:
            a, _ = await store.transact(token_create, "alpha", ["jobs:consume", "jobs:schedule"])
            b, _ = await store.transact(token_create, "beta", ["jobs:consume"])
            return a, b
        finally:
            await store.close()

    a, b = asyncio.run(tokens())
    server = start_dev_server(data, "--auth")
    try:
        yield server.url + "/resonate", a, b
    finally:
        server.stop()


def test_tokens_name_the_namespace_and_the_actions(auth_server):
    url, alpha, beta = auth_server
    status, resp = create(url, "secret-1")
    assert status == 401 and resp["head"]["status"] == 401
    assert envelope(url, "promise.create", {"id": "secret-1", "timeoutAt": FOREVER}, token=alpha)[0] == 200
    # head.auth works as the Authorization header does
    body = json.dumps({"kind": "promise.get", "head": {"corrId": "1", "version": "2026-04-01", "auth": alpha},
                       "data": {"id": "secret-1"}}).encode()  # fmt: skip
    assert envelope(url, "", None, raw=body)[0] == 200
    assert envelope(url, "promise.get", {"id": "secret-1"}, token=beta)[0] == 404  # beta's namespace
    status, _ = envelope(url, "schedule.create", {"id": "s", "cron": "* * * * *", "promiseId": "s-{{.timestamp}}",
                                                  "promiseTimeout": 1000, "promiseParam": {},
                                                  "promiseTags": {"resonate:target": "poll://any@w"}}, token=beta)  # fmt: skip
    assert status == 403
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"{url}/poll/g/p", timeout=5)
    assert e.value.code == 401


def test_the_rest_facade_shows_a_promise_tree_and_sets_retention(dev_server):
    url = dev_server.url + "/ns/visible/resonate"
    _, created = envelope(url, "task.create", {"pid": "p", "ttl": 60000, "action": inner(
        "promise.create", {"id": "vis", "timeoutAt": FOREVER, "param": {},
                           "tags": {"resonate:target": "poll://any@nobody"}})})  # fmt: skip
    v = created["data"]["task"]["version"]
    for child in ("vis:1", "vis:2"):
        envelope(url, "task.fence", {"id": "vis", "version": v, "action": inner(
            "promise.create", {"id": child, "timeoutAt": FOREVER, "param": {}, "tags": {"resonate:parent": "vis"}})})  # fmt: skip
    envelope(url, "task.fence", {"id": "vis", "version": v, "action": inner(
        "promise.settle", {"id": "vis:1", "state": "resolved", "value": {}})})  # fmt: skip
    tree = json.loads(
        urllib.request.urlopen(f"{dev_server.url}/ns/visible/v1/durable/promises/vis", timeout=5).read()
    )
    assert [n["promise"]["id"] for n in tree["promises"]] == ["vis", "vis:1", "vis:2"]
    assert [n["promise"]["state"] for n in tree["promises"]] == ["pending", "resolved", "pending"]
    assert tree["promises"][0]["task"]["state"] == "acquired" and tree["promises"][0]["task"]["attempts"] == 1
    assert tree["promises"][1]["parent"] == "vis"
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"{dev_server.url}/ns/visible/v1/durable/promises/none", timeout=5)
    assert e.value.code == 404
    req = urllib.request.Request(f"{dev_server.url}/ns/visible/v1/durable/retention", method="PUT",
                                 data=json.dumps({"retention_ms": 60000}).encode(),
                                 headers={"content-type": "application/json"})  # fmt: skip
    assert json.loads(urllib.request.urlopen(req, timeout=5).read()) == {"retention_ms": 60000}
    got = json.loads(
        urllib.request.urlopen(f"{dev_server.url}/ns/visible/v1/durable/retention", timeout=5).read()
    )
    assert got == {"retention_ms": 60000}


def test_the_rest_facade_lists_durable_executions_a_page_at_a_time(dev_server):
    url = dev_server.url + "/ns/listed/resonate"
    rest = f"{dev_server.url}/ns/listed/v1/durable/executions"

    def page(**params) -> dict:
        return json.loads(
            urllib.request.urlopen(f"{rest}?{urllib.parse.urlencode(params)}", timeout=5).read()
        )

    for root in ("run-a", "run-b", "run-c", "run-b2", "other"):
        create(url, root)
        for child in (f"{root}:1", f"{root}:1.1", f"{root}:2"):
            create(url, child, **{"resonate:parent": root})
    envelope(url, "promise.settle", {"id": "run-b", "state": "resolved", "value": {}})
    envelope(url, "promise.settle", {"id": "run-c", "state": "rejected", "value": {}})

    ids = lambda p: [e["promise"]["id"] for e in p["executions"]]  # noqa: E731
    everything = page()
    assert ids(everything) == ["other", "run-a", "run-b", "run-b2", "run-c"]  # roots only, in id order
    assert "cursor" not in everything
    assert [e["promise"]["state"] for e in everything["executions"]] == [
        "pending",
        "pending",
        "resolved",
        "pending",
        "rejected",
    ]
    assert ids(page(state="pending")) == ["other", "run-a", "run-b2"]
    assert ids(page(state="rejected")) == ["run-c"]
    assert ids(page(id_prefix="run-b")) == ["run-b", "run-b2"]
    seen, cursor = [], ""
    while True:  # two at a time, by cursor, every root once
        p = page(limit=2, cursor=cursor, id_prefix="run")
        seen += ids(p)
        if not p.get("cursor"):
            break
        cursor = p["cursor"]
    assert seen == ["run-a", "run-b", "run-b2", "run-c"]
    for bad in ({"state": "done"}, {"limit": 0}, {"limit": 201}):
        with pytest.raises(urllib.error.HTTPError) as e:
            page(**bad)
        assert e.value.code == 400, bad
    other_ns = f"{dev_server.url}/ns/elsewhere/v1/durable/executions"
    assert json.loads(urllib.request.urlopen(other_ns, timeout=5).read()) == {"executions": []}


def test_durable_changes_are_events_in_the_event_log(dev_server):
    url = dev_server.url + "/ns/evented/resonate"
    create(url, "ev-0")  # the namespace's durable event log exists from its first change
    stream = urllib.request.urlopen(
        f"{dev_server.url}/ns/evented/v1/queues/durable/events?data=json", timeout=10
    )
    create(url, "ev-1")
    envelope(url, "promise.settle", {"id": "ev-1", "state": "resolved", "value": {}})
    seen: list[str] = []
    while "io.loams.dev.jobs.durable.promise.settled.v1" not in seen:
        line = stream.readline().decode()
        if line.startswith("data:"):
            event = json.loads(line[5:])
            if event.get("subject") == "ev-1":
                seen.append(event["type"])
    stream.close()
    assert seen == [
        "io.loams.dev.jobs.durable.promise.created.v1",
        "io.loams.dev.jobs.durable.promise.settled.v1",
    ]


def test_resonate_schedules_show_in_loams_schedule_list(dev_server):
    url = dev_server.url + "/ns/listed/resonate"
    param = {"data": "eyJmdW5jIjogInJlcG9ydCJ9"}  # {"func": "report"}
    status, _ = envelope(url, "schedule.create", {"id": "nightly", "cron": "0 3 * * *", "promiseId": "{{.id}}-{{.timestamp}}",
                                                  "promiseTimeout": 60000, "promiseParam": param,
                                                  "promiseTags": {"resonate:target": "poll://any@reports"}})  # fmt: skip
    assert status == 200
    listed = json.loads(urllib.request.urlopen(f"{dev_server.url}/ns/listed/v1/schedules", timeout=5).read())
    durable = [s for s in listed["schedules"] if s["id"] == "resonate:nightly"]
    assert len(durable) == 1 and durable[0]["cron"] == "0 3 * * *"
    assert "report" in json.dumps(durable[0])


def test_the_base_url_answers_with_or_without_its_slash(dev_server):
    # the TypeScript SDK posts to `{base}`, the Python SDK to `{base}/`
    status, resp = envelope(dev_server.url + "/resonate", "promise.get", {"id": "nothing"})
    assert status == 404 and resp["kind"] == "promise.get"
    req = urllib.request.Request(dev_server.url + "/resonate", method="POST", data=json.dumps(
        {"kind": "promise.get", "head": {"corrId": "c", "version": "2026-04-01"}, "data": {"id": "nothing"}}).encode(),
        headers={"content-type": "application/json"})  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 404 and json.loads(e.value.read())["head"]["corrId"] == "c"
