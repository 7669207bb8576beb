"""`loam spark ...`: engine runs of PySpark scripts, and `check`.

    loam spark submit SCRIPT [ARGS...] [--jvm] [--attempts N] [--timeout S] [--conf K=V]
                      [--schedule ID (--cron EXPR | --every S)] [--follow]
    loam spark runs | get RUN | logs RUN [--follow] | cancel RUN | restart RUN [--follow]
    loam spark check SCRIPT [ARGS...] [--spark-url sc://...] [--python PATH]

`submit --follow` prints the run's output as it comes and exits with the run's exit
status. `check` runs the script on the namespace's Sail and says whether it needs Apache
Spark (loam.spark_check): a table, or `--json`.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

STATES = {1: "queued", 2: "running", 3: "retrying", 4: "succeeded", 5: "failed", 6: "canceled"}


def add_parser(sub: Any, common: argparse.ArgumentParser, group: Any) -> None:
    spark = group(sub, "spark", "PySpark: submit scripts as engine runs, follow them, check them for Sail")
    s = spark.add_parser("submit", parents=[common], help="run a PySpark script on the namespace's Sail")
    s.add_argument("script", type=Path)
    s.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    s.add_argument(
        "--jvm", action="store_true", help="spark-submit on Apache Spark (RDD / SparkContext code)"
    )
    s.add_argument("--attempts", type=int, default=1, help="attempts before the run fails (default 1)")
    s.add_argument("--timeout", type=float, help="seconds per attempt (default one hour)")
    s.add_argument("--conf", action="append", default=[], metavar="K=V", help="a Spark conf (repeatable)")
    s.add_argument("--name", default="", help="a label for listings")
    s.add_argument("--schedule", help="a schedule id: run on --cron or --every instead of now")
    s.add_argument("--cron", help="cron expression of the schedule")
    s.add_argument("--every", type=float, help="the schedule's interval in seconds")
    s.add_argument("--follow", "-f", action="store_true", help="print the output; exit with the run's status")
    spark.add_parser("runs", parents=[common], help="the namespace's engine runs, newest first")
    for verb, help_ in (("get", "one run with its attempts"), ("cancel", "cancel a run"),
                        ("restart", "run a finished run's script again, as a new run")):  # fmt: skip
        v = spark.add_parser(verb, parents=[common], help=help_)
        v.add_argument("run")
        if verb == "restart":
            v.add_argument(
                "--follow", "-f", action="store_true", help="print the output; exit with its status"
            )
    lg = spark.add_parser("logs", parents=[common], help="a run's output")
    lg.add_argument("run")
    lg.add_argument("--follow", "-f", action="store_true", help="until the run is over")
    c = spark.add_parser("check", parents=[common], help="run a script on Sail; does it need Apache Spark?")
    c.add_argument("script", type=Path)
    c.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    c.add_argument("--spark-url", default=os.environ.get("LOAM_SPARK_URL") or "sc://localhost:15002",
                   help="the Spark endpoint ($LOAM_SPARK_URL, default sc://localhost:15002)")  # fmt: skip
    c.add_argument(
        "--python", help="a python with pyspark-client ($LOAM_SPARK_PYTHON, default .engines/spark)"
    )


def run_dict(r: Any) -> dict[str, Any]:
    kind = r.job.WhichOneof("spec") or ""
    return {
        "id": r.id, "name": r.job.name, "kind": kind, "entrypoint": getattr(r.job, kind).entrypoint if kind else "",
        "state": STATES.get(r.state, "unspecified"), "created_ns": r.created_ns, "started_ns": r.started_ns,
        "finished_ns": r.finished_ns, "exit_code": r.exit_code if r.HasField("exit_code") else None,
        "error": r.error, "schedule": r.schedule,
        "attempts": [{"attempt": a.attempt, "started_ns": a.started_ns, "finished_ns": a.finished_ns,
                      "exit_code": a.exit_code if a.HasField("exit_code") else None, "error": a.error}
                     for a in r.attempts],
    }  # fmt: skip


async def _follow(client: Any, run: str, as_json: bool) -> Any:
    from loam.cli import _emit_json

    async for line in client.follow_engine_run(run):
        if as_json:
            _emit_json({"n": line.n, "at_ns": line.at_ns, "stream": line.stream, "line": line.line})
        else:
            print(line.line, file=sys.stderr if line.stream == "stderr" else sys.stdout, flush=True)
    return await client.engine_run(run)


async def _started(client: Any, run: Any, follow: bool, as_json: bool) -> int:
    """A run just made (`submit`, `restart`): print it and exit 0, or with `--follow`
    stream its log until it ends and exit with its script's status (1 for a run that
    failed without one)."""
    from loam.cli import _emit_json

    if not follow:
        _emit_json(run_dict(run)) if as_json else print(f"run {run.id}  {STATES.get(run.state)}")
        return 0
    done = await _follow(client, run.id, as_json)
    print(f"run {done.id}  {STATES.get(done.state)}  {done.error}".rstrip(), file=sys.stderr)
    return done.exit_code if done.HasField("exit_code") and done.exit_code > 0 else int(done.state != 4)


async def cmd_spark(args: argparse.Namespace) -> int:
    from loam.cli import EXIT_USAGE, CliError, _client, _emit_json, _table, _when

    as_json = getattr(args, "json", False)
    if args.cmd == "check":
        return _check(args, as_json)
    async with _client(args) as client:
        if args.cmd == "submit":
            conf = dict(kv.split("=", 1) for kv in args.conf if "=" in kv)
            if len(conf) != len(args.conf):
                raise CliError("--conf takes K=V", EXIT_USAGE)
            if args.schedule and not (args.cron or args.every):
                raise CliError("--schedule needs --cron or --every", EXIT_USAGE)
            out = await client.submit_spark(args.script, args=args.args, conf=conf, jvm=args.jvm,
                                            attempts=args.attempts, timeout=args.timeout, name=args.name,
                                            schedule=args.schedule, cron=args.cron, every=args.every)  # fmt: skip
            if isinstance(out, str):
                _emit_json({"schedule": out}) if as_json else print(f"schedule {out}")
                return 0
            return await _started(client, out, args.follow, as_json)
        if args.cmd == "runs":
            runs = await client.engine_runs()
            if as_json:
                _emit_json([run_dict(r) for r in runs])
            else:
                _table(None, ["run", "script", "state", "attempts", "exit", "created"],
                       [(r.id, run_dict(r)["entrypoint"], STATES.get(r.state), len(r.attempts),
                         r.exit_code if r.HasField("exit_code") else "", _when(r.created_ns)) for r in runs])  # fmt: skip
            return 0
        if args.cmd == "restart":
            out = await client.restart_engine_run(args.run)
            return await _started(client, out, args.follow, as_json)
        if args.cmd in ("get", "cancel"):
            r = await (
                client.engine_run(args.run) if args.cmd == "get" else client.cancel_engine_run(args.run)
            )
            d = run_dict(r)
            if as_json:
                _emit_json(d)
            else:
                print(f"run {r.id}  {d['state']}  {d['entrypoint']}  {d['error']}".rstrip())
                _table(None, ["attempt", "started", "finished", "exit", "error"],
                       [(a["attempt"], _when(a["started_ns"]), _when(a["finished_ns"]), a["exit_code"], a["error"])
                        for a in d["attempts"]])  # fmt: skip
            return 0
        if args.cmd == "logs":
            if args.follow:
                await _follow(client, args.run, as_json)
                return 0
            lines, _ = await client.engine_run_logs(args.run)
            for line in lines:
                if as_json:
                    _emit_json({"n": line.n, "at_ns": line.at_ns, "stream": line.stream, "line": line.line})
                else:
                    print(line.line)
            return 0
    raise CliError(f"unknown spark command {args.cmd!r}", EXIT_USAGE)


def _check(args: argparse.Namespace, as_json: bool) -> int:
    from loam.cli import _emit_json, _table
    from loam.spark_check import check

    token = getattr(args, "token", None) or os.environ.get("LOAM_TOKEN")
    report = check(args.script, url=args.spark_url, token=token, python=args.python, args=args.args)
    if as_json:
        _emit_json(report)
        return 0
    _table(f"{report['script']}: {report['verdict']}", ["line", "call", "kind", "needs", "detail"],
           [(f.get("line", ""), f["call"], f["kind"], f["verdict"], f["detail"]) for f in report["findings"]]
           or [("", "", "nothing unsupported", "sail", "")])  # fmt: skip
    return 0
