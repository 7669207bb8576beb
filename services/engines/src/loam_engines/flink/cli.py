"""`python -m loam_engines.flink`: the Flink commands over the gateway's REST routes
(`/v1/engines/flink/...`), for `loam flink ...` to mount.

    deploy NAME (--jar F --entry-class C | --py F | --sql F) [--parallelism N] [--arg A]...
           [--config K=V]... [--savepoint P] [--allow-non-restored-state] [--savepoint-every S]
    upgrade NAME (--jar F --entry-class C | --py F | --sql F) [same options]
    savepoint | suspend | cancel | status | logs NAME
    resume NAME [--savepoint P]          rollback NAME [--version N] [--savepoint P]
    ls

`--url`, `--token`, `--namespace` (or $LOAM_URL, $LOAM_TOKEN, $LOAM_NAMESPACE) as for `loam`.
Prints JSON; a refusal prints the server's message on stderr and exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx

DEFAULT_URL = "http://127.0.0.1:7720"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="loam flink", description="Flink deployments on Loam")
    # $LOAM_URL, or its alias $LOAM_JOBS_URL, as every Loam client reads them
    url = os.environ.get("LOAM_URL") or os.environ.get("LOAM_JOBS_URL") or DEFAULT_URL
    p.add_argument("--url", default=url)
    p.add_argument("--token", default=os.environ.get("LOAM_TOKEN"))
    p.add_argument("--namespace", "-n", default=os.environ.get("LOAM_NAMESPACE"))
    sub = p.add_subparsers(dest="command", required=True)

    def job_options(c: argparse.ArgumentParser) -> None:
        what = c.add_mutually_exclusive_group(required=True)
        what.add_argument("--jar", type=Path, help="a DataStream (or Table API) jar")
        what.add_argument("--py", type=Path, help="a PyFlink script")
        what.add_argument("--sql", type=Path, help="a file of Flink SQL statements")
        c.add_argument("--entry-class", help="the jar's main class")
        c.add_argument("--parallelism", type=int, default=1)
        c.add_argument("--arg", action="append", default=[], help="a program argument (repeat)")
        c.add_argument("--config", action="append", default=[], metavar="K=V", help="a Flink option (repeat)")
        c.add_argument("--allow-non-restored-state", action="store_true")

    deploy = sub.add_parser("deploy", help="deploy a new job")
    deploy.add_argument("name")
    job_options(deploy)
    deploy.add_argument("--savepoint", help="start from this savepoint")
    deploy.add_argument(
        "--savepoint-every", type=int, default=0, metavar="SECONDS", help="periodic savepoints"
    )
    upgrade = sub.add_parser("upgrade", help="stop with a savepoint, run a new version from it")
    upgrade.add_argument("name")
    job_options(upgrade)
    for name in ("savepoint", "suspend", "cancel", "status", "logs"):
        sub.add_parser(name).add_argument("name")
    resume = sub.add_parser("resume")
    resume.add_argument("name")
    resume.add_argument("--savepoint")
    rollback = sub.add_parser("rollback")
    rollback.add_argument("name")
    rollback.add_argument("--version", type=int)
    rollback.add_argument("--savepoint")
    sub.add_parser("ls")
    return p


def _job_body(http: httpx.Client, a: argparse.Namespace) -> dict[str, Any]:
    path: Path = a.jar or a.py or a.sql
    r = http.post("/artifacts", params={"filename": path.name}, content=path.read_bytes())
    _check(r)
    config = {}
    for kv in a.config:
        key, sep, value = kv.partition("=")
        if not sep:
            raise SystemExit(f"--config {kv!r}: write it as KEY=VALUE")
        config[key] = value
    body = {"artifact": r.json()["artifact"], "args": a.arg, "parallelism": a.parallelism, "config": config,
            "allow_non_restored_state": a.allow_non_restored_state}  # fmt: skip
    if a.entry_class:
        body["entry_class"] = a.entry_class
    return body


def _check(r: httpx.Response) -> None:
    if r.status_code >= 400:
        try:
            message = r.json().get("message", r.text)
        except ValueError:
            message = r.text
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(1)


def run(argv: list[str] | None = None) -> Any:
    a = _parser().parse_args(argv)
    headers = {}
    if a.token:
        headers["authorization"] = f"Bearer {a.token}"
    if a.namespace:
        headers["x-loam-namespace"] = a.namespace
    base = a.url.rstrip("/") + "/v1/engines/flink"
    with httpx.Client(base_url=base, headers=headers, timeout=600) as http:
        if a.command == "ls":
            r = http.get("/deployments")
        elif a.command == "status":
            r = http.get(f"/deployments/{a.name}")
        elif a.command == "logs":
            r = http.get(f"/deployments/{a.name}/logs")
        elif a.command == "deploy":
            body = _job_body(http, a) | {"name": a.name, "savepoint_interval_s": a.savepoint_every}
            if a.savepoint:
                body["savepoint"] = a.savepoint
            r = http.post("/deployments", json=body)
        elif a.command == "upgrade":
            r = http.post(f"/deployments/{a.name}:upgrade", json=_job_body(http, a))
        elif a.command == "resume":
            r = http.post(f"/deployments/{a.name}:resume", json={"savepoint": a.savepoint})
        elif a.command == "rollback":
            r = http.post(
                f"/deployments/{a.name}:rollback", json={"version": a.version, "savepoint": a.savepoint}
            )
        else:  # savepoint, suspend, cancel
            r = http.post(f"/deployments/{a.name}:{a.command}")
        _check(r)
        return r.json()


def main(argv: list[str] | None = None) -> None:
    print(json.dumps(run(argv), indent=2))


if __name__ == "__main__":
    main()
