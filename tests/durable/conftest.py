"""Fixtures of the durable tests: one `loam dev` per module (started with a short
execute-retry period so a lost push is recovered within the test's patience), and
`start_worker` for Resonate worker processes stopped after the test. Helpers are in
durable_kit.py."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))
from devserver import DevServer, start_dev_server  # noqa: E402
from durable_kit import RETRY_MS, Worker  # noqa: E402


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    server = start_dev_server(tmp_path_factory.mktemp("loam-durable"), "--durable-retry-ms", str(RETRY_MS))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def durable_url(dev_server: DevServer) -> str:
    return dev_server.url + "/resonate"


@pytest.fixture
def start_worker(durable_url: str) -> Iterator:
    workers: list[Worker] = []

    def start(group: str, counts: Path, *extra: str) -> Worker:
        w = Worker(durable_url, group, counts, *extra)
        workers.append(w)
        return w

    yield start
    for w in workers:
        w.stop()
