"""`loam-durable` / `python -m loam_durable`: the durable service as its own process.

    loam-durable --store lmdb:///abs/loam.lmdb --host 127.0.0.1 --port 7730 [--auth]

Serves the Resonate protocol at `http://host:port/` (`POST /`, `GET /poll/{group}/{pid}`)
and delivers the pushes the sweepers' durable timers left in the store's outbox. The
timers themselves run in the sweeper processes (`loam sweeper`). Like a gateway, it
hands a push whose stream is on another process serving the same store to that one
(peers.py), and says where it is reached with `--advertise-url` (LOAM_ADVERTISE_URL). Without auth it binds
loopback only and every request is in the `default` namespace (or the one named by
`x-loam-namespace`). Environment: LOAM_STORE, LOAM_HOST, LOAM_PORT, LOAM_AUTH.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Mapping

import uvicorn

from loam_common.auth import ACTIONS, token_verify
from loam_common.errors import InvalidArgument, PermissionDenied, Unauthenticated
from loam_common.loop import configure_logging
from loam_common.store.runner import open_store
from loam_durable.app import create_durable_app
from loam_durable.facade import DurableCore
from loam_durable.hub import Hub
from loam_durable.peers import Peers
from loam_durable.timers import OUTBOX_INTERVAL_S, DurableOutbox


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    env = os.environ
    p = argparse.ArgumentParser(prog="loam-durable", description="Run the Loam durable (Resonate) service.")
    p.add_argument("--store", default=env.get("LOAM_STORE"), help="store URL (LOAM_STORE)")
    p.add_argument("--host", default=env.get("LOAM_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(env.get("LOAM_PORT", "7730")))
    p.add_argument(
        "--auth", action="store_true", default=env.get("LOAM_AUTH", "").lower() in ("1", "on", "true", "yes")
    )
    p.add_argument("--advertise-url", default=env.get("LOAM_ADVERTISE_URL"))
    p.add_argument("--outbox-interval", type=float,
                   default=float(env.get("LOAM_DURABLE_OUTBOX_INTERVAL_S", OUTBOX_INTERVAL_S)),
                   help="seconds between two reads of the outbox when no sweeper says it has pushes")  # fmt: skip
    p.add_argument("--log-level", default=env.get("LOAM_LOG_LEVEL", "warning"))
    args = p.parse_args(argv)
    if not args.store:
        p.error("--store (or LOAM_STORE) is required")
    if not args.outbox_interval > 0:
        p.error("--outbox-interval must be a positive number of seconds")
    return args


async def run(args: argparse.Namespace) -> None:
    store = open_store(args.store)
    hub = Hub()
    core = DurableCore(store, hub)
    outbox = DurableOutbox(core, args.outbox_interval)
    internal_token = os.environ.get("LOAM_INTERNAL_TOKEN")
    peers = core.peers = Peers(store, args.advertise_url or f"http://{args.host}:{args.port}", internal_token)

    async def authenticate(headers: Mapping[str, str], action: str) -> str:
        if not args.auth:  # loopback only (main checks the bind)
            ns = headers.get("x-loam-namespace") or "default"
            if not ns or "/" in ns:
                raise InvalidArgument("x-loam-namespace", "must be a name without '/'")
            return ns
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("missing bearer token: send 'authorization: Bearer loam_<id>_<secret>'")
        principal = await store.snapshot(token_verify, token.strip())
        if action not in ACTIONS or action not in principal.actions:
            raise PermissionDenied(
                f"this token lacks the {action!r} action in namespace {principal.namespace!r}"
            )
        return principal.namespace

    app = create_durable_app(core, hub, authenticate, internal_token)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level)
    server = _AnnouncingServer(config, f"loam-durable: ready on http://{args.host}:{args.port}")
    await peers.run_once()
    peers.start()
    outbox.start()
    try:
        await server.serve()
    finally:
        await outbox.stop()
        await peers.stop()
        await store.close()


class _AnnouncingServer(uvicorn.Server):
    """Prints its "ready" line once it accepts connections, not before."""

    def __init__(self, config: uvicorn.Config, ready_line: str) -> None:
        super().__init__(config)
        self.ready_line = ready_line

    async def startup(self, sockets=None) -> None:  # noqa: ANN001 - uvicorn's signature
        await super().startup(sockets)
        if self.started:
            print(self.ready_line, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(args.log_level)
    if not args.auth and args.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            "loam-durable: refusing to bind a non-loopback address without auth (LOAM_AUTH=on)",
            file=sys.stderr,
        )
        return 2
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
