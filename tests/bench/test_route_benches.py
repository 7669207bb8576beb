"""Keeps the in-process route benches working (bench/enqueue_route_bench.py,
bench/durable_route_bench.py): each feeds real request bytes to the gateway's HTTP
reader and raises unless every answer is a 200, so a change that breaks a request's
shape or path breaks here rather than in the next person's measurement. The figures are
only checked to be positive."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import durable_route_bench  # noqa: E402  (bench/durable_route_bench.py, found through the path above)
import enqueue_route_bench  # noqa: E402


@pytest.mark.timeout(60)
async def test_durable_route_bench_answers_every_request() -> None:
    cpu_us_per_step = await durable_route_bench.run(16, 3, 4)
    assert cpu_us_per_step > 0


@pytest.mark.timeout(60)
async def test_enqueue_route_bench_answers_every_request() -> None:
    assert await enqueue_route_bench.run(enqueue_route_bench.single_requests(40), 10) > 0
    assert await enqueue_route_bench.run(enqueue_route_bench.bulk_requests(3), 1) > 0


def test_a_workflow_is_sent_in_the_sdks_order() -> None:
    kinds = [raw.split(b'"kind":"', 1)[1].split(b'"', 1)[0] for raw in durable_route_bench.workflow("wf", 2)]
    assert kinds == [b"promise.create", b"promise.register_listener", b"task.acquire", b"task.heartbeat",
                     *[b"task.fence"] * 4, b"task.fulfill"]  # fmt: skip
