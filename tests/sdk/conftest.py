"""SDK tests run against a real `loam dev` subprocess: the `loam_server` fixture of
`loam.testing` (one server for the session, on a free port with a temporary data
directory; the pytest plugin is registered by the `loam` package). Each test gets a
namespace of its own, so tests never see each other's jobs."""

from __future__ import annotations

import uuid

import pytest

from loam import Client


@pytest.fixture
def ns() -> str:
    return f"sdk-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def url(loam_server) -> str:
    return loam_server.url


@pytest.fixture
async def client(url: str, ns: str):
    async with Client(url, namespace=ns) as c:
        yield c
