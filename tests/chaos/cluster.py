"""The split deployment as separate OS processes on one SQLite file (gateway, queue
core, sweeper, relay, started as `loam` starts them), and the faults a harness injects
into them: kill -9 and restart, SIGSTOP then SIGCONT. Each process's RSS and open file
descriptors can be read for the soak's report."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from loam_common.jobs.queue import QueueTx

SEC = 1_000_000_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """One service process; its output goes to a log file kept for failure reports."""

    def __init__(self, name: str, args: list[str], env: dict, logdir: Path) -> None:
        self.name, self.args, self.env, self.logdir = name, args, env, logdir
        self.p: subprocess.Popen | None = None
        self.runs = 0

    @property
    def log(self) -> Path:
        return self.logdir / f"{self.name}.{self.runs}.log"

    def start(self) -> None:
        self.runs += 1
        with open(self.log, "wb") as out:
            self.p = subprocess.Popen([sys.executable, "-m", *self.args], env=self.env, stdout=out,
                                      stderr=subprocess.STDOUT)  # fmt: skip

    def signal(self, sig: int) -> None:
        assert self.p is not None
        self.p.send_signal(sig)

    def kill9(self) -> None:
        self.signal(signal.SIGKILL)
        self.p.wait(10)

    def term(self) -> int | None:
        if self.p is None or self.p.poll() is not None:
            return self.p.returncode if self.p else None
        self.p.send_signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
        self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(15)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait(5)
            return None

    async def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.p.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.p.returncode}:\n{self.tail()}")
            if b"ready" in self.log.read_bytes():
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"{self.name} not ready after {timeout} s:\n{self.tail()}")

    def usage(self) -> tuple[int, int]:
        """(RSS in KiB, open file descriptors) of the running process."""
        pid = self.p.pid
        rss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                   if line.startswith("VmRSS:"))  # fmt: skip
        return rss, len(os.listdir(f"/proc/{pid}/fd"))

    def tail(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
                         for p in sorted(self.logdir.glob(f"{self.name}.*.log")))  # fmt: skip


class SplitDeployment:
    """gateway -> queue core, a sweeper and a relay, on `data/loam.db`."""

    def __init__(self, data: Path, visibility_s: float = 2.0) -> None:
        self.data = data
        data.mkdir(parents=True, exist_ok=True)
        self.url = f"sqlite:///{data / 'loam.db'}"
        logs = data / "logs"
        logs.mkdir(exist_ok=True)
        core_port, gw_port = free_port(), free_port()
        self.core_url, self.gateway_url = f"http://127.0.0.1:{core_port}", f"http://127.0.0.1:{gw_port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOAM_")}
        env.update(LOAM_INTERNAL_TOKEN=secrets.token_hex(16), PYTHONUNBUFFERED="1")
        self.visibility_ns = int(visibility_s * SEC)
        self.core = Proc("queue-core", ["loam_queue_core.server", "--store", self.url, "--port", str(core_port),
                                        "--blobs", str(data / "blobs")], env, logs)  # fmt: skip
        self.gateway = Proc("gateway", ["loam_gateway", "--queue-cores", self.core_url, "--store", self.url,
                                        "--port", str(gw_port)], env, logs)  # fmt: skip
        self.sweeper = Proc("sweeper", ["loam_sweeper", "--store", self.url, "--blobs", str(data / "blobs"),
                                        "--queue-cores", self.core_url, "--interval", "0.2", "--lease-ttl", "2",
                                        "--id", "sweeper-a"], env, logs)  # fmt: skip
        self.relay = Proc("relay", ["loam_relay", "--store", self.url, "--id", "relay-a", "--interval", "0.1"],
                          env, logs)  # fmt: skip
        self.procs = [self.core, self.gateway, self.sweeper, self.relay]

    async def configure(self, store, ns: str, queue: str, shards: int) -> None:
        def configure(tx) -> None:
            with QueueTx(tx, ns, queue) as qt:
                qt.cfg.shards = shards
                qt.cfg.visibility_ns = self.visibility_ns  # lost leases come back quickly
                qt.cfg.max_stalled = -1  # kills and pauses stall jobs; never fail one for that
                qt.ensure_exists()
                qt.save_config()

        await store.transact(configure)

    async def start(self) -> None:
        for p in self.procs:
            p.start()
        await asyncio.gather(*(p.wait_ready() for p in self.procs))

    def stop(self) -> dict[str, int | None]:
        return {p.name: p.term() for p in reversed(self.procs)}

    def tails(self) -> str:
        return "\n".join(p.tail() for p in self.procs)
