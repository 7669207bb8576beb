"""Fixtures for the auth tests: `store` runs each test once per embedded backend
(memory and SQLite) on a ManualClock (`clock`) the test moves by hand; `dump` reads every
key and value in the store (commit tokens aside), for "nothing changed" and "no secret stored" checks."""

from __future__ import annotations

import pytest

from loam_common.store import (
    RESERVED_PREFIX,
)


def _all_rows(tx) -> list[tuple[bytes, bytes]]:
    """Every row but the store's own commit tokens (`\\x00…`), which any write adds."""
    return [(k, v) for k, v in tx.scan(b"", b"\xff" * 16) if not k.startswith(RESERVED_PREFIX)]


@pytest.fixture
def dump(store):
    async def _dump() -> list[tuple[bytes, bytes]]:
        return await store.snapshot(_all_rows)

    return _dump
