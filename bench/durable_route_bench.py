"""Durable steps' server cost without a socket: the gateway's HTTP reader fed the bytes
the Python SDK (aiohttp) sends for whole workflows, in the SDK's order (the caller's
`promise.create` and listener, the worker's `task.acquire` and heartbeat, each step's
`task.fence` with a `promise.create` and then with a `promise.settle`, the
`task.fulfill`), answered through the request guard, the envelope, `DurableCore` and its
transitions on a real LMDB store in a temporary directory. `--callers` workflows at once,
one connection each: a round's requests are fed together and answered in one loop turn,
so their transactions share a group commit as the server's do under that many workers.
The process CPU over the timed requests is the server's work for them, every thread
included.

    .venv/bin/python bench/durable_route_bench.py [--workflows 400] [--steps 10] [--callers 8] [--rounds 3] [--profile]

Prints one JSON object: CPU µs a step, its workflow's other requests included (the
median of the rounds, every round on a fresh store), and the rounds. `--profile`
cProfiles one extra round (top functions to stderr). `bench/durable_bench.py` runs the
same workflows with the SDK over HTTP: a step then also pays the sockets' system calls,
the event loop's wake-ups and the pushes, and moves with the machine's speed far more
than this does.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import uvicorn
import uvloop
from enqueue_route_bench import AnswerTransport  # bench/, this script's directory
from loam_durable.facade import DurableCore
from loam_durable.hub import Hub
from uvicorn.server import ServerState

from loam_common.blobs import DirBlobStore
from loam_common.direct_http import direct_protocol
from loam_common.store.runner import open_store, store_url_of
from loam_gateway.app import create_app
from loam_gateway.durable_mount import DurableMount
from loam_gateway.guard import GuardPolicy
from loam_gateway.routing import Router
from loam_queue_core import QueueCore
from loam_queue_core.rpc import CoreRpc

FAR = 2**50
# The head aiohttp writes for the SDK's POST (its header order and casing).
HEAD = (
    b"POST /resonate/ HTTP/1.1\r\nHost: 127.0.0.1:7720\r\nAccept: */*\r\n"
    b"Accept-Encoding: gzip, deflate\r\nUser-Agent: Python/3.12 aiohttp/3.11.18\r\n"
    b"Content-Length: %d\r\nContent-Type: application/json\r\n\r\n"
)


def envelope(kind: str, data: dict, corr: str = "c1") -> bytes:
    body = json.dumps({"kind": kind, "head": {"corrId": corr, "version": "2026-04-01"}, "data": data},
                      separators=(",", ":")).encode()  # fmt: skip
    return HEAD % len(body) + body


def action(kind: str, data: dict) -> dict:
    return {"kind": kind, "head": {"corrId": "c0", "version": "2026-04-01"}, "data": data}


def workflow(wf: str, steps: int) -> list[bytes]:
    """A workflow's requests in the order the Python SDK sends them for `rpc` of a
    function of `steps` `ctx.run` steps: the caller's create and listener, the worker's
    acquire, heartbeat, each step's fenced create and settle, and the fulfil."""
    ids = {"resonate:origin": wf, "resonate:branch": wf, "resonate:parent": wf}
    root = {"id": wf, "timeoutAt": FAR, "param": {"data": "eyJhcmdzIjpbMl19"},
            "tags": {**ids, "resonate:scope": "global", "resonate:target": "poll://any@bench"}}  # fmt: skip
    out = [
        envelope("promise.create", root),
        envelope("promise.register_listener", {"awaited": wf, "address": "poll://uni@client/c0"}),
        envelope("task.acquire", {"id": wf, "version": 0, "pid": "worker-1", "ttl": 30_000}),
        envelope("task.heartbeat", {"pid": "worker-1", "tasks": [{"id": wf, "version": 1}]}),
    ]
    for i in range(steps):
        child = f"{wf}:{i}"
        make = {"id": child, "timeoutAt": FAR, "param": {}, "tags": {"resonate:scope": "local", **ids}}
        settle = {"id": child, "state": "resolved", "value": {"data": "MQ=="}}
        for kind, data in (("promise.create", make), ("promise.settle", settle)):
            out.append(
                envelope("task.fence", {"id": wf, "version": 1, "action": action(kind, data)}, f"c{i}")
            )
    fulfil = {"id": wf, "state": "resolved", "value": {"data": "Mg=="}}
    out.append(envelope("task.fulfill", {"id": wf, "version": 1, "action": action("promise.settle", fulfil)}))
    return out


async def run(
    workflows_n: int, steps_per_workflow: int, callers: int, profile: cProfile.Profile | None = None
) -> float:
    """CPU µs per step (with its share of its workflow's other requests) over
    `workflows_n` workflows, `callers` at once, on a fresh store."""
    data = Path(tempfile.mkdtemp(prefix="loam-durable-route-bench-"))
    store = open_store(store_url_of(data))
    try:
        durable = DurableCore(store, Hub())
        app = create_app(
            Router(local=CoreRpc(QueueCore(store, DirBlobStore(data / "blobs")))),
            durable=DurableMount(durable, durable.hub),  # type: ignore[arg-type]
            guard=GuardPolicy.for_server("127.0.0.1", False),
        )
        routes, limit = app.direct_routes()
        loop = asyncio.get_running_loop()
        conns = []
        for _ in range(callers):
            front = direct_protocol(routes, limit)(uvicorn.Config(app), ServerState(), {}, loop)
            transport = AnswerTransport()
            front.connection_made(transport)  # type: ignore[arg-type]
            conns.append((front, transport))

        async def round_of(requests: list[bytes]) -> list[bytes]:
            for (front, transport), raw in zip(conns, requests, strict=True):
                transport.answered = loop.create_future()
                front.data_received(raw)
            answers = [await t.answered for _, t in conns]  # type: ignore[misc]
            for a in answers:
                if not a.startswith(b"HTTP/1.1 200 "):
                    raise RuntimeError(f"not answered 200: {a[:300]!r}")
            return answers

        async def workflows(prefix: str, n: int) -> float:
            """CPU seconds of `n` workflows a caller, the requests made before timing."""
            lists = [workflow(f"{prefix}-{c}", steps_per_workflow) for c in range(callers * n)]
            rounds = [[lists[w * callers + c][i] for c in range(callers)]
                      for w in range(n) for i in range(len(lists[0]))]  # fmt: skip
            if profile is not None and prefix != "warm":
                profile.enable()
            start = time.process_time()
            for requests in rounds:
                await round_of(requests)
            cpu = time.process_time() - start
            if profile is not None:
                profile.disable()
            return cpu

        await workflows("warm", 5)
        per = max(workflows_n // callers, 1)
        cpu = await workflows("wf", per)
        for front, _ in conns:
            front.connection_lost(None)
        await asyncio.sleep(0)
        return cpu / (per * callers * max(steps_per_workflow, 1)) * 1e6
    finally:
        await store.close()


async def main(args: argparse.Namespace) -> dict:
    rounds = [await run(args.workflows, args.steps, args.callers) for _ in range(args.rounds)]
    out = {"cpu_us_per_step": round(statistics.median(rounds), 1), "rounds": [round(x, 1) for x in rounds],
           "callers": args.callers, "steps_per_workflow": args.steps}  # fmt: skip
    if args.profile:
        prof = cProfile.Profile()
        await run(args.workflows, args.steps, args.callers, prof)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(45)
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workflows", type=int, default=400)
    p.add_argument("--steps", type=int, default=10, help="steps a workflow")
    p.add_argument("--callers", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--profile", action="store_true")
    print(json.dumps(uvloop.run(main(p.parse_args())), indent=2))
