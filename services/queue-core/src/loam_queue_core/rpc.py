"""`CoreRpc`: the JobsService methods as `(ns, request) -> response`, mapping the
protobuf messages of jobs.proto onto `QueueCore` and the admin, query and result
functions, and their answers back. No transport here: the queue-core server and the
gateway (in process, in dev) call it with the namespace they resolved from the
caller's credential. Errors are JobsErrors (loam_common.connect_errors maps them),
except the methods other issues bring, which raise Unimplemented (`UNIMPLEMENTED`).
The engine methods go to the engine runner's `engines` object when one is given
(loam_engines.rpc.EngineRpc, same `(ns, request) -> response` shape), else they too
answer Unimplemented.

Bulk admin ops run their batch transaction again while a batch comes back full, so
one call drains, cleans or retries a whole queue, each transaction bounded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from loam_common import events, exchanges, keys, results, schedules, validate
from loam_common.errors import InvalidArgument, JobsError
from loam_common.gen.loam.jobs.v1 import jobs_connect
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import admin, job_admin
from loam_common.jobs import states as S
from loam_common.jobs.complete import Completed, Outcome, queue_metrics
from loam_common.jobs.enqueue import Enqueued
from loam_common.jobs.query import job_query
from loam_common.store.base import Txn
from loam_queue_core.core import QueueCore
from loam_queue_core.watch import watch as watch_stream

# The methods that arrive with later issues: method -> the work that brings it.
UNIMPLEMENTED: dict[str, str] = {}
# Served by the engine runner when this CoreRpc has one (`engines=`).
ENGINE_METHODS: tuple[str, ...] = (
    "submit_engine_job",
    "control_engine_job",
    "get_engine_run",
    "list_engine_runs",
    "list_engine_run_logs",
)
NO_ENGINES = "the engine runner (loam_engines), which this server does not run"
# Every JobsService method by its snake_case name, read off the generated Protocol so
# this list follows `make proto`.
METHODS: tuple[str, ...] = tuple(
    n for n, v in vars(jobs_connect.JobsService).items() if not n.startswith("_") and callable(v)
)
STREAMING: frozenset[str] = frozenset({"watch"})
UNARY: tuple[str, ...] = tuple(m for m in METHODS if m not in STREAMING)


def unimplemented(method: str) -> ConnectError:
    return ConnectError(
        Code.UNIMPLEMENTED, f"{method} is not available yet: it arrives with {UNIMPLEMENTED[method]}"
    )


def _job_id(text: str, field: str) -> str:
    validate.text(field, text, 256, allow_empty=False)
    if "/" in text:
        raise InvalidArgument(field, "a job id or key cannot contain '/'")
    return text


def _token(ns: str, token: J.LeaseToken, has: bool, field: str = "token") -> tuple[str, str, int]:
    validate.name("namespace", ns)
    if not has:
        raise InvalidArgument(field, "is required: the token of the lease")
    validate.name(f"{field}.queue", token.queue)
    return token.queue, _job_id(token.job, f"{field}.job"), token.epoch


def outcome_from_proto(o: J.Outcome, field: str = "outcome") -> Outcome:
    out = _outcome_kind(o, field)
    if o.HasField("retention"):
        out = dataclasses.replace(out, retention=o.retention)
    if o.HasField("metrics"):
        validate.in_range(f"{field}.metrics.max_data_points", o.metrics.max_data_points, 1, 100_000)
        out = dataclasses.replace(out, metrics=(o.metrics.at_ms, o.metrics.max_data_points))
    if o.HasField("clock_ms"):
        validate.in_range(f"{field}.clock_ms", o.clock_ms, 0, validate.MAX_TIME_NS // 1_000_000)
        out = dataclasses.replace(out, clock_ns=o.clock_ms * 1_000_000)
    return out


def _outcome_kind(o: J.Outcome, field: str) -> Outcome:
    kind = o.WhichOneof("kind")
    if kind == "ok":
        return Outcome.ok(o.ok.result if o.ok.HasField("result") else None, o.ok.if_no_pending_children)
    if kind == "retry":
        r = o.retry
        return Outcome.retry(
            r.error if r.HasField("error") else None, r.after_ns if r.HasField("after_ns") else None
        )
    if kind == "fail":
        return Outcome.fail(o.fail.error if o.fail.HasField("error") else None, o.fail.dead_letter)
    if kind == "release":
        return Outcome.release(o.release.after_ns if o.release.HasField("after_ns") else None)
    if kind == "delay":
        return Outcome.delay(o.delay.until_ns)
    if kind == "wait_children":
        return Outcome.wait_children()
    if kind == "rate_limited":
        return Outcome.rate_limited(o.rate_limited.for_ns)
    raise InvalidArgument(field, "set one of ok, retry, fail, release, delay, wait_children, rate_limited")


def item_error(e: JobsError) -> J.ItemError:
    return J.ItemError(code=e.code, message=e.message)


def lease_from_job(job: pb.Job) -> J.Lease:
    lease = J.Lease(
        token=J.LeaseToken(queue=job.queue, job=job.id, epoch=job.epoch),
        task=job.task,
        attempt=job.attempt + 1,
        stalled=job.stalled,
        deadline_ns=job.deadline_ns,
        opts=job.opts,
        created_ns=job.created_ns,
        deferred_failure=job.deferred_failure,
        retry_epoch=job.retry_epoch,
    )
    if job.errors:
        lease.last_error.CopyFrom(job.errors[-1])
    if job.opts.HasField("parent"):
        lease.parent.CopyFrom(job.opts.parent)
    elif job.parents:  # a flow node: its first dependent (a BullMQ tree has one)
        lease.parent.CopyFrom(job.parents[0])
    if job.children:
        lease.children.CopyFrom(
            J.ChildrenSummary(
                pending=job.pending_children, completed=job.children_completed, failed=job.children_failed
            )
        )
    return lease


def counts_to_proto(c: admin.QueueCounts) -> J.QueueCounts:
    return J.QueueCounts(
        waiting=c.waiting,
        prioritized=c.prioritized,
        delayed=c.delayed,
        active=c.active,
        waiting_children=c.waiting_children,
        completed=c.completed,
        failed=c.failed,
        dead_lettered=c.dead_lettered,
        canceled=c.canceled,
        paused=c.paused,
    )


def _config_and_counts(
    tx: Txn, ns: str, queue: str
) -> tuple[pb.QueueConfig, admin.QueueCounts, tuple[int, int]]:
    return (
        admin.queue_config(tx, ns, queue),
        admin.queue_counts(tx, ns, queue),
        admin.queue_rate_window(tx, ns, queue),
    )


def _resolve_job(tx: Txn, ns: str, queue: str, ref: str) -> str:
    """A job id, or the id its job key names. An unknown ref is returned as is, so the
    op itself says what is missing (the queue or the job)."""
    k = keys.QueueKeys(ns, queue)
    if tx.get(k.job(ref)) is not None:
        return ref
    by_key = tx.get(k.job_key(ref))
    return by_key.decode() if by_key is not None else ref


class CoreRpc:
    """One async method per JobsService method: `(ns, request) -> response`."""

    def __init__(self, core: QueueCore, engines: Any = None) -> None:
        self.core = core
        self.store = core.store
        self.engines = engines

    # -- producing -------------------------------------------------------------------
    async def enqueue(self, ns: str, req: J.EnqueueRequest) -> J.EnqueueResponse:
        r = await self.core.enqueue(ns, req.queue, req.task, req.opts if req.HasField("opts") else None)
        return J.EnqueueResponse(
            enqueued=J.Enqueued(job=r.job_id, created=r.created, state=r.state, job_key=r.job_key)
        )

    async def enqueue_bulk(self, ns: str, req: J.EnqueueBulkRequest) -> J.EnqueueBulkResponse:
        items = [(i.task, i.opts if i.HasField("opts") else None) for i in req.jobs]
        out = J.EnqueueBulkResponse()
        for r in await self.core.enqueue_bulk(ns, req.queue, items):
            if isinstance(r, Enqueued):
                out.results.add(
                    enqueued=J.Enqueued(job=r.job_id, created=r.created, state=r.state, job_key=r.job_key)
                )
            else:
                out.results.add(error=item_error(r))
        return out

    # -- consuming -------------------------------------------------------------------
    async def lease(self, ns: str, req: J.LeaseRequest) -> J.LeaseResponse:
        jobs = await self.core.lease(
            ns,
            list(req.queues),
            req.worker,
            req.max or 1,
            req.wait_ns,
            list(req.names) or None,
            req.visibility_ns,
        )
        return J.LeaseResponse(leases=[lease_from_job(j) for j in jobs])

    async def extend(self, ns: str, req: J.ExtendRequest) -> J.ExtendResponse:
        queue, job, epoch = _token(ns, req.token, req.HasField("token"))
        return J.ExtendResponse(deadline_ns=await self.core.extend(ns, queue, job, epoch, req.by_ns))

    async def complete(self, ns: str, req: J.CompleteRequest) -> J.CompleteResponse:
        queue, job, epoch = _token(ns, req.token, req.HasField("token"))
        done = await self.core.complete(ns, queue, job, epoch, outcome_from_proto(req.outcome))
        return J.CompleteResponse(completed=J.Completed(state=done.state, moved=done.moved))

    async def complete_batch(self, ns: str, req: J.CompleteBatchRequest) -> J.CompleteBatchResponse:
        """Malformed items refuse the whole call (a client bug); items refused by the
        state machine (fenced, not found, ...) get their error in their slot."""
        items = []
        for i, it in enumerate(req.items):
            queue, job, epoch = _token(ns, it.token, it.HasField("token"), f"items[{i}].token")
            items.append((queue, job, epoch, outcome_from_proto(it.outcome, f"items[{i}].outcome")))
        out = J.CompleteBatchResponse()
        if req.HasField("lease"):
            ask = req.lease
            if ask.wait_ns:
                raise InvalidArgument("lease.wait_ns", "must be 0: a lease after completions does not wait")
            results, jobs = await self.core.complete_many_then_lease(
                ns,
                items,
                list(ask.queues),
                ask.worker,
                ask.max or 1,
                list(ask.names) or None,
                ask.visibility_ns,
            )
            out.leases.extend(lease_from_job(j) for j in jobs)
        else:
            results = await self.core.complete_many(ns, items)
        for r in results:
            if isinstance(r, Completed):
                out.results.add(completed=J.Completed(state=r.state, moved=r.moved))
            else:
                out.results.add(error=item_error(r))
        return out

    async def report(self, ns: str, req: J.ReportRequest) -> J.ReportResponse:
        queue, job, epoch = _token(ns, req.token, req.HasField("token"))
        await self.core.report(
            ns,
            queue,
            job,
            epoch,
            progress=req.progress if req.HasField("progress") else None,
            log_line=req.log_line if req.HasField("log_line") else None,
            data=req.data if req.HasField("data") else None,
        )
        return J.ReportResponse()

    # -- schedules and flows -------------------------------------------------------------
    async def schedule(self, ns: str, req: J.ScheduleRequest) -> J.ScheduleResponse:
        if req.advance or req.spec.driver == pb.SCHEDULE_DRIVER_ITERATIONS:
            it = await self.core.schedule_iterate(ns, req)
            return J.ScheduleResponse(
                id=req.spec.id,
                schedule=it.schedule,
                changed=it.changed,
                iteration_job_id=it.job.job_id if it.job is not None else "",
                replaced=it.replaced,
            )
        if req.next_ns or req.if_next_ns or req.HasField("iteration_task") or req.replace_job_id:
            schedules.check_iteration(req)  # refuses iteration fields on a server-driven schedule
        up = await self.core.schedule(ns, req.spec)
        return J.ScheduleResponse(id=up.schedule.id, schedule=up.schedule, changed=up.changed)

    async def unschedule(self, ns: str, req: J.UnscheduleRequest) -> J.UnscheduleResponse:
        return J.UnscheduleResponse(removed=await self.core.unschedule(ns, req.id))

    async def get_schedule(self, ns: str, req: J.GetScheduleRequest) -> J.GetScheduleResponse:
        return J.GetScheduleResponse(schedule=await self.core.schedule_get(ns, req.id))

    async def list_schedules(self, ns: str, req: J.ListSchedulesRequest) -> J.ListSchedulesResponse:
        page, token = await self.core.schedule_list(ns, req.page_token, req.page_size)
        return J.ListSchedulesResponse(schedules=page, next_page_token=token)

    async def flow(self, ns: str, req: J.FlowRequest) -> J.FlowResponse:
        sub = await self.core.flow(ns, req.graph)
        return J.FlowResponse(flow=sub.flow_id, jobs=sub.jobs, created=sub.created)

    async def get_flow(self, ns: str, req: J.GetFlowRequest) -> J.GetFlowResponse:
        return J.GetFlowResponse(flow=await self.core.flow_get(ns, req.id))

    # -- engines (loam_engines) --------------------------------------------------------------
    def _engines(self, method: str) -> Any:
        if self.engines is None:
            raise ConnectError(Code.UNIMPLEMENTED, f"{method} is not available: it needs {NO_ENGINES}")
        return self.engines

    async def submit_engine_job(self, ns: str, req: J.SubmitEngineJobRequest) -> J.SubmitEngineJobResponse:
        return await self._engines("submit_engine_job").submit_engine_job(ns, req)

    async def control_engine_job(self, ns: str, req: J.ControlEngineJobRequest) -> J.ControlEngineJobResponse:
        return await self._engines("control_engine_job").control_engine_job(ns, req)

    async def get_engine_run(self, ns: str, req: J.GetEngineRunRequest) -> J.GetEngineRunResponse:
        return await self._engines("get_engine_run").get_engine_run(ns, req)

    async def list_engine_runs(self, ns: str, req: J.ListEngineRunsRequest) -> J.ListEngineRunsResponse:
        return await self._engines("list_engine_runs").list_engine_runs(ns, req)

    async def list_engine_run_logs(
        self, ns: str, req: J.ListEngineRunLogsRequest
    ) -> J.ListEngineRunLogsResponse:
        return await self._engines("list_engine_run_logs").list_engine_run_logs(ns, req)

    async def watch(self, ns: str, req: J.WatchRequest) -> AsyncIterator[J.WatchResponse]:
        """A snapshot, then the events after it (watch.py)."""
        async for item in watch_stream(self.core, ns, req):
            yield item

    # -- admin -----------------------------------------------------------------------
    async def queue_admin(self, ns: str, req: J.QueueAdminRequest) -> J.QueueAdminResponse:
        validate.name("namespace", ns)
        queue, op = req.queue, req.op
        validate.name("queue", queue)
        kind = op.WhichOneof("op")
        handler = self._QUEUE_OPS.get(kind or "")
        if handler is None:
            raise InvalidArgument("op", f"set one of {', '.join(self._QUEUE_OPS)}")
        return await handler(self, ns, queue, getattr(op, kind))

    async def _q_create(self, ns: str, queue: str, op: J.QueueOp.Create) -> J.QueueAdminResponse:
        cfg, created = await self.store.transact(admin.queue_create, ns, queue, op.config)
        return J.QueueAdminResponse(config=cfg, affected=int(created))

    async def _q_update(self, ns: str, queue: str, op: J.QueueOp.Update) -> J.QueueAdminResponse:
        cfg = await self.store.transact(admin.queue_update, ns, queue, op.config, list(op.fields) or None)
        self.core.wake_all(ns, queue)  # a lifted rate limit or concurrency cap frees leases
        return J.QueueAdminResponse(config=cfg)

    async def _q_pause(self, ns: str, queue: str, op: Any) -> J.QueueAdminResponse:
        await self.store.transact(admin.queue_pause, ns, queue)
        self.core.wake_all(ns, queue)
        return await self._q_counts(ns, queue, op)

    async def _q_resume(self, ns: str, queue: str, op: Any) -> J.QueueAdminResponse:
        await self.store.transact(admin.queue_resume, ns, queue)
        self.core.wake_all(ns, queue)
        return await self._q_counts(ns, queue, op)

    async def _q_drain(self, ns: str, queue: str, op: J.QueueOp.Drain) -> J.QueueAdminResponse:
        n = await self._repeat(admin.queue_drain, ns, queue, op.delayed, admin.BATCH)
        return J.QueueAdminResponse(affected=n)

    async def _q_clean(self, ns: str, queue: str, op: J.QueueOp.Clean) -> J.QueueAdminResponse:
        state = op.state or S.COMPLETED
        if op.limit:  # the caller bounded it: one call
            removed = await self.store.transact(admin.queue_clean, ns, queue, state, op.grace_ns, op.limit)
            return J.QueueAdminResponse(affected=len(removed))
        n = await self._repeat(
            lambda tx, *a: len(admin.queue_clean(tx, *a)), ns, queue, state, op.grace_ns, admin.BATCH
        )
        return J.QueueAdminResponse(affected=n)

    async def _q_obliterate(self, ns: str, queue: str, op: J.QueueOp.Obliterate) -> J.QueueAdminResponse:
        removed = 0
        while True:
            r = await self.store.transact(admin.queue_obliterate, ns, queue, op.force, admin.OBLITERATE_BATCH)
            removed += r.removed_keys
            if r.done:
                return J.QueueAdminResponse(affected=removed)

    async def _q_counts(self, ns: str, queue: str, op: Any) -> J.QueueAdminResponse:
        cfg, counts, (ttl, used) = await self.store.snapshot(_config_and_counts, ns, queue)
        return J.QueueAdminResponse(
            config=cfg, counts=counts_to_proto(counts), rate_limit_ttl_ns=ttl, rate_limit_used=used
        )

    async def _q_retry_all(self, ns: str, queue: str, op: J.QueueOp.RetryAll) -> J.QueueAdminResponse:
        n = await self._repeat(admin.queue_retry_all, ns, queue, op.state or S.FAILED, admin.BATCH)
        self.core.wake_all(ns, queue)
        return J.QueueAdminResponse(affected=n)

    async def _q_promote_all(self, ns: str, queue: str, op: Any) -> J.QueueAdminResponse:
        n = await self._repeat(admin.queue_promote_all, ns, queue, admin.BATCH)
        self.core.wake_all(ns, queue)
        return J.QueueAdminResponse(affected=n)

    async def _q_set_rate_limit(
        self, ns: str, queue: str, op: J.QueueOp.SetRateLimit
    ) -> J.QueueAdminResponse:
        rl = op.rate_limit
        cfg = await self.store.transact(
            admin.queue_set_rate_limit, ns, queue, rl.max, rl.duration_ns, rl.sharded
        )
        self.core.wake_all(ns, queue)
        return J.QueueAdminResponse(config=cfg)

    async def _q_rate_limit_for(
        self, ns: str, queue: str, op: J.QueueOp.RateLimitFor
    ) -> J.QueueAdminResponse:
        await self.store.transact(admin.queue_rate_limit_for, ns, queue, op.for_ns)
        if not op.for_ns:
            self.core.wake_all(ns, queue)
        return J.QueueAdminResponse()

    async def _q_set_concurrency(
        self, ns: str, queue: str, op: J.QueueOp.SetConcurrency
    ) -> J.QueueAdminResponse:
        cfg = await self.store.transact(admin.queue_set_concurrency, ns, queue, op.concurrency)
        self.core.wake_all(ns, queue)
        return J.QueueAdminResponse(config=cfg)

    async def _q_metrics(self, ns: str, queue: str, op: J.QueueOp.Metrics) -> J.QueueAdminResponse:
        res = await self._q_counts(ns, queue, op)
        if op.kind:
            if op.kind not in ("completed", "failed"):
                raise InvalidArgument("op.metrics.kind", "is completed or failed")
            res.metrics.CopyFrom(await self.store.snapshot(queue_metrics, ns, queue, op.kind))
        return res

    async def _q_workers(self, ns: str, queue: str, op: Any) -> J.QueueAdminResponse:
        workers = await self.store.snapshot(admin.queue_workers, ns, queue, 0)
        return J.QueueAdminResponse(workers=workers)

    async def _q_redrive(self, ns: str, queue: str, op: J.QueueOp.RedriveDeadLetters) -> J.QueueAdminResponse:
        if op.limit:
            n = await self.store.transact(admin.queue_redrive_dead_letters, ns, queue, op.limit)
        else:
            n = await self._repeat(admin.queue_redrive_dead_letters, ns, queue, admin.BATCH)
        if n:
            # The jobs went back to the queues they came from, which the answer does not
            # name: wake every parked lease of the namespace; those that find nothing park again.
            _wake_namespace(self.core, ns)
        return J.QueueAdminResponse(affected=n)

    async def _q_trim_events(self, ns: str, queue: str, op: J.QueueOp.TrimEvents) -> J.QueueAdminResponse:
        validate.non_negative("op.trim_events.before_ns", op.before_ns)
        n = await self._repeat(events.event_log_trim, ns, queue, op.before_ns, events.BATCH)
        return J.QueueAdminResponse(affected=n)

    _QUEUE_OPS: dict[str, Callable[..., Any]] = {
        "create": _q_create,
        "update": _q_update,
        "pause": _q_pause,
        "resume": _q_resume,
        "drain": _q_drain,
        "clean": _q_clean,
        "obliterate": _q_obliterate,
        "counts": _q_counts,
        "retry_all": _q_retry_all,
        "promote_all": _q_promote_all,
        "set_rate_limit": _q_set_rate_limit,
        "set_concurrency": _q_set_concurrency,
        "rate_limit_for": _q_rate_limit_for,
        "workers": _q_workers,
        "metrics": _q_metrics,
        "redrive_dead_letters": _q_redrive,
        "trim_events": _q_trim_events,
    }

    async def _repeat(self, fn: Callable[..., int], ns: str, queue: str, *args: Any) -> int:
        """Run a batched op (its last argument is the batch size) until a batch is short."""
        batch, total = args[-1], 0
        while True:
            n = await self.store.transact(fn, ns, queue, *args)
            total += n
            if n < batch:
                return total

    async def job_admin(self, ns: str, req: J.JobAdminRequest) -> J.JobAdminResponse:
        validate.name("namespace", ns)
        queue, op = req.queue, req.op
        validate.name("queue", queue)
        kind = op.WhichOneof("op")
        if kind is None:
            raise InvalidArgument(
                "op", f"set one of {', '.join(J.JobOp.DESCRIPTOR.oneofs_by_name['op'].fields_by_name)}"
            )
        if kind == "remove_dedup_key":  # names a dedup id, not a job
            existed = await self.store.transact(
                job_admin.job_remove_dedup_key, ns, queue, op.remove_dedup_key.dedup_id
            )
            return J.JobAdminResponse(removed=existed)
        if kind == "get_dedup":  # names a dedup id, not a job
            job = await self.store.snapshot(job_admin.job_get_dedup, ns, queue, op.get_dedup.dedup_id)
            return J.JobAdminResponse(job=job)
        job_id = await self.store.snapshot(_resolve_job, ns, queue, _job_id(req.job, "job"))
        if kind == "get":
            return J.JobAdminResponse(job=await self.store.snapshot(job_admin.job_get, ns, queue, job_id))
        if kind == "logs":
            lo = op.logs
            # BullMQ's getJobLogs range, `end` inclusive; end 0 = through the last line.
            logs = await self.store.snapshot(job_admin.job_logs, ns, queue, job_id, lo.start, lo.end or -1)
            return J.JobAdminResponse(logs=logs.lines, log_count=logs.count)
        if kind == "remove":
            await self.store.transact(job_admin.job_remove, ns, queue, job_id, False, op.remove.children)
            return J.JobAdminResponse(removed=True)
        if kind == "remove_child_dependency":
            removed = await self.store.transact(job_admin.job_remove_child_dependency, ns, queue, job_id)
            if removed:
                self.core.wake_all(ns, queue)
            return J.JobAdminResponse(removed=removed)
        if kind == "add_log":
            al = op.add_log
            n = await self.store.transact(job_admin.job_add_log, ns, queue, job_id, al.line, al.keep)
            return J.JobAdminResponse(log_count=n)
        if kind == "clear_logs":
            n = await self.store.transact(job_admin.job_clear_logs, ns, queue, job_id, op.clear_logs.keep)
            return J.JobAdminResponse(log_count=n)
        if kind == "children":  # BullMQ getChildrenValues / getDependencies
            return J.JobAdminResponse(children=await self.core.children_values(ns, queue, job_id))
        if kind == "retry":
            job = await self.store.transact(job_admin.job_retry, ns, queue, job_id, op.retry.keep_attempts)
        elif kind == "promote":
            job = await self.store.transact(job_admin.job_promote, ns, queue, job_id)
        elif kind == "change_priority":
            cp = op.change_priority
            job = await self.store.transact(
                job_admin.job_change_priority, ns, queue, job_id, cp.priority, cp.lifo
            )
        elif kind == "change_delay":
            job = await self.store.transact(
                job_admin.job_change_delay, ns, queue, job_id, op.change_delay.delay_ns
            )
        elif kind == "update_data":
            job = await self.core.update_data(ns, queue, job_id, op.update_data.data)
        elif kind == "progress":
            job = await self.store.transact(
                job_admin.job_set_progress, ns, queue, job_id, op.progress.progress
            )
        elif kind == "cancel":
            job = await self.store.transact(job_admin.job_cancel, ns, queue, job_id, "")
        else:  # a JobOp added to the proto and not mapped here
            raise InvalidArgument("op", f"{kind} is not supported by this server")
        if job.state in S.READY:
            self.core.wake_all(ns, queue)
        return J.JobAdminResponse(job=job)

    async def query(self, ns: str, req: J.QueryRequest) -> J.QueryResponse:
        validate.name("namespace", ns)
        jobs, token = await self.store.snapshot(
            job_query,
            ns,
            req.queue,
            list(req.states),
            req.name or None,
            req.since_ns,
            req.until_ns,
            req.page_size,
            req.page_token,
        )
        return J.QueryResponse(jobs=jobs, next_page_token=token)

    async def queue_list(self, ns: str) -> list[str]:
        """Not a JobsService method: the namespace's queue names (REST, console)."""
        validate.name("namespace", ns)
        return await self.store.snapshot(admin.queue_list, ns, "", admin.MAX_BATCH)

    # -- result store ------------------------------------------------------------------
    async def result_get(self, ns: str, req: J.ResultGetRequest) -> J.ResultGetResponse:
        value, version = await self.core.result_get(ns, req.key, req.wait_ns, req.after_version)
        if value is None:
            return J.ResultGetResponse()
        return J.ResultGetResponse(value=value, found=True, version=version)

    async def result_m_get(self, ns: str, req: J.ResultMGetRequest) -> J.ResultMGetResponse:
        validate.name("namespace", ns)
        values = await self.store.snapshot(results.result_mget, ns, list(req.keys))
        out = J.ResultMGetResponse()
        for v in values:
            out.values.add(value=v, found=True) if v is not None else out.values.add()
        return out

    async def result_set(self, ns: str, req: J.ResultSetRequest) -> J.ResultSetResponse:
        validate.name("namespace", ns)
        await self.store.transact(results.result_set, ns, req.key, req.value, req.ttl_ns)
        self.core.result_changed(ns, req.key)
        return J.ResultSetResponse()

    async def result_set_many(self, ns: str, req: J.ResultSetManyRequest) -> J.ResultSetManyResponse:
        validate.name("namespace", ns)
        items = [(item.key, item.value, item.ttl_ns) for item in req.items]
        await self.store.transact(results.result_set_many, ns, items)
        for key in {item[0] for item in items}:
            self.core.result_changed(ns, key)
        return J.ResultSetManyResponse()

    async def result_delete(self, ns: str, req: J.ResultDeleteRequest) -> J.ResultDeleteResponse:
        validate.name("namespace", ns)
        await self.store.transact(results.result_delete, ns, req.key)
        self.core.result_changed(ns, req.key)
        return J.ResultDeleteResponse()

    async def result_incr(self, ns: str, req: J.ResultIncrRequest) -> J.ResultIncrResponse:
        """ttl_ns 0 leaves the key's TTL as it is (as Redis INCR does)."""
        validate.name("namespace", ns)
        size, added = await self.store.transact(
            results.result_add, ns, req.key, req.member, req.ttl_ns or None
        )
        if added:
            self.core.result_changed(ns, req.key)
        return J.ResultIncrResponse(size=size, added=added)

    async def result_expire(self, ns: str, req: J.ResultExpireRequest) -> J.ResultExpireResponse:
        validate.name("namespace", ns)
        await self.store.transact(results.result_expire, ns, req.key, req.ttl_ns)
        return J.ResultExpireResponse()

    # -- exchanges (kombu bindings, routed publishes) -------------------------------------
    async def exchange_bind(self, ns: str, req: J.ExchangeBindRequest) -> J.ExchangeBindResponse:
        validate.name("namespace", ns)
        exchanges.check_binding(req.exchange, req.routing_key, req.queue)
        await self.store.transact(
            exchanges.exchange_bind, ns, req.exchange, req.routing_key, req.queue, req.ttl_ns
        )
        return J.ExchangeBindResponse()

    async def exchange_unbind(self, ns: str, req: J.ExchangeUnbindRequest) -> J.ExchangeUnbindResponse:
        validate.name("namespace", ns)
        exchanges.check_binding(req.exchange, req.routing_key, req.queue)
        removed = await self.store.transact(
            exchanges.exchange_unbind, ns, req.exchange, req.routing_key, req.queue
        )
        return J.ExchangeUnbindResponse(removed=removed)

    async def exchange_bindings(self, ns: str, req: J.ExchangeBindingsRequest) -> J.ExchangeBindingsResponse:
        validate.name("namespace", ns)
        exchanges.check_binding(req.exchange, "")
        return J.ExchangeBindingsResponse(
            bindings=await self.store.snapshot(exchanges.exchange_bindings, ns, req.exchange)
        )

    async def exchange_publish(self, ns: str, req: J.ExchangePublishRequest) -> J.ExchangePublishResponse:
        routed = await self.core.publish(ns, req.exchange, req.type, req.routing_key, req.task, req.opts)
        out = J.ExchangePublishResponse()
        for queue, r in routed:
            if isinstance(r, Enqueued):
                out.routed.add(queue=queue).result.enqueued.CopyFrom(
                    J.Enqueued(job=r.job_id, created=r.created, state=r.state, job_key=r.job_key)
                )
            else:
                out.routed.add(queue=queue).result.error.CopyFrom(item_error(r))
        return out


def _wake_namespace(core: QueueCore, ns: str) -> None:
    for n, q in list(core.waiters._by_queue):  # noqa: SLF001 - no public listing yet
        if n == ns:
            core.wake_all(n, q)


def _fill_unimplemented() -> None:
    """A method added to jobs.proto and not mapped here answers Unimplemented (rather
    than the generated default), naming the work that brings it if UNIMPLEMENTED does."""
    for m in METHODS:
        if hasattr(CoreRpc, m):
            continue
        UNIMPLEMENTED.setdefault(m, "a later release of the queue core")
        if m in STREAMING:

            async def stub(self, ns, req, _m=m):
                raise unimplemented(_m)
                yield  # pragma: no cover

        else:

            async def stub(self, ns, req, _m=m):
                raise unimplemented(_m)

        stub.__name__ = m
        setattr(CoreRpc, m, stub)


_fill_unimplemented()

__all__ = ["ENGINE_METHODS", "METHODS", "STREAMING", "UNARY", "UNIMPLEMENTED", "CoreRpc", "unimplemented"]
