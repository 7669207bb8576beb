"""Auth through the gateway app (`create_app` with a `StoreAuthenticator`), over Connect
JSON, in process and over a real socket: a lease token from one namespace is useless to another namespace's
credential, and missing, wrong or under-privileged tokens get Unauthenticated /
PermissionDenied and change nothing."""

from __future__ import annotations

import httpx
import pytest
from inproc import served

from loam_common import auth
from loam_common.blobs import DirBlobStore
from loam_common.direct_http import Route
from loam_gateway.app import create_app
from loam_gateway.auth import StoreAuthenticator
from loam_gateway.routing import Router
from loam_queue_core import QueueCore
from loam_queue_core.rpc import CoreRpc

SVC = "/loam.jobs.v1.JobsService/"


@pytest.fixture(params=["asgi", "http"])
async def gateway(request, store, tmp_path):
    """The app in process (its ASGI path), or on a real socket as the gateway serves it,
    where the common Connect calls are answered straight from the HTTP parser."""
    core = QueueCore(store, DirBlobStore(tmp_path / "blobs"))
    app = create_app(Router(local=CoreRpc(core)), StoreAuthenticator(store))
    if request.param == "asgi":
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            yield client
        return
    routes, limit = app.direct_routes()
    assert not routes[SVC + "Enqueue"].cancel_on_close
    assert routes[SVC + "Lease"].cancel_on_close  # a long-poll ends with its client
    direct: list[str] = []

    def counted(path, route):
        async def answer(headers, body, checked):
            direct.append(path)
            return await route.answer(headers, body, checked)

        return Route(answer, route.takes, route.cancel_on_close, route.check)

    app.direct_routes = lambda: ({p: counted(p, r) for p, r in routes.items()}, limit)
    async with served(app, as_loam_serves=True) as url, httpx.AsyncClient(base_url=url) as client:
        yield client
    assert SVC + "Enqueue" in direct  # refused or not, the calls took the direct path


@pytest.fixture
def token(store):
    async def _token(ns: str, *actions: str) -> str:
        t, _ = await store.transact(auth.token_create, ns, list(actions), "", None)
        return t

    return _token


async def call(client: httpx.AsyncClient, method: str, body: dict, token: str | None = None, path: str = "",
               **headers: str) -> httpx.Response:  # fmt: skip
    h = {"content-type": "application/json", **headers}
    if token is not None:
        h["authorization"] = f"Bearer {token}"
    return await client.post(path + SVC + method, json=body, headers=h)


def code(resp: httpx.Response) -> str:
    return resp.json().get("code", "ok") if resp.status_code != 200 else "ok"


async def test_a_lease_token_is_useless_in_another_namespace(gateway, token, dump):
    owner = await token("acme", auth.ENQUEUE, auth.CONSUME)
    rival = await token("rival", *sorted(auth.ACTIONS))

    r = await call(gateway, "Enqueue", {"queue": "emails", "task": {"name": "send"}}, owner)
    assert r.status_code == 200, r.text
    r = await call(gateway, "Lease", {"queues": ["emails"], "worker": "w-acme"}, owner)
    assert r.status_code == 200, r.text
    (lease,) = r.json()["leases"]
    lease_token = lease["token"]
    assert lease_token["queue"] == "emails"

    before = await dump()
    # The rival holds every action and the exact lease token; it resolves in "rival".
    for method, body in [
        ("Complete", {"token": lease_token, "outcome": {"ok": {}}}),
        ("Complete", {"token": lease_token, "outcome": {"fail": {"error": {"message": "x"}}}}),
        ("Extend", {"token": lease_token, "by_ns": "1000000000"}),
        ("Report", {"token": lease_token, "log_line": "hi"}),
    ]:
        r = await call(gateway, method, body, rival)
        assert r.status_code != 200 and code(r) in {"not_found", "failed_precondition"}, (method, r.text)
    r = await call(
        gateway, "CompleteBatch", {"items": [{"token": lease_token, "outcome": {"ok": {}}}]}, rival
    )
    assert r.status_code != 200 or all("error" in x for x in r.json()["results"]), r.text
    # Naming the owner's namespace does not help: the namespace comes from the token.
    r = await call(gateway, "Complete", {"token": lease_token, "outcome": {"ok": {}}}, rival,
                   **{"x-loam-namespace": "acme"})  # fmt: skip
    assert code(r) == "permission_denied", r.text
    r = await call(gateway, "Complete", {"token": lease_token, "outcome": {"ok": {}}}, rival, path="/ns/acme")
    assert code(r) == "permission_denied", r.text
    assert await dump() == before, "the rival's calls changed nothing"

    # The owner's lease still holds.
    r = await call(gateway, "Complete", {"token": lease_token, "outcome": {"ok": {}}}, owner)
    assert r.status_code == 200, r.text


async def test_refusals_change_nothing(gateway, token, dump, store):
    producer = await token("acme", auth.ENQUEUE)
    good = await token("acme", auth.ENQUEUE, auth.CONSUME)
    _, tid, secret = good.split("_")
    enqueue = {"queue": "q", "task": {"name": "t"}}
    before = await dump()

    cases = [
        (None, "Enqueue", enqueue, "unauthenticated"),
        ("not-a-token", "Enqueue", enqueue, "unauthenticated"),
        (f"loam_{tid}_{'0' * 64}", "Enqueue", enqueue, "unauthenticated"),
        (producer, "Lease", {"queues": ["q"], "worker": "w"}, "permission_denied"),
        (producer, "QueueAdmin", {"queue": "q", "op": {"pause": {}}}, "permission_denied"),
    ]
    for tok, method, body, want in cases:
        r = await call(gateway, method, body, tok)
        assert code(r) == want, (tok, method, r.text)
        assert r.status_code == (401 if want == "unauthenticated" else 403)
    r = await call(gateway, "Lease", {"queues": ["q"], "worker": "w"}, producer)
    assert "jobs:consume" in r.json()["message"]
    assert await dump() == before

    # the same call with the right token goes through; once revoked (and out of the
    # gateway's cache window, here never cached) it is refused
    assert (await call(gateway, "Enqueue", enqueue, producer)).status_code == 200
    await store.transact(auth.token_revoke, tid)
    r = await call(gateway, "Enqueue", enqueue, good)
    assert code(r) == "unauthenticated" and r.json()["message"] == auth.INVALID_TOKEN
