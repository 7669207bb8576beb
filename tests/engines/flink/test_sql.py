"""Flink SQL on the cluster through the SQL runner: an aggregation upgraded to a query whose
state cannot be restored (a SUM added) is refused by the readiness check and rolled back to
the running version, whose counts go on from the upgrade's savepoint."""

from __future__ import annotations

import pytest
from flinktest import COUNTS_SQL, NS, sql_counts, wait_counts

from loam_engines.flink.lifecycle import UpgradeRolledBack
from loam_engines.flink.model import JobSpec, Kind, State

WITH_SUM = COUNTS_SQL.replace("top BIGINT,", "top BIGINT, total BIGINT,").replace(
    "MAX(id) FROM", "MAX(id), SUM(id) FROM"
)


@pytest.mark.long
async def test_a_sql_upgrade_whose_state_cannot_be_restored_rolls_back(engine, flink_cluster):
    life, out, tag = engine.lifecycle, flink_cluster.taskmanager_out, "sqlup"
    v1 = (await engine.artifact_put(NS, "counts.sql", COUNTS_SQL.format(tag=tag).encode()))["artifact"]
    v2 = (await engine.artifact_put(NS, "counts.sql", WITH_SUM.format(tag=tag).encode()))["artifact"]
    assert v1 != v2
    since = out.stat().st_size
    d = await life.deploy(NS, "sqlcounts", JobSpec(Kind.SQL, v1))
    assert d.state == State.RUNNING
    await wait_counts(out, tag, since, lambda ps: len({k for k, n in ps if n >= 3}) == 3)

    with pytest.raises(UpgradeRolledBack, match="upgrade to v2 failed: .*v1 runs again"):
        await life.upgrade(NS, "sqlcounts", JobSpec(Kind.SQL, v2))
    d, job = await life.status(NS, "sqlcounts")
    assert (d.state, d.version, job.state) == (State.RUNNING, 1, "RUNNING")
    assert d.last_error.startswith("upgrade to v2 failed")

    # each key's count runs on without a gap or a repeat through the stop and the rollback
    resumed_at = out.stat().st_size
    await wait_counts(out, tag, resumed_at, lambda ps: len({k for k, _ in ps}) == 3)
    counts: dict[int, list[int]] = {}
    for k, n in sql_counts(out, tag, since):
        counts.setdefault(k, []).append(n)
    for k, ns in counts.items():
        assert ns == list(range(ns[0], ns[0] + len(ns))), (k, ns)
