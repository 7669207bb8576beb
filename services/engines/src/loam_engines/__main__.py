"""`loam engines` / `python -m loam_engines`: the engine runner as its own process — the
Spark Connect endpoint (Sail per namespace, the JVM fallback) and the runner of engine
jobs, leasing from the queue cores over Connect.

    loam engines --store URL --blobs DIR --queue-cores URL,URL --data DIR
                 [--id NAME] [--spark-host 127.0.0.1] [--spark-port 15002] [--auth]

Environment: LOAM_STORE, LOAM_BLOBS, LOAM_QUEUE_CORES, LOAM_ENGINES_DATA, LOAM_ENGINES_ID
(default the host name: it must stay the same across restarts, so a restart can close
what the previous run of this runner left), LOAM_SPARK_PORT, LOAM_AUTH, and
LOAM_INTERNAL_TOKEN for the calls to the queue cores. The queue cores serve the engine
RPCs themselves (they need only the store); this process runs the engines.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from loam_common.blobs import open_blobs
from loam_common.connect_errors import from_connect
from loam_common.loop import configure_logging
from loam_common.store.runner import open_store
from loam_engines.credentials import NoCredentials, StoreCredentials
from loam_engines.engines import Engines, EngineSettings

NAMESPACE_RESCAN_S = 5.0


class RemoteJobs:
    """The JobsService methods as `(ns, request) -> response` over Connect to the queue
    cores (the gateway's Router), raising JobsErrors like the in-process CoreRpc."""

    def __init__(self, cores: list[str], internal_token: str | None) -> None:
        from loam_gateway.routing import Router  # the one place that knows which core owns a queue

        self.router = Router(cores=cores, internal_token=internal_token)

    def __getattr__(self, method: str) -> Any:
        from connectrpc.errors import ConnectError

        async def call(ns: str, request: Any) -> Any:
            try:
                return await self.router.call(ns, method, request)
            except ConnectError as e:
                raise from_connect(e) from None

        return call

    async def close(self) -> None:
        await self.router.close()


class _Authenticator:
    def __init__(self, store: Any, auth: bool) -> None:
        from loam_gateway.auth import DevAuthenticator, StoreAuthenticator

        self.inner = StoreAuthenticator(store) if auth else DevAuthenticator()

    async def authenticate(self, headers: Any) -> Any:
        return await self.inner.authenticate(headers)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    env = os.environ
    p = argparse.ArgumentParser(prog="loam engines", description="Run the Loam engine runner.")
    p.add_argument("--store", default=env.get("LOAM_STORE"), help="store URL (LOAM_STORE)")
    p.add_argument("--blobs", default=env.get("LOAM_BLOBS"), help="blob directory or s3:// URL (LOAM_BLOBS)")
    p.add_argument("--queue-cores", default=env.get("LOAM_QUEUE_CORES", ""), help="comma-separated URLs")
    p.add_argument(
        "--data", default=env.get("LOAM_ENGINES_DATA", "./.loam/engines"), help="working directory"
    )
    p.add_argument(
        "--id", default=env.get("LOAM_ENGINES_ID") or socket.gethostname(), help="this runner's id"
    )
    p.add_argument("--spark-host", default=env.get("LOAM_SPARK_HOST", "127.0.0.1"))
    p.add_argument("--spark-port", type=int, default=int(env.get("LOAM_SPARK_PORT", "15002")))
    p.add_argument(
        "--auth", action="store_true", default=(env.get("LOAM_AUTH") or "").lower() in ("1", "on", "true")
    )
    p.add_argument("--log-level", default=env.get("LOAM_LOG_LEVEL", "warning"))
    args = p.parse_args(argv)
    args.queue_cores = [u.strip() for u in args.queue_cores.split(",") if u.strip()]
    if not args.store or not args.blobs or not args.queue_cores:
        p.error("--store, --blobs and --queue-cores are required")
    return args


async def run(args: argparse.Namespace) -> None:
    store = open_store(args.store)
    blobs = open_blobs(args.blobs)
    jobs = RemoteJobs(args.queue_cores, os.environ.get("LOAM_INTERNAL_TOKEN") or None)
    engines = Engines(
        store, blobs, jobs, _Authenticator(store, args.auth),
        StoreCredentials(store) if args.auth else NoCredentials(),
        EngineSettings(data_dir=Path(args.data).resolve(), runner_id=args.id, spark_host=args.spark_host,
                       spark_port=args.spark_port),
    )  # fmt: skip
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await engines.start()
        print(f"loam engines {args.id}: spark connect on {engines.spark_url}", flush=True)
        print(f"loam engines {args.id}: ready", flush=True)
        # Submits land in other processes: pick up namespaces that got engine jobs since.
        while not stop.is_set():
            for ns in await engines.runs.namespaces():
                engines.runner.watch_namespace(ns)
            try:
                await asyncio.wait_for(stop.wait(), NAMESPACE_RESCAN_S)
            except TimeoutError:
                pass
    finally:
        await engines.stop()
        await jobs.close()
        await store.close()
        print(f"loam engines {args.id}: stopped", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(args.log_level)
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
