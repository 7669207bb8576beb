"""`QueueCore`: the JobsService operations as async methods. Each validates its input
before any transaction (bad input changes nothing), runs one state-machine function
through the store runner (which group-commits concurrent calls), and wakes the
long-polls its write may satisfy. The namespace comes from the caller's credential,
which the transport resolves; nothing here reads it from a request body."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import random

from loam_common import ids, results, tracing, validate
from loam_common.blobs import INLINE_LIMIT, BlobStore, blob_ref
from loam_common.errors import Fenced, InvalidArgument, JobsError, PayloadTooLarge
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import exchanges, flows, job_admin, schedules
from loam_common.jobs import states as S
from loam_common.jobs.complete import (
    Completed,
    Ok,
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
from loam_common.jobs.new_job import Enqueued, NewJob, check_opts
from loam_common.jobs.queue import DEFAULT_PAYLOAD_LIMIT, WAKES_A_POLL, add_ready_listener
from loam_common.metrics import PROCESS as METRICS
from loam_common.metrics import count_fenced
from loam_common.store.runner import Store
from loam_queue_core.waiters import Waiters
from loam_queue_core.watch import EventHub

log = logging.getLogger(__name__)

MAX_LEASE_BATCH = 1000

# Result-key long-polls park in the queue waiters under this prefix: queue names cannot
# contain `/`, so the two never meet.
RESULT_WAIT_PREFIX = "results/"
MAX_BULK = 10_000


class QueueCore:
    def __init__(
        self, store: Store, blobs: BlobStore | None = None, *, payload_limit: int = DEFAULT_PAYLOAD_LIMIT
    ) -> None:
        self.store = store
        self.blobs = blobs
        self.payload_limit = payload_limit
        self.waiters = Waiters()
        self.hub = EventHub()  # Watch streams of this process (watch.py)
        add_ready_listener(self.waiters)  # a job made ready by a write to another queue

    # -- producing -------------------------------------------------------------------
    async def enqueue(
        self, ns: str, queue: str, task: pb.TaskSpec, opts: pb.EnqueueOpts | None = None
    ) -> Enqueued:
        new = await self._prepare(ns, queue, task, opts or pb.EnqueueOpts(), "task")
        span = _enqueue_span(queue, new) if tracing.tracer is not None else None
        try:
            (result,), handed = await self._enqueue_and_hand(ns, queue, [new], False)
        except BaseException as e:
            await self._drop_blob(new, None)
            if span is not None:
                tracing.record_error(span, e)
                span.end()
            raise
        if span is not None:
            span.end()
        await self._drop_blob(new, result)
        if isinstance(result, JobsError) or result.job_id not in handed:
            self._woke(ns, queue, result)
        return result  # type: ignore[return-value]

    async def enqueue_bulk(
        self, ns: str, queue: str, jobs: list[tuple[pb.TaskSpec, pb.EnqueueOpts | None]]
    ) -> list[Enqueued | JobsError]:
        """One transaction for the batch; a job refused for its key gets its error in
        its slot, the others go in. Invalid input refuses the whole call."""
        if len(jobs) > MAX_BULK:
            raise InvalidArgument("jobs", f"at most {MAX_BULK} jobs per bulk call (got {len(jobs)})")
        news = await self._prepare_all(
            ns, queue, [(t, o or pb.EnqueueOpts(), f"jobs[{i}]") for i, (t, o) in enumerate(jobs)]
        )
        spans = [_enqueue_span(queue, n) for n in news] if tracing.tracer is not None else ()
        try:
            results, handed = await self._enqueue_and_hand(ns, queue, news, True)
        except BaseException:
            await self._drop_blobs(news, None)
            raise
        finally:
            for span in spans:
                span.end()
        await self._drop_blobs(news, results)
        ready = sum(
            1
            for r in results
            if isinstance(r, Enqueued) and r.created and r.state in S.READY and r.job_id not in handed
        )
        if ready:
            self.waiters.wake(ns, queue, ready)
        elif any(isinstance(r, Enqueued) and r.created and r.state == S.DELAYED for r in results):
            self.waiters.wake(ns, queue, 1)  # a delayed job: see _woke
        return results

    async def _enqueue_and_hand(
        self, ns: str, queue: str, news: list[NewJob], bulk: bool
    ) -> tuple[list[Enqueued | JobsError], set[str]]:
        """The enqueue's transaction. With a poll of `queue` asleep, the same transaction
        leases for it and the poll gets the jobs without reading again (decision 0023).
        Returns the results and the ids of the jobs the poll was handed."""
        claim = self.waiters.claim(ns, queue) if any(_may_be_ready(n) for n in news) else None
        if claim is None:
            return await self.store.transact(job_enqueue, ns, queue, news, bulk), set()
        # Shielded: if the caller leaves, the transaction may still commit, and the poll
        # must then get the jobs leased for it, not be told to read again.
        handing = asyncio.ensure_future(self._hand_off(ns, queue, news, bulk, claim))
        handing.add_done_callback(_retrieve)
        return await asyncio.shield(handing)

    async def _hand_off(
        self, ns: str, queue: str, news: list[NewJob], bulk: bool, claim: tuple
    ) -> tuple[list[Enqueued | JobsError], set[str]]:
        poll, (worker, max_jobs, names, visibility_ns) = claim
        leased = None
        started_ns = self.store.clock.now_ns()
        try:
            results, leased = await self.store.transact(
                job_enqueue_then_lease, ns, queue, news, bulk, (worker, max_jobs, names, visibility_ns)
            )
        finally:  # the claimed poll always gets an answer, if only "read again"
            jobs = leased.jobs if leased is not None else []
            answered = self.waiters.hand(poll, jobs or None)
        if jobs and not answered:
            # The poll's caller left while the enqueue ran: its jobs go back in place (if
            # this fails, their leases lapse and the sweeper puts them back).
            try:
                await self.complete_many(ns, [(j.queue, j.id, j.epoch, Release()) for j in jobs])
            except Exception:  # noqa: BLE001 - the enqueue itself is committed
                log.warning(
                    "could not hand back %d jobs leased for a poll that left", len(jobs), exc_info=True
                )
            jobs = []
        if not jobs:
            return results, set()
        self._leased(ns, leased, worker, started_ns)
        return results, {j.id for j in jobs}

    async def _prepare(
        self, ns: str, queue: str, task: pb.TaskSpec, opts: pb.EnqueueOpts, field: str
    ) -> NewJob:
        (new,) = await self._prepare_all(ns, queue, [(task, opts, field)])
        return new

    async def _prepare_all(
        self, ns: str, queue: str, items: list[tuple[pb.TaskSpec, pb.EnqueueOpts, str]]
    ) -> list[NewJob]:
        """Validate every job first (bad input writes nothing, not even a blob), then give
        each its id and move payloads over the inline limit to the blob store."""
        validate.name("namespace", ns)
        validate.name("queue", queue)
        for task, opts, field in items:
            validate.text(f"{field}.name", task.name, 256, allow_empty=False)
            check_opts(opts, f"{field}.opts")
            size = len(task.payload.data)
            if size > self.payload_limit:
                raise PayloadTooLarge(size, self.payload_limit)
            if task.payload.blob_ref:
                raise InvalidArgument(f"{field}.payload.blob_ref", "is set by the server; send the data")
        news = []
        for (task, opts, _field), job_id in zip(items, ids.new_ulids(len(items)), strict=True):
            task.payload.size = len(task.payload.data)
            news.append(NewJob(job_id, task, opts))
        if self.blobs is not None:
            try:
                for new in news:
                    if new.task.payload.size > INLINE_LIMIT:
                        ref = blob_ref(ns, queue, new.job_id, "payload")
                        await self.blobs.put(ref, new.task.payload.data)
                        new.task.payload.blob_ref = ref
                        new.task.payload.data = b""
            except BaseException:
                await self._drop_blobs(news, None)
                raise
        return news

    async def _drop_blob(self, new: NewJob, result: Enqueued | JobsError | None) -> None:
        await self._drop_blobs([new], None if result is None else [result])

    async def _drop_blobs(self, news: list[NewJob], results: list[Enqueued | JobsError] | None) -> None:
        """Blobs written for jobs that were not created are nobody's: delete them."""
        if self.blobs is None:
            return
        for i, new in enumerate(news):
            ref = new.task.payload.blob_ref
            result = results[i] if results is not None else None
            if ref and not (isinstance(result, Enqueued) and result.created):
                await self.blobs.delete(ref)

    async def publish(
        self, ns: str, exchange: str, kind: int, routing_key: str, task: pb.TaskSpec, opts: pb.EnqueueOpts
    ) -> list[tuple[str, Enqueued | JobsError]]:
        """Route a message by the exchange's stored bindings (exchanges.py) and enqueue a
        copy in every queue it goes to, in one transaction; a copy refused for its key gets
        its error in its slot. No queue: nothing is written (kombu drops unroutable messages)."""
        validate.name("namespace", ns)
        exchanges.check_binding(exchange, routing_key)
        kind = exchanges.check_type(kind)
        queues = await self.store.snapshot(exchanges.route, ns, exchange, kind, routing_key)
        if not queues:
            return []
        news = []
        for q in queues:
            t, o = pb.TaskSpec(), pb.EnqueueOpts()
            t.CopyFrom(task)
            o.CopyFrom(opts)
            news.append((q, await self._prepare(ns, q, t, o, "task")))
        handed: set[str] = set()
        if len(news) == 1:
            # A message routed to one queue (a direct or topic binding) is an enqueue with
            # its error in its slot, so it hands its job to a sleeping poll too.
            ((q, new),) = news
            try:
                results_, handed = await self._enqueue_and_hand(ns, q, [new], True)
            except JobsError as e:  # refused whole (the queue's payload limit): in its slot
                results_ = [e]
        else:
            results_ = await self.store.transact(exchanges.enqueue_routed, ns, news)
        for (q, new), result in zip(news, results_, strict=True):
            await self._drop_blob(new, result)
            if isinstance(result, JobsError) or result.job_id not in handed:
                self._woke(ns, q, result)
        return [(q, r) for (q, _), r in zip(news, results_, strict=True)]

    def _woke(self, ns: str, queue: str, result: Enqueued | JobsError) -> None:
        if isinstance(result, Enqueued) and result.created and result.state in WAKES_A_POLL:
            # A delayed job wakes one poll too: it may fall due before the time the poll
            # sleeps until (a later delayed job's, or the end of its wait), and the poll
            # that reads again sleeps until the new job's due time and leases it then.
            self.waiters.wake(ns, queue, 1)

    # -- consuming -------------------------------------------------------------------
    async def lease(
        self,
        ns: str,
        queues: list[str],
        worker: str,
        max_jobs: int = 1,
        wait_ns: int = 0,
        names: list[str] | None = None,
        visibility_ns: int = 0,
    ) -> list[pb.Job]:
        """Up to `max_jobs` jobs from `queues` (in order of preference); waits up to
        `wait_ns` (at most 30 s) for one to arrive. `visibility_ns` sets the lease
        length (0: the job's or the queue's)."""
        validate.in_range("wait_ns", wait_ns, 0, validate.MAX_WAIT_NS)
        name_set = _check_lease(ns, queues, worker, max_jobs, names, visibility_ns)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + wait_ns / 1e9
        while True:
            # Park before reading, so a job that arrives after the read wakes us.
            fut = self.waiters.park(ns, queues) if wait_ns else None
            try:
                started_ns = self.store.clock.now_ns()
                res = await self.store.transact(
                    job_lease, ns, queues, worker, max_jobs, name_set, random.randrange(64), visibility_ns
                )
                if res.jobs:
                    self._leased(ns, res, worker, started_ns)
                left = give_up - loop.time()
                if res.jobs or fut is None or left <= 0:
                    return await self._inline_payloads(res.jobs)
                if res.wake_at_ns:  # a delayed job falls due, or a rate window ends
                    left = min(left, max((res.wake_at_ns - self.store.clock.now_ns()) / 1e9, 0.0))
                self.waiters.sleep(fut, queues, (worker, max_jobs, name_set, visibility_ns))
                try:
                    await asyncio.wait_for(asyncio.shield(fut), left)
                except TimeoutError:
                    if self.waiters.claimed(fut):  # an enqueue is leasing for this poll
                        await fut
                    # else look once more; the loop answers empty once the wait is over
                if fut.done() and fut.result():  # jobs an enqueue leased for this poll
                    return await self._inline_payloads(fut.result())
            finally:
                if fut is not None:
                    self.waiters.unpark(ns, queues, fut)

    def _leased(self, ns: str, res, worker: str, started_ns: int) -> None:
        """Metrics (lease latency) and, with tracing on, one `lease` span per job."""
        waited_by_queue: dict[str, list[int]] = {}
        for job, waited in zip(res.jobs, res.waited_ns, strict=False):
            waited_by_queue.setdefault(job.queue, []).append(waited)
        for queue, waited in waited_by_queue.items():
            METRICS.observe_lease(ns, queue, *waited)
        if tracing.tracer is None:
            return
        for job in res.jobs:
            span = tracing.start_span(
                f"lease {job.queue}", "consumer", job.task.headers.get("traceparent"),
                {"messaging.system": "loam", "messaging.destination.name": job.queue,
                 "messaging.message.id": job.id, "loam.ns": ns, "loam.worker": worker,
                 "loam.attempt": job.attempt + 1, "loam.epoch": job.epoch},
                started_ns,
            )  # fmt: skip
            span.end()

    async def _inline_payloads(self, jobs: list[pb.Job]) -> list[pb.Job]:
        for job in jobs:
            if job.task.payload.blob_ref and self.blobs is not None:
                job.task.payload.data = await self.blobs.get(job.task.payload.blob_ref)
        return jobs

    async def extend(self, ns: str, queue: str, job_id: str, epoch: int, by_ns: int) -> int:
        validate.in_range("by_ns", by_ns, 1, 24 * 3600 * 10**9)
        try:
            return await self.store.transact(job_extend_if_leased, ns, queue, job_id, epoch, by_ns)
        except Fenced:
            await self._count_fenced(ns, queue, job_id)
            raise

    async def complete(self, ns: str, queue: str, job_id: str, epoch: int, outcome: Outcome) -> Completed:
        outcome = await self._store_result(ns, queue, job_id, outcome)
        started_ns = self.store.clock.now_ns()
        try:
            done = await self.store.transact(job_complete_if_leased, ns, queue, job_id, epoch, outcome)
        except Fenced:
            await self._count_fenced(ns, queue, job_id)
            raise
        self._observe_completed(ns, queue, job_id, outcome, done, started_ns)
        return done

    def _observe_completed(
        self, ns: str, queue: str, job_id: str, outcome: Outcome, done: Completed, started_ns: int
    ) -> None:
        METRICS.observe_run(ns, queue, done.task, done.run_ns)
        self._trace_completed(ns, queue, job_id, outcome, done, started_ns)

    def _trace_completed(
        self, ns: str, queue: str, job_id: str, outcome: Outcome, done: Completed, started_ns: int
    ) -> None:
        if tracing.tracer is not None:
            span = tracing.start_span(
                f"complete {queue}", "consumer", done.traceparent,
                {"messaging.system": "loam", "messaging.destination.name": queue, "messaging.message.id": job_id,
                 "loam.ns": ns, "loam.outcome": outcome.kind, "loam.state": done.state},
                started_ns,
            )  # fmt: skip
            span.end()

    async def _count_fenced(self, ns: str, queue: str, job_id: str) -> None:
        """loam_jobs_fenced_total: the refused write left nothing, so count it apart
        (only on this refusal path; a failure to count does not hide the Fenced)."""
        try:
            await self.store.transact(count_fenced, ns, queue, job_id)
        except Exception:  # noqa: BLE001
            pass

    async def complete_many(
        self, ns: str, items: list[tuple[str, str, int, Outcome]]
    ) -> list[Completed | JobsError]:
        """Batched Complete: one transaction, one answer per item."""
        prepared = await self._prepare_outcomes(ns, items)
        started_ns = self.store.clock.now_ns()
        results = await self.store.transact(job_complete_many, ns, prepared)
        await self._after_complete_many(ns, prepared, results, started_ns)
        return results

    async def complete_many_then_lease(
        self,
        ns: str,
        items: list[tuple[str, str, int, Outcome]],
        queues: list[str],
        worker: str,
        max_jobs: int,
        names: list[str] | None = None,
        visibility_ns: int = 0,
    ) -> tuple[list[Completed | JobsError], list[pb.Job]]:
        """Batched Complete, then a Lease that does not wait, in one transaction
        (BullMQ's moveToFinished with fetchNext): the lease sees what the completions
        freed. Invalid lease arguments refuse the whole call before anything is written."""
        name_set = _check_lease(ns, queues, worker, max_jobs, names, visibility_ns, "lease.")
        prepared = await self._prepare_outcomes(ns, items)
        started_ns = self.store.clock.now_ns()
        results, leased = await self.store.transact(
            job_complete_many_then_lease,
            ns,
            prepared,
            (queues, worker, max_jobs, name_set, random.randrange(64), visibility_ns),
        )
        await self._after_complete_many(ns, prepared, results, started_ns)
        if leased.jobs:
            self._leased(ns, leased, worker, started_ns)
        return results, await self._inline_payloads(leased.jobs)

    async def _prepare_outcomes(
        self, ns: str, items: list[tuple[str, str, int, Outcome]]
    ) -> list[tuple[str, str, int, Outcome]]:
        """Outcomes checked, and results too large to keep inline moved to the blob store."""
        prepared = []
        for queue, job_id, epoch, outcome in items:
            if (
                isinstance(outcome, Ok)
                and outcome.result is not None
                and len(outcome.result.data) > INLINE_LIMIT
            ):
                outcome = await self._store_result(ns, queue, job_id, outcome)
            prepared.append((queue, job_id, epoch, outcome))
        return prepared

    async def _after_complete_many(
        self,
        ns: str,
        prepared: list[tuple[str, str, int, Outcome]],
        results: list[Completed | JobsError],
        started_ns: int,
    ) -> None:
        """Metrics and traces of a batch, once per queue where they can be. (A completion
        that makes a job leasable wakes a poll from its transaction: QueueTx.move.)"""
        run_ns: dict[tuple[str, str], list[int]] = {}  # (queue, task) -> run times
        for (queue, job_id, _e, outcome), done in zip(prepared, results, strict=True):
            if isinstance(done, Completed):
                run_ns.setdefault((queue, done.task), []).append(done.run_ns)
                self._trace_completed(ns, queue, job_id, outcome, done, started_ns)
            elif isinstance(done, Fenced):
                await self._count_fenced(ns, queue, job_id)
        for (queue, task), runs in run_ns.items():
            METRICS.observe_run(ns, queue, task, *runs)

    async def _store_result(self, ns: str, queue: str, job_id: str, outcome: Outcome) -> Outcome:
        r = outcome.result if isinstance(outcome, Ok) else None
        if r is None or len(r.data) <= INLINE_LIMIT or self.blobs is None:
            return outcome
        ref = blob_ref(ns, queue, job_id, f"result-{ids.new_ulid()}")
        await self.blobs.put(ref, r.data)
        stored = pb.Payload(blob_ref=ref, content_type=r.content_type, size=len(r.data))
        return dataclasses.replace(outcome, result=stored)

    async def report(
        self,
        ns: str,
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
            data = await self._payload_in_blob(ns, queue, job_id, data)
        # Store.transact passes positional arguments only: bind the keywords here.
        report = functools.partial(job_report_if_leased, progress=progress, log_line=log_line, data=data)
        try:
            await self.store.transact(report, ns, queue, job_id, epoch)
        except BaseException as e:
            await self._drop_payload_blob(data)
            if isinstance(e, Fenced):
                await self._count_fenced(ns, queue, job_id)
            raise

    async def update_data(self, ns: str, queue: str, job_id: str, data: pb.Payload) -> pb.Job:
        """BullMQ's updateData: a new payload for the job, in any state."""
        data = await self._payload_in_blob(ns, queue, job_id, data)
        try:
            return await self.store.transact(job_admin.job_update_data, ns, queue, job_id, data)
        except BaseException:
            await self._drop_payload_blob(data)
            raise

    async def _payload_in_blob(self, ns: str, queue: str, job_id: str, data: pb.Payload) -> pb.Payload:
        """A replacement payload, checked like an enqueued one; over the inline limit it
        goes to the blob store, as at enqueue, so the job record stays small."""
        if data.blob_ref:
            raise InvalidArgument("data.blob_ref", "is set by the server; send the data")
        if len(data.data) > self.payload_limit:
            raise PayloadTooLarge(len(data.data), self.payload_limit)
        if len(data.data) <= INLINE_LIMIT or self.blobs is None:
            return data
        ref = blob_ref(ns, queue, job_id, f"payload-{ids.new_ulid()}")
        await self.blobs.put(ref, data.data)
        return pb.Payload(blob_ref=ref, content_type=data.content_type, size=len(data.data))

    async def _drop_payload_blob(self, data: pb.Payload | None) -> None:
        """A replacement payload's blob whose transaction did not commit is nobody's."""
        if data is not None and data.blob_ref and self.blobs is not None:
            await self.blobs.delete(data.blob_ref)

    # -- the result store's long-poll ------------------------------------------------------
    async def result_get(
        self, ns: str, key: str, wait_ns: int = 0, after_version: int = 0
    ) -> tuple[pb.Payload | None, int]:
        """The value under `key` and its version; with `wait_ns`, while the version is
        `after_version`, wait for a write to the key (`result_changed`) up to wait_ns."""
        validate.name("namespace", ns)
        validate.in_range("wait_ns", wait_ns, 0, validate.MAX_WAIT_NS)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + wait_ns / 1e9
        slot = [RESULT_WAIT_PREFIX + key]
        while True:
            fut = self.waiters.park(ns, slot) if wait_ns else None
            try:
                value, version = await self.store.snapshot(results.result_get_versioned, ns, key)
                left = give_up - loop.time()
                if fut is None or version != after_version or left <= 0:
                    return value, version
                try:
                    await asyncio.wait_for(asyncio.shield(fut), left)
                except TimeoutError:
                    pass
            finally:
                if fut is not None:
                    self.waiters.unpark(ns, slot, fut)

    def result_changed(self, ns: str, key: str) -> None:
        """After a write of a result key: wake its long-polls."""
        self.waiters.wake(ns, RESULT_WAIT_PREFIX + key, -1)

    def wake_all(self, ns: str, queue: str) -> None:
        """After a write that may make many jobs ready (resume, promote, sweeps). Also
        wakes the queue's Watch streams: the sweeper process calls this after its sweeps."""
        self.waiters.wake(ns, queue, -1)
        self.hub.notify(ns, queue)

    # -- schedules (spec §8.1) ---------------------------------------------------------
    async def schedule(self, ns: str, spec: pb.ScheduleSpec) -> schedules.Upserted:
        """Create or replace schedule `spec.id`; the same rule again changes nothing."""
        validate.name("namespace", ns)
        schedules.check_schedule(spec)
        up = await self.store.transact(schedules.schedule_upsert, ns, spec)
        for queue in up.fired.ready_queues:  # `immediately` fired a tick
            self.waiters.wake(ns, queue, 1)
        return up

    async def schedule_iterate(self, ns: str, req: schedules.Iteration) -> schedules.Iterated:
        """An iteration-driven schedule (BullMQ's job schedulers): upsert it or advance
        it by one, with the iteration's job in the same transaction."""
        validate.name("namespace", ns)
        schedules.check_iteration(req)
        if not req.advance:
            schedules.check_schedule(req.spec)
        it = await self.store.transact(schedules.schedule_iterate, ns, req)
        if it.job is not None and it.job.created:
            self._woke(ns, it.schedule.queue, it.job)
        return it

    async def unschedule(self, ns: str, schedule_id: str) -> bool:
        validate.name("namespace", ns)
        validate.text("id", schedule_id, 1024, allow_empty=False)
        return await self.store.transact(schedules.schedule_remove, ns, schedule_id)

    async def schedule_get(self, ns: str, schedule_id: str) -> pb.ScheduleRecord:
        validate.name("namespace", ns)
        validate.text("id", schedule_id, 1024, allow_empty=False)
        return await self.store.snapshot(schedules.schedule_get, ns, schedule_id)

    async def schedule_list(
        self, ns: str, after: str = "", limit: int = 100
    ) -> tuple[list[pb.ScheduleRecord], str]:
        """A page of schedules in id order and the token (an id) for the next page."""
        validate.name("namespace", ns)
        validate.text("page_token", after, 1024)
        return await self.store.snapshot(schedules.schedule_list, ns, after, limit or 100)

    # -- flows (spec §8.2) ---------------------------------------------------------------
    async def flow(self, ns: str, spec: pb.FlowSpec) -> flows.Submitted:
        """Create every job of a flow in one transaction; a flow id seen before returns
        that flow's jobs (`created` False)."""
        validate.name("namespace", ns)
        flows.check_flow(spec)
        rhash = flows.request_hash(spec)  # before payloads move to the blob store
        flow_id = spec.id or ids.new_ulid()
        news = [
            await self._prepare(ns, n.queue, n.task, n.opts, f"graph.nodes[{i}]")
            for i, n in enumerate(spec.nodes)
        ]
        created = False
        try:
            sub = await self.store.transact(flows.flow_submit, ns, flow_id, rhash, spec, news)
            created = sub.created
        finally:
            if not created and self.blobs is not None:
                for new in news:
                    if new.task.payload.blob_ref:
                        await self.blobs.delete(new.task.payload.blob_ref)
        for queue in sub.ready_queues:
            self.waiters.wake(ns, queue, -1)
        return sub

    async def flow_get(self, ns: str, flow_id: str) -> pb.FlowRecord:
        validate.name("namespace", ns)
        validate.text("id", flow_id, 1024, allow_empty=False)
        return await self.store.snapshot(flows.flow_get, ns, flow_id)

    async def children_values(self, ns: str, queue: str, job_id: str) -> list[pb.Dependency]:
        """A parent's dependencies with their state, result and failure (BullMQ's
        getChildrenValues and friends); results held in the blob store are inlined."""
        validate.name("namespace", ns)
        deps = await self.store.snapshot(flows.children_of, ns, queue, job_id)
        for dep in deps:
            ref = dep.value.blob_ref
            if ref and self.blobs is not None:
                try:
                    dep.value.data = await self.blobs.get(ref)
                except FileNotFoundError:
                    pass  # the child was removed by retention and its result blob with it
        return deps


def _check_lease(
    ns: str,
    queues: list[str],
    worker: str,
    max_jobs: int,
    names: list[str] | None,
    visibility_ns: int,
    field: str = "",  # the prefix of the fields' names in errors
) -> frozenset[str] | None:
    """Refuse bad lease arguments; the task-name filter as a set (None: any task)."""
    validate.name("namespace", ns)
    if not queues:
        raise InvalidArgument(f"{field}queues", "name at least one queue")
    for i, q in enumerate(queues):
        validate.name(f"{field}queues[{i}]", q)
    validate.text(f"{field}worker", worker, 256)
    validate.in_range(f"{field}max", max_jobs, 1, MAX_LEASE_BATCH)
    validate.in_range(f"{field}visibility_ns", visibility_ns, 0, 24 * 3600 * 10**9)
    return frozenset(names) if names else None


def _retrieve(task: asyncio.Future) -> None:
    """A shielded task whose caller left: its error is the caller's, already raised."""
    if not task.cancelled():
        task.exception()


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
