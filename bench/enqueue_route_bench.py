"""The server's own cost of an enqueue, without a socket: the gateway's HTTP reader fed
the bytes the Python SDK sends (`Enqueue` with its idempotency key, or `EnqueueBulk` of
1,000 such jobs), answered through the request guard, the unary Connect lane, the router
and the queue core, on a real LMDB store in a temporary directory. One call at a time;
the answer is awaited (no busy loop), so the process CPU over the timed calls is the
server's work for them, every thread included.

    .venv/bin/python bench/enqueue_route_bench.py [--calls 5000] [--bulks 20] [--rounds 3] [--profile]

Prints one JSON object: CPU µs per single enqueue and per job of a bulk call, each the
median of the rounds (every round on a fresh store), with the rounds. `--profile`
cProfiles one extra round of single enqueues instead (top functions to stderr). Over
HTTP (`wire_bench.py`) the same calls also pay the socket's system calls and the event
loop's wake-ups, and move with the machine's speed far more than this does.
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
from uvicorn.server import ServerState

from loam.client import uuid7s
from loam_common.blobs import DirBlobStore
from loam_common.direct_http import direct_protocol
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as jpb
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.store.runner import open_store, store_url_of
from loam_gateway.app import create_app
from loam_gateway.guard import GuardPolicy
from loam_gateway.routing import Router
from loam_queue_core import QueueCore
from loam_queue_core.rpc import CoreRpc

# The head the SDK's `loam.async_unary` writes (a local server, the default namespace).
HEAD = (
    b"POST /loam.jobs.v1.JobsService/%s HTTP/1.1\r\nHost: 127.0.0.1:7720\r\n"
    b"content-type: application/proto\r\nconnect-protocol-version: 1\r\n"
    b"x-loam-namespace: default\r\nconnect-timeout-ms: 30000\r\ncontent-length: %d\r\n\r\n"
)


def _noop(item: jpb.EnqueueRequest | jpb.BulkItem, key: str | None) -> None:
    """A no-op job as the SDK sends it: an empty payload, and an idempotency key when
    it is a call of its own."""
    item.task.name = "noop"
    item.task.payload.SetInParent()
    if key is not None:
        item.opts.idempotency.key = key


def _wire(method: bytes, req: jpb.EnqueueRequest | jpb.EnqueueBulkRequest) -> bytes:
    body = req.SerializeToString()
    return HEAD % (method, len(body)) + body


def single_requests(n: int) -> list[bytes]:
    out = []
    for key in uuid7s(n):
        req = jpb.EnqueueRequest(queue="single")
        _noop(req, key)
        out.append(_wire(b"Enqueue", req))
    return out


def bulk_requests(n: int, size: int = 1000) -> list[bytes]:
    """Bulk calls as the SDK sends them: one idempotency key for the call."""
    out = []
    for key in uuid7s(n):
        req = jpb.EnqueueBulkRequest(queue="bulk", idempotency=pb.Idempotency(key=key))
        for _ in range(size):
            _noop(req.jobs.add(), None)
        out.append(_wire(b"EnqueueBulk", req))
    return out


class AnswerTransport:
    """A connection's transport as the HTTP reader uses it: each answer resolves `answered`
    (bench/durable_route_bench.py uses it too)."""

    def __init__(self) -> None:
        self.answered: asyncio.Future[bytes] | None = None

    def write(self, data: bytes) -> None:
        if self.answered is not None and not self.answered.done():
            self.answered.set_result(data)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def run(requests: list[bytes], warm: int, profile: cProfile.Profile | None = None) -> float:
    """CPU µs per request over requests[warm:], on a fresh server and store."""
    data = Path(tempfile.mkdtemp(prefix="loam-route-bench-"))
    store = open_store(store_url_of(data))
    try:
        app = create_app(
            Router(local=CoreRpc(QueueCore(store, DirBlobStore(data / "blobs")))),
            guard=GuardPolicy.for_server("127.0.0.1", False),
        )
        routes, limit = app.direct_routes()
        loop = asyncio.get_running_loop()
        front = direct_protocol(routes, limit)(uvicorn.Config(app), ServerState(), {}, loop)
        transport = AnswerTransport()
        front.connection_made(transport)  # type: ignore[arg-type]

        async def call(raw: bytes) -> None:
            transport.answered = loop.create_future()
            front.data_received(raw)
            answer = await transport.answered
            if not answer.startswith(b"HTTP/1.1 200 "):
                raise RuntimeError(f"not answered 200: {answer[:300]!r}")

        for raw in requests[:warm]:
            await call(raw)
        if profile is not None:
            profile.enable()
        start = time.process_time()
        for raw in requests[warm:]:
            await call(raw)
        cpu = time.process_time() - start
        if profile is not None:
            profile.disable()
        front.connection_lost(None)  # its task ends with the connection
        await asyncio.sleep(0)
        return cpu / (len(requests) - warm) * 1e6
    finally:
        await store.close()


async def main(args: argparse.Namespace) -> dict:
    singles, bulk = [], []
    for _ in range(args.rounds):
        if args.calls:
            singles.append(await run(single_requests(args.calls + 500), 500))
        if args.bulks:
            bulk.append(await run(bulk_requests(args.bulks + 2), 2) / 1000)
    out = {}
    if singles:
        out |= {
            "single_cpu_us_per_call": round(statistics.median(singles), 1),
            "single_rounds": [round(x, 1) for x in singles],
        }
    if bulk:
        out |= {
            "bulk_cpu_us_per_job": round(statistics.median(bulk), 1),
            "bulk_rounds": [round(x, 1) for x in bulk],
        }
    if args.profile:
        prof = cProfile.Profile()
        if args.calls:
            await run(single_requests(args.calls + 500), 500, prof)
        else:  # --calls 0: the bulk calls'
            await run(bulk_requests(args.bulks + 2), 2, prof)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(40)
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=5000, help="single enqueues timed a round")
    p.add_argument("--bulks", type=int, default=20, help="bulk calls of 1,000 timed a round (0: none)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--profile", action="store_true")
    print(json.dumps(uvloop.run(main(p.parse_args())), indent=2))
