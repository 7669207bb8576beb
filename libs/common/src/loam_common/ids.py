"""Job ids: ULIDs (48-bit ms time + 80 random bits, Crockford base32), monotonic
within one process so ids made in the same millisecond still sort in order."""

from __future__ import annotations

import os
import random
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_lock = threading.Lock()
_last_ms = -1
_last_rand = 0

# The random part of a new millisecond's first id: a generator of this module's own,
# seeded from the OS and again in a forked child (two processes must not draw alike; a
# test seeding the `random` module does not touch it). Not the OS's source for each id:
# ids are no secret, and its system call cost more than the rest of an id.
_random = random.Random()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_random.seed)


# Two base-32 digits at a time: a ULID is 13 lookups instead of 26.
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]


def _encode(value: int, length: int) -> str:
    """`length` base-32 digits of `value` (length even)."""
    out = []
    for _ in range(length // 2):
        out.append(_PAIRS[value & 1023])
        value >>= 10
    return "".join(reversed(out))


def _reserve(n: int, now_ms: int | None) -> tuple[int, int]:
    """The time and the first of `n` consecutive random parts, after every earlier id."""
    global _last_ms, _last_rand
    ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    with _lock:
        if ms <= _last_ms:
            ms = _last_ms
            first = _last_rand + 1
        else:
            _last_ms = ms
            first = _random.getrandbits(79)  # 80 bits less one: room to increment
        _last_rand = first + n - 1
    return ms, first


def new_ulid(now_ms: int | None = None) -> str:
    ms, rand = _reserve(1, now_ms)
    return _ulid(ms, rand)


def _ulid(ms: int, rand: int) -> str:
    """`_encode(ms, 10) + _encode(rand, 16)` written out: half the time of the loop."""
    p = _PAIRS
    return "".join((p[ms >> 40 & 1023], p[ms >> 30 & 1023], p[ms >> 20 & 1023], p[ms >> 10 & 1023], p[ms & 1023],
                    p[rand >> 70 & 1023], p[rand >> 60 & 1023], p[rand >> 50 & 1023], p[rand >> 40 & 1023],
                    p[rand >> 30 & 1023], p[rand >> 20 & 1023], p[rand >> 10 & 1023], p[rand & 1023]))  # fmt: skip


def new_ulids(n: int, now_ms: int | None = None) -> list[str]:
    """`n` ids in increasing order, for one clock read and one lock (a bulk enqueue)."""
    ms, first = _reserve(n, now_ms)
    if n == 1:  # a single enqueue's
        return [_ulid(ms, first)]
    # Consecutive ids differ in their last few digits: encode the time and the high 60
    # random bits once per run of equal high bits, the low 20 bits (4 digits) per id.
    head, pairs = _encode(ms, 10), _PAIRS
    out, high, prefix = [], -1, ""
    for rand in range(first, first + n):
        if rand >> 20 != high:
            high = rand >> 20
            prefix = head + _encode(high, 12)
        out.append(prefix + pairs[(rand >> 10) & 1023] + pairs[rand & 1023])
    return out


def ulid_floor(time_ns: int) -> str:
    """The smallest ULID made at or after `time_ns`: for time-range queries."""
    return _encode(max(time_ns, 0) // 1_000_000, 10) + "0" * 16


def ulid_time_ns(ulid: str) -> int:
    ms = 0
    for ch in ulid[:10]:
        ms = ms * 32 + _ALPHABET.index(ch)
    return ms * 1_000_000
