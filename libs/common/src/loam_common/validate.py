"""Input checks shared by every entry point. A refusal names the field and changes
nothing: every check here runs before a transaction starts."""

from __future__ import annotations

import re
from typing import NewType

from loam_common.errors import InvalidArgument

#: A namespace checked once, where it enters: from a credential (a token's record), a dev
#: header, or an internal call's header. Everything past the transports takes it as is.
Namespace = NewType("Namespace", str)

# The spec's `[a-z0-9._:-]{1,128}`, widened to upper case and `@` because real Celery
# and BullMQ queue names use them. `/` stays out: it separates key components.
NAME_RE = re.compile(r"[A-Za-z0-9._:@-]{1,128}")
PRIORITY_LIMIT = 2**21 - 1
MAX_SHARDS = 64
MAX_WAIT_NS = 30_000_000_000


def name(field: str, value: str) -> str:
    if not isinstance(value, str) or not NAME_RE.fullmatch(value):
        raise InvalidArgument(field, f"{value!r} is not a valid name: use 1-128 of A-Z a-z 0-9 . _ : @ -")
    return value


def namespace(value: str, field: str = "namespace") -> Namespace:
    """`value` as a Namespace, or InvalidArgument naming `field`."""
    try:
        return Namespace(name(field, value))
    except InvalidArgument as e:  # the message names the value; keep the field's name
        raise InvalidArgument(field, e.message.partition(": ")[2]) from None


def text(field: str, value: str, limit: int = 1024, allow_empty: bool = True) -> str:
    if not allow_empty and not value:
        raise InvalidArgument(field, "must not be empty")
    if len(value.encode()) > limit:
        raise InvalidArgument(field, f"is longer than {limit} bytes")
    return value


# Bounds that keep `now + duration` and absolute times inside int64 ns (year 2262): a
# duration of at most 100 years, a point in time before 2200.
MAX_DURATION_NS = 100 * 365 * 24 * 3600 * 1_000_000_000
MAX_TIME_NS = 7_258_118_400 * 1_000_000_000  # 2200-01-01T00:00:00Z


def duration_ns(field: str, value: int) -> int:
    non_negative(field, value)
    if value > MAX_DURATION_NS:
        raise InvalidArgument(field, f"must be at most 100 years in ns (got {value})")
    return value


def time_ns(field: str, value: int) -> int:
    non_negative(field, value)
    if value > MAX_TIME_NS:
        raise InvalidArgument(field, f"must be before the year 2200 in ns since the epoch (got {value})")
    return value


def non_negative(field: str, value: int) -> int:
    if value < 0:
        raise InvalidArgument(field, f"must not be negative (got {value})")
    return value


def in_range(field: str, value: int | float, low: int | float, high: int | float) -> None:
    if not low <= value <= high:
        raise InvalidArgument(field, f"must be between {low} and {high} (got {value})")
