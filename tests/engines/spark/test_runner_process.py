"""The engine runner as its own process (`loam engines`) beside a queue-core process on
one store: the queue core takes the submit (engine RPCs need only the store), the
runner leases the run's job over Connect, runs it, and records it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

from sparkdev import free_port

from loam_common.connect_client import jobs_client
from loam_common.gen.loam.jobs.v1 import engines_pb2 as E
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J

NS = "solo"


def _start(args: list[str], marker: str, log) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOAM_", "SPARK_"))}
    proc = subprocess.Popen(
        [sys.executable, "-m", *args], stdout=subprocess.PIPE, stderr=log, text=True, env=env
    )
    deadline = time.monotonic() + 60
    for line in proc.stdout:
        if marker in line:
            return proc
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError(f"{args[0]} did not get ready")


async def test_a_runner_process_runs_what_a_queue_core_process_took(tmp_path, spark_python):
    store, blobs, port = f"sqlite:///{tmp_path / 'loam.db'}", str(tmp_path / "blobs"), free_port()
    log = open(tmp_path / "procs.log", "w")  # noqa: SIM115 - closed in finally
    procs = []
    try:
        procs.append(_start(["loam_queue_core.server", "--store", store, "--blobs", blobs, "--port", str(port)],
                            "ready", log))  # fmt: skip
        procs.append(_start(["loam_engines", "--store", store, "--blobs", blobs, "--queue-cores",
                             f"http://127.0.0.1:{port}", "--data", str(tmp_path / "engines"), "--id", "runner-1",
                             "--spark-port", "0"], "ready", log))  # fmt: skip
        client = jobs_client(f"http://127.0.0.1:{port}")
        headers = {"x-loam-namespace": NS}
        job = E.EngineJob(
            spark_batch=E.SparkBatch(entrypoint="solo.py", source=b"print('from the runner process')")
        )
        submitted = await client.submit_engine_job(J.SubmitEngineJobRequest(job=job), headers=headers)
        lines, deadline = [], time.monotonic() + 60
        while time.monotonic() < deadline:
            req = J.ListEngineRunLogsRequest(run=submitted.run, after=len(lines), wait_ns=5_000_000_000)
            page = await client.list_engine_run_logs(req, headers=headers)
            lines += [x.line for x in page.lines]
            if page.finished:
                break
        run = (await client.get_engine_run(J.GetEngineRunRequest(run=submitted.run), headers=headers)).record
        assert run.state == E.ENGINE_RUN_STATE_SUCCEEDED, lines
        assert "from the runner process" in lines
        assert run.attempts[0].runner == "runner-1"
        await client.close()
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        log.close()
        await asyncio.sleep(0)
