"""Job ids: a bulk of ids is what as many single ids would have been, in order."""

from __future__ import annotations

import os
import random

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


def test_a_forked_process_draws_other_ids(monkeypatch):
    """The random part comes from the module's own generator, seeded again in a forked
    child: a parent and its child starting a millisecond alike make different ids (and
    seeding the `random` module, as a test may, changes nothing here)."""
    random.seed(7)
    monkeypatch.setattr(ids, "_last_ms", -1)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its id of that millisecond to the parent, then out
        os.write(write, ids.new_ulid(MS).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    os.close(read)
    parent = ids.new_ulid(MS)
    assert len(child) == len(parent) == 26 and child[:10] == parent[:10]
    assert child != parent
