"""Input checks shared by every entry point. A refusal names the field and changes
nothing: every check here runs before a transaction starts."""

from __future__ import annotations

import re
from typing import Any, NewType

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


#: How much of a refused value an error message repeats: enough to recognise it, never
#: a 10,000-character echo of whatever was sent.
ECHO_LIMIT = 64
#: The most attempts a job may have: far beyond any real retry policy, and small enough
#: that a typo (or 2^32 - 1) is refused rather than stored.
MAX_ATTEMPTS = 100_000


def shown(value: object, limit: int = ECHO_LIMIT) -> str:
    """`repr(value)`, cut to `limit` characters with the full length said, for messages."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = len(value) if isinstance(value, str | bytes) else len(text)
    return f"{text[:limit]}... ({size} characters)"


def name(field: str, value: str) -> str:
    if not isinstance(value, str) or not NAME_RE.fullmatch(value):
        raise InvalidArgument(
            field, f"{shown(value)} is not a valid name: use 1-128 of A-Z a-z 0-9 . _ : @ -"
        )
    if value.strip(".") == "":  # `.` and `..` read as path steps in URLs and on disk
        raise InvalidArgument(field, f"{value!r} is not a valid name: it must not be only dots")
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


_ENUM_NUMBERS: dict = {}


def _enum_numbers(enum_type) -> frozenset[int]:
    numbers = _ENUM_NUMBERS.get(enum_type)
    if numbers is None:  # `values()` builds a list from the descriptor on every call
        numbers = _ENUM_NUMBERS[enum_type] = frozenset(enum_type.values())
    return numbers


def enum(field: str, value: int, enum_type) -> int:
    """`value` if it is one of the protobuf enum's numbers (JSON and binary decoders keep
    unknown numbers of an open enum; they mean nothing here). 0 is every proto3 enum's
    first value, and the value of an option left unset: checked without a lookup."""
    if value and value not in _enum_numbers(enum_type):
        raise InvalidArgument(field, f"{value} is not a known {enum_type.DESCRIPTOR.name}")
    return value


def attempts(field: str, value: int) -> int:
    if value > MAX_ATTEMPTS:
        raise InvalidArgument(field, f"must be at most {MAX_ATTEMPTS} (got {value})")
    return value


#: How deep a JSON payload may nest. Every reader (the REST views, the console, SDKs
#: decoding it) must be able to parse what is stored; real payloads stay far shallower.
MAX_JSON_DEPTH = 64
_JSON_STRING_RE = re.compile(rb'"(?:[^"\\]|\\.)*"')
_JSON_BRACKET_RE = re.compile(rb"[\[\]{}]")


def json_depth(data: bytes) -> int:
    """How deep the JSON text `data` nests (its strings skipped); for text that is not
    JSON, the depth its brackets would have."""
    if data.count(b"[") + data.count(b"{") <= MAX_JSON_DEPTH:
        return 0  # cannot be deeper than the limit: the common case costs two scans in C
    depth = deepest = 0
    for m in _JSON_BRACKET_RE.finditer(_JSON_STRING_RE.sub(b"", data)):
        if m.group() in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def is_json_type(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() in ("application/json", "")


def json_payload(field: str, payload: Any) -> None:
    """Refuse a JSON payload (content type application/json, or none) nested deeper than
    MAX_JSON_DEPTH, whatever transport it came by."""
    if is_json_type(payload.content_type) and json_depth(payload.data) > MAX_JSON_DEPTH:
        raise InvalidArgument(field, f"JSON nests deeper than {MAX_JSON_DEPTH} levels")
