"""The errors an SDK user catches: the typed JobsError classes of spec §5.3 (the same
classes the server raises, from loam_common.errors), plus the exceptions a handler
raises to steer its job's outcome (UnrecoverableError, Retry)."""

from __future__ import annotations

import datetime as dt

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from loam_common.errors import (
    AlreadyExists,
    DeadlineExceeded,
    Fenced,
    IdempotencyConflict,
    Internal,
    InvalidArgument,
    InvalidState,
    JobsError,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    QueuePaused,
    RateLimited,
    Unauthenticated,
    Unavailable,
)

__all__ = [
    "AlreadyExists",
    "DeadlineExceeded",
    "Fenced",
    "IdempotencyConflict",
    "Internal",
    "InvalidArgument",
    "InvalidState",
    "JobsError",
    "NotFound",
    "PayloadTooLarge",
    "PermanentError",
    "PermissionDenied",
    "QueuePaused",
    "RateLimited",
    "Retry",
    "Unauthenticated",
    "Unavailable",
    "UnrecoverableError",
    "from_connect",
    "from_item",
]


class UnrecoverableError(Exception):
    """Raised by a handler: fail the job now, spending no more attempts (BullMQ's
    UnrecoverableError). `dead_letter=True` sends it to the queue's dead-letter queue."""

    def __init__(self, message: str = "", *, dead_letter: bool = False) -> None:
        super().__init__(message)
        self.dead_letter = dead_letter


class PermanentError(UnrecoverableError):
    """Raised by a handler: no retry will fix this error (an expired proof, a refused
    abort). The job fails at once, whatever attempts are left, and its error is marked
    permanent (`JobError.permanent`) so monitoring can tell it from exhausted retries."""


class Retry(Exception):
    """Raised by a handler: retry the job (spending an attempt) after `after` seconds
    instead of the job's backoff."""

    def __init__(
        self, message: str = "retry requested", *, after: float | dt.timedelta | None = None
    ) -> None:
        super().__init__(message)
        self.after = after


def _make(cls: type[JobsError], message: str) -> JobsError:
    err = cls.__new__(cls)
    JobsError.__init__(err, message)
    return err


_BY_CODE: dict[str, type[JobsError]] = {
    "invalid_argument": InvalidArgument,
    "not_found": NotFound,
    "already_exists": AlreadyExists,
    "failed_precondition": InvalidState,
    "unavailable": Unavailable,
    "resource_exhausted": RateLimited,
    "deadline_exceeded": DeadlineExceeded,
    "unauthenticated": Unauthenticated,
    "permission_denied": PermissionDenied,
}


def _fallback(e: ConnectError) -> JobsError:
    """Code → class, used only while loam_common.connect_errors is not installed."""
    return _make(_BY_CODE.get(e.code.value, Internal), e.message)


try:  # the shared mapping, which also reads the ErrorDetail the server attaches
    from loam_common.connect_errors import from_connect as _from_connect
except ImportError:  # pragma: no cover - only before the shared module exists
    _from_connect = _fallback


def from_connect(e: ConnectError) -> JobsError:
    try:
        return _from_connect(e)
    except Exception:  # a mapping bug must not hide the server's error
        return _fallback(e)


def from_item(code: str, message: str) -> JobsError:
    """The typed error of one refused item of a batch call (an ItemError)."""
    try:
        c = Code(code)
    except ValueError:
        c = Code.INTERNAL
    return from_connect(ConnectError(c, message))
