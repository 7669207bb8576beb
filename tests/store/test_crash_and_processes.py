"""The embedded stores (LMDB, SQLite) across processes: acknowledged writes survive
SIGKILL, and two OS processes sharing one store through `transact` lose no updates."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from loam_common.store import LmdbBackend, SqliteBackend

EMBEDDED = {"lmdb": (LmdbBackend, "store.lmdb"), "sqlite": (SqliteBackend, "store.db")}


@pytest.fixture(params=sorted(EMBEDDED))
def embedded(request, tmp_path):
    """(url, path, backend class) of a fresh embedded store."""
    cls, name = EMBEDDED[request.param]
    path = str(tmp_path / name)
    return f"{request.param}:///{path}", path, cls


WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from loam_common.store import open_store

    def put(tx, key):
        tx.put(key, b"acked")

    async def main(url):
        store = open_store(url)
        next_id = 0

        async def writer():
            nonlocal next_id
            while True:
                i, next_id = next_id, next_id + 1
                await store.transact(put, b"k/%08d" % i)
                sys.stdout.write(f"ack {i}\\n")
                sys.stdout.flush()

        await asyncio.gather(*(writer() for _ in range(16)))

    asyncio.run(main(sys.argv[1]))
    """
)

INCREMENTER = textwrap.dedent(
    """
    import asyncio, sys
    from loam_common.store import open_store

    def incr(tx):
        v = tx.get(b"counter")
        tx.put(b"counter", ((int.from_bytes(v, "big") if v else 0) + 1).to_bytes(8, "big"))

    async def main(url, n, concurrency):
        async with open_store(url) as store:
            print("ready", flush=True)
            sys.stdin.readline()  # start together

            async def worker(count):
                for _ in range(count):
                    await store.transact(incr)

            per = n // concurrency
            await asyncio.gather(*(worker(per) for _ in range(concurrency)))
        print("done", per * concurrency, flush=True)

    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
    """
)


def spawn(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_acknowledged_writes_survive_sigkill(embedded):
    url, path, backend_class = embedded
    child = spawn(WRITER, url)
    acked: list[int] = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            acked.append(int(line.split()[1]))
            if len(acked) == 2000:
                child.send_signal(signal.SIGKILL)  # mid-stream: 16 writers are in flight
                break
        else:
            raise AssertionError(f"writer exited early: {child.communicate()[1]}")
        rest, _ = child.communicate(timeout=30)  # acks already in the pipe count too
        acked += [int(line.split()[1]) for line in rest.splitlines()]
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL

    backend = backend_class(path)
    try:
        tx = backend.begin(read_only=True)
        stored = {k for k, _ in tx.scan(b"k/", b"k0")}
        tx.rollback()
    finally:
        backend.close()
    missing = [i for i in acked if b"k/%08d" % i not in stored]
    assert not missing, f"{len(missing)} acknowledged writes lost, e.g. {missing[:5]}"


def test_two_processes_increment_one_counter(embedded):
    url, path, backend_class = embedded
    backend_class(path).close()  # create the store once, before the race
    children = [spawn(INCREMENTER, url, "1000", "20") for _ in range(2)]
    try:
        for child in children:
            assert child.stdout.readline().strip() == "ready"  # type: ignore[union-attr]
        for child in children:
            child.stdin.write("go\n")  # type: ignore[union-attr]
            child.stdin.flush()  # type: ignore[union-attr]
        for child in children:
            out, err = child.communicate(timeout=60)
            assert child.returncode == 0, err
            assert out.split() == ["done", "1000"]
    finally:
        for child in children:
            child.kill()
            child.wait()

    backend = backend_class(path)
    try:
        tx = backend.begin(read_only=True)
        assert tx.get(b"counter") == (2000).to_bytes(8, "big")
        tx.rollback()
    finally:
        backend.close()


def test_sqlite_pragmas(tmp_path):
    for durable, expected in ((False, 1), (True, 2)):  # synchronous: 1 = NORMAL, 2 = FULL
        backend = SqliteBackend(tmp_path / f"p{durable}.db", durable_power_loss=durable)
        try:
            for read_only in (False, True):
                tx = backend.begin(read_only=read_only)
                conn = tx._conn  # type: ignore[attr-defined]
                assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
                assert conn.execute("PRAGMA synchronous").fetchone()[0] == expected
                assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 30_000
                tx.rollback()
        finally:
            backend.close()
