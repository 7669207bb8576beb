"""The engine-run record's transitions over a real store (memory and SQLite): who may
create it, attempts opening and closing, a cancel racing a lease, logs in order."""

from __future__ import annotations

import pytest

from loam_common.errors import InvalidState, NotFound
from loam_common.gen.loam.jobs.v1 import engines_pb2 as E
from loam_engines import runs

NS = "acme"
JOB = E.EngineJob(spark_batch=E.SparkBatch(entrypoint="a.py"))


def start(run_id: str, attempt: int = 1, epoch: int = 1) -> runs.AttemptStart:
    return runs.AttemptStart(run_id=run_id, queue="engines.spark", job=JOB, attempt=attempt, epoch=epoch,
                             runner="r1", schedule="")  # fmt: skip


async def test_the_submit_and_a_lease_may_both_create_the_record_and_the_first_wins(store):
    first = await store.transact(runs.run_start_attempt_if_runnable, NS, start("01A"))
    assert first.state == runs.RUNNING
    again = await store.transact(
        runs.run_create_if_absent, NS, E.EngineRun(id="01A", job=JOB, state=runs.QUEUED)
    )
    assert again.state == runs.RUNNING  # the submit's late write did not reset it
    assert await store.snapshot(runs.engine_namespaces) == [NS]


async def test_an_attempt_left_open_is_closed_by_the_next_one(store):
    await store.transact(runs.run_start_attempt_if_runnable, NS, start("01B", 1, 1))
    run = await store.transact(runs.run_start_attempt_if_runnable, NS, start("01B", 2, 2))
    assert [a.attempt for a in run.attempts] == [1, 2]
    assert run.attempts[0].finished_ns and "runner stopped" in run.attempts[0].error
    done = await store.transact(runs.run_finish_attempt, NS, "01B", runs.SUCCEEDED, 0, "")
    assert done.state == runs.SUCCEEDED and done.exit_code == 0 and done.finished_ns
    assert await store.transact(runs.run_start_attempt_if_runnable, NS, start("01B", 3, 3)) is None


async def test_a_cancel_racing_a_lease_ends_the_run_canceled(store):
    await store.transact(runs.run_create_if_absent, NS, E.EngineRun(id="01C", job=JOB, state=runs.QUEUED))
    # The job was leased as the cancel came: the cancel only marks the run...
    marked = await store.transact(runs.run_cancel_if_unfinished, NS, "01C", True)
    assert marked.cancel_requested and marked.state == runs.QUEUED
    # ...and the attempt that would have started ends it instead.
    assert await store.transact(runs.run_start_attempt_if_runnable, NS, start("01C")) is None
    run = await store.snapshot(runs.run_get, NS, "01C")
    assert run.state == runs.CANCELED and not run.attempts
    with pytest.raises(InvalidState):
        await store.transact(runs.run_cancel_if_unfinished, NS, "01C", False)


async def test_logs_are_numbered_and_paged(store):
    await store.transact(runs.run_create_if_absent, NS, E.EngineRun(id="01D", job=JOB, state=runs.QUEUED))
    await store.transact(runs.run_append_logs, NS, "01D", [(1, "stdout", f"line {i}") for i in range(5)])
    page, _ = await store.snapshot(runs.run_logs, NS, "01D", 2, 2)
    assert [(x.n, x.line) for x in page] == [(3, "line 2"), (4, "line 3")]
    with pytest.raises(NotFound):
        await store.snapshot(runs.run_logs, NS, "nope", 0, 10)


async def test_runs_list_newest_first_and_by_namespace(store):
    for rid in ("01E1", "01E2", "01E3"):
        await store.transact(runs.run_create_if_absent, NS, E.EngineRun(id=rid, job=JOB, state=runs.QUEUED))
    await store.transact(
        runs.run_create_if_absent, "other", E.EngineRun(id="01E9", job=JOB, state=runs.QUEUED)
    )
    assert [r.id for r in await store.snapshot(runs.run_list, NS, 2, "")] == ["01E3", "01E2"]
    assert [r.id for r in await store.snapshot(runs.run_list, NS, 10, "01E2")] == ["01E1"]
