"""Inline batches (`Store.transact(..., inline=True)`, LMDB without `--durable`): the
inline calls of one turn of the caller's event loop commit together on that loop; a
call that raises fails alone; while another batch runs, and for a batch that must be
retried, the calls go to the writer thread; a `--durable` store never runs them inline;
effects reach the sinks once, after the commit."""

from __future__ import annotations

import asyncio
import threading

import pytest

from loam_common.store import LmdbBackend, Store, StoreUnavailable
from loam_common.store.base import WriteConflict


def put(tx, key: bytes) -> int:
    tx.put(key, b"v")
    return threading.get_ident()


def read(tx, keys: list[bytes]) -> list[bytes | None]:
    return [tx.get(k) for k in keys]


@pytest.fixture
async def store(tmp_path):
    s = Store(LmdbBackend(tmp_path / "store.lmdb"))
    yield s
    await s.close()


def count_write_transactions(store: Store) -> list[int]:
    writes: list[int] = []
    begin = store.backend.begin

    def counted(*, pessimistic: bool = False, read_only: bool = False):
        if not read_only:
            writes.append(threading.get_ident())
        return begin(pessimistic=pessimistic, read_only=read_only)

    store.backend.begin = counted  # type: ignore[method-assign]
    return writes


async def test_the_inline_calls_of_one_turn_commit_together_on_the_loop(store):
    writes = count_write_transactions(store)
    keys = [b"k%d" % i for i in range(20)]
    threads = await asyncio.gather(*(store.transact(put, k, inline=True) for k in keys))
    assert set(threads) == {threading.get_ident()}  # ran on this loop's thread
    assert writes == [threading.get_ident()]  # one transaction for the twenty
    assert await store.snapshot(read, keys) == [b"v"] * 20


async def test_a_call_that_raises_fails_alone(store):
    def fail(tx):
        tx.put(b"bad", b"v")
        raise ValueError("no")

    results = await asyncio.gather(
        store.transact(put, b"a", inline=True), store.transact(fail, inline=True),
        store.transact(put, b"b", inline=True), return_exceptions=True,
    )  # fmt: skip
    assert isinstance(results[1], ValueError)
    assert await store.snapshot(read, [b"a", b"bad", b"b"]) == [b"v", None, b"v"]


async def test_while_the_writer_runs_a_batch_inline_calls_go_to_it(store):
    started, release = threading.Event(), threading.Event()

    def slow(tx):
        started.set()
        release.wait(10)
        tx.put(b"slow", b"v")

    queued = asyncio.ensure_future(store.transact(slow))  # on the writer thread
    assert await asyncio.to_thread(started.wait, 10)
    inline = asyncio.ensure_future(store.transact(put, b"inline", inline=True))
    await asyncio.sleep(0.05)
    assert not inline.done()  # waiting for the writer, not running beside it
    release.set()
    await queued
    assert await inline != threading.get_ident()  # the writer thread ran it
    assert await store.snapshot(read, [b"slow", b"inline"]) == [b"v", b"v"]


async def test_a_batch_to_retry_is_retried_by_the_writer(store):
    runs: list[int] = []

    def conflicts_once(tx):
        runs.append(threading.get_ident())
        if len(runs) == 1:
            raise WriteConflict("once")
        tx.put(b"retried", b"v")

    await store.transact(conflicts_once, inline=True)
    assert runs[0] == threading.get_ident() and runs[1] != threading.get_ident()
    assert len(runs) == 2
    assert await store.snapshot(read, [b"retried"]) == [b"v"]


async def test_effects_reach_the_sinks_once_after_the_commit(store):
    seen: list[list] = []

    class Sink:
        def run(self, effects):
            seen.append(list(effects))

    store.add_sink(Sink())

    def declares(tx, n):
        tx.put(b"e%d" % n, b"v")
        tx.declare(("effect", n))

    await asyncio.gather(*(store.transact(declares, n, inline=True) for n in range(3)))
    assert sorted(e for batch in seen for e in batch) == [("effect", 0), ("effect", 1), ("effect", 2)]


async def test_a_durable_store_never_runs_them_inline(tmp_path):
    store = Store(LmdbBackend(tmp_path / "durable.lmdb", durable_power_loss=True))
    try:
        assert await store.transact(put, b"d", inline=True) != threading.get_ident()
    finally:
        await store.close()


async def test_a_closed_store_refuses_them(tmp_path):
    store = Store(LmdbBackend(tmp_path / "closed.lmdb"))
    await store.close()
    with pytest.raises(StoreUnavailable):
        await store.transact(put, b"late", inline=True)


def read_where(tx, key: bytes) -> tuple[bytes | None, int]:
    return tx.get(key), threading.get_ident()


async def test_an_inline_read_runs_on_the_loop_and_sees_what_is_committed(store):
    """`Store.snapshot(..., inline=True)`: a read of a few keys on the loop's thread, not
    a worker's; what it reads is the same; without `inline` it runs on a worker thread."""
    await store.transact(put, b"r", inline=True)
    assert await store.snapshot(read_where, b"r", inline=True) == (b"v", threading.get_ident())
    value, thread = await store.snapshot(read_where, b"r")
    assert value == b"v" and thread != threading.get_ident()

    def fail(tx):
        raise LookupError("nothing here")

    with pytest.raises(LookupError):
        await store.snapshot(fail, inline=True)


async def test_a_durable_store_reads_on_a_worker_thread_as_before(tmp_path):
    store = Store(LmdbBackend(tmp_path / "durable-read.lmdb", durable_power_loss=True))
    try:
        assert (await store.snapshot(read_where, b"x", inline=True))[1] != threading.get_ident()
    finally:
        await store.close()
