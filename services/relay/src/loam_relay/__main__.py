"""`loam relay` / `python -m loam_relay`: run one relay process.

    loam relay --store URL [--id NAME] [--interval 0.1] [--lease-ttl 10]
               [--retention-days 7]

Environment: LOAM_STORE, LOAM_RELAY_ID (default `<host>-<pid>`), LOAM_RELAY_INTERVAL,
LOAM_RELAY_LEASE_TTL, LOAM_EVENT_RETENTION_DAYS. A separate relay process trims the
event logs of its shards and moves into them any outbox rows an earlier server left,
looking every `--interval` seconds (100 ms by default, backing off while idle; an idle
pass is one read). Several relays may run; they split the queue shards through fenced
ownership leases. SIGINT / SIGTERM stop it gracefully and release its leases.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys

from loam_common.loop import configure_logging, serve_until_signalled
from loam_common.store.runner import open_store
from loam_relay.service import RelayService

DAY_NS = 24 * 3600 * 1_000_000_000


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    env = os.environ
    p = argparse.ArgumentParser(
        prog="loam relay", description="Run a Loam relay process (outbox → event log)."
    )
    p.add_argument(
        "--store",
        default=env.get("LOAM_STORE"),
        help="store URL, e.g. lmdb:///abs/dir or sqlite:///abs/path.db (LOAM_STORE)",
    )
    p.add_argument(
        "--id",
        default=env.get("LOAM_RELAY_ID") or f"{socket.gethostname()}-{os.getpid()}",
        help="this relay's id (LOAM_RELAY_ID)",
    )
    p.add_argument(
        "--interval",
        type=float,
        default=float(env.get("LOAM_RELAY_INTERVAL", "0.1")),
        help="seconds between passes",
    )
    p.add_argument(
        "--lease-ttl",
        type=float,
        default=float(env.get("LOAM_RELAY_LEASE_TTL", "10")),
        help="shard lease TTL, seconds",
    )
    p.add_argument(
        "--retention-days",
        type=float,
        default=float(env.get("LOAM_EVENT_RETENTION_DAYS", "7")),
        help="keep events this long (LOAM_EVENT_RETENTION_DAYS)",
    )
    p.add_argument("--log-level", default=env.get("LOAM_LOG_LEVEL", "warning"))
    args = p.parse_args(argv)
    if not args.store:
        p.error("--store (or LOAM_STORE) is required")
    if "/" in args.id or not args.id:
        p.error("--id must be non-empty and contain no '/'")
    if args.interval <= 0 or args.lease_ttl <= 0 or args.retention_days <= 0:
        p.error("--interval, --lease-ttl and --retention-days must be positive")
    return args


async def run(args: argparse.Namespace) -> None:
    store = open_store(args.store)
    service = RelayService(
        store,
        args.id,
        interval=args.interval,
        ttl_ns=int(args.lease_ttl * 1e9),
        retention_ns=int(args.retention_days * DAY_NS),
    )
    await serve_until_signalled(service, store, f"loam relay {args.id}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(args.log_level)
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
