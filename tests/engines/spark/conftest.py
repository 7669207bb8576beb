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
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from sparkdev import make_tokens, start_spark_dev

ROOT = Path(__file__).resolve().parents[3]
SDK_SPARK = ROOT / "adapters" / "python" / "src" / "loam" / "spark.py"


@pytest.fixture(scope="session")
def spark_jvm() -> Path:
    """The JVM fallback's environment (`make engines-spark-jvm` runs once if missing)."""
    if not (ROOT / ".engines" / "spark-jvm" / ".installed").exists():
        subprocess.run(["make", "-C", str(ROOT), "engines-spark-jvm"], check=True)
    return ROOT / ".engines" / "spark-jvm" / "bin" / "python"


@pytest.fixture(scope="session")
def spark_python() -> Path:
    python = ROOT / ".engines" / "spark" / "bin" / "python"
    if not (ROOT / ".engines" / "spark" / ".installed").exists():
        subprocess.run(["make", "-C", str(ROOT), "engines-spark"], check=True)
    return python


@pytest.fixture(scope="module")
def spark_dev(tmp_path_factory, spark_python):
    data = tmp_path_factory.mktemp("loam-spark")
    server = start_spark_dev(data, "--sail-idle", "2")
    server.tokens = asyncio.run(make_tokens(data, ["alpha", "beta", "gamma", "delta"]))
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
