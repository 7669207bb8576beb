"""Helpers of the Spark engine tests: `loam dev --auth` as a subprocess on free ports
(`start_spark_dev`, ready when it prints its "ready" line, with its Spark endpoint read
from its output) and API tokens made in its store (`make_tokens`)."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from loam_common.auth import ADMIN, ENGINE, ENQUEUE, SCHEDULE, token_create
from loam_common.store.runner import open_store

READY_TIMEOUT_S = 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class SparkDev:
    url: str
    spark_url: str
    spark_port: int
    data: Path
    proc: subprocess.Popen
    tokens: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    def stop(self, timeout: float = 20) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_spark_dev(
    data: Path, *extra: str, spark_port: int | None = None, port: int | None = None, env: dict | None = None
) -> SparkDev:
    port = port or free_port()
    spark_port = spark_port or free_port()
    cmd = [sys.executable, "-m", "loam_gateway.dev", "--host", "127.0.0.1", "--port", str(port), "--auth",
           "--data", str(data), "--spark-port", str(spark_port), "--log-level", "info", *extra]  # fmt: skip
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("LOAM_", "SPARK_"))}, **(env or {})}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    server = SparkDev(f"http://127.0.0.1:{port}", "", spark_port, data, proc)
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in proc.stdout:
            server.lines.append(line)
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
        except queue.Empty:
            server.stop()
            raise RuntimeError(f"loam dev did not get ready:\n{''.join(server.lines)}") from None
        if line is None:
            raise RuntimeError(f"loam dev exited with {proc.wait()}:\n{''.join(server.lines)}")
        if "spark connect on " in line:
            server.spark_url = line.split("spark connect on ", 1)[1].strip()
        if "ready on" in line:
            return server


async def make_tokens(data: Path, namespaces: list[str]) -> dict[str, str]:
    store = open_store(f"sqlite:///{data / 'loam.db'}")
    try:
        out = {}
        for ns in namespaces:
            out[ns], _ = await store.transact(token_create, ns, [ENGINE, ADMIN, ENQUEUE, SCHEDULE], "test")
        out["no-engine"], _ = await store.transact(token_create, namespaces[0], [ADMIN], "test")
        return out
    finally:
        await store.close()
