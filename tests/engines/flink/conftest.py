"""Fixtures of the Flink tests: one real Flink session cluster for the whole session (its JVMs
take 10-20 s to start on two cores), the test jobs (a Java keyed counter compiled here with
javac against the distribution's lib/, a PyFlink counter), and a `FlinkEngine` per test over
a real SQLite store.

Tests marked `long` run only under `make test-engines-flink` (LOAM_FLINK_LONG=1). `make test`
proves each action once on the session's one cluster:

| action | where in `make test` |
|---|---|
| deploy (jar through the runner), upgrade stateless / last-state, rollback, status (live), cancel | test_runner_flink: upgrade modes |
| upgrade from a savepoint, its automatic rollback | test_lifecycle: a broken version |
| bad input refused, the job untouched | test_lifecycle: bad input |
| SQL deploy, savepoint, suspend, resume (counts continue), cancel, over REST and the CLI | test_rest |
| a deploy Flink cannot run; no Flink engine; no JVM outlives its manager | test_runner_flink, test_rest, test_crash |

`make test-engines-flink` adds the long ones: the keyed counter's whole lifecycle, PyFlink,
SQL upgrades, periodic savepoints, non-restorable changes, `kill -9` mid-upgrade (the
lifecycle's and `loam dev`'s), the `loam flink` CLI and the split deployment's runner process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from flinktest import JOBS, NS

from loam_common.blobs import DirBlobStore
from loam_common.store import open_store
from loam_engines.flink.cluster import LocalFlinkCluster
from loam_engines.flink.distribution import FlinkDistribution, FlinkUnavailable
from loam_engines.flink.facade import FlinkEngine

LONG = os.environ.get("LOAM_FLINK_LONG") == "1"


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="long Flink test: make test-engines-flink")
    for item in items:
        if item.get_closest_marker("long") is not None and not LONG:
            item.add_marker(skip)


def pytest_configure(config):
    config.addinivalue_line("markers", "long: a long Flink test, run by make test-engines-flink")


@pytest.fixture(scope="session")
def flink_dist() -> FlinkDistribution:
    try:
        dist = FlinkDistribution.locate()
    except FlinkUnavailable as e:
        pytest.skip(str(e))
    if shutil.which("javac") is None:
        pytest.skip("no javac: the test job is compiled here (make engines-flink installs a JDK)")
    return dist


@pytest.fixture(scope="session")
def counter_jar(flink_dist, tmp_path_factory) -> Path:
    """The Java keyed counter, compiled against the distribution (about a second)."""
    out = tmp_path_factory.mktemp("counter-classes")
    subprocess.run(["javac", "-nowarn", "-cp", flink_dist.classpath, "-d", str(out),
                    str(JOBS / "loam" / "KeyedCounter.java")], check=True, capture_output=True)  # fmt: skip
    jar = tmp_path_factory.mktemp("counter-jar") / "keyed-counter.jar"
    with zipfile.ZipFile(jar, "w") as z:
        for f in sorted(out.rglob("*.class")):
            z.write(f, f.relative_to(out).as_posix())
    return jar


@pytest.fixture(scope="session")
def flink_cluster(flink_dist, tmp_path_factory):
    cluster = LocalFlinkCluster(tmp_path_factory.mktemp("flink") / "cluster", flink_dist,
                                checkpoint_interval="1s", slots=6, taskmanager_memory="2048m")  # fmt: skip
    asyncio.run(cluster.start())
    yield cluster
    asyncio.run(cluster.stop())


@pytest.fixture
async def engine(flink_cluster, tmp_path):
    store = open_store(f"sqlite:///{tmp_path}/loam.db")
    eng = await FlinkEngine.start(tmp_path / "engine", store, DirBlobStore(tmp_path / "blobs"), cluster=flink_cluster,
                                  readiness_timeout_s=60.0)  # fmt: skip
    yield eng
    for d in await eng.lifecycle.recorder.list(NS):  # leave the shared cluster's slots free
        if d.state.value != "CANCELLED":
            with contextlib.suppress(Exception):  # best effort between tests
                await eng.lifecycle.cancel(NS, d.name)
    await eng.close(stop_cluster=False)
    await store.close()
