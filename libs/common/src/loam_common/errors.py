"""The JobsError set of spec §5.3. Each maps one to one onto a Connect code; the
message is written for the user who has to act on it."""

from __future__ import annotations


class JobsError(Exception):
    """`args` are the constructor's arguments, so `type(e)(*e.args)` rebuilds an error
    (pickle, and Celery's exception serialization, rebuild exceptions that way); `str(e)`
    is the message."""

    code = "internal"
    retryable = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class InvalidArgument(JobsError):
    code = "invalid_argument"

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.args = (field, problem)


class NotFound(JobsError):
    code = "not_found"


class AlreadyExists(JobsError):
    code = "already_exists"

    def __init__(self, message: str, existing: str) -> None:
        super().__init__(message)
        self.existing = existing
        self.args = (message, existing)


class IdempotencyConflict(JobsError):
    code = "failed_precondition"

    def __init__(self, key: str) -> None:
        super().__init__(
            f"idempotency key {key!r} was used for a different request; use a new key for a new request"
        )
        self.key = key
        self.args = (key,)


def _fenced_why(epoch: int, current_epoch: int) -> str:
    """Why a completion's epoch does not match: only a lower epoch means the job was
    leased again since; "is stale" stays in every case (clients match on it)."""
    if current_epoch == 0:
        return "the job has never been leased, so this token is not from a lease of it"
    if epoch > current_epoch:
        return "no lease of this job has had that epoch, so this token is not from a lease of it"
    return "the job was reclaimed and leased again, drop this result"


class Fenced(JobsError):
    code = "failed_precondition"

    def __init__(self, job_id: str, epoch: int, current_epoch: int) -> None:
        super().__init__(
            f"job {job_id}: lease epoch {epoch} is stale (current {current_epoch}); "
            + _fenced_why(epoch, current_epoch)
        )
        self.job_id = job_id
        self.epoch = epoch
        self.current_epoch = current_epoch
        self.args = (job_id, epoch, current_epoch)


class InvalidState(JobsError):
    code = "failed_precondition"

    def __init__(self, job_id: str, from_state: str, to: str, message: str | None = None) -> None:
        """`message` replaces the job-shaped one (a queue refusing an operation)."""
        super().__init__(message or f"job {job_id} is {from_state}; cannot {to}")
        self.job_id = job_id
        self.from_state = from_state
        self.to = to
        self.args = (job_id, from_state, to) if message is None else (job_id, from_state, to, message)


class QueuePaused(JobsError):
    code = "unavailable"
    retryable = True


class RateLimited(JobsError):
    code = "resource_exhausted"
    retryable = True

    def __init__(self, message: str, retry_after_ns: int) -> None:
        super().__init__(message)
        self.retry_after_ns = retry_after_ns
        self.args = (message, retry_after_ns)


class PayloadTooLarge(JobsError):
    code = "resource_exhausted"

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"payload of {size} bytes is over the limit of {limit} bytes")
        self.size = size
        self.limit = limit
        self.args = (size, limit)


class Unavailable(JobsError):
    code = "unavailable"
    retryable = True


class DeadlineExceeded(JobsError):
    code = "deadline_exceeded"


class Unauthenticated(JobsError):
    code = "unauthenticated"


class PermissionDenied(JobsError):
    code = "permission_denied"


class Internal(JobsError):
    code = "internal"
