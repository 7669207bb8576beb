"""The SQLite backend: the whole store in one file, table `kv(k BLOB PRIMARY KEY, v BLOB)`.

What it owns: the connection pool, the transaction mapping onto SQLite, and the pragmas.

- WAL journal, so readers never block the writer and a read-only transaction is a real
  snapshot. `synchronous=NORMAL` survives a process crash (SIGKILL) losing nothing that
  was acknowledged; `durable_power_loss=True` selects FULL, which also survives power loss
  at the cost of an fsync per commit.
- Write transactions start with `BEGIN IMMEDIATE`: SQLite serialises writers (across OS
  processes too, through the file lock), so a write transaction never sees a write
  conflict; the runner's group commit keeps that one writer busy. `busy_timeout` is long
  because several processes may share the file and wait for each other's commits.
- BLOB keys compare with memcmp, which is the byte order the seam promises.
- Savepoints cost no SQL until they must: writes are buffered anyway, so while a
  savepoint's writes are all still in the buffer it is rolled back by undoing them there
  (an undo log of each buffered write's previous buffered value) and released by doing
  nothing; a group commit's transitions, each in its own savepoint, then reach SQLite as
  one flush at the commit. Only a flush while a savepoint is open (a scan needs the
  writes in SQLite) turns it into an SQL savepoint, named by depth (`sp0`, `sp1`...) so
  the statements stay in the statement cache.
- Checkpoints run on a thread of the backend (`_Checkpointer`), not inside a COMMIT: the
  writer's own threshold would copy ~1000 WAL pages into the database file during
  whichever call's commit crossed it, a few milliseconds on that one call.
- Writes are buffered (last write per key wins) and reach SQLite as one `executemany` of
  puts and one of deletes: before a scan, a savepoint, a release and the commit. A
  transition writes its job, index entries and outbox row this way in two statements
  instead of five or more. A release flushes, so a failed write surfaces inside the
  transition that made it, never in a later one.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterable
from os import PathLike

from loam_common.store.base import (
    Backend,
    Capabilities,
    Clock,
    StoreUnavailable,
    Txn,
    open_savepoint,
    process_clock,
)

log = logging.getLogger(__name__)

_BUSY_TIMEOUT_S = 30.0
# While commits come, the checkpoint thread copies the WAL into the database file at most
# this often; an idle store is never checkpointed again.
_CHECKPOINT_GAP_S = 0.25
# The writers' own automatic checkpoint stays as a backstop, far above the size the thread
# lets the WAL reach, for a thread that cannot keep up.
_BACKSTOP_CHECKPOINT_PAGES = 10_000
# SQLite's default limit on bound parameters was 999 before 3.32; stay under it.
_IN_CHUNK = 500

_GET = "SELECT v FROM kv WHERE k = ?"
_PUT = "INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)"
_DEL = "DELETE FROM kv WHERE k = ?"
_SCAN = "SELECT k, v FROM kv WHERE k >= ? AND k < ? ORDER BY k LIMIT ?"
_SCAN_REV = "SELECT k, v FROM kv WHERE k >= ? AND k < ? ORDER BY k DESC LIMIT ?"
_SAVEPOINT = [f"SAVEPOINT sp{d}" for d in range(64)]
_ROLLBACK_TO = [f"ROLLBACK TO sp{d}" for d in range(64)]
_RELEASE = [f"RELEASE sp{d}" for d in range(64)]


def _sql(table: list[str], verb: str, depth: int) -> str:
    return table[depth] if depth < len(table) else f"{verb} sp{depth}"


_ABSENT = object()  # in the undo log: the key was not in the write buffer


class _Savepoint:
    """Either live (its SQL SAVEPOINT was issued by a flush) or buffered: every write
    since it was taken is still in the write buffer, and undo-log entries from `mark` on
    undo them."""

    __slots__ = ("txn", "depth", "after_len", "live", "mark")

    def __init__(self, txn: SqliteTxn, depth: int, after_len: int, mark: int) -> None:
        self.txn = txn
        self.depth = depth
        self.after_len = after_len
        self.live = False
        self.mark = mark


class SqliteTxn(Txn):
    """One SQLite transaction on a pooled connection."""

    def __init__(self, backend: SqliteBackend, conn: sqlite3.Connection, read_only: bool) -> None:
        self.clock = backend.clock
        self._backend = backend
        self._conn = conn
        self._read_only = read_only
        # key -> value or None (absent). A transition group reads the same hot keys (queue
        # config, shard meta) over and over; this makes each cost one SELECT per txn.
        self._cache: dict[bytes, bytes | None] = {}
        self._buf: dict[bytes, bytes | None] = {}  # writes not yet sent to SQLite (None: delete)
        self._stack: list[_Savepoint] = []
        #: (key, its previous buffered value or _ABSENT) per write while a buffered
        #: savepoint is open: how such a savepoint is rolled back without SQL
        self._undo: list[tuple[bytes, object]] = []
        self._after: list = []
        self._open = True

    # -- reads ----------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        cache = self._cache
        if key in cache:
            return cache[key]
        row = self._conn.execute(_GET, (key,)).fetchone()
        value = None if row is None else row[0]
        cache[key] = value
        return value

    def batch_get(self, keys: Iterable[bytes]) -> dict[bytes, bytes]:
        cache = self._cache
        keys = list(keys)
        missing = [k for k in dict.fromkeys(keys) if k not in cache]
        for i in range(0, len(missing), _IN_CHUNK):
            chunk = missing[i : i + _IN_CHUNK]
            sql = f"SELECT k, v FROM kv WHERE k IN ({','.join('?' * len(chunk))})"
            found = dict(self._conn.execute(sql, chunk).fetchall())
            for k in chunk:
                cache[k] = found.get(k)
        return {k: v for k in keys if (v := cache[k]) is not None}

    def prefetch(self, keys: Iterable[bytes]) -> None:
        self.batch_get(keys)  # fills the read cache

    def scan(
        self, start: bytes, end: bytes, limit: int | None = None, reverse: bool = False
    ) -> list[tuple[bytes, bytes]]:
        if start >= end or (limit is not None and limit <= 0):
            return []
        if self._buf:
            self._flush()
        sql = _SCAN_REV if reverse else _SCAN
        return self._conn.execute(sql, (start, end, -1 if limit is None else limit)).fetchall()

    def lock_for_update(self, keys: Iterable[bytes]) -> None:
        # BEGIN IMMEDIATE already holds the database's one write lock.
        pass

    # -- writes ---------------------------------------------------------------------
    def _writable(self, key: bytes) -> None:
        if self._read_only:
            raise RuntimeError("write in a read-only transaction")
        if type(key) is not bytes:
            raise TypeError(f"keys are bytes, got {type(key).__name__}")
        if self._stack and not self._stack[-1].live:  # a buffered savepoint is open
            self._undo.append((key, self._buf.get(key, _ABSENT)))

    def put(self, key: bytes, value: bytes) -> None:
        self._writable(key)
        if type(value) is not bytes:
            raise TypeError(f"values are bytes, got {type(value).__name__}")
        self._buf[key] = value
        self._cache[key] = value

    def delete(self, key: bytes) -> None:
        self._writable(key)
        self._buf[key] = None
        self._cache[key] = None

    def _write(self, buf: dict[bytes, bytes | None]) -> None:
        puts = [kv for kv in buf.items() if kv[1] is not None]
        if puts:
            self._conn.executemany(_PUT, puts)
        if len(puts) < len(buf):
            self._conn.executemany(_DEL, [(k,) for k, v in buf.items() if v is None])

    def _flush(self) -> None:
        """Send the buffer to SQLite. Each buffered savepoint becomes an SQL savepoint
        first, between the writes made before it and those made after it."""
        buffered = [sp for sp in self._stack if not sp.live]
        if buffered:
            # The buffer as it was at each savepoint, newest first, by undoing the log.
            state, states, undo = dict(self._buf), [], self._undo
            for sp in reversed(buffered):
                for i in range(len(undo) - 1, sp.mark - 1, -1):
                    key, prev = undo[i]
                    if prev is _ABSENT:
                        state.pop(key, None)
                    else:
                        state[key] = prev  # type: ignore[assignment]
                del undo[sp.mark :]
                states.append(dict(state))
            for sp, before in zip(buffered, reversed(states), strict=True):
                self._write(before)
                self._conn.execute(_sql(_SAVEPOINT, "SAVEPOINT", sp.depth))
                sp.live = True
            self._undo = []
        buf, self._buf = self._buf, {}
        self._write(buf)

    # -- savepoints -----------------------------------------------------------------
    def savepoint(self) -> object:
        if self._read_only:
            raise RuntimeError("savepoint in a read-only transaction")
        sp = _Savepoint(self, len(self._stack), len(self._after), len(self._undo))
        self._stack.append(sp)
        return sp

    def _check(self, sp: object) -> _Savepoint:
        return open_savepoint(self._stack, sp, self)

    def rollback_to(self, savepoint: object) -> None:
        sp = self._check(savepoint)
        del self._stack[sp.depth + 1 :]  # SQLite cancels the later savepoints the same way
        del self._after[sp.after_len :]
        if sp.live:
            # Every buffered write came after the newest live savepoint (a flush makes
            # every open savepoint live), so after this one too: drop them unsent.
            self._buf = {}
            self._undo = []
            self._conn.execute(_sql(_ROLLBACK_TO, "ROLLBACK TO", sp.depth))
            self._cache.clear()
            return
        # Nothing since it reached SQLite: undo the buffered writes made after it.
        buf, cache, undo = self._buf, self._cache, self._undo
        for i in range(len(undo) - 1, sp.mark - 1, -1):
            key, prev = undo[i]
            if prev is _ABSENT:
                buf.pop(key, None)
                cache.pop(key, None)  # read again from SQLite, which never saw the write
            else:
                buf[key] = cache[key] = prev  # type: ignore[assignment]
        del undo[sp.mark :]

    def release(self, savepoint: object) -> None:
        sp = self._check(savepoint)
        del self._stack[sp.depth :]
        if sp.live:
            if self._buf:
                self._flush()
            self._conn.execute(_sql(_RELEASE, "RELEASE", sp.depth))
        # a buffered savepoint's writes stay in the buffer: they now belong to its parent
        if not self._stack or self._stack[-1].live:
            self._undo = []  # no buffered savepoint is left to undo to

    # -- end ------------------------------------------------------------------------
    def commit(self) -> None:
        if not self._open:
            raise RuntimeError("transaction already finished")
        self._open = False
        conn = self._conn
        try:
            if self._buf:
                self._write(self._buf)  # open savepoints end with the transaction
                self._buf = {}
            conn.execute("ROLLBACK" if self._read_only else "COMMIT")
        except sqlite3.Error as e:
            # SQLite is local: a failed COMMIT is a known failure, not an unknown outcome.
            _quiet_rollback(conn)
            raise StoreUnavailable(f"sqlite commit failed: {e}") from e
        finally:
            self._backend._give(conn, self._read_only)
        if not self._read_only:
            self._backend._checkpointer.committed()

    def rollback(self) -> None:
        if not self._open:
            return
        self._open = False
        _quiet_rollback(self._conn)
        self._backend._give(self._conn, self._read_only)


class _Checkpointer:
    """Copies the WAL into the database file (a PASSIVE checkpoint: it never waits for,
    nor blocks, a reader or the writer) on its own connection and thread, after commits,
    at most every `_CHECKPOINT_GAP_S`. A crash at any point loses nothing: until a
    checkpoint completes, the WAL still holds every committed page."""

    def __init__(self, backend: SqliteBackend) -> None:
        self._backend = backend
        self._due = threading.Event()  # set by commits
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._main, name="loam-sqlite-checkpoint", daemon=True)
        self._thread.start()

    def committed(self) -> None:
        if not self._due.is_set():  # a plain read: a commit pays for the lock once per gap
            self._due.set()

    def stop(self) -> None:
        self._stopping.set()
        self._due.set()
        self._thread.join()

    def _main(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                self._due.wait()
                if self._stopping.is_set():
                    return
                self._due.clear()
                try:
                    conn = conn or self._backend._connect()
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                except (sqlite3.Error, StoreUnavailable) as e:
                    # The writers' backstop threshold still bounds the WAL.
                    log.warning("sqlite %s: checkpoint failed: %s", self._backend.path, e)
                if self._stopping.wait(_CHECKPOINT_GAP_S):
                    return
        finally:
            if conn is not None:
                conn.close()


def _quiet_rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass


class SqliteBackend(Backend):
    """One SQLite file. Thread-safe: each transaction takes a pooled connection, and a
    connection is used by one thread at a time (so several Stores may share a backend)."""

    def __init__(
        self,
        path: str | PathLike[str],
        *,
        durable_power_loss: bool = False,
        clock: Clock | None = None,
    ) -> None:
        self.path = str(path)
        self.clock = clock or process_clock()
        self.capabilities = Capabilities(
            group_commit=True, unknown_commit_outcomes=False, multi_process=True, pessimistic=False
        )
        self._synchronous = "FULL" if durable_power_loss else "NORMAL"
        self._lock = threading.Lock()
        self._idle: dict[bool, list[sqlite3.Connection]] = {False: [], True: []}
        self._closed = False
        # Open a writer now: a bad path or a non-WAL file fails here, not on first use.
        conn = self._connect()
        conn.execute("CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID")
        self._idle[False].append(conn)
        self._checkpointer = _Checkpointer(self)

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=_BUSY_TIMEOUT_S,
                isolation_level=None,  # we issue BEGIN/COMMIT ourselves
                check_same_thread=False,  # pooled: used by one thread at a time
                cached_statements=256,
            )
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode.lower() != "wal":
                conn.close()
                raise StoreUnavailable(f"sqlite {self.path}: could not enable WAL (got {mode})")
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            # Savepoints spill touched pages to a temp file per level; keep that in memory.
            conn.execute("PRAGMA temp_store=MEMORY")
            conn.execute(f"PRAGMA busy_timeout={int(_BUSY_TIMEOUT_S * 1000)}")
            conn.execute(f"PRAGMA wal_autocheckpoint={_BACKSTOP_CHECKPOINT_PAGES}")
        except sqlite3.Error as e:
            raise StoreUnavailable(f"sqlite {self.path}: cannot open: {e}") from e
        return conn

    def _take(self, read_only: bool) -> sqlite3.Connection:
        with self._lock:
            if self._closed:
                raise StoreUnavailable(f"sqlite {self.path}: backend is closed")
            idle = self._idle[read_only]
            if idle:
                return idle.pop()
        return self._connect()

    def _give(self, conn: sqlite3.Connection, read_only: bool) -> None:
        with self._lock:
            if not self._closed:
                self._idle[read_only].append(conn)
                return
        conn.close()

    def begin(self, *, pessimistic: bool = False, read_only: bool = False) -> Txn:
        conn = self._take(read_only)
        try:
            if read_only:
                conn.execute("BEGIN")
                # A deferred BEGIN takes its WAL snapshot at the first read; read now so the
                # snapshot is the state at begin(), as on the other backends.
                conn.execute(_GET, (b"",)).fetchone()
            else:
                conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            _quiet_rollback(conn)
            self._give(conn, read_only)
            # Only a writer that held the lock past busy_timeout gets us here.
            raise StoreUnavailable(f"sqlite {self.path}: cannot begin: {e}") from e
        return SqliteTxn(self, conn, read_only)

    def close(self) -> None:
        self._checkpointer.stop()
        with self._lock:
            self._closed = True
            conns = self._idle[False] + self._idle[True]
            self._idle = {False: [], True: []}
        for conn in conns:
            conn.close()
