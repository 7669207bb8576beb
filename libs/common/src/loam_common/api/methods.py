"""The method table: every JobsService RPC, and every other operation a caller needs an
action for, declared once. The transports derive from it:

- the Connect service class both the gateway and a queue core serve
  (`loam_common.api.service.JobsServiceHandlers`, one handler per row);
- the access check (`Operation.action`, the action a token must hold; loam_gateway.connect);
- the gateway's routing (`Method.route(request)`: the key whose owning queue core
  serves the call; loam_gateway.routing);
- what is not built yet (`Method.arrives_with`: the work that brings it; the method
  answers UNIMPLEMENTED naming it, `AnswersUnimplemented`).

A row names the method as the generated code does (snake_case); its request and
response types, its path and whether it streams are read off the proto descriptor, so
they cannot drift from jobs.proto. tests/gateway/test_methods.py checks that the table
covers `JobsService` exactly: a method added to jobs.proto needs a row here.

Routing keys: a queue name routes to that queue's owner; keys of other kinds carry a
`/` (`results/<key>`, `schedules/<id>`, `flows/<id>`, `exchanges/<name>`), which queue
names cannot, so they never collide with a queue.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from google.protobuf import message_factory

from loam_common.auth import ADMIN, CONSUME, DEPLOYMENT_ADMIN, ENGINE, ENQUEUE, SCHEDULE
from loam_common.gen.loam.jobs.v1 import jobs_pb2

SERVICE = jobs_pb2.DESCRIPTOR.services_by_name["JobsService"]

READ, WRITE = False, True  # the `writes` column, spelled out in the table


# -- routing keys: what a request is routed by ---------------------------------------------------
def by_queue(r: Any) -> str:
    return r.queue


def by_token(r: Any) -> str:
    return r.token.queue


def by_first_queue(r: Any) -> str:
    """Lease: its first queue (a lease on several queues is parked on the first one's owner)."""
    return r.queues[0] if r.queues else ""


def by_first_completion(r: Any) -> str:
    """CompleteBatch: its first item's queue, else its lease's (the Router splits a batch by owner)."""
    if r.items:
        return r.items[0].token.queue
    return r.lease.queues[0] if r.lease.queues else ""


def by_first_write(r: Any) -> str:
    """WriteBatch: its first item's queue (or result key). The batch is one transaction
    on the one store every core shares, so the core that owns that key runs it all."""
    if not r.items:
        return ""
    item = r.items[0]
    kind = item.WhichOneof("kind")
    if kind == "enqueue":
        return item.enqueue.queue
    if kind == "cancel":
        return item.cancel.queue
    return "results/" + item.result_set.key


def by_result_key(r: Any) -> str:
    return "results/" + r.key


def by_first_result_key(r: Any) -> str:
    return "results/" + (r.keys[0] if r.keys else "")


def by_first_item_key(r: Any) -> str:
    return "results/" + (r.items[0].key if r.items else "")


def by_exchange(r: Any) -> str:
    return "exchanges/" + r.exchange


def by_schedule_queue(r: Any) -> str:
    """Schedule: the queue its jobs go to (the tick enqueues there)."""
    return r.spec.queue


def by_schedule_id(r: Any) -> str:
    return "schedules/" + r.id


def schedules(r: Any) -> str:
    """ListSchedules: one key for the namespace's schedule listing."""
    return "schedules/"


def by_flow_graph(r: Any) -> str:
    return "flows/" + r.graph.id


def by_flow_id(r: Any) -> str:
    return "flows/" + r.id


def by_selector(r: Any) -> str:
    """Watch: a job or a queue by its queue; a flow or a schedule by its key."""
    sel = r.selector
    which = sel.WhichOneof("what")
    if which == "job":
        return sel.job.queue
    if which == "flow":
        return "flows/" + sel.flow
    if which == "schedule":
        return "schedules/" + sel.schedule
    return sel.queue


def anywhere(r: Any) -> str:
    """No key of its own yet (the engine calls): any core answers."""
    return ""


# -- the rows ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class Operation:
    """Something a caller does that needs an action: a JobsService method (`Method`) or
    an operation only the REST facade or the internal endpoints serve."""

    name: str  # snake_case: the generated code's method name, or the operation's
    action: str  # the action (loam_common.auth) a token must hold
    writes: bool  # changes state (False: only reads it)
    doc: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Method(Operation):
    """A JobsService RPC. `request`, `response`, `streaming` and `path` come from the
    proto descriptor; the rest from the table."""

    rpc: str  # the proto name, e.g. "CompleteBatch"
    path: str  # the Connect path, e.g. "/loam.jobs.v1.JobsService/CompleteBatch"
    request: type
    response: type
    streaming: bool  # server streaming (Watch); otherwise unary
    route: Callable[[Any], str]  # request -> routing key
    long_poll: bool = False  # may park until work arrives (Lease with wait_ns)
    arrives_with: str | None = None  # not implemented yet: the work that brings it

    def unimplemented(self) -> ConnectError:
        """The answer of a method that is not built yet."""
        return ConnectError(
            Code.UNIMPLEMENTED, f"{self.name} is not available yet: it arrives with {self.arrives_with}"
        )


def snake_case(rpc: str) -> str:
    """`CompleteBatch` -> `complete_batch`, `ResultMGet` -> `result_m_get`: the name the
    generated Connect code gives a method."""
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(rpc))


_BY_SNAKE = {snake_case(m.name): m for m in SERVICE.methods}


def _rpc(
    name: str,
    action: str,
    writes: bool,
    route: Callable[[Any], str],
    doc: str,
    *,
    long_poll: bool = False,
    arrives_with: str | None = None,
) -> Method:
    d = _BY_SNAKE.get(name)
    if d is None:
        raise LookupError(f"method table: {name!r} is not a method of {SERVICE.full_name} in jobs.proto")
    return Method(
        name=name,
        action=action,
        writes=writes,
        doc=doc,
        rpc=d.name,
        path=f"/{SERVICE.full_name}/{d.name}",
        request=message_factory.GetMessageClass(d.input_type),
        response=message_factory.GetMessageClass(d.output_type),
        streaming=d.server_streaming,
        route=route,
        long_poll=long_poll,
        arrives_with=arrives_with,
    )


# Every JobsService method, in jobs.proto's order. Reads and writes: Lease writes (it
# takes jobs); QueueAdmin and JobAdmin write (most of their ops do).
# fmt: off
JOBS_METHODS: tuple[Method, ...] = (
    _rpc("enqueue",            ENQUEUE,  WRITE, by_queue,            "add a job to a queue"),
    _rpc("enqueue_bulk",       ENQUEUE,  WRITE, by_queue,            "add many jobs to a queue in one transaction"),
    _rpc("write_batch",        ENQUEUE,  WRITE, by_first_write,      "enqueues, cancels and result sets, all or none"),
    _rpc("lease",              CONSUME,  WRITE, by_first_queue,      "take jobs to run, waiting up to wait_ns for one",
         long_poll=True),
    _rpc("extend",             CONSUME,  WRITE, by_token,            "extend a lease"),
    _rpc("complete",           CONSUME,  WRITE, by_token,            "record a leased job's outcome"),
    _rpc("complete_batch",     CONSUME,  WRITE, by_first_completion, "many completions, and a lease, in one call"),
    _rpc("report",             CONSUME,  WRITE, by_token,            "a running job's progress or log lines"),
    _rpc("end_lease_wait",     CONSUME,  WRITE, by_first_queue,      "answer a worker's waiting Leases now"),
    _rpc("schedule",           SCHEDULE, WRITE, by_schedule_queue,   "create or update a schedule"),
    _rpc("unschedule",         SCHEDULE, WRITE, by_schedule_id,      "delete a schedule"),
    _rpc("flow",               ENQUEUE,  WRITE, by_flow_graph,       "submit a flow of dependent jobs"),
    _rpc("get_schedule",       SCHEDULE, READ,  by_schedule_id,      "a schedule's record"),
    _rpc("list_schedules",     SCHEDULE, READ,  schedules,           "the namespace's schedules"),
    _rpc("get_flow",           ENQUEUE,  READ,  by_flow_id,          "a flow's record"),
    # The engine runs' records are in the store: any core answers (loam_engines).
    _rpc("submit_engine_job",  ENGINE,   WRITE, anywhere,            "run a Spark or Flink job"),
    _rpc("control_engine_job", ENGINE,   WRITE, anywhere,            "stop, cancel or savepoint an engine run"),
    _rpc("get_engine_run",     ENGINE,   READ,  anywhere,            "an engine run: state, attempts, exit status"),
    _rpc("list_engine_runs",   ENGINE,   READ,  anywhere,            "the namespace's engine runs, newest first"),
    _rpc("list_engine_run_logs", ENGINE, READ,  anywhere,            "an engine run's output lines, optionally waiting",
         long_poll=True),
    _rpc("watch",              CONSUME,  READ,  by_selector,         "a snapshot, then the events after it"),
    _rpc("queue_admin",        ADMIN,    WRITE, by_queue,            "a queue's settings, counts and bulk ops"),
    _rpc("job_admin",          ADMIN,    WRITE, by_queue,            "one job: read, retry, remove, promote..."),
    _rpc("job_admin_batch",    ADMIN,    WRITE, by_queue,            "many jobs' progress and log lines in one call"),
    _rpc("query",              ADMIN,    READ,  by_queue,            "a queue's jobs by state, name and time"),
    _rpc("result_get",         CONSUME,  READ,  by_result_key,       "a stored result"),
    _rpc("result_m_get",       CONSUME,  READ,  by_first_result_key, "several stored results"),
    _rpc("result_set",         CONSUME,  WRITE, by_result_key,       "store a result"),
    _rpc("result_set_many",    CONSUME,  WRITE, by_first_item_key,   "store several results"),
    _rpc("result_delete",      CONSUME,  WRITE, by_result_key,       "delete a result"),
    _rpc("result_incr",        CONSUME,  WRITE, by_result_key,       "add to a counter result"),
    _rpc("result_expire",      CONSUME,  WRITE, by_result_key,       "set a result's expiry"),
    # kombu consumers declare and bind their own queues: binding is jobs:consume
    _rpc("exchange_bind",      CONSUME,  WRITE, by_exchange,         "bind a queue to an exchange"),
    _rpc("exchange_unbind",    CONSUME,  WRITE, by_exchange,         "unbind a queue from an exchange"),
    _rpc("exchange_bindings",  CONSUME,  READ,  by_exchange,         "an exchange's bindings"),
    _rpc("exchange_publish",   ENQUEUE,  WRITE, by_exchange,         "enqueue a copy on every matching bound queue"),
    # Quotas are the namespace's, in the store: any core answers. Setting them is the
    # operator's (deployment:admin): a tenant's jobs:admin cannot lift its own limits.
    _rpc("get_quotas",         ADMIN,    READ,  anywhere,            "the namespace's quotas and what it holds"),
    _rpc("set_quotas",         DEPLOYMENT_ADMIN, WRITE, anywhere,    "set or reset the namespace's quotas"),
)

# The operations that are not JobsService methods: served by the REST facade and the
# internal endpoints, with the same access check.
OTHER_OPERATIONS: tuple[Operation, ...] = (
    Operation(name="queue_list",    action=ADMIN, writes=READ, doc="the namespace's queues (GET /v1/queues)"),
    Operation(name="events_export", action=ADMIN, writes=READ,
              doc="a queue's events as Parquet or Arrow (GET /v1/queues/{queue}/events:export)"),
    Operation(name="metrics",       action=ADMIN, writes=READ,
              doc="Prometheus text; with auth on, the token's namespace only (GET /metrics)"),
    Operation(name="queue_get",     action=ADMIN, writes=READ,
              doc="a queue's settings and counts (GET /v1/queues/{queue})"),
    Operation(name="job_get",       action=ADMIN, writes=READ,
              doc="a job with its logs, or its children (GET /v1/queues/{queue}/jobs/{job})"),
    Operation(name="workers",       action=ADMIN, writes=READ,
              doc="the workers seen on a queue (GET /v1/queues/{queue}/workers)"),
    Operation(name="resonate",      action=CONSUME, writes=WRITE,
              doc="durable mode: a Resonate SDK's requests and push stream (POST /resonate/, GET /resonate/poll/...)"),
    Operation(name="resonate_schedule", action=SCHEDULE, writes=WRITE,
              doc="durable mode: Resonate's schedule.* requests"),
    Operation(name="durable_admin", action=ADMIN, writes=WRITE,
              doc="durable mode: promise trees and the retention TTL (/v1/durable/...)"),
)
# fmt: on

#: JobsService methods by snake_case name
METHODS: dict[str, Method] = {m.name: m for m in JOBS_METHODS}
#: every operation that needs an action, by name
OPERATIONS: dict[str, Operation] = {**METHODS, **{o.name: o for o in OTHER_OPERATIONS}}
UNARY: dict[str, Method] = {m.name: m for m in JOBS_METHODS if not m.streaming}
STREAMING: dict[str, Method] = {m.name: m for m in JOBS_METHODS if m.streaming}
#: the Connect paths of the server streams
STREAM_PATHS: frozenset[str] = frozenset(m.path for m in STREAMING.values())


def operation(name: str) -> Operation:
    """The row of `name`; LookupError naming the table for a name it does not have
    (a misspelt operation in a transport fails where it is declared, not on a call)."""
    try:
        return OPERATIONS[name]
    except KeyError:
        raise LookupError(f"{name!r} is not in the method table (loam_common.api.methods)") from None


class AnswersUnimplemented:
    """Base of an implementation of JobsService as `(ns, request)` methods (the queue
    core's CoreRpc): a method the table marks `arrives_with` and the class does not
    define answers UNIMPLEMENTED naming the work that brings it. The one place that
    answer is made; a method neither defined nor so marked stays an AttributeError
    (tests/gateway/test_methods.py checks there is none)."""

    def __getattr__(self, name: str) -> Any:
        method = METHODS.get(name)
        if method is None or method.arrives_with is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        if method.streaming:

            async def stream(ns: str, request: Any) -> AsyncIterator[Any]:
                raise method.unimplemented()
                yield  # pragma: no cover - makes this an async generator

            return stream

        async def unary(ns: str, request: Any) -> Any:
            raise method.unimplemented()

        return unary
