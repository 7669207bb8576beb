"""The console's job list over HTTP: a 50-row page of `GET /v1/queues/{q}/jobs` over a
queue of 1,000,000 waiting jobs (issue 22's bar: under 50 ms p95), on `loam dev`.

The queue is filled once, through the Python SDK's bulk enqueue (one Connect call and
one transaction per 1,000 jobs). Then each server to compare runs in turn on that same
data directory, in rounds (A, B, A, B, ...), so the machine's load falls on both alike:
this tree's `loam dev`, and, with `--before PYTHON`, another checkout's (its venv's
python; the store layout is the same). Every round times, one request after another:
the first page, 200 pages deep by cursor, and the first page of all states; in full and,
when the server has it, in the summary view the console lists with.

    .venv/bin/python bench/console_list_bench.py                     # 1,000,000 jobs
    .venv/bin/python bench/console_list_bench.py --jobs 100000 --before ../other/.venv/bin/python
    .venv/bin/python bench/console_list_bench.py --keep ...; then --data <dir> to measure again

Prints a table and writes bench/results/console_list.json (with the load average at the
start and the end: other work on the machine moves every latency), with the server's CPU
time per page, which the machine's load moves much less.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from loam import Client

HERE = Path(__file__).resolve().parent
BATCH = 1000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_s(pid: int) -> float:
    """The process's CPU time so far (user + system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_average() -> float | None:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return None


class Dev:
    """`loam dev` run by `python` on `data`, on a free port, until stop()."""

    def __init__(self, python: str, data: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOAM_")}
        cmd = [
            python,
            "-m",
            "loam_gateway.dev",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--data",
            str(data),
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        ready = threading.Event()
        self.log: list[str] = []

        def pump() -> None:
            for line in self.proc.stdout:
                self.log.append(line)
                if "ready on " in line:
                    ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(60):
            self.stop()
            raise RuntimeError("loam dev did not start:\n" + "".join(self.log))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def fill(url: str, queue: str, jobs: int) -> float:
    t0 = time.perf_counter()
    async with Client(url, timeout=600) as client:  # a loaded machine can take long over 1,000 jobs
        sem = asyncio.Semaphore(4)

        async def one(n: int) -> None:
            async with sem:
                await client.enqueue_bulk(queue, [("bulk", {"user": "ada", "n": i}) for i in range(n)])

        await asyncio.gather(*(one(min(BATCH, jobs - i)) for i in range(0, jobs, BATCH)))
    return time.perf_counter() - t0


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


async def measure(
    url: str, pid: int, queue: str, pages: int
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Latencies per kind of page, and the server's CPU ms per page of each kind (its CPU
    time over the requests, one after another, divided by their number: what a page
    costs the server whatever the machine's load)."""
    out: dict[str, list[float]] = {}
    cpu: dict[str, float] = {}
    async with httpx.AsyncClient(base_url=url, timeout=60) as c:
        probe = await c.get(f"/v1/queues/{queue}/jobs?state=waiting&page_size=1&view=summary")
        # a server without the summary view ignores the parameter and sends the payload
        summary_ok = probe.status_code == 200 and probe.json()["jobs"][0]["payload"]["data"] is None
        views = ["full", "summary"] if summary_ok else ["full"]
        for _ in range(20):  # warm up
            await c.get(f"/v1/queues/{queue}/jobs?state=waiting&page_size=50")

        async def timed(params: dict) -> dict:
            t = time.perf_counter()
            r = await c.get(f"/v1/queues/{queue}/jobs", params=params)
            took = (time.perf_counter() - t) * 1000
            r.raise_for_status()
            return took, r.json()

        for view in views:
            extra = {"view": view} if view != "full" else {}
            first, deep, every = [], [], []
            c0 = cpu_s(pid)
            for _ in range(50):
                first.append((await timed({"state": "waiting", "page_size": 50, **extra}))[0])
            c1 = cpu_s(pid)
            token = ""
            for _ in range(pages):
                took, body = await timed({"state": "waiting", "page_size": 50, "page_token": token, **extra})
                deep.append(took)
                token = body["next_page_token"]
            c2 = cpu_s(pid)
            for _ in range(50):
                every.append((await timed({"page_size": 50, **extra}))[0])
            c3 = cpu_s(pid)
            out[f"first/{view}"], out[f"deep/{view}"], out[f"all_states/{view}"] = first, deep, every
            cpu[f"first/{view}"] = (c1 - c0) * 1000 / 50
            cpu[f"deep/{view}"] = (c2 - c1) * 1000 / pages
            cpu[f"all_states/{view}"] = (c3 - c2) * 1000 / 50
    return out, cpu


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pages", type=int, default=200, help="pages walked by cursor per round")
    ap.add_argument("--before", help="the python of another checkout's venv, to compare with")
    ap.add_argument("--out", default=str(HERE / "results" / "console_list.json"))
    ap.add_argument("--keep", action="store_true", help="keep the data directory")
    ap.add_argument("--data", help="a data directory a --keep run filled: measure again without filling")
    args = ap.parse_args()
    servers = {"this tree": sys.executable}
    if args.before:
        servers = {"before": args.before, **servers}
    data = Path(args.data) if args.data else Path(tempfile.mkdtemp(prefix="loam-console-list-"))
    results: dict = {"jobs": args.jobs, "rounds": args.rounds, "load_average_at_start": load_average(),
                     "when": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime())}  # fmt: skip
    try:
        if not args.data:
            dev = Dev(sys.executable, data)
            try:
                results["fill_s"] = round(await fill(dev.url, "big", args.jobs), 1)
            finally:
                dev.stop()
            print(f"filled {args.jobs:,} jobs in {results['fill_s']} s (in {data})", flush=True)
        times: dict[str, dict[str, list[float]]] = {name: {} for name in servers}
        cpus: dict[str, dict[str, list[float]]] = {name: {} for name in servers}
        for rnd in range(args.rounds):
            for name, python in servers.items():
                dev = Dev(python, data)
                try:
                    got, cpu = await measure(dev.url, dev.proc.pid, "big", args.pages)
                finally:
                    dev.stop()
                for k, v in got.items():
                    times[name].setdefault(k, []).extend(v)
                    cpus[name].setdefault(k, []).append(cpu[k])
                print(f"round {rnd + 1} {name}: first page p50 {statistics.median(got['first/full']):.1f} ms",
                      flush=True)  # fmt: skip
        results["load_average_at_end"] = load_average()
        results["servers"] = {
            name: {k: {"p50_ms": round(pct(v, 50), 1), "p95_ms": round(pct(v, 95), 1), "n": len(v),
                       "server_cpu_ms_per_page": round(statistics.median(cpus[name][k]), 2)}
                   for k, v in by.items()}
            for name, by in times.items()
        }  # fmt: skip
    finally:
        if not args.keep:
            shutil.rmtree(data, ignore_errors=True)
    print(f"\n50-row pages over {args.jobs:,} jobs (load average {results['load_average_at_start']} -> "
          f"{results['load_average_at_end']}):")  # fmt: skip
    print(f"{'server':<10} {'what':<22} {'p50 ms':>8} {'p95 ms':>8} {'server CPU ms/page':>20}")
    for name, by in results["servers"].items():
        for k, v in by.items():
            print(f"{name:<10} {k:<22} {v['p50_ms']:>8} {v['p95_ms']:>8} {v['server_cpu_ms_per_page']:>20}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    asyncio.run(main())
