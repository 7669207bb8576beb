"""The one `store` fixture: every store test runs once per backend.

- lmdb: an LMDB environment (a directory) in tmp_path.
- sqlite: a file in tmp_path.
- memory: the MVCC backend, no faults.
- memory-faults: with a seeded FaultPlan (conflicts, region errors on reads and at
  commit, both kinds of unknown commit outcome); the runner must hide all of them.
- memory-txn-faults: the same faults, with group commit switched off so the runner takes
  the one-transaction-per-call path that TiKV uses (no TiKV server runs here).
- tikv: only when LOAM_TEST_TIKV_PD names a PD address (comma-separated for several).

Every backend gets a ManualClock, so tests can move time.
"""

from __future__ import annotations

import dataclasses
import os

import pytest

from loam_common.store import FaultPlan, LmdbBackend, ManualClock, MemoryBackend, SqliteBackend, Store

BACKENDS = ["lmdb", "sqlite", "memory", "memory-faults", "memory-txn-faults", "tikv"]


def fault_plan(seed: int = 1234) -> FaultPlan:
    return FaultPlan(
        seed=seed,
        conflict=0.10,
        region_read=0.02,
        region_commit=0.05,
        unknown_committed=0.08,
        unknown_not_committed=0.08,
    )


@pytest.fixture(params=BACKENDS)
async def store(request, tmp_path):
    kind = request.param
    clock = ManualClock()
    if kind == "lmdb":
        backend = LmdbBackend(tmp_path / "store.lmdb", clock=clock)
    elif kind == "sqlite":
        backend = SqliteBackend(tmp_path / "store.db", clock=clock)
    elif kind == "memory":
        backend = MemoryBackend(clock=clock)
    elif kind == "memory-faults":
        backend = MemoryBackend(clock=clock, faults=fault_plan())
    elif kind == "memory-txn-faults":
        backend = MemoryBackend(clock=clock, faults=fault_plan())
        backend.capabilities = dataclasses.replace(backend.capabilities, group_commit=False)
    else:
        pd = os.environ.get("LOAM_TEST_TIKV_PD")
        if not pd:
            pytest.skip("set LOAM_TEST_TIKV_PD=host:2379 to run the suite against TiKV")
        from loam_common.store import TikvBackend

        backend = TikvBackend([p.strip() for p in pd.split(",")], clock=clock)
    s = Store(backend)
    yield s
    await s.close()
