"""`JobAdmin`: one job's admin ops (BullMQ's Job methods, the console's actions) and
queries over a queue's jobs. A job is named by its id or by its job key.

The operator actions (remove, retry, promote, change priority or delay, cancel) are
audited in their own transaction when a caller is acting (facade.audited); a worker's
own writes on its job (progress, logs) are not."""

from __future__ import annotations

from loam_common import validate
from loam_common.errors import InvalidArgument, JobsError
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import job_admin
from loam_common.jobs.query import job_query
from loam_common.store.runner import Store
from loam_common.validate import Namespace
from loam_queue_core.facade.audited import AuditedAction
from loam_queue_core.facade.jobs import INLINE_JOBS, Jobs


class JobAdmin:
    def __init__(self, store: Store, jobs: Jobs) -> None:
        self.store = store
        self.jobs = jobs

    async def resolve(self, ns: Namespace, queue: str, ref: str) -> str:
        """The id of the job `ref` names (its id or its job key). An unknown ref comes
        back as is, so the op itself says what is missing (the queue or the job)."""
        return await self.store.snapshot(
            job_admin.job_resolve, ns, validate.name("queue", queue), job_ref(ref), inline=True
        )

    async def get(self, ns: Namespace, queue: str, job_id: str) -> pb.Job:
        return await self.store.snapshot(job_admin.job_get, ns, queue, job_id, inline=True)

    async def get_by_ref(self, ns: Namespace, queue: str, ref: str) -> pb.Job:
        """The job `ref` names (its id or its job key): one snapshot, not resolve then get."""
        return await self.store.snapshot(
            job_admin.job_get_by_ref, ns, validate.name("queue", queue), job_ref(ref), inline=True
        )

    async def logs(self, ns: Namespace, queue: str, job_id: str, start: int, end: int) -> job_admin.JobLogs:
        """BullMQ's getJobLogs range, `end` inclusive; end 0 = through the last line."""
        return await self.store.snapshot(job_admin.job_logs, ns, queue, job_id, start, end or -1)

    async def remove(self, ns: Namespace, queue: str, job_id: str, children: bool) -> None:
        action = AuditedAction(
            self.store, ns, "job.remove", queue, job_id, "with its children" if children else ""
        )
        await action.transact(job_admin.job_remove, ns, queue, job_id, False, children)

    async def remove_child_dependency(self, ns: Namespace, queue: str, job_id: str) -> bool:
        return await self.store.transact(job_admin.job_remove_child_dependency, ns, queue, job_id)

    async def add_log(self, ns: Namespace, queue: str, job_id: str, line: str, keep: int) -> int:
        return await self.store.transact(job_admin.job_add_log, ns, queue, job_id, line, keep, inline=True)

    async def clear_logs(self, ns: Namespace, queue: str, job_id: str, keep: int) -> int:
        return await self.store.transact(job_admin.job_clear_logs, ns, queue, job_id, keep)

    async def retry(self, ns: Namespace, queue: str, job_id: str, keep_attempts: bool) -> pb.Job:
        action = AuditedAction(
            self.store, ns, "job.retry", queue, job_id, "keeping its attempts" if keep_attempts else ""
        )
        return await action.transact(job_admin.job_retry, ns, queue, job_id, keep_attempts)

    async def promote(self, ns: Namespace, queue: str, job_id: str) -> pb.Job:
        return await AuditedAction(self.store, ns, "job.promote", queue, job_id).transact(
            job_admin.job_promote, ns, queue, job_id
        )

    async def change_priority(
        self, ns: Namespace, queue: str, job_id: str, priority: int, lifo: bool
    ) -> pb.Job:
        detail = f"priority {priority}{' lifo' if lifo else ''}"
        action = AuditedAction(self.store, ns, "job.change-priority", queue, job_id, detail)
        return await action.transact(job_admin.job_change_priority, ns, queue, job_id, priority, lifo)

    async def change_delay(self, ns: Namespace, queue: str, job_id: str, delay_ns: int) -> pb.Job:
        action = AuditedAction(self.store, ns, "job.change-delay", queue, job_id, f"delay {delay_ns} ns")
        return await action.transact(job_admin.job_change_delay, ns, queue, job_id, delay_ns)

    async def update_data(self, ns: Namespace, queue: str, job_id: str, data: pb.Payload) -> pb.Job:
        return await self.jobs.update_data(ns, queue, job_id, data)

    async def report_many(
        self, ns: Namespace, queue: str, reports: list[job_admin.Report]
    ) -> list[int | JobsError | None]:
        """Progress and log lines of many jobs of `queue` in one transaction, in order
        (JobAdminBatch; its caller checks each reference first)."""
        validate.name("queue", queue)
        return await self.store.transact(
            job_admin.job_report_many, ns, queue, reports, inline=len(reports) <= INLINE_JOBS
        )

    async def set_progress(self, ns: Namespace, queue: str, job_id: str, progress: bytes) -> pb.Job:
        return await self.store.transact(job_admin.job_set_progress, ns, queue, job_id, progress, inline=True)

    async def cancel(self, ns: Namespace, queue: str, job_id: str) -> pb.Job:
        return await AuditedAction(self.store, ns, "job.cancel", queue, job_id).transact(
            job_admin.job_cancel, ns, queue, job_id, ""
        )

    # -- by dedup id (BullMQ's deduplication) ------------------------------------------
    async def get_dedup(self, ns: Namespace, queue: str, dedup_id: str) -> pb.Job:
        return await self.store.snapshot(job_admin.job_get_dedup, ns, validate.name("queue", queue), dedup_id)

    async def remove_dedup_key(self, ns: Namespace, queue: str, dedup_id: str) -> bool:
        return await self.store.transact(
            job_admin.job_remove_dedup_key, ns, validate.name("queue", queue), dedup_id
        )

    # -- queries -----------------------------------------------------------------------
    async def query(
        self,
        ns: Namespace,
        queue: str,
        states: list[int],
        name: str | None,
        since_ns: int,
        until_ns: int,
        page_size: int,
        page_token: str,
    ) -> tuple[list[pb.Job], str]:
        """A page of the queue's jobs in the given states, and the next page's token."""
        return await self.store.snapshot(
            job_query, ns, queue, states, name, since_ns, until_ns, page_size, page_token
        )


JOB_REF_BYTES = 256


def job_ref(text: str, field: str = "job") -> str:
    """A job id or key as a caller sends it: not empty, bounded, no `/`."""
    validate.text(field, text, JOB_REF_BYTES, allow_empty=False)
    if "/" in text:
        raise InvalidArgument(field, "a job id or key cannot contain '/'")
    return text


def plainly_job_ref(text: str) -> bool:
    """Whether `job_ref` takes `text`, known without encoding it (at most 4 bytes a
    character): a hot path checks a batch's ids this way and calls `job_ref`, which
    names the field, only for the rest."""
    return 0 < len(text) <= JOB_REF_BYTES // 4 and "/" not in text
