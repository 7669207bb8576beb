"""The gateway's request guard (loam_gateway/guard.py) as a browser attacker and a
careless client meet it: foreign Host and Origin refused, state-changing REST calls that
a page could send cross-origin without a preflight refused, CORS only for configured
origins, bodies capped with 413, and credentials checked before any body is read.
In process (the app every gateway command serves) and, for the defaults of `loam dev`,
through a real server over real HTTP."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from devserver import start_dev_server
from gateway_kit import JSON, SVC, bearer, client_for

from loam_common import auth
from loam_gateway.app import create_app
from loam_gateway.auth import StoreAuthenticator
from loam_gateway.guard import GuardPolicy
from loam_gateway.routing import Router
from loam_queue_core.rpc import CoreRpc

EVIL = "http://evil.example"


async def seed(http, queue: str = "emails") -> str:
    r = await http.post(f"/v1/queues/{queue}/jobs", json={"name": "send"})
    assert r.status_code == 200, r.text
    return r.json()["job"]


async def paused(http, queue: str = "emails") -> bool:
    return (await http.get(f"/v1/queues/{queue}")).json()["config"]["paused"]


async def test_a_cross_origin_pause_and_remove_change_nothing(http):
    job = await seed(http)
    simple = {"origin": EVIL, "content-type": "text/plain"}
    r = await http.post("/v1/queues/emails:pause", headers=simple)
    assert r.status_code == 403 and "evil.example" in r.json()["message"], r.text
    r = await http.post(f"/v1/queues/emails/jobs/{job}:remove", headers=simple)
    assert r.status_code == 403
    assert not await paused(http)
    assert (await http.get(f"/v1/queues/emails/jobs/{job}")).status_code == 200


@pytest.mark.parametrize("headers", [{}, {"content-type": "text/plain"},
                                     {"content-type": "application/x-www-form-urlencoded"},
                                     {"content-type": "multipart/form-data; boundary=x"}])  # fmt: skip
async def test_a_write_a_page_could_send_without_a_preflight_is_refused(http, headers):
    await seed(http)
    r = await http.post("/v1/queues/emails:pause", headers=headers)
    assert r.status_code == 403 and "content-type application/json" in r.json()["message"], r.text
    assert not await paused(http)


@pytest.mark.parametrize("headers", [JSON, {"x-requested-with": "curl"}, {"x-loam-namespace": "default"}])
async def test_a_write_with_a_non_simple_type_or_header_goes_through(http, headers):
    await seed(http)
    r = await http.post("/v1/queues/emails:pause", headers=headers)
    assert r.status_code == 200, r.text
    assert await paused(http)


async def test_the_servers_own_pages_may_write(http):
    await seed(http)
    for origin in ("http://localhost", "http://127.0.0.1:7720"):
        r = await http.post("/v1/queues/emails:pause", headers={"origin": origin, **JSON})
        assert r.status_code == 200, r.text
        assert "access-control-allow-origin" not in r.headers  # same-origin: no CORS needed


@pytest.mark.parametrize("host", ["attacker.example:7720", "attacker.example", "10.0.0.8"])
async def test_a_foreign_host_is_refused(core, host):
    async with client_for(create_app(Router(local=CoreRpc(core))), host) as http:
        for r in (await http.get("/v1/queues"), await http.post(SVC + "Enqueue", json={}, headers=JSON)):
            assert r.status_code == 403 and "is not served here" in r.json()["message"], r.text


async def test_null_origin_is_refused(http):
    r = await http.get("/v1/queues", headers={"origin": "null"})
    assert r.status_code == 403


async def test_cors_is_answered_for_configured_origins_only(core):
    policy = GuardPolicy.for_server("127.0.0.1", False, origins="https://ops.example")
    async with client_for(create_app(Router(local=CoreRpc(core)), guard=policy)) as http:
        pre = {"access-control-request-method": "POST", "access-control-request-headers": "content-type"}
        r = await http.options("/v1/queues/emails:pause", headers={"origin": "https://ops.example", **pre})
        assert r.status_code == 204 and r.headers["access-control-allow-origin"] == "https://ops.example"
        r = await http.get("/v1/queues", headers={"origin": "https://ops.example"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://ops.example"
        r = await http.options("/v1/queues/emails:pause", headers={"origin": EVIL, **pre})
        assert r.status_code == 403 and "access-control-allow-origin" not in r.headers
        r = await http.options("/v1/queues/emails:pause", headers={"origin": "http://localhost", **pre})
        assert r.status_code == 403  # the console is same-origin: it never preflights


async def test_hosts_and_origins_are_configurable(core):
    policy = GuardPolicy.for_server("127.0.0.1", False, hosts="jobs.internal,localhost")
    async with client_for(
        create_app(Router(local=CoreRpc(core)), guard=policy), "jobs.internal:7720"
    ) as http:
        assert (await http.get("/v1/queues")).status_code == 200
    any_host = GuardPolicy.for_server("127.0.0.1", False, hosts="*")
    async with client_for(
        create_app(Router(local=CoreRpc(core)), guard=any_host), "whatever.example"
    ) as http:
        assert (await http.get("/v1/queues")).status_code == 200
    with pytest.raises(ValueError, match="scheme://host"):
        GuardPolicy.for_server("127.0.0.1", False, origins="evil.example")


def test_defaults_loopback_without_auth_any_host_with_auth_on_every_interface():
    assert GuardPolicy.for_server("127.0.0.1", False).hosts == {"localhost", "127.0.0.1", "::1"}
    assert GuardPolicy.for_server("127.0.0.1", True).hosts == {"localhost", "127.0.0.1", "::1"}
    assert GuardPolicy.for_server("0.0.0.0", True).hosts is None
    assert "jobs.example" in GuardPolicy.for_server("jobs.example", True, hosts="jobs.example").hosts


async def test_an_oversized_body_gets_413_not_429(core):
    policy = GuardPolicy.for_server("127.0.0.1", False, max_body_bytes=10_000)
    async with client_for(create_app(Router(local=CoreRpc(core)), guard=policy)) as http:
        big = {"name": "t", "data": "x" * 20_000}
        r = await http.post("/v1/queues/big/jobs", json=big)
        assert r.status_code == 413 and r.json()["code"] == "invalid_argument", r.text

        async def chunks():  # no content-length: the cap is counted as the body arrives
            for _ in range(5):
                yield b"x" * 4000

        r = await http.post("/v1/queues/big/jobs", content=chunks(), headers=JSON)
        assert r.status_code == 413, r.text
        assert (await http.get("/v1/queues/big")).status_code == 404  # nothing stored


async def test_credentials_are_checked_before_the_body_is_read(core, sqlite_store, token):
    read = asyncio.Event()
    app = create_app(Router(local=CoreRpc(core)), StoreAuthenticator(sqlite_store))

    async def body():
        read.set()
        yield b"{not json"

    async with client_for(app) as http:
        r = await http.post("/v1/queues/q/jobs", content=body(), headers=JSON)
        assert r.status_code == 401 and r.json()["code"] == "unauthenticated", r.text
        r = await http.post(SVC + "Enqueue", content=body(), headers=JSON)
        assert r.status_code == 401, r.text
        assert not read.is_set()
        good = await token("acme", auth.ENQUEUE)
        r = await http.post("/v1/queues/q/jobs", content=b"{not json", headers={**JSON, **bearer(good)})
        assert r.status_code == 400  # with a credential, malformed JSON is the answer
        assert (await http.get("/healthz")).status_code == 200  # open paths stay open


def test_loam_dev_refuses_foreign_hosts_and_simple_writes_over_real_http(tmp_path):
    server = start_dev_server(tmp_path / "data")
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            r = http.get("/v1/queues", headers={"host": f"attacker.example:{server.port}"})
            assert r.status_code == 403, r.text
            r = http.post("/v1/queues/q/jobs", json={"name": "t"})
            assert r.status_code == 200, r.text
            r = http.post("/v1/queues/q:pause", headers={"origin": EVIL, "content-type": "text/plain"})
            assert r.status_code == 403
            r = http.post("/v1/queues/q:pause", content=b"", headers={"content-type": "text/plain"})
            assert r.status_code == 403
            assert http.get("/v1/queues/q").json()["config"]["paused"] is False
            assert http.get("/healthz").status_code == 200
            body = json.dumps({"queue": "q", "task": {"name": "t"}})
            assert http.post(SVC + "Enqueue", content=body, headers=JSON).status_code == 200
    finally:
        server.stop()
