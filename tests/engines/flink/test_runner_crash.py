"""`loam dev` killed with SIGKILL in the middle of a Flink upgrade, then started again on the
same data: its Flink JVMs died with it, the restarted runner brings the cluster back,
finishes the upgrade from what the old job left (its savepoint, or its newest retained
checkpoint), and the deployment's run converges — every action done, one job running on
the cluster, no duplicate — with the SQL aggregation's counts going on from its state, not
from zero."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest
from flinktest import COUNTS_SQL, sql_counts, sql_gaps, sql_state_disagrees, wait_counts

import loam
from loam_common.gen.loam.jobs.v1 import engines_pb2 as E

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spark"))
from sparkdev import make_tokens, start_spark_dev  # noqa: E402  (the path above)

pytestmark = [pytest.mark.long, pytest.mark.timeout(900)]  # two cluster starts on a busy machine


async def settled(c: loam.Client, run_id: str, timeout_s: float = 240) -> object:
    return await asyncio.wait_for(c.wait_flink(run_id), timeout_s)


async def test_loam_dev_killed_mid_upgrade_converges_on_restart_without_a_duplicate_job(tmp_path, flink_dist):
    data = tmp_path / "dev"
    data.mkdir()
    tokens = await make_tokens(data, ["alpha"])
    cluster_root = data / "engines" / "flink" / "cluster"
    out = cluster_root / "log" / "taskmanager.out"
    dev = start_spark_dev(data)
    try:
        async with loam.Client(dev.url, token=tokens["alpha"]) as c:
            run = await asyncio.wait_for(c.deploy_flink("counts", sql=COUNTS_SQL.format(tag="crash")), 300)
            assert run.flink.state == "RUNNING", run
            await wait_counts(
                out, "crash", 0, lambda ps: len({k for k, n in ps if n >= 100}) == 3, timeout_s=180
            )
            before = dict(sql_counts(out, "crash", 0))
            await c.flink_action(run.id, "upgrade", upgrade=c.flink_spec(sql=COUNTS_SQL.format(tag="crash")),
                                 wait=False)  # fmt: skip
            # SIGKILL once the upgrade is under way (its first step recorded)
            deadline = time.monotonic() + 60
            while not (await c.engine_run(run.id)).flink.pending_action:
                assert time.monotonic() < deadline, "the upgrade never started"
                await c.engine_run_logs(run.id, wait=1)
        dev.proc.send_signal(signal.SIGKILL)
        dev.proc.wait(30)
    finally:
        dev.stop()
    old_pids = json.loads((cluster_root / "cluster.json").read_text())["pids"].values()
    for pid in old_pids:  # the JVMs died with their runner
        for _ in range(300):
            if (
                not Path(f"/proc/{pid}").exists()
                or "Z" in Path(f"/proc/{pid}/stat").read_text().split(") ")[1][:1]
            ):
                break
            time.sleep(0.1)  # nothing tells a non-parent that a process exited
        else:
            raise AssertionError(f"Flink JVM {pid} outlived loam dev")

    since = out.stat().st_size if out.exists() else 0
    printed = dict(sql_counts(out, "crash", 0))  # the last count of each key before the kill
    dev = start_spark_dev(data)
    try:
        async with loam.Client(dev.url, token=tokens["alpha"]) as c:
            run = await settled(c, run.id)
            assert run.flink.state == "RUNNING" and run.flink.actions_done == run.flink.actions_requested, run
            assert run.state == E.ENGINE_RUN_STATE_RUNNING
            rest_port = json.loads((cluster_root / "cluster.json").read_text())["rest_port"]
            async with httpx.AsyncClient(base_url=f"http://localhost:{rest_port}", timeout=30) as flink:
                jobs = (await flink.get("/jobs/overview")).json()["jobs"]
                checkpoints = (await flink.get(f"/jobs/{run.flink.job_id}/checkpoints")).json()
            # restored from what the killed job left: its savepoint, or its newest checkpoint
            restored = checkpoints["latest"]["restored"]["external_path"]
            assert restored.rstrip("/").rsplit("/", 1)[-1] in {
                s.path.rstrip("/").rsplit("/", 1)[-1] for s in run.flink.savepoints
            }, (restored, run.flink.savepoints)
            running = [j for j in jobs if j["state"] in ("RUNNING", "CREATED", "INITIALIZING", "RESTARTING")]
            assert [j["jid"] for j in running] == [run.flink.job_id], jobs  # one job: no duplicate
            # the counts go on from the state the old job left, not from zero
            resumed = await wait_counts(
                out, "crash", since, lambda ps: len({k for k, _ in ps}) == 3, timeout_s=120
            )
            first: dict[int, int] = {}
            for k, n in resumed:
                first.setdefault(k, n)
            # Restored from a checkpoint, the job prints again what came after it (the print
            # sink is not transactional: at-least-once output); the state is exactly-once:
            # every count agrees with the ids up to the group's newest, and none went missing.
            assert all(first[k] > 1 for k in first), (before, first)
            assert all(first[k] <= printed[k] + 1 for k in printed), (printed, first)  # no gap
            assert sql_state_disagrees(out, "crash") == []
            assert sql_gaps(out, "crash") == []
            await c.flink_action(run.id, "cancel")
    finally:
        dev.stop(timeout=60)
