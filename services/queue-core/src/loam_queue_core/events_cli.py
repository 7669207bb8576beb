"""`loam events`: a queue's event log, directly on the store (like `loam tokens`).

    loam events export --queue Q [--namespace NS] [--since T] [--until T]
                       [--format parquet|arrow] --out FILE [--store URL]
    loam events trim   --queue Q [--namespace NS] --before T [--store URL]

T is ns since the epoch or an ISO 8601 time (`2026-10-01T12:00:00Z`). The export has
the columns of spec 002 §4 (loam_common.event_export); the trim deletes the events
older than T from the log (what `QueueOp.TrimEvents` and `POST
/v1/queues/{q}/events:trim` do through the server).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import sys

from loam_common import events
from loam_common.store.runner import open_store, store_url_of

DEFAULT_STORE = "./.loam"


def parse_time(text: str) -> int:
    if text.isdigit():
        return int(text)
    t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp()) * 1_000_000_000 + t.microsecond * 1000


def _store_url(value: str) -> str:
    return store_url_of(value)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    env = os.environ
    p = argparse.ArgumentParser(
        prog="loam events", description="Export or trim a queue's event log (on the store)."
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("export", "trim"):
        s = sub.add_parser(name)
        s.add_argument(
            "--store",
            default=env.get("LOAM_STORE") or DEFAULT_STORE,
            help="store URL or SQLite path ($LOAM_STORE)",
        )
        s.add_argument("--namespace", "-n", default=env.get("LOAM_NAMESPACE") or "default")
        s.add_argument("--queue", "-q", required=True)
        if name == "export":
            s.add_argument(
                "--since", type=parse_time, default=0, help="from this time (ns or ISO 8601), inclusive"
            )
            s.add_argument("--until", type=parse_time, default=None, help="to this time, exclusive")
            s.add_argument("--format", choices=("parquet", "arrow"), default="parquet")
            s.add_argument("--out", "-o", required=True, help="the file to write")
        else:
            s.add_argument("--before", type=parse_time, required=True, help="delete events older than this")
    return p.parse_args(argv)


async def run(args: argparse.Namespace) -> int:
    from loam_common import event_export

    async with open_store(_store_url(args.store)) as store:
        if args.cmd == "export":
            table = await event_export.export_events(
                store, args.namespace, args.queue, args.since, args.until
            )
            event_export.write_table(table, args.out, args.format)
            print(f"{table.num_rows} events of {args.namespace}/{args.queue} -> {args.out} ({args.format})")
            return 0
        total = 0
        while True:
            n = await store.transact(
                events.event_log_trim, args.namespace, args.queue, args.before, events.BATCH
            )
            total += n
            if n < events.BATCH:
                break
        print(f"trimmed {total} events of {args.namespace}/{args.queue}")
        return 0


def main(argv: list[str] | None = None) -> int:
    try:
        return asyncio.run(run(parse_args(argv)))
    except ValueError as e:
        print(f"loam events: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
