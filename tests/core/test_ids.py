"""Job ids: a bulk of ids is what as many single ids would have been, in order."""

from __future__ import annotations

from loam_common import ids

MS = 1_700_000_000_000


def test_a_bulk_of_ids_matches_single_ids_across_a_low_digit_rollover(monkeypatch):
    # Just below a 20-bit boundary: the bulk's shared prefix must change mid-run.
    monkeypatch.setattr(ids, "_last_ms", MS)
    monkeypatch.setattr(ids, "_last_rand", (7 << 20) - 3)
    bulk = ids.new_ulids(6, MS)
    monkeypatch.setattr(ids, "_last_rand", (7 << 20) - 3)
    singles = [ids.new_ulid(MS) for _ in range(6)]
    assert bulk == singles
    assert bulk == sorted(bulk) and len(set(bulk)) == 6
    assert {ids.ulid_time_ns(u) for u in bulk} == {MS * 1_000_000}


def test_ids_after_a_bulk_sort_after_it():
    bulk = ids.new_ulids(1000)
    after = ids.new_ulid()
    assert bulk == sorted(bulk) and len(set(bulk)) == 1000
    assert after > bulk[-1]
