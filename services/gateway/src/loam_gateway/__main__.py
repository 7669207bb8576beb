"""`loam gateway`: the gateway as its own process, routing to queue-core processes.

    loam gateway --queue-cores http://127.0.0.1:7721,http://127.0.0.1:7722 \\
                 --store lmdb:///abs/loam.lmdb --host 127.0.0.1 --port 7720

The store holds the auth tokens (`--auth` / LOAM_AUTH=on; without auth the gateway
binds loopback only) and, when given, durable mode: the gateway serves the Resonate
protocol at `/resonate` on it and pushes what the sweepers' durable timers left in the
store's outbox to its SSE connections (loam_durable). Several gateways may serve
`/resonate` over one store: each says so in the store under `--advertise-url` (default
`http://<host>:<port>`), and a push whose SSE stream is on another gateway is handed to
that one (loam_durable.peers). Calls to the cores and to the other gateways carry
LOAM_INTERNAL_TOKEN. Environment: LOAM_QUEUE_CORES, LOAM_STORE, LOAM_HOST, LOAM_PORT,
LOAM_AUTH, LOAM_ADVERTISE_URL, LOAM_INTERNAL_TOKEN.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

from loam_durable.facade import DurableCore
from loam_durable.hub import Hub
from loam_durable.peers import Peers
from loam_durable.timers import OUTBOX_INTERVAL_S, DurableOutbox

from loam_common import tracing
from loam_common.errors import InvalidArgument
from loam_common.loop import configure_logging
from loam_common.serving import run_server_main, serve
from loam_common.store.runner import open_store
from loam_gateway.app import DEFAULT_PORT, DURABLE_BASE, create_app
from loam_gateway.audit_log import AuditLog
from loam_gateway.auth import StoreAuthenticator, auth_on, check_bind
from loam_gateway.durable_mount import DurableMount
from loam_gateway.guard import guard_flags, guard_policy
from loam_gateway.metrics_history import MetricsHistory
from loam_gateway.redaction import REDACT_ENV, Redaction
from loam_gateway.routing import Router


def _redaction(p: argparse.ArgumentParser, spec: str) -> Redaction:
    try:
        return Redaction.parse(spec)
    except InvalidArgument as e:
        p.error(f"--redact: {e}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    env = os.environ
    p = argparse.ArgumentParser(prog="loam gateway", description="Run the Loam gateway.")
    p.add_argument("--queue-cores", default=env.get("LOAM_QUEUE_CORES", ""),
                   help="comma-separated queue-core URLs (LOAM_QUEUE_CORES)")  # fmt: skip
    p.add_argument(
        "--store", default=env.get("LOAM_STORE"), help="store URL: auth tokens and durable mode (LOAM_STORE)"
    )
    p.add_argument("--host", default=env.get("LOAM_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(env.get("LOAM_PORT", DEFAULT_PORT)))
    p.add_argument("--auth", action="store_true", default=auth_on(env.get("LOAM_AUTH")),
                   help="require bearer tokens (LOAM_AUTH=on); needs --store")  # fmt: skip
    p.add_argument("--advertise-url", default=env.get("LOAM_ADVERTISE_URL"),
                   help="the URL other gateways reach this one at, for durable pushes (LOAM_ADVERTISE_URL; "
                        "default http://<host>:<port>, the machine's name for a wildcard host)")  # fmt: skip
    p.add_argument("--durable-outbox-interval", type=float,
                   default=float(env.get("LOAM_DURABLE_OUTBOX_INTERVAL_S", OUTBOX_INTERVAL_S)),
                   help="seconds between two reads of the durable outbox when no sweeper says it has pushes: "
                        "recovers a lost notice (LOAM_DURABLE_OUTBOX_INTERVAL_S)")  # fmt: skip
    p.add_argument("--log-level", default=env.get("LOAM_LOG_LEVEL", "warning"))
    guard_flags(p, env)
    p.add_argument("--metrics-interval", type=float, default=float(env.get("LOAM_METRICS_INTERVAL_S", 10)),
                   help="seconds between two samples of the metrics history ($LOAM_METRICS_INTERVAL_S)")  # fmt: skip
    p.add_argument("--redact", default=env.get(REDACT_ENV, ""),
                   help="payload fields REST hides: '[namespace=]field,a.b;...' ($LOAM_REDACT)")  # fmt: skip
    args = p.parse_args(argv)
    args.redaction = _redaction(p, args.redact)
    if not args.metrics_interval > 0:
        p.error("--metrics-interval must be a positive number of seconds")
    if not args.durable_outbox_interval > 0:
        p.error("--durable-outbox-interval must be a positive number of seconds")
    args.cores = [c.strip() for c in args.queue_cores.split(",") if c.strip()]
    if not args.cores:
        p.error("--queue-cores (or LOAM_QUEUE_CORES) is required")
    if args.auth and not args.store:
        p.error("--auth needs --store (the tokens live in the store)")
    return args


async def run(args: argparse.Namespace) -> None:
    store = open_store(args.store) if args.store else None
    router = Router(cores=args.cores, internal_token=os.environ.get("LOAM_INTERNAL_TOKEN"))
    tracing.configure_from_env("loam-gateway")
    durable, outbox, peers = None, None, None
    internal_token = os.environ.get("LOAM_INTERNAL_TOKEN")
    if store is not None:
        hub = Hub()
        core = DurableCore(store, hub)
        advertised = (args.advertise_url or _reachable_url(args.host, args.port)).rstrip("/")
        peers = core.peers = Peers(store, advertised + DURABLE_BASE, internal_token)
        durable, outbox = (
            DurableMount(core, hub, internal_token),
            DurableOutbox(core, args.durable_outbox_interval),
        )

    async def start() -> None:
        if peers is not None:
            await peers.run_once()  # known to the other gateways before the first request
            peers.start()
        if outbox is not None:
            outbox.start()

    async def stop() -> None:
        if outbox is not None:
            await outbox.stop()
        if peers is not None:
            await peers.stop()

    authenticator = StoreAuthenticator(store) if args.auth and store is not None else None
    app = create_app(
        router,
        authenticator,
        on_startup=start,
        on_shutdown=stop,
        durable=durable,
        guard=guard_policy(args),
        redaction=args.redaction,
        audit=AuditLog(store) if store is not None else None,
        metrics_history=MetricsHistory(router.metrics_text, store, args.metrics_interval)
        if store is not None
        else None,
    )
    url = f"http://{args.host}:{args.port}"

    def ready(server) -> None:
        print(f"loam gateway: routing to {', '.join(args.cores)}", flush=True)
        print(f"loam gateway: ready on {url}", flush=True)

    try:
        await serve(app, args.host, args.port, on_ready=ready, log_level=args.log_level)
    finally:
        if store is not None:
            await store.close()


def _reachable_url(host: str, port: int) -> str:
    """This gateway's URL for its peers: a wildcard bind is reached by the machine's name
    (in a container, its hostname, which the compose network resolves)."""
    if host in ("0.0.0.0", "::", ""):
        host = socket.gethostname()
    return f"http://{host}:{port}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(args.log_level)
    try:
        check_bind(args.host, args.auth)
    except ValueError as e:
        print(f"loam gateway: {e}", file=sys.stderr)
        return 2
    return run_server_main("loam gateway", run(args))


if __name__ == "__main__":
    sys.exit(main())
