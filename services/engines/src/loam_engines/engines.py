"""`Engines`: the engine runner's parts wired for one process — the run facade and its
JobsService methods, the runner, the Spark endpoint (Sail pool + proxy), and Flink's
actions (the session cluster under `<data>/flink`, started on first use).

`loam dev` builds it in process with the queue core's CoreRpc as `jobs`;
`python -m loam_engines` with a Connect client of the gateway.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loam_engines.flink.actions import FlinkActions
from loam_engines.rpc import EngineRpc
from loam_engines.runner import EngineRunner
from loam_engines.service import EngineRuns
from loam_engines.spark.batch import SparkBatchExecutor
from loam_engines.spark.jvm import JvmConnectPool, SparkSubmitExecutor
from loam_engines.spark.proxy import SparkConnectProxy
from loam_engines.spark.pydeps import NamespaceDeps
from loam_engines.spark.sail import SailPool, SailSettings, find_spark_python

log = logging.getLogger("loam.engines")

DEFAULT_SPARK_PORT = 15002


@dataclass
class EngineSettings:
    data_dir: Path  # runs' working directories, pid files, Sail's per-namespace dirs
    runner_id: str
    spark_host: str = "127.0.0.1"
    spark_port: int | None = None  # None: 15002, or any free port if that one is taken
    sail_idle_s: float = 300.0
    sail_session_timeout_s: float = 900.0
    sail_memory_limit_bytes: int = 0
    sail_spares: int = 1  # warm Sail launchers kept for the next namespace's start (made on first use)
    sail_prewarm: bool = False  # make the first spare at start, so even the first namespace starts warm
    spark_python: Path | None = None  # default: find_spark_python()
    spark_jvm_python: Path | None = None  # default: .engines/spark-jvm
    max_parallel_runs: int = 4
    flink: bool = True  # run Flink deployments (the session cluster starts on first use)
    flink_options: dict[str, Any] = field(
        default_factory=dict
    )  # FlinkLifecycle options; tests pass `cluster`


class Engines:
    def __init__(self, store: Any, blobs: Any, jobs: Any, authenticator: Any, credentials: Any,
                 settings: EngineSettings) -> None:  # fmt: skip
        self.settings = settings
        data = settings.data_dir
        python = settings.spark_python or find_spark_python()
        self.runs = EngineRuns(store, blobs, jobs)
        self.runs.flink_enabled = settings.flink
        self.rpc = EngineRpc(self.runs)
        self.deps = NamespaceDeps(data / "pydeps", python)
        self.pool = SailPool(SailSettings(
            python=python,
            work_dir=data / "sail",
            pid_dir=data / "pids",
            idle_s=settings.sail_idle_s,
            session_timeout_s=settings.sail_session_timeout_s,
            memory_limit_bytes=settings.sail_memory_limit_bytes,
            spill_dir=data / "spill",
            pydeps=self.deps.path,
            spares=settings.sail_spares,
        ))  # fmt: skip
        jvm_python = settings.spark_jvm_python or find_spark_python("LOAM_SPARK_JVM_VENV", "spark-jvm")
        self.jvm_pool = JvmConnectPool(SailSettings(
            python=jvm_python,
            work_dir=data / "spark-jvm",
            pid_dir=data / "pids",
            idle_s=settings.sail_idle_s,
            session_timeout_s=settings.sail_session_timeout_s,
            start_timeout_s=120.0,
        ))  # fmt: skip
        port = DEFAULT_SPARK_PORT if settings.spark_port is None else settings.spark_port
        pools = {"sail": self.pool, "jvm": self.jvm_pool}
        self.proxy = SparkConnectProxy(authenticator, pools, host=settings.spark_host, port=port)
        executors = {
            "spark_batch": SparkBatchExecutor(python, lambda: self.proxy.port, credentials, self.deps),
            "spark_submit": SparkSubmitExecutor(jvm_python),
        }
        self.flink = (
            FlinkActions(store, blobs, self.runs, data / "flink", **settings.flink_options)
            if settings.flink
            else None
        )
        self.runner = EngineRunner(self.runs, jobs, blobs, executors, runner_id=settings.runner_id,
                                   work_dir=data / "runs", pid_dir=data / "pids",
                                   max_parallel=settings.max_parallel_runs, flink=self.flink)  # fmt: skip

    @property
    def spark_url(self) -> str:
        return self.proxy.url

    async def start(self) -> None:
        # The runner first: its start-up reaps what a crash left in the pid directory,
        # which must happen before the proxy can start a new Sail there.
        await self.runner.start()
        try:
            await self.proxy.start()
        except OSError:
            if self.settings.spark_port is not None:
                raise  # a port the user asked for: say so
            log.warning("port %d is taken: the Spark endpoint takes any free port", DEFAULT_SPARK_PORT)
            self.proxy.port = 0
            await self.proxy.start()
        if self.settings.sail_prewarm:
            self.pool.prewarm()

    async def stop(self) -> None:
        await self.runner.stop()
        await self.proxy.stop()
        await self.pool.close()
        await self.jvm_pool.close()
