"""A full disk under `loam dev`: its data directory on a 20 MB tmpfs, filled up while
producers write small (inline) and large (blob) payloads. Every refused write is a clean,
retryable `unavailable` (never a 500, never a crash), reads keep working, nothing
acknowledged is lost, and writes succeed again once space returns; the SQLite file
passes its integrity check afterwards."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))
from devserver import start_dev_server  # noqa: E402

SIZES = {"inline": 4_000, "blob": 40_000}  # below and above the 16 KiB inline limit


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(mount: Path, leave: int) -> Path:
    """A file taking all but `leave` bytes of the disk."""
    filler = mount / "filler"
    free = shutil.disk_usage(mount).free
    with filler.open("wb") as f:
        f.truncate(0)
        chunk = b"\0" * (1 << 20)
        left = max(free - leave, 0)
        while left > 0:
            f.write(chunk[: min(left, len(chunk))])
            left -= min(left, len(chunk))
    return filler


@pytest.mark.timeout(180)
def test_a_full_disk_refuses_writes_cleanly_and_recovers(small_disk):
    server = start_dev_server(small_disk / "data")
    acked: list[str] = []
    refusals: dict[str, int] = {}
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            assert http.post("/v1/queues/q/jobs", json={"name": "t"}).status_code == 200
            filler = fill(small_disk, leave=1_500_000)
            for i in range(600):
                kind = "blob" if i % 2 else "inline"
                r = http.post("/v1/queues/q/jobs", json={"name": kind, "data": "x" * SIZES[kind]})
                if r.status_code == 200:
                    acked.append(r.json()["job"])
                    continue
                body = r.json()  # always the JSON error shape
                assert r.status_code == 503 and body["code"] == "unavailable", (kind, r.status_code, r.text)
                refusals[kind] = refusals.get(kind, 0) + 1
                if len(refusals) == 2 and sum(refusals.values()) >= 6:
                    break
            assert refusals, "the disk never filled up"
            assert http.get("/healthz").status_code == 200
            assert http.get("/v1/queues/q").status_code == 200  # reads keep working

            filler.unlink()  # space returns
            for kind in SIZES:
                r = http.post("/v1/queues/q/jobs", json={"name": kind, "data": "y" * SIZES[kind]})
                assert r.status_code == 200, r.text
                acked.append(r.json()["job"])
            stored = set()
            token = ""
            while True:
                page = http.get("/v1/queues/q/jobs", params={"page_size": 1000, "page_token": token}).json()
                stored |= {j["id"] for j in page["jobs"]}
                token = page["next_page_token"]
                if not token:
                    break
            assert set(acked) <= stored, f"{len(set(acked) - stored)} acknowledged jobs missing"
    finally:
        assert server.stop() == 0
    print(f"\nfull disk: {len(acked)} jobs acknowledged, refusals by payload kind {refusals}")
    db = sqlite3.connect(small_disk / "data" / "loam.db")
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        db.close()
