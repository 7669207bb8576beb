"""A durable step over real HTTP without the SDK: `--callers` workflows at once, each a
`task.create` and then `--steps`/callers steps of the two fenced requests a step is
(`task.fence` with `promise.create`, then with `promise.settle`), sent by one aiohttp
client (keep-alive, as the Python SDK's) to a fresh `loam dev`. The server's CPU per
step (its process tree, /proc) is then uvicorn's HTTP handling, the gateway's envelope
handling and the transitions with their store work: what the server spends on a step,
without the SDK's other requests (acquire, heartbeats, listeners, fulfil) and pushes.

    .venv/bin/python bench/durable_http_bench.py [--steps 4000] [--callers 8]

Prints one JSON object: `server_cpu_us_per_step`, `steps_per_s`, the load average and
`speed_probe_us` (procstat.SpeedProbe: how fast the machine ran Python meanwhile).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "drivers"))
sys.path.insert(0, str(HERE.parent / "tests" / "e2e"))
import procstat  # noqa: E402  (bench/drivers/procstat.py)
from devserver import start_dev_server  # noqa: E402  (tests/e2e/devserver.py)

FAR = 2**50
HEAD = {"corrId": "c", "version": "2026-04-01"}


async def post(http: aiohttp.ClientSession, url: str, kind: str, data: dict) -> dict:
    body = json.dumps({"kind": kind, "head": HEAD, "data": data})
    async with http.post(url, data=body, headers={"content-type": "application/json"}) as r:
        out = await r.json()
        assert r.status == 200, out
        return out


async def workflow(http: aiohttp.ClientSession, url: str, wf: str, steps: int) -> None:
    tags = {"resonate:target": "poll://any@bench", "resonate:origin": wf, "resonate:branch": wf,
            "resonate:parent": wf, "resonate:scope": "global"}  # fmt: skip
    root = {"id": wf, "timeoutAt": FAR, "param": {}, "tags": tags}
    out = await post(http, url, "task.create", {"pid": "bench", "ttl": 600_000,
                                                "action": {"kind": "promise.create", "head": HEAD, "data": root}})  # fmt: skip
    version = out["data"]["task"]["version"]
    local = {"resonate:origin": wf, "resonate:branch": wf, "resonate:parent": wf, "resonate:scope": "local"}
    for i in range(steps):
        child = f"{wf}:{i}"
        create = {"id": child, "timeoutAt": FAR, "param": {"data": "e30="}, "tags": local}
        settle = {"id": child, "state": "resolved", "value": {"data": "MQ=="}}
        for kind, data in (("promise.create", create), ("promise.settle", settle)):
            await post(http, url, "task.fence", {"id": wf, "version": version,
                                                 "action": {"kind": kind, "head": HEAD, "data": data}})  # fmt: skip


async def drive(url: str, pid: int, steps: int, callers: int) -> dict:
    async with aiohttp.ClientSession() as http:
        await asyncio.gather(*(workflow(http, url, f"warm{i}", 20) for i in range(callers)))
        per = steps // callers
        probe = procstat.SpeedProbe()
        before, start = procstat.tree_cpu([pid]), time.perf_counter()
        await asyncio.gather(*(workflow(http, url, f"wf{i}", per) for i in range(callers)))
        elapsed = time.perf_counter() - start
        cpu = procstat.busy_cpu(before, procstat.tree_cpu([pid]))
    n = per * callers
    return {"steps": n, "callers": callers, "server_cpu_us_per_step": round(cpu / n * 1e6, 1),
            "steps_per_s": round(n / elapsed, 1), "load_average": os.getloadavg()[0],
            "speed_probe_us": probe.stop()}  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=4000)
    p.add_argument("--callers", type=int, default=8)
    args = p.parse_args()
    server = start_dev_server(Path(tempfile.mkdtemp(prefix="loam-durable-http-bench-")))
    try:
        report = asyncio.run(drive(server.url + "/resonate/", server.proc.pid, args.steps, args.callers))
    finally:
        server.stop()
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
