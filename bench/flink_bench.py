"""Flink on Loam, timed on the local session cluster (`make bench-flink`, ~3 minutes on 2 cores).

- cluster cold start: `LocalFlinkCluster.start()` until a TaskManager registered
- deploy to running: submit until every vertex runs and a checkpoint completed
- savepoint: trigger until Flink reports the location
- upgrade downtime: stop-with-savepoint until the new version runs and checkpointed

Each Loam action is timed next to the same steps driven by hand through Flink's REST API,
with the same readiness test at the same interval, so the difference is Loam's overhead
(its store writes, artifact handling, checks). The job is the tests' keyed counter, compiled
here. Writes bench/results/flink-latest.json and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from loam_common.blobs import DirBlobStore
from loam_common.store import open_store
from loam_engines.flink.cluster import LocalFlinkCluster
from loam_engines.flink.distribution import FlinkDistribution
from loam_engines.flink.facade import FlinkEngine
from loam_engines.flink.model import JobSpec, Kind
from loam_engines.flink.rest import FlinkRest, RunRequest

ROOT = Path(__file__).resolve().parent.parent
COUNTER = ROOT / "tests" / "engines" / "flink" / "jobs" / "loam" / "KeyedCounter.java"
NS = "bench"


def build_jar(dist: FlinkDistribution, work: Path) -> Path:
    classes = work / "classes"
    subprocess.run(["javac", "-nowarn", "-cp", dist.classpath, "-d", str(classes), str(COUNTER)], check=True)
    jar = work / "keyed-counter.jar"
    with zipfile.ZipFile(jar, "w") as z:
        for f in sorted(classes.rglob("*.class")):
            z.write(f, f.relative_to(classes).as_posix())
    return jar


async def ready(rest: FlinkRest, job_id: str) -> None:
    """The lifecycle's readiness test: every vertex RUNNING and a checkpoint completed."""
    while True:
        detail = await rest.job(job_id)
        if detail is not None and detail.all_running and (await rest.checkpoints(job_id)).completed:
            return
        await asyncio.sleep(0.25)


async def by_hand(rest: FlinkRest, jar_path: Path, savepoints: Path, round_: int) -> dict[str, float]:
    jar = await rest.upload_jar(jar_path)
    args = ("--tag", f"hand-{round_}", "--rate", "20")
    t0 = time.monotonic()
    job = await rest.run_jar(
        jar, RunRequest(entry_class="loam.KeyedCounter", args=args, job_id=f"{round_:032x}")
    )
    await ready(rest, job)
    deploy = time.monotonic() - t0
    t0 = time.monotonic()
    await rest.wait_savepoint(job, await rest.trigger_savepoint(job, savepoints.as_uri()))
    savepoint = time.monotonic() - t0
    t0 = time.monotonic()
    location = await rest.wait_savepoint(job, await rest.trigger_stop(job, savepoints.as_uri()))
    while (await rest.job(job)).state != "FINISHED":
        await asyncio.sleep(0.1)
    job2 = await rest.run_jar(jar, RunRequest(entry_class="loam.KeyedCounter", args=args, savepoint_path=location,
                                              job_id=f"{round_ + 1000:032x}"))  # fmt: skip
    await ready(rest, job2)
    downtime = time.monotonic() - t0
    await rest.cancel(job2)
    return {"deploy_s": deploy, "savepoint_s": savepoint, "upgrade_downtime_s": downtime}


async def with_loam(engine: FlinkEngine, jar_bytes: bytes, round_: int) -> dict[str, float]:
    life = engine.lifecycle
    name = f"bench-{round_}"
    artifact = (await engine.artifact_put(NS, "keyed-counter.jar", jar_bytes))["artifact"]
    spec = JobSpec(
        Kind.JAR, artifact, entry_class="loam.KeyedCounter", args=("--tag", f"loam-{round_}", "--rate", "20")
    )
    t0 = time.monotonic()
    await life.deploy(NS, name, spec)
    deploy = time.monotonic() - t0
    t0 = time.monotonic()
    await life.savepoint(NS, name)
    savepoint = time.monotonic() - t0
    d = await life.upgrade(NS, name, spec)
    downtime = d.timings_ms["upgrade_downtime_ms"] / 1000
    await life.cancel(NS, name)
    return {"deploy_s": deploy, "savepoint_s": savepoint, "upgrade_downtime_s": downtime}


async def main(rounds: int, out: Path) -> None:
    dist = FlinkDistribution.locate()
    with tempfile.TemporaryDirectory(prefix="loam-flink-bench-") as tmp:
        work = Path(tmp)
        jar = build_jar(dist, work)
        cluster = LocalFlinkCluster(work / "cluster", dist, checkpoint_interval="1s", slots=4)
        t0 = time.monotonic()
        await cluster.start()
        cold = time.monotonic() - t0
        store = open_store(f"sqlite:///{work / 'loam.db'}")
        engine = await FlinkEngine.start(
            work / "engine", store, DirBlobStore(work / "blobs"), cluster=cluster
        )
        hand, loam = [], []
        try:
            async with FlinkRest(cluster.rest_url) as rest:
                await by_hand(rest, jar, cluster.savepoint_dir, 999)  # warm the JVMs' classes first
                for r in range(rounds):  # alternate, so drift in the machine's load hits both
                    hand.append(await by_hand(rest, jar, cluster.savepoint_dir, r))
                    loam.append(await with_loam(engine, jar.read_bytes(), r))
        finally:
            await engine.close(stop_cluster=False)
            await store.close()
            await cluster.stop()
    result = {"cluster_cold_start_s": cold, "rounds": rounds, "by_hand": {}, "loam": {}, "overhead_pct": {}}
    for key in ("deploy_s", "savepoint_s", "upgrade_downtime_s"):
        h = statistics.median(x[key] for x in hand)
        lo = statistics.median(x[key] for x in loam)
        result["by_hand"][key], result["loam"][key] = h, lo
        result["overhead_pct"][key] = 100 * (lo - h) / h
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"cluster cold start: {cold:.1f} s")
    print(f"{'median of ' + str(rounds):<22}{'by hand':>10}{'Loam':>10}{'overhead':>10}")
    for key in ("deploy_s", "savepoint_s", "upgrade_downtime_s"):
        print(
            f"{key:<22}{result['by_hand'][key]:>9.2f}s{result['loam'][key]:>9.2f}s{result['overhead_pct'][key]:>9.0f}%"
        )


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "flink-latest.json")
    a = p.parse_args()
    asyncio.run(main(a.rounds, a.out))
    sys.exit(0)
