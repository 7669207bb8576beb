"""The warm Sail spare: the namespace's server comes from a launcher that imported pysail
and answered a first request before any namespace asked, started with that namespace's
own settings (working directory, spill directory, packages), and nothing of it outlives
the pool."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from loam_engines.spark.sail import SailPool, SailSettings

CONFIG = "/spark.connect.SparkConnectService/Config"


def config_request(session: str) -> bytes:
    def field(number: int, payload: bytes) -> bytes:
        return bytes([(number << 3) | 2, len(payload)]) + payload  # all fields here are < 128 bytes

    get = field(2, field(1, b"spark.sql.session.timeZone"))
    return field(1, session.encode()) + field(2, field(1, b"t")) + field(3, get)


async def answer(pool: SailPool, ns: str, session: str) -> int:
    backend = await pool.acquire(ns, session)
    try:
        reply = await backend.channel.unary_unary(CONFIG)(config_request(session), timeout=60)
        assert reply  # a ConfigResponse: the server answered
        return backend.pid
    finally:
        pool.release(backend, session)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] == "Z"


async def test_a_second_namespace_starts_from_the_warm_spare_with_its_own_settings(spark_python, tmp_path):
    deps = tmp_path / "pydeps"
    pool = SailPool(SailSettings(python=spark_python, work_dir=tmp_path / "sail", pid_dir=tmp_path / "pids",
                                 spill_dir=tmp_path / "spill", pydeps=lambda ns: deps / ns, spares=1))  # fmt: skip
    pids = []
    try:
        pids.append(await answer(pool, "first", "00000000-0000-4000-8000-000000000001"))
        assert (pool.starts, pool.spare_claims) == (1, 0)  # no spare before Spark was used
        pids.append(await answer(pool, "second", "00000000-0000-4000-8000-000000000002"))
        assert (pool.starts, pool.spare_claims) == (2, 1)
        assert pids[0] != pids[1]
        # the claimed server runs where the namespace's does
        assert Path(f"/proc/{pids[1]}/cwd").resolve() == (tmp_path / "sail" / "second").resolve()
        assert (tmp_path / "spill" / "second").is_dir()
        spare = pool._spare  # another one is made after the claim
        assert spare is not None
        child, _, _ = await asyncio.wait_for(spare, 60)
        pids.append(child.pid)
    finally:
        await pool.close()
    for pid in pids:
        assert await asyncio.to_thread(lambda p=pid: _wait_gone(p)), f"pid {pid} outlived the pool"
    assert not list((tmp_path / "pids").glob("*.pid"))


def _wait_gone(pid: int, timeout_s: float = 20.0) -> bool:
    import time

    deadline = time.monotonic() + timeout_s
    while not gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)  # nothing tells a non-parent that a process exited
    return True
