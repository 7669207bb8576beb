"""What the gateway's own handling of `POST /resonate/` costs, alone: the gateway app (the
request guard, the dispatch to the durable app, the envelope's parsing, authentication
and the JSON answer) called in process with a `task.fence` envelope, the durable core's
`request` replaced by a stub that returns a fixed answer. No HTTP server, no store: the
figure is the transport's share of a durable request, the part this checkout's code
decides (uvicorn's HTTP handling and the transition's store work come on top).

    .venv/bin/python bench/durable_asgi_bench.py [--requests 20000] [--rounds 3]

Prints one JSON object: `cpu_us_per_request` for `/resonate/` (the ASGI path) and for
`/ns/default/resonate/` (the same envelope through the dev namespace prefix, which takes
the gateway's general path), the median of the rounds, process CPU; and `direct`: the
way the server answers `/resonate/` (loam_common.direct_http: the gateway's route on
the HTTP reader a connection starts on, requests written to it as bytes, the answer
taken from a stand-in transport), with bodies of 300 different lengths, as a client's
differ.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import uvicorn
from loam_durable.facade import DurableCore
from loam_durable.hub import Hub
from uvicorn.server import ServerState

from loam_common.direct_http import direct_protocol
from loam_common.store.runner import open_store
from loam_gateway.app import create_app
from loam_gateway.durable_mount import DurableMount
from loam_gateway.guard import GuardPolicy
from loam_gateway.routing import Router

HEAD = {"corrId": "c", "version": "2026-04-01"}
TAGS = {"resonate:origin": "wf", "resonate:branch": "wf", "resonate:parent": "wf", "resonate:scope": "local"}
CREATE = {"id": "wf:1", "timeoutAt": 2**50, "param": {"data": "e30="}, "tags": TAGS}
BODY = json.dumps({"kind": "task.fence", "head": HEAD, "data": {"id": "wf", "version": 1,
                   "action": {"kind": "promise.create", "head": HEAD, "data": CREATE}}}).encode()  # fmt: skip
# What the Python SDK's aiohttp client sends.
HEADERS = [(b"host", b"127.0.0.1:7720"), (b"content-type", b"application/json"),
           (b"content-length", b"%d" % len(BODY)), (b"user-agent", b"Python/3.12 aiohttp/3.11"),
           (b"accept", b"*/*"), (b"accept-encoding", b"gzip, deflate")]  # fmt: skip
ANSWER = {"action": {"kind": "promise.create", "head": {**HEAD, "status": 200},
                     "data": {"promise": {"id": "wf:1", "state": "pending", "tags": TAGS}}}, "preload": []}  # fmt: skip


def stub_app() -> tuple[Any, Any]:
    """(the gateway app, its store) with the durable core's `request` answering ANSWER."""
    store = open_store("memory://")
    hub = Hub()
    core = DurableCore(store, hub)

    async def answer(ns: str, kind: str, data: dict) -> tuple[int, dict]:
        return 200, ANSWER

    core.request = answer  # type: ignore[method-assign]
    app = create_app(Router(cores=["http://127.0.0.1:9"]), durable=DurableMount(core, hub),
                     guard=GuardPolicy.for_server("127.0.0.1", False))  # fmt: skip
    return app, store


async def measure(path: str, requests: int) -> float:
    app, store = stub_app()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
             "headers": HEADERS, "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 7720)}  # fmt: skip
    message = {"type": "http.request", "body": BODY, "more_body": False}
    sent: list[dict] = []

    async def receive() -> dict:
        return message

    async def send(msg: dict) -> None:
        sent.append(msg)

    for _ in range(500):  # warm up
        await app(dict(scope), receive, send)
    assert sent[-2]["status"] == 200, sent[-2:]
    sent.clear()
    start = time.process_time()
    for _ in range(requests):
        await app(dict(scope), receive, send)
    cpu = time.process_time() - start
    await store.close()
    return cpu / requests * 1e6


class _Transport:
    """What the HTTP reader asks of a connection's transport: the answers are counted."""

    def __init__(self) -> None:
        self.answers = 0

    def write(self, data: bytes) -> None:
        self.answers += 1

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:  # the connection's task, cancelled when the run ends
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def measure_direct(requests: int) -> float:
    app, store = stub_app()
    routes, limit = app.direct_routes()
    front = direct_protocol(routes, limit)(uvicorn.Config(app), ServerState(), {}, asyncio.get_running_loop())
    transport = _Transport()
    front.connection_made(transport)  # type: ignore[arg-type]
    wire = []
    for i in range(300):
        body = json.dumps(
            {"kind": "task.fence", "head": HEAD, "data": {"id": "wf" + "x" * i, "version": 1}}
        ).encode()
        head = "".join(f"{k.decode()}: {v.decode()}\r\n" for k, v in HEADERS if k != b"content-length")
        wire.append(f"POST /resonate/ HTTP/1.1\r\n{head}content-length: {len(body)}\r\n\r\n".encode() + body)

    async def serve(n: int) -> None:
        for i in range(n):
            front.data_received(wire[i % len(wire)])
            while transport.answers <= done[0]:  # the connection's task answers on the next turns
                await asyncio.sleep(0)
            done[0] += 1

    done = [0]
    await serve(1000)  # warm up
    start = time.process_time()
    await serve(requests)
    cpu = time.process_time() - start
    await store.close()
    return cpu / requests * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    paths = ("/resonate/", "/ns/default/resonate/")
    runs: dict[str, list[float]] = {path: [] for path in paths}
    runs["direct"] = []
    for _ in range(args.rounds):
        for path in paths:
            runs[path].append(asyncio.run(measure(path, args.requests)))
        runs["direct"].append(asyncio.run(measure_direct(args.requests)))
    print(json.dumps({"cpu_us_per_request": {p: round(statistics.median(v), 1) for p, v in runs.items()},
                      "rounds": {p: [round(x, 1) for x in v] for p, v in runs.items()}}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
