"""The parts of Flink on Loam that need no cluster: the store recorder (real SQLite), the SQL
runner's statement splitting, Flink error messages, the wheel's Java options."""

from __future__ import annotations

import pytest

from loam_common import keys
from loam_common.store import open_store
from loam_engines.flink.cluster import wheel_java_opts
from loam_engines.flink.model import Deployment, JobSpec, Kind, Pending, Savepoint, State, Version, job_id_for
from loam_engines.flink.recorder import LOG_CAP, StoreRunRecorder
from loam_engines.flink.rest import checkpoint_stats, root_cause
from loam_engines.flink.sql_runner import split_statements

REF = "a" * 64 + "/job.jar"


def deployment(name: str = "d1") -> Deployment:
    return Deployment(
        name=name, state=State.DEPLOYING, version=1, versions=[Version(1, JobSpec(Kind.JAR, REF), 5)]
    )


@pytest.fixture
async def recorder(tmp_path):
    store = open_store(f"sqlite:///{tmp_path}/loam.db")
    yield StoreRunRecorder(store)
    await store.close()


async def test_the_recorder_keeps_each_namespace_apart_and_lists_actions_in_flight(recorder):
    d = deployment()
    d.pending = Pending("deploy", "submit", 1, 7)
    assert await recorder.create("ns1", d, "deploy v1")
    assert not await recorder.create("ns1", deployment(), "again")  # one name, one deployment
    assert await recorder.create("ns2", deployment(), "deploy v1")
    assert await recorder.in_flight() == [("ns1", "d1")]

    d.state, d.pending = State.RUNNING, None
    d.savepoints.append(Savepoint("file:/sp/1", 1, "j1", 9, "savepoint"))
    await recorder.record("ns1", d, "running")
    assert await recorder.in_flight() == []
    back = await recorder.load("ns1", "d1")
    assert (back.state, back.savepoints, back.versions) == (State.RUNNING, d.savepoints, d.versions)
    assert [line.text for line in await recorder.logs("ns1", "d1")] == ["deploy v1", "running"]
    assert [x.name for x in await recorder.list("ns2")] == ["d1"]
    assert await recorder.load("ns3", "d1") is None


async def test_the_log_keeps_the_newest_lines(recorder):
    d = deployment()
    await recorder.create("ns", d, "line 1")
    for i in range(2, LOG_CAP + 6):
        await recorder.record("ns", d, f"line {i}")
    lines = await recorder.logs("ns", "d1", limit=LOG_CAP + 10)
    assert len(lines) == LOG_CAP and lines[-1].text == f"line {LOG_CAP + 5}" and lines[0].seq == 6
    raw = await recorder.store.snapshot(lambda tx: tx.get(keys.flink_log("ns", "d1", 5)))
    assert raw is None


def test_a_deployment_survives_its_json_unchanged():
    d = deployment()
    d.pending = Pending(
        "upgrade", "verify", 2, 1, job_id="j", new_job_id="k", savepoint="file:/s", from_version=1
    )
    d.timings_ms["deploy_ms"] = 12.5
    assert Deployment.from_json(d.to_json()) == d


def test_job_ids_are_fixed_per_submission_and_distinct():
    def at(name: str = "d1", created_ns: int = 1, generation: int = 1) -> Deployment:
        d = deployment(name)
        d.created_ns, d.generation = created_ns, generation
        return d

    assert job_id_for("ns", at()) == job_id_for("ns", at())
    ids = {job_id_for("ns", at()), job_id_for("ns", at(generation=2)), job_id_for("ns2", at()),
           job_id_for("ns", at(created_ns=2)), job_id_for("ns", at("d2"))}  # fmt: skip
    assert len(ids) == 5 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


def test_sql_scripts_split_at_semicolons_that_end_a_line():
    script = """
-- a comment; with a semicolon
SET 'pipeline.name' = 'x';
CREATE TABLE t (a STRING) WITH ('connector' = 'datagen',
  'x' = 'a;b');
INSERT INTO s SELECT a FROM t
"""
    assert split_statements(script) == [
        "SET 'pipeline.name' = 'x'",
        "CREATE TABLE t (a STRING) WITH ('connector' = 'datagen',\n  'x' = 'a;b')",
        "INSERT INTO s SELECT a FROM t",
    ]


def test_flink_errors_are_cut_to_their_root_cause():
    trace = ("org.apache.flink.runtime.rest.handler.RestHandlerException: Could not execute application.\n"
             "\tat x.y(Z.java:1)\nCaused by: java.lang.RuntimeException: wrapped\n"
             "Caused by: java.lang.IllegalStateException: Cannot map checkpoint/savepoint state for operator 1\n")  # fmt: skip
    assert (
        root_cause([trace])
        == "java.lang.IllegalStateException: Cannot map checkpoint/savepoint state for operator 1"
    )
    assert root_cause(["Not found: /jobs/x"]) == "Not found: /jobs/x"
    assert root_cause([]) == "Flink gave no reason"


def test_the_java_17_options_come_from_the_wheels_config(flink_dist):
    opts = wheel_java_opts(flink_dist.home)
    assert "--add-opens=java.base/java.lang=ALL-UNNAMED" in opts


def test_a_jobs_checkpoints_say_when_a_savepoint_is_in_progress():
    # GET /jobs/:id/checkpoints as Flink 2.3 answers it while a stop-with-savepoint runs
    # (trimmed to the fields read): the newest of completed and savepoint wins.
    answer = {
        "counts": {"restored": 1, "total": 14, "in_progress": 1, "completed": 12, "failed": 1},
        "latest": {
            "completed": {"id": 12, "status": "COMPLETED", "is_savepoint": False, "latest_ack_timestamp": 1_700,
                          "external_path": "file:/data/checkpoints/j/chk-12"},
            "savepoint": {"id": 9, "status": "COMPLETED", "is_savepoint": True, "latest_ack_timestamp": 1_800,
                          "external_path": "file:/data/savepoints/savepoint-j-1"},
            "restored": {"id": 3, "is_savepoint": True, "external_path": "file:/data/savepoints/savepoint-x"},
        },
        "history": [
            {"id": 14, "status": "IN_PROGRESS", "is_savepoint": True, "checkpoint_type": "SYNC_SAVEPOINT"},
            {"id": 13, "status": "FAILED", "is_savepoint": False},
        ],
    }  # fmt: skip
    stats = checkpoint_stats(answer)
    assert (stats.completed, stats.failed, stats.savepoint_in_progress) == (12, 1, True)
    assert (stats.latest_completed_path, stats.latest_completed_ms) == (
        "file:/data/savepoints/savepoint-j-1",
        1_800,
    )
    assert stats.restored_path == "file:/data/savepoints/savepoint-x"
    answer["history"][0]["is_savepoint"] = False  # a checkpoint in progress is not a savepoint
    assert not checkpoint_stats(answer).savepoint_in_progress
    assert checkpoint_stats({}) == checkpoint_stats({"counts": {}, "latest": None, "history": []})
