"""`QueueCore`: the JobsService operations as async methods. Each validates its input
before any transaction (bad input changes nothing), runs one state-machine function
through the store runner (which group-commits concurrent calls), and wakes the
long-polls its write may satisfy. The namespace comes from the caller's credential,
which the transport resolves; nothing here reads it from a request body."""

from __future__ import annotations

import asyncio
import functools
import random

from loam_common import flows, ids, schedules, validate
from loam_common.blobs import INLINE_LIMIT, BlobStore, blob_ref
from loam_common.errors import InvalidArgument, JobsError, PayloadTooLarge
from loam_common.gen.loam.jobs.v1 import jobs_pb2, types_pb2 as pb
from loam_common.jobs import states as S
from loam_common.jobs.complete import (
    Completed,
    Outcome,
    job_complete_if_leased,
    job_complete_many,
    job_extend_if_leased,
    job_report_if_leased,
)
from loam_common.jobs.enqueue import Enqueued, NewJob, check_opts, job_enqueue
from loam_common.jobs.lease import job_lease
from loam_common.jobs.queue import DEFAULT_PAYLOAD_LIMIT
from loam_common.store.runner import Store
from loam_queue_core.waiters import Waiters

MAX_LEASE_BATCH = 1000
MAX_BULK = 10_000


class QueueCore:
    def __init__(
        self, store: Store, blobs: BlobStore | None = None, *, payload_limit: int = DEFAULT_PAYLOAD_LIMIT
    ) -> None:
        self.store = store
        self.blobs = blobs
        self.payload_limit = payload_limit
        self.waiters = Waiters()
        flows.add_ready_listener(self.waiters)  # a flow job made ready by a write to another queue

    # -- producing -------------------------------------------------------------------
    async def enqueue(
        self, ns: str, queue: str, task: pb.TaskSpec, opts: pb.EnqueueOpts | None = None
    ) -> Enqueued:
        new = await self._prepare(ns, queue, task, opts or pb.EnqueueOpts(), "task")
        try:
            (result,) = await self.store.transact(job_enqueue, ns, queue, [new])
        except BaseException:
            await self._drop_blob(new, None)
            raise
        await self._drop_blob(new, result)
        self._woke(ns, queue, result)
        return result  # type: ignore[return-value]

    async def enqueue_bulk(
        self, ns: str, queue: str, jobs: list[tuple[pb.TaskSpec, pb.EnqueueOpts | None]]
    ) -> list[Enqueued | JobsError]:
        """One transaction for the batch; a job refused for its key gets its error in
        its slot, the others go in. Invalid input refuses the whole call."""
        if len(jobs) > MAX_BULK:
            raise InvalidArgument("jobs", f"at most {MAX_BULK} jobs per bulk call (got {len(jobs)})")
        news = [
            await self._prepare(ns, queue, t, o or pb.EnqueueOpts(), f"jobs[{i}]") for i, (t, o) in enumerate(jobs)
        ]
        results = await self.store.transact(job_enqueue, ns, queue, news)
        for new, result in zip(news, results, strict=True):
            await self._drop_blob(new, result)
        ready = sum(1 for r in results if isinstance(r, Enqueued) and r.created and r.state in S.READY)
        if ready:
            self.waiters.wake(ns, queue, ready)
        return results

    async def _prepare(self, ns: str, queue: str, task: pb.TaskSpec, opts: pb.EnqueueOpts, field: str) -> NewJob:
        validate.name("namespace", ns)
        validate.name("queue", queue)
        validate.text(f"{field}.name", task.name, 256, allow_empty=False)
        check_opts(opts, f"{field}.opts")
        size = len(task.payload.data)
        if size > self.payload_limit:
            raise PayloadTooLarge(size, self.payload_limit)
        if task.payload.blob_ref:
            raise InvalidArgument(f"{field}.payload.blob_ref", "is set by the server; send the data")
        job_id = ids.new_ulid()
        task.payload.size = size
        if size > INLINE_LIMIT and self.blobs is not None:
            ref = blob_ref(ns, queue, job_id, "payload")
            await self.blobs.put(ref, task.payload.data)
            task.payload.blob_ref = ref
            task.payload.data = b""
        return NewJob(job_id, task, opts)

    async def _drop_blob(self, new: NewJob, result: Enqueued | JobsError | None) -> None:
        """A blob written for a job that was not created is nobody's: delete it."""
        ref = new.task.payload.blob_ref
        if ref and self.blobs is not None and not (isinstance(result, Enqueued) and result.created):
            await self.blobs.delete(ref)

    def _woke(self, ns: str, queue: str, result: Enqueued | JobsError) -> None:
        if isinstance(result, Enqueued) and result.created and result.state in S.READY:
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
    ) -> list[pb.Job]:
        """Up to `max_jobs` jobs from `queues` (in order of preference); waits up to
        `wait_ns` (at most 30 s) for one to arrive."""
        validate.name("namespace", ns)
        if not queues:
            raise InvalidArgument("queues", "name at least one queue")
        for i, q in enumerate(queues):
            validate.name(f"queues[{i}]", q)
        validate.text("worker", worker, 256)
        validate.in_range("max", max_jobs, 1, MAX_LEASE_BATCH)
        validate.in_range("wait_ns", wait_ns, 0, validate.MAX_WAIT_NS)
        name_set = frozenset(names) if names else None
        loop = asyncio.get_running_loop()
        give_up = loop.time() + wait_ns / 1e9
        while True:
            # Park before reading, so a job that arrives after the read wakes us.
            fut = self.waiters.park(ns, queues) if wait_ns else None
            try:
                res = await self.store.transact(
                    job_lease, ns, queues, worker, max_jobs, name_set, random.randrange(64)
                )
                left = give_up - loop.time()
                if res.jobs or fut is None or left <= 0:
                    return await self._inline_payloads(res.jobs)
                if res.wake_at_ns:  # a delayed job falls due, or a rate window ends
                    left = min(left, max((res.wake_at_ns - self.store.clock.now_ns()) / 1e9, 0.0))
                try:
                    await asyncio.wait_for(asyncio.shield(fut), left)
                except TimeoutError:
                    pass  # look once more; the loop answers empty once the wait is over
            finally:
                if fut is not None:
                    self.waiters.unpark(ns, queues, fut)

    async def _inline_payloads(self, jobs: list[pb.Job]) -> list[pb.Job]:
        for job in jobs:
            if job.task.payload.blob_ref and self.blobs is not None:
                job.task.payload.data = await self.blobs.get(job.task.payload.blob_ref)
        return jobs

    async def extend(self, ns: str, queue: str, job_id: str, epoch: int, by_ns: int) -> int:
        validate.in_range("by_ns", by_ns, 1, 24 * 3600 * 10**9)
        return await self.store.transact(job_extend_if_leased, ns, queue, job_id, epoch, by_ns)

    async def complete(self, ns: str, queue: str, job_id: str, epoch: int, outcome: Outcome) -> Completed:
        outcome.check()
        outcome = await self._store_result(ns, queue, job_id, outcome)
        done = await self.store.transact(job_complete_if_leased, ns, queue, job_id, epoch, outcome)
        self._completed(ns, queue)
        return done

    async def complete_many(
        self, ns: str, items: list[tuple[str, str, int, Outcome]]
    ) -> list[Completed | JobsError]:
        """Batched Complete: one transaction, one answer per item."""
        prepared = []
        for queue, job_id, epoch, outcome in items:
            outcome.check()
            prepared.append((queue, job_id, epoch, await self._store_result(ns, queue, job_id, outcome)))
        results = await self.store.transact(job_complete_many, ns, prepared)
        for (queue, _j, _e, outcome), done in zip(prepared, results, strict=True):
            if isinstance(done, Completed):
                self._completed(ns, queue)
        return results

    def _completed(self, ns: str, queue: str) -> None:
        # Any completion can make a job leasable, not only a requeue (release, retry): a
        # finished job frees its subject's next job, a global-concurrency slot, or enqueues
        # a keep-last duplicate. So wake one poll; if it finds nothing it parks again.
        self.waiters.wake(ns, queue, 1)

    async def _store_result(self, ns: str, queue: str, job_id: str, outcome: Outcome) -> Outcome:
        r = outcome.result
        if r is None or len(r.data) <= INLINE_LIMIT or self.blobs is None:
            return outcome
        ref = blob_ref(ns, queue, job_id, f"result-{ids.new_ulid()}")
        await self.blobs.put(ref, r.data)
        stored = pb.Payload(blob_ref=ref, content_type=r.content_type, size=len(r.data))
        return Outcome(outcome.kind, result=stored)

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
        # Store.transact passes positional arguments only: bind the keywords here.
        report = functools.partial(job_report_if_leased, progress=progress, log_line=log_line, data=data)
        await self.store.transact(report, ns, queue, job_id, epoch)

    def wake_all(self, ns: str, queue: str) -> None:
        """After a write that may make many jobs ready (resume, promote, sweeps)."""
        self.waiters.wake(ns, queue, -1)

    # -- schedules (spec §8.1) ---------------------------------------------------------
    async def schedule(self, ns: str, spec: jobs_pb2.ScheduleSpec) -> schedules.Upserted:
        """Create or replace schedule `spec.id`; the same rule again changes nothing."""
        validate.name("namespace", ns)
        schedules.check_schedule(spec)
        up = await self.store.transact(schedules.schedule_upsert, ns, spec)
        for queue in up.fired.ready_queues:  # `immediately` fired a tick
            self.waiters.wake(ns, queue, 1)
        return up

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
    async def flow(self, ns: str, spec: jobs_pb2.FlowSpec) -> flows.Submitted:
        """Create every job of a flow in one transaction; a flow id seen before returns
        that flow's jobs (`created` False)."""
        validate.name("namespace", ns)
        flows.check_flow(spec)
        rhash = flows.request_hash(spec)  # before payloads move to the blob store
        flow_id = spec.id or ids.new_ulid()
        news = [
            await self._prepare(ns, n.queue, n.task, n.opts, f"graph.nodes[{i}]") for i, n in enumerate(spec.nodes)
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
