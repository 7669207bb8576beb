"""Keeps bench/harness.py working: its `--smoke` mode (Loam only, a few hundred jobs, no
installs) must run and write the results files in the documented shape. It measures
nothing worth keeping; the figures are only checked to be positive numbers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "bench" / "harness.py"
EXIT_NO_LOAM = 3  # bench/harness.py: `loam dev` did not start
FIGURES = ["enqueue_per_s", "bulk_enqueue_per_s", "drain_per_s", "latency_p50_ms", "latency_p99_ms"]


@pytest.mark.timeout(180)
def test_harness_smoke_writes_results(tmp_path: Path) -> None:
    try:
        proc = subprocess.run([sys.executable, str(HARNESS), "--smoke", "--out", str(tmp_path)], check=False,
                              capture_output=True, text=True, timeout=150, cwd=ROOT)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("the smoke run took more than 150 s")
    if proc.returncode == EXIT_NO_LOAM:
        pytest.skip(f"loam dev could not start here: {proc.stderr[-500:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]

    report = json.loads((tmp_path / "latest.json").read_text())
    for key in ("date", "machine", "versions", "commands", "settings", "systems", "ratios", "growth"):
        assert key in report, key
    assert report["settings"]["smoke"] is True
    assert len(report["machine"]["load_avg_start"]) == 3
    loam = report["systems"]["loam"]
    assert loam["status"] == "ok", loam
    for f in FIGURES:
        assert isinstance(loam[f], (int, float)) and loam[f] > 0, (f, loam[f])
        st = loam["stats"][f]
        assert st["min"] <= st["median"] <= st["max"]
    assert loam["latency_p50_ms"] <= loam["latency_p99_ms"]
    level = report["growth"]["loam"]["levels"]["1000"]
    assert level["lease_p50_ms"]["median"] > 0 and level["enqueue_p50_ms"]["median"] > 0
    assert "loam" in report["commands"]["systems"]
    md = (tmp_path / "latest.md").read_text()
    assert "| loam |" in md
