"""Atomic write batches (spec 003's "cancel in the caller's own transaction, so the
cancel commits with the writes that make it necessary"): enqueues, cancels of jobs that
have not started and result sets, applied in order in one transaction, all or none.

A refused item (a key taken, a job that started, an invalid result key) refuses the
batch: its error is raised with the item's index in front, and the store runner drops
every write the batch made. Nothing is caught here, so nothing partial can commit."""

from __future__ import annotations

from dataclasses import dataclass

from loam_common import results
from loam_common.errors import InvalidArgument, JobsError
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs.insert import check_payload_limit, job_insert
from loam_common.jobs.job_admin import job_cancel
from loam_common.jobs.linked import LinkedQueueTx
from loam_common.jobs.new_job import Enqueued, NewJob
from loam_common.store.base import Txn

MAX_WRITE_BATCH = 1000


@dataclass(frozen=True, slots=True)
class EnqueueWrite:
    queue: str
    job: NewJob


@dataclass(frozen=True, slots=True)
class CancelWrite:
    """Cancel a job that has not started (job_admin.job_cancel's guard)."""

    queue: str
    job_id: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ResultWrite:
    key: str
    value: pb.Payload
    ttl_ns: int = 0


Write = EnqueueWrite | CancelWrite | ResultWrite


@dataclass(frozen=True, slots=True)
class Canceled:
    job_id: str


@dataclass(frozen=True, slots=True)
class ResultStored:
    key: str


WriteOutcome = Enqueued | Canceled | ResultStored


def check_write_batch_size(n: int) -> None:
    if n == 0:
        raise InvalidArgument("items", "a write batch needs at least one item")
    if n > MAX_WRITE_BATCH:
        raise InvalidArgument("items", f"at most {MAX_WRITE_BATCH} items per write batch (got {n})")


def write_batch_all_or_none(tx: Txn, ns: str, writes: list[Write]) -> list[WriteOutcome]:
    """Apply `writes` in order; the first refusal raises, naming `items[i]`."""
    check_write_batch_size(len(writes))
    out: list[WriteOutcome] = []
    for i, w in enumerate(writes):
        try:
            out.append(_apply(tx, ns, w))
        except JobsError as e:
            raise _at_item(e, i) from None
    return out


def _apply(tx: Txn, ns: str, w: Write) -> WriteOutcome:
    if isinstance(w, EnqueueWrite):
        with LinkedQueueTx(tx, ns, w.queue) as qt:
            check_payload_limit(qt, w.job)
            return job_insert(qt, w.job)
    if isinstance(w, CancelWrite):
        job_cancel(tx, ns, w.queue, w.job_id, w.reason)
        return Canceled(w.job_id)
    results.result_set(tx, ns, w.key, w.value, w.ttl_ns)
    return ResultStored(w.key)


def _at_item(e: JobsError, i: int) -> JobsError:
    """`e` with the index of the item that caused it in front of its message (and of
    its field, for an invalid argument): same type, same code."""
    e.message = f"items[{i}]: {e.message}"
    if isinstance(e, InvalidArgument):
        e.field = f"items[{i}].{e.field}"
    return e
