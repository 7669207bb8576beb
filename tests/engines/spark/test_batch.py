"""SparkBatch runs: a PySpark script submitted to Loam runs as a child process against
the namespace's Sail, with its output in the run's log, its exit status recorded,
attempts and a wall-clock limit by policy, cancellation, schedules, and a runner that
dies by `kill -9` leaving neither a stale state nor an orphan process."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from sparkdev import make_tokens, start_spark_dev

import loam
from loam_common.gen.loam.jobs.v1 import engines_pb2 as E

SPARK_SCRIPT = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()  # unmodified: SPARK_REMOTE names the endpoint
answer = spark.sql("select 40 + 2 as a").collect()[0].a
print(f"answer {answer} args {sys.argv[1:]}")
print("time zone", spark.conf.get("spark.sql.session.timeZone"))
print("to stderr", file=sys.stderr)
spark.stop()
"""

FLAKY = """
import os, sys
marker = sys.argv[1]
if not os.path.exists(marker):
    open(marker, "w").close()
    print("first attempt fails")
    sys.exit(3)
print("second attempt works")
"""


def client(server, ns="alpha") -> loam.Client:
    return loam.Client(server.url, token=server.tokens[ns])


async def lines_of(c: loam.Client, run: str) -> list[tuple[str, str]]:
    lines, _ = await c.engine_run_logs(run)
    return [(line.stream, line.line) for line in lines]


async def test_a_batch_runs_on_the_namespace_endpoint_with_its_output_and_exit_status(spark_dev):
    async with client(spark_dev) as c:
        run = await c.submit_spark(SPARK_SCRIPT.encode(), entrypoint="answer.py", args=["x", "y z"],
                                   conf={"spark.sql.session.timeZone": "Asia/Tokyo"})  # fmt: skip
        assert run.state == E.ENGINE_RUN_STATE_QUEUED
        done = await asyncio.wait_for(c.wait_engine_run(run.id), 90)
        lines = await lines_of(c, run.id)
    assert done.state == E.ENGINE_RUN_STATE_SUCCEEDED, lines
    assert done.exit_code == 0
    assert [a.exit_code for a in done.attempts] == [0]
    assert done.attempts[0].started_ns <= done.attempts[0].finished_ns
    assert ("stdout", "answer 42 args ['x', 'y z']") in lines
    assert ("stderr", "to stderr") in lines
    assert ("stdout", "time zone Asia/Tokyo") in lines  # the run's conf, on an unmodified session


async def test_a_failed_attempt_is_retried_by_policy_and_exhausted_attempts_fail(spark_dev, tmp_path):
    async with client(spark_dev) as c:
        retried = await c.submit_spark(
            FLAKY.encode(), entrypoint="flaky.py", args=[str(tmp_path / "m")], attempts=2
        )
        failing = await c.submit_spark(
            b"import sys; print('no'); sys.exit(4)", entrypoint="fail.py", attempts=2
        )
        retried = await asyncio.wait_for(c.wait_engine_run(retried.id), 60)
        failing = await asyncio.wait_for(c.wait_engine_run(failing.id), 60)
    assert retried.state == E.ENGINE_RUN_STATE_SUCCEEDED
    assert [a.exit_code for a in retried.attempts] == [3, 0]
    assert retried.attempts[0].error == "exited with status 3"
    assert failing.state == E.ENGINE_RUN_STATE_FAILED
    assert [a.exit_code for a in failing.attempts] == [4, 4]
    assert failing.error == "exited with status 4"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "State:\tZ" not in f.read()
    except FileNotFoundError:
        return False


async def _wait_line(c: loam.Client, run: str, text: str, limit: float = 30) -> None:
    async def follow() -> None:
        async for line in c.follow_engine_run(run):
            if text in line.line:
                return
        raise AssertionError(f"the run ended before printing {text!r}")

    await asyncio.wait_for(follow(), limit)


SLEEPER = """
import time
print("started", flush=True)
time.sleep(120)
"""


async def test_an_attempt_over_its_time_limit_is_stopped_and_fails(spark_dev):
    async with client(spark_dev) as c:
        run = await c.submit_spark(SLEEPER.encode(), entrypoint="sleep.py", timeout=2)
        done = await asyncio.wait_for(c.wait_engine_run(run.id), 60)
    assert done.state == E.ENGINE_RUN_STATE_FAILED
    assert done.error == "timed out after 2s"
    assert not _alive(done.attempts[0].pid)


async def test_cancel_stops_a_running_run_and_its_process(spark_dev):
    async with client(spark_dev) as c:
        run = await c.submit_spark(SLEEPER.encode(), entrypoint="sleep.py", attempts=3)
        await _wait_line(c, run.id, "started")
        pid = (await c.engine_run(run.id)).attempts[-1].pid
        assert _alive(pid)
        await c.cancel_engine_run(run.id)
        done = await asyncio.wait_for(c.wait_engine_run(run.id), 30)
        assert done.state == E.ENGINE_RUN_STATE_CANCELED
        assert len(done.attempts) == 1  # not retried
        assert not _alive(pid)
        with pytest.raises(loam.errors.JobsError) as again:
            await c.cancel_engine_run(run.id)
        assert again.value.code == "failed_precondition"


async def test_a_schedule_fires_batch_runs(spark_dev):
    async with client(spark_dev, "beta") as c:
        schedule = await c.submit_spark(
            b"print('tick')", entrypoint="tick.py", schedule="nightly-ish", every=1
        )
        assert schedule == "nightly-ish"
        deadline = time.monotonic() + 30
        finished = []
        while not finished and time.monotonic() < deadline:
            runs = await c.engine_runs()
            finished = [r for r in runs if r.state == E.ENGINE_RUN_STATE_SUCCEEDED]
            if not finished:
                await asyncio.sleep(0.5)
        await c.unschedule("nightly-ish")
        assert finished, "no scheduled run finished"
        assert finished[0].schedule == "nightly-ish"
        assert ("stdout", "tick") in await lines_of(c, finished[0].id)


async def test_a_finished_run_restarts_as_a_new_run_with_its_script_and_args(spark_dev):
    async with client(spark_dev, "delta") as c:
        script = b"import sys\nprint('run with', *sys.argv[1:])\nsys.exit(int(sys.argv[-1]))\n"
        first = await c.submit_spark(script, entrypoint="again.py", args=["a", "4"])
        with pytest.raises(loam.errors.InvalidState):  # only a finished run restarts
            await c.restart_engine_run(first.id)
        first = await asyncio.wait_for(c.wait_engine_run(first.id), 90)
        assert (first.state, first.exit_code) == (E.ENGINE_RUN_STATE_FAILED, 4)
        second = await c.restart_engine_run(first.id)
        assert second.id != first.id and second.restarted_from == first.id
        second = await asyncio.wait_for(c.wait_engine_run(second.id), 90)
        assert (second.state, second.exit_code) == (E.ENGINE_RUN_STATE_FAILED, 4)
        assert ("stdout", "run with a 4") in await lines_of(c, second.id)
        assert (
            await c.engine_run(first.id)
        ).state == E.ENGINE_RUN_STATE_FAILED  # the old run stays as it ended
        with pytest.raises(loam.errors.InvalidArgument):
            await c.flink_action(first.id, "savepoint")  # a Flink action on a Spark run


async def test_a_runs_log_streams_as_server_sent_events_until_it_ends(spark_dev):
    import json

    import httpx

    script = b"import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(0.3)\n"
    async with client(spark_dev, "delta") as c:
        run = await c.submit_spark(script, entrypoint="ticks.py")
    headers = {"authorization": f"Bearer {spark_dev.tokens['delta']}"}
    events: list[tuple[str, str, str]] = []
    async with httpx.AsyncClient(base_url=spark_dev.url, headers=headers, timeout=90) as http:
        async with http.stream("GET", f"/v1/engines/runs/{run.id}/logs:stream") as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            event = ident = ""
            async for line in r.aiter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("id: "):
                    ident = line[4:]
                elif line.startswith("data: "):
                    events.append((event, ident, line[6:]))
        missing = await http.get("/v1/engines/runs/01NOSUCHRUN0000000000000000/logs:stream")
    stdout = [
        json.loads(d)["line"] for e, _, d in events if e == "line" and json.loads(d)["stream"] == "stdout"
    ]
    assert stdout == ["tick 0", "tick 1", "tick 2"], events
    assert events[-1][0] == "end"
    assert [int(i) for e, i, _ in events if e == "line"] == sorted(
        int(i) for e, i, _ in events if e == "line"
    )
    assert missing.status_code == 404


async def test_bad_submissions_are_refused_and_change_nothing(spark_dev):
    async with client(spark_dev, "gamma") as c:
        before = await c.engine_runs()
        with pytest.raises(loam.errors.InvalidArgument) as bad:
            await c.submit_spark(b"print(1)", entrypoint="../evil.py")
        assert "entrypoint" in bad.value.field
        with pytest.raises(loam.errors.InvalidArgument):
            await c.submit_spark(b"", entrypoint="empty.py")
        with pytest.raises(loam.errors.NotFound):
            await c.engine_run("01ARZ3NDEKTSV4RRFFQ69G5FAV")
        assert await c.engine_runs() == before


async def test_a_runner_killed_mid_run_leaves_no_orphan_and_the_run_recovers(tmp_path, spark_python):

    data = tmp_path / "data"
    server = start_spark_dev(data)
    server.tokens = await make_tokens(data, ["alpha"])
    restarted = None
    try:
        async with client(server) as c:
            run = await c.submit_spark(FLAKY.replace("sys.exit(3)", "print('started', flush=True); "
                                                     "import time; time.sleep(120)").encode(),
                                       entrypoint="long.py", args=[str(tmp_path / "m")], attempts=2)  # fmt: skip
            await _wait_line(c, run.id, "started")
            pid = (await c.engine_run(run.id)).attempts[-1].pid
        assert _alive(pid)
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait()
        deadline = time.monotonic() + 5
        while _alive(pid) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not _alive(pid), "the run's process outlived its runner"
        restarted = start_spark_dev(data)
        restarted.tokens = server.tokens
        async with client(restarted) as c:
            done = await asyncio.wait_for(c.wait_engine_run(run.id), 60)
            lines = await lines_of(c, run.id)
        assert done.state == E.ENGINE_RUN_STATE_SUCCEEDED
        assert len(done.attempts) == 2
        assert "runner stopped" in done.attempts[0].error
        assert done.attempts[0].finished_ns > 0
        assert ("stdout", "second attempt works") in lines
    finally:
        server.stop()
        if restarted is not None:
            restarted.stop()


async def test_rest_submits_lists_reads_logs_and_cancels(spark_dev):
    import httpx

    headers = {"authorization": f"Bearer {spark_dev.tokens['gamma']}"}
    async with httpx.AsyncClient(base_url=spark_dev.url, headers=headers, timeout=60) as http:
        r = await http.post(
            "/v1/engines/spark/runs", json={"entrypoint": "hi.py", "source": "print('hi rest')"}
        )
        assert r.status_code == 200, r.text
        run = r.json()["run"]
        assert (run["state"], run["engine"], run["kind"]) == ("queued", "sail", "spark_batch")
        lines, after = [], 0
        while True:
            page = (
                await http.get(
                    f"/v1/engines/runs/{run['id']}/logs", params={"after": after, "wait_ms": 20000}
                )
            ).json()
            lines += [(x["stream"], x["line"]) for x in page["lines"]]
            after = page["lines"][-1]["n"] if page["lines"] else after
            if page["finished"]:
                break
        assert ("stdout", "hi rest") in lines
        got = (await http.get(f"/v1/engines/runs/{run['id']}")).json()
        assert (got["state"], got["exit_code"]) == ("succeeded", 0)
        assert run["id"] in [x["id"] for x in (await http.get("/v1/engines/runs")).json()["runs"]]
        again = await http.post(f"/v1/engines/runs/{run['id']}/cancel")
        assert again.status_code == 400 and again.json()["code"] == "failed_precondition"
        bad = await http.post("/v1/engines/spark/runs", json={"entrypoint": "x.py"})
        assert bad.status_code == 400 and bad.json()["code"] == "invalid_argument"
        denied = await http.get(
            "/v1/engines/runs", headers={"authorization": f"Bearer {spark_dev.tokens['no-engine']}"}
        )
        assert denied.status_code == 403


def _wheel(tmp_path, name: str, source: str) -> str:
    """A minimal pure-Python wheel, built by hand (no build backend, no network)."""
    import base64
    import hashlib
    import zipfile

    dist = f"{name}-1.0.dist-info"
    files = {
        f"{name}.py": source,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    wheel = tmp_path / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
        z.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
    return str(wheel)


UDF_WITH_DEP = """
from pyspark.sql import SparkSession, functions as F
import loamtripler  # installed for this namespace: the script sees it
spark = SparkSession.builder.getOrCreate()
def triple(x):
    import loamtripler  # and so does the namespace's Sail, where the UDF runs
    return loamtripler.triple(x)
rows = spark.range(3).select(F.udf(triple, "long")("id").alias("t")).collect()
print("tripled", [r.t for r in rows])
"""


async def test_python_deps_are_installed_for_the_namespace_script_and_its_udfs(spark_dev, tmp_path):
    wheel = _wheel(tmp_path, "loamtripler", "def triple(x):\n    return 3 * x\n")
    async with client(spark_dev, "delta") as c:
        run = await c.submit_spark(UDF_WITH_DEP.encode(), entrypoint="udf.py", python_deps=[wheel])
        done = await asyncio.wait_for(c.wait_engine_run(run.id), 120)
        lines = await lines_of(c, run.id)
        with pytest.raises(loam.errors.InvalidArgument):
            await c.submit_spark(b"print(1)", entrypoint="x.py", python_deps=["--index-url=http://evil"])
    assert done.state == E.ENGINE_RUN_STATE_SUCCEEDED, lines
    assert ("stdout", "tripled [0, 3, 6]") in lines
    # Another namespace does not get them.
    async with client(spark_dev, "gamma") as c:
        other = await c.submit_spark(b"import loamtripler", entrypoint="other.py")
        other = await asyncio.wait_for(c.wait_engine_run(other.id), 60)
    assert other.state == E.ENGINE_RUN_STATE_FAILED
