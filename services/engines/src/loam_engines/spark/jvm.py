"""The JVM fallback: Apache Spark 4.2 itself, from the `pyspark` package in its own
environment (.engines/spark-jvm, `make engines-spark-jvm`), for what Sail lacks.

- `JvmConnectPool`: Apache Spark's own Spark Connect server per namespace, on request
  (a client sends `x-loam-engine: jvm`, e.g. `sc://localhost:15002/;x-loam-engine=jvm`),
  behind the same proxy, started and stopped like Sail (SailPool). It runs
  `spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer` on a
  loopback port with a secret of its own (`spark.connect.authenticate.token`) that only
  the proxy knows, so no other local process can use it. Ready when it logs
  `Spark Connect server started`; ~4 s cold.
- `SparkSubmitExecutor`: SparkSubmit runs, `spark-submit --master local[*]` of the
  script, for RDD and SparkContext code that Spark Connect cannot carry.

Both run with a WARN-level log4j configuration (`SPARK_CONF_DIR`), so a run's log holds
the script's output rather than Spark's INFO lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
import socket
from collections import deque
from pathlib import Path

from loam_common.errors import Unavailable
from loam_common.gen.loam.jobs.v1 import engines_pb2 as E
from loam_engines import processes
from loam_engines.runner import Launch
from loam_engines.spark.sail import BackendUnavailable, SailPool, SailSettings

CONF_DIR = Path(__file__).with_name("conf")
CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
READY_MARKER = "Spark Connect server started"


def spark_home(python: Path | None) -> Path | None:
    """The `pyspark` package directory of the environment `python` belongs to."""
    if python is None:
        return None
    venv = Path(python).parent.parent
    for site in sorted(venv.glob("lib/python*/site-packages")):
        home = site / "pyspark"
        if (home / "bin" / "spark-submit").exists():
            return home
    return None


def jvm_env(python: Path, home: Path) -> dict[str, str]:
    env = processes.child_env()
    env.update(
        SPARK_HOME=str(home),
        PYSPARK_PYTHON=str(python),
        PYSPARK_DRIVER_PYTHON=str(python),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_CONF_DIR=str(CONF_DIR),
        PATH=f"{Path(python).parent}:{env.get('PATH', '/usr/bin:/bin')}",
    )
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JvmConnectPool(SailPool):
    label = "Spark JVM"

    def __init__(self, settings: SailSettings, driver_memory: str = "512m") -> None:
        super().__init__(settings)
        self.driver_memory = driver_memory
        self._secret = secrets.token_hex(32)

    def _upstream_auth(self) -> str | None:
        return f"Bearer {self._secret}"

    async def _launch(self, ns: str, cwd: Path) -> tuple[processes.Child, int, deque[str], asyncio.Task]:
        python = self.settings.python
        home = spark_home(python)
        if python is None or home is None:
            raise BackendUnavailable("no Apache Spark environment: run `make engines-spark-jvm`")
        port = _free_port()
        conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(port),
            "spark.connect.authenticate.token": self._secret,
            "spark.ui.enabled": "false",
            "spark.sql.warehouse.dir": (cwd / "spark-warehouse").as_uri(),
        }
        argv = [str(home / "bin" / "spark-submit"), "--master", "local[2]", "--class", CONNECT_CLASS,
                "--driver-memory", self.driver_memory, "--name", f"loam-connect-{ns}"]  # fmt: skip
        for k, v in conf.items():
            argv += ["--conf", f"{k}={v}"]
        argv.append("spark-internal")
        child = await processes.spawn(f"spark-jvm-{ns}", argv, env=jvm_env(python, home), cwd=cwd,
                                      pid_dir=self.settings.pid_dir, stop_signal=signal.SIGTERM)  # fmt: skip
        tail: deque[str] = deque(maxlen=40)
        ready = asyncio.Event()
        stderr_task = asyncio.create_task(self._drain_until_ready(ns, child, tail, ready))
        exited = asyncio.create_task(child.proc.wait())
        try:
            await asyncio.wait({exited, asyncio.create_task(ready.wait())}, timeout=self.settings.start_timeout_s,
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        finally:
            exited.cancel()
        if not ready.is_set():
            await self._give_up(ns, child, tail, stderr_task)
        return child, port, tail, stderr_task

    async def _drain_until_ready(
        self, ns: str, child: processes.Child, tail: deque[str], ready: asyncio.Event
    ) -> None:
        async for raw in child.proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            tail.append(line)
            if READY_MARKER in line:
                ready.set()
        with contextlib.suppress(Exception):
            await child.proc.stdout.read()


class SparkSubmitExecutor:
    """SparkSubmit runs: the script under `spark-submit --master local[*]`."""

    def __init__(self, python: Path | None) -> None:
        self.python = python

    async def launch(self, ns: str, run: E.EngineRun, script: Path, timeout_s: float) -> Launch:
        home = spark_home(self.python)
        if self.python is None or home is None:
            raise Unavailable("no Apache Spark environment on this runner: run `make engines-spark-jvm`")
        spec = run.job.spark_submit
        argv = [str(home / "bin" / "spark-submit"), "--master", spec.master or "local[*]",
                "--conf", "spark.ui.enabled=false", "--name", f"loam-run-{run.id}"]  # fmt: skip
        for k, v in sorted(spec.conf.items()):
            argv += ["--conf", f"{k}={v}"]
        argv += [str(script), *spec.args]
        env = jvm_env(self.python, home)
        env.update(LOAM_RUN_ID=run.id, PYTHONUNBUFFERED="1")
        return Launch(argv, env)
