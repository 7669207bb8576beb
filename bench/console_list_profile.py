"""The job list's server CPU per page in process, without HTTP: the gateway app (its
guard, the list lane or FastAPI's route, the Router, the queue core, an LMDB store) called
as ASGI with a 50-row page of a 3,000-job queue, then the same under cProfile (the top of
the cumulative profile is printed). What a page costs before the HTTP server's own work.

    .venv/bin/python bench/console_list_profile.py                       # summary view
    .venv/bin/python bench/console_list_profile.py "state=waiting&page_size=50"
    .venv/bin/python bench/console_list_profile.py --route ...           # FastAPI's route, no lane
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import tempfile
import time

from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.store.runner import open_store
from loam_gateway.app import create_app
from loam_gateway.routing import Router
from loam_queue_core import QueueCore
from loam_queue_core.rpc import CoreRpc


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("query", nargs="?", default="state=waiting&page_size=50&view=summary")
    ap.add_argument("--route", action="store_true", help="without the list lane: FastAPI's route")
    ap.add_argument("--pages", type=int, default=500)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        store = open_store(f"lmdb://{d}/jobs.lmdb")
        rpc = CoreRpc(QueueCore(store))
        task = {
            "name": "bulk",
            "payload": {"data": b'{"user":"ada","n":1}', "content_type": "application/json"},
        }
        for _ in range(3):
            await rpc.enqueue_bulk("default", J.EnqueueBulkRequest(queue="big", jobs=[{"task": task}] * 1000))
        app = create_app(Router(local=rpc))
        if args.route:
            app.list_lane = None
        scope = {"type": "http", "method": "GET", "path": "/v1/queues/big/jobs", "root_path": "",
                 "query_string": args.query.encode(), "headers": [(b"host", b"127.0.0.1")]}  # fmt: skip
        sent: list[dict] = []

        async def receive() -> dict:
            return {"type": "http.request", "body": b""}

        async def send(message: dict) -> None:
            sent.append(message)

        for _ in range(50):  # warm up
            await app(scope, receive, send)
        t0 = time.process_time()
        for _ in range(args.pages):
            await app(scope, receive, send)
        per_page = (time.process_time() - t0) * 1000 / args.pages
        assert sent[-2]["status"] == 200, sent[-1]
        print(f"{'route' if args.route else 'lane'}: {per_page:.2f} ms CPU per page ({args.query})")
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(args.pages):
            await app(scope, receive, send)
        profile.disable()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
        await store.close()


if __name__ == "__main__":
    asyncio.run(main())
