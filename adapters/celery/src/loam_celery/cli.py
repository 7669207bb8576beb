"""`loam-celery sync-schedules <app>`: upsert the app's beat entries as Loam schedules
without running beat (from CI or a deploy step). Also `celery -A <app> loam
sync-schedules`: loading this module from Celery's `celery.commands` entry point
registers the `loam` transport alias in every `celery` command."""

from __future__ import annotations

import argparse
import sys

import click

import loam_celery  # noqa: F401 - registers the `loam` transport alias


def _sync(app, prune: bool) -> int:
    from celery.exceptions import ImproperlyConfigured

    from loam_celery.beat import sync_schedules

    try:
        synced = sync_schedules(app, prune=prune)
    except (ImproperlyConfigured, ValueError) as e:
        print(f"loam-celery: {e}", file=sys.stderr)
        return 2
    for s in synced:
        print(f"{s.name}: {'updated' if s.changed else 'unchanged'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="loam-celery", description="Celery on Loam Jobs")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sync-schedules", help="upsert the app's beat_schedule as Loam schedules")
    s.add_argument("app", help="the Celery app, as `celery -A` takes it (module or module:attribute)")
    s.add_argument(
        "--no-prune", action="store_true", help="keep this app's schedules that are no longer entries"
    )
    args = p.parse_args(argv)
    from celery.app.utils import find_app

    sys.path.insert(0, "")
    app = find_app(args.app)
    return _sync(app, not args.no_prune)


@click.group(name="loam", help="Celery on Loam Jobs.")
def celery_command() -> None:
    pass


@celery_command.command(name="sync-schedules", help="Upsert the app's beat_schedule as Loam schedules.")
@click.option("--no-prune", is_flag=True, help="Keep this app's schedules that are no longer entries.")
@click.pass_context
def _sync_command(ctx: click.Context, no_prune: bool) -> None:
    ctx.exit(_sync(ctx.obj.app, not no_prune))


if __name__ == "__main__":
    sys.exit(main())
