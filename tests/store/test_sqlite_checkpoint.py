"""SQLite checkpoints run on the backend's own thread: no commit copies the WAL into the
database file, yet the file receives every committed page soon after, and close() ends
the thread."""

from __future__ import annotations

import os
import sqlite3
import time

from loam_common.store import SqliteBackend
from loam_common.store.sqlite import _Checkpointer


def _write_pages(be: SqliteBackend, commits: int, start: int = 0) -> None:
    for c in range(start, start + commits):
        tx = be.begin()
        for i in range(50):
            tx.put(b"k/%04d/%04d" % (c, i), os.urandom(4000))  # one page each, about
        tx.commit()


def _wait_for(cond, timeout: float = 10.0) -> bool:
    give_up = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > give_up:
            return False
        time.sleep(0.02)
    return True


def test_commits_leave_checkpoints_to_the_thread(tmp_path):
    path = tmp_path / "s.db"
    be = SqliteBackend(path)
    be._checkpointer.stop()  # no checkpoint thread: what do commits alone do?
    size_before = path.stat().st_size
    _write_pages(be, 60)  # ~3,000 WAL pages: SQLite's own default threshold is 1,000
    assert path.stat().st_size == size_before  # no commit checkpointed
    assert (tmp_path / "s.db-wal").stat().st_size > 3000 * 4000

    be._checkpointer = _Checkpointer(be)  # the thread is back: the next commit wakes it
    _write_pages(be, 1, start=60)
    assert _wait_for(lambda: path.stat().st_size > 3000 * 4000)
    be.close()

    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM kv").fetchone()[0] == 61 * 50
    conn.close()


def test_an_idle_backend_is_not_checkpointed_and_closes_at_once(tmp_path):
    be = SqliteBackend(tmp_path / "s.db")
    _write_pages(be, 1)
    thread = be._checkpointer._thread
    assert _wait_for(lambda: not be._checkpointer._due.is_set())  # taken by the thread
    time.sleep(0.3)
    assert not be._checkpointer._due.is_set()  # nothing committed since: nothing due
    t0 = time.monotonic()
    be.close()
    assert time.monotonic() - t0 < 1.0
    assert not thread.is_alive()
