"""Payloads and durations at the SDK's edge: Python values to `Payload` (bytes plus a
content type) and back, seconds or timedeltas to int64 ns, datetimes to ns UTC.

The content type decides the decoding, so a job enqueued from Python as a dict comes
back as a dict in a Python worker, and as JSON in any other language."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from loam_common.gen.loam.jobs.v1 import types_pb2 as pb

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"
BYTES = "application/octet-stream"


def encode(value: Any) -> pb.Payload:
    """bytes → octet-stream, str → text, a Payload as is, None → empty, else JSON."""
    if isinstance(value, pb.Payload):
        return value
    if value is None:
        return pb.Payload()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return pb.Payload(data=bytes(value), content_type=BYTES)
    if isinstance(value, str):
        return pb.Payload(data=value.encode(), content_type=TEXT)
    try:
        data = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    except (TypeError, ValueError) as e:
        raise TypeError(f"payload must be bytes, str or JSON-serialisable ({e})") from None
    return pb.Payload(data=data, content_type=JSON)


def decode(payload: pb.Payload | None) -> Any:
    """The inverse of `encode`; unknown content types come back as bytes."""
    if payload is None:
        return None
    ct = payload.content_type.split(";", 1)[0].strip().lower()
    data = payload.data
    if not data and not ct:
        return None
    if ct == JSON or ct.endswith("+json"):
        return json.loads(data) if data else None
    if ct.startswith("text/"):
        return data.decode("utf-8", errors="replace")
    return data


def ns(value: float | int | dt.timedelta | None, field: str = "duration") -> int:
    """Seconds (int or float) or a timedelta → int ns; None → 0."""
    if value is None:
        return 0
    if isinstance(value, dt.timedelta):
        return int(round(value.total_seconds() * 1e9))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{field}: expected seconds or a timedelta, got {type(value).__name__}")
    return int(round(value * 1e9))


def at_ns(value: dt.datetime | float | int, field: str = "time") -> int:
    """A datetime (naive = local time, as `datetime.timestamp` reads it) or a Unix time
    in seconds → ns since the epoch, UTC."""
    if isinstance(value, dt.datetime):
        return int(round(value.timestamp() * 1e9))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{field}: expected a datetime or a Unix time in seconds")
    return int(round(value * 1e9))
