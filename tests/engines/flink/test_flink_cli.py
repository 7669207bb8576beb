"""`loam flink` against a real server: `loam dev --auth` starts its Flink session cluster on
the first deploy (in its in-process runner), and the CLI deploys a Flink SQL aggregation,
suspends and resumes it (the counts continue), takes a savepoint, refuses bad input with
the job left running, and cancels it. Also `loam spark restart`'s Flink counterpart on the
REST facade: `/v1/engines/flink/runs` and `/v1/engines/runs/{run}/{action}`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from flinktest import COUNTS_SQL, sql_counts, sql_gaps, sql_state_disagrees, wait_counts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spark"))
from sparkdev import make_tokens, start_spark_dev  # noqa: E402  (the path above)

pytestmark = [pytest.mark.long, pytest.mark.timeout(900)]  # loam dev's own cluster: make test-engines-flink


@pytest.fixture
async def dev(tmp_path, flink_dist):
    data = tmp_path / "dev"
    data.mkdir()
    tokens = await make_tokens(data, ["alpha"])
    server = start_spark_dev(data)
    server.tokens = tokens
    yield server
    server.stop(timeout=60)


def loam(server, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOAM_", "SPARK_"))}
    cmd = [sys.executable, "-m", "loam.cli", "--url", server.url, "--token", server.tokens["alpha"], *argv]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False)


async def test_loam_flink_drives_a_sql_deployment_on_loam_devs_cluster(dev, tmp_path):
    out = dev.data / "engines" / "flink" / "cluster" / "log" / "taskmanager.out"
    sql = tmp_path / "counts.sql"
    sql.write_text(COUNTS_SQL.format(tag="clisql"))

    r = loam(dev, "--json", "flink", "deploy", "counts", "--sql-file", str(sql))
    assert r.returncode == 0, r.stderr
    deployed = json.loads(r.stdout)
    assert (deployed["state"], deployed["version"], deployed["run_state"]) == ("RUNNING", 1, "running")
    await wait_counts(out, "clisql", 0, lambda ps: len({k for k, n in ps if n >= 5}) == 3, timeout_s=120)

    r = loam(dev, "--json", "flink", "suspend", "counts")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["state"] == "SUSPENDED"
    before = dict(sql_counts(out, "clisql", 0))
    since = out.stat().st_size
    r = loam(dev, "--json", "flink", "resume", "counts")
    assert r.returncode == 0, r.stderr
    resumed = await wait_counts(out, "clisql", since, lambda ps: len({k for k, _ in ps}) == 3)
    first: dict[int, int] = {}
    for k, n in resumed:
        first.setdefault(k, n)
    assert all(first[k] == before[k] + 1 for k in before), (before, first)

    r = loam(dev, "--json", "flink", "savepoint", "counts")
    assert r.returncode == 0, r.stderr
    assert [s["reason"] for s in json.loads(r.stdout)["savepoints"]][-1] == "savepoint"

    # status: what Flink's REST API says now, beside the record
    r = loam(dev, "--json", "flink", "status", "counts")
    assert r.returncode == 0, r.stderr
    live = json.loads(r.stdout)["live"]
    assert (live["state"], live["error"]) == ("RUNNING", "") and live["checkpoints_completed"] >= 1, live
    r = loam(dev, "flink", "status", "counts")
    assert r.returncode == 0 and f"flink: job {live['job_id']} RUNNING" in r.stdout, r.stdout

    # a last-state upgrade: no savepoint taken, the counts go on from the newest checkpoint
    # (what came after it is printed again: the print sink is at-least-once)
    r = loam(dev, "--json", "flink", "upgrade", "counts", "--sql-file", str(sql), "--mode", "last-state")
    assert r.returncode == 0, r.stderr
    upgraded = json.loads(r.stdout)
    assert (upgraded["state"], upgraded["version"]) == ("RUNNING", 2)
    assert upgraded["savepoints"][-1]["reason"] == "last-state"
    since = out.stat().st_size
    later = await wait_counts(out, "clisql", since, lambda ps: len({k for k, _ in ps}) == 3)
    assert all(n > 5 for _, n in later), later[:6]  # not from zero
    assert sql_gaps(out, "clisql") == []  # through suspend, resume and the upgrade: no update lost
    assert sql_state_disagrees(out, "clisql") == []

    # bad input: a clear error, exit 1, and the job keeps running
    r = loam(dev, "flink", "resume", "counts")
    assert r.returncode == 1 and "cannot resume 'counts': it is RUNNING" in r.stderr, r.stderr
    r = loam(dev, "flink", "rollback", "counts", "--savepoint", "file:/nowhere")
    assert r.returncode == 1 and "is not a savepoint of 'counts'" in r.stderr, r.stderr
    r = loam(dev, "flink", "deploy", "counts", "--sql", "SELECT 1")
    assert r.returncode == 1 and "already_exists" in r.stderr, r.stderr
    r = loam(dev, "flink", "upgrade", "nobody", "--sql", "SELECT 1")
    assert r.returncode == 1 and "no Flink deployment 'nobody'" in r.stderr, r.stderr
    listed = json.loads(loam(dev, "--json", "flink", "ls").stdout)
    assert [(d["deployment"], d["state"]) for d in listed] == [("counts", "RUNNING")]

    # the REST facade: the run, its status and an action
    headers = {"authorization": f"Bearer {dev.tokens['alpha']}"}
    async with httpx.AsyncClient(base_url=dev.url, headers=headers, timeout=60) as http:
        run = (await http.get("/v1/engines/runs")).json()["runs"][0]
        assert run["kind"] == "flink" and run["flink"]["deployment"] == "counts"
        r = await http.post(f"/v1/engines/runs/{run['id']}/rescale")
        assert r.status_code == 422 or r.json()["code"] == "invalid_argument", r.text
        r = await http.post(f"/v1/engines/runs/{run['id']}/status")
        assert r.status_code == 200 and r.json()["flink"]["state"] == "RUNNING", r.text
        assert r.json()["flink"]["status_requested"] >= 2  # answered on the run as flink.live

    r = loam(dev, "--json", "flink", "cancel", "counts")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["state"] == "CANCELLED" and json.loads(r.stdout)["run_state"] == "canceled"
