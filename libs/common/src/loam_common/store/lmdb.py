"""The LMDB backend: the whole store in one LMDB environment (a directory holding
`data.mdb` and `lock.mdb`), shared by every process that opens the same directory.

What it owns: the environment and its settings, the transaction mapping onto LMDB,
savepoints (an undo log), keys LMDB cannot hold, map growth, and the background flush.

- **One writer at a time, across processes.** LMDB serialises write transactions with a
  process-shared mutex in `lock.mdb` (a robust mutex: a writer killed with SIGKILL hands
  the lock to the next one), so, as on SQLite, a write transaction never conflicts and
  the runner's group commit keeps that one writer busy. Readers take a slot in the same
  lock file and read a real snapshot (MVCC) without blocking the writer. Wake-ups between
  processes are not the store's business on any backend: a process learns of another's
  commits through the services' HTTP calls (the sweeper forwards `Ready`), exactly as
  with SQLite. Slots left by killed readers are reclaimed at open (`reader_check`).
- **Crash safety.** `writemap` is off: pages are written with `pwrite` from LMDB's own
  buffers at commit, so a committed transaction is in the kernel's page cache before the
  caller is answered, and a process crash (SIGKILL included) loses nothing acknowledged;
  a wild write in the process cannot reach the map, which is read-only. Without
  `--durable` commits do not fsync (`sync=False`); LMDB then keeps atomicity and
  consistency across an OS crash on a file system that keeps write order and loses only
  the newest commits (writemap with asynchronous flushes would not: the kernel may write
  the map's pages in any order). A flusher thread fsyncs shortly after commits
  (`_FLUSH_GAP_S`), which bounds what an OS crash can take.
- **Durable** (`durable_power_loss=True`, `loam dev --durable`): LMDB's synchronous
  commit (data pages fsynced, then the meta page), before the runner answers anyone. The
  runner's group commit runs every call queued meanwhile in the next transaction, so
  concurrent commits share one flush.
- **Savepoints** are an undo log: while a savepoint is open, the first write of a key
  records its value before; `rollback_to` writes those back. LMDB's nested transactions
  would merge every child's dirty pages into the parent, a cost that grows with the batch.
- **Keys LMDB cannot hold** (empty, or longer than its 511-byte limit; dedup ids and
  result keys may be 1 KiB) live in a second database, `spill`, under their first 447
  bytes plus their SHA-256, with the whole key in the value; `scan` merges both databases
  in byte order. Ordinary keys never pay for this beyond a length check.
- **Map growth**: LMDB maps a fixed address range. A write that finds it full aborts the
  transaction, the map doubles, and the runner runs the batch again (`WriteConflict`);
  another process that sees the larger map adopts it at its next transaction.
  Resizing needs no transaction open in the process, so every transaction passes a gate.
- One environment per directory per process (LMDB forbids opening the same one twice in a
  process): backends on the same path share it, counted.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Iterable
from os import PathLike

import lmdb

from loam_common.store.base import (
    Backend,
    Capabilities,
    Clock,
    StoreUnavailable,
    Txn,
    WriteConflict,
    open_savepoint,
    process_clock,
)

log = logging.getLogger(__name__)

#: the first map size (address space, not disk: without writemap the file grows as used)
DEFAULT_MAP_SIZE = 1 << 30
# While commits come, the flusher fsyncs at most this often; an idle store is not flushed.
_FLUSH_GAP_S = 0.25
# How long a resize waits for this process's open transactions to end.
_GATE_TIMEOUT_S = 30.0
_MAX_READERS = 1024
_KV_DB = b"kv"
_SPILL_DB = b"spill"
_DIGEST = 32


class MapGrown(WriteConflict):
    """The map was full; it has grown. The transaction runs again."""


class _Gate:
    """Counts this process's open transactions so the map can be resized (LMDB requires
    none open in the process while it remaps)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._open = 0
        self._resizing = False

    def enter(self) -> None:
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._open += 1

    def leave(self) -> None:
        with self._cond:
            self._open -= 1
            if self._open == 0 and self._resizing:
                self._cond.notify_all()

    def exclusive(self, fn) -> None:  # noqa: ANN001 - a callable run with no transaction open
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._resizing = True
            try:
                if not self._cond.wait_for(lambda: self._open == 0, _GATE_TIMEOUT_S):
                    raise StoreUnavailable("lmdb: cannot resize the map: transactions stay open")
                fn()
            finally:
                self._resizing = False
                self._cond.notify_all()


class _Shared:
    """One open environment, shared by the backends of this process on its path."""

    def __init__(self, path: str, durable: bool, map_size: int) -> None:
        self.path = path
        self.durable = durable
        self.refs = 0
        self.gate = _Gate()
        try:
            os.makedirs(path, exist_ok=True)
            self.env = lmdb.open(
                path,
                map_size=map_size,
                subdir=True,
                max_dbs=2,
                max_readers=_MAX_READERS,
                writemap=False,
                sync=durable,
                metasync=True,
                map_async=False,
                readahead=False,  # a store larger than RAM reads only the pages it needs
                lock=True,
            )
        except (lmdb.Error, OSError) as e:
            raise StoreUnavailable(f"lmdb {path}: cannot open: {e}") from e
        if self.env.max_key_size() != _MAX_KEY:  # the spill layout is built on this limit
            self.env.close()
            raise StoreUnavailable(f"lmdb {path}: LMDB built with a key limit other than {_MAX_KEY}")
        self.env.reader_check()  # slots of readers killed without closing
        with self.env.begin(write=True) as txn:
            self.kv = self.env.open_db(_KV_DB, txn=txn)
            self.spill = self.env.open_db(_SPILL_DB, txn=txn)
        self.flusher = None if durable else _Flusher(self)

    def grow(self, seen_size: int) -> None:
        """Double the map, unless another thread or process already grew it past
        `seen_size` (then adopt its size)."""

        def resize() -> None:
            # Not set_mapsize(0), which would fall back to the size of the last commit: a
            # size grown here stays in memory until a commit records it.
            size = self.env.info()["map_size"]
            if size <= seen_size:
                self.env.set_mapsize(size * 2)
                log.info("lmdb %s: map grown to %d MiB", self.path, (size * 2) >> 20)

        self.gate.exclusive(resize)

    def adopt(self) -> None:
        """Another process grew the map: map the new size here too."""
        self.gate.exclusive(lambda: self.env.set_mapsize(0))

    def close(self) -> None:
        if self.flusher is not None:
            self.flusher.stop()
        self.env.close()


_registry: dict[str, _Shared] = {}
_registry_lock = threading.Lock()


def _acquire(path: str, durable: bool, map_size: int) -> _Shared:
    real = os.path.realpath(path)
    with _registry_lock:
        shared = _registry.get(real)
        if shared is None:
            shared = _registry[real] = _Shared(real, durable, map_size)
        elif shared.durable != durable:
            raise StoreUnavailable(
                f"lmdb {path}: already open in this process with durable_power_loss={shared.durable}"
            )
        shared.refs += 1
        return shared


def _release(shared: _Shared) -> None:
    with _registry_lock:
        shared.refs -= 1
        if shared.refs:
            return
        del _registry[shared.path]
    shared.close()


class _Flusher:
    """fsyncs the environment on its own thread shortly after commits (at most every
    `_FLUSH_GAP_S`), so an OS crash loses at most the last moments of commits. A process
    crash loses nothing either way: commits are already in the kernel's page cache."""

    def __init__(self, shared: _Shared) -> None:
        self._shared = shared
        self._due = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._main, name="loam-lmdb-flush", daemon=True)
        self._thread.start()

    def committed(self) -> None:
        if not self._due.is_set():
            self._due.set()

    def stop(self) -> None:
        self._stopping.set()
        self._due.set()
        self._thread.join()

    def _main(self) -> None:
        while True:
            self._due.wait()
            if self._stopping.is_set():
                break
            self._due.clear()
            try:
                self._shared.env.sync(True)
            except lmdb.Error as e:
                log.warning("lmdb %s: flush failed: %s", self._shared.path, e)
            if self._stopping.wait(_FLUSH_GAP_S):
                break
        try:
            self._shared.env.sync(True)  # a clean close leaves nothing unflushed
        except lmdb.Error:
            pass


def _spill_key(key: bytes) -> bytes:
    return key[:_HEAD] + hashlib.sha256(key).digest()


_MAX_KEY = 511  # LMDB's compiled-in limit (checked against the environment at import below)
_HEAD = _MAX_KEY - _DIGEST - 32  # 447: room to spare under the limit


def _spilled(key: bytes) -> bool:
    return not key or len(key) > _MAX_KEY


def _spill_value(key: bytes, value: bytes) -> bytes:
    return len(key).to_bytes(4, "big") + key + value


def _unspill(raw: bytes) -> tuple[bytes, bytes]:
    n = int.from_bytes(raw[:4], "big")
    return raw[4 : 4 + n], raw[4 + n :]


class _Savepoint:
    __slots__ = ("txn", "depth", "undo_len", "after_len", "seen")

    def __init__(self, txn: LmdbTxn, depth: int, undo_len: int, after_len: int) -> None:
        self.txn = txn
        self.depth = depth
        self.undo_len = undo_len
        self.after_len = after_len
        #: keys whose value before this savepoint is already in the undo log
        self.seen: set[bytes] = set()


class LmdbTxn(Txn):
    """One LMDB transaction (a write transaction holds the environment's writer lock)."""

    def __init__(self, backend: LmdbBackend, txn: lmdb.Transaction, read_only: bool) -> None:
        self.clock = backend.clock
        self._backend = backend
        self._txn = txn
        self._read_only = read_only
        self._stack: list[_Savepoint] = []
        self._undo: list[tuple[bytes, bytes | None]] = []
        self._after: list = []
        self._wrote = False
        self._open = True
        self._spill_empty: bool | None = None  # learned at the first scan

    # -- reads ----------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        if 0 < len(key) <= _MAX_KEY:
            return self._txn.get(key)
        return self._get_spilled(key)

    def _get_spilled(self, key: bytes) -> bytes | None:
        raw = self._txn.get(_spill_key(key), db=self._backend._shared.spill)
        if raw is None:
            return None
        full, value = _unspill(raw)
        return value if full == key else None

    def batch_get(self, keys: Iterable[bytes]) -> dict[bytes, bytes]:
        get = self.get
        return {k: v for k in keys if (v := get(k)) is not None}

    def scan(
        self, start: bytes, end: bytes, limit: int | None = None, reverse: bool = False
    ) -> list[tuple[bytes, bytes]]:
        if start >= end or (limit is not None and limit <= 0):
            return []
        try:
            main = self._scan_main(start, end, limit, reverse)
            if self._spill_empty is None:
                self._spill_empty = self._txn.stat(self._backend._shared.spill)["entries"] == 0
            if self._spill_empty:
                return main
            return self._merge(main, self._scan_spill(start, end, reverse), limit, reverse)
        except lmdb.Error as e:
            raise self._failed(e) from e

    def _scan_main(self, start: bytes, end: bytes, limit: int | None, reverse: bool) -> list:
        out: list[tuple[bytes, bytes]] = []
        with self._txn.cursor() as cur:
            if not reverse:
                if not (cur.set_range(start) if start else cur.first()):
                    return out
                if limit == 1:  # a range's first entry (a subject's next job): no iterator
                    kv = cur.item()
                    if kv[0] < end:
                        out.append(kv)
                    return out
                for kv in cur.iternext():
                    if kv[0] >= end:
                        break
                    out.append(kv)
                    if len(out) == limit:
                        break
                return out
            if len(end) > _MAX_KEY:
                positioned = cur.set_range(end[:_MAX_KEY])
            else:
                positioned = cur.set_range(end)
            if not positioned:
                positioned = cur.last()
            while positioned and cur.key() >= end:
                positioned = cur.prev()
            if not positioned:
                return out
            for kv in cur.iterprev():
                if kv[0] < start:
                    break
                out.append(kv)
                if len(out) == limit:
                    break
            return out

    def _scan_spill(self, start: bytes, end: bytes, reverse: bool) -> list[tuple[bytes, bytes]]:
        # Spilled keys sort by their head; keys with the same head are sorted here.
        rows = []
        with self._txn.cursor(db=self._backend._shared.spill) as cur:
            if cur.set_range(start[:_HEAD]) if start else cur.first():
                for sk, raw in cur.iternext():
                    if sk[:-_DIGEST] > end[:_HEAD]:
                        break
                    key, value = _unspill(raw)
                    if start <= key < end:
                        rows.append((key, value))
        rows.sort(reverse=reverse)
        return rows

    @staticmethod
    def _merge(a: list, b: list, limit: int | None, reverse: bool) -> list:
        merged = sorted(a + b, reverse=reverse)
        return merged if limit is None else merged[:limit]

    def lock_for_update(self, keys: Iterable[bytes]) -> None:
        # A write transaction already holds the environment's one writer lock.
        pass

    # -- writes ---------------------------------------------------------------------
    def _check_write(self, key: object, value: object = b"") -> None:
        if self._read_only:
            raise RuntimeError("write in a read-only transaction")
        if type(key) is not bytes:
            raise TypeError(f"keys are bytes, got {type(key).__name__}")
        if type(value) is not bytes:
            raise TypeError(f"values are bytes, got {type(value).__name__}")

    def put(self, key: bytes, value: bytes) -> None:
        if self._read_only or type(key) is not bytes or type(value) is not bytes:
            self._check_write(key, value)
        self._wrote = True
        try:
            if 0 < len(key) <= _MAX_KEY:
                stack = self._stack
                if stack and key not in (seen := stack[-1].seen):
                    # The value before the savepoint, read by the write itself.
                    seen.add(key)
                    self._undo.append((key, self._txn.replace(key, value)))
                else:
                    self._txn.put(key, value)
            else:
                self._record_undo(key)
                self._txn.put(_spill_key(key), _spill_value(key, value), db=self._backend._shared.spill)
                self._spill_empty = False
        except lmdb.Error as e:
            raise self._failed(e) from e

    def delete(self, key: bytes) -> None:
        if self._read_only or type(key) is not bytes:
            self._check_write(key)
        self._wrote = True
        try:
            if 0 < len(key) <= _MAX_KEY:
                stack = self._stack
                if stack and key not in (seen := stack[-1].seen):
                    old = self._txn.pop(key)
                    if old is not None:  # deleting nothing changes nothing: no undo yet
                        seen.add(key)
                        self._undo.append((key, old))
                else:
                    self._txn.delete(key)
            elif self._get_spilled(key) is not None:
                self._record_undo(key)
                self._txn.delete(_spill_key(key), db=self._backend._shared.spill)
        except lmdb.Error as e:
            raise self._failed(e) from e

    def _record_undo(self, key: bytes) -> None:
        if self._stack:
            seen = self._stack[-1].seen
            if key not in seen:
                seen.add(key)
                self._undo.append((key, self._get_spilled(key)))

    def _failed(self, e: lmdb.Error) -> Exception:
        """The error to raise for an LMDB failure inside the transaction. A full map
        dooms the transaction: abort it, grow the map, have the runner run it again."""
        if isinstance(e, lmdb.MapFullError):
            seen = self._backend._map_size()  # no resize can happen while this is open
            self._finish()
            self._backend._shared.grow(seen)
            return MapGrown(f"lmdb {self._backend.path}: map full; grown, retrying")
        return StoreUnavailable(f"lmdb {self._backend.path}: {e}")

    # -- savepoints -----------------------------------------------------------------
    def savepoint(self) -> object:
        if self._read_only:
            raise RuntimeError("savepoint in a read-only transaction")
        sp = _Savepoint(self, len(self._stack), len(self._undo), len(self._after))
        self._stack.append(sp)
        return sp

    def _check(self, sp: object) -> _Savepoint:
        return open_savepoint(self._stack, sp, self)

    def rollback_to(self, savepoint: object) -> None:
        sp = self._check(savepoint)
        del self._stack[sp.depth + 1 :]
        del self._after[sp.after_len :]
        undo, txn, spill = self._undo, self._txn, self._backend._shared.spill
        try:
            for key, old in reversed(undo[sp.undo_len :]):
                short = 0 < len(key) <= _MAX_KEY
                if old is None:
                    if short:
                        txn.delete(key)
                    else:
                        txn.delete(_spill_key(key), db=spill)
                elif short:
                    txn.put(key, old)
                else:
                    txn.put(_spill_key(key), _spill_value(key, old), db=spill)
                    self._spill_empty = False
        except lmdb.Error as e:
            raise self._failed(e) from e
        del undo[sp.undo_len :]
        sp.seen.clear()  # the savepoint stays: the next writes record their values again

    def release(self, savepoint: object) -> None:
        sp = self._check(savepoint)
        del self._stack[sp.depth :]
        if not self._stack:
            self._undo.clear()  # no savepoint left to roll back to

    def has_writes(self) -> bool:
        return self._wrote

    # -- end ------------------------------------------------------------------------
    def _finish(self) -> None:
        if self._open:
            self._open = False
            try:
                self._txn.abort()
            finally:
                self._backend._shared.gate.leave()

    def commit(self) -> None:
        if not self._open:
            raise RuntimeError("transaction already finished")
        if self._read_only or not self._wrote:
            self._finish()
            return
        self._open = False
        try:
            self._txn.commit()
        except lmdb.MapFullError:
            seen = self._backend._map_size()
            self._backend._shared.gate.leave()
            self._backend._shared.grow(seen)
            raise MapGrown(f"lmdb {self._backend.path}: map full at commit; grown, retrying") from None
        except lmdb.Error as e:
            self._backend._shared.gate.leave()
            raise StoreUnavailable(f"lmdb {self._backend.path}: commit failed: {e}") from e
        self._backend._shared.gate.leave()
        flusher = self._backend._shared.flusher
        if flusher is not None:
            flusher.committed()

    def rollback(self) -> None:
        self._finish()


class LmdbBackend(Backend):
    """One LMDB environment (a directory). Thread-safe, and several processes may open
    the same directory at once."""

    def __init__(
        self,
        path: str | PathLike[str],
        *,
        durable_power_loss: bool = False,
        clock: Clock | None = None,
        map_size: int = DEFAULT_MAP_SIZE,
    ) -> None:
        self.path = str(path)
        self.clock = clock or process_clock()
        self.capabilities = Capabilities(
            group_commit=True,
            unknown_commit_outcomes=False,
            multi_process=True,
            pessimistic=False,
            optimistic_batches=True,
            inline_commits=not durable_power_loss,
        )
        self._shared = _acquire(self.path, durable_power_loss, map_size)
        self._closed = False

    def _map_size(self) -> int:
        return self._shared.env.info()["map_size"]

    def begin(self, *, pessimistic: bool = False, read_only: bool = False) -> Txn:
        if self._closed:
            raise StoreUnavailable(f"lmdb {self.path}: backend is closed")
        shared = self._shared
        while True:
            shared.gate.enter()
            try:
                txn = shared.env.begin(db=shared.kv, write=not read_only)
            except lmdb.MapResizedError:
                shared.gate.leave()
                shared.adopt()
                continue
            except lmdb.Error as e:
                shared.gate.leave()
                raise StoreUnavailable(f"lmdb {self.path}: cannot begin: {e}") from e
            return LmdbTxn(self, txn, read_only)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _release(self._shared)
