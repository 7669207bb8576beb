"""What only the LMDB backend has: its settings, a map that grows instead of filling up
(in this process and when another process grew it), one environment per directory per
process, and the flush that `--durable` shares between concurrent commits."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import pytest

from loam_common.store import LmdbBackend, Store, StoreUnavailable, open_store

SMALL_MAP = 256 * 1024  # bytes: a few hundred 1 KiB values fill it


def put_many(tx, prefix, n, size):
    for i in range(n):
        tx.put(prefix + b"%06d" % i, bytes([i % 251]) * size)


def count(tx, prefix):
    return len(tx.scan(prefix, prefix[:-1] + bytes([prefix[-1] + 1])))


@pytest.mark.parametrize("durable", [False, True])
def test_settings_keep_the_store_whole_on_a_crash(tmp_path, durable):
    backend = LmdbBackend(tmp_path / "s.lmdb", durable_power_loss=durable)
    try:
        flags = backend._shared.env.flags()
        assert flags["writemap"] is False  # a wild write cannot reach the map
        assert flags["sync"] is durable  # durable: fsync inside every commit
        assert flags["metasync"] is True
        assert (backend._shared.flusher is None) is durable  # otherwise a flush thread bounds the loss
    finally:
        backend.close()


async def test_a_full_map_grows_and_the_batch_commits(tmp_path):
    backend = LmdbBackend(tmp_path / "s.lmdb", map_size=SMALL_MAP)
    async with Store(backend) as store:
        # 40 concurrent transitions of 64 KiB each: one group commit overflows the map.
        await asyncio.gather(*(store.transact(put_many, b"g%02d/" % i, 64, 1024) for i in range(40)))
        assert backend._map_size() > SMALL_MAP
        counts = await asyncio.gather(*(store.snapshot(count, b"g%02d/" % i) for i in range(40)))
        assert counts == [64] * 40


GROWER = textwrap.dedent(
    """
    import asyncio, sys
    from loam_common.store import LmdbBackend, Store

    def put_many(tx, n):
        for i in range(n):
            tx.put(b"child/%06d" % i, b"x" * 1024)

    async def main(path):
        async with Store(LmdbBackend(path, map_size=256 * 1024)) as store:
            for _ in range(10):
                await store.transact(put_many, 200)  # overwrites: ~2 MB, grown from 256 KiB
            await store.transact(put_many, 2000)
        print("done", flush=True)

    asyncio.run(main(sys.argv[1]))
    """
)


async def test_a_map_grown_by_another_process_is_adopted(tmp_path):
    path = str(tmp_path / "s.lmdb")
    backend = LmdbBackend(path, map_size=SMALL_MAP)
    async with Store(backend) as store:
        await store.transact(put_many, b"parent/", 10, 100)
        out = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-c", GROWER, path], capture_output=True, text=True, timeout=120
        )
        assert out.stdout.split() == ["done"], out.stderr
        # This process still maps 256 KiB; the file holds more. Reads and writes go on.
        assert await store.snapshot(count, b"child/") == 2000
        await store.transact(put_many, b"parent/", 500, 1024)
        assert await store.snapshot(count, b"parent/") == 500
        assert backend._map_size() > SMALL_MAP


async def test_one_environment_per_directory_in_a_process(tmp_path):
    url = f"lmdb:///{tmp_path}/s.lmdb"
    a, b = open_store(url), open_store(url)
    try:
        assert a.backend._shared is b.backend._shared
        await a.transact(put_many, b"k/", 3, 10)
        await b.close()  # the other store's environment stays open
        assert await a.snapshot(count, b"k/") == 3
        with pytest.raises(StoreUnavailable, match="durable_power_loss=False"):
            LmdbBackend(tmp_path / "s.lmdb", durable_power_loss=True)
    finally:
        await a.close()
    # The last close closed the environment: opening it again works, durable or not.
    LmdbBackend(tmp_path / "s.lmdb", durable_power_loss=True).close()


async def test_durable_commits_share_a_flush(tmp_path, monkeypatch):
    backend = LmdbBackend(tmp_path / "s.lmdb", durable_power_loss=True)
    commits = 0
    begin = backend.begin

    def counted(**kw):
        nonlocal commits
        if not kw.get("read_only"):
            commits += 1
        return begin(**kw)

    monkeypatch.setattr(backend, "begin", counted)
    async with Store(backend) as store:
        await asyncio.gather(*(store.transact(put_many, b"d%03d/" % i, 1, 10) for i in range(200)))
        assert sum(await asyncio.gather(*(store.snapshot(count, b"d%03d/" % i) for i in range(200)))) == 200
    # Each commit fsyncs; 200 concurrent callers shared far fewer than 200 of them.
    assert commits < 50, commits


def test_lmdb_errors_are_store_errors(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(StoreUnavailable, match="cannot open"):
        LmdbBackend(tmp_path / "file" / "s.lmdb")


def test_a_data_directory_means_its_store(tmp_path):
    from loam_common.store.runner import store_url_of

    new, old, env = tmp_path / "new", tmp_path / "old", tmp_path / "env"
    assert store_url_of(new) == f"lmdb://{new}/loam.lmdb"  # a new directory gets LMDB
    old.mkdir()
    (old / "loam.db").write_bytes(b"")
    assert store_url_of(old) == f"sqlite://{old}/loam.db"  # made before LMDB: keeps its data
    (old / "loam.lmdb").mkdir()
    assert store_url_of(old) == f"lmdb://{old}/loam.lmdb"
    LmdbBackend(env).close()
    assert store_url_of(env) == f"lmdb://{env}"  # an environment itself
    assert store_url_of(tmp_path / "x.db") == f"sqlite://{tmp_path}/x.db"
    assert store_url_of("memory://") == "memory://"
    assert store_url_of("sqlite:rel.db") == "sqlite:rel.db"
