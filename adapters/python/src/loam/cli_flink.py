"""`loam flink ...`: Flink deployments as engine runs (loam.Client.deploy_flink / flink_action).

    loam flink deploy NAME ARTIFACT [-- ARGS...] [--entry-class C] [--parallelism N] [--config K=V]
                      [--savepoint PATH] [--savepoint-interval S] [--allow-non-restored-state]
    loam flink deploy NAME --sql 'statements' | --sql-file FILE.sql
    loam flink upgrade NAME ARTIFACT [-- ARGS...] [--mode savepoint|last-state|stateless] [--entry-class C] ...
                       (or --sql / --sql-file)
    loam flink savepoint|suspend|cancel|status NAME
    loam flink resume NAME [--savepoint PATH]
    loam flink rollback NAME [--version N] [--savepoint PATH]
    loam flink ls

A deployment is named; the commands find its newest run. Each action waits until it is
done and prints the deployment (state, version, Flink job id, savepoints), or with
`--no-wait` returns once the server took it. An action that failed (an upgrade that was
rolled back, a savepoint Flink could not take) exits 1 with the reason on stderr
(`loam: ...`), bad usage 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

STATES = {1: "queued", 2: "running", 3: "retrying", 4: "succeeded", 5: "failed", 6: "canceled"}


def _spec_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("artifact", nargs="?", type=Path, help="the job: a .jar, a PyFlink .py or a .sql file")
    p.add_argument("args", nargs="*", help="the program's arguments (after --: ARTIFACT -- --flag value)")
    p.add_argument("--sql", help="Flink SQL statements, instead of an artifact")
    p.add_argument("--sql-file", type=Path, help="a file of Flink SQL statements")
    p.add_argument("--entry-class", default="", help="a jar job's main class")
    p.add_argument("--parallelism", type=int, default=0, help="the job's parallelism (default 1)")
    p.add_argument("--config", action="append", default=[], metavar="K=V", help="a Flink option (repeatable)")


def add_parser(sub: Any, common: argparse.ArgumentParser, group: Any) -> None:
    flink = group(sub, "flink", "Flink: deploy jobs on the Flink session cluster and manage their lifecycle")
    d = flink.add_parser("deploy", parents=[common], help="deploy a jar, PyFlink or SQL job")
    d.add_argument("name", help="the deployment's name")
    _spec_args(d)
    d.add_argument("--savepoint", default="", help="start from this savepoint")
    d.add_argument("--savepoint-interval", type=int, default=0, help="a savepoint this often, in seconds")
    d.add_argument("--allow-non-restored-state", action="store_true")
    d.add_argument("--no-wait", action="store_true", help="return once the server took the deploy")
    u = flink.add_parser("upgrade", parents=[common], help="stop with a savepoint, run a new version from it")
    u.add_argument("name")
    _spec_args(u)
    u.add_argument("--mode", choices=("savepoint", "last-state", "stateless"), default="savepoint",
                   help="how the state is carried: a savepoint (default), the newest retained checkpoint "
                        "(no savepoint taken), or none")  # fmt: skip
    u.add_argument("--no-wait", action="store_true")
    for verb, help_ in (("savepoint", "take a savepoint; the job keeps running"),
                        ("suspend", "stop the job with a savepoint"), ("cancel", "cancel the job (no savepoint)"),
                        ("status", "the deployment, and its job as Flink's REST API reports it now")):  # fmt: skip
        v = flink.add_parser(verb, parents=[common], help=help_)
        v.add_argument("name")
        v.add_argument("--no-wait", action="store_true")
    r = flink.add_parser("resume", parents=[common], help="run the suspended job again from a savepoint")
    r.add_argument("name")
    r.add_argument("--savepoint", default="", help="a recorded savepoint (default the newest)")
    r.add_argument("--no-wait", action="store_true")
    rb = flink.add_parser(
        "rollback", parents=[common], help="run a recorded version from a recorded savepoint"
    )
    rb.add_argument("name")
    rb.add_argument("--version", type=int, default=0, help="the version (default the one before the current)")
    rb.add_argument("--savepoint", default="", help="a recorded savepoint (default that version's newest)")
    rb.add_argument("--no-wait", action="store_true")
    flink.add_parser("ls", parents=[common], help="the namespace's Flink deployments (their newest runs)")


def run_dict(r: Any) -> dict[str, Any]:
    f = r.flink
    return {
        "run": r.id, "deployment": r.job.flink.deployment, "run_state": STATES.get(r.state, "unspecified"),
        "state": f.state, "version": f.version, "versions": f.versions, "job_id": f.job_id,
        "pending": f"{f.pending_action}/{f.pending_step}" if f.pending_action else None,
        "savepoints": [{"path": s.path, "version": s.version, "reason": s.reason, "taken_ns": s.taken_ns}
                       for s in f.savepoints],
        "last_action": f.last_action, "last_action_error": f.last_action_error, "error": r.error,
        "timings_ms": dict(f.timings_ms),
        "live": _live_dict(f.live) if f.live.seq else None,
    }  # fmt: skip


def _live_dict(live: Any) -> dict[str, Any]:
    return {"job_id": live.job_id, "state": live.state, "all_running": live.all_running, "restarts": live.restarts,
            "checkpoints_completed": live.checkpoints_completed, "checkpoints_failed": live.checkpoints_failed,
            "last_checkpoint": live.last_checkpoint_path, "last_checkpoint_ns": live.last_checkpoint_ns,
            "savepoint_in_progress": live.savepoint_in_progress, "restored_from": live.restored_from,
            "read_ns": live.read_ns, "error": live.error}  # fmt: skip


class _Failed(Exception):
    """One line for stderr and the exit status (raised here, reported by cmd_flink: the
    `loam` entry point may run as __main__, whose CliError is another class)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _spec(args: argparse.Namespace) -> dict[str, Any]:
    """The job version the command line gives, as keyword arguments of the SDK."""
    config = dict(kv.split("=", 1) for kv in args.config if "=" in kv)
    if len(config) != len(args.config):
        raise _Failed("--config takes K=V", 2)
    sources = [x for x in (args.artifact, args.sql, args.sql_file) if x is not None]
    if len(sources) != 1:
        raise _Failed("give one of ARTIFACT, --sql or --sql-file", 2)
    if args.sql_file is not None:
        sql, artifact, entrypoint = args.sql_file.read_text(), None, args.sql_file.name
    else:
        sql, artifact, entrypoint = args.sql, args.artifact, ""
    return {"artifact": artifact, "entrypoint": entrypoint, "sql": sql, "entry_class": args.entry_class,
            "args": args.args, "parallelism": args.parallelism, "config": config}  # fmt: skip


async def cmd_flink(args: argparse.Namespace) -> int:
    try:
        return await _cmd_flink(args)
    except _Failed as e:
        print(f"loam: {e}", file=sys.stderr)
        return e.code


async def _cmd_flink(args: argparse.Namespace) -> int:
    from loam.cli import _client, _emit_json, _table, _when

    as_json = getattr(args, "json", False)
    async with _client(args) as client:
        if args.cmd == "ls":
            newest: dict[str, Any] = {}
            for r in await client.engine_runs(page_size=1000):
                if r.job.WhichOneof("spec") == "flink":
                    newest.setdefault(r.job.flink.deployment, r)
            rows = [run_dict(r) for r in newest.values()]
            if as_json:
                _emit_json(rows)
            else:
                _table(None, ["deployment", "state", "version", "job", "savepoints", "run", "created"],
                       [(d["deployment"], d["state"] or d["run_state"], d["version"], d["job_id"], len(d["savepoints"]),
                         d["run"], _when(r.created_ns)) for d, r in zip(rows, newest.values(), strict=True)])  # fmt: skip
            return 0
        wait = not args.no_wait
        if args.cmd == "deploy":
            record = await client.deploy_flink(args.name, savepoint=args.savepoint, wait=wait,
                                               savepoint_interval=args.savepoint_interval,
                                               allow_non_restored_state=args.allow_non_restored_state, **_spec(args))  # fmt: skip
            error = record.error if record.state == 5 else ""
        else:
            run = await client.flink_run(args.name)
            kw: dict[str, Any] = {}
            if args.cmd == "upgrade":
                kw["upgrade"] = client.flink_spec(**_spec(args), upgrade_mode=args.mode)
            if args.cmd in ("resume", "rollback"):
                kw["savepoint"] = args.savepoint
            if args.cmd == "rollback":
                kw["version"] = args.version
            record = await client.flink_action(run.id, args.cmd, wait=wait, **kw)
            error = record.flink.last_action_error if wait and args.cmd != "status" else ""
        d = run_dict(record)
        if as_json:
            _emit_json(d)
        else:
            print(f"{d['deployment']}  {d['state'] or d['run_state']}  v{d['version']}  job {d['job_id'] or '-'}  "
                  f"run {d['run']}" + (f"  ({d['pending']})" if d["pending"] else ""))  # fmt: skip
            live = d["live"] if args.cmd == "status" else None
            if live is not None:  # what Flink says now, next to what Loam recorded
                print(f"flink: {live['error']}" if live["error"] else
                      f"flink: job {live['job_id']} {live['state']}{' (all running)' if live['all_running'] else ''}, "
                      f"{live['restarts']} restarts, {live['checkpoints_completed']} checkpoints"
                      + (f", the last {live['last_checkpoint']} at {_when(live['last_checkpoint_ns'])}"
                         if live["last_checkpoint"] else "")
                      + (", a savepoint in progress" if live["savepoint_in_progress"] else ""))  # fmt: skip
            if d["savepoints"]:
                _table(None, ["savepoint", "version", "reason", "taken"],
                       [(s["path"], s["version"], s["reason"], _when(s["taken_ns"])) for s in d["savepoints"]])  # fmt: skip
        if error:
            raise _Failed(f"{args.cmd} of {args.name}: {error}", 1)
        return 0
