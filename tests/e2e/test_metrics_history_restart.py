"""The metrics history is kept in the store, not in the gateway's memory: `loam dev`
(its gateway sampling every 0.2 s) charts a queue's jobs, is stopped, and started again
on the same data directory; the points it had are still served, and the sampling goes
on from where it was (the jobs enqueued while it was down land in its next point)."""

from __future__ import annotations

import time

import httpx
from devserver import start_dev_server

WAIT_S = 30


def points(url: str, queue: str) -> list[dict]:
    r = httpx.get(f"{url}/v1/queues/{queue}/metrics?range=1h", timeout=10)
    assert r.status_code == 200, r.text
    assert r.json()["enabled"] is True
    return r.json()["points"]


def enqueue(url: str, queue: str, n: int) -> None:
    for i in range(n):
        r = httpx.post(f"{url}/v1/queues/{queue}/jobs", json={"name": "t", "data": {"i": i}}, timeout=10)
        assert r.status_code == 200, r.text


def until(read, ok, what: str):
    """Read until `ok(value)`: the sampler's ticks are the server's, seen from outside."""
    deadline = time.monotonic() + WAIT_S
    while True:
        value = read()
        if ok(value):
            return value
        assert time.monotonic() < deadline, f"{what}: still {value!r} after {WAIT_S}s"
        time.sleep(0.1)


def test_the_history_survives_a_restart(tmp_path):
    flags = ("--no-flink", "--metrics-interval", "0.2")
    server = start_dev_server(tmp_path, *flags)
    try:
        enqueue(server.url, "charted", 3)
        before = until(lambda: points(server.url, "charted"), lambda p: sum(x["enqueued"] for x in p) >= 3,
                       "the first points")  # fmt: skip
        assert sum(x["enqueued"] for x in before) == 3
    finally:
        assert server.stop() == 0
    server = start_dev_server(tmp_path, *flags)
    try:
        after = points(server.url, "charted")
        assert after[: len(before)] == before  # kept, as they were
        enqueue(server.url, "charted", 2)
        after = until(lambda: points(server.url, "charted"), lambda p: sum(x["enqueued"] for x in p) >= 5,
                      "the points after the restart")  # fmt: skip
        assert sum(x["enqueued"] for x in after) == 5  # counted once each, across the restart
        assert after[-1]["depth"] == 5
    finally:
        server.stop()
