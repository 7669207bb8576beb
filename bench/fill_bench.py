"""What a big bulk fill leaves behind: `loam dev` is filled with N jobs (default
1,000,000) by `enqueue_bulk` (1,000 a call, one call at a time), then for `--seconds`
the server's CPU is read each second (/proc, all threads) next to the time of one
enqueue made then. A server still busy after the fill shows here; the harness's growth
table reports the same as "idle after fill".

    .venv/bin/python bench/fill_bench.py
    .venv/bin/python bench/fill_bench.py --jobs 300000 --store sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import loam

sys.path.insert(0, str(Path(__file__).resolve().parent / "drivers"))
from procstat import free_port, process_cpu  # noqa: E402  (bench/drivers/procstat.py)


async def main(args: argparse.Namespace) -> None:
    port = free_port()
    data = tempfile.mkdtemp(prefix="loam-fill-")
    cmd = [sys.executable, "-m", "loam_gateway.dev", "--port", str(port), "--data", data]
    if args.store == "sqlite":
        cmd += ["--store", f"sqlite:///{data}/loam.db"]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in server.stdout:  # type: ignore[union-attr]
            if "ready" in line:
                break
        # Keep reading what it prints: a full pipe would stop the server mid-log.
        threading.Thread(target=server.stdout.read, daemon=True).start()  # type: ignore[union-attr]
        async with loam.Client(f"http://127.0.0.1:{port}") as client:
            batch = [("noop", None)] * 1000
            t0 = time.perf_counter()
            for _ in range(args.jobs // 1000):
                await client.enqueue_bulk("fill", batch)
            took = time.perf_counter() - t0
            print(f"{args.jobs:,} jobs on {args.store} in {took:.0f} s ({args.jobs / took:,.0f} jobs/s), "
                  f"load average {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
            prev = process_cpu(server.pid)
            for second in range(1, args.seconds + 1):
                await asyncio.sleep(1)
                t = time.perf_counter()
                await client.enqueue("probe", "noop")
                call_ms = (time.perf_counter() - t) * 1000
                now = process_cpu(server.pid)
                print(f"  +{second:2d} s: server {100 * (now - prev):3.0f} % of a core, an enqueue {call_ms:.2f} ms",
                      flush=True)  # fmt: skip
                prev = now
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=1_000_000)
    p.add_argument("--seconds", type=int, default=30, help="seconds watched after the fill (default 30)")
    p.add_argument("--store", choices=("lmdb", "sqlite"), default="lmdb")
    asyncio.run(main(p.parse_args()))
