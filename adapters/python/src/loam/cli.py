"""The `loam` command.

    loam dev | gateway | queue-core | sweeper | relay | durable | engines [flags]   run a service
    loam jobs add|get|ls|retry|rm ...                                    jobs
    loam queues ls|counts|pause|resume|drain ...                         queues
    loam schedules add|ls|get|rm ...                                     cron and interval schedules
    loam flows add|get ...                                               job graphs (chain, group, chord, trees)
    loam tokens create|ls|revoke ...                                     API tokens (on the store)
    loam quotas get|set ...                                              the namespace's quotas
    loam spark submit|runs|get|logs|cancel|restart|check ...             PySpark runs (loam.cli_spark)
    loam flink deploy|savepoint|upgrade|rollback|suspend|resume|cancel|status|ls   Flink (loam.cli_flink)

Client commands take `--url`, `--token`, `--namespace` (or $LOAM_URL, $LOAM_TOKEN,
$LOAM_NAMESPACE) and `--json` (machine output on stdout), before or after the command.
People get tables and, on bulk work, a progress bar on stderr. A failure is one line
on stderr (`loam: not_found: ...`) and a non-zero exit: 1 for an error the server
gave, 2 for bad usage, 3 when the server cannot be reached, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import importlib
import json
import os
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

# service command -> the module whose main(argv) runs it
SERVICES = {
    "dev": ("loam_gateway.dev", "every service in one process on the embedded store"),
    "gateway": ("loam_gateway.__main__", "the gateway: Connect JobsService, REST facade, auth"),
    "queue-core": ("loam_queue_core.server", "a queue-core process"),
    "sweeper": ("loam_sweeper.__main__", "a sweeper process: stalled, delayed, retention sweeps"),
    "relay": ("loam_relay.__main__", "a relay process: outbox to event log"),
    "durable": ("loam_durable.__main__", "the durable (Resonate protocol) service on its own"),
    "engines": ("loam_engines.__main__", "the engine runner: the Spark Connect endpoint and engine runs"),
    "events": (
        "loam_queue_core.events_cli",
        "export a queue's events (Parquet / Arrow) or trim its event log",
    ),
}
DEFAULT_STORE = "./.loam"
BULK_CHUNK = 1000
#: `jobs add --count` above this asks first (or takes --yes); above MAX_COUNT it is refused.
CONFIRM_COUNT = 10_000
MAX_COUNT = 1_000_000
#: `queues drain` removes this many per call, so each call ends quickly and shows progress.
DRAIN_STEP = 10_000
EXIT_ERROR, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_INTERRUPTED = 1, 2, 3, 130


class CliError(Exception):
    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


# -- output ---------------------------------------------------------------------------------
def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def _emit_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")


def _table(title: str | None, columns: list[str], rows: Iterable[Iterable[Any]]) -> None:
    from rich.table import Table

    t = Table(title=title, show_edge=False, header_style="bold")
    for c in columns:
        t.add_column(c, overflow="fold")
    for row in rows:
        t.add_row(*("" if v is None else str(v) for v in row))
    _console().print(t)


def _when(ns: int) -> str:
    if not ns:
        return ""
    return dt.datetime.fromtimestamp(ns / 1e9).isoformat(sep=" ", timespec="seconds")


def _short(value: Any, width: int = 48) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


# -- the parser -----------------------------------------------------------------------------
def _common(connection: bool = True) -> argparse.ArgumentParser:
    """Connection and output flags, accepted before or after the command."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("connection and output" if connection else "output")
    if connection:
        g.add_argument(
            "--url",
            default=argparse.SUPPRESS,
            help="server URL ($LOAM_URL or its alias $LOAM_JOBS_URL, default http://127.0.0.1:7720)",
        )
        g.add_argument("--token", default=argparse.SUPPRESS, help="bearer token ($LOAM_TOKEN)")
        g.add_argument(
            "--namespace", "-n", default=argparse.SUPPRESS, help="namespace on a dev server ($LOAM_NAMESPACE)"
        )
    g.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="JSON on stdout, for scripts"
    )
    return p


def _store_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=os.environ.get("LOAM_STORE") or DEFAULT_STORE,
                   help=f"store URL, or a dev data dir or store path ($LOAM_STORE, default {DEFAULT_STORE}, the dev data dir)")  # fmt: skip


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def _group(sub, name: str, help_: str):
    """A command group (`loam NAME ACTION ...`); its actions are required."""
    group = sub.add_parser(name, help=help_).add_subparsers(dest="cmd", metavar="ACTION")
    group.required = True
    return group


def _job_options(p: argparse.ArgumentParser, job: str) -> None:
    """The enqueue options `jobs add` and `schedules add` share."""
    p.add_argument("--priority", type=int, help="1 (first) .. 2097151; default the FIFO band")
    p.add_argument("--lifo", action="store_true", help="last in, first out (FIFO band only)")
    p.add_argument("--attempts", type=int, help=f"attempts before {job} fails")
    p.add_argument("--backoff", type=float, help="fixed seconds between attempts")
    p.add_argument("--visibility", type=float, help="lease length in seconds")
    p.add_argument("--subject", help="at most one running job per subject")
    p.add_argument("--header", action="append", default=[], metavar="K=V", help="a task header (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    p = argparse.ArgumentParser(prog="loam", description="Loam Jobs: run the services; manage jobs, queues, schedules, "
                                "flows and tokens.",
                                parents=[common])  # fmt: skip
    sub = p.add_subparsers(dest="group", metavar="COMMAND")
    for name, (_mod, help_) in SERVICES.items():
        sub.add_parser(name, help=help_, add_help=False)  # its own main(argv) parses the rest

    # jobs
    jobs = _group(sub, "jobs", "add, inspect, retry and remove jobs")
    a = jobs.add_parser("add", parents=[common], help="enqueue a job, --count copies, or --file of JSON lines",
                        description="PAYLOAD is JSON if it parses as JSON, else a string. A --file line is "
                        '{"name": ..., "payload": ..., <options>} or, without those keys, the payload itself.')  # fmt: skip
    a.add_argument("queue")
    a.add_argument("name", nargs="?", help="task name (default for --file lines)")
    a.add_argument("payload", nargs="?", help="JSON (or a plain string)")
    a.add_argument("--count", type=_positive, default=1,
                   help=f"enqueue this many copies (in bulk calls; above {CONFIRM_COUNT:,} asks first, "
                        f"at most {MAX_COUNT:,})")  # fmt: skip
    a.add_argument("--yes", "-y", action="store_true", help="do not ask before a large --count")
    a.add_argument("--file", help="JSON lines to enqueue ('-' for stdin)")
    a.add_argument("--delay", type=float, help="seconds before the job may run")
    _job_options(a, "the job")
    a.add_argument("--job-key", help="unique in the queue (BullMQ jobId, Celery task id)")
    g = jobs.add_parser("get", parents=[common], help="one job, by id or job key")
    g.add_argument("queue")
    g.add_argument("job")
    ls = jobs.add_parser("ls", parents=[common], help="a queue's jobs, newest first")
    ls.add_argument("queue")
    ls.add_argument("--state", "-s", action="append", default=[], help="waiting, delayed, active, completed, failed, ... (repeatable or comma-separated)")  # fmt: skip
    ls.add_argument("--name", help="only this task name")
    ls.add_argument("--limit", type=int, default=50, help="at most this many (default 50; 0 = all)")
    for verb, help_ in (("retry", "run a finished job again"), ("rm", "remove a job")):
        v = jobs.add_parser(verb, parents=[common], help=help_)
        v.add_argument("queue")
        v.add_argument("job")

    # queues
    queues = _group(sub, "queues", "list queues, counts, pause, resume, drain")
    queues.add_parser("ls", parents=[common], help="every queue of the namespace with its counts")
    for verb, help_ in (("counts", "jobs per state"), ("pause", "stop leasing"), ("resume", "lease again")):
        q = queues.add_parser(verb, parents=[common], help=help_)
        q.add_argument("queue")
    d = queues.add_parser("drain", parents=[common], help="remove the waiting jobs")
    d.add_argument("queue")
    d.add_argument("--delayed", action="store_true", help="the delayed ones too")

    # schedules
    schedules = _group(sub, "schedules", "cron and interval schedules: add, ls, get, rm")
    sa = schedules.add_parser(
        "add", parents=[common], help="create or replace a schedule (the same rule again changes nothing)",
        description="Each tick enqueues NAME(PAYLOAD) in QUEUE. Give --cron (with --tz) or --every. "
        "PAYLOAD is JSON if it parses as JSON, else a string. Durations: 500ms, 30s, 5m, 2h, 1d, 1h30m "
        "or seconds; times: ISO 8601 (no zone: local time) or Unix seconds.",
    )  # fmt: skip
    sa.add_argument("id", help="the schedule id (the same id replaces the schedule)")
    sa.add_argument("queue")
    sa.add_argument("name", help="task name")
    sa.add_argument("payload", nargs="?", help="JSON (or a plain string)")
    sa.add_argument("--cron", help="'*/5 * * * *' (5 fields, 6 with seconds first) or @hourly, @daily, ...")
    sa.add_argument("--tz", help="the cron rule's IANA time zone, e.g. Europe/Paris (default UTC)")
    sa.add_argument("--every", help="a fixed interval instead of cron: 30s, 5m, 1h, ...")
    sa.add_argument("--limit", type=int, help="fire at most this many ticks")
    sa.add_argument("--start", help="no tick before this time")
    sa.add_argument("--end", help="no tick after this time")
    sa.add_argument("--offset", help="shift every tick by this duration")
    sa.add_argument("--immediately", action="store_true", help="also fire one tick now")
    sa.add_argument("--misfire", choices=["fire-latest", "skip", "fire-all"],
                    help="ticks missed while no sweeper ran (default fire-latest: the latest fires once)")  # fmt: skip
    sa.add_argument("--misfire-grace", help="a tick this late is still on time (default 60s)")
    _job_options(sa, "a tick's job")
    schedules.add_parser("ls", parents=[common], help="every schedule, with its next and last tick")
    for verb, help_ in (("get", "one schedule"), ("rm", "remove a schedule (the jobs it enqueued stay)")):
        v = schedules.add_parser(verb, parents=[common], help=help_)
        v.add_argument("id")

    # flows
    flows = _group(sub, "flows", "job graphs: add (submit) and get")
    fa = flows.add_parser(
        "add", parents=[common], help="submit a flow from a JSON file ('-' for stdin)",
        description='The file is {"id": ..., "queue": <default queue>, "nodes": [...]} or just the list of '
        'nodes. A node is {"id", "queue", "name", "payload", "depends_on": [node ids], "on_failure": '
        "fail_parent | continue_parent | ignore_dependency | remove_dependency, <enqueue options as in "
        "`jobs add --file`>}. The same flow id and graph again returns the same jobs.",
    )  # fmt: skip
    fa.add_argument("file", help="the flow as JSON, '-' for stdin")
    fa.add_argument("--id", dest="flow_id", help="the flow id (overrides the file's)")
    fg = flows.add_parser("get", parents=[common], help="a flow's jobs and their states")
    fg.add_argument("id")

    # quotas
    quotas = _group(sub, "quotas", "the namespace's quotas: get, set")
    quotas.add_parser("get", parents=[common], help="the quotas in force and what the namespace holds")
    qs = quotas.add_parser(
        "set", parents=[common], help="change the namespace's limits (a deployment:admin token)",
        description="Each NAME=N sets one limit (0 lifts it); the others keep the values in force. Names: "
        "enqueue_rate (jobs a second), stored_jobs, payload_bytes (of the jobs stored), active_leases, "
        "schedules. Applies without a restart, within a second on every server.",
    )  # fmt: skip
    qs.add_argument("limits", nargs="*", metavar="NAME=N")
    qs.add_argument(
        "--reset", action="store_true", help="drop the namespace's own limits: the server's --quotas apply"
    )

    # tokens
    output = _common(connection=False)
    tokens = _group(sub, "tokens", "API tokens, directly on the store")
    c = tokens.add_parser("create", parents=[output], help="make a token (shown once)")
    c.add_argument(
        "--namespace", "-n", dest="token_namespace", required=True, help="the namespace it acts in"
    )
    c.add_argument("--actions", required=True, help="comma-separated: jobs:enqueue, jobs:consume, jobs:admin, jobs:schedule, jobs:engine, jobs:read (read only), deployment:admin (every namespace's metrics; setting quotas)")  # fmt: skip
    c.add_argument("--name", default="", help="a label for listings")
    c.add_argument("--expires", type=float, help="seconds until it expires (default never)")
    _store_flag(c)
    t = tokens.add_parser("ls", parents=[output], help="the tokens (no secrets)")
    t.add_argument("--namespace", "-n", dest="token_namespace", help="only this namespace's tokens")
    _store_flag(t)
    r = tokens.add_parser("revoke", parents=[output], help="revoke a token by id")
    r.add_argument("id")
    _store_flag(r)

    from loam import cli_flink, cli_spark

    cli_spark.add_parser(sub, common, _group)
    cli_flink.add_parser(sub, common, _group)
    return p


# -- client commands ------------------------------------------------------------------------
def _client(args: argparse.Namespace) -> Any:
    from loam.client import Client

    return Client(
        getattr(args, "url", None),
        token=getattr(args, "token", None),
        namespace=getattr(args, "namespace", None),
    )


def _parse_payload(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _add_options(args: argparse.Namespace) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    for key in ("delay", "priority", "attempts", "backoff", "visibility", "job_key", "subject"):
        value = getattr(args, key)
        if value is not None:
            opts[key] = value
    if args.lifo:
        opts["lifo"] = True
    headers = {}
    for h in args.header:
        k, sep, v = h.partition("=")
        if not sep:
            raise CliError(f"--header {h!r}: use KEY=VALUE", EXIT_USAGE)
        headers[k] = v
    if headers:
        opts["headers"] = headers
    return opts


def _file_jobs(args: argparse.Namespace, base: dict[str, Any]) -> Iterator[dict[str, Any]]:
    stream = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")  # noqa: SIM115
    with stream:
        for n, line in enumerate(stream, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError as e:
                raise CliError(f"{args.file}:{n}: not JSON ({e})", EXIT_USAGE) from None
            if isinstance(value, dict) and ("payload" in value or "name" in value):
                job = {**base, **value}
            else:
                job = {**base, "payload": value}
            if not job.get("name"):
                raise CliError(f'{args.file}:{n}: no task name (give NAME or a "name" key)', EXIT_USAGE)
            yield job


def _count_lines(path: str) -> int | None:
    if path == "-":
        return None
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


async def _bulk(
    client: Any, args: argparse.Namespace, jobs: Iterable[dict[str, Any]], total: int | None
) -> dict[str, Any]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from loam.errors import JobsError

    out: list[dict[str, Any]] = []
    quiet = getattr(args, "json", False) or not sys.stderr.isatty()
    columns = [TextColumn("enqueue"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()]
    # Without a terminal (a log, CI), a line per tenth of a long run instead of a bar.
    print_lines = quiet and not getattr(args, "json", False) and (total or 0) >= CONFIRM_COUNT
    step, next_line = max((total or 0) // 10, 1), 0
    with Progress(*columns, console=_console(stderr=True), disable=quiet) as progress:
        bar = progress.add_task("enqueue", total=total)
        chunk: list[dict[str, Any]] = []

        async def send() -> None:
            nonlocal next_line
            for r in await client.enqueue_bulk(args.queue, chunk):
                if isinstance(r, JobsError):
                    out.append({"error": {"code": r.code, "message": str(r)}})
                else:
                    out.append(r.to_dict())
            progress.advance(bar, len(chunk))
            chunk.clear()
            if print_lines and (len(out) >= next_line or len(out) == total):
                print(f"enqueued {len(out):,} of {total:,}", file=sys.stderr, flush=True)
                next_line = len(out) + step

        for job in jobs:
            chunk.append(job)
            if len(chunk) >= BULK_CHUNK:
                await send()
        if chunk:
            await send()
    created = sum(1 for r in out if r.get("created"))
    errors = [r for r in out if "error" in r]
    return {"count": len(out), "created": created, "errors": len(errors), "jobs": out}


async def cmd_jobs(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        as_json = getattr(args, "json", False)
        if args.cmd == "add":
            opts = _add_options(args)
            if args.file:
                base = {"name": args.name, **opts} if args.name else dict(opts)
                if args.payload is not None:
                    raise CliError("give PAYLOAD or --file, not both", EXIT_USAGE)
                res = await _bulk(client, args, _file_jobs(args, base), _count_lines(args.file))
            elif not args.name:
                raise CliError("jobs add: give a task NAME (or --file)", EXIT_USAGE)
            elif args.count > 1:
                _confirm_count(args)
                payload = _parse_payload(args.payload)
                jobs = ({"name": args.name, "payload": payload, **opts} for _ in range(args.count))
                res = await _bulk(client, args, jobs, args.count)
            else:
                e = await client.enqueue(args.queue, args.name, _parse_payload(args.payload), **opts)
                if as_json:
                    _emit_json(e.to_dict())
                else:
                    print(f"{e.id}  {e.state}" + ("" if e.created else "  (existing job)"))
                return 0
            if as_json:
                _emit_json(res)
            else:
                print(f"enqueued {res['created']} of {res['count']} job(s) in {args.queue}"
                      + (f"; {res['errors']} refused" if res["errors"] else ""))  # fmt: skip
                for r in [r for r in res["jobs"] if "error" in r][:5]:
                    print(f"  refused: {r['error']['code']}: {r['error']['message']}", file=sys.stderr)
            return 1 if res["errors"] else 0
        if args.cmd == "get":
            job = await client.get_job(args.queue, args.job)
            if as_json:
                _emit_json(job.to_dict())
            else:
                _print_job(job)
            return 0
        if args.cmd == "ls":
            states = [s for v in args.state for s in v.split(",") if s]
            jobs = []
            async for job in client.iter_jobs(
                args.queue, states=states or None, name=args.name, limit=args.limit or None
            ):
                jobs.append(job)
            if as_json:
                _emit_json([j.to_dict() for j in jobs])
            else:
                _table(f"{args.queue}: {len(jobs)} job(s)", ["id", "name", "state", "attempt", "created", "payload"],
                       [(j.id, j.name, j.state, _attempt(j), _when(j.raw.created_ns), _short(j.to_dict()["payload"])) for j in jobs])  # fmt: skip
            return 0
        if args.cmd == "retry":
            job = await client.retry_job(args.queue, args.job)
            _emit_json(job.to_dict()) if as_json else print(f"{job.id}  {job.state}")
            return 0
        if args.cmd == "rm":
            removed = await client.remove_job(args.queue, args.job)
            _emit_json({"id": args.job, "removed": removed}) if as_json else print(
                f"{args.job}  {'removed' if removed else 'not removed'}"
            )
            return 0
    raise CliError(f"unknown jobs command {args.cmd!r}", EXIT_USAGE)


def _attempt(job: Any) -> str:
    """`2 of 3`: 1-based, as a worker's lease numbers it (LeasedJob.attempt)."""
    return f"{job.attempt_number} of {job.raw.attempts_max or '?'}"


def _confirm_count(args: argparse.Namespace) -> None:
    """Refuse a --count over MAX_COUNT; over CONFIRM_COUNT, ask (or take --yes)."""
    if args.count > MAX_COUNT:
        raise CliError(
            f"--count {args.count:,} is over the limit of {MAX_COUNT:,}; use --file for more", EXIT_USAGE
        )
    if args.count <= CONFIRM_COUNT or args.yes:
        return
    if not sys.stdin.isatty():
        raise CliError(
            f"--count {args.count:,} is over {CONFIRM_COUNT:,}: add --yes to enqueue that many", EXIT_USAGE
        )
    answer = input(f"enqueue {args.count:,} jobs into {args.queue}? [y/N] ")
    if answer.strip().lower() not in ("y", "yes"):
        raise CliError("not enqueued", EXIT_USAGE)


def _print_job(job: Any) -> None:
    d = job.to_dict()
    rows = [
        ("id", job.id), ("queue", job.queue), ("name", job.name), ("state", job.state),
        ("attempt", _attempt(job)),
        ("created", _when(job.raw.created_ns)), ("finished", _when(job.raw.finished_ns)),
        ("payload", _short(d.get("payload"), 200)),
    ]  # fmt: skip
    if "result" in d:
        rows.append(("result", _short(d["result"], 200)))
    if job.raw.progress:
        rows.append(("progress", _short(d.get("progress"), 200)))
    for e in job.raw.errors[-3:]:
        rows.append((f"error (attempt {e.attempt})", e.message))
    _table(None, ["field", "value"], rows)


#: `queues ls` columns: (count field, header). Short headers keep the table inside 80
#: columns (a queue name over 16 characters folds).
COUNT_COLUMNS = [("waiting", "wait"), ("prioritized", "prio"), ("delayed", "delay"), ("active", "active"),
                 ("completed", "done"), ("failed", "failed"), ("dead_lettered", "dlq")]  # fmt: skip


def _queue_table(queues: list[dict[str, Any]]) -> None:
    from rich.table import Table

    t = Table(title=f"{len(queues)} queue(s)", show_edge=False, header_style="bold")
    t.add_column("queue", overflow="fold")
    for _field, header in COUNT_COLUMNS:
        t.add_column(header, justify="right", no_wrap=True)
    t.add_column("paused", no_wrap=True)
    for q in queues:
        c = q.get("counts", {})
        t.add_row(
            q["name"], *(str(c.get(f, 0)) for f, _h in COUNT_COLUMNS), "yes" if c.get("paused") else "no"
        )
    _console().print(t)


async def _drain(client: Any, args: argparse.Namespace) -> int:
    """Drain in steps of DRAIN_STEP with a progress bar: each call ends well inside any
    deadline, and the total is what the steps removed."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    counts = await client.queue_counts(args.queue)
    total = (
        counts.get("waiting", 0)
        + counts.get("prioritized", 0)
        + (counts.get("delayed", 0) if args.delayed else 0)
    )
    quiet = getattr(args, "json", False) or not sys.stderr.isatty()
    removed = 0
    columns = [TextColumn("drain"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()]
    with Progress(*columns, console=_console(stderr=True), disable=quiet) as progress:
        bar = progress.add_task("drain", total=total or None)
        while True:
            n = await client.drain(args.queue, delayed=args.delayed, limit=DRAIN_STEP)
            removed += n
            progress.update(bar, completed=removed, total=max(total, removed) or None)
            if n < DRAIN_STEP:
                return removed


async def cmd_queues(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        as_json = getattr(args, "json", False)
        if args.cmd == "ls":
            queues = await client.list_queues()
            if as_json:
                _emit_json(queues)
            else:
                _queue_table(queues)
            return 0
        if args.cmd == "counts":
            counts = await client.queue_counts(args.queue)
            if as_json:
                _emit_json(counts)
            else:
                _table(args.queue, ["state", "jobs"], [(k, v) for k, v in counts.items()])
            return 0
        if args.cmd in ("pause", "resume"):
            await (client.pause if args.cmd == "pause" else client.resume)(args.queue)
            paused = args.cmd == "pause"
            _emit_json({"queue": args.queue, "paused": paused}) if as_json else print(
                f"{args.queue}  {'paused' if paused else 'resumed'}"
            )
            return 0
        if args.cmd == "drain":
            n = await _drain(client, args)
            _emit_json({"queue": args.queue, "removed": n}) if as_json else print(
                f"{args.queue}  removed {n} job(s)"
            )
            return 0
    raise CliError(f"unknown queues command {args.cmd!r}", EXIT_USAGE)


# -- schedules and flows --------------------------------------------------------------------
_DURATION_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def _duration(text: str | None, flag: str) -> float | None:
    """'500ms', '30s', '5m', '2h', '1d', '1h30m' or plain seconds → seconds."""
    if text is None:
        return None
    t = text.strip().lower()
    try:
        return float(t)
    except ValueError:
        pass
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)", t)
    if not parts or "".join(n + u for n, u in parts) != t.replace(" ", ""):
        raise CliError(f"{flag} {text!r}: use a duration such as 500ms, 30s, 5m, 2h, 1d or 1h30m", EXIT_USAGE)
    return sum(float(n) * _DURATION_UNITS[u] for n, u in parts)


def _time(text: str | None, flag: str) -> dt.datetime | float | None:
    """ISO 8601 (without a zone: local time) or Unix seconds."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        raise CliError(f"{flag} {text!r}: use an ISO 8601 time (2030-01-01T09:00+01:00) or Unix seconds",
                       EXIT_USAGE) from None  # fmt: skip


def _headers(args: argparse.Namespace) -> dict[str, str]:
    headers = {}
    for h in args.header:
        k, sep, v = h.partition("=")
        if not sep:
            raise CliError(f"--header {h!r}: use KEY=VALUE", EXIT_USAGE)
        headers[k] = v
    return headers


def _schedule_row(s: Any) -> list[Any]:
    error = _short(s.last_error, 40) if s.last_error else ""
    rule = f"{s.raw.cron} ({s.raw.tz or 'UTC'})" if s.raw.cron else s.rule
    return [s.id, s.queue, s.name, rule, _when(s.raw.next_ns) or "(none left)", _when(s.raw.last_tick_ns),
            s.count if not s.raw.limit else f"{s.count}/{s.raw.limit}", error]  # fmt: skip


SCHEDULE_COLUMNS = ["id", "queue", "name", "rule", "next", "last", "fired", "last error"]


def _print_schedule(s: Any) -> None:
    r = s.raw
    rows: list[tuple[str, Any]] = [
        ("id", s.id), ("queue", s.queue), ("name", s.name), ("payload", _short(s.to_dict()["payload"], 200)),
        ("rule", s.rule), ("next", _when(r.next_ns) or "(none left)"), ("last", _when(r.last_tick_ns)),
        ("last job", r.last_job_id), ("fired", s.count if not r.limit else f"{s.count} of {r.limit}"),
        ("misfire", s.misfire.replace("_", "-")),
    ]  # fmt: skip
    if r.start_ns:
        rows.append(("start", _when(r.start_ns)))
    if r.end_ns:
        rows.append(("end", _when(r.end_ns)))
    if r.offset_ns:
        rows.append(("offset", f"{r.offset_ns / 1e9:g}s"))
    if r.last_error:
        rows.append(("last error", r.last_error))
    _table(None, ["field", "value"], rows)


async def cmd_schedules(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        as_json = getattr(args, "json", False)
        if args.cmd == "add":
            if not args.cron and not args.every:
                raise CliError("schedules add: give --cron EXPR or --every DURATION", EXIT_USAGE)
            if args.cron and args.every:
                raise CliError("schedules add: give --cron or --every, not both", EXIT_USAGE)
            opts: dict[str, Any] = {}
            for key in ("priority", "attempts", "backoff", "visibility", "subject"):
                if getattr(args, key) is not None:
                    opts[key] = getattr(args, key)
            if args.lifo:
                opts["lifo"] = True
            if args.header:
                opts["headers"] = _headers(args)
            s = await client.schedule(
                args.id, args.queue, args.name, _parse_payload(args.payload),
                cron=args.cron, tz=args.tz, every=_duration(args.every, "--every"), limit=args.limit,
                start=_time(args.start, "--start"), end=_time(args.end, "--end"),
                offset=_duration(args.offset, "--offset"), immediately=args.immediately,
                misfire=args.misfire, misfire_grace=_duration(args.misfire_grace, "--misfire-grace"), **opts,
            )  # fmt: skip
            if as_json:
                _emit_json(s.to_dict())
            else:
                what = (
                    "unchanged"
                    if not s.changed
                    else "created"
                    if s.raw.created_ns == s.raw.updated_ns
                    else "replaced"
                )
                print(f"{s.id}  {what}  {s.rule}; next {_when(s.raw.next_ns) or '(none left)'}")
            return 0
        if args.cmd == "ls":
            found = await client.list_schedules()
            if as_json:
                _emit_json([s.to_dict() for s in found])
            else:
                _table(f"{len(found)} schedule(s)", SCHEDULE_COLUMNS, [_schedule_row(s) for s in found])
            return 0
        if args.cmd == "get":
            s = await client.get_schedule(args.id)
            _emit_json(s.to_dict()) if as_json else _print_schedule(s)
            return 0
        if args.cmd == "rm":
            removed = await client.unschedule(args.id)
            _emit_json({"id": args.id, "removed": removed}) if as_json else print(
                f"{args.id}  {'removed' if removed else 'not found'}"
            )
            return 0
    raise CliError(f"unknown schedules command {args.cmd!r}", EXIT_USAGE)


_NODE_KEYS = ("id", "queue", "name", "payload", "depends_on", "on_failure")


def _read_flow(path: str) -> tuple[str | None, list[Any]]:
    from loam.flows import FlowNode

    where = "stdin" if path == "-" else path
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise CliError(f"{where}: {e.strerror or e}") from None
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise CliError(f"{where}: not JSON ({e})", EXIT_USAGE) from None
    flow_id, default_queue = None, None
    if isinstance(doc, dict):
        flow_id, default_queue, doc = doc.get("id"), doc.get("queue"), doc.get("nodes")
    if not isinstance(doc, list) or not doc:
        raise CliError(
            f'{where}: expected {{"nodes": [...]}} or a list of nodes, with at least one node', EXIT_USAGE
        )
    nodes = []
    for i, n in enumerate(doc):
        if not isinstance(n, dict):
            raise CliError(f"{where}: node {i} is not an object", EXIT_USAGE)
        queue = n.get("queue", default_queue)
        missing = [k for k, v in (("id", n.get("id")), ("queue", queue), ("name", n.get("name"))) if not v]
        if missing:
            raise CliError(f"{where}: node {i} has no {', '.join(missing)}", EXIT_USAGE)
        opts = {k: v for k, v in n.items() if k not in _NODE_KEYS}
        try:
            nodes.append(FlowNode(n["id"], queue, n["name"], n.get("payload"), depends_on=n.get("depends_on") or (),
                                  on_failure=n.get("on_failure"), **opts))  # fmt: skip
        except (TypeError, ValueError) as e:
            raise CliError(f"{where}: node {i} ({n['id']!r}): {e}", EXIT_USAGE) from None
    return flow_id, nodes


async def _flow_states(client: Any, info: Any) -> dict[str, str]:
    from loam.errors import JobsError

    async def one(node: str) -> str:
        try:
            return (await client.get_job(*info.job(node))).state
        except JobsError as e:  # removed by retention, or a token without jobs:admin
            return e.code

    names = list(info.jobs)
    return dict(zip(names, await asyncio.gather(*(one(n) for n in names)), strict=True))


QUOTA_UNITS = {"enqueue_rate": "jobs/s", "stored_jobs": "jobs", "payload_bytes": "bytes",
               "active_leases": "jobs", "schedules": "schedules"}  # fmt: skip


def _quota_limits(items: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        name, sep, number = item.partition("=")
        if name not in QUOTA_UNITS or not sep:
            raise CliError(f"{item!r}: use NAME=N with NAME one of {', '.join(QUOTA_UNITS)}", EXIT_USAGE)
        try:
            value = int(number)
        except ValueError:
            raise CliError(f"{item!r}: {number!r} is not a whole number", EXIT_USAGE) from None
        if value < 0:
            raise CliError(f"{item!r}: a limit is 0 (none) or more", EXIT_USAGE)
        out[name] = value
    return out


def _print_quotas(view: dict[str, Any]) -> None:
    rows = [(name, f"{view['quotas'][name]:,}" if view["quotas"][name] else "no limit",
             f"{view['usage'][name]:,}", unit) for name, unit in QUOTA_UNITS.items()]  # fmt: skip
    _table(f"quotas (from the {view['source']})", ["quota", "limit", "in use", "unit"], rows)


async def cmd_quotas(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        if args.cmd == "get":
            view = await client.get_quotas()
        elif args.reset:
            if args.limits:
                raise CliError("quotas set: give NAME=N limits or --reset, not both", EXIT_USAGE)
            view = await client.reset_quotas()
        else:
            changes = _quota_limits(args.limits)
            if not changes:
                raise CliError("quotas set: give at least one NAME=N (or --reset)", EXIT_USAGE)
            current = (await client.get_quotas())["quotas"]
            view = await client.set_quotas(**{**current, **changes})
        _emit_json(view) if getattr(args, "json", False) else _print_quotas(view)
        return 0


async def cmd_flows(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        as_json = getattr(args, "json", False)
        if args.cmd == "add":
            flow_id, nodes = _read_flow(args.file)
            info = await client.flow(nodes, id=args.flow_id or flow_id)
            if as_json:
                _emit_json(info.to_dict())
            else:
                print(f"flow {info.id}  {'created' if info.created else 'existing'}: {len(info.jobs)} job(s)")
                _table(
                    None, ["node", "queue", "job"], [(n, info.queues.get(n), j) for n, j in info.jobs.items()]
                )
            return 0
        if args.cmd == "get":
            info = await client.get_flow(args.id)
            states = await _flow_states(client, info)
            if as_json:
                d = info.to_dict()
                for j in d["jobs"]:
                    j["state"] = states.get(j["node"], "")
                _emit_json(d)
            else:
                _table(f"flow {info.id} (created {_when(info.created_ns)})", ["node", "queue", "job", "state"],
                       [(n, info.queues.get(n), j, states.get(n)) for n, j in info.jobs.items()])  # fmt: skip
            return 0
    raise CliError(f"unknown flows command {args.cmd!r}", EXIT_USAGE)


# -- tokens: directly on the store ----------------------------------------------------------
def _local_path(url: str) -> Path | None:
    """The file or directory of an embedded store's URL (lmdb:///dir, sqlite:///file.db)."""
    for scheme in ("lmdb://", "sqlite://"):
        if url.startswith(scheme + "/"):
            return Path(url[len(scheme) :])
    return None


def _token_dict(rec: Any) -> dict[str, Any]:
    return {
        "id": rec.id, "namespace": rec.namespace, "actions": list(rec.actions), "name": rec.name,
        "created_ns": rec.created_ns, "expires_ns": rec.expires_ns, "revoked": rec.revoked,
    }  # fmt: skip


async def cmd_tokens(args: argparse.Namespace) -> int:
    try:
        from loam_common import auth
        from loam_common.store.runner import open_store, store_url_of
    except ImportError as e:
        raise CliError(f"tokens need loam_common.auth, which this environment lacks ({e})") from None
    url = store_url_of(args.store)  # a dev data dir means its store
    local = _local_path(url)
    if local is not None and args.cmd != "create" and not local.exists():
        raise CliError(f"no store at {local}: run `loam dev` there first, or pass --store")
    if local is not None:
        local.parent.mkdir(parents=True, exist_ok=True)
    try:
        store = open_store(url)
    except ValueError as e:
        raise CliError(str(e), EXIT_USAGE) from None
    as_json = getattr(args, "json", False)
    async with store:
        if args.cmd == "create":
            expires_ns = None
            if args.expires is not None:
                import time

                expires_ns = time.time_ns() + int(args.expires * 1e9)
            token, rec = await store.transact(
                auth.token_create, args.token_namespace, args.actions, args.name, expires_ns
            )
            if as_json:
                _emit_json({"token": token, **_token_dict(rec)})
            else:
                print(token)
                print(f"id {rec.id}, namespace {rec.namespace}, actions {','.join(rec.actions)}"
                      " (the token is shown only now: keep it)", file=sys.stderr)  # fmt: skip
            return 0
        if args.cmd == "ls":
            recs = await store.snapshot(auth.token_list, args.token_namespace)
            if as_json:
                _emit_json([_token_dict(r) for r in recs])
            else:
                _table(f"{len(recs)} token(s)", ["id", "namespace", "actions", "name", "created", "expires", "revoked"],
                       [(r.id, r.namespace, ",".join(r.actions), r.name, _when(r.created_ns), _when(r.expires_ns) or "never",
                         "yes" if r.revoked else "") for r in recs])  # fmt: skip
            return 0
        if args.cmd == "revoke":
            rec = await store.transact(auth.token_revoke, args.id)
            _emit_json(_token_dict(rec)) if as_json else print(f"{rec.id}  revoked")
            return 0
    raise CliError(f"unknown tokens command {args.cmd!r}", EXIT_USAGE)


# -- entry point ----------------------------------------------------------------------------
def run_service(name: str, argv: list[str]) -> int:
    module, _help = SERVICES[name]
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise CliError(f"the {name} service is not available in this environment ({e})") from None
    code = mod.main(argv)
    return int(code or 0)


def _fail(message: str, code: int) -> int:
    print(f"loam: {message}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] in SERVICES:
            return run_service(argv[0], argv[1:])
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        # argparse fills optional positionals before the first flag only: take
        # `jobs add Q NAME --count 5 PAYLOAD` as meant.
        if args.group in ("jobs", "schedules") and args.cmd == "add":
            for field in ("name", "payload"):
                if getattr(args, field) is None and extra and not extra[0].startswith("--"):
                    setattr(args, field, extra.pop(0))
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        if not args.group:
            parser.print_help()
            return EXIT_USAGE
        from loam.cli_flink import cmd_flink
        from loam.cli_spark import cmd_spark

        handler = {"jobs": cmd_jobs, "queues": cmd_queues, "schedules": cmd_schedules, "flows": cmd_flows,
                   "quotas": cmd_quotas, "tokens": cmd_tokens, "spark": cmd_spark, "flink": cmd_flink}[args.group]  # fmt: skip
        return asyncio.run(handler(args))
    except KeyboardInterrupt:
        return _fail("interrupted", EXIT_INTERRUPTED)
    except CliError as e:
        return _fail(str(e), e.code)
    except Exception as e:  # one line, no traceback; LOAM_DEBUG=1 shows it
        if os.environ.get("LOAM_DEBUG"):
            raise
        return _fail(*_describe(e, argv))


def _describe(e: Exception, argv: list[str]) -> tuple[str, int]:
    from loam.errors import JobsError, Unavailable

    if isinstance(e, Unavailable):
        return f"unavailable: {e} (is the server running? see --url)", EXIT_UNREACHABLE
    if isinstance(e, JobsError):
        return f"{e.code}: {e}", EXIT_ERROR
    if isinstance(e, (ValueError, TypeError)):  # a bad value on the command line
        return str(e), EXIT_USAGE
    if isinstance(e, OSError):
        return f"{e.strerror or e}: {e.filename}" if e.filename else str(e), EXIT_ERROR
    return f"unexpected {type(e).__name__}: {e} (LOAM_DEBUG=1 shows the traceback)", EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
