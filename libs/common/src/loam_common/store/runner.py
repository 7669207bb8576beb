"""`Store`: the one async runner over any backend, and `open_store(url)`.

What it owns: running transitions (`transact`) and reads (`snapshot`), retries, group
commit, commit tokens, and handing each committed transaction's declared effects to the
store's sinks (loam_common.effects). Backends only open transactions.

Group commit (backends with `capabilities.group_commit`, SQLite, LMDB and memory): one
writer thread per Store takes every pending `transact` call (up to `max_batch`), runs them
in one backend transaction, each in its own savepoint, and commits once. A transition that
raises is rolled back to its savepoint and its exception goes to its caller only. If the
commit fails with a retryable error, the whole batch runs again. Results go back to each
caller's event loop with `call_soon_threadsafe`, one call per loop per batch.

A backend with `capabilities.optimistic_batches` (LMDB) first runs the batch with no
savepoints at all; if a call raises, that transaction is abandoned and the batch runs
again the usual way. Most batches have no failing call and pay for no savepoint.

Inline batches (`transact(..., inline=True)` on a backend with
`capabilities.inline_commits`, i.e. LMDB without `--durable`): the calls one turn of the
caller's event loop makes are run by that loop, after the turn's callbacks, as one group
commit, instead of crossing to the writer thread and back (two thread wake-ups per
batch, which cost more than a small transaction). Only while no other batch is running
in the process: otherwise, and for a batch that must be retried, the calls go to the
writer thread as usual, so the loop never waits on a retry's backoff.

Without group commit (TiKV), each call runs in its own transaction on a worker thread.

Commit tokens (backends with `capabilities.unknown_commit_outcomes`): each write
transaction also puts `\\x00ct/<16 random bytes>` = commit time (ns, big-endian). When a
commit ends in CommitUnknown, a fresh read of the token tells whether it committed:
present, the results stand; absent, the transaction runs again. So every logical
transaction applies exactly once and callers never see CommitUnknown.
`sweep_commit_tokens` deletes old tokens. Keys starting with `\\x00` belong to the store.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from loam_common import store_format
from loam_common.effects import Effect, EffectSink
from loam_common.store.base import (
    Backend,
    Clock,
    CommitUnknown,
    RegionError,
    StoreUnavailable,
    Txn,
    WriteConflict,
)
from loam_common.store.lmdb import LmdbBackend
from loam_common.store.memory import MemoryBackend
from loam_common.store.sqlite import SqliteBackend
from loam_common.store.tikv import TikvBackend

log = logging.getLogger(__name__)

RESERVED_PREFIX = b"\x00"
COMMIT_TOKEN_PREFIX = b"\x00ct/"
_COMMIT_TOKEN_END = b"\x00ct0"  # b"/" + 1
DEFAULT_TOKEN_AGE_NS = 3_600_000_000_000
_SWEEP_PAGE = 500


class _NotCommitted(Exception):
    """A CommitUnknown whose token was absent: run the transaction again."""


_RETRYABLE = (WriteConflict, RegionError, _NotCommitted)


def _backoff_s(attempt: int) -> float:
    # Full jitter: contenders spread out instead of colliding again in lockstep.
    return random.random() * min(0.05, 0.001 * (2 ** min(attempt, 10)))


class _Call:
    """One pending `transact` call in the group-commit queue."""

    __slots__ = ("fn", "args", "pessimistic", "loop", "future", "result", "error", "effects")

    def __init__(
        self,
        fn: Callable[..., Any],
        args: tuple,
        pessimistic: bool,
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[Any],
    ) -> None:
        self.fn = fn
        self.args = args
        self.pessimistic = pessimistic
        self.loop = loop
        self.future = future
        self.result: Any = None
        self.error: BaseException | None = None
        self.effects: list[Effect] = []


_STOP = object()


def _run_effects(sinks: list[EffectSink], effects: list[Effect]) -> None:
    for sink in sinks:
        try:
            sink.run(effects)
        except Exception:
            # The transaction has committed; a failing wake-up must not turn that into an error.
            log.exception("effect sink %r failed", sink)


def _resolve(sinks: list[EffectSink], calls: list[_Call]) -> None:
    """On the callers' loop: run each call's effects, then answer it."""
    for call in calls:
        if call.error is None:
            if call.effects and sinks:  # even if the caller gave up: the commit happened
                _run_effects(sinks, call.effects)
            if not call.future.done():
                call.future.set_result(call.result)
        elif not call.future.done():
            call.future.set_exception(call.error)


def _deliverable(error: Exception) -> Exception:
    # asyncio futures refuse StopIteration (it would end the awaiting coroutine silently),
    # which would strand the caller; convert it as PEP 479 does for generators.
    if isinstance(error, StopIteration):
        converted = RuntimeError("transition raised StopIteration")
        converted.__cause__ = error
        return converted
    return error


def _unavailable(error: BaseException) -> StoreUnavailable:
    """A fresh StoreUnavailable per caller, so no two callers share one traceback."""
    if isinstance(error, StoreUnavailable):
        fresh = StoreUnavailable(*error.args)
    else:
        fresh = StoreUnavailable(f"store failed: {error!r}")
    fresh.__cause__ = error
    return fresh


class Store:
    """Runs transitions and reads against a backend. See the module docstring."""

    def __init__(
        self,
        backend: Backend,
        *,
        max_retries: int = 20,
        max_batch: int = 256,
        close_backend: bool = True,
    ) -> None:
        self.backend = backend
        self.clock: Clock = backend.clock
        self.capabilities = backend.capabilities
        self.max_retries = max_retries
        self.max_batch = max_batch
        # Who runs the effects of this store's transitions (loam_common.effects).
        self.sinks: list[EffectSink] = []
        self._close_backend = close_backend
        self._tokens = backend.capabilities.unknown_commit_outcomes
        # A store only this process can open lives in memory: its reads never wait on I/O
        # or on another process, so they run on the caller's thread without a hop.
        self._inline_reads = not backend.capabilities.multi_process
        self._lock = threading.Lock()
        self._closed = False
        #: held while a batch runs (writer thread or inline), so that one runs at a time
        self._batch_lock = threading.Lock()
        self._backend_closed = False
        self._inline = backend.capabilities.inline_commits
        #: per event loop, the inline calls of its current turn
        self._inline_calls: dict[asyncio.AbstractEventLoop, list[_Call]] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        if backend.capabilities.group_commit:
            self._writer = threading.Thread(target=self._writer_main, name="loam-store-writer", daemon=True)
            self._writer.start()

    # -- public API ---------------------------------------------------------------------
    def add_sink(self, sink: EffectSink) -> None:
        """Have `sink.run(effects)` called with the effects of every transition this
        store commits from now on."""
        if sink not in self.sinks:
            self.sinks = [*self.sinks, sink]  # a new list: a batch being resolved keeps its own

    def remove_sink(self, sink: EffectSink) -> None:
        self.sinks = [s for s in self.sinks if s is not sink]

    async def transact(
        self, fn: Callable[..., Any], *args: Any, pessimistic: bool = False, inline: bool = False
    ) -> Any:
        """Run `fn(tx, *args)` in a write transaction and return its result. Retries on
        write conflicts and region errors; StoreUnavailable once retries run out. If `fn`
        raises, its writes are rolled back and the exception is raised here.

        `fn` runs on the store's writer thread (or a worker thread), possibly more than
        once: it must be quick, must not touch the event loop, and must have no effects
        outside `tx` except the effects it declares (`tx.declare`), which the store's
        sinks run once it has committed. With `inline` (for small transactions whose
        callers wait on them one by one) it may run on this event loop instead, after
        the loop's current turn, with the other inline calls of that turn (see the
        module docstring)."""
        if self._writer is None:
            return await self._transact_alone(fn, args, pessimistic)
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        call = _Call(fn, args, pessimistic, loop, future)
        if inline and self._inline:
            if self._closed:
                raise StoreUnavailable("store is closed")
            turn = self._inline_calls.get(loop)
            if turn is None:
                self._inline_calls[loop] = [call]
                loop.call_soon(self._run_inline, loop)
            else:
                turn.append(call)
        else:
            with self._lock:
                if self._closed:
                    raise StoreUnavailable("store is closed")
                self._queue.put(call)
        return await future

    async def snapshot(self, fn: Callable[..., Any], *args: Any, inline: bool = False) -> Any:
        """Run `fn(tx, *args)` in a read-only transaction (one consistent snapshot). With
        `inline` (a read of a few keys, such as a job by its id) it runs on this event
        loop where the store commits there too, instead of a hop to a worker thread and
        back that costs more than the read."""
        attempt = 0
        while True:
            try:
                if self._closed:
                    raise StoreUnavailable("store is closed")
                if self._inline_reads or (inline and self._inline):
                    return self._read_once(fn, args)
                loop = asyncio.get_running_loop()
                return await loop.run_in_executor(self._executor(), self._read_once, fn, args)
            except RegionError as e:
                attempt += 1
                if attempt > self.max_retries:
                    raise StoreUnavailable(f"read failed {attempt} times: {e}") from e
                await asyncio.sleep(_backoff_s(attempt))

    async def sweep_commit_tokens(self, older_than_ns: int = DEFAULT_TOKEN_AGE_NS) -> int:
        """Delete commit tokens older than `older_than_ns` by the store clock; returns how
        many. A no-op on backends that never write tokens."""
        if not self._tokens:
            return 0
        cutoff = self.clock.now_ns() - older_than_ns
        cursor, deleted = COMMIT_TOKEN_PREFIX, 0
        while True:
            # Scan in a snapshot and delete blindly: a scanning write transaction would
            # conflict with every concurrent commit, since each inserts a token in the range.
            rows = await self.snapshot(_scan_tokens, cursor)
            old = [k for k, v in rows if int.from_bytes(v, "big") < cutoff]
            if old:
                await self.transact(_delete_keys, old)
                deleted += len(old)
            if len(rows) < _SWEEP_PAGE:
                return deleted
            cursor = rows[-1][0] + b"\x00"

    async def close(self) -> None:
        """Finish the calls already queued, then stop. Later calls raise StoreUnavailable."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._writer is not None:
                self._queue.put(_STOP)
        if self._writer is not None:
            await asyncio.to_thread(self._writer.join)
        if self._pool is not None:
            await asyncio.to_thread(self._pool.shutdown)
        with self._batch_lock:  # an inline batch of another loop may still be running
            self._backend_closed = True
        if self._close_backend:
            self.backend.close()

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- shared pieces --------------------------------------------------------------------
    def _executor(self) -> ThreadPoolExecutor:
        if self._closed:
            raise StoreUnavailable("store is closed")
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    workers = 4 if self._writer is not None else 32
                    self._pool = ThreadPoolExecutor(workers, thread_name_prefix="loam-store")
        return self._pool

    def _read_once(self, fn: Callable[..., Any], args: tuple) -> Any:
        tx = self.backend.begin(read_only=True)
        try:
            return fn(tx, *args)
        finally:
            tx.rollback()

    def _put_token(self, tx: Txn) -> bytes:
        key = COMMIT_TOKEN_PREFIX + os.urandom(16)
        tx.put(key, self.clock.now_ns().to_bytes(8, "big"))
        return key

    def _commit(self, tx: Txn, token: bytes | None) -> None:
        """Commit; turn CommitUnknown into success or _NotCommitted by reading the token."""
        try:
            tx.commit()
        except CommitUnknown:
            if token is None:
                if self._tokens:
                    return  # it wrote nothing: committed or not, nothing is lost
                raise  # a backend without tokens must not report unknown outcomes
            if not self._token_committed(token):
                raise _NotCommitted() from None

    def _token_committed(self, token: bytes) -> bool:
        for attempt in range(self.max_retries + 1):
            try:
                return self._read_once(_get, (token,)) is not None
            except RegionError:
                time.sleep(_backoff_s(attempt))
        raise StoreUnavailable("commit outcome unknown: its commit token could not be read back")

    # -- one transaction per call (no group commit: TiKV) ---------------------------------
    async def _transact_alone(self, fn: Callable[..., Any], args: tuple, pessimistic: bool) -> Any:
        loop = asyncio.get_running_loop()
        attempt = 0
        while True:
            try:
                result, effects = await loop.run_in_executor(
                    self._executor(), self._attempt_alone, fn, args, pessimistic
                )
                break
            except _RETRYABLE as e:
                attempt += 1
                if attempt > self.max_retries:
                    raise StoreUnavailable(f"gave up after {attempt} attempts: {e!r}") from e
                await asyncio.sleep(_backoff_s(attempt))
        if effects and self.sinks:
            _run_effects(self.sinks, effects)
        return result

    def _attempt_alone(self, fn: Callable[..., Any], args: tuple, pessimistic: bool) -> tuple:
        tx = self.backend.begin(pessimistic=pessimistic)
        done = False
        try:
            try:
                result = fn(tx, *args)
            except StopIteration as e:
                raise _deliverable(e) from e
            self._commit(tx, self._put_token(tx) if self._tokens and tx.has_writes() else None)
            done = True
            return result, tx.declared()
        finally:
            if not done:
                tx.rollback()

    # -- group commit -----------------------------------------------------------------------
    def _writer_main(self) -> None:
        q, max_batch = self._queue, self.max_batch
        stopping = False
        while not stopping:
            first = q.get()  # blocks: no busy-wait
            if first is _STOP:
                break
            batch = [first]
            while len(batch) < max_batch:
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stopping = True
                    break
                batch.append(item)
            with self._batch_lock:
                self._run_batch(batch)

    def _run_inline(self, loop: asyncio.AbstractEventLoop) -> None:
        """On `loop`, after the turn that made them: its inline calls, in batches of at
        most `max_batch`, each batch as one group commit; answered here, at once."""
        calls = [c for c in self._inline_calls.pop(loop) if not c.future.done()]
        for start in range(0, len(calls), self.max_batch):
            batch = calls[start : start + self.max_batch]
            if not self._batch_lock.acquire(blocking=False):
                self._hand_over(batch)  # the writer is busy: it takes them next
                continue
            try:
                if self._backend_closed:
                    raise StoreUnavailable("store is closed")
                self._group_attempt(batch)
            except _RETRYABLE:
                self._hand_over(batch)  # the writer retries, with its backoff, off the loop
                continue
            except BaseException as e:
                if not isinstance(e, StoreUnavailable):
                    log.exception("group commit failed")
                for call in batch:
                    call.error, call.effects = _unavailable(e), []
            finally:
                self._batch_lock.release()
            _resolve(self.sinks, batch)

    def _hand_over(self, calls: list[_Call]) -> None:
        """Inline calls the loop could not run: to the writer thread, as `transact` queues
        them (after `close` the writer is gone: they fail as a closed store's calls do)."""
        with self._lock:
            if not self._closed:
                for call in calls:
                    call.result, call.error, call.effects = None, None, []
                    self._queue.put(call)
                return
        for call in calls:
            if not call.future.done():
                call.future.set_exception(StoreUnavailable("store is closed"))

    def _run_batch(self, batch: list[_Call]) -> None:
        calls = [c for c in batch if not c.future.done()]  # skip callers that gave up
        if not calls:
            return
        try:
            self._commit_group(calls)
        except BaseException as e:
            # Whatever broke the batch goes to every caller in it; the writer thread lives
            # on, since a dead writer would leave every later caller waiting forever.
            if not isinstance(e, StoreUnavailable):
                log.exception("group commit failed")
            for call in calls:
                call.error, call.effects = _unavailable(e), []
        self._deliver(calls)

    def _deliver(self, calls: list[_Call]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[_Call]] = {}
        for call in calls:
            by_loop.setdefault(call.loop, []).append(call)
        for loop, group in by_loop.items():
            try:
                loop.call_soon_threadsafe(_resolve, self.sinks, group)
            except RuntimeError:
                pass  # that loop is closed: nobody is waiting any more

    def _commit_group(self, calls: list[_Call]) -> None:
        attempt = 0
        while True:
            try:
                self._group_attempt(calls)
                return
            except _RETRYABLE as e:
                attempt += 1
                if attempt > self.max_retries:
                    raise StoreUnavailable(f"gave up after {attempt} attempts: {e!r}") from e
                time.sleep(_backoff_s(attempt))

    def _group_attempt(self, calls: list[_Call]) -> None:
        if self.capabilities.optimistic_batches and self._optimistic_attempt(calls):
            return
        tx = self.backend.begin(pessimistic=any(c.pessimistic for c in calls))
        done = False
        try:
            after = tx.declared()
            for call in calls:
                self._run_in_savepoint(tx, call, after)
            self._commit(tx, self._put_token(tx) if self._tokens and tx.has_writes() else None)
            done = True
        finally:
            if not done:
                tx.rollback()

    def _optimistic_attempt(self, calls: list[_Call]) -> bool:
        """Run the batch with no savepoint per call and commit; False, with nothing
        committed, as soon as one call raises (the batch then runs with savepoints, so
        only that call fails). Write conflicts go to the batch's retry as usual."""
        tx = self.backend.begin(pessimistic=any(c.pessimistic for c in calls))
        done = False
        try:
            after = tx.declared()
            for call in calls:
                mark = len(after)
                try:
                    call.result = call.fn(tx, *call.args)
                except WriteConflict:
                    raise
                except Exception:
                    return False
                call.error, call.effects = None, after[mark:]
            self._commit(tx, self._put_token(tx) if self._tokens and tx.has_writes() else None)
            done = True
            return True
        finally:
            if not done:
                tx.rollback()

    def _run_in_savepoint(self, tx: Txn, call: _Call, after: list) -> None:
        reads_failed = 0
        while True:
            savepoint = tx.savepoint()
            mark = len(after)
            try:
                call.result = call.fn(tx, *call.args)
            except WriteConflict:
                raise  # the batch's transaction is doomed: run the batch again
            except RegionError as e:
                # A read failed; the transaction itself is intact. Run this call again.
                tx.rollback_to(savepoint)
                tx.release(savepoint)
                reads_failed += 1
                if reads_failed > self.max_retries:
                    call.result, call.error, call.effects = None, _unavailable(e), []
                    return
                continue
            except Exception as e:
                tx.rollback_to(savepoint)  # also drops the effects declared since `mark`
                tx.release(savepoint)
                call.result, call.error, call.effects = None, _deliverable(e), []
                return
            tx.release(savepoint)
            call.error, call.effects = None, after[mark:]
            return


def _get(tx: Txn, key: bytes) -> bytes | None:
    return tx.get(key)


def _scan_tokens(tx: Txn, start: bytes) -> list[tuple[bytes, bytes]]:
    return tx.scan(start, _COMMIT_TOKEN_END, limit=_SWEEP_PAGE)


def _delete_keys(tx: Txn, keys: list[bytes]) -> None:
    for key in keys:
        tx.delete(key)


_URL_FORMS = (
    "lmdb:///abs/dir, lmdb:relative/dir, sqlite:///abs/path.db, sqlite:relative/path.db, memory://, "
    "tikv://pd-host:2379[,pd-host2:2379...]"
)


def _file_path(url: str, scheme: str) -> str:
    """The path of `scheme:///abs/path` or `scheme:relative/path`."""
    rest = url[len(scheme) + 1 :]
    if rest.startswith("///"):
        path = rest[2:]  # keep the leading "/" of the absolute path
    elif rest.startswith("/"):
        raise ValueError(f"bad store URL {url!r}: use one of {_URL_FORMS}")
    else:
        path = rest
    if not path or path == "/":
        raise ValueError(f"bad store URL {url!r}: no database path; use one of {_URL_FORMS}")
    return path


#: the store inside a `loam dev` data directory: an LMDB environment (a directory)
DATA_DIR_LMDB = "loam.lmdb"
#: the SQLite file a data directory made before LMDB was the default holds
DATA_DIR_SQLITE = "loam.db"


def store_url_of(path: str | os.PathLike[str]) -> str:
    """The store URL for a path a user typed: a URL stays as it is; `x.db` is a SQLite
    file; a `loam dev` data directory means its store (`loam.lmdb/`, or `loam.db` when
    only that exists: a directory made before LMDB was the default keeps its data); any
    other path is an LMDB environment."""
    text = os.fspath(path)
    if "://" in text or text.startswith(("sqlite:", "lmdb:", "memory:", "tikv:")):
        return text
    p = os.path.abspath(text)
    if p.endswith(".db"):
        return f"sqlite://{p}"
    if os.path.exists(os.path.join(p, "data.mdb")) or p.endswith(".lmdb"):
        return f"lmdb://{p}"
    lmdb_dir, sqlite_file = os.path.join(p, DATA_DIR_LMDB), os.path.join(p, DATA_DIR_SQLITE)
    if os.path.exists(sqlite_file) and not os.path.exists(lmdb_dir):
        return f"sqlite://{sqlite_file}"
    return f"lmdb://{lmdb_dir}"


def open_store(url: str, *, durable_power_loss: bool = False, clock: Clock | None = None) -> Store:
    """Open a Store from a URL. `durable_power_loss` applies to the embedded stores
    (LMDB, SQLite): an fsync before a commit is acknowledged."""
    backend: Backend
    if url.startswith("lmdb:"):
        path = _file_path(url, "lmdb")
        backend = LmdbBackend(path, durable_power_loss=durable_power_loss, clock=clock)
    elif url.startswith("sqlite:"):
        path = _file_path(url, "sqlite")
        backend = SqliteBackend(path, durable_power_loss=durable_power_loss, clock=clock)
    elif url == "memory://":
        backend = MemoryBackend(clock=clock)
    elif url.startswith("tikv://"):
        endpoints = url[len("tikv://") :].split(",")
        if not all(e.strip() for e in endpoints):
            raise ValueError(f"bad store URL {url!r}: empty PD address; use one of {_URL_FORMS}")
        backend = TikvBackend([e.strip() for e in endpoints], clock=clock)
    else:
        raise ValueError(f"unsupported store URL {url!r}: use one of {_URL_FORMS}")
    try:
        store_format.ensure_current(backend)
    except BaseException:
        backend.close()
        raise
    return Store(backend)
