"""Fixtures of the hardening tests: the queue core over the real SQLite store (`core`,
`sqlite_store`), the gateway app on it in process with an httpx client (`http` without
auth, `http_auth` with), and tokens (`token`). Helpers are in gateway_kit.py; real-process tests use `loam dev` through
tests/e2e/devserver.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from gateway_kit import client_for

from loam_common import auth
from loam_common.blobs import DirBlobStore
from loam_common.store import SqliteBackend, Store
from loam_gateway.app import create_app
from loam_gateway.auth import StoreAuthenticator
from loam_gateway.routing import Router
from loam_queue_core import QueueCore
from loam_queue_core.rpc import CoreRpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))


@pytest.fixture
async def sqlite_store(tmp_path):
    s = Store(SqliteBackend(tmp_path / "jobs.db"))
    yield s
    await s.close()


@pytest.fixture
def core(sqlite_store, tmp_path) -> QueueCore:
    return QueueCore(sqlite_store, DirBlobStore(tmp_path / "blobs"))


@pytest.fixture
async def http(core):
    """The gateway without auth (a loopback `loam dev`)."""
    async with client_for(create_app(Router(local=CoreRpc(core)))) as c:
        yield c


@pytest.fixture
async def http_auth(core, sqlite_store):
    """The gateway with auth on."""
    async with client_for(create_app(Router(local=CoreRpc(core)), StoreAuthenticator(sqlite_store))) as c:
        yield c


@pytest.fixture
def token(sqlite_store):
    async def _token(ns: str, *actions: str) -> str:
        t, _ = await sqlite_store.transact(auth.token_create, ns, list(actions), "", None)
        return t

    return _token
