"""`POST /resonate/` is served ahead of the gateway's general request path (a durable
step is two of them), so the request guard's checks run there too: a foreign Host, a
foreign Origin or a write a page could send cross-origin without a preflight are refused
before anything is read, a body over the limit gets 413, an allowed origin gets its
CORS headers, and none of the refused requests changes the store. In process, the
gateway app every gateway command serves, on an in-memory store."""

from __future__ import annotations

import contextlib
import json

import httpx
import pytest
from inproc import served
from loam_durable.facade import DurableCore
from loam_durable.hub import Hub

from loam_common.direct_http import Route
from loam_common.store.runner import open_store
from loam_gateway.app import create_app
from loam_gateway.durable_mount import DurableMount
from loam_gateway.guard import GuardPolicy
from loam_gateway.routing import Router

VERSION = "2026-04-01"
OPS = "https://ops.example"


def _create(promise_id: str) -> bytes:
    return json.dumps({"kind": "promise.create", "head": {"corrId": "c1", "version": VERSION},
                       "data": {"id": promise_id, "timeoutAt": 2**50, "param": {}, "tags": {}}}).encode()  # fmt: skip


def _get(promise_id: str) -> bytes:
    return json.dumps({"kind": "promise.get", "head": {"corrId": "c2", "version": VERSION},
                       "data": {"id": promise_id}}).encode()  # fmt: skip


@pytest.fixture(params=["asgi", "http"])
async def http(request):
    """The app called in process (its ASGI path), or served by uvicorn on a real socket,
    where the envelope is answered straight from the HTTP parser (direct_http.py)."""
    store = open_store("memory://")
    hub = Hub()
    policy = GuardPolicy.for_server("127.0.0.1", False, origins=OPS, max_body_bytes=4096)
    app = create_app(Router(cores=["http://127.0.0.1:9"]), durable=DurableMount(DurableCore(store, hub), hub),
                     guard=policy)  # fmt: skip
    direct: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        if request.param == "asgi":
            transport, base = httpx.ASGITransport(app=app), "http://localhost"
        else:
            routes, limit = app.direct_routes()

            def counted(route):
                async def answer(headers, body, checked):
                    direct.append(headers["host"])
                    return await route.answer(headers, body, checked)

                return Route(answer, route.takes, route.cancel_on_close, route.check)

            app.direct_routes = lambda: ({path: counted(r) for path, r in routes.items()}, limit)
            transport = httpx.AsyncHTTPTransport()
            base = await stack.enter_async_context(served(app, as_loam_serves=True))
        client = await stack.enter_async_context(
            httpx.AsyncClient(transport=transport, base_url=base, timeout=30)
        )
        client.direct = direct  # the envelopes the direct path answered (served over HTTP)
        client.served = request.param == "http"
        yield client
    await store.close()


JSON = {"content-type": "application/json"}


async def _stored(http, promise_id: str) -> bool:
    r = await http.post("/resonate/", content=_get(promise_id), headers=JSON)
    return r.status_code == 200


async def test_an_envelope_passes_and_answers_in_its_envelope(http):
    for path in ("/resonate/", "/resonate"):
        r = await http.post(path, content=_create("p" + str(len(path))), headers=JSON)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["head"] == {"corrId": "c1", "status": 200, "version": VERSION}
        assert body["data"]["promise"]["state"] == "pending"
        assert "access-control-allow-origin" not in r.headers
    r = await http.post("/resonate/", content=b"[1]", headers=JSON)
    assert r.status_code == 400 and r.json()["data"] == "Request body must be a JSON object"
    if http.served:  # over HTTP, each of the three was answered by the direct path
        assert len(http.direct) == 3


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"host": "evil.example", **JSON}, 403),  # DNS rebinding
        ({"origin": "http://evil.example", **JSON}, 403),  # a foreign page
        ({"origin": "null", **JSON}, 403),
        ({"content-type": "text/plain"}, 403),  # a write a page sends without a preflight
    ],
)
async def test_what_the_guard_refuses_is_refused_here_too_and_changes_nothing(http, headers, status):
    r = await http.post("/resonate/", content=_create("refused"), headers=headers)
    assert r.status_code == status, r.text
    assert r.json()["code"] == "permission_denied"
    assert r.headers["content-type"] == "application/json"
    assert not await _stored(http, "refused")
    if http.served:
        assert len(http.direct) == 2  # the refusal too came from the direct path


async def test_a_body_over_the_limit_is_413_and_changes_nothing(http):
    big = json.loads(_create("big"))
    big["data"]["param"] = {"data": "x" * 5000}
    r = await http.post("/resonate/", content=json.dumps(big).encode(), headers=JSON)
    assert r.status_code == 413 and r.json()["code"] == "invalid_argument", r.text

    async def chunks():  # no content-length: counted as the body arrives
        raw = json.dumps(big).encode()
        for i in range(0, len(raw), 1000):
            yield raw[i : i + 1000]

    r = await http.post("/resonate/", content=chunks(), headers=JSON)
    assert r.status_code == 413, r.text
    assert not await _stored(http, "big")
    if http.served:  # neither big body was taken by the direct path: the general one refused it
        assert len(http.direct) == 1


async def test_an_allowed_origin_gets_its_cors_headers(http):
    r = await http.post("/resonate/", content=_create("cors"), headers={"origin": OPS, **JSON})
    assert r.status_code == 200, r.text
    assert r.headers["access-control-allow-origin"] == OPS
    r = await http.post("/resonate/", content=_get("missing"), headers={"origin": OPS, **JSON})
    assert r.status_code == 404 and r.headers["access-control-allow-origin"] == OPS
