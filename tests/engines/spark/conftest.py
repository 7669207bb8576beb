"""Fixtures for the Spark engine tests: real Sail, a real PySpark 4.2 client, `loam dev`
as a subprocess.

- `spark_python`: the Spark environment's python (`make engines-spark` runs once if it
  is missing);
- `spark_dev`: one `loam dev --auth` per module on free ports, with Sail stopped after
  `--sail-idle` seconds, and tokens made in its store (`tokens[ns]`, jobs:engine and
  jobs:admin; `tokens["no-engine"]` lacks jobs:engine);
- `run_client(code, token=..., url=...)`: runs PySpark code in a subprocess of the
  Spark python with `spark` already built by `loam.spark_session()`; the code prints
  its findings as one JSON object on the last line of stdout.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from loam_common.auth import ADMIN, ENGINE, ENQUEUE, SCHEDULE, token_create
from loam_common.store.runner import open_store

ROOT = Path(__file__).resolve().parents[3]
SDK_SPARK = ROOT / "adapters" / "python" / "src" / "loam" / "spark.py"
READY_TIMEOUT_S = 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def spark_python() -> Path:
    python = ROOT / ".engines" / "spark" / "bin" / "python"
    if not (ROOT / ".engines" / "spark" / ".installed").exists():
        subprocess.run(["make", "-C", str(ROOT), "engines-spark"], check=True)
    return python


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
    data: Path, *extra: str, spark_port: int | None = None, port: int | None = None
) -> SparkDev:
    port = port or free_port()
    spark_port = spark_port or free_port()
    cmd = [sys.executable, "-m", "loam_gateway.dev", "--host", "127.0.0.1", "--port", str(port), "--auth",
           "--data", str(data), "--spark-port", str(spark_port), "--log-level", "info", *extra]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOAM_", "SPARK_"))}
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


@pytest.fixture(scope="module")
def spark_dev(tmp_path_factory, spark_python):
    data = tmp_path_factory.mktemp("loam-spark")
    server = start_spark_dev(data, "--sail-idle", "2")
    server.tokens = asyncio.run(make_tokens(data, ["alpha", "beta", "gamma"]))
    try:
        yield server
    finally:
        server.stop()


PRELUDE = """
import importlib.util, json, os, sys, time
_spec = importlib.util.spec_from_file_location("loam_spark", {sdk!r})
loam_spark = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(loam_spark)
"""


@pytest.fixture
def run_client(spark_dev, spark_python, tmp_path):
    # A file, not `python -c`: PySpark takes a main module without a file for doctests.
    def run(code: str, *, token: str | None = None, url: str | None = None, timeout: float = 120,
            session: bool = True) -> dict:  # fmt: skip
        script = PRELUDE.format(sdk=str(SDK_SPARK))
        if session:
            script += "spark = loam_spark.spark_session()\n"
        script += textwrap.dedent(code)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LOAM_", "SPARK_", "PYSPARK_"))}
        env["LOAM_SPARK_URL"] = url or spark_dev.spark_url
        if token:
            env["LOAM_TOKEN"] = token
        path = tmp_path / f"client_{time.monotonic_ns()}.py"
        path.write_text(script)
        proc = subprocess.run([str(spark_python), str(path)], capture_output=True, text=True, env=env,
                              timeout=timeout)  # fmt: skip
        if proc.returncode != 0:
            raise AssertionError(f"client failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-4000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])

    return run
