"""Flink deployments through the shared engine runner: `SubmitEngineJob(FlinkDeployment)`
and `ControlEngineJob` through the JobsService engine methods (the queue core's CoreRpc,
as Connect and REST reach them), leased by the runner from `engines.flink` and carried out
on the session cluster, each recorded on the deployment's engine run (state, `flink`
status, log). The cluster is the test session's one."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
from flinktest import COUNTER_CLASS, Output, first_per_key, gaps, last_per_key, state_exactly_once

from loam_common.blobs import DirBlobStore
from loam_common.errors import AlreadyExists, InvalidArgument, JobsError, NotFound
from loam_common.gen.loam.jobs.v1 import engines_pb2 as E
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.store import open_store
from loam_engines import runs
from loam_engines.flink.actions import FlinkActions
from loam_engines.rpc import EngineRpc
from loam_engines.runner import EngineRunner
from loam_engines.service import EngineRuns
from loam_queue_core.core import QueueCore
from loam_queue_core.rpc import CoreRpc

NS = "flink-runner"


@pytest.fixture
async def stack(flink_cluster, tmp_path):
    store = open_store(f"sqlite:///{tmp_path}/loam.db")
    blobs = DirBlobStore(tmp_path / "blobs")
    rpc = CoreRpc(QueueCore(store, blobs))
    engine_runs = EngineRuns(store, blobs, rpc)
    rpc.engines = EngineRpc(engine_runs)
    flink = FlinkActions(store, blobs, engine_runs, tmp_path / "flink", cluster=flink_cluster,
                         readiness_timeout_s=60.0)  # fmt: skip
    runner = EngineRunner(engine_runs, rpc, blobs, {}, runner_id="test-runner", work_dir=tmp_path / "runs",
                          pid_dir=tmp_path / "pids", flink=flink)  # fmt: skip
    await runner.start()
    yield rpc, engine_runs, flink
    if flink.started:
        lc = (await flink.engine()).lifecycle
        for d in await lc.recorder.list(NS):  # leave the shared cluster's slots free
            if d.state.value != "CANCELLED":
                with contextlib.suppress(Exception):
                    await lc.cancel(NS, d.name)
    await runner.stop()
    await store.close()


def deployment(name: str, jar: bytes, tag: str, **kw) -> E.FlinkDeployment:
    return E.FlinkDeployment(deployment=name, entrypoint="keyed-counter.jar", source=jar, entry_class=COUNTER_CLASS,
                             args=["--tag", tag, "--rate", "20"], **kw)  # fmt: skip


async def settled(engine_runs: EngineRuns, run_id: str, timeout_s: float = 120.0) -> E.EngineRun:
    """The run once every action asked of it is done (and its deploy has run): woken by
    the run's log, which every step writes to."""
    after = 0
    async with asyncio.timeout(timeout_s):
        while True:
            run = await engine_runs.get(NS, run_id)
            deployed = run.state != runs.QUEUED and not run.flink.pending_action
            if deployed and run.flink.actions_done >= run.flink.actions_requested:
                return run
            lines, _ = await engine_runs.logs(NS, run_id, after, wait_ns=5 * 10**9)
            after = lines[-1].n if lines else after


async def control(rpc: CoreRpc, run_id: str, action: str, **kw) -> E.EngineRun:
    req = J.ControlEngineJobRequest(run=run_id, action=E.EngineAction(action=action, **kw))
    return (await rpc.control_engine_job(NS, req)).record


@pytest.mark.long
async def test_a_deployment_is_an_engine_run_through_savepoint_upgrade_suspend_resume_and_cancel(
    stack, flink_cluster, counter_jar
):
    rpc, engine_runs, flink = stack
    jar = counter_jar.read_bytes()
    out = Output(flink_cluster, "rn-")
    assert not flink.started  # nothing Flink ran yet: the cluster is started on first use

    mark = out.mark()
    resp = await rpc.submit_engine_job(
        NS, J.SubmitEngineJobRequest(job=E.EngineJob(flink=deployment("c", jar, "rn-v1")))
    )
    assert resp.record.state == runs.QUEUED and resp.record.queue == "engines.flink"
    assert resp.record.job.artifact and not resp.record.job.flink.source  # the jar is kept in the blob store
    run = await settled(engine_runs, resp.run)
    assert flink.started
    assert (run.state, run.flink.state, run.flink.version) == (
        runs.RUNNING,
        "RUNNING",
        1,
    ) and run.flink.job_id
    await out.wait(mark, lambda ls: len({c.key for c in ls if c.count >= 3}) == 2)

    # the same name again is refused at once; the running run is untouched
    with pytest.raises(AlreadyExists):
        await rpc.submit_engine_job(
            NS, J.SubmitEngineJobRequest(job=E.EngineJob(flink=deployment("c", jar, "x")))
        )
    # bad input: nothing is enqueued, the job keeps running
    with pytest.raises(NotFound):
        await control(rpc, run.id, "rollback", savepoint="file:/nowhere/savepoint-0")
    with pytest.raises(InvalidArgument):
        await control(rpc, run.id, "upgrade")  # no new version
    with pytest.raises(InvalidArgument):
        await control(rpc, run.id, "rescale")
    with pytest.raises(JobsError):  # not suspended
        await control(rpc, run.id, "resume")
    assert (await engine_runs.get(NS, run.id)).flink.actions_requested == 0

    # savepoint: recorded on the run; the job keeps running
    await control(rpc, run.id, "savepoint")
    run = await settled(engine_runs, run.id)
    assert run.flink.last_action == "savepoint" and not run.flink.last_action_error
    assert [s.reason for s in run.flink.savepoints] == ["savepoint"] and run.flink.state == "RUNNING"

    # upgrade to v2 (a new artifact: another tag): the count continues
    mark = out.mark()
    await control(rpc, run.id, "upgrade", flink=deployment("", jar, "rn-v2"))
    run = await settled(engine_runs, run.id)
    assert (run.flink.version, run.flink.state, run.flink.last_action_error) == (2, "RUNNING", "")
    v1_last = last_per_key([c for c in out.read(0) if c.tag == "rn-v1"])
    v2 = await out.wait(mark, lambda ls: len({c.key for c in ls if c.tag == "rn-v2"}) == 2)
    v2_first = first_per_key([c for c in v2 if c.tag == "rn-v2"])
    assert all(v2_first[k].count == v1_last[k].count + 1 for k in v1_last), (v1_last, v2_first)

    # suspend, then resume: the count continues again
    await control(rpc, run.id, "suspend")
    run = await settled(engine_runs, run.id)
    assert run.flink.state == "SUSPENDED" and run.state == runs.RUNNING and not run.flink.job_id
    stopped = last_per_key([c for c in out.read(0) if c.tag == "rn-v2"])
    mark = out.mark()
    await control(rpc, run.id, "resume")
    run = await settled(engine_runs, run.id)
    assert run.flink.state == "RUNNING" and run.flink.job_id
    again = first_per_key(await out.wait(mark, lambda ls: len({c.key for c in ls if c.tag == "rn-v2"}) == 2))
    assert all(again[k].count == stopped[k].count + 1 for k in stopped), (stopped, again)

    # cancel ends the run; a canceled run takes no more actions
    await control(rpc, run.id, "cancel")
    run = await settled(engine_runs, run.id)
    assert (run.state, run.flink.state) == (runs.CANCELED, "CANCELLED") and run.finished_ns
    with pytest.raises(JobsError):
        await control(rpc, run.id, "savepoint")
    logs, _ = await engine_runs.logs(NS, run.id)
    text = "\n".join(x.line for x in logs)
    for step in ("deploy v1", "upgrade v1 -> v2", "suspended at", "resume v2", "cancelled"):
        assert step in text, text


async def test_a_deploy_flink_cannot_run_fails_its_run_with_the_reason(stack):
    rpc, engine_runs, _ = stack
    bad = E.FlinkDeployment(
        deployment="broken", entrypoint="job.jar", source=b"not a jar", entry_class="no.Such"
    )
    resp = await rpc.submit_engine_job(NS, J.SubmitEngineJobRequest(job=E.EngineJob(flink=bad)))
    run = await settled(engine_runs, resp.run)
    assert run.state == runs.FAILED and run.flink.state == "FAILED" and "deploy of v1 failed" in run.error
    # input refused before anything is enqueued
    for job, field in (
        (E.FlinkDeployment(deployment="x", entrypoint="job.txt", source=b"x"), "job.flink.entrypoint"),
        (E.FlinkDeployment(deployment="x"), "job.flink.source"),
        (
            E.FlinkDeployment(deployment="x", sql="SELECT 1", upgrade_mode="yolo"),
            "job.flink.upgrade_mode",
        ),
    ):
        with pytest.raises(InvalidArgument) as e:
            await rpc.submit_engine_job(NS, J.SubmitEngineJobRequest(job=E.EngineJob(flink=job)))
        assert e.value.field == field


async def test_a_server_without_flink_refuses_a_deploy_at_once(tmp_path):
    store = open_store(f"sqlite:///{tmp_path}/loam.db")
    blobs = DirBlobStore(tmp_path / "blobs")
    rpc = CoreRpc(QueueCore(store, blobs))
    engine_runs = EngineRuns(store, blobs, rpc)
    engine_runs.flink_enabled = False  # `loam dev --no-flink`
    rpc.engines = EngineRpc(engine_runs)
    try:
        job = E.EngineJob(flink=E.FlinkDeployment(deployment="counts", sql="SELECT 1"))
        with pytest.raises(JobsError) as refused:
            await rpc.submit_engine_job(NS, J.SubmitEngineJobRequest(job=job))
        assert refused.value.code == "failed_precondition" and "no Flink engine" in refused.value.message
        assert (await rpc.list_engine_runs(NS, J.ListEngineRunsRequest())).runs == []
    finally:
        await store.close()


def _local(path: str) -> Path:
    return Path(path.removeprefix("file://").removeprefix("file:"))


async def status(rpc: CoreRpc, engine_runs: EngineRuns, run_id: str) -> E.FlinkJobLive:
    """A live status read, through the runner, once Flink's answer is on the run."""
    asked = (await control(rpc, run_id, "status")).flink.status_requested
    after = 0
    async with asyncio.timeout(60):
        while True:
            run = await engine_runs.get(NS, run_id)
            if run.flink.live.seq >= asked:
                return run.flink.live
            lines, _ = await engine_runs.logs(NS, run_id, after, wait_ns=5 * 10**9)
            after = lines[-1].n if lines else after


async def test_upgrade_modes_stateless_and_last_state_rollback_and_a_live_status(
    stack, flink_cluster, counter_jar
):
    """stateless starts the new version empty (the count restarts); last-state starts it from
    the newest retained checkpoint, no savepoint taken (the count goes on; what came after
    that checkpoint is printed again, never skipped); a rollback to that restore point
    rewinds the count to it; `status` reads Flink's REST API."""
    rpc, engine_runs, _ = stack
    out = Output(flink_cluster, "modes-")
    jar = counter_jar.read_bytes()
    mark = out.mark()
    req = J.SubmitEngineJobRequest(job=E.EngineJob(flink=deployment("modes", jar, "modes-v1")))
    run = await settled(engine_runs, (await rpc.submit_engine_job(NS, req)).record.id)
    assert (run.state, run.flink.state) == (runs.RUNNING, "RUNNING"), run.flink

    live = await status(rpc, engine_runs, run.id)
    assert (live.job_id, live.state, live.all_running, live.error) == (run.flink.job_id, "RUNNING", True, "")
    assert live.checkpoints_completed >= 1 and not live.savepoint_in_progress
    newest = _local(live.last_checkpoint_path)  # Flink's own (it keeps only the newest: 1 s apart here)
    assert newest.parent == flink_cluster.checkpoint_dir / live.job_id and newest.name.startswith("chk-"), (
        newest
    )
    assert live.last_checkpoint_ns > 0 and live.restored_from == ""
    await out.wait(mark, lambda ls: len({c.key for c in ls if c.tag == "modes-v1" and c.count >= 5}) == 2)

    # stateless: v1 cancelled, v2 starts empty: its counts (and the source) begin again
    mark = out.mark()
    upgrade = deployment("", jar, "modes-v2", upgrade_mode="stateless")
    await control(rpc, run.id, "upgrade", flink=upgrade)
    run = await settled(engine_runs, run.id)
    assert (run.flink.state, run.flink.version, run.flink.last_action_error) == ("RUNNING", 2, ""), run.flink
    assert [s.reason for s in run.flink.savepoints] == []  # no savepoint was taken
    v2 = await out.wait(
        mark, lambda ls: len({c.key for c in ls if c.tag == "modes-v2" and c.count >= 8}) == 2
    )
    v2 = [c for c in v2 if c.tag == "modes-v2"]
    assert {k: c.count for k, c in first_per_key(v2).items()} == {0: 1, 1: 1}, first_per_key(v2)

    # last-state: v2 cancelled, v3 starts from v2's newest retained checkpoint
    mark = out.mark()
    upgrade = deployment("", jar, "modes-v3", upgrade_mode="last-state")
    await control(rpc, run.id, "upgrade", flink=upgrade)
    run = await settled(engine_runs, run.id)
    assert (run.flink.state, run.flink.version, run.flink.last_action_error) == ("RUNNING", 3, ""), run.flink
    restore = run.flink.savepoints[-1]
    assert (restore.reason, restore.version) == ("last-state", 2) and "/chk-" in restore.path
    v3 = await out.wait(
        mark, lambda ls: len({c.key for c in ls if c.tag == "modes-v3" and c.count >= 3}) == 2
    )
    v2 = [c for c in out.read(0) if c.tag == "modes-v2"]
    v3 = [c for c in v3 if c.tag == "modes-v3"]
    v2_last, v3_first = last_per_key(v2), first_per_key(v3)
    assert all(1 < v3_first[k].count <= v2_last[k].count + 1 for k in (0, 1)), (v2_last, v3_first)  # goes on
    assert state_exactly_once(v2 + v3) == []  # every count agrees with the source position it came with
    assert gaps(v2 + v3) == []  # replayed since the checkpoint, nothing skipped

    live = await status(rpc, engine_runs, run.id)
    assert (live.job_id, live.state) == (run.flink.job_id, "RUNNING")
    assert _local(live.restored_from) == _local(restore.path), (live.restored_from, restore.path)

    # rollback (by default the version before, from its newest restore point: here the
    # checkpoint last-state started from): the count rewinds to that checkpoint's
    await out.wait(
        mark, lambda ls: any(c.tag == "modes-v3" and c.count > v2_last[c.key].count + 5 for c in ls)
    )
    mark = out.mark()
    await control(rpc, run.id, "rollback")
    run = await settled(engine_runs, run.id)
    assert (run.flink.state, run.flink.version, run.flink.last_action_error) == ("RUNNING", 2, ""), run.flink
    back = await out.wait(mark, lambda ls: len({c.key for c in ls if c.tag == "modes-v2"}) == 2)
    back_first = first_per_key([c for c in back if c.tag == "modes-v2"])
    assert all(back_first[k].count == v3_first[k].count for k in (0, 1)), (v3_first, back_first)

    run = await settled(engine_runs, (await control(rpc, run.id, "cancel")).id)
    assert run.state == runs.CANCELED
    log = [line.line for line in (await engine_runs.logs(NS, run.id, 0, limit=1000))[0]]
    for words in (
        "(stateless): cancel job",
        "starts without state",
        "(last-state): cancel job",
        "starts from file:",
    ):
        assert any(words in line for line in log), (words, log)
