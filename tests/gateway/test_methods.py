"""The method table (loam_common.api.methods) against jobs.proto and against what derives
from it: it covers JobsService exactly, with the generated code's names and types; every
action is one a token can hold; each method's routing key is what the gateway routed by
before the table (the cases of the old `route_key`); the queue core implements every
method the table does not mark as later work, and answers those UNIMPLEMENTED naming it."""

from __future__ import annotations

import inspect

import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from loam_common import auth
from loam_common.api.methods import (
    JOBS_METHODS,
    METHODS,
    OPERATIONS,
    OTHER_OPERATIONS,
    SERVICE,
    STREAMING,
    UNARY,
    operation,
)
from loam_common.api.service import JobsServiceHandlers
from loam_common.gen.loam.jobs.v1 import jobs_connect
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.gen.loam.jobs.v1.jobs_connect import JobsServiceASGIApplication
from loam_queue_core.rpc import CoreRpc

GENERATED = {n for n, v in vars(jobs_connect.JobsService).items() if not n.startswith("_") and callable(v)}


def test_the_table_covers_the_proto_service_exactly():
    in_proto = [m.name for m in SERVICE.methods]
    assert [m.rpc for m in JOBS_METHODS] == in_proto, "add the new method's row to loam_common.api.methods"
    assert set(METHODS) == GENERATED  # the names the generated Connect code gives them
    for m in JOBS_METHODS:
        d = SERVICE.methods_by_name[m.rpc]
        assert m.path == f"/loam.jobs.v1.JobsService/{m.rpc}"
        assert m.request.DESCRIPTOR is d.input_type and m.response.DESCRIPTOR is d.output_type
        assert m.streaming == d.server_streaming and not d.client_streaming
    assert set(STREAMING) == {"watch"}
    assert set(UNARY) | set(STREAMING) == set(METHODS) and not set(UNARY) & set(STREAMING)


def test_every_action_is_one_a_token_can_hold():
    for op in OPERATIONS.values():
        assert op.action in auth.ACTIONS, op.name
    assert {o.name for o in OTHER_OPERATIONS} == {
        "queue_list", "events_export", "metrics", "queue_get", "job_get", "workers",
        "resonate", "resonate_schedule", "durable_admin",
    }  # fmt: skip
    assert not set(METHODS) & {o.name for o in OTHER_OPERATIONS}


def test_actions_are_what_the_gateway_checked_before():
    by_action: dict[str, set[str]] = {}
    for op in OPERATIONS.values():
        by_action.setdefault(op.action, set()).add(op.name)
    assert by_action == {
        auth.ENQUEUE: {"enqueue", "enqueue_bulk", "write_batch", "flow", "get_flow", "exchange_publish"},
        auth.CONSUME: {"lease", "extend", "complete", "complete_batch", "report", "end_lease_wait", "watch"}
        | {m for m in METHODS if m.startswith("result_")}
        | {"exchange_bind", "exchange_unbind", "exchange_bindings"}
        | {"resonate"},  # durable mode: a Resonate worker's requests and pushes
        auth.SCHEDULE: {"schedule", "unschedule", "get_schedule", "list_schedules", "resonate_schedule"},
        auth.ENGINE: {
            "submit_engine_job",
            "control_engine_job",
            "get_engine_run",
            "list_engine_runs",
            "list_engine_run_logs",
        },
        auth.ADMIN: {"queue_admin", "job_admin", "job_admin_batch", "query", "queue_list", "events_export"}
        | {"metrics"}
        | {
            "queue_get",
            "job_get",
            "workers",
            "durable_admin",
        }  # REST reads the console added (decision 0028)
        | {"get_quotas"},
        auth.DEPLOYMENT_ADMIN: {"set_quotas"},  # the operator's: a tenant cannot lift its own limits
    }


def test_a_read_token_may_call_exactly_the_reads():
    """jobs:read (the console's viewer) opens the operations the table marks as reads."""
    reads = {op.name for op in OPERATIONS.values() if not op.writes}
    assert {"query", "queue_list", "queue_get", "job_get", "workers", "watch", "list_schedules"} <= reads
    assert not reads & {"queue_admin", "job_admin", "enqueue", "lease", "complete", "schedule", "result_set"}


def test_a_name_not_in_the_table_is_refused_where_it_is_named():
    assert operation("enqueue") is METHODS["enqueue"]
    with pytest.raises(LookupError, match="not in the method table"):
        operation("enqueue_all")


TOKEN = J.LeaseToken(queue="q1", job="j", epoch=1)
LEASE_Q2 = J.LeaseRequest(queues=["q2"])

# (method, request, the key it routes by): the cases of the gateway's `route_key`
# before the table, one or more per method.
ROUTES = [
    ("enqueue", J.EnqueueRequest(queue="q1"), "q1"),
    ("enqueue_bulk", J.EnqueueBulkRequest(queue="q1"), "q1"),
    ("lease", J.LeaseRequest(queues=["q2", "q1"]), "q2"),
    ("lease", J.LeaseRequest(), ""),
    ("extend", J.ExtendRequest(token=TOKEN), "q1"),
    ("complete", J.CompleteRequest(token=TOKEN), "q1"),
    ("complete_batch", J.CompleteBatchRequest(items=[J.CompleteRequest(token=TOKEN)], lease=LEASE_Q2), "q1"),
    ("complete_batch", J.CompleteBatchRequest(lease=LEASE_Q2), "q2"),
    ("complete_batch", J.CompleteBatchRequest(), ""),
    ("report", J.ReportRequest(token=TOKEN), "q1"),
    ("end_lease_wait", J.EndLeaseWaitRequest(queues=["q1", "q2"], worker="w"), "q1"),
    ("schedule", J.ScheduleRequest(spec=pb.ScheduleSpec(id="s1", queue="q1")), "q1"),
    ("unschedule", J.UnscheduleRequest(id="s1"), "schedules/s1"),
    ("flow", J.FlowRequest(graph=pb.FlowSpec(id="f1")), "flows/f1"),
    ("get_schedule", J.GetScheduleRequest(id="s1"), "schedules/s1"),
    ("list_schedules", J.ListSchedulesRequest(page_size=5), "schedules/"),
    ("get_flow", J.GetFlowRequest(id="f1"), "flows/f1"),
    ("submit_engine_job", J.SubmitEngineJobRequest(), ""),
    ("control_engine_job", J.ControlEngineJobRequest(run="r1"), ""),
    ("get_engine_run", J.GetEngineRunRequest(run="r1"), ""),
    ("list_engine_runs", J.ListEngineRunsRequest(), ""),
    ("list_engine_run_logs", J.ListEngineRunLogsRequest(run="r1"), ""),
    ("watch", J.WatchRequest(selector=J.Selector(queue="q1")), "q1"),
    ("watch", J.WatchRequest(selector=J.Selector(job=J.LeaseToken(queue="q2", job="j"))), "q2"),
    ("watch", J.WatchRequest(selector=J.Selector(flow="f1")), "flows/f1"),
    ("watch", J.WatchRequest(selector=J.Selector(schedule="s1")), "schedules/s1"),
    ("watch", J.WatchRequest(), ""),
    ("queue_admin", J.QueueAdminRequest(queue="q1", op=J.QueueOp(pause={})), "q1"),
    ("job_admin", J.JobAdminRequest(queue="q1", job="j"), "q1"),
    ("job_admin_batch", J.JobAdminBatchRequest(queue="q1"), "q1"),
    ("query", J.QueryRequest(queue="q1"), "q1"),
    ("result_get", J.ResultGetRequest(key="k1"), "results/k1"),
    ("result_m_get", J.ResultMGetRequest(keys=["k2", "k1"]), "results/k2"),
    ("result_m_get", J.ResultMGetRequest(), "results/"),
    ("result_set", J.ResultSetRequest(key="k1", value=pb.Payload()), "results/k1"),
    ("result_set_many", J.ResultSetManyRequest(items=[J.ResultSetRequest(key="k2")]), "results/k2"),
    ("result_set_many", J.ResultSetManyRequest(), "results/"),
    ("write_batch", J.WriteBatchRequest(items=[J.WriteItem(enqueue=J.EnqueueRequest(queue="q"))]), "q"),
    ("write_batch", J.WriteBatchRequest(items=[J.WriteItem(cancel=J.WriteItem.Cancel(queue="c"))]), "c"),
    (
        "write_batch",
        J.WriteBatchRequest(items=[J.WriteItem(result_set=J.ResultSetRequest(key="k"))]),
        "results/k",
    ),
    ("write_batch", J.WriteBatchRequest(), ""),
    ("result_delete", J.ResultDeleteRequest(key="k1"), "results/k1"),
    ("result_incr", J.ResultIncrRequest(key="k1"), "results/k1"),
    ("result_expire", J.ResultExpireRequest(key="k1"), "results/k1"),
    ("exchange_bind", J.ExchangeBindRequest(exchange="x1", queue="q1"), "exchanges/x1"),
    ("exchange_unbind", J.ExchangeUnbindRequest(exchange="x1", queue="q1"), "exchanges/x1"),
    ("exchange_bindings", J.ExchangeBindingsRequest(exchange="x1"), "exchanges/x1"),
    ("exchange_publish", J.ExchangePublishRequest(exchange="x1"), "exchanges/x1"),
    ("get_quotas", J.GetQuotasRequest(), ""),  # the namespace's, in the store: any core
    ("set_quotas", J.SetQuotasRequest(reset=True), ""),
]


@pytest.mark.parametrize(
    ("method", "request_", "key"), ROUTES, ids=[f"{m}-{i}" for i, (m, _, _) in enumerate(ROUTES)]
)
def test_routing_keys_are_as_before(method, request_, key):
    m = METHODS[method]
    assert isinstance(request_, m.request)
    assert m.route(request_) == key


def test_every_method_has_a_routing_case():
    assert {m for m, _, _ in ROUTES} == set(METHODS)


def test_the_queue_core_implements_every_method_not_marked_as_later_work():
    for m in JOBS_METHODS:
        defined = m.name in vars(CoreRpc)
        if m.arrives_with is None:
            assert defined, f"CoreRpc.{m.name} is missing (or mark it arrives_with in the table)"
            fn = vars(CoreRpc)[m.name]
            assert inspect.isasyncgenfunction(fn) if m.streaming else inspect.iscoroutinefunction(fn), m.name
        else:
            assert not defined, f"CoreRpc.{m.name} exists: drop its arrives_with from the table"
    assert [m.name for m in JOBS_METHODS if m.arrives_with] == []


async def test_engine_methods_without_an_engine_runner_answer_unimplemented_naming_it():
    rpc = CoreRpc.__new__(CoreRpc)  # the answer needs no core
    rpc.engines = None
    engine_methods = [m.name for m in JOBS_METHODS if "engine" in m.name]
    assert len(engine_methods) == 5
    for name in engine_methods:
        with pytest.raises(ConnectError) as err:
            await getattr(rpc, name)("ns", METHODS[name].request())
        assert err.value.code == Code.UNIMPLEMENTED
        assert "the engine runner (loam_engines)" in err.value.message
    with pytest.raises(AttributeError):
        rpc.enqueue_everything  # noqa: B018 - neither in the table nor defined


def test_the_connect_service_has_one_handler_per_method():
    for m in JOBS_METHODS:
        handler = getattr(JobsServiceHandlers, m.name)
        assert handler.__name__ == m.name
        assert inspect.isasyncgenfunction(handler) if m.streaming else inspect.iscoroutinefunction(handler)
    app = JobsServiceASGIApplication(JobsServiceHandlers())
    endpoints = app._resolve_endpoints(app._service)
    assert set(endpoints) == {m.path for m in JOBS_METHODS}
