"""The bounded chaos run of `make test` (the soak is `make test-chaos`): the split
deployment under producers, workers, a stalling worker, subject batches (their workers,
one of which stalls mid-run), a reconnecting Watch and a
vandal, a FIFO queue's producer and worker, and durable workflows on a Resonate SDK worker, while every process is killed -9 and
restarted, the queue core, sweeper and gateway are stopped longer than a lease, and the
server clock jumps minutes forward and back; then the checker (checker.py) over the
history and the store. Its figures are printed (`pytest -s` shows them)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from run import chaos_run

LOAD_S = float(os.environ.get("LOAM_CHAOS_LOAD_S", "25"))
SEED = int(os.environ.get("LOAM_CHAOS_SEED", "0")) or int.from_bytes(os.urandom(2))


@pytest.mark.timeout(240)
async def test_no_acknowledged_job_is_lost_or_doubled_under_process_and_clock_faults(tmp_path):
    result = await chaos_run(tmp_path / "run", LOAD_S, SEED, every_s=1.0)
    report, history = result.report, result.history
    print(f"\nchaos (seed {SEED}): {report.text(history)}")
    if report.violations:  # keep the evidence: pytest keeps only its last few temp folders
        kept = Path(tempfile.mkdtemp(prefix="loam-chaos-failed-"))
        shutil.copytree(tmp_path / "run", kept, dirs_exist_ok=True)
        raise AssertionError(
            "\n".join(report.violations[:20]) + f"\n(seed {SEED}; data, logs, history in {kept})"
        )
    assert report.acknowledged_jobs > 200 and report.completions > 200
    kinds = {k.split(":")[0] for k in history.faults}
    assert kinds == {"kill9", "stop", "clock-forward", "clock-back"} and sum(history.faults.values()) >= 9, (
        history.faults
    )
    assert report.fifo_checked > 50
    # subject batches ran, their subjects' order was checked, and runs came back (a dead worker's)
    assert report.subject_batches > 10 and report.subject_run_jobs > 50 and report.subject_run_releases > 0
    assert report.durable_workflows >= 5 and report.durable_steps >= 3 * report.durable_workflows
    # the processes ran on the jumped clock: the last writes carry the final offset (>= 1 min ahead)
    assert result.server_clock_lead_ns > 30 * 1_000_000_000, result.server_clock_lead_ns
    assert history.bad_inputs > 50
    assert report.watch_reconnects >= 5 and report.events_watched > 0
    assert all(code == 0 for code in result.exit_codes.values()), result.exit_codes
