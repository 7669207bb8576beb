"""Fixtures shared by the Spark and Flink engine tests.

- `split_deployment`: the split deployment as real processes on one SQLite store: a
  queue-core process (which takes the engine RPCs: they need only the store) and the
  engine runner as its own process (`loam engines`, runner id `runner-1`), leasing from
  it over Connect. Each is ready when it prints its "ready" line; both are stopped with
  SIGTERM (killed if they do not stop) when the test ends, and their output goes to
  `procs.log` in the test's directory.
"""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest

READY_TIMEOUT_S = 120  # a loaded two-core machine; the runner imports the engines' code


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_service(module_args: list[str], marker: str, log: IO[str], timeout_s: float = READY_TIMEOUT_S
                  ) -> subprocess.Popen:  # fmt: skip
    """`python -m <module_args>` without this process's LOAM_/SPARK_ settings, returned
    once it prints a line containing `marker`; its output goes on to `log`. Killed, and
    RuntimeError with what it printed, if it exits first or misses the deadline."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOAM_", "SPARK_"))}
    proc = subprocess.Popen([sys.executable, "-m", *module_args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)  # fmt: skip
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:  # keep reading after "ready", so the pipe never fills
        for line in proc.stdout:
            log.write(line)
            log.flush()
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
        except queue.Empty:
            line = None
        if line is None:
            proc.kill()
            proc.wait()
            raise RuntimeError(
                f"{module_args[0]} did not get ready in {timeout_s:.0f} s:\n{''.join(seen[-30:])}"
            )
        seen.append(line)
        if marker in line:
            return proc


def stop_service(proc: subprocess.Popen, timeout_s: float = 60) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class SplitDeployment:
    store: str  # the store URL both processes open
    blobs: str
    core_url: str  # the queue core's Connect endpoint
    engines_data: Path  # the runner's --data directory
    runner_id: str = "runner-1"
    procs: list[subprocess.Popen] = field(default_factory=list)


@pytest.fixture
def split_deployment(tmp_path) -> Iterator[SplitDeployment]:
    port = _free_port()
    d = SplitDeployment(store=f"sqlite:///{tmp_path / 'loam.db'}", blobs=str(tmp_path / "blobs"),
                        core_url=f"http://127.0.0.1:{port}", engines_data=tmp_path / "engines")  # fmt: skip
    with open(tmp_path / "procs.log", "w") as log:
        try:
            d.procs.append(start_service(["loam_queue_core.server", "--store", d.store, "--blobs", d.blobs,
                                          "--port", str(port)], "ready", log))  # fmt: skip
            d.procs.append(start_service(["loam_engines", "--store", d.store, "--blobs", d.blobs, "--queue-cores",
                                          d.core_url, "--data", str(d.engines_data), "--id", d.runner_id,
                                          "--spark-port", "0"], "ready", log))  # fmt: skip
            yield d
        finally:
            for proc in reversed(d.procs):  # the runner first: it completes its jobs on the core
                stop_service(proc)
