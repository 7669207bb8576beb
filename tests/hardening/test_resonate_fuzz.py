"""Hypothesis over the Resonate envelope endpoint (`POST /resonate/`), through the
gateway app in process on the real SQLite store: unknown kinds, wrong versions, heads
and data that are not objects, each kind's fields with values of the wrong type, bad
target and listener addresses, stale task versions against a task that exists, deep
and huge JSON. Every answer is the server's own refusal (400, 404, 409, 413, 422) or a
success, never a 500; a refused envelope leaves every key of the store as it was."""

from __future__ import annotations

import json
import uuid

import pytest
from gateway_kit import JSON, client_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loam_durable.facade import DurableCore
from loam_durable.hub import Hub

from loam_gateway.app import create_app
from loam_gateway.durable_mount import DurableMount
from loam_gateway.routing import Router
from loam_queue_core.rpc import CoreRpc

VERSION = "2026-04-01"
NS = "fuzz"
FOREVER = 2**53
REFUSALS = {400, 404, 409, 413, 422}
SUCCESS = {200, 300}  # 300: a suspend answered with "resume now"
KINDS = [
    "promise.get", "promise.create", "promise.settle", "promise.register_listener", "promise.register_callback",
    "promise.search", "task.create", "task.acquire", "task.get", "task.fence", "task.suspend", "task.fulfill",
    "task.release", "task.heartbeat", "schedule.create", "schedule.get", "schedule.delete", "schedule.search",
]  # fmt: skip
SETTINGS = settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
#: the field names the kinds read, so fuzzed data reaches the checks behind the envelope's
FIELDS = ["id", "timeoutAt", "param", "value", "tags", "state", "version", "pid", "ttl", "awaited", "address",
          "action", "promiseId", "cron", "promiseTimeout", "promiseParam", "promiseTags", "filter", "limit",
          "cursor", "ikey", "strict", "data", "headers", "resonate:target"]  # fmt: skip

json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.text(max_size=20)
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
addresses = st.one_of(
    st.text(max_size=30),
    st.sampled_from(
        [
            "poll://any@",
            "poll://",
            "http://x",
            "nats://any@w",
            "poll://uni@g/",
            "poll://any@g/p/q",
            "poll://any@" + "g" * 300,
            "poll://any@UPPER",
            "poll://bogus@g",
        ]
    ),  # fmt: skip
)


@st.composite
def data_objects(draw) -> dict:
    """An object with some of the kinds' field names, holding any JSON (wrong types
    mostly), sometimes with a tag carrying a (bad) address."""
    out = draw(st.dictionaries(st.sampled_from(FIELDS), json_value, max_size=6))
    if draw(st.booleans()):
        out["tags"] = {"resonate:target": draw(addresses), "resonate:origin": draw(st.text(max_size=12))}
    if draw(st.booleans()):
        out["address"] = draw(addresses)
    return out


@st.composite
def envelopes(draw) -> bytes:
    kind = draw(st.one_of(st.sampled_from(KINDS), st.text(max_size=20)))
    version = draw(st.one_of(st.just(VERSION), st.text(max_size=12), json_leaf))
    head = draw(st.one_of(st.fixed_dictionaries({"corrId": st.text(max_size=8), "version": st.just(version)}),
                          json_value))  # fmt: skip
    data = draw(st.one_of(data_objects(), json_value))
    body = {"kind": kind, "head": head, "data": data}
    for key in draw(st.sets(st.sampled_from(["kind", "head", "data"]), max_size=1)):
        del body[key]
    return json.dumps(body).encode()


def envelope(kind: str, data: dict) -> bytes:
    return json.dumps({"kind": kind, "head": {"corrId": "c", "version": VERSION}, "data": data}).encode()


@st.composite
def stale_task_calls(draw) -> bytes:
    """The task calls, against the task the fixture holds acquired at version 1, with
    any other version (a fenced worker) or a pid not its own."""
    kind = draw(st.sampled_from(["task.acquire", "task.fence", "task.fulfill", "task.suspend", "task.release",
                                 "task.heartbeat"]))  # fmt: skip
    version = draw(st.integers(-5, 2**40).filter(lambda v: v != 1))
    action = {"kind": "promise.settle", "head": {"corrId": "i", "version": VERSION},
              "data": {"id": "held", "state": "resolved", "value": {}}}  # fmt: skip
    data = {"id": "held", "version": version, "pid": draw(st.sampled_from(["p1", "p2"])), "ttl": 60000,
            "action": action, "actions": [action]}  # fmt: skip
    return envelope(kind, data)


@pytest.fixture
async def durable(core, sqlite_store):
    """The gateway with durable mode, and a task `held` acquired (version 1) by p1."""
    dcore = DurableCore(sqlite_store, Hub())
    app = create_app(Router(local=CoreRpc(core)), durable=DurableMount(dcore, dcore.hub))
    async with client_for(app) as http:

        async def post(body: bytes):
            return await http.post("/resonate/", content=body, headers={**JSON, "x-loam-namespace": NS})

        tags = {"resonate:target": "poll://any@workers"}
        r = await post(
            envelope("promise.create", {"id": "held", "timeoutAt": FOREVER, "param": {}, "tags": tags})
        )
        assert r.status_code == 200, r.text
        r = await post(envelope("task.acquire", {"id": "held", "version": 0, "pid": "p1", "ttl": 600_000}))
        assert r.status_code == 200 and r.json()["data"]["task"]["version"] == 1, r.text
        post.http = http
        yield post


def dump(tx) -> list[tuple[bytes, bytes]]:
    return list(tx.scan(b"", b"\xff" * 8))


async def _refused_changes_nothing(post, store, body: bytes) -> None:
    before = await store.snapshot(dump)
    r = await post(body)
    assert r.status_code in REFUSALS | SUCCESS, (r.status_code, r.text[:300], body[:300])
    answer = r.json()  # always an envelope (or a plain message), never a server's error page
    if r.status_code in REFUSALS:
        assert isinstance(answer, (dict, str))
        assert await store.snapshot(dump) == before, f"a refused envelope changed the store: {body[:300]!r}"


@given(body=envelopes())
@SETTINGS
async def test_malformed_envelopes_are_refused_and_change_nothing(durable, sqlite_store, body):
    await _refused_changes_nothing(durable, sqlite_store, body)


@given(body=stale_task_calls())
@SETTINGS
async def test_stale_task_versions_are_fenced_and_change_nothing(durable, sqlite_store, body):
    before = await sqlite_store.snapshot(dump)
    r = await durable(body)
    assert r.status_code in REFUSALS, (r.status_code, r.text[:300], body[:300])
    assert await sqlite_store.snapshot(dump) == before


@given(raw=st.one_of(st.binary(max_size=64), st.text(max_size=64).map(str.encode)))
@SETTINGS
async def test_bodies_that_are_not_json_are_400(durable, sqlite_store, raw):
    await _refused_changes_nothing(durable, sqlite_store, raw)


@pytest.mark.parametrize("depth", [64, 1_000, 4_000, 100_000])
async def test_deep_json_is_refused_or_stored_never_a_500(durable, sqlite_store, depth):
    deep = "[" * depth + "]" * depth
    head = json.dumps({"corrId": "d", "version": VERSION})
    body = (f'{{"kind":"promise.create","head":{head},"data":{{"id":"deep-{depth}","timeoutAt":{FOREVER},'
            f'"param":{{"data":{deep}}},"tags":{{}}}}}}').encode()  # fmt: skip
    await _refused_changes_nothing(durable, sqlite_store, body)
    await _refused_changes_nothing(durable, sqlite_store, deep.encode())  # the whole body one deep array
    # whatever was stored reads back, through the envelope and the console's REST view
    got = await durable(envelope("promise.get", {"id": f"deep-{depth}"}))
    assert got.status_code in (200, 404), got.text[:300]
    tree = await durable.http.get(f"/v1/durable/promises/deep-{depth}", headers={"x-loam-namespace": NS})
    assert tree.status_code == (200 if got.status_code == 200 else 404), tree.text[:300]


async def test_a_body_over_the_limit_is_refused_and_changes_nothing(durable, sqlite_store):
    big = "x" * (17 * 1024 * 1024)
    body = envelope("promise.create", {"id": f"big-{uuid.uuid4().hex}", "timeoutAt": FOREVER,
                                       "param": {"data": big}, "tags": {}})  # fmt: skip
    await _refused_changes_nothing(durable, sqlite_store, body)
