"""Fixtures every test folder shares: each test that takes `store` runs once per
backend (memory, and LMDB, the embedded default) on a ManualClock the test moves by
hand. SQLite, the other embedded store, runs the store's own suite (tests/store).

- `clock`: the ManualClock shared by the store and the test.
- `store`: a `Store` over the memory backend or an LMDB environment in tmp_path
  (tests/store overrides it with its own list, faults and TiKV included).
- `blobs`, `core`: a blob directory in tmp_path and `QueueCore(store, blobs)`.
- `configure(queue, ns=..., **QueueConfig fields)`: set a queue's config the way an
  operator does, through the admin operations.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from loam_common import keys
from loam_common.blobs import DirBlobStore
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import admin
from loam_common.store import LmdbBackend, ManualClock, MemoryBackend, Store
from loam_queue_core import QueueCore

DEFAULT_NS = "acme"

# tests/support: helpers every test folder may import (processes.py: services as OS processes)
sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["memory", "lmdb"])
async def store(request, tmp_path, clock):
    if request.param == "memory":
        backend = MemoryBackend(clock=clock)
    else:
        backend = LmdbBackend(tmp_path / "jobs.lmdb", clock=clock)
    s = Store(backend)
    yield s
    await s.close()


@pytest.fixture
def blobs(tmp_path) -> DirBlobStore:
    return DirBlobStore(tmp_path / "blobs")


@pytest.fixture
def core(store, blobs) -> QueueCore:
    return QueueCore(store, blobs)


def set_config(tx, ns: str, queue: str, fields: dict) -> None:
    """Create for a new queue, Update with a field mask for an existing one, Pause/Resume
    for `paused`. Message-valued fields take a message or a dict of its fields."""
    fields = dict(fields)
    paused = fields.pop("paused", None)
    cfg = pb.QueueConfig()
    for name, value in fields.items():
        current = getattr(cfg, name)
        if hasattr(current, "CopyFrom"):
            current.CopyFrom(value if not isinstance(value, dict) else type(current)(**value))
        else:
            setattr(cfg, name, value)
    if tx.get(keys.QueueKeys(ns, queue).config()) is None:
        admin.queue_create(tx, ns, queue, cfg)
    elif fields:
        admin.queue_update(tx, ns, queue, cfg, list(fields))
    if paused is not None:
        (admin.queue_pause if paused else admin.queue_resume)(tx, ns, queue)


@pytest.fixture
def configure(store):
    async def _configure(queue: str, ns: str = DEFAULT_NS, **fields) -> None:
        await store.transact(set_config, ns, queue, fields)

    return _configure
