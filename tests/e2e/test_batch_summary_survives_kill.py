"""A bulk batch's audit summary survives the death of the process running the batch:
`loam dev` removes 10,000 jobs as one batch and is killed (SIGKILL) while the batch
runs; started again on the same data, its audit log has the batch's summary, saying it
was running, with a count equal to the jobs that were removed and to the job records
written as a part of the batch (each job's removal raised the count in its own
transaction)."""

from __future__ import annotations

import httpx
from devserver import start_dev_server

JOBS = 10_000
QUEUE = "bulk"


def test_a_killed_batch_leaves_a_summary_of_how_far_it_got(tmp_path):
    server = start_dev_server(tmp_path, "--no-flink")
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            ids: list[str] = []
            for start in range(0, JOBS, 1000):
                items = [
                    {"enqueue": {"queue": QUEUE, "name": "t", "data": {"i": i}}}
                    for i in range(start, start + 1000)
                ]
                r = http.post("/v1/writes", json={"items": items})
                assert r.status_code == 200, r.text
                ids += [o["enqueued"]["job"] for o in r.json()["outcomes"]]
            r = http.post(f"/v1/queues/{QUEUE}/batches", json={"action": "remove", "ids": ids})
            assert r.status_code == 202, r.text
            batch = r.json()
            while batch["done"] == 0:  # the record's long poll: rewritten every 0.25 s as it runs
                r = http.get(f"/v1/batches/{batch['id']}?after_version={batch['version']}&wait_ms=10000")
                batch = r.json()
            assert batch["state"] == "running", "the batch ended before it could be killed"
            server.proc.kill()
            server.proc.wait(30)
    finally:
        server.stop()

    server = start_dev_server(tmp_path, "--no-flink")
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            counts = http.get(f"/v1/queues/{QUEUE}").json()["counts"]
            removed = JOBS - counts["waiting"]
            parts, summaries, before = 0, [], ""
            while True:
                page = http.get(f"/v1/audit?queue={QUEUE}&limit=500&before={before}").json()
                for e in page["entries"]:
                    if e["batch"] == batch["id"]:
                        if e["action"] == "job.remove":
                            parts += 1
                        else:
                            summaries.append(e)
                before = page["next_before"]
                if not before:
                    break
    finally:
        server.stop()
    assert 0 < removed < JOBS
    (summary,) = summaries
    assert summary["action"] == "batch.remove"
    assert summary["count"] == removed == parts
    assert summary["detail"].startswith(f"batch {batch['id']}: running, ")
