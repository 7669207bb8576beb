"""What only the memory backend must prove: its own conflict detection and versioning.

SQLite gets serial writers from its file lock and TiKV gets conflicts from its engine; the
memory backend implements optimistic MVCC itself, so its rules are checked directly here,
with interleavings the runner would never produce on purpose.
"""

from __future__ import annotations

import pytest

from loam_common.store import Fault, FaultPlan, MemoryBackend, WriteConflict


def committed(backend: MemoryBackend, items: dict[bytes, bytes | None]) -> None:
    tx = backend.begin()
    for k, v in items.items():
        tx.put(k, v) if v is not None else tx.delete(k)
    tx.commit()


@pytest.fixture
def backend() -> MemoryBackend:
    b = MemoryBackend()
    committed(b, {b"a": b"1", b"c": b"3"})
    return b


def test_read_then_written_by_another_conflicts(backend):
    t1, t2 = backend.begin(), backend.begin()
    t1.put(b"a", t1.get(b"a") + b"x")
    t2.put(b"a", t2.get(b"a") + b"y")
    t1.commit()
    with pytest.raises(WriteConflict):
        t2.commit()
    assert backend.begin(read_only=True).get(b"a") == b"1x"


def test_blind_writes_to_one_key_conflict(backend):
    t1, t2 = backend.begin(), backend.begin()
    t1.put(b"k", b"1")
    t2.put(b"k", b"2")
    t2.commit()
    with pytest.raises(WriteConflict):
        t1.commit()


def test_disjoint_transactions_both_commit(backend):
    t1, t2 = backend.begin(), backend.begin()
    t1.get(b"a")
    t1.put(b"b", b"from t1")
    t2.put(b"d", b"from t2")
    t2.commit()
    t1.commit()


def test_lock_for_update_counts_as_a_read(backend):
    t1, t2 = backend.begin(), backend.begin()
    t1.lock_for_update([b"c"])
    t1.put(b"z", b"1")
    t2.put(b"c", b"changed")
    t2.commit()
    with pytest.raises(WriteConflict):
        t1.commit()


@pytest.mark.parametrize("change", [{b"b": b"inserted"}, {b"c": None}, {b"c": b"updated"}])
def test_changes_inside_a_scanned_range_conflict(backend, change):
    t1 = backend.begin()
    t1.scan(b"a", b"d")
    t1.put(b"out", b"1")
    committed(backend, change)
    with pytest.raises(WriteConflict):
        t1.commit()


def test_limited_scans_only_cover_what_they_returned(backend):
    t1 = backend.begin()
    assert t1.scan(b"a", b"z", limit=1) == [(b"a", b"1")]
    assert t1.scan(b"a", b"z", limit=1, reverse=True) == [(b"c", b"3")]
    t1.put(b"out", b"1")
    committed(backend, {b"b": b"between the two covered ends"})
    t1.commit()

    t2 = backend.begin()
    t2.scan(b"a", b"z", limit=1)
    t2.put(b"out", b"2")
    committed(backend, {b"a": b"changed"})
    with pytest.raises(WriteConflict):
        t2.commit()


def test_a_transaction_without_writes_never_conflicts(backend):
    t1 = backend.begin()
    t1.get(b"a")
    committed(backend, {b"a": b"changed"})
    t1.commit()


def test_snapshots_pin_old_versions_until_they_end(backend):
    reader = backend.begin(read_only=True)
    for i in range(5):
        committed(backend, {b"a": b"v%d" % i, b"c": None})
    assert reader.get(b"a") == b"1"
    assert reader.scan(b"a", b"z") == [(b"a", b"1"), (b"c", b"3")]
    reader.rollback()
    committed(backend, {b"a": b"last", b"c": None})
    assert len(backend._versions[b"a"]) == 1  # nobody can read the old ones any more
    assert b"c" not in backend._versions and b"c" not in backend._keys


def test_rollback_to_restores_buffered_values(backend):
    tx = backend.begin()
    tx.put(b"a", b"first")
    sp = tx.savepoint()
    tx.put(b"a", b"second")
    tx.delete(b"c")
    tx.put(b"new", b"x")
    tx.rollback_to(sp)
    assert (tx.get(b"a"), tx.get(b"c"), tx.get(b"new")) == (b"first", b"3", None)
    tx.commit()
    assert backend.begin(read_only=True).scan(b"", b"\xff") == [(b"a", b"first"), (b"c", b"3")]


def test_fault_plans_are_deterministic_per_seed():
    def draws(seed):
        plan = FaultPlan(seed=seed, conflict=0.2, region_commit=0.2, unknown_committed=0.2, region_read=0.3)
        return [(plan.commit_fault(), plan.read_fault()) for _ in range(50)]

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)
    assert {c for c, _ in draws(7)} >= {None, Fault.CONFLICT, Fault.REGION}


def test_fault_plan_rejects_impossible_probabilities():
    with pytest.raises(ValueError):
        FaultPlan(conflict=0.6, unknown_committed=0.6)
    with pytest.raises(ValueError):
        FaultPlan().schedule_reads(Fault.CONFLICT)
