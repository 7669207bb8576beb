"""Job ids: a bulk of ids is what as many single ids would have been, in order."""

from __future__ import annotations

import subprocess
import sys

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


def test_a_forked_process_draws_other_ids():
    """The random part comes from the module's own generator, seeded again in a forked
    child: a parent and its child starting a millisecond alike make different ids (and
    seeding the `random` module, as a test may, changes nothing here). In a fresh
    interpreter: this one has threads, and a fork of it could inherit a held lock."""
    code = (
        "import os, random\n"
        "from loam_common import ids\n"
        "random.seed(7)\n"
        "read, write = os.pipe()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        f"    os.write(write, ids.new_ulid({MS}).encode())\n"
        "    os._exit(0)\n"
        "os.close(write)\n"
        "os.waitpid(pid, 0)\n"
        f"print(os.read(read, 64).decode(), ids.new_ulid({MS}))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    child, parent = run.stdout.split()
    assert len(child) == len(parent) == 26 and child[:10] == parent[:10]
    assert child != parent
