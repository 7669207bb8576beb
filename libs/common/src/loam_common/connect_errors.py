"""JobsError <-> ConnectError (spec §5.3): the one place the error set meets the wire.

`to_connect` gives each JobsError its Connect code and attaches an `ErrorDetail`
(jobs.proto) naming the error class and its fields, as a standard Connect error
detail (`type.googleapis.com/loam.jobs.v1.ErrorDetail`). Details travel the same way
in Connect JSON, Connect binary (the error body is JSON in both) and gRPC-Web (the
`grpc-status-details-bin` trailer), so `from_connect` rebuilds the same typed error on
any client: a worker that gets `Fenced` reads `current_epoch` off it, a producer that
gets `AlreadyExists` reads `existing`. An error without the detail (a proxy, another
server) still maps to a class by its code alone.

Also here: the HTTP status of each code (Connect's mapping, used by the REST facade)
and `to_connect` for the non-JobsError failures a service can meet (StoreUnavailable,
an already-mapped ConnectError, a bug).
"""

from __future__ import annotations

import logging

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from protobuf.wkt import Any

from loam_common import errors as E
from loam_common.gen.loam.jobs.v1 import types_pb2
from loam_common.store.base import StoreUnavailable

log = logging.getLogger(__name__)

DETAIL_TYPE = types_pb2.ErrorDetail.DESCRIPTOR.full_name  # loam.jobs.v1.ErrorDetail
_TYPE_URL = "type.googleapis.com/" + DETAIL_TYPE

# Connect's HTTP status for each code (connectrpc.com/docs/protocol#error-codes).
HTTP_STATUS: dict[str, int] = {
    "canceled": 499,
    "unknown": 500,
    "invalid_argument": 400,
    "deadline_exceeded": 504,
    "not_found": 404,
    "already_exists": 409,
    "permission_denied": 403,
    "resource_exhausted": 429,
    "failed_precondition": 400,
    "aborted": 409,
    "out_of_range": 400,
    "unimplemented": 501,
    "internal": 500,
    "unavailable": 503,
    "data_loss": 500,
    "unauthenticated": 401,
}

# Every JobsError class by name; the `.code` of each is its Connect code name.
_CLASSES: dict[str, type[E.JobsError]] = {
    c.__name__: c
    for c in (
        E.InvalidArgument,
        E.NotFound,
        E.AlreadyExists,
        E.IdempotencyConflict,
        E.Fenced,
        E.InvalidState,
        E.QueuePaused,
        E.RateLimited,
        E.PayloadTooLarge,
        E.Unavailable,
        E.DeadlineExceeded,
        E.Unauthenticated,
        E.PermissionDenied,
        E.Internal,
    )
}
# A code without a detail: the class that stands for it.
_BY_CODE: dict[str, type[E.JobsError]] = {
    "invalid_argument": E.InvalidArgument,
    "not_found": E.NotFound,
    "already_exists": E.AlreadyExists,
    "failed_precondition": E.InvalidState,
    "unavailable": E.Unavailable,
    "resource_exhausted": E.RateLimited,
    "deadline_exceeded": E.DeadlineExceeded,
    "unauthenticated": E.Unauthenticated,
    "permission_denied": E.PermissionDenied,
    "internal": E.Internal,
}
# The fields each class carries (attribute name = ErrorDetail field, except `job`).
_FIELDS: dict[type[E.JobsError], tuple[str, ...]] = {
    E.InvalidArgument: ("field",),
    E.AlreadyExists: ("existing",),
    E.IdempotencyConflict: ("key",),
    E.Fenced: ("job_id", "epoch", "current_epoch"),
    E.InvalidState: ("job_id", "from_state", "to"),
    E.RateLimited: ("retry_after_ns",),
    E.PayloadTooLarge: ("size", "limit"),
}
_DETAIL_NAME = {"job_id": "job"}


def code_of(name: str) -> Code:
    try:
        return Code(name)
    except ValueError:
        return Code.INTERNAL


def to_connect(e: BaseException) -> ConnectError:
    """The ConnectError for any failure a service method can raise. A JobsError keeps
    its code, message and fields; StoreUnavailable becomes unavailable; a ConnectError
    passes through; anything else is a bug: logged, and internal to the caller."""
    if isinstance(e, ConnectError):
        return e
    if isinstance(e, StoreUnavailable):
        e = E.Unavailable(f"the store is unavailable, retry: {e}")
    if not isinstance(e, E.JobsError):
        log.error("unhandled error in a service method", exc_info=e)
        e = E.Internal(f"internal error ({type(e).__name__}); the server log has the details")
    detail = types_pb2.ErrorDetail(reason=_reason(e), retryable=e.retryable)
    for attr in _FIELDS.get(type(e), ()):
        value = getattr(e, attr, None)
        if value is not None:
            setattr(detail, _DETAIL_NAME.get(attr, attr), value)
    any_detail = Any(type_url=_TYPE_URL, value=detail.SerializeToString())
    return ConnectError(code_of(e.code), e.message, details=[any_detail])


def _reason(e: E.JobsError) -> str:
    for cls in type(e).__mro__:
        if cls.__name__ in _CLASSES:
            return cls.__name__
    return "Internal"


def error_detail(err: ConnectError) -> types_pb2.ErrorDetail | None:
    """The ErrorDetail attached to `err`, if any."""
    for d in err.details:
        if d.type_name == DETAIL_TYPE:
            try:
                return types_pb2.ErrorDetail.FromString(d.message_bytes)
            except Exception:  # noqa: BLE001 - a malformed detail is ignored, like Connect does
                return None
    return None


def from_connect(err: ConnectError) -> E.JobsError:
    """The typed JobsError a ConnectError stands for, with the server's message. Codes
    with no JobsError class (canceled, unknown, unimplemented, ...) give an Internal
    whose `.code` is that code."""
    detail = error_detail(err)
    code = err.code.value
    cls = _CLASSES.get(detail.reason) if detail is not None else None
    if cls is None:
        cls = _BY_CODE.get(code, E.Internal)
    # Bypass the constructors: they compose a message, and the server's is the one to keep.
    out = cls.__new__(cls)
    E.JobsError.__init__(out, err.message)
    for attr in _FIELDS.get(cls, ()):
        value = getattr(detail, _DETAIL_NAME.get(attr, attr)) if detail is not None else None
        if value is None:
            value = "" if attr in ("field", "existing", "key", "job_id", "from_state", "to") else 0
        setattr(out, attr, value)
    if cls.code != code:
        out.code = code  # e.g. unimplemented, or a detail-less code of another class
    return out
