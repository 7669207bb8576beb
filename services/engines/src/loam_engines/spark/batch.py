"""SparkBatch: a PySpark script run with the Spark environment's python against the
namespace's Spark Connect endpoint.

The child gets `SPARK_REMOTE=sc://localhost:<proxy port>/;token=<run token>`, so an
unmodified `SparkSession.builder.getOrCreate()` (or `loam.spark_session()`) lands on the
namespace's Sail through the proxy. The run's conf goes in PySpark's own
`PYSPARK_REMOTE_INIT_CONF_*` (getOrCreate applies its `spark.sql.*` keys) and in
`LOAM_SPARK_CONF` (loam.spark_session applies all of them). Its `python_deps` are
installed first into the namespace's directory (spark/pydeps.py), on its PYTHONPATH.
Without auth the URL names the namespace (`;x-loam-namespace=<ns>`) instead of a token.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loam_common.errors import Unavailable
from loam_common.gen.loam.jobs.v1 import engines_pb2 as E
from loam_engines.processes import child_env
from loam_engines.runner import Launch
from loam_engines.spark.pydeps import NamespaceDeps


class SparkBatchExecutor:
    def __init__(
        self, python: Path | None, port: Callable[[], int], credentials: Any, deps: NamespaceDeps
    ) -> None:
        self.python = python
        self.port = port
        self.credentials = credentials
        self.deps = deps

    async def launch(self, ns: str, run: E.EngineRun, script: Path, timeout_s: float) -> Launch:
        if self.python is None or not Path(self.python).exists():
            raise Unavailable("no Spark environment on this runner: run `make engines-spark`")
        spec = run.job.spark_batch
        await self.deps.install(ns, spec.python_deps)  # before the token: a failed install needs none
        token, revoke = await self.credentials.mint(ns, timeout_s, f"engine run {run.id}")
        url = f"sc://localhost:{self.port()}/;" + (f"token={token}" if token else f"x-loam-namespace={ns}")
        env = child_env()
        conf = json.dumps(dict(spec.conf))
        env.update(
            SPARK_REMOTE=url,
            # PySpark's own hand-over of a session's conf: an unmodified getOrCreate()
            # applies its spark.sql.* keys; loam.spark_session() applies every key.
            PYSPARK_REMOTE_INIT_CONF_LEN="1",
            PYSPARK_REMOTE_INIT_CONF_0=conf,
            LOAM_SPARK_CONF=conf,
            LOAM_RUN_ID=run.id,
            PYTHONPATH=str(self.deps.path(ns)),
            PYTHONUNBUFFERED="1",
        )
        return Launch([str(self.python), str(script), *spec.args], env, revoke)
