"""The store seam: an ordered, transactional key-value interface shaped like TiKV's
transactional client. Everything above this module (the job state machine, sweeps,
results) talks to the store only through `Txn`, and only inside `Store.transact` or
`Store.snapshot`.

A transition is a plain synchronous function `fn(tx, *args) -> result`. The store
runs it inside a transaction, retries it on a write conflict or a region error, and
commits. Synchronous on purpose: on SQLite and the in-memory store a transaction is
microseconds of local work, and the group-commit writer runs many of them in one
commit; on TiKV the thin backend runs the same function on the blocking client in a
worker thread. So the state machine is written once for every backend.

Backends implement `Backend` (open a `Txn`) and declare their capabilities;
`loam_common.store.runner.Store` is the one async runner over any backend.
"""

from __future__ import annotations

import abc
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass

from loam_common.effects import Effect


class StoreError(Exception):
    """Base of the errors a backend raises."""


class WriteConflict(StoreError):
    """Another transaction wrote a key this one read or wrote: retry the whole function."""


class RegionError(StoreError):
    """A transient backend fault (TiKV region moved, leader changed): retry."""


class CommitUnknown(StoreError):
    """The commit was sent but its outcome is unknown (a timeout after the request left).

    The runner resolves it by reading the transaction's commit token back; callers
    never see this error.
    """


class StoreUnavailable(StoreError):
    """Retries exhausted, or the backend is unreachable."""


class Clock:
    """The store's clock. Lease deadlines and due times are judged by it, never by a
    worker's clock. The default is the process wall clock in ns since the epoch (UTC)."""

    def now_ns(self) -> int:
        return time.time_ns()


#: Test hooks: a file holding an offset in ns added to the store clock of every process
#: that reads it (the chaos harness's clock jumps), honoured only with LOAM_TEST_HOOKS=1
#: so a stray variable in production cannot move a server's clock.
CLOCK_OFFSET_FILE_ENV = "LOAM_TEST_CLOCK_OFFSET_FILE"
TEST_HOOKS_ENV = "LOAM_TEST_HOOKS"


class OffsetFileClock(Clock):
    """Test only: the wall clock plus the offset (whole ns, may be negative) written in
    `path`, so a harness can jump the clock of running server processes forward and back.
    The file is re-read at most every `reread_s` (by the monotonic clock, which no jump
    moves), so a jump takes effect within that time; a missing or empty file is offset 0."""

    def __init__(self, path: str, reread_s: float = 0.05) -> None:
        self.path, self.reread_s = path, reread_s
        self._offset_ns, self._read_at = 0, float("-inf")

    def offset_ns(self) -> int:
        t = time.monotonic()
        if t - self._read_at >= self.reread_s:
            self._read_at = t
            try:
                with open(self.path, "rb") as f:
                    self._offset_ns = int(f.read().strip() or 0)
            except FileNotFoundError:
                self._offset_ns = 0
            except ValueError:
                pass  # a write caught half-done: keep the last offset, read again next time
        return self._offset_ns

    def now_ns(self) -> int:
        return time.time_ns() + self.offset_ns()


def process_clock() -> Clock:
    """The clock a backend uses when none is given: the wall clock, or under the test
    hooks (LOAM_TEST_HOOKS=1) the offset file named by LOAM_TEST_CLOCK_OFFSET_FILE."""
    path = os.environ.get(CLOCK_OFFSET_FILE_ENV)
    if not path:
        return Clock()
    if os.environ.get(TEST_HOOKS_ENV) != "1":
        logging.getLogger("loam.store").warning(
            "%s is set but ignored: it is a test hook, honoured only with %s=1",
            CLOCK_OFFSET_FILE_ENV,
            TEST_HOOKS_ENV,
        )
        return Clock()
    logging.getLogger("loam.store").warning("test hook: the store clock reads its offset from %s", path)
    return OffsetFileClock(path)


class ManualClock(Clock):
    """A clock tests move by hand."""

    def __init__(self, start_ns: int = 1_700_000_000_000_000_000) -> None:
        self._now = start_ns

    def now_ns(self) -> int:
        return self._now

    def advance(self, ns: int) -> None:
        self._now += ns

    def set(self, ns: int) -> None:
        self._now = ns


def open_savepoint[SP](stack: list[SP], sp: object, txn: object) -> SP:
    """`sp` if it is a savepoint `txn` made and still has open (on its `stack`, where
    each savepoint sits at its `depth`), else ValueError: the embedded backends'
    savepoints are their own objects, checked alike before a rollback or a release."""
    if getattr(sp, "txn", None) is not txn:
        raise ValueError("not a savepoint of this transaction")
    depth = sp.depth  # type: ignore[attr-defined]
    if depth >= len(stack) or stack[depth] is not sp:
        raise ValueError("savepoint already released or rolled past")
    return sp  # type: ignore[return-value]


class Txn(abc.ABC):
    """One transaction: snapshot reads that see this transaction's own writes, buffered
    or direct writes, savepoints, commit. Not thread-safe; used by one function at a time.

    `scan` returns keys in `[start, end)` in byte order (or reverse order), at most
    `limit` of them. `lock_for_update` takes pessimistic locks where the backend has
    them (TiKV) and otherwise records the keys as read so a concurrent write to them is
    a conflict (optimistic backends); SQLite already serialises writers.
    """

    #: the store's clock, shared with the backend
    clock: Clock

    def now_ns(self) -> int:
        return self.clock.now_ns()

    @abc.abstractmethod
    def get(self, key: bytes) -> bytes | None: ...

    @abc.abstractmethod
    def batch_get(self, keys: Iterable[bytes]) -> dict[bytes, bytes]:
        """The keys that exist, with their values; missing keys are absent from the dict."""

    @abc.abstractmethod
    def scan(
        self, start: bytes, end: bytes, limit: int | None = None, reverse: bool = False
    ) -> list[tuple[bytes, bytes]]: ...

    def prefetch(self, keys: Iterable[bytes]) -> None:  # noqa: B027 - optional, a no-op by default
        """A hint: these keys are about to be read one by one. A backend with a read
        cache loads them in one round trip; the others ignore it."""

    @abc.abstractmethod
    def put(self, key: bytes, value: bytes) -> None: ...

    @abc.abstractmethod
    def delete(self, key: bytes) -> None: ...

    @abc.abstractmethod
    def lock_for_update(self, keys: Iterable[bytes]) -> None: ...

    @abc.abstractmethod
    def savepoint(self) -> object:
        """Mark a point to roll back to; returns an opaque token."""

    @abc.abstractmethod
    def rollback_to(self, savepoint: object) -> None:
        """Undo every write made since the savepoint (reads stay recorded)."""

    def release(self, savepoint: object) -> None:  # noqa: B027 - optional, a no-op by default
        """Forget a savepoint (and any taken after it); its writes stay in the transaction.
        Optional: the group-commit runner releases each transition's savepoint so SQLite's
        savepoint stack stays one deep instead of growing with the batch."""

    def has_writes(self) -> bool:
        """Whether the transaction holds a put or a delete. The runner writes a commit
        token only then: a transaction that wrote nothing has no outcome to resolve."""
        return True  # a backend that cannot tell is treated as having written

    @abc.abstractmethod
    def commit(self) -> None:
        """Raises WriteConflict, RegionError or CommitUnknown."""

    @abc.abstractmethod
    def rollback(self) -> None: ...

    # -- effects, run by the runner after a successful commit (loam_common.effects) -----
    def declare(self, effect: Effect) -> None:
        """Have the store's sinks run `effect` once this transaction has committed
        (wake-ups, metrics). Effects declared inside a savepoint that is rolled back
        are dropped."""
        self.declared().append(effect)

    def declared(self) -> list[Effect]:
        """The effects declared so far (a backend truncates the list on rollback_to)."""
        try:
            return self._after  # type: ignore[attr-defined,no-any-return]
        except AttributeError:
            self._after: list[Effect] = []
            return self._after


@dataclass(frozen=True)
class Capabilities:
    #: many transitions may share one transaction, each in its own savepoint
    group_commit: bool
    #: a commit may end with CommitUnknown, so the runner writes commit tokens
    unknown_commit_outcomes: bool
    #: several OS processes may open the same store
    multi_process: bool
    #: pessimistic locks exist (lock_for_update blocks other writers)
    pessimistic: bool
    #: a group-commit batch first runs without a savepoint per call; if a call fails, the
    #: batch's transaction is abandoned and the batch runs again with them (for a backend
    #: whose savepoints cost something per write, and whose abandoned transaction costs
    #: nothing but the work done in it)
    optimistic_batches: bool = False
    #: a commit is quick and waits neither on the disk nor on another client for long (LMDB
    #: without a flush per commit): `transact(..., inline=True)` may run a batch on the
    #: caller's event loop instead of handing it to the writer thread and back
    inline_commits: bool = False


class Backend(abc.ABC):
    capabilities: Capabilities
    clock: Clock

    @abc.abstractmethod
    def begin(self, *, pessimistic: bool = False, read_only: bool = False) -> Txn: ...

    @abc.abstractmethod
    def close(self) -> None: ...
