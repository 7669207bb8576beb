"""`CoreRpc`: the JobsService methods as `(ns, request) -> response`: each parses its
request, calls one facade method of `QueueCore` (facade/) and maps the answer back to
jobs.proto's messages. No transactions and no transport here: the queue-core server
and the gateway (in process, in dev) call it with the namespace they resolved from the
caller's credential. Errors are JobsErrors (loam_common.connect_errors maps them).
The methods the method table marks as arriving with later work (loam_common.api.methods,
`arrives_with`) are not defined here: `AnswersUnimplemented` answers them. The engine
methods go to the engine runner's `engines` (loam_engines.rpc.EngineRpc, the same
`(ns, request) -> response` shape) when this CoreRpc has one, else answer UNIMPLEMENTED.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from loam_common import validate
from loam_common.api.methods import AnswersUnimplemented
from loam_common.errors import InvalidArgument, JobsError
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import quotas, schedules
from loam_common.jobs.complete import (
    Completed,
    Delay,
    Fail,
    Ok,
    Outcome,
    RateLimited,
    Release,
    Retry,
    WaitChildren,
)
from loam_common.jobs.job_admin import Report
from loam_common.jobs.new_job import Enqueued
from loam_common.jobs.write_batch import Canceled
from loam_common.validate import Namespace
from loam_queue_core.core import QueueCore
from loam_queue_core.facade.job_admin import JobAdmin, job_ref, plainly_job_ref
from loam_queue_core.watch import watch as watch_stream

NO_ENGINES = "the engine runner (loam_engines), which this server does not run"


def _token(token: J.LeaseToken, has: bool, field: str = "token") -> tuple[str, str, int]:
    if not has:
        raise InvalidArgument(field, "is required: the token of the lease")
    validate.name(f"{field}.queue", token.queue)
    return token.queue, job_ref(token.job, f"{field}.job"), token.epoch


def outcome_from_proto(o: J.Outcome, field: str = "outcome") -> Outcome:
    extra: dict = {}  # set on the kind's constructor (a BullMQ job often sets two)
    if o.HasField("retention"):
        extra["retention"] = o.retention
    if o.HasField("metrics"):
        validate.in_range(f"{field}.metrics.max_data_points", o.metrics.max_data_points, 1, 100_000)
        extra["metrics"] = (o.metrics.at_ms, o.metrics.max_data_points)
    if o.HasField("clock_ms"):
        validate.in_range(f"{field}.clock_ms", o.clock_ms, 0, validate.MAX_TIME_NS // 1_000_000)
        extra["clock_ns"] = o.clock_ms * 1_000_000
    return _outcome_kind(o, field, extra)


#: Ok outcomes by their wire bytes: a worker's completions mostly repeat one (the SDK's
#: for a handler's None; @loam/bullmq's for a processor's same return value), which is
#: then checked and built once. Small ones only; emptied when full.
_OKS: dict[bytes, Outcome] = {}
_OKS_MAX = 1024
_OK_WIRE_MAX = 512


def _batch_outcome(o: J.Outcome, i: int) -> Outcome:
    """`outcome_from_proto` of item `i`'s outcome, shared between equal ok outcomes (Ok is
    frozen; a cached one holds its own copy of the result)."""
    wire = o.SerializeToString()
    out = _OKS.get(wire)
    if out is None:
        field = f"items[{i}].outcome"
        out = outcome_from_proto(o, field)  # refuses bad input: nothing is cached then
        if isinstance(out, Ok) and len(wire) <= _OK_WIRE_MAX:
            if len(_OKS) >= _OKS_MAX:
                _OKS.clear()
            _OKS[wire] = outcome_from_proto(J.Outcome.FromString(wire), field)
    return out


def _outcome_kind(o: J.Outcome, field: str, extra: dict) -> Outcome:
    kind = o.WhichOneof("kind")
    if kind == "ok":
        return Ok(o.ok.result if o.ok.HasField("result") else None, o.ok.if_no_pending_children, **extra)
    if kind == "retry":
        r = o.retry
        return Retry(
            r.error if r.HasField("error") else None, r.after_ns if r.HasField("after_ns") else None, **extra
        )
    if kind == "fail":
        return Fail(o.fail.error if o.fail.HasField("error") else None, o.fail.dead_letter, **extra)
    if kind == "release":
        return Release(o.release.after_ns if o.release.HasField("after_ns") else None, **extra)
    if kind == "delay":
        return Delay(o.delay.until_ns, **extra)
    if kind == "wait_children":
        return WaitChildren(**extra)
    if kind == "rate_limited":
        return RateLimited(o.rate_limited.for_ns, **extra)
    raise InvalidArgument(field, "set one of ok, retry, fail, release, delay, wait_children, rate_limited")


def item_error(e: JobsError) -> J.ItemError:
    return J.ItemError(code=e.code, message=e.message)


def _complete_items(reqs) -> list[tuple[str, str, int, Outcome]]:  # noqa: ANN001 - a repeated CompleteRequest
    """A batch's tokens and outcomes as the facade takes them. Each queue name is checked
    once a call and a repeated ok outcome is built once; field names are made only for
    an item that is refused."""
    items, names = [], set()
    for i, it in enumerate(reqs):
        token = it.token
        queue, job = token.queue, token.job
        # An item whose queue was checked already and whose job id is plainly good skips
        # `_token` (a missing token has no queue name, so it never does).
        if queue not in names or not plainly_job_ref(job):
            queue, job, _ = _token(token, it.HasField("token"), f"items[{i}].token")
            names.add(queue)
        items.append((queue, job, token.epoch, _batch_outcome(it.outcome, i)))
    return items


_RESULT_WIRE: dict[tuple[int, bool], bytes] = {}


def _result_wire(r: Completed | JobsError) -> bytes:
    """One CompleteBatchResponse holding just this result, serialized."""
    if isinstance(r, Completed):
        key = (r.state, r.moved)
        wire = _RESULT_WIRE.get(key)
        if wire is None:
            one = J.CompleteBatchResponse()
            completed = one.results.add().completed
            completed.state, completed.moved = r.state, r.moved
            completed.SetInParent()
            wire = _RESULT_WIRE[key] = one.SerializeToString()
        return wire
    return J.CompleteBatchResponse(results=[J.CompleteBatchResult(error=item_error(r))]).SerializeToString()


def fill_lease(lease: J.Lease, job: pb.Job) -> None:
    """Write `job`'s lease into `lease`, a new element of a response's repeated field:
    field by field, because a Lease built with keywords and then added to the response
    is copied twice (bench/README.md, "Two completion batches in flight")."""
    token = lease.token
    token.queue, token.job, token.epoch = job.queue, job.id, job.epoch
    lease.task.CopyFrom(job.task)
    lease.attempt = job.attempt + 1
    lease.stalled = job.stalled
    lease.deadline_ns = job.deadline_ns
    lease.opts.CopyFrom(job.opts)
    lease.created_ns = job.created_ns
    lease.deferred_failure = job.deferred_failure
    lease.retry_epoch = job.retry_epoch
    if job.errors:
        lease.last_error.CopyFrom(job.errors[-1])
    if job.opts.HasField("parent"):
        lease.parent.CopyFrom(job.opts.parent)
    elif job.parents:  # a flow node: its first dependent (a BullMQ tree has one)
        lease.parent.CopyFrom(job.parents[0])
    if job.children:
        summary = lease.children
        summary.pending = job.pending_children
        summary.completed = job.children_completed
        summary.failed = job.children_failed
        summary.SetInParent()


def iteration_from_proto(req: J.ScheduleRequest) -> schedules.Iteration:
    """A Schedule call on an iteration-driven schedule, as the transitions take it."""
    return schedules.Iteration(
        spec=req.spec,
        next_ns=req.next_ns,
        advance=req.advance,
        if_next_ns=req.if_next_ns,
        iteration_task=req.iteration_task if req.HasField("iteration_task") else None,
        iteration_opts=req.iteration_opts if req.HasField("iteration_opts") else None,
        replace_job_id=req.replace_job_id,
        if_updated_ns=req.if_updated_ns if req.HasField("if_updated_ns") else None,
    )


def fill_enqueued(e: J.Enqueued, r: Enqueued) -> None:
    """Write `r` into `e`, a response's own field (in place: an `Enqueued(...)` passed
    to a response is copied)."""
    e.job, e.created, e.state, e.job_key, e.dropped = r.job_id, r.created, r.state, r.job_key, r.dropped
    e.SetInParent()


def write_from_proto(item: J.WriteItem, i: int) -> tuple:
    """One WriteBatch item as the facade takes it (Jobs.write_batch)."""
    kind = item.WhichOneof("kind")
    if kind == "enqueue":
        e = item.enqueue
        return ("enqueue", e.queue, e.task, e.opts if e.HasField("opts") else None)
    if kind == "cancel":
        return ("cancel", item.cancel.queue, item.cancel.job, item.cancel.reason)
    if kind == "result_set":
        return ("result_set", item.result_set.key, item.result_set.value, item.result_set.ttl_ns)
    raise InvalidArgument(f"items[{i}]", "set one of enqueue, cancel, result_set")


def write_outcome(r: Any) -> J.WriteOutcome:
    if isinstance(r, Enqueued):
        out = J.WriteOutcome()
        fill_enqueued(out.enqueued, r)
        return out
    if isinstance(r, Canceled):
        return J.WriteOutcome(canceled=J.WriteOutcome.Canceled(job=r.job_id))
    return J.WriteOutcome(result_stored=J.WriteOutcome.ResultStored(key=r.key))


class CoreRpc(AnswersUnimplemented):
    """One async method per JobsService method: `(ns, request) -> response`."""

    def __init__(self, core: QueueCore, engines: Any = None) -> None:
        self.core = core
        self.store = core.store
        self.engines = engines

    # -- producing -------------------------------------------------------------------
    async def enqueue(self, ns: Namespace, req: J.EnqueueRequest) -> J.EnqueueResponse:
        r = await self.core.jobs.enqueue(ns, req.queue, req.task, req.opts if req.HasField("opts") else None)
        out = J.EnqueueResponse()
        fill_enqueued(out.enqueued, r)
        return out

    async def enqueue_bulk(self, ns: Namespace, req: J.EnqueueBulkRequest) -> J.EnqueueBulkResponse:
        items = [(i.task, i.opts if i.HasField("opts") else None) for i in req.jobs]
        out = J.EnqueueBulkResponse()
        add = out.results.add
        call = req.idempotency if req.HasField("idempotency") else None
        for r in await self.core.jobs.enqueue_bulk(ns, req.queue, items, call):
            if isinstance(r, Enqueued):
                fill_enqueued(add().enqueued, r)
            else:
                add(error=item_error(r))
        return out

    async def write_batch(self, ns: Namespace, req: J.WriteBatchRequest) -> J.WriteBatchResponse:
        writes = [write_from_proto(item, i) for i, item in enumerate(req.items)]
        outcomes = await self.core.jobs.write_batch(ns, writes)
        return J.WriteBatchResponse(outcomes=[write_outcome(r) for r in outcomes])

    # -- consuming -------------------------------------------------------------------
    async def lease(self, ns: Namespace, req: J.LeaseRequest) -> J.LeaseResponse:
        jobs = await self.core.jobs.lease(
            ns,
            list(req.queues),
            req.worker,
            req.max or 1,
            req.wait_ns,
            list(req.names) or None,
            req.visibility_ns,
            req.subject_batch,
        )
        out = J.LeaseResponse()
        add = out.leases.add
        for j in jobs:
            fill_lease(add(), j)
        return out

    async def end_lease_wait(self, ns: Namespace, req: J.EndLeaseWaitRequest) -> J.EndLeaseWaitResponse:
        return J.EndLeaseWaitResponse(ended=self.core.jobs.end_lease_wait(ns, list(req.queues), req.worker))

    async def extend(self, ns: Namespace, req: J.ExtendRequest) -> J.ExtendResponse:
        queue, job, epoch = _token(req.token, req.HasField("token"))
        return J.ExtendResponse(deadline_ns=await self.core.jobs.extend(ns, queue, job, epoch, req.by_ns))

    async def complete(self, ns: Namespace, req: J.CompleteRequest) -> J.CompleteResponse:
        queue, job, epoch = _token(req.token, req.HasField("token"))
        done = await self.core.jobs.complete(ns, queue, job, epoch, outcome_from_proto(req.outcome))
        return J.CompleteResponse(completed=J.Completed(state=done.state, moved=done.moved))

    async def complete_batch(self, ns: Namespace, req: J.CompleteBatchRequest) -> J.CompleteBatchResponse:
        """Malformed items refuse the whole call (a client bug); items refused by the
        state machine (fenced, not found, ...) get their error in their slot."""
        items = _complete_items(req.items)
        out = J.CompleteBatchResponse()
        if req.HasField("lease"):
            ask = req.lease
            if ask.wait_ns:
                raise InvalidArgument("lease.wait_ns", "must be 0: a lease after completions does not wait")
            results, jobs = await self.core.jobs.complete_many_then_lease(
                ns,
                items,
                list(ask.queues),
                ask.worker,
                ask.max or 1,
                list(ask.names) or None,
                ask.visibility_ns,
                ask.subject_batch,
            )
            add = out.leases.add
            for j in jobs:
                fill_lease(add(), j)
        else:
            results = await self.core.jobs.complete_many(ns, items)
        # The results as wire bytes, merged in at once: serialized messages concatenate,
        # and a repeated field's items then come in order.
        out.MergeFromString(b"".join(map(_result_wire, results)))
        return out

    async def report(self, ns: Namespace, req: J.ReportRequest) -> J.ReportResponse:
        queue, job, epoch = _token(req.token, req.HasField("token"))
        await self.core.jobs.report(
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
    async def schedule(self, ns: Namespace, req: J.ScheduleRequest) -> J.ScheduleResponse:
        if req.advance or req.spec.driver == pb.SCHEDULE_DRIVER_ITERATIONS:
            it = await self.core.schedules.iterate(ns, iteration_from_proto(req))
            return J.ScheduleResponse(
                id=req.spec.id,
                schedule=it.schedule,
                changed=it.changed,
                iteration_job_id=it.job.job_id if it.job is not None else "",
                replaced=it.replaced,
            )
        if req.next_ns or req.if_next_ns or req.HasField("iteration_task") or req.replace_job_id:
            # refuses iteration fields on a server-driven schedule
            schedules.check_iteration(iteration_from_proto(req))
        up = await self.core.schedules.upsert(ns, req.spec)
        return J.ScheduleResponse(id=up.schedule.id, schedule=up.schedule, changed=up.changed)

    async def unschedule(self, ns: Namespace, req: J.UnscheduleRequest) -> J.UnscheduleResponse:
        return J.UnscheduleResponse(removed=await self.core.schedules.remove(ns, req.id))

    async def get_schedule(self, ns: Namespace, req: J.GetScheduleRequest) -> J.GetScheduleResponse:
        return J.GetScheduleResponse(schedule=await self.core.schedules.get(ns, req.id))

    async def list_schedules(self, ns: Namespace, req: J.ListSchedulesRequest) -> J.ListSchedulesResponse:
        page, token = await self.core.schedules.list(ns, req.page_token, req.page_size)
        return J.ListSchedulesResponse(schedules=page, next_page_token=token)

    async def flow(self, ns: Namespace, req: J.FlowRequest) -> J.FlowResponse:
        sub = await self.core.flows.submit(ns, req.graph)
        return J.FlowResponse(flow=sub.flow_id, jobs=sub.jobs, created=sub.created)

    async def get_flow(self, ns: Namespace, req: J.GetFlowRequest) -> J.GetFlowResponse:
        return J.GetFlowResponse(flow=await self.core.flows.get(ns, req.id))

    # -- engines (loam_engines) --------------------------------------------------------------
    def _engines(self, method: str) -> Any:
        if self.engines is None:
            raise ConnectError(Code.UNIMPLEMENTED, f"{method} is not available: it needs {NO_ENGINES}")
        return self.engines

    async def submit_engine_job(
        self, ns: Namespace, req: J.SubmitEngineJobRequest
    ) -> J.SubmitEngineJobResponse:
        return await self._engines("submit_engine_job").submit_engine_job(ns, req)

    async def control_engine_job(
        self, ns: Namespace, req: J.ControlEngineJobRequest
    ) -> J.ControlEngineJobResponse:
        return await self._engines("control_engine_job").control_engine_job(ns, req)

    async def get_engine_run(self, ns: Namespace, req: J.GetEngineRunRequest) -> J.GetEngineRunResponse:
        return await self._engines("get_engine_run").get_engine_run(ns, req)

    async def list_engine_runs(self, ns: Namespace, req: J.ListEngineRunsRequest) -> J.ListEngineRunsResponse:
        return await self._engines("list_engine_runs").list_engine_runs(ns, req)

    async def list_engine_run_logs(
        self, ns: Namespace, req: J.ListEngineRunLogsRequest
    ) -> J.ListEngineRunLogsResponse:
        return await self._engines("list_engine_run_logs").list_engine_run_logs(ns, req)

    async def watch(self, ns: Namespace, req: J.WatchRequest) -> AsyncIterator[J.WatchResponse]:
        """A snapshot, then the events after it (watch.py)."""
        async for item in watch_stream(self.core, ns, req):
            yield item

    # -- admin -----------------------------------------------------------------------
    async def queue_admin(self, ns: Namespace, req: J.QueueAdminRequest) -> J.QueueAdminResponse:
        queue, op = req.queue, req.op
        validate.name("queue", queue)
        kind = op.WhichOneof("op")
        handler = _QUEUE_OPS.get(kind or "")
        if handler is None:
            raise InvalidArgument("op", f"set one of {', '.join(_QUEUE_OPS)}")
        return await handler(self.core, ns, queue, getattr(op, kind))

    async def job_admin(self, ns: Namespace, req: J.JobAdminRequest) -> J.JobAdminResponse:
        queue, op = req.queue, req.op
        validate.name("queue", queue)
        kind = op.WhichOneof("op")
        if kind is None:
            raise InvalidArgument(
                "op", f"set one of {', '.join(J.JobOp.DESCRIPTOR.oneofs_by_name['op'].fields_by_name)}"
            )
        if kind in _DEDUP_OPS:  # these name a dedup id, not a job
            return await _DEDUP_OPS[kind](self.core.job_admin, ns, queue, getattr(op, kind))
        if kind == "get":  # the most frequent op (BullMQ's getJob): one read
            return _job(await self.core.job_admin.get_by_ref(ns, queue, req.job))
        handler = _JOB_OPS.get(kind)
        if handler is None:  # a JobOp added to the proto and not mapped here
            raise InvalidArgument("op", f"{kind} is not supported by this server")
        job_id = await self.core.job_admin.resolve(ns, queue, req.job)
        return await handler(self.core, ns, queue, job_id, getattr(op, kind))

    async def job_admin_batch(self, ns: Namespace, req: J.JobAdminBatchRequest) -> J.JobAdminBatchResponse:
        """Malformed items (no job, an op other than progress or add_log) refuse the
        whole call; items refused by the state machine get their error in their slot.
        The queue's name is checked by `report_many`."""
        reports: list[Report] = []
        for i, it in enumerate(req.items):
            ref = job_ref(it.job, f"items[{i}].job")
            kind = it.op.WhichOneof("op")
            if kind == "progress":
                reports.append((ref, kind, it.op.progress.progress, 0))
            elif kind == "add_log":
                reports.append((ref, kind, it.op.add_log.line, it.op.add_log.keep))
            else:
                raise InvalidArgument(f"items[{i}].op", "set progress or add_log")
        out = J.JobAdminBatchResponse()
        add = out.results.add
        for r in await self.core.job_admin.report_many(ns, req.queue, reports):
            if isinstance(r, JobsError):
                add(error=item_error(r))
            else:
                response = add().response
                response.SetInParent()  # set even when empty: a progress is answered without the job
                if r is not None:
                    response.log_count = r
        return out

    async def query(self, ns: Namespace, req: J.QueryRequest) -> J.QueryResponse:
        jobs, token = await self.core.job_admin.query(
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

    async def queue_list(self, ns: Namespace) -> list[str]:
        """Not a JobsService method (an operation of the method table): the namespace's
        queue names, for REST and the console."""
        return await self.core.queues.names(ns)

    async def queue_list_counts(self, ns: Namespace) -> list[tuple[str, pb.QueueCounts]]:
        """Not a JobsService method (the queue_list operation of the method table): every
        queue with its counts, in one snapshot, for REST and the console."""
        return await self.core.queues.names_with_counts(ns)

    # -- result store ------------------------------------------------------------------
    async def result_get(self, ns: Namespace, req: J.ResultGetRequest) -> J.ResultGetResponse:
        value, version = await self.core.results.get(ns, req.key, req.wait_ns, req.after_version)
        if value is None:
            return J.ResultGetResponse()
        return J.ResultGetResponse(value=value, found=True, version=version)

    async def result_m_get(self, ns: Namespace, req: J.ResultMGetRequest) -> J.ResultMGetResponse:
        out = J.ResultMGetResponse()
        for v in await self.core.results.get_many(ns, list(req.keys)):
            out.values.add(value=v, found=True) if v is not None else out.values.add()
        return out

    async def result_set(self, ns: Namespace, req: J.ResultSetRequest) -> J.ResultSetResponse:
        await self.core.results.set(ns, req.key, req.value, req.ttl_ns)
        return J.ResultSetResponse()

    async def result_set_many(self, ns: Namespace, req: J.ResultSetManyRequest) -> J.ResultSetManyResponse:
        await self.core.results.set_many(ns, [(item.key, item.value, item.ttl_ns) for item in req.items])
        return J.ResultSetManyResponse()

    async def result_delete(self, ns: Namespace, req: J.ResultDeleteRequest) -> J.ResultDeleteResponse:
        await self.core.results.delete(ns, req.key)
        return J.ResultDeleteResponse()

    async def result_incr(self, ns: Namespace, req: J.ResultIncrRequest) -> J.ResultIncrResponse:
        """ttl_ns 0 leaves the key's TTL as it is (as Redis INCR does)."""
        size, added = await self.core.results.add(ns, req.key, req.member, req.ttl_ns or None)
        return J.ResultIncrResponse(size=size, added=added)

    async def result_expire(self, ns: Namespace, req: J.ResultExpireRequest) -> J.ResultExpireResponse:
        await self.core.results.expire(ns, req.key, req.ttl_ns)
        return J.ResultExpireResponse()

    # -- exchanges (kombu bindings, routed publishes) -------------------------------------
    async def exchange_bind(self, ns: Namespace, req: J.ExchangeBindRequest) -> J.ExchangeBindResponse:
        await self.core.exchanges.bind(ns, req.exchange, req.routing_key, req.queue, req.ttl_ns)
        return J.ExchangeBindResponse()

    async def exchange_unbind(self, ns: Namespace, req: J.ExchangeUnbindRequest) -> J.ExchangeUnbindResponse:
        removed = await self.core.exchanges.unbind(ns, req.exchange, req.routing_key, req.queue)
        return J.ExchangeUnbindResponse(removed=removed)

    async def exchange_bindings(
        self, ns: Namespace, req: J.ExchangeBindingsRequest
    ) -> J.ExchangeBindingsResponse:
        return J.ExchangeBindingsResponse(bindings=await self.core.exchanges.bindings(ns, req.exchange))

    async def exchange_publish(
        self, ns: Namespace, req: J.ExchangePublishRequest
    ) -> J.ExchangePublishResponse:
        routed = await self.core.exchanges.publish(
            ns, req.exchange, req.type, req.routing_key, req.task, req.opts
        )
        out = J.ExchangePublishResponse()
        for queue, r in routed:
            if isinstance(r, Enqueued):
                fill_enqueued(out.routed.add(queue=queue).result.enqueued, r)
            else:
                out.routed.add(queue=queue).result.error.CopyFrom(item_error(r))
        return out

    # -- quotas ----------------------------------------------------------------------------
    async def get_quotas(self, ns: Namespace, req: J.GetQuotasRequest) -> J.GetQuotasResponse:
        return quotas_response(await self.core.quotas.get(ns), J.GetQuotasResponse)

    async def set_quotas(self, ns: Namespace, req: J.SetQuotasRequest) -> J.SetQuotasResponse:
        if req.reset and req.HasField("quotas"):
            raise InvalidArgument("reset", "either quotas or reset, not both")
        quota = None if req.reset else quotas.from_pb(req.quotas)
        return quotas_response(await self.core.quotas.set(ns, quota), J.SetQuotasResponse)


def quotas_response(view: quotas.QuotaView, response: type) -> Any:
    """GetQuotasResponse or SetQuotasResponse (the same fields) of a quota view."""
    return response(quotas=quotas.to_pb(view.quota), source=view.source, usage=quotas.to_pb(view.usage))


# -- QueueAdmin: one mapping per op ------------------------------------------------------------
async def _q_counts(core: QueueCore, ns: Namespace, queue: str, op: Any) -> J.QueueAdminResponse:
    st = await core.queues.state(ns, queue)
    return J.QueueAdminResponse(
        config=st.config,
        counts=st.counts,
        rate_limit_ttl_ns=st.rate_limit_ttl_ns,
        rate_limit_used=st.rate_limit_used,
        activity=st.activity,
    )


async def _q_create(core: QueueCore, ns: Namespace, queue: str, op: J.QueueOp.Create) -> J.QueueAdminResponse:
    cfg, created = await core.queues.create(ns, queue, op.config)
    return J.QueueAdminResponse(config=cfg, affected=int(created))


async def _q_update(core: QueueCore, ns: Namespace, queue: str, op: J.QueueOp.Update) -> J.QueueAdminResponse:
    return J.QueueAdminResponse(
        config=await core.queues.update(ns, queue, op.config, list(op.fields) or None)
    )


async def _q_pause(core: QueueCore, ns: Namespace, queue: str, op: Any) -> J.QueueAdminResponse:
    await core.queues.pause(ns, queue)
    return await _q_counts(core, ns, queue, op)


async def _q_resume(core: QueueCore, ns: Namespace, queue: str, op: Any) -> J.QueueAdminResponse:
    await core.queues.resume(ns, queue)
    return await _q_counts(core, ns, queue, op)


async def _q_drain(core: QueueCore, ns: Namespace, queue: str, op: J.QueueOp.Drain) -> J.QueueAdminResponse:
    return J.QueueAdminResponse(affected=await core.queues.drain(ns, queue, op.delayed, op.limit))


async def _q_clean(core: QueueCore, ns: Namespace, queue: str, op: J.QueueOp.Clean) -> J.QueueAdminResponse:
    return J.QueueAdminResponse(affected=await core.queues.clean(ns, queue, op.state, op.grace_ns, op.limit))


async def _q_obliterate(
    core: QueueCore, ns: Namespace, queue: str, op: J.QueueOp.Obliterate
) -> J.QueueAdminResponse:
    return J.QueueAdminResponse(affected=await core.queues.obliterate(ns, queue, op.force))


async def _q_retry_all(
    core: QueueCore, ns: Namespace, queue: str, op: J.QueueOp.RetryAll
) -> J.QueueAdminResponse:
    return J.QueueAdminResponse(affected=await core.queues.retry_all(ns, queue, op.state))


async def _q_promote_all(core: QueueCore, ns: Namespace, queue: str, op: Any) -> J.QueueAdminResponse:
    return J.QueueAdminResponse(affected=await core.queues.promote_all(ns, queue))


async def _q_set_rate_limit(
    core: QueueCore, ns: Namespace, queue: str, op: J.QueueOp.SetRateLimit
) -> J.QueueAdminResponse:
    rl = op.rate_limit
    return J.QueueAdminResponse(
        config=await core.queues.set_rate_limit(ns, queue, rl.max, rl.duration_ns, rl.sharded)
    )


async def _q_rate_limit_for(
    core: QueueCore, ns: Namespace, queue: str, op: J.QueueOp.RateLimitFor
) -> J.QueueAdminResponse:
    await core.queues.rate_limit_for(ns, queue, op.for_ns)
    return J.QueueAdminResponse()


async def _q_set_concurrency(
    core: QueueCore, ns: Namespace, queue: str, op: J.QueueOp.SetConcurrency
) -> J.QueueAdminResponse:
    return J.QueueAdminResponse(config=await core.queues.set_concurrency(ns, queue, op.concurrency))


async def _q_metrics(
    core: QueueCore, ns: Namespace, queue: str, op: J.QueueOp.Metrics
) -> J.QueueAdminResponse:
    res = await _q_counts(core, ns, queue, op)
    if op.kind:
        res.metrics.CopyFrom(await core.queues.metrics(ns, queue, op.kind))
    return res


async def _q_workers(core: QueueCore, ns: Namespace, queue: str, op: Any) -> J.QueueAdminResponse:
    return J.QueueAdminResponse(workers=await core.queues.workers(ns, queue))


async def _q_redrive(
    core: QueueCore, ns: Namespace, queue: str, op: J.QueueOp.RedriveDeadLetters
) -> J.QueueAdminResponse:
    return J.QueueAdminResponse(affected=await core.queues.redrive_dead_letters(ns, queue, op.limit))


async def _q_trim_events(
    core: QueueCore, ns: Namespace, queue: str, op: J.QueueOp.TrimEvents
) -> J.QueueAdminResponse:
    return J.QueueAdminResponse(affected=await core.queues.trim_events(ns, queue, op.before_ns))


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


# -- JobAdmin: one mapping per op ----------------------------------------------------------------
def _job(job: pb.Job) -> J.JobAdminResponse:
    return J.JobAdminResponse(job=job)


async def _j_logs(
    core: QueueCore, ns: Namespace, queue: str, job_id: str, op: J.JobOp.Logs
) -> J.JobAdminResponse:
    logs = await core.job_admin.logs(ns, queue, job_id, op.start, op.end)
    return J.JobAdminResponse(logs=logs.lines, log_count=logs.count)


async def _j_remove(
    core: QueueCore, ns: Namespace, queue: str, job_id: str, op: J.JobOp.Remove
) -> J.JobAdminResponse:
    await core.job_admin.remove(ns, queue, job_id, op.children)
    return J.JobAdminResponse(removed=True)


async def _j_remove_child_dependency(
    core: QueueCore, ns: Namespace, queue: str, job_id: str, op: Any
) -> J.JobAdminResponse:
    return J.JobAdminResponse(removed=await core.job_admin.remove_child_dependency(ns, queue, job_id))


async def _j_add_log(
    core: QueueCore, ns: Namespace, queue: str, job_id: str, op: J.JobOp.AddLog
) -> J.JobAdminResponse:
    return J.JobAdminResponse(log_count=await core.job_admin.add_log(ns, queue, job_id, op.line, op.keep))


async def _j_clear_logs(
    core: QueueCore, ns: Namespace, queue: str, job_id: str, op: J.JobOp.ClearLogs
) -> J.JobAdminResponse:
    return J.JobAdminResponse(log_count=await core.job_admin.clear_logs(ns, queue, job_id, op.keep))


async def _j_children(core: QueueCore, ns: Namespace, queue: str, job_id: str, op: Any) -> J.JobAdminResponse:
    # BullMQ getChildrenValues / getDependencies
    return J.JobAdminResponse(children=await core.flows.children(ns, queue, job_id))


_JOB_OPS: dict[str, Callable[..., Any]] = {
    "logs": _j_logs,
    "remove": _j_remove,
    "remove_child_dependency": _j_remove_child_dependency,
    "add_log": _j_add_log,
    "clear_logs": _j_clear_logs,
    "children": _j_children,
    "retry": lambda core, ns, q, j, op: _wrap(core.job_admin.retry(ns, q, j, op.keep_attempts)),
    "promote": lambda core, ns, q, j, op: _wrap(core.job_admin.promote(ns, q, j)),
    "change_priority": lambda core, ns, q, j, op: _wrap(
        core.job_admin.change_priority(ns, q, j, op.priority, op.lifo)
    ),
    "change_delay": lambda core, ns, q, j, op: _wrap(core.job_admin.change_delay(ns, q, j, op.delay_ns)),
    "update_data": lambda core, ns, q, j, op: _wrap(core.job_admin.update_data(ns, q, j, op.data)),
    "progress": lambda core, ns, q, j, op: _wrap(core.job_admin.set_progress(ns, q, j, op.progress)),
    "cancel": lambda core, ns, q, j, op: _wrap(core.job_admin.cancel(ns, q, j)),
}


async def _wrap(job_call) -> J.JobAdminResponse:
    return _job(await job_call)


async def _d_get(a: JobAdmin, ns: Namespace, queue: str, op: J.JobOp.GetDedup) -> J.JobAdminResponse:
    return _job(await a.get_dedup(ns, queue, op.dedup_id))


async def _d_remove(a: JobAdmin, ns: Namespace, queue: str, op: J.JobOp.RemoveDedupKey) -> J.JobAdminResponse:
    return J.JobAdminResponse(removed=await a.remove_dedup_key(ns, queue, op.dedup_id))


_DEDUP_OPS: dict[str, Callable[..., Any]] = {"get_dedup": _d_get, "remove_dedup_key": _d_remove}


__all__ = ["CoreRpc"]
