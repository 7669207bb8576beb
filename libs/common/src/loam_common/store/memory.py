"""The in-memory backend: multi-version storage with optimistic concurrency, plus a
seeded fault plan that makes it misbehave the way TiKV can.

What it owns: versioned values, snapshot reads, commit-time conflict detection, and
`FaultPlan`.

- Every committed transaction gets the next commit version. A transaction reads the
  versions at or below its start version, so its snapshot is real even while others commit.
- Writes are buffered in the transaction and applied at commit.
- At commit, a transaction that wrote anything fails with WriteConflict if another
  transaction committed, after it started, any key it read (get, batch_get,
  lock_for_update), any key it wrote, or any key inside a range it scanned (phantom inserts
  and deletes included). That is stricter than TiKV's snapshot isolation, which is the
  safe direction for a test double.
- Old versions are pruned at commit for the keys just written, keeping what the oldest
  open transaction can still read.

One lock guards the version map: the runner's writer thread commits while snapshot
readers run on the event loop, and a second Store may share the backend.
"""

from __future__ import annotations

import enum
import heapq
import random
import threading
from bisect import bisect_left, bisect_right, insort
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from operator import itemgetter

from loam_common.store.base import (
    Backend,
    Capabilities,
    Clock,
    CommitUnknown,
    RegionError,
    Txn,
    WriteConflict,
    process_clock,
)


class Fault(enum.Enum):
    #: WriteConflict at commit; nothing applied
    CONFLICT = "conflict"
    #: RegionError at a read or at commit; nothing applied
    REGION = "region"
    #: the commit applied, then its acknowledgement was lost: CommitUnknown
    UNKNOWN_COMMITTED = "unknown_committed"
    #: CommitUnknown, and nothing was applied
    UNKNOWN_NOT_COMMITTED = "unknown_not_committed"


_COMMIT_FAULTS = (
    Fault.CONFLICT,
    Fault.REGION,
    Fault.UNKNOWN_COMMITTED,
    Fault.UNKNOWN_NOT_COMMITTED,
)


@dataclass
class FaultPlan:
    """Which faults the memory backend injects, drawn from `random.Random(seed)`.

    Probabilities apply per read call (`region_read`) and per commit of a transaction that
    wrote something (the others; at most one fault per commit). Explicit schedules run
    first: `schedule_commits(Fault.CONFLICT, None, Fault.UNKNOWN_COMMITTED)` makes the next
    three commits conflict, succeed, and succeed with a lost acknowledgement. `injected`
    counts what was actually injected, so a test can check its faults happened.
    """

    seed: int = 0
    conflict: float = 0.0
    region_read: float = 0.0
    region_commit: float = 0.0
    unknown_committed: float = 0.0
    unknown_not_committed: float = 0.0
    injected: Counter[Fault] = field(default_factory=Counter, init=False)

    def __post_init__(self) -> None:
        probs = (
            self.conflict,
            self.region_commit,
            self.unknown_committed,
            self.unknown_not_committed,
        )
        if any(p < 0 for p in (*probs, self.region_read)) or sum(probs) > 1 or self.region_read > 1:
            raise ValueError("fault probabilities must be >= 0, and sum to <= 1 per commit")
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()
        self._next_commits: deque[Fault | None] = deque()
        self._next_reads: deque[Fault | None] = deque()
        self._thresholds: list[tuple[float, Fault]] = []
        acc = 0.0
        for fault, p in zip(_COMMIT_FAULTS, probs, strict=True):
            acc += p
            self._thresholds.append((acc, fault))

    def schedule_commits(self, *faults: Fault | None) -> None:
        """The next commits get these faults (None = no fault), before any random draw."""
        with self._lock:
            self._next_commits.extend(faults)

    def schedule_reads(self, *faults: Fault | None) -> None:
        """The next read calls get these faults (only Fault.REGION or None)."""
        if any(f not in (None, Fault.REGION) for f in faults):
            raise ValueError("a read can only fail with Fault.REGION")
        with self._lock:
            self._next_reads.extend(faults)

    def commit_fault(self) -> Fault | None:
        with self._lock:
            if self._next_commits:
                fault = self._next_commits.popleft()
            else:
                r = self._rng.random()
                fault = next((f for acc, f in self._thresholds if r < acc), None)
            if fault is not None:
                self.injected[fault] += 1
            return fault

    def read_fault(self) -> Fault | None:
        with self._lock:
            if self._next_reads:
                fault = self._next_reads.popleft()
            elif self.region_read and self._rng.random() < self.region_read:
                fault = Fault.REGION
            else:
                fault = None
            if fault is not None:
                self.injected[fault] += 1
            return fault


# A scanned range as (low, high, high_inclusive): what the scan actually covered.
_Range = tuple[bytes, bytes, bool]


class MemoryTxn(Txn):
    def __init__(self, backend: MemoryBackend, start: int, read_only: bool) -> None:
        self.clock = backend.clock
        self._backend = backend
        self._start = start
        self._read_only = read_only
        self._writes: dict[bytes, bytes | None] = {}  # None = delete
        self._reads: set[bytes] = set()
        self._ranges: list[_Range] = []
        # (key, had_write, previous buffered value): what rollback_to replays backwards
        self._undo: list[tuple[bytes, bool, bytes | None]] = []
        self._after: list = []
        self._open = True
        self._registered = True  # counted in backend._active (pins its snapshot's versions)

    def _read_fault(self) -> None:
        faults = self._backend.faults
        if faults is not None and faults.read_fault() is Fault.REGION:
            raise RegionError("injected region error on read")

    # -- reads ----------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        self._read_fault()
        if key in self._writes:
            return self._writes[key]
        if not self._read_only:
            self._reads.add(key)
        return self._backend._value_at(key, self._start)

    def batch_get(self, keys: Iterable[bytes]) -> dict[bytes, bytes]:
        self._read_fault()
        out = {}
        writes = self._writes
        backend = self._backend
        with backend._lock:
            for key in keys:
                if key in writes:
                    value = writes[key]
                else:
                    if not self._read_only:
                        self._reads.add(key)
                    value = backend._value_at(key, self._start)
                if value is not None:
                    out[key] = value
        return out

    def scan(
        self, start: bytes, end: bytes, limit: int | None = None, reverse: bool = False
    ) -> list[tuple[bytes, bytes]]:
        if start >= end or (limit is not None and limit <= 0):
            return []
        self._read_fault()
        buffered = sorted(
            (kv for kv in self._writes.items() if start <= kv[0] < end and kv[1] is not None),
            reverse=reverse,
        )
        with self._backend._lock:
            committed = self._backend._iter_range(start, end, self._start, reverse, self._writes)
            merged = heapq.merge(committed, buffered, key=itemgetter(0), reverse=reverse)
            out = list(merged if limit is None else islice(merged, limit))
        if not self._read_only:
            # Record only what the scan covered: a key beyond a limited scan's last result
            # was never looked at, so a write there is not a conflict.
            if limit is not None and len(out) == limit:
                last = out[-1][0]
                self._ranges.append((last, end, False) if reverse else (start, last, True))
            else:
                self._ranges.append((start, end, False))
        return out

    def lock_for_update(self, keys: Iterable[bytes]) -> None:
        if not self._read_only:
            self._reads.update(keys)

    # -- writes ---------------------------------------------------------------------
    def _write(self, key: bytes, value: bytes | None) -> None:
        if self._read_only:
            raise RuntimeError("write in a read-only transaction")
        if type(key) is not bytes:
            raise TypeError(f"keys are bytes, got {type(key).__name__}")
        writes = self._writes
        had = key in writes
        self._undo.append((key, had, writes.get(key)))
        writes[key] = value

    def put(self, key: bytes, value: bytes) -> None:
        if type(value) is not bytes:
            raise TypeError(f"values are bytes, got {type(value).__name__}")
        self._write(key, value)

    def delete(self, key: bytes) -> None:
        self._write(key, None)

    # -- savepoints -----------------------------------------------------------------
    def savepoint(self) -> object:
        return (self, len(self._undo), len(self._after))

    def rollback_to(self, savepoint: object) -> None:
        txn, undo_len, after_len = savepoint  # type: ignore[misc]
        if txn is not self or undo_len > len(self._undo):
            raise ValueError("not a live savepoint of this transaction")
        writes = self._writes
        while len(self._undo) > undo_len:
            key, had, previous = self._undo.pop()
            if had:
                writes[key] = previous
            else:
                del writes[key]
        del self._after[after_len:]

    # -- end ------------------------------------------------------------------------
    def has_writes(self) -> bool:
        return bool(self._writes)

    def commit(self) -> None:
        if not self._open:
            raise RuntimeError("transaction already finished")
        self._open = False
        backend = self._backend
        try:
            if not self._writes:
                return  # a read-only snapshot is consistent by construction
            fault = backend.faults.commit_fault() if backend.faults is not None else None
            if fault is Fault.CONFLICT:
                raise WriteConflict("injected write conflict")
            if fault is Fault.REGION:
                raise RegionError("injected region error at commit")
            if fault is Fault.UNKNOWN_NOT_COMMITTED:
                raise CommitUnknown("injected: commit outcome unknown (not committed)")
            backend._commit(self)
            if fault is Fault.UNKNOWN_COMMITTED:
                raise CommitUnknown("injected: commit outcome unknown (committed)")
        finally:
            backend._end(self)

    def rollback(self) -> None:
        if self._open:
            self._open = False
            self._backend._end(self)


class MemoryBackend(Backend):
    def __init__(self, clock: Clock | None = None, faults: FaultPlan | None = None) -> None:
        self.clock = clock or process_clock()
        self.faults = faults
        self.capabilities = Capabilities(
            group_commit=True, unknown_commit_outcomes=True, multi_process=False, pessimistic=False
        )
        self._lock = threading.RLock()
        # key -> [(commit version, value or None)], ascending by version
        self._versions: dict[bytes, list[tuple[int, bytes | None]]] = {}
        self._keys: list[bytes] = []  # sorted; every key with a stored version (tombstones too)
        self._version = 0
        self._active: Counter[int] = Counter()  # start version -> open transactions

    def begin(self, *, pessimistic: bool = False, read_only: bool = False) -> Txn:
        with self._lock:
            start = self._version
            self._active[start] += 1
        return MemoryTxn(self, start, read_only)

    def close(self) -> None:
        pass

    # -- called by MemoryTxn under (or taking) the lock ----------------------------------
    def _value_at(self, key: bytes, version: int) -> bytes | None:
        with self._lock:
            versions = self._versions.get(key)
            if versions is None:
                return None
            for v, value in reversed(versions):
                if v <= version:
                    return value
            return None

    def _iter_range(
        self, start: bytes, end: bytes, version: int, reverse: bool, skip: dict
    ) -> Iterator[tuple[bytes, bytes]]:
        keys = self._keys
        lo, hi = bisect_left(keys, start), bisect_left(keys, end)
        indexes = range(hi - 1, lo - 1, -1) if reverse else range(lo, hi)
        for i in indexes:
            key = keys[i]
            if key in skip:
                continue
            value = self._value_at(key, version)
            if value is not None:
                yield key, value

    def _changed_since(self, key: bytes, version: int) -> bool:
        versions = self._versions.get(key)
        return versions is not None and versions[-1][0] > version

    def _commit(self, txn: MemoryTxn) -> None:
        with self._lock:
            start = txn._start
            for key in txn._reads:
                if self._changed_since(key, start):
                    raise WriteConflict(f"key {key!r} was written after this transaction began")
            for key in txn._writes:
                if self._changed_since(key, start):
                    raise WriteConflict(f"key {key!r} was written after this transaction began")
            keys = self._keys
            for lo, hi, inclusive in txn._ranges:
                i = bisect_left(keys, lo)
                j = bisect_right(keys, hi) if inclusive else bisect_left(keys, hi)
                for key in keys[i:j]:
                    if self._changed_since(key, start):
                        raise WriteConflict(f"range scan saw a change at {key!r}")
            # Validated: this transaction no longer reads, so it need not pin old versions.
            self._end(txn)
            self._version += 1
            version = self._version
            for key, value in txn._writes.items():
                versions = self._versions.get(key)
                if versions is None:
                    if value is None:
                        continue  # deleting a key that never existed
                    self._versions[key] = [(version, value)]
                    insort(keys, key)
                else:
                    versions.append((version, value))
            self._prune(txn._writes)

    def _prune(self, keys: Iterable[bytes]) -> None:
        """Drop versions no open transaction can read: all but the newest at or below the
        oldest open start version, and a key whose only such version is a tombstone."""
        oldest = min(self._active) if self._active else self._version
        for key in keys:
            versions = self._versions.get(key)
            if versions is None:
                continue
            i = len(versions) - 1
            while i > 0 and versions[i][0] > oldest:
                i -= 1
            if i > 0:
                # Rebind rather than mutate: a reader iterating the old list is unaffected.
                versions = self._versions[key] = versions[i:]
            if len(versions) == 1 and versions[0][1] is None and versions[0][0] <= oldest:
                del self._versions[key]
                del self._keys[bisect_left(self._keys, key)]

    def _end(self, txn: MemoryTxn) -> None:
        with self._lock:
            if not txn._registered:
                return
            txn._registered = False
            self._active[txn._start] -= 1
            if self._active[txn._start] <= 0:
                del self._active[txn._start]
