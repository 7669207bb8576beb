"""The lifecycle of a DataStream jar job on real Flink: a keyed counter deployed, savepointed,
upgraded (its count continues), rolled back to the earlier savepoint (the count rewinds to
it), suspended and resumed (continues), cancelled; a broken upgrade rolls back by itself;
bad input is refused and leaves the running job as it was."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from flinktest import COUNTER_CLASS, NS, Output, first_per_key, last_per_key, state_exactly_once

from loam_common.errors import AlreadyExists, InvalidArgument, NotFound
from loam_engines.flink.lifecycle import FlinkRefused, UpgradeRolledBack
from loam_engines.flink.model import JobSpec, Kind, State


async def upload_counter(engine, counter_jar) -> str:
    return (await engine.artifact_put(NS, "keyed-counter.jar", counter_jar.read_bytes()))["artifact"]


def counter(artifact: str, tag: str, *extra: str, **kw) -> JobSpec:
    return JobSpec(
        Kind.JAR, artifact, entry_class=COUNTER_CLASS, args=("--tag", tag, "--rate", "20", *extra), **kw
    )


def continues(before: dict, after: dict) -> bool:
    """Each key's first count after a restore is at least one past its count when stopped."""
    return all(after[k].count > before[k].count for k in before) and all(
        after[k].count <= before[k].count + 1 + 20 for k in before
    )


@pytest.mark.long  # each action is proven once in make test by the shorter tests; this is the whole story
async def test_a_keyed_counter_keeps_its_count_through_upgrade_rollback_suspend_and_resume(
    engine, flink_cluster, counter_jar
):
    life = engine.lifecycle
    out = Output(flink_cluster, "jar-")
    jar = await upload_counter(engine, counter_jar)

    # deploy v1
    mark = out.mark()
    d = await life.deploy(NS, "counter", counter(jar, "jar-v1"))
    assert (d.state, d.version, d.job_id) == (State.RUNNING, 1, d.job_id)
    _, job = await life.status(NS, "counter")
    assert job is not None and job.state == "RUNNING" and job.all_running and job.checkpoints >= 1
    await out.wait(mark, lambda ls: len({c.key for c in ls if c.count >= 5}) == 2)

    # savepoint while running: counts printed before the call <= the savepoint's <= after it
    before_sp = last_per_key(out.read(mark))
    sp = await life.savepoint(NS, "counter")
    after_sp = last_per_key(out.read(mark))
    assert sp.version == 1 and sp.reason == "savepoint"
    assert (await life.status(NS, "counter"))[0].state == State.RUNNING

    # upgrade to v2: the count continues from where v1 stopped
    await out.wait(mark, lambda ls: all(c.count > after_sp[c.key].count + 5 for c in ls[-2:]))
    mark = out.mark()
    d = await life.upgrade(NS, "counter", counter(jar, "jar-v2"))
    assert (d.state, d.version) == (State.RUNNING, 2)
    assert d.savepoints[-1].reason == "upgrade" and d.timings_ms["upgrade_downtime_ms"] > 0
    v1_last = last_per_key([c for c in out.read(0) if c.tag == "jar-v1"])
    v2 = await out.wait(mark, lambda ls: len({c.key for c in ls if c.tag == "jar-v2"}) == 2)
    v2_first = first_per_key([c for c in v2 if c.tag == "jar-v2"])
    assert all(v2_first[k].count == v1_last[k].count + 1 for k in v1_last), (v1_last, v2_first)
    _, job = await life.status(NS, "counter")
    assert job.restored_from is not None and job.restored_from.rstrip("/").endswith(
        d.savepoints[-1].path.rstrip("/").rsplit("/", 1)[-1]
    )

    # rollback to v1 from the savepoint taken while v1 ran: the count rewinds to it
    await out.wait(mark, lambda ls: any(c.tag == "jar-v2" and c.count > v1_last[c.key].count + 5 for c in ls))
    mark = out.mark()
    d = await life.rollback(NS, "counter", version=1, savepoint=sp.path)
    assert (d.state, d.version) == (State.RUNNING, 1)
    back = await out.wait(mark, lambda ls: len({c.key for c in ls if c.tag == "jar-v1"}) == 2)
    back_first = first_per_key([c for c in back if c.tag == "jar-v1"])
    for k in (0, 1):
        assert before_sp[k].count < back_first[k].count <= after_sp[k].count + 1, (
            before_sp,
            after_sp,
            back_first,
        )

    # suspend, then resume: the count continues
    await out.wait(mark, lambda ls: sum(c.tag == "jar-v1" for c in ls) > 6)
    d = await life.suspend(NS, "counter")
    assert d.state == State.SUSPENDED and d.job_id is None and d.savepoints[-1].reason == "suspend"
    stopped_job = d.savepoints[-1].job_id
    assert (await life.rest.job(stopped_job)).state == "FINISHED"
    suspended_last = last_per_key([c for c in out.read(mark) if c.tag == "jar-v1"])
    mark = out.mark()
    d = await life.resume(NS, "counter")
    assert (d.state, d.version) == (State.RUNNING, 1)
    resumed = await out.wait(mark, lambda ls: len({c.key for c in ls}) == 2)
    resumed_first = first_per_key(resumed)
    assert all(resumed_first[k].count == suspended_last[k].count + 1 for k in (0, 1)), (
        suspended_last,
        resumed_first,
    )

    # cancel
    job_id = d.job_id
    d = await life.cancel(NS, "counter")
    assert d.state == State.CANCELLED and d.job_id is None
    assert (await life.rest.job(job_id)).state == "CANCELED"

    # stop-with-savepoint stops the source at the savepoint, so each restore above went on at
    # the next element (+1, nothing printed twice); through all of it the state stayed exact
    assert state_exactly_once(out.read(0)) == []

    # every step is in the log, in order
    log = [line.text for line in await life.recorder.logs(NS, "counter", 100)]
    for word in (
        "deploy v1",
        "savepoint",
        "upgrade v1 -> v2",
        "rollback v2 -> v1",
        "suspended",
        "resume v1",
        "cancelled",
    ):
        assert any(word in line for line in log), (word, log)
    assert [v.number for v in d.versions] == [1, 2]


async def test_an_upgrade_to_a_broken_version_rolls_back_by_itself(engine, flink_cluster, counter_jar):
    life = engine.lifecycle
    out = Output(flink_cluster, "broken-")
    jar = await upload_counter(engine, counter_jar)
    mark = out.mark()
    await life.deploy(NS, "fragile", counter(jar, "broken-v1"))
    await out.wait(mark, lambda ls: len({c.key for c in ls if c.count >= 3}) == 2)

    with pytest.raises(
        UpgradeRolledBack, match=r"upgrade to v2 failed: .*version broken-v2 is broken.*v1 runs again"
    ):
        await life.upgrade(NS, "fragile", counter(jar, "broken-v2", "--fail"))
    returned = out.mark()

    d, job = await life.status(NS, "fragile")
    assert (d.state, d.version, d.pending) == (State.RUNNING, 1, None)
    assert d.last_error is not None and "v2" in d.last_error
    assert job.state == "RUNNING" and job.restarts == 0
    assert job.restored_from is not None  # v1 runs again from the upgrade's savepoint
    await out.wait(returned, lambda ls: len({c.key for c in ls if c.tag == "broken-v1"}) == 2)
    # v1 before the upgrade and v1 after the rollback printed one unbroken count per key:
    # no count lost, none repeated, nothing from the broken v2.
    lines = out.read(mark)
    assert all(c.tag == "broken-v1" for c in lines)
    for k in (0, 1):
        counts = [c.count for c in lines if c.key == k]
        assert counts == list(range(1, len(counts) + 1)), counts


async def test_bad_input_is_refused_and_leaves_the_running_job_alone(engine, flink_cluster, counter_jar):
    life = engine.lifecycle
    jar = await upload_counter(engine, counter_jar)
    await life.deploy(NS, "steady", counter(jar, "bad-v1"))
    before, _ = await life.status(NS, "steady")

    missing = "0" * 64 + "/missing.jar"
    with pytest.raises(NotFound, match="no artifact"):
        await life.upgrade(NS, "steady", counter(missing, "bad-v2"))
    with pytest.raises(InvalidArgument, match="artifact"):
        await life.upgrade(NS, "steady", counter("not-a-ref", "bad-v2"))
    with pytest.raises(NotFound, match="is not a savepoint of 'steady'"):
        await life.rollback(
            NS, "steady", version=1, savepoint="file:/tmp/nowhere/savepoint-000000-000000000000"
        )
    with pytest.raises(FlinkRefused, match="nothing to roll back to"):
        await life.rollback(NS, "steady")
    with pytest.raises(FlinkRefused, match="cannot resume 'steady': it is RUNNING"):
        await life.resume(NS, "steady")
    with pytest.raises(AlreadyExists):
        await life.deploy(NS, "steady", counter(jar, "bad-v1"))
    with pytest.raises(NotFound, match="no Flink deployment 'ghost'"):
        await life.suspend(NS, "ghost")
    with pytest.raises(InvalidArgument, match="parallelism"):
        await life.upgrade(NS, "steady", counter(jar, "bad-v2", parallelism=0))

    after, job = await life.status(NS, "steady")
    assert (after.state, after.version, after.job_id, len(after.versions)) == (
        State.RUNNING,
        1,
        before.job_id,
        1,
    )
    assert job.state == "RUNNING"


@pytest.mark.long
async def test_a_change_that_cannot_restore_the_state_is_refused_unless_allowed(
    engine, flink_cluster, counter_jar
):
    """Savepoint state with no operator to go to: Flink refuses the new version, the old one
    runs again from the savepoint; with allow_non_restored_state the same change goes through."""
    life = engine.lifecycle
    out = Output(flink_cluster, "bad-")
    jar = await upload_counter(engine, counter_jar)
    await life.deploy(NS, "steady", counter(jar, "bad-v1"))
    mark = out.mark()
    with pytest.raises(UpgradeRolledBack, match="Cannot map checkpoint/savepoint state"):
        await life.upgrade(NS, "steady", counter(jar, "bad-v2", "--stateless"))
    d, job = await life.status(NS, "steady")
    assert (d.state, d.version, job.state) == (State.RUNNING, 1, "RUNNING")
    await out.wait(mark, lambda ls: any(c.tag == "bad-v1" for c in ls))
    d = await life.upgrade(NS, "steady", counter(jar, "bad-v3", "--stateless", allow_non_restored_state=True))
    assert (d.state, d.version) == (State.RUNNING, 3)


@pytest.mark.long
async def test_periodic_savepoints_follow_the_policy_and_old_ones_are_disposed(engine, counter_jar):
    life = engine.lifecycle
    life.keep_savepoints = 2
    now = [time.time_ns()]
    life._now = lambda: now[0]  # the policy's clock; Flink's own time runs as it does
    jar = await upload_counter(engine, counter_jar)
    d = await life.deploy(NS, "periodic", counter(jar, "periodic-v1"), savepoint_interval_s=60)
    assert await life.take_due_savepoints() == []  # not due: it just started

    taken = []
    for _ in range(4):
        now[0] += 61 * 1_000_000_000
        (due,) = await life.take_due_savepoints()
        assert due[:2] == (NS, "periodic") and due[2].reason == "periodic"
        taken.append(due[2].path)
        assert await life.take_due_savepoints() == []  # one per interval
    d = await life.recorder.load(NS, "periodic")
    assert [s.path for s in d.savepoints] == taken[-2:]  # the newest two are kept
    for path in taken[:2]:
        assert not Path(path.removeprefix("file:")).exists()
    for path in taken[-2:]:
        assert (Path(path.removeprefix("file:")) / "_metadata").exists()

    await life.suspend(NS, "periodic")
    now[0] += 3600 * 1_000_000_000
    assert await life.take_due_savepoints() == []  # only running deployments
