"""What one call costs when it comes after a pause: the same single enqueue, timed back to
back and after idle gaps (the harness's latency workload enqueues one job every 20 ms).
It measures; it asserts nothing.

- `in process`: `QueueCore.enqueue` on a fresh LMDB store, no network: the same Python
  and the same transaction every time, only the pause before it differs (the gap is a
  sleep, or with `--spin` a busy loop of the same length that keeps the thread running).
- `over HTTP`: one SDK client and a fresh `loam dev`: the call's p50 and the CPU a call of
  the server (its process, from /proc, less what it spends idle over the same time) and
  of the client.
- `pure Python`: a small fixed function (a few hundred dict and JSON operations), for
  the machine's own slowdown on code that fits its caches.

    .venv/bin/python bench/idle_gap_bench.py [--calls 300] [--gaps 0,1,5,20] [--spin]

Prints one JSON object: per part, per gap (ms), the p50 (µs) and, over HTTP, the CPU
figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "drivers"))
import procstat  # noqa: E402  (bench/drivers/procstat.py)

import loam  # noqa: E402
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb  # noqa: E402
from loam_common.store.runner import open_store  # noqa: E402
from loam_queue_core.core import QueueCore  # noqa: E402


def p50_us(samples: list[float]) -> float:
    return round(sorted(samples)[len(samples) // 2] * 1e6, 1)


def pause(gap_s: float, spin: bool) -> None:
    if spin:
        end = time.perf_counter() + gap_s
        while time.perf_counter() < end:
            pass
    elif gap_s:
        time.sleep(gap_s)


async def after_gaps(
    call: Callable[[], Awaitable[object]], calls: int, gaps: list[float], spin: bool
) -> dict[str, float]:
    """Per gap (ms), the p50 (µs) of `calls` calls, each after a pause of that gap."""
    for _ in range(calls):  # warm: the code has run, what it creates exists
        await call()
    out = {}
    for gap in gaps:
        took = []
        for _ in range(calls):
            pause(gap, spin)
            t = time.perf_counter()
            await call()
            took.append(time.perf_counter() - t)
        out[f"{gap * 1e3:g}"] = p50_us(took)
    return out


async def in_process(calls: int, gaps: list[float], spin: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="loam-gap-") as d:
        store = open_store(f"lmdb://{d}/loam.lmdb")
        core = QueueCore(store)
        try:
            return await after_gaps(
                lambda: core.jobs.enqueue("gap", "q", pb.TaskSpec(name="noop")), calls, gaps, spin
            )
        finally:
            await store.close()


async def over_http(calls: int, gaps: list[float]) -> dict[str, dict[str, float]]:
    port = procstat.free_port()
    with tempfile.TemporaryDirectory(prefix="loam-gap-") as data:
        server = subprocess.Popen(
            [sys.executable, "-m", "loam_gateway.dev", "--port", str(port), "--data", data],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            assert server.stdout is not None
            for line in server.stdout:
                if "ready" in line:
                    break
            threading.Thread(target=server.stdout.read, daemon=True).start()
            async with loam.Client(f"http://127.0.0.1:{port}") as client:
                for _ in range(calls):
                    await client.enqueue("q", "noop")
                out = {}
                for gap in gaps:
                    took = []
                    s0, c0, w0 = procstat.process_cpu(server.pid), time.process_time(), time.perf_counter()
                    for _ in range(calls):
                        if gap:
                            await asyncio.sleep(gap)
                        t = time.perf_counter()
                        await client.enqueue("q", "noop")
                        took.append(time.perf_counter() - t)
                    s1, c1, wall = (
                        procstat.process_cpu(server.pid),
                        time.process_time(),
                        time.perf_counter() - w0,
                    )
                    # what the server spends with nobody calling, over the same wall time
                    i0 = procstat.process_cpu(server.pid)
                    await asyncio.sleep(min(wall, 5.0))
                    idle_per_s = (procstat.process_cpu(server.pid) - i0) / min(wall, 5.0)
                    out[f"{gap * 1e3:g}"] = {
                        "p50_us": p50_us(took),
                        "server_cpu_us_per_call": round(1e6 * (s1 - s0 - idle_per_s * wall) / calls, 1),
                        "client_cpu_us_per_call": round(1e6 * (c1 - c0) / calls, 1),
                    }
                return out
        finally:
            server.terminate()
            server.wait()


async def pure_python(calls: int, gaps: list[float], spin: bool) -> dict[str, float]:
    async def work() -> int:  # awaited at once: nothing in it suspends
        d = {str(i): json.dumps({"a": i, "b": [i, i + 1]}) for i in range(300)}
        return len(d)

    return await after_gaps(work, calls, gaps, spin)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--gaps", default="0,1,5,20", help="idle gaps before each call, ms")
    p.add_argument("--spin", action="store_true", help="busy-wait the in-process gaps instead of sleeping")
    args = p.parse_args()
    gaps = [float(g) / 1e3 for g in args.gaps.split(",")]
    out = {
        "calls": args.calls,
        "gap_ms": [g * 1e3 for g in gaps],
        "spin": args.spin,
        "pure_python_p50_us": asyncio.run(pure_python(args.calls, gaps, args.spin)),
        "in_process_enqueue_p50_us": asyncio.run(in_process(args.calls, gaps, args.spin)),
        "over_http_enqueue": asyncio.run(over_http(args.calls, gaps)),
        "load_average": os.getloadavg()[0],
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
