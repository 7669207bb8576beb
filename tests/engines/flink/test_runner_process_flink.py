"""Flink in the split deployment: a queue-core process takes `SubmitEngineJob(FlinkDeployment)`
and the control actions (they need only the store); the engine runner as its own process
(`loam engines`) leases them over Connect, starts its Flink session cluster on that first
deploy, and carries them out; the run's record says how they went."""

from __future__ import annotations

import time

import pytest
from flinktest import COUNTS_SQL

from loam_common.connect_client import jobs_client
from loam_common.gen.loam.jobs.v1 import engines_pb2 as E
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J

pytestmark = [pytest.mark.long, pytest.mark.timeout(900)]  # the runner process's own cluster
NS = "split"


async def settled(client, headers, run_id: str, timeout_s: float = 300) -> E.EngineRun:
    after, deadline = 0, time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = (await client.get_engine_run(J.GetEngineRunRequest(run=run_id), headers=headers)).record
        if run.state != E.ENGINE_RUN_STATE_QUEUED and not run.flink.pending_action:
            if run.flink.actions_done >= run.flink.actions_requested:
                return run
        req = J.ListEngineRunLogsRequest(run=run_id, after=after, wait_ns=5_000_000_000)
        page = await client.list_engine_run_logs(req, headers=headers)
        after = page.lines[-1].n if page.lines else after
    raise AssertionError(f"run {run_id} did not settle: {run}")


async def test_a_runner_process_deploys_and_controls_what_a_queue_core_process_took(
    split_deployment, flink_dist
):
    cluster_file = split_deployment.engines_data / "flink" / "cluster" / "cluster.json"
    assert not cluster_file.exists()  # not before first use
    client = jobs_client(split_deployment.core_url)
    headers = {"x-loam-namespace": NS}
    job = E.EngineJob(flink=E.FlinkDeployment(deployment="counts", sql=COUNTS_SQL.format(tag="split")))
    submitted = await client.submit_engine_job(J.SubmitEngineJobRequest(job=job), headers=headers)
    run = await settled(client, headers, submitted.run)
    assert (run.state, run.flink.state) == (E.ENGINE_RUN_STATE_RUNNING, "RUNNING"), run
    assert cluster_file.exists()
    for action in ("savepoint", "suspend", "resume", "cancel"):
        req = J.ControlEngineJobRequest(run=run.id, action=E.EngineAction(action=action))
        await client.control_engine_job(req, headers=headers)
        run = await settled(client, headers, run.id)
        assert run.flink.last_action == action and not run.flink.last_action_error, run.flink
    assert (run.state, run.flink.state) == (E.ENGINE_RUN_STATE_CANCELED, "CANCELLED")
    assert [s.reason for s in run.flink.savepoints] == ["savepoint", "suspend"]
    await client.close()
