"""Job ids: ULIDs (48-bit ms time + 80 random bits, Crockford base32), monotonic
within one process so ids made in the same millisecond still sort in order."""

from __future__ import annotations

import os
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_lock = threading.Lock()
_last_ms = -1
_last_rand = 0


# Two base-32 digits at a time: a ULID is 13 lookups instead of 26.
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]


def _encode(value: int, length: int) -> str:
    """`length` base-32 digits of `value` (length even)."""
    out = []
    for _ in range(length // 2):
        out.append(_PAIRS[value & 1023])
        value >>= 10
    return "".join(reversed(out))


def new_ulid(now_ms: int | None = None) -> str:
    global _last_ms, _last_rand
    ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    with _lock:
        if ms <= _last_ms:
            ms = _last_ms
            _last_rand += 1
        else:
            _last_ms = ms
            _last_rand = int.from_bytes(os.urandom(10), "big") >> 1  # room to increment
        rand = _last_rand
    return _encode(ms, 10) + _encode(rand, 16)


def ulid_floor(time_ns: int) -> str:
    """The smallest ULID made at or after `time_ns`: for time-range queries."""
    return _encode(max(time_ns, 0) // 1_000_000, 10) + "0" * 16


def ulid_time_ns(ulid: str) -> int:
    ms = 0
    for ch in ulid[:10]:
        ms = ms * 32 + _ALPHABET.index(ch)
    return ms * 1_000_000
