"""The push channel's stream (`GET {base}/poll/{group}/{pid}`) as the durable app writes
it, driven through ASGI in process: pushes written as they come (those waiting written in
one go), a keep-alive comment only after a quiet `KEEPALIVE_S`, and a stream whose
client left taken out of the hub at once, so no push is handed to it afterwards."""

from __future__ import annotations

import asyncio

import pytest
from loam_durable import app as durable_app
from loam_durable.facade import DurableCore
from loam_durable.hub import Hub

from loam_common.store.runner import open_store


class Client:
    """The client side of one stream: what the app sent, and a way to leave."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.written = asyncio.Event()
        self.left = asyncio.Event()

    async def receive(self) -> dict:
        await self.left.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict) -> None:
        if message["type"] == "http.response.body":
            self.bodies.append(message["body"])
            self.written.set()

    async def next_body(self) -> bytes:
        while not self.bodies:
            self.written.clear()
            await asyncio.wait_for(self.written.wait(), 5)
        return self.bodies.pop(0)


@pytest.fixture
async def stream(monkeypatch):
    monkeypatch.setattr(durable_app, "KEEPALIVE_S", 0.2)
    store = open_store("memory://")
    hub = Hub()

    async def authenticate(headers, action) -> str:
        return "default"

    app = durable_app.create_durable_app(DurableCore(store, hub), hub, authenticate)
    client = Client()
    scope = {"type": "http", "method": "GET", "path": "/poll/workers/w1", "root_path": "", "headers": []}
    served = asyncio.create_task(app(scope, client.receive, client.send))
    assert await client.next_body() == b": connected\n\n"
    yield hub, client, served
    client.left.set()
    await asyncio.wait_for(served, 5)
    await store.close()


async def test_pushes_are_written_as_they_come_and_those_waiting_in_one_go(stream):
    hub, client, _ = stream
    assert hub.send("default", "poll://uni@workers/w1", {"kind": "execute", "n": 1})
    assert await client.next_body() == b'data: {"kind":"execute","n":1}\n\n'
    for n in (2, 3):  # both before the writer runs again
        assert hub.send("default", "poll://any@workers", {"kind": "execute", "n": n})
    assert await client.next_body() == b'data: {"kind":"execute","n":2}\n\ndata: {"kind":"execute","n":3}\n\n'


async def test_a_quiet_stream_gets_a_keepalive_and_a_busy_one_does_not(stream):
    hub, client, _ = stream
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await client.next_body() == b": keepalive\n\n"
    assert loop.time() - started >= 0.15
    # Pushes more often than KEEPALIVE_S: no keep-alive comes between them.
    for n in range(6):
        hub.send("default", "poll://uni@workers/w1", {"kind": "execute", "n": n})
        assert (await client.next_body()).startswith(b"data: ")
        await asyncio.sleep(0.1)
    assert client.bodies == []


async def test_a_stream_whose_client_left_takes_no_more_pushes(stream):
    hub, client, served = stream
    assert [c.pid for c in hub.connections("default", "workers")] == ["w1"]
    client.left.set()
    await asyncio.wait_for(served, 1)  # at once, not at the next keep-alive tick
    assert hub.connections("default", "workers") == []
    assert not hub.send("default", "poll://uni@workers/w1", {"kind": "execute"}, hold=False)
