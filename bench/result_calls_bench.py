"""The result store's calls one at a time, as a Celery worker's result writes and a
caller's `AsyncResult.get` make them: one `loam.Client` against a fresh `loam dev`, N
`result_get` calls of a missing key, then N `result_set_many` calls of one Celery-sized
result each, every call awaited before the next. Reports, per kind, calls/s and the
server's CPU a call (its process tree, from /proc).

    .venv/bin/python bench/result_calls_bench.py [--calls 3000] [--url URL --pid PID]

With `--url`/`--pid` it measures a server already running (another checkout's `loam dev`,
for a comparison in turns) instead of starting one. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "drivers"))
sys.path.insert(0, str(HERE.parent / "tests" / "e2e"))
import procstat  # noqa: E402  (bench/drivers/procstat.py)
from devserver import start_dev_server  # noqa: E402  (tests/e2e/devserver.py)

import loam  # noqa: E402

# What Celery's backend stores for a task that returned None.
RESULT = (
    b'{"status": "SUCCESS", "result": null, "traceback": null, "children": [], '
    b'"date_done": "2026-12-07T02:00:00.000000+00:00", "task_id": "00000000-0000-0000-0000-000000000000"}'
)
DAY_S = 86400.0


async def measure(url: str, pid: int, calls: int) -> dict:
    client = loam.Client(url, namespace="bench")
    try:
        await client.result_set_many([("warm", RESULT, DAY_S)])  # connection and namespace set up
        await client.result_get("warm")

        async def get(i: int) -> None:
            await client.result_get(f"absent-{i}")

        async def set_one(i: int) -> None:
            await client.result_set_many([(f"celery-task-meta-{uuid.uuid4()}", RESULT, DAY_S)])

        out = {}
        for name, call in (("result_get", get), ("result_set_many_1", set_one)):
            before, start = procstat.tree_cpu([pid]), time.perf_counter()
            for i in range(calls):
                await call(i)
            elapsed = time.perf_counter() - start
            cpu = procstat.busy_cpu(before, procstat.tree_cpu([pid]))
            out[name] = {
                "calls_per_s": round(calls / elapsed),
                "server_cpu_us_per_call": round(cpu / calls * 1e6, 1),
            }
        return out
    finally:
        await client.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=3000)
    p.add_argument("--url", help="a running server (with --pid) instead of a fresh `loam dev`")
    p.add_argument("--pid", type=int, help="the running server's process id")
    args = p.parse_args()
    if args.url:
        if args.pid is None:
            p.error("--url needs --pid (the server's CPU is read from /proc)")
        report = asyncio.run(measure(args.url, args.pid, args.calls))
    else:
        server = start_dev_server(Path(tempfile.mkdtemp(prefix="loam-result-calls-bench-")))
        try:
            report = asyncio.run(measure(server.url, server.proc.pid, args.calls))
        finally:
            server.stop()
    print(json.dumps({"calls": args.calls, **report}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
