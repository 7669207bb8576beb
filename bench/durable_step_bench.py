"""A durable step without HTTP: the CPU of `DurableCore.request` for a step's two fenced
requests (`task.fence` with `promise.create`, then with `promise.settle`) on a SQLite
store in a temporary directory, `--callers` workflows at once (their transactions share
group commits as the server's do), and the SQLite statements a step costs when one
caller runs alone.

    .venv/bin/python bench/durable_step_bench.py [--steps 6000] [--callers 8]

Prints one JSON object: `cpu_us_per_step` (process CPU, every thread, over the timed
steps), `wall_us_per_step`, and `serial_statements_per_step` ({execute, executemany}).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from loam_durable.facade import DurableCore
from loam_durable.hub import Hub

import loam_common.store.sqlite as sqlite_backend
from loam_common.store import SqliteBackend, Store

FAR = 2**50
STATEMENTS = {"execute": 0, "executemany": 0}


class CountingConnection(sqlite3.Connection):
    def execute(self, *a, **k):  # noqa: ANN002, ANN003, ANN201 - sqlite3's own signature
        STATEMENTS["execute"] += 1
        return super().execute(*a, **k)

    def executemany(self, *a, **k):  # noqa: ANN002, ANN003, ANN201
        STATEMENTS["executemany"] += 1
        return super().executemany(*a, **k)


async def workflow(core: DurableCore, wf: str) -> int:
    tags = {"resonate:target": "poll://any@bench", "resonate:origin": wf, "resonate:branch": wf,
            "resonate:parent": wf, "resonate:scope": "global"}  # fmt: skip
    create = {"id": wf, "timeoutAt": FAR, "param": {}, "tags": tags}
    _, out = await core.request("default", "task.create", {"pid": "bench", "ttl": 600_000,
                                                           "action": {"kind": "promise.create", "data": create}})  # fmt: skip
    return out["task"]["version"]


async def step(core: DurableCore, wf: str, version: int, i: int) -> None:
    child = f"{wf}:{i}"
    tags = {"resonate:origin": wf, "resonate:branch": wf, "resonate:parent": wf, "resonate:scope": "local"}
    head = {"corrId": "c", "version": "2026-04-01"}
    create = {"id": child, "timeoutAt": FAR, "param": {"data": "e30="}, "tags": tags}
    await core.request("default", "task.fence", {"id": wf, "version": version,
                                                  "action": {"kind": "promise.create", "head": head, "data": create}})  # fmt: skip
    settle = {"id": child, "state": "resolved", "value": {"data": "MQ=="}}
    await core.request("default", "task.fence", {"id": wf, "version": version,
                                                  "action": {"kind": "promise.settle", "head": head, "data": settle}})  # fmt: skip


async def main(steps: int, callers: int) -> dict:
    real_connect = sqlite3.connect
    sqlite_backend.sqlite3.connect = lambda *a, **k: real_connect(*a, factory=CountingConnection, **k)  # type: ignore[attr-defined]
    store = Store(SqliteBackend(Path(tempfile.mkdtemp(prefix="loam-durable-step-")) / "store.db"))
    core = DurableCore(store, Hub())
    try:
        serial = await workflow(core, "serial")
        for i in range(50):  # warm up
            await step(core, "serial", serial, i)
        for k in STATEMENTS:
            STATEMENTS[k] = 0
        for i in range(50, 250):
            await step(core, "serial", serial, i)
        per_step = {k: round(n / 200, 2) for k, n in STATEMENTS.items()}
        versions = [await workflow(core, f"wf{c}") for c in range(callers)]

        async def run(c: int) -> None:
            for i in range(steps // callers):
                await step(core, f"wf{c}", versions[c], i)

        t0, c0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*(run(c) for c in range(callers)))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        done = steps // callers * callers
        return {"steps": done, "callers": callers, "cpu_us_per_step": round(cpu / done * 1e6, 1),
                "wall_us_per_step": round(wall / done * 1e6, 1), "serial_statements_per_step": per_step}  # fmt: skip
    finally:
        await store.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=6000)
    p.add_argument("--callers", type=int, default=8)
    args = p.parse_args()
    print(json.dumps(asyncio.run(main(args.steps, args.callers))))
    sys.exit(0)
