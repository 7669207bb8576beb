"""`Jobs`: a job's life through the core: enqueue, lease (a long-poll), extend,
complete, report, and a new payload. The namespace comes from the caller's credential,
resolved and checked by the transport.

An enqueue of a queue with a poll asleep leases for that poll in its own transaction
and hands it the jobs (decision 0023); the poll then needs no second read."""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

from loam_common import tracing, validate
from loam_common.errors import Fenced, InvalidArgument, JobsError
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import job_admin, quotas
from loam_common.jobs.complete import (
    Completed,
    Outcome,
    Release,
    job_complete_if_leased,
    job_complete_many,
    job_complete_many_then_lease,
    job_extend_if_leased,
    job_report_if_leased,
)
from loam_common.jobs.enqueue import job_enqueue, job_enqueue_then_lease
from loam_common.jobs.lease import job_lease
from loam_common.jobs.new_job import CallKey, Enqueued, NewJob, call_key
from loam_common.jobs.write_batch import (
    Canceled,
    CancelWrite,
    EnqueueWrite,
    ResultWrite,
    Write,
    WriteOutcome,
    check_write_batch_size,
    write_batch_all_or_none,
)
from loam_common.metrics import count_fenced
from loam_common.store.runner import Store
from loam_common.validate import Namespace
from loam_queue_core.facade.audited import AuditedAction, transact_if_rest
from loam_queue_core.facade.payloads import Payloads
from loam_queue_core.facade.quotas import Quotas
from loam_queue_core.waiters import Waiters

log = logging.getLogger(__name__)

MAX_LEASE_BATCH = 1000
MAX_BULK = 10_000
#: a call touching at most this many jobs is small enough for its transaction to run on
#: the event loop (`Store.transact(..., inline=True)`); larger ones go to the writer thread.
#: A worker's lease of its free slots and prefetch (`loam.Worker`: 100 by default) with the
#: completions it carries fits (decision 0050).
INLINE_JOBS = 256

#: A completion: (queue, job id, the lease's epoch, how it finished).
Completion = tuple[str, str, int, Outcome]


class Jobs:
    def __init__(
        self, store: Store, payloads: Payloads, waiters: Waiters, quotas: Quotas | None = None
    ) -> None:
        self.store = store
        self.payloads = payloads
        self.waiters = waiters
        self.quotas = quotas or Quotas(store)  # each namespace's quotas in force
        self._giving_back: set[asyncio.Future] = set()  # hand-backs of polls that left

    # -- producing -------------------------------------------------------------------
    async def enqueue(
        self, ns: Namespace, queue: str, task: pb.TaskSpec, opts: pb.EnqueueOpts | None = None
    ) -> Enqueued:
        new = await self.payloads.new_job(ns, queue, task, opts or pb.EnqueueOpts(), "task")
        span = _enqueue_span(queue, new) if tracing.tracer is not None else None
        try:
            (result,) = await self.enqueue_prepared(ns, queue, [new], False)
        except BaseException as e:
            await self.payloads.drop_unkept([new], None)
            if span is not None:
                tracing.record_error(span, e)
                span.end()
            raise
        if span is not None:
            span.end()
        await self.payloads.drop_unkept([new], [result])
        return result  # type: ignore[return-value]

    async def enqueue_bulk(
        self,
        ns: Namespace,
        queue: str,
        jobs: list[tuple[pb.TaskSpec, pb.EnqueueOpts | None]],
        idempotency: pb.Idempotency | None = None,
    ) -> list[Enqueued | JobsError]:
        """One transaction for the batch; a job refused for its key gets its error in
        its slot, the others go in. Invalid input refuses the whole call. `idempotency`:
        the call's key (a retry gets the first call's answers)."""
        if len(jobs) > MAX_BULK:
            raise InvalidArgument("jobs", f"at most {MAX_BULK} jobs per bulk call (got {len(jobs)})")
        call = call_key(idempotency, jobs) if idempotency is not None else None
        news = await self.payloads.new_jobs(
            ns, queue, [(t, o or pb.EnqueueOpts(), f"jobs[{i}]") for i, (t, o) in enumerate(jobs)]
        )
        spans = [_enqueue_span(queue, n) for n in news] if tracing.tracer is not None else ()
        try:
            results = await self.enqueue_prepared(ns, queue, news, True, call)
        except BaseException:
            await self.payloads.drop_unkept(news, None)
            raise
        finally:
            for span in spans:
                span.end()
        await self.payloads.drop_unkept(news, results)
        return results

    async def enqueue_prepared(
        self, ns: Namespace, queue: str, news: list[NewJob], bulk: bool, call: CallKey | None = None
    ) -> list[Enqueued | JobsError]:
        """The enqueue's transaction. With a poll of `queue` asleep, the same transaction
        leases for it and the poll gets the jobs without reading again (decision 0023)."""
        claim = self.waiters.claim(ns, queue) if any(_may_be_ready(n) for n in news) else None
        if claim is None:
            transact = self._enqueue_transact(ns, queue, news, lambda results: results)
            if quota := await self.quotas.of(ns):
                return await transact(quotas.job_enqueue_within_quota, ns, queue, news, bulk, quota, call)
            return await transact(job_enqueue, ns, queue, news, bulk, call)
        # Shielded: if the caller leaves, the transaction may still commit, and the poll
        # must then get the jobs leased for it, not be told to read again.
        handing = asyncio.ensure_future(self._hand_off(ns, queue, news, bulk, claim, call))
        handing.add_done_callback(_retrieve)
        return await asyncio.shield(handing)

    async def _hand_off(
        self, ns: Namespace, queue: str, news: list[NewJob], bulk: bool, claim: tuple, call: CallKey | None
    ) -> list[Enqueued | JobsError]:
        poll, lease_args = claim
        leased = None
        transact = self._enqueue_transact(ns, queue, news, lambda result: result[0])
        try:
            if quota := await self.quotas.of(ns):
                results, leased = await transact(
                    quotas.job_enqueue_then_lease_within_quota, ns, queue, news, bulk, lease_args, quota, call
                )
            else:
                results, leased = await transact(
                    job_enqueue_then_lease, ns, queue, news, bulk, lease_args, call
                )
        finally:  # the claimed poll always gets an answer, if only "read again"
            jobs = leased.jobs if leased is not None else []
            answered = self.waiters.hand(poll, jobs or None)
        if jobs and not answered:
            await self._give_back(ns, jobs)  # the poll's caller left while the enqueue ran
        return results

    async def _give_back(self, ns: Namespace, jobs: list[pb.Job]) -> None:
        """Jobs leased for a poll whose caller left go back in place (if this fails,
        their leases lapse and the sweeper puts them back)."""
        try:
            await self.complete_many(ns, [(j.queue, j.id, j.epoch, Release()) for j in jobs])
        except Exception:
            log.warning("could not hand back %d jobs leased for a poll that left", len(jobs), exc_info=True)

    def _enqueue_transact(
        self, ns: Namespace, queue: str, news: list[NewJob], results_of: Callable[[Any], list]
    ) -> Callable[..., Awaitable[Any]]:
        """How an enqueue's transaction runs: audited (one record, counting the jobs it
        created; the job kept, for one) when a person enqueues over REST (the console's
        enqueue form, a script with a token); as it is for a producer's Connect enqueue
        (an SDK, a worker), the hot path, which is not audited (decision 0040).
        `results_of` finds the enqueue's results in its transition's result."""
        return transact_if_rest(self.store, ns, "queue.enqueue", queue,
                                lambda: ", ".join(sorted({n.task.name for n in news})),
                                lambda result: _created(results_of(result)),
                                lambda result: _one_job(results_of(result)),
                                inline=len(news) <= INLINE_JOBS)  # fmt: skip

    async def write_batch(self, ns: Namespace, items: list[tuple]) -> list[WriteOutcome]:
        """Several writes in one transaction, all or none (write_batch.py). Each item is
        ("enqueue", queue, task, opts), ("cancel", queue, job id, reason) or
        ("result_set", key, value, ttl_ns). Large payloads go to the blob store first and
        are collected again if the batch is refused."""
        check_write_batch_size(len(items))
        writes: list[Write] = []
        news: list[NewJob] = []
        try:
            for i, item in enumerate(items):
                kind = item[0]
                if kind == "enqueue":
                    _k, queue, task, opts = item
                    validate.name(f"items[{i}].enqueue.queue", queue)
                    new = await self.payloads.new_job(ns, queue, task, opts or pb.EnqueueOpts(),
                                                      f"items[{i}].enqueue.task")  # fmt: skip
                    news.append(new)
                    writes.append(EnqueueWrite(queue, new))
                elif kind == "cancel":
                    _k, queue, job_id, reason = item
                    validate.name(f"items[{i}].cancel.queue", queue)
                    writes.append(CancelWrite(queue, job_id, reason))
                else:
                    _k, key, value, ttl_ns = item
                    writes.append(ResultWrite(key, value, ttl_ns))
            transact = _write_batch_transact(self.store, ns, writes)
            if quota := await self.quotas.of(ns):
                outcomes = await transact(quotas.write_batch_within_quota, ns, writes, quota)
            else:
                outcomes = await transact(write_batch_all_or_none, ns, writes)
        except BaseException:
            await self.payloads.drop_unkept(news, None)
            raise
        await self.payloads.drop_unkept(news, [o for o in outcomes if isinstance(o, Enqueued)])
        return outcomes

    # -- consuming -------------------------------------------------------------------
    async def lease(
        self,
        ns: Namespace,
        queues: list[str],
        worker: str,
        max_jobs: int = 1,
        wait_ns: int = 0,
        names: list[str] | None = None,
        visibility_ns: int = 0,
        subject_batch: int = 0,
    ) -> list[pb.Job]:
        """Up to `max_jobs` jobs from `queues` (in order of preference); waits up to
        `wait_ns` (at most 30 s) for one to arrive. `visibility_ns` sets the lease
        length (0: the job's or the queue's); `subject_batch` leases a run of one
        subject's consecutive jobs together (lease.job_lease)."""
        validate.in_range("wait_ns", wait_ns, 0, validate.MAX_WAIT_NS)
        name_set = check_lease(queues, worker, max_jobs, names, visibility_ns, subject_batch=subject_batch)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + wait_ns / 1e9
        inline = max_jobs <= INLINE_JOBS
        while True:
            # Park before reading, so a job that arrives after the read wakes us.
            fut = self.waiters.park(ns, queues, worker) if wait_ns else None
            try:
                if quota := await self.quotas.of(ns):
                    res = await self.store.transact(quotas.job_lease_within_quota, ns, queues, worker, max_jobs,
                                                    name_set, random.randrange(64), visibility_ns, subject_batch,
                                                    quota, inline=inline)  # fmt: skip
                else:
                    res = await self.store.transact(job_lease, ns, queues, worker, max_jobs, name_set,
                                                    random.randrange(64), visibility_ns, subject_batch,
                                                    inline=inline)  # fmt: skip
                left = give_up - loop.time()
                if res.jobs or fut is None or left <= 0 or self.waiters.ended(fut):
                    return await self.payloads.inline(res.jobs)
                if res.wake_at_ns:  # a delayed job falls due, or a rate window ends
                    left = min(left, max((res.wake_at_ns - self.store.clock.now_ns()) / 1e9, 0.0))
                self.waiters.sleep(fut, queues, (worker, max_jobs, name_set, visibility_ns, subject_batch))
                try:
                    await asyncio.wait_for(asyncio.shield(fut), left)
                except TimeoutError:
                    if self.waiters.claimed(fut):  # an enqueue is leasing for this poll
                        await fut
                    # else look once more; the loop answers empty once the wait is over
                if fut.done() and fut.result():  # jobs an enqueue leased for this poll
                    return await self.payloads.inline(fut.result())
                if self.waiters.ended(fut):  # the worker stopped waiting
                    return []
            except asyncio.CancelledError:
                # The caller left after an enqueue handed this poll its jobs, before they
                # were returned: back in place now rather than when their leases lapse.
                if fut is not None and fut.done() and not fut.cancelled() and fut.result():
                    giving = asyncio.ensure_future(self._give_back(ns, fut.result()))
                    self._giving_back.add(giving)
                    giving.add_done_callback(self._giving_back.discard)
                raise
            finally:
                if fut is not None:
                    self.waiters.unpark(ns, queues, fut, worker)

    def end_lease_wait(self, ns: Namespace, queues: list[str], worker: str) -> int:
        """Answer `worker`'s waiting Leases of `queues` now (Waiters.end)."""
        if not worker:
            raise InvalidArgument("worker", "the worker whose Leases to end is required")
        return self.waiters.end(ns, queues, worker)

    async def extend(self, ns: Namespace, queue: str, job_id: str, epoch: int, by_ns: int) -> int:
        validate.in_range("by_ns", by_ns, 1, 24 * 3600 * 10**9)
        try:
            return await self.store.transact(
                job_extend_if_leased, ns, queue, job_id, epoch, by_ns, inline=True
            )
        except Fenced:
            await self._count_fenced(ns, queue, job_id)
            raise

    async def complete(
        self, ns: Namespace, queue: str, job_id: str, epoch: int, outcome: Outcome
    ) -> Completed:
        outcome = await self.payloads.result(ns, queue, job_id, outcome)
        try:
            return await self.store.transact(
                job_complete_if_leased, ns, queue, job_id, epoch, outcome, inline=True
            )
        except Fenced:
            await self._count_fenced(ns, queue, job_id)
            raise

    async def complete_many(self, ns: Namespace, items: list[Completion]) -> list[Completed | JobsError]:
        """Batched Complete: one transaction, one answer per item."""
        prepared = await self._prepare_outcomes(ns, items)
        results = await self.store.transact(
            job_complete_many, ns, prepared, inline=len(prepared) <= INLINE_JOBS
        )
        await self._count_fenced_items(ns, prepared, results)
        return results

    async def complete_many_then_lease(
        self,
        ns: Namespace,
        items: list[Completion],
        queues: list[str],
        worker: str,
        max_jobs: int,
        names: list[str] | None = None,
        visibility_ns: int = 0,
        subject_batch: int = 0,
    ) -> tuple[list[Completed | JobsError], list[pb.Job]]:
        """Batched Complete, then a Lease that does not wait, in one transaction
        (BullMQ's moveToFinished with fetchNext): the lease sees what the completions
        freed. Invalid lease arguments refuse the whole call before anything is written."""
        name_set = check_lease(queues, worker, max_jobs, names, visibility_ns, "lease.", subject_batch)
        prepared = await self._prepare_outcomes(ns, items)
        results, leased = await self.store.transact(
            job_complete_many_then_lease,
            ns,
            prepared,
            (queues, worker, max_jobs, name_set, random.randrange(64), visibility_ns, subject_batch),
            inline=len(prepared) + max_jobs <= INLINE_JOBS,
        )
        await self._count_fenced_items(ns, prepared, results)
        return results, await self.payloads.inline(leased.jobs)

    async def _prepare_outcomes(self, ns: Namespace, items: list[Completion]) -> list[Completion]:
        """Outcomes with results too large to keep inline moved to the blob store."""
        prepared = []
        for queue, job_id, epoch, outcome in items:
            prepared.append((queue, job_id, epoch, await self.payloads.result(ns, queue, job_id, outcome)))
        return prepared

    async def _count_fenced_items(
        self, ns: Namespace, prepared: list[Completion], results: list[Completed | JobsError]
    ) -> None:
        for (queue, job_id, _e, _o), done in zip(prepared, results, strict=True):
            if isinstance(done, Fenced):
                await self._count_fenced(ns, queue, job_id)

    async def _count_fenced(self, ns: Namespace, queue: str, job_id: str) -> None:
        """loam_jobs_fenced_total: the refused write left nothing, so count it apart
        (only on this refusal path; a failure to count does not hide the Fenced)."""
        try:
            await self.store.transact(count_fenced, ns, queue, job_id)
        except Exception:
            pass

    async def report(
        self,
        ns: Namespace,
        queue: str,
        job_id: str,
        epoch: int,
        *,
        progress: bytes | None = None,
        log_line: str | None = None,
        data: pb.Payload | None = None,
    ) -> None:
        if log_line is not None:
            validate.text("log_line", log_line, 64 * 1024)
        if data is not None:
            data = await self.payloads.replacement(ns, queue, job_id, data)
        # Store.transact passes positional arguments only: bind the keywords here.
        report = functools.partial(job_report_if_leased, progress=progress, log_line=log_line, data=data)
        try:
            await self.store.transact(report, ns, queue, job_id, epoch, inline=True)
        except BaseException as e:
            await self.payloads.drop(data)
            if isinstance(e, Fenced):
                await self._count_fenced(ns, queue, job_id)
            raise

    async def update_data(self, ns: Namespace, queue: str, job_id: str, data: pb.Payload) -> pb.Job:
        """BullMQ's updateData: a new payload for the job, in any state."""
        data = await self.payloads.replacement(ns, queue, job_id, data)
        try:
            detail = f"new payload, {data.size or len(data.data)} bytes"
            action = AuditedAction(self.store, ns, "job.update-data", queue, job_id, detail)
            return await action.transact(job_admin.job_update_data, ns, queue, job_id, data)
        except BaseException:
            await self.payloads.drop(data)
            raise


def check_lease(
    queues: list[str],
    worker: str,
    max_jobs: int,
    names: list[str] | None,
    visibility_ns: int,
    field: str = "",  # the prefix of the fields' names in errors
    subject_batch: int = 0,
) -> frozenset[str] | None:
    """Refuse bad lease arguments; the task-name filter as a set (None: any task)."""
    if not queues:
        raise InvalidArgument(f"{field}queues", "name at least one queue")
    for i, q in enumerate(queues):
        validate.name(f"{field}queues[{i}]", q)
    validate.text(f"{field}worker", worker, 256)
    validate.in_range(f"{field}max", max_jobs, 1, MAX_LEASE_BATCH)
    validate.in_range(f"{field}visibility_ns", visibility_ns, 0, 24 * 3600 * 10**9)
    validate.in_range(f"{field}subject_batch", subject_batch, 0, MAX_LEASE_BATCH)
    return frozenset(names) if names else None


def _retrieve(task: asyncio.Future) -> None:
    """A shielded task whose caller left: its error is the caller's, already raised."""
    if not task.cancelled():
        task.exception()


def _write_batch_transact(store: Store, ns: Namespace, writes: list[Write]) -> Callable[..., Awaitable[Any]]:
    """A write batch's transaction, audited as one record for a REST caller, like an
    enqueue: `jobs.write-batch`, counting the jobs it created and canceled; its queue
    (and job) when it touched one only."""
    queues = sorted({w.queue for w in writes if not isinstance(w, ResultWrite)})

    def detail() -> str:
        kinds = [sum(isinstance(w, k) for w in writes) for k in (EnqueueWrite, CancelWrite, ResultWrite)]
        text = "{} enqueued, {} canceled, {} results set".format(*kinds)
        return text + (f"; queues {', '.join(queues)}" if len(queues) > 1 else "")

    def count(outcomes: list[WriteOutcome]) -> int:
        return sum(1 for o in outcomes if isinstance(o, Canceled) or (isinstance(o, Enqueued) and o.created))

    def job_of(outcomes: list[WriteOutcome]) -> str:
        jobs = {o.job_id for o in outcomes if isinstance(o, Enqueued | Canceled)}
        return jobs.pop() if len(jobs) == 1 else ""

    return transact_if_rest(store, ns, "jobs.write-batch", queues[0] if len(queues) == 1 else "",
                            detail, count, job_of, inline=len(writes) <= INLINE_JOBS)  # fmt: skip


def _one_job(results: list[Enqueued | JobsError]) -> str:
    """The job an enqueue of one job kept (created, or the existing one its key found)."""
    return results[0].job_id if len(results) == 1 and isinstance(results[0], Enqueued) else ""


def _created(results: list[Enqueued | JobsError]) -> int:
    """The jobs an enqueue created (not those refused, nor the existing job a key found)."""
    return sum(1 for r in results if isinstance(r, Enqueued) and r.created)


def _may_be_ready(new: NewJob) -> bool:
    """Whether a new job may be leasable at once (not delayed, not a flow's waiting parent)."""
    return new.init is None and not new.opts.HasField("not_before")


def _enqueue_span(queue: str, new: NewJob):
    """An `enqueue` span (tracing on): a child of the producer's trace context when the
    job carries one (kept), else of the current request; a job without a context gets
    this span's."""
    headers = new.task.headers
    given = headers.get("traceparent")
    span = tracing.start_span(
        f"enqueue {queue}", "producer", given,
        {"messaging.system": "loam", "messaging.destination.name": queue, "messaging.message.id": new.job_id,
         "loam.task": new.task.name},
    )  # fmt: skip
    if not given:
        headers["traceparent"] = tracing.traceparent_of(span)
    return span
