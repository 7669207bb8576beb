"""`/metrics` counts what every process did: a second OS process opens the same store
(the data directory's LMDB environment) as `loam dev` and enqueues, leases and completes through its own queue core;
`loam dev`'s `/metrics` shows those counts with its own added (the counters live in the
store, not in a process)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import httpx
from devserver import start_dev_server

from loam_common import metrics

NS = "metrics-2p"
QUEUE = "m"

OTHER_PROCESS = textwrap.dedent(
    """
    import asyncio, sys
    from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
    from loam_common.jobs.complete import Ok
    from loam_common.store.runner import open_store, store_url_of
    from loam_queue_core.core import QueueCore

    async def main(data):
        store = open_store(store_url_of(data))
        core = QueueCore(store)
        for i in range(5):
            await core.jobs.enqueue("{ns}", "{queue}", pb.TaskSpec(name="t"))
        jobs = await core.jobs.lease("{ns}", ["{queue}"], "other-process", 3)
        for job in jobs:
            await core.jobs.complete("{ns}", "{queue}", job.id, job.epoch, Ok())
        await store.close()

    asyncio.run(main(sys.argv[1]))
    """
).format(ns=NS, queue=QUEUE)


def _value(text: str, name: str, **labels: str) -> float:
    want = {"ns": NS, "queue": QUEUE, **labels}
    hits = [v for (n, lab), v in metrics.parse(text).items() if n == name and dict(lab) == want]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def test_metrics_of_loam_dev_include_another_process_work(tmp_path):
    server = start_dev_server(tmp_path)
    try:
        with httpx.Client(base_url=server.url, timeout=10, headers={"x-loam-namespace": NS}) as http:
            for _ in range(2):  # loam dev's own share
                r = http.post(f"/v1/queues/{QUEUE}/jobs", json={"name": "t"})
                assert r.status_code == 200, r.text
            other = subprocess.run([sys.executable, "-c", OTHER_PROCESS, str(tmp_path)],
                                   capture_output=True, text=True, timeout=60)  # fmt: skip
            assert other.returncode == 0, other.stderr
            text = http.get("/metrics").text
    finally:
        server.stop()
    assert _value(text, "loam_jobs_enqueued_total") == 7
    assert _value(text, "loam_jobs_leased_total") == 3
    assert _value(text, "loam_jobs_completed_total", outcome="ok") == 3
    assert _value(text, "loam_jobs_waiting", band="fifo") == 4
    assert _value(text, "loam_jobs_active") == 0
