"""Crashes: no Flink JVM outlives a manager killed with SIGKILL, a later manager stops what
an earlier one left (and nothing else), and a runner killed mid-upgrade converges on
restart without a duplicate job."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from flinktest import COUNTER_CLASS, NS, Output, first_per_key, last_per_key

from loam_engines.flink.cluster import LocalFlinkCluster
from loam_engines.flink.model import JobSpec, Kind, State

HERE = Path(__file__).parent


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.split(") ", 1)[1][0] != "Z"


def wait_gone(pids, timeout_s=30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while any(alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)  # nothing tells a non-parent that a process exited
    return True


def test_a_new_manager_stops_the_jvms_an_earlier_one_left_and_nothing_else(flink_dist, tmp_path):
    cluster = LocalFlinkCluster(tmp_path / "cluster", flink_dist)
    cluster.conf_dir.mkdir(parents=True)
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    left = subprocess.Popen([*sleeper, str(cluster.conf_dir)], start_new_session=True)  # looks like our JVM
    stranger = subprocess.Popen([*sleeper, "unrelated"], start_new_session=True)  # a reused pid
    try:
        (cluster.root / "cluster.json").write_text(json.dumps({"pids": {"jobmanager": left.pid,
                                                                        "taskmanager": stranger.pid}}))  # fmt: skip
        assert cluster.reap_orphans() == [left.pid]
        assert left.wait(timeout=10) is not None
        assert stranger.poll() is None
        assert not (cluster.root / "cluster.json").exists()
    finally:
        for p in (left, stranger):
            p.kill()
            p.wait()


MANAGER = """
import asyncio, json, sys, time
from loam_engines.flink.cluster import LocalFlinkCluster
async def main():
    c = LocalFlinkCluster(sys.argv[1], slots=1, taskmanager_memory="1024m", jobmanager_memory="768m")
    await c.start()
    print(json.dumps(c.pids()), flush=True)
    await asyncio.sleep(600)
asyncio.run(main())
"""


@pytest.mark.long
def test_no_flink_jvm_outlives_a_manager_killed_with_sigkill(flink_dist, tmp_path):
    root = tmp_path / "cluster"
    manager = subprocess.Popen([sys.executable, "-c", MANAGER, str(root)], stdout=subprocess.PIPE, text=True)
    try:
        pids = list(json.loads(manager.stdout.readline()).values())
        assert pids and all(alive(p) for p in pids)
        manager.send_signal(signal.SIGKILL)
        manager.wait()
        assert wait_gone(pids), [p for p in pids if alive(p)]
    finally:
        manager.kill()
        manager.wait()
    # the lock died with the manager: a new one can run the cluster at the same root
    again = LocalFlinkCluster(root, flink_dist)
    again._take_lock()
    again._release_lock()


@pytest.mark.long
async def test_a_runner_killed_mid_upgrade_converges_on_restart_without_a_duplicate_job(
    engine, flink_cluster, counter_jar, tmp_path
):
    life = engine.lifecycle
    out = Output(flink_cluster, "crash-")
    jar = (await engine.artifact_put(NS, "keyed-counter.jar", counter_jar.read_bytes()))["artifact"]
    mark = out.mark()
    await life.deploy(NS, "crashy", JobSpec(Kind.JAR, jar, entry_class=COUNTER_CLASS,
                                             args=("--tag", "crash-v1", "--rate", "20")))  # fmt: skip
    await out.wait(mark, lambda ls: len({c.key for c in ls if c.count >= 3}) == 2)

    runner = await asyncio.create_subprocess_exec(
        sys.executable, str(HERE / "upgrade_runner.py"), str(tmp_path / "loam.db"), str(tmp_path / "blobs"),
        str(tmp_path / "engine" / "artifacts"), flink_cluster.rest_url, str(flink_cluster.savepoint_dir),
        NS, "crashy", jar, "crash-v2",
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:  # the runner's progress is only in the store: read it until the submit is recorded
            d = await life.recorder.load(NS, "crashy")
            if d.pending is not None and d.pending.step == "verify":
                break
            assert runner.returncode is None, "the runner finished before it could be killed"
            assert time.monotonic() < deadline, d.pending
            await asyncio.sleep(0.05)
        runner.send_signal(signal.SIGKILL)
    finally:
        if runner.returncode is None:
            runner.kill()
        await runner.wait()

    d = await life.recorder.load(NS, "crashy")
    assert (d.state, d.pending.action, d.pending.step) == (State.UPGRADING, "upgrade", "verify")
    v1_last = last_per_key([c for c in out.read(mark) if c.tag == "crash-v1"])

    assert await life.reconcile() == [(NS, "crashy")]
    d, job = await life.status(NS, "crashy")
    assert (d.state, d.version, d.pending) == (State.RUNNING, 2, None)
    assert job.state == "RUNNING"
    running = [
        j for j in await life.rest.jobs() if j.name.startswith("loam-counter-crash") and j.state == "RUNNING"
    ]
    assert [j.id for j in running] == [d.job_id]
    v2 = await out.wait(mark, lambda ls: len({c.key for c in ls if c.tag == "crash-v2"}) == 2)
    v2_first = first_per_key([c for c in v2 if c.tag == "crash-v2"])
    assert all(v2_first[k].count == v1_last[k].count + 1 for k in (0, 1)), (v1_last, v2_first)
    assert any("after a restart" in line.text for line in await life.recorder.logs(NS, "crashy"))
