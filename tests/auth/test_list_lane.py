"""The job list's lane (loam_gateway.list_lane) answers exactly what FastAPI's route
answers: the same pages (in full and in summary, redacted, paged by cursor, filtered by
state and name), the same refusals (no token, another namespace's queue, bad input), in
the same shape; and it does serve the common request (FastAPI is not reached)."""

from __future__ import annotations

import httpx
import pytest

from loam_common import auth
from loam_gateway.app import create_app
from loam_gateway.auth import StoreAuthenticator
from loam_gateway.redaction import Redaction
from loam_gateway.routing import Router
from loam_queue_core import QueueCore
from loam_queue_core.rpc import CoreRpc


class Spy:
    """The lane, counting the requests it served itself."""

    def __init__(self, lane) -> None:
        self.lane, self.served = lane, 0

    async def __call__(self, scope, receive, send) -> bool:
        took = await self.lane(scope, receive, send)
        self.served += took
        return took


@pytest.fixture
async def apps(store):
    router = Router(local=CoreRpc(QueueCore(store)))
    app = create_app(router, StoreAuthenticator(store), redaction=Redaction.parse("password"))
    spy = app.list_lane = Spy(app.list_lane)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        yield client, app, spy


async def both(apps, url: str, headers: dict) -> tuple[httpx.Response, httpx.Response]:
    """The answer through the lane, then through FastAPI's route (the lane taken away)."""
    client, app, spy = apps
    lane = await client.get(url, headers=headers)
    app.list_lane = None
    try:
        route = await client.get(url, headers=headers)
    finally:
        app.list_lane = spy
    return lane, route


async def test_the_lane_answers_what_the_route_answers(apps, store):
    client, _app, spy = apps
    t, _ = await store.transact(auth.token_create, "acme", sorted(auth.ACTIONS), "", None)
    admin = {"authorization": f"Bearer {t}"}
    t, _ = await store.transact(auth.token_create, "acme", [auth.READ], "", None)
    viewer = {"authorization": f"Bearer {t}"}
    t, _ = await store.transact(auth.token_create, "rival", sorted(auth.ACTIONS), "", None)
    rival = {"authorization": f"Bearer {t}"}
    for i in range(7):
        body = {"name": "charge" if i % 2 else "mail", "data": {"n": i, "password": "hunter2", "big": 2**70}}
        assert (await client.post("/v1/queues/pay/jobs", json=body, headers=admin)).status_code == 200
    first = (await client.get("/v1/queues/pay/jobs?page_size=3", headers=viewer)).json()
    served = spy.served
    assert (
        served == 1
        and len(first["jobs"]) == 3
        and first["jobs"][0]["payload"]["data"]["password"] != "hunter2"
    )
    common = [
        "/v1/queues/pay/jobs",
        "/v1/queues/pay/jobs?state=waiting&page_size=2",
        f"/v1/queues/pay/jobs?page_size=3&page_token={first['next_page_token']}",
        "/v1/queues/pay/jobs?state=waiting&state=failed&name=charge&view=summary",
        "/v1/queues/pay/jobs?name=&page_size=0&view=full&unknown=1",
        "/v1/queues/nope/jobs",  # no such queue
        "/v1/queues/a..b/jobs",  # not a queue name: refused by the core
        f"/v1/queues/pay/jobs?page_token={first['next_page_token']}x",  # a token that is not one
    ]
    odd = [  # left to FastAPI
        "/v1/queues/pay/jobs?state=sleeping",
        "/v1/queues/pay/jobs?page_size=1001",
        "/v1/queues/pay/jobs?page_size=-1",
        "/v1/queues/pay/jobs?page_size=",
        "/v1/queues/pay/jobs?view=brief",
        "/v1/queues/pay/jobs?view=summary&view=full",
        "/v1/queues/pay/jobs?name=" + "x" * 300,
    ]
    for url in common + odd:
        for who in (viewer, rival, {}):
            lane, route = await both(apps, url, who)
            assert (lane.status_code, lane.json()) == (route.status_code, route.json()), (url, who)
            assert lane.headers["content-type"] == route.headers["content-type"] == "application/json"
    # the lane served every common request with a token; none of the odd ones (the guard
    # refuses a request without a token before any lane)
    assert spy.served - served == 2 * len(common)
    # what the lane answers is what a client wants: a page of the namespace's jobs
    r = await client.get("/v1/queues/pay/jobs?state=waiting&name=charge&view=summary", headers=viewer)
    assert [j["name"] for j in r.json()["jobs"]] == ["charge"] * 3
    assert all(j["payload"]["data"] is None and j["payload"]["size"] > 0 for j in r.json()["jobs"])
    r = await client.get("/v1/queues/pay/jobs", headers=rival)  # another namespace: no such queue there
    assert (r.status_code, r.json()["code"]) == (404, "not_found")


async def test_without_auth_the_namespace_prefix_picks_the_namespace(store):
    router = Router(local=CoreRpc(QueueCore(store)))
    app = create_app(router)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
    ) as client:
        r = await client.post("/ns/team-a/v1/queues/q/jobs", json={"name": "t", "data": {}})
        assert r.status_code == 200, r.text
        assert len((await client.get("/ns/team-a/v1/queues/q/jobs")).json()["jobs"]) == 1
        assert (await client.get("/v1/queues/q/jobs")).status_code == 404  # not in the default namespace
