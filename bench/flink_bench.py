"""Flink on Loam, timed on the local session cluster (`make bench-flink`, ~3 minutes on 2 cores).

- cluster cold start: `LocalFlinkCluster.start()` until a TaskManager registered
- deploy to running: submit until every vertex runs and a checkpoint completed
- savepoint: trigger until Flink reports the location
- upgrade downtime: stop-with-savepoint until the new version runs and checkpointed

Each Loam action is timed next to the same steps driven by hand through Flink's REST API,
with the same readiness test at the same interval, so the difference is Loam's overhead
(its store writes, artifact handling, checks). Loam is timed twice: the lifecycle called
directly, and the way a client reaches it — `SubmitEngineJob` / `ControlEngineJob` through
the JobsService engine methods, a job on `engines.flink` leased by the engine runner, the
run's record followed until the action is done (what `loam flink deploy` waits for). The job is the tests' keyed counter, compiled
here. Writes bench/results/flink-latest.json and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from loam_common.blobs import DirBlobStore
from loam_common.gen.loam.jobs.v1 import engines_pb2 as E
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.store import open_store
from loam_engines.flink.actions import FlinkActions
from loam_engines.flink.cluster import LocalFlinkCluster
from loam_engines.flink.distribution import FlinkDistribution
from loam_engines.flink.facade import FlinkEngine
from loam_engines.flink.model import JobSpec, Kind
from loam_engines.flink.rest import FlinkRest, RunRequest
from loam_engines.rpc import EngineRpc
from loam_engines.runner import EngineRunner
from loam_engines.service import EngineRuns
from loam_queue_core.core import QueueCore
from loam_queue_core.rpc import CoreRpc

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


async def settled(engine_runs: EngineRuns, run_id: str) -> E.EngineRun:
    """The run once its deploy and every action asked of it are done, woken by its log."""
    after = 0
    while True:
        run = await engine_runs.get(NS, run_id)
        if run.state != E.ENGINE_RUN_STATE_QUEUED and not run.flink.pending_action:
            if run.flink.actions_done >= run.flink.actions_requested:
                return run
        lines, _ = await engine_runs.logs(NS, run_id, after, wait_ns=5 * 10**9)
        after = lines[-1].n if lines else after


async def with_runner(
    rpc: CoreRpc, engine_runs: EngineRuns, jar_bytes: bytes, round_: int
) -> dict[str, float]:
    def version(tag: str) -> E.FlinkDeployment:
        return E.FlinkDeployment(deployment=f"runner-{round_}", entrypoint="keyed-counter.jar", source=jar_bytes,
                                 entry_class="loam.KeyedCounter", args=["--tag", tag, "--rate", "20"])  # fmt: skip

    async def control(run_id: str, action: E.EngineAction) -> E.EngineRun:
        await rpc.control_engine_job(NS, J.ControlEngineJobRequest(run=run_id, action=action))
        return await settled(engine_runs, run_id)

    t0 = time.monotonic()
    resp = await rpc.submit_engine_job(
        NS, J.SubmitEngineJobRequest(job=E.EngineJob(flink=version(f"runner-{round_}")))
    )
    run = await settled(engine_runs, resp.run)
    deploy = time.monotonic() - t0
    t0 = time.monotonic()
    await control(run.id, E.EngineAction(action="savepoint"))
    savepoint = time.monotonic() - t0
    t0 = time.monotonic()
    run = await control(run.id, E.EngineAction(action="upgrade", flink=version(f"runner-{round_}")))
    upgrade_total = time.monotonic() - t0
    assert run.flink.state == "RUNNING" and not run.flink.last_action_error, run.flink
    await control(run.id, E.EngineAction(action="cancel"))
    return {"deploy_s": deploy, "savepoint_s": savepoint, "upgrade_downtime_s": run.flink.timings_ms["upgrade_downtime_ms"] / 1000,
            "upgrade_total_s": upgrade_total}  # fmt: skip


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
        # the shared engine runner's path, in process (as in `loam dev`), on the same cluster
        runner_store = open_store(f"sqlite:///{work / 'runner.db'}")
        runner_blobs = DirBlobStore(work / "runner-blobs")
        rpc = CoreRpc(QueueCore(runner_store, runner_blobs))
        engine_runs = EngineRuns(runner_store, runner_blobs, rpc)
        rpc.engines = EngineRpc(engine_runs)
        flink = FlinkActions(runner_store, runner_blobs, engine_runs, work / "runner-flink", cluster=cluster)
        runner = EngineRunner(engine_runs, rpc, runner_blobs, {}, runner_id="bench", work_dir=work / "runs",
                              pid_dir=work / "pids", flink=flink)  # fmt: skip
        await runner.start()
        hand, loam, via_runner = [], [], []
        try:
            async with FlinkRest(cluster.rest_url) as rest:
                await by_hand(rest, jar, cluster.savepoint_dir, 999)  # warm the JVMs' classes first
                await flink.engine()  # the runner's engine on the bench's cluster, before the clock runs
                for r in range(rounds):  # alternate, so drift in the machine's load hits all three
                    hand.append(await by_hand(rest, jar, cluster.savepoint_dir, r))
                    loam.append(await with_loam(engine, jar.read_bytes(), r))
                    via_runner.append(await with_runner(rpc, engine_runs, jar.read_bytes(), r))
        finally:
            await runner.stop()
            await runner_store.close()
            await engine.close(stop_cluster=False)
            await store.close()
            await cluster.stop()
    result = {"cluster_cold_start_s": cold, "rounds": rounds, "load_avg": os.getloadavg(), "by_hand": {},
              "loam": {}, "overhead_pct": {}, "via_runner": {}, "via_runner_overhead_pct": {}}  # fmt: skip
    for key in ("deploy_s", "savepoint_s", "upgrade_downtime_s"):
        h = statistics.median(x[key] for x in hand)
        lo = statistics.median(x[key] for x in loam)
        vr = statistics.median(x[key] for x in via_runner)
        result["by_hand"][key], result["loam"][key], result["via_runner"][key] = h, lo, vr
        result["overhead_pct"][key] = 100 * (lo - h) / h
        result["via_runner_overhead_pct"][key] = 100 * (vr - h) / h
    result["via_runner"]["upgrade_total_s"] = statistics.median(x["upgrade_total_s"] for x in via_runner)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"cluster cold start: {cold:.1f} s")
    print(
        f"{'median of ' + str(rounds):<22}{'by hand':>10}{'Loam':>10}{'overhead':>10}{'runner':>10}{'overhead':>10}"
    )
    for key in ("deploy_s", "savepoint_s", "upgrade_downtime_s"):
        print(f"{key:<22}{result['by_hand'][key]:>9.2f}s{result['loam'][key]:>9.2f}s{result['overhead_pct'][key]:>9.0f}%"
              f"{result['via_runner'][key]:>9.2f}s{result['via_runner_overhead_pct'][key]:>9.0f}%")  # fmt: skip
    print(f"load average {result['load_avg']}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "flink-latest.json")
    a = p.parse_args()
    asyncio.run(main(a.rounds, a.out))
    sys.exit(0)
