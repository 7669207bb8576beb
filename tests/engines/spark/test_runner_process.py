"""The engine runner as its own process (`loam engines`) beside a queue-core process on
one store: the queue core takes the submit (engine RPCs need only the store), the
runner leases the run's job over Connect, runs it, and records it."""

from __future__ import annotations

import time

from loam_common.connect_client import jobs_client
from loam_common.gen.loam.jobs.v1 import engines_pb2 as E
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J

NS = "solo"


async def test_a_runner_process_runs_what_a_queue_core_process_took(split_deployment, spark_python):
    client = jobs_client(split_deployment.core_url)
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
    assert run.attempts[0].runner == split_deployment.runner_id
    await client.close()
