"""`loam sweeper` / `python -m loam_sweeper`: run one sweeper process.

    loam sweeper --store URL [--blobs DIR] [--queue-cores URL,URL] [--id NAME]
                 [--interval 0.2] [--lease-ttl 10] [--quotas SPEC]

Every flag has an environment variable: LOAM_STORE, LOAM_BLOBS, LOAM_QUEUE_CORES,
LOAM_SWEEPER_ID (default `<host>-<pid>`), LOAM_SWEEPER_INTERVAL, LOAM_SWEEPER_LEASE_TTL,
LOAM_QUOTAS (the queue cores' `--quotas`: schedule ticks are checked against them);
LOAM_INTERNAL_TOKEN is sent on the wake-ups to the queue cores and on the durable
timers' outbox notices to the gateways. SIGINT / SIGTERM stop
it gracefully: the current pass finishes and its leases are released, so another
sweeper takes its shards at once. Several sweepers may run; they split the shards.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys

from loam_durable.facade import DurableCore
from loam_durable.peers import OutboxNotice
from loam_durable.timers import DurableTimers

from loam_common.blobs import open_blobs
from loam_common.errors import InvalidArgument
from loam_common.jobs import quotas
from loam_common.loop import configure_logging, serve_until_signalled
from loam_common.store.runner import open_store
from loam_sweeper.service import SweeperService


def default_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    env = os.environ
    p = argparse.ArgumentParser(prog="loam sweeper", description="Run a Loam sweeper process.")
    p.add_argument(
        "--store",
        default=env.get("LOAM_STORE"),
        help="store URL, e.g. lmdb:///abs/dir or sqlite:///abs/path.db (LOAM_STORE)",
    )
    p.add_argument(
        "--blobs", default=env.get("LOAM_BLOBS"), help="blob directory or s3://bucket/prefix (LOAM_BLOBS)"
    )
    p.add_argument(
        "--queue-cores",
        default=env.get("LOAM_QUEUE_CORES", ""),
        help="comma-separated queue-core URLs to wake (LOAM_QUEUE_CORES)",
    )
    p.add_argument(
        "--id", default=env.get("LOAM_SWEEPER_ID") or default_id(), help="this sweeper's id (LOAM_SWEEPER_ID)"
    )
    p.add_argument(
        "--interval",
        type=float,
        default=float(env.get("LOAM_SWEEPER_INTERVAL", "0.2")),
        help="seconds between passes",
    )
    p.add_argument(
        "--lease-ttl",
        type=float,
        default=float(env.get("LOAM_SWEEPER_LEASE_TTL", "10")),
        help="seconds a shard lease lasts without renewal: how soon a dead sweeper's shards are taken over",
    )
    p.add_argument(
        "--quotas",
        default=env.get("LOAM_QUOTAS"),
        help="per-namespace quotas, as the queue cores' --quotas: schedule ticks over one are skipped",
    )
    p.add_argument("--log-level", default=env.get("LOAM_LOG_LEVEL", "warning"))
    args = p.parse_args(argv)
    try:
        args.quotas = quotas.parse(args.quotas)
    except InvalidArgument as e:
        p.error(f"--quotas: {e}")
    if not args.store:
        p.error("--store (or LOAM_STORE) is required")
    if "/" in args.id or not args.id:
        p.error("--id must be non-empty and contain no '/'")
    if args.interval <= 0 or args.lease_ttl <= 0:
        p.error("--interval and --lease-ttl must be positive")
    args.queue_cores = [u.strip() for u in args.queue_cores.split(",") if u.strip()]
    return args


async def run(args: argparse.Namespace) -> None:
    store = open_store(args.store)
    blobs = open_blobs(args.blobs) if args.blobs else None
    ttl_ns = int(args.lease_ttl * 1e9)
    # Durable timers here have no SSE connections: their pushes go to the store's outbox,
    # which the gateway (or `loam durable`) drains onto its connections when told to.
    durable_core = DurableCore(store, None)
    durable_core.outbox_notice = OutboxNotice(store, os.environ.get("LOAM_INTERNAL_TOKEN"))
    durable = DurableTimers(durable_core, args.id, args.interval, ttl_ns=ttl_ns)
    service = SweeperService(
        store,
        blobs,
        args.id,
        args.queue_cores,
        args.interval,
        ttl_ns=ttl_ns,
        durable=durable,
        quotas=args.quotas,
    )
    await serve_until_signalled(service, store, f"loam sweeper {args.id}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(args.log_level)
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
