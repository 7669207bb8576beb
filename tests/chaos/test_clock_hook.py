"""The store clock's test hook (loam_common.store.base.OffsetFileClock): the chaos
harness jumps the server processes' clocks through it, so it must move the clock every
backend uses by the file's offset, both ways, and must do nothing unless the test flag
is set (a stray variable in production cannot move a server's clock)."""

from __future__ import annotations

import time

from loam_common.store.base import CLOCK_OFFSET_FILE_ENV, TEST_HOOKS_ENV, Clock, OffsetFileClock
from loam_common.store.runner import open_store

MINUTE = 60 * 1_000_000_000


def _wait_for_reread(clock: OffsetFileClock) -> None:
    time.sleep(clock.reread_s * 1.5)


def test_the_offset_file_moves_the_clock_forward_and_back(tmp_path):
    path = tmp_path / "offset"
    clock = OffsetFileClock(str(path))
    assert abs(clock.now_ns() - time.time_ns()) < MINUTE // 60  # no file: no offset
    path.write_text(str(3 * MINUTE))
    _wait_for_reread(clock)
    assert clock.now_ns() - time.time_ns() > 2 * MINUTE
    path.write_text(str(-2 * MINUTE))
    _wait_for_reread(clock)
    assert time.time_ns() - clock.now_ns() > MINUTE
    path.write_text("garbage")  # a half-written file keeps the last offset
    _wait_for_reread(clock)
    assert time.time_ns() - clock.now_ns() > MINUTE


async def test_a_store_opened_under_the_test_flag_reads_the_offset(tmp_path, monkeypatch):
    path = tmp_path / "offset"
    path.write_text(str(5 * MINUTE))
    monkeypatch.setenv(CLOCK_OFFSET_FILE_ENV, str(path))
    monkeypatch.setenv(TEST_HOOKS_ENV, "1")
    store = open_store(f"sqlite:///{tmp_path / 'a.db'}")
    try:
        assert isinstance(store.clock, OffsetFileClock)
        assert await store.snapshot(lambda tx: tx.now_ns()) - time.time_ns() > 4 * MINUTE
    finally:
        await store.close()


async def test_without_the_test_flag_the_offset_file_is_ignored(tmp_path, monkeypatch):
    path = tmp_path / "offset"
    path.write_text(str(5 * MINUTE))
    monkeypatch.setenv(CLOCK_OFFSET_FILE_ENV, str(path))
    monkeypatch.delenv(TEST_HOOKS_ENV, raising=False)
    store = open_store(f"lmdb://{tmp_path / 'b.lmdb'}")
    try:
        assert type(store.clock) is Clock
        assert abs(await store.snapshot(lambda tx: tx.now_ns()) - time.time_ns()) < MINUTE // 60
    finally:
        await store.close()
