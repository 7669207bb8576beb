"""Starting Loam's services as real OS processes for the tests that need them (the chaos
harness's split deployment, tests/chaos/cluster.py; the multi-process e2e test): one
`Proc` per service (`python -m <module> ...`, its output in a log file per run, kept
for failure reports), the signals a harness sends it (kill -9, SIGSTOP/SIGCONT,
SIGTERM), a wait for its "ready" line, its RSS and open file descriptors, and a free
port to give it. `tests/conftest.py` and the soak script put this folder on sys.path.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    """A port nothing listens on now (the OS's pick), so parallel runs do not collide."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def service_env(**extra: str) -> dict[str, str]:
    """This process's environment without any LOAM_ or RESONATE_ setting (a developer's
    LOAM_STORE or LOAM_AUTH must not leak into a test's services), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOAM_", "RESONATE_"))}
    env.update(PYTHONUNBUFFERED="1", **extra)
    return env


class Proc:
    """One service process: `python -m <args>` (or `python <script> <args>` with
    `script`), with its output in `<logdir>/<name>.<run>.log`."""

    def __init__(self, name: str, args: list[str], env: dict, logdir: Path, *, script: bool = False) -> None:
        self.name, self.args, self.env, self.logdir, self.script = name, args, env, logdir, script
        self.p: subprocess.Popen | None = None
        self.runs = 0

    @property
    def log(self) -> Path:
        return self.logdir / f"{self.name}.{self.runs}.log"

    def start(self, args: list[str] | None = None) -> None:
        """Start (or restart) the process; `args` replaces its arguments from now on."""
        if args is not None:
            self.args = args
        self.runs += 1
        with open(self.log, "wb") as out:  # the child keeps its own descriptor
            argv = [sys.executable, *self.args] if self.script else [sys.executable, "-m", *self.args]
            self.p = subprocess.Popen(argv, env=self.env, stdout=out, stderr=subprocess.STDOUT)

    def signal(self, sig: int) -> None:
        assert self.p is not None
        self.p.send_signal(sig)

    def kill9(self) -> None:
        self.signal(signal.SIGKILL)
        self.p.wait(10)

    def term(self) -> int | None:
        """SIGTERM and wait: the exit code, or None when it had to be killed."""
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

    async def wait_ready(self, timeout: float = 120.0) -> None:
        """Until the process has logged "ready" (every service does once it serves). The
        timeout is generous: on a loaded machine a gateway's start-up (imports, routes)
        has taken over 30 s; it returns as soon as the line is there."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.p is not None
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
        """The end of each of its runs' logs."""
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
                         for p in sorted(self.logdir.glob(f"{self.name}.*.log")))  # fmt: skip
