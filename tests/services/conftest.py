"""Fixtures for the sweeper / relay / ownership tests: every test that takes `store`
runs once per backend (memory and SQLite), on a ManualClock the test moves by hand.

- `clock`, `store`, `blobs`, `core`: from tests/conftest.py;
- `configure(queue, **QueueConfig fields)`: write a queue's config record directly, with
  no admin event, so the outbox holds only the traffic a test makes;
- `outbox_of` / `event_log_of`: a queue's outbox rows / event log per shard.
"""

from __future__ import annotations

import pytest

from loam_common import keys
from loam_common.gen.loam.jobs.v1 import events_pb2
from loam_common.jobs.queue import QueueTx

NS = "acme"
SEC = 1_000_000_000


def _rows(tx, prefix_of, ns: str, queue: str, shard: int) -> list[events_pb2.JobEvent]:
    prefix = prefix_of(keys.QueueKeys(ns, queue), shard)
    return [events_pb2.JobEvent.FromString(v) for _k, v in tx.scan(prefix, keys.prefix_end(prefix))]


def _set_config(tx, ns: str, queue: str, fields: dict) -> None:
    with QueueTx(tx, ns, queue) as qt:
        for name, value in fields.items():
            setattr(qt.cfg, name, value)
        qt.ensure_exists()
        qt.save_config()


@pytest.fixture
def configure(store):
    async def _configure(queue: str, ns: str = NS, **fields) -> None:
        await store.transact(_set_config, ns, queue, fields)

    return _configure


@pytest.fixture
def outbox_of(store):
    async def _outbox(queue: str, shard: int = 0, ns: str = NS) -> list[events_pb2.JobEvent]:
        return await store.snapshot(_rows, keys.QueueKeys.outbox_shard, ns, queue, shard)

    return _outbox


@pytest.fixture
def event_log_of(store):
    async def _log(queue: str, shard: int = 0, ns: str = NS) -> list[events_pb2.JobEvent]:
        return await store.snapshot(_rows, keys.QueueKeys.event_log_shard, ns, queue, shard)

    return _log
