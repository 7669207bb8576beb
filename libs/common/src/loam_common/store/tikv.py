"""The TiKV backend: a thin mapping of the store seam onto `tikv_client` 0.0.3.

No TiKV server can run on the machines this project is built and tested on, so this
backend is kept deliberately thin (each seam call is one client call, plus error mapping)
and it runs in the conformance suite only when `LOAM_TEST_TIKV_PD` names a PD address,
e.g. `LOAM_TEST_TIKV_PD=127.0.0.1:2379 make test`. Treat it as unverified until it has.

Choices:
- No savepoints: TiKV has none, and emulating them would mean a read per write. The
  backend declares `group_commit=False`, so the runner gives each transition its own
  transaction in a worker thread and never asks for a savepoint.
- The client's synchronous wrappers drive asyncio's *current* loop, which fails on worker
  threads and on the event loop's own thread. So each worker thread gets a private event
  loop here and drives the client's `asynchronous` classes on it.
- Errors: the client raises plain `Exception`s whose text names the Rust error. Write
  conflicts and deadlocks become WriteConflict; region, leader, epoch and transport
  errors before commit become RegionError; an "undetermined" commit, and *any* other
  failure of `commit()`, becomes CommitUnknown. That last is deliberate: the runner
  resolves CommitUnknown by reading the commit token back, which is always safe, while
  calling an ambiguous failure "not committed" could apply a transition twice.
- Reverse scans: the client only scans forward, so a reverse scan reads the whole range
  forward in pages and reverses it. Keep reverse scans to small ranges on TiKV.
- Clock: PD's TSO physical time. The offset between the TSO and this process's clock is
  measured at connect and refreshed by `begin()` at most once a second; `now_ns()` is the
  process clock plus that offset, so it never blocks on PD and works on any thread.
  An explicit `clock=` (tests) replaces it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Iterable
from typing import Any

from loam_common.store.base import (
    Backend,
    Capabilities,
    Clock,
    CommitUnknown,
    RegionError,
    StoreError,
    StoreUnavailable,
    Txn,
    WriteConflict,
)

_PAGE = 1024
_TSO_REFRESH_NS = 1_000_000_000
_TSO_PHYSICAL_SHIFT = 18  # a TSO is (physical ms << 18) | logical

_CONFLICT_MARKS = ("WriteConflict", "write conflict", "Deadlock", "deadlock")
_RETRYABLE_MARKS = (
    "Region",
    "region",
    "Leader",
    "leader",
    "EpochNotMatch",
    "ServerIsBusy",
    "StaleCommand",
    "gRPC error",
    "IO error",
    "resolve lock",
    "KeyIsLocked",
    "timed out",
)


def _map_error(exc: Exception, *, at_commit: bool = False) -> Exception:
    if isinstance(exc, StoreError):
        return exc
    msg = f"tikv: {exc}"
    if "undetermined" in msg:
        return CommitUnknown(msg)
    if any(m in msg for m in _CONFLICT_MARKS):
        return WriteConflict(msg)
    if at_commit:
        return CommitUnknown(msg)
    if any(m in msg for m in _RETRYABLE_MARKS):
        return RegionError(msg)
    return exc


class _Loops(threading.local):
    loop: asyncio.AbstractEventLoop | None = None


_loops = _Loops()


def _run(coro: Any) -> Any:
    """Drive one client coroutine to completion on this thread's private loop."""
    loop = _loops.loop
    if loop is None:
        loop = _loops.loop = asyncio.new_event_loop()
    return loop.run_until_complete(coro)


class TsoClock(Clock):
    """PD's TSO physical time, as the process clock plus a measured offset."""

    def __init__(self, backend: TikvBackend) -> None:
        self._backend = backend
        self._offset_ns = 0
        self._refreshed_ns = 0

    def now_ns(self) -> int:
        return time.time_ns() + self._offset_ns

    def refresh(self, *, force: bool = False) -> None:
        local = time.time_ns()
        if not force and local - self._refreshed_ns < _TSO_REFRESH_NS:
            return
        self._refreshed_ns = local
        tso = _run(self._backend._client.current_timestamp())
        physical_ms = int(getattr(tso, "physical", None) or (int(tso) >> _TSO_PHYSICAL_SHIFT))
        self._offset_ns = physical_ms * 1_000_000 - (local + time.time_ns()) // 2


class TikvTxn(Txn):
    def __init__(self, backend: TikvBackend, inner: Any, read_only: bool) -> None:
        self.clock = backend.clock
        self._inner = inner
        self._read_only = read_only
        self._open = True
        self._wrote = False

    def _call(self, coro: Any, *, at_commit: bool = False) -> Any:
        try:
            return _run(coro)
        except Exception as e:
            mapped = _map_error(e, at_commit=at_commit)
            if mapped is e:
                raise
            raise mapped from e

    def get(self, key: bytes) -> bytes | None:
        value = self._call(self._inner.get(key))
        return None if value is None else bytes(value)

    def batch_get(self, keys: Iterable[bytes]) -> dict[bytes, bytes]:
        found = self._call(self._inner.batch_get(list(keys)))
        return {bytes(k): bytes(v) for k, v in dict(found).items()}

    def _scan_page(self, start: bytes, end: bytes, limit: int, include_start: bool) -> list:
        page = self._call(self._inner.scan(start, end, limit, include_start, False))
        return [(bytes(k), bytes(v)) for k, v in dict(page).items()]

    def scan(
        self, start: bytes, end: bytes, limit: int | None = None, reverse: bool = False
    ) -> list[tuple[bytes, bytes]]:
        if start >= end or (limit is not None and limit <= 0):
            return []
        if limit is not None and not reverse:
            return self._scan_page(start, end, limit, True)
        rows: list[tuple[bytes, bytes]] = []
        cursor, include = start, True
        while True:
            page = self._scan_page(cursor, end, _PAGE, include)
            rows.extend(page)
            if len(page) < _PAGE:
                break
            cursor, include = page[-1][0], False
        if reverse:
            rows.reverse()
        return rows if limit is None else rows[:limit]

    def _writable(self) -> None:
        if self._read_only:
            raise RuntimeError("write in a read-only transaction")

    def put(self, key: bytes, value: bytes) -> None:
        self._writable()
        self._wrote = True
        self._call(self._inner.put(key, value))

    def delete(self, key: bytes) -> None:
        self._writable()
        self._wrote = True
        self._call(self._inner.delete(key))

    def has_writes(self) -> bool:
        return self._wrote

    def lock_for_update(self, keys: Iterable[bytes]) -> None:
        self._writable()
        # In a pessimistic txn this takes the locks now; in an optimistic one the keys are
        # prewritten as locks at commit, so a concurrent write to them is a conflict.
        self._call(self._inner.lock_keys(list(keys)))

    def savepoint(self) -> object:
        raise NotImplementedError(
            "TiKV has no savepoints; this backend declares group_commit=False so the runner never takes one"
        )

    def rollback_to(self, savepoint: object) -> None:
        self.savepoint()

    def commit(self) -> None:
        if not self._open:
            raise RuntimeError("transaction already finished")
        self._open = False
        if not self._read_only:
            self._call(self._inner.commit(), at_commit=True)

    def rollback(self) -> None:
        if not self._open:
            return
        self._open = False
        if not self._read_only:
            try:
                _run(self._inner.rollback())
            except Exception:
                pass  # nothing to undo, or the locks will expire; the outcome is the same


class TikvBackend(Backend):
    def __init__(self, pd_endpoints: list[str], clock: Clock | None = None) -> None:
        try:
            from tikv_client import asynchronous as tikv
        except ImportError as e:
            raise StoreUnavailable(
                "tikv:// needs the tikv-client package: pip install 'loam-common[tikv]'"
            ) from e
        self.pd_endpoints = list(pd_endpoints)
        self.capabilities = Capabilities(
            group_commit=False, unknown_commit_outcomes=True, multi_process=True, pessimistic=True
        )
        # Connect on a helper thread: the constructor may be called on a thread whose event
        # loop is running, where a private loop cannot be driven.
        with concurrent.futures.ThreadPoolExecutor(1) as helper:
            try:
                self._client = helper.submit(
                    lambda: _run(tikv.TransactionClient.connect(self.pd_endpoints))
                ).result()
            except Exception as e:
                raise StoreUnavailable(f"tikv: cannot connect to PD {self.pd_endpoints}: {e}") from e
            self._tso: TsoClock | None = None
            if clock is None:
                self._tso = TsoClock(self)
                helper.submit(self._tso.refresh, force=True).result()
        self.clock = clock or self._tso  # type: ignore[assignment]

    def begin(self, *, pessimistic: bool = False, read_only: bool = False) -> Txn:
        try:
            if self._tso is not None:
                self._tso.refresh()
            if read_only:
                ts = _run(self._client.current_timestamp())
                return TikvTxn(self, self._client.snapshot(ts, False), read_only=True)
            return TikvTxn(self, _run(self._client.begin(pessimistic)), read_only=False)
        except Exception as e:
            mapped = _map_error(e)
            if mapped is e:
                raise StoreUnavailable(f"tikv: cannot begin a transaction: {e}") from e
            raise mapped from e

    def close(self) -> None:
        # tikv_client 0.0.3 has no close; dropping the client closes its connections.
        self._client = None
