"""Flows from Python: `FlowNode` (one job and the nodes it waits for) and the Celery
canvas shapes built from nodes, submitted with `Client.flow`.

    a = loam.FlowNode("fetch", "io", "fetch", {"url": u})
    b = loam.FlowNode("parse", "cpu", "parse", depends_on=[a])
    await client.flow([a, b], id="import-42")            # any DAG: nodes with depends_on

    loam.chain(a, b, c)                  # a, then b, then c (each waits for the one before)
    loam.group(a, b, c)                  # all at once
    loam.chord([a, b, c], total)         # all at once, then `total` (it waits for all three)
    loam.chain(a, loam.group(b, c), d)   # they nest as in Celery: b and c after a, d after both

A node that depends on others runs once they have finished; it reads their results
with `client.children_values(job.queue, job.id)` (BullMQ's getChildrenValues). What a
node's failure does to the nodes waiting for it is its `on_failure` (BullMQ's flags):
fail_parent (the default: they fail too), continue_parent (they run now),
ignore_dependency (counts as done), remove_dependency (forgotten).

The helpers copy the nodes they are given, so one FlowNode can serve as a template."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from loam import options, payloads
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb

_POLICIES = {
    "fail_parent": pb.FAILURE_POLICY_FAIL_PARENT,
    "continue_parent": pb.FAILURE_POLICY_CONTINUE_PARENT,
    "ignore_dependency": pb.FAILURE_POLICY_IGNORE_DEPENDENCY,
    "remove_dependency": pb.FAILURE_POLICY_REMOVE_DEPENDENCY,
    # short names and BullMQ's option names
    "fail": pb.FAILURE_POLICY_FAIL_PARENT,
    "continue": pb.FAILURE_POLICY_CONTINUE_PARENT,
    "ignore": pb.FAILURE_POLICY_IGNORE_DEPENDENCY,
    "remove": pb.FAILURE_POLICY_REMOVE_DEPENDENCY,
    "failparentonfailure": pb.FAILURE_POLICY_FAIL_PARENT,
    "continueparentonfailure": pb.FAILURE_POLICY_CONTINUE_PARENT,
    "ignoredependencyonfailure": pb.FAILURE_POLICY_IGNORE_DEPENDENCY,
    "removedependencyonfailure": pb.FAILURE_POLICY_REMOVE_DEPENDENCY,
}


def failure_policy(value: str | int | None) -> int:
    """'fail_parent', 'continue_parent', 'ignore_dependency', 'remove_dependency' (or
    'fail', 'continue', 'ignore', 'remove', or BullMQ's flag names) → FailurePolicy."""
    if value is None:
        return pb.FAILURE_POLICY_UNSPECIFIED
    if isinstance(value, int):
        return value
    key = str(value).strip().lower().replace("-", "_")
    if key not in _POLICIES and key.replace("_", "") in _POLICIES:
        key = key.replace("_", "")
    if key not in _POLICIES:
        raise ValueError(
            f"unknown on_failure {value!r}; one of fail_parent, continue_parent, ignore_dependency, remove_dependency"
        )
    return _POLICIES[key]


class FlowNode:
    """One job of a flow: node `id` (unique in the flow), `queue`, task `name`,
    `payload`, the nodes it waits for (`depends_on`: ids or FlowNodes), what its own
    failure does to the nodes waiting for it (`on_failure`), and enqueue options
    (`priority`, `delay`, `attempts`, `backoff`, `job_key`, ... as `Client.enqueue`
    takes them; a flow's nodes have no `parent`, `idempotency_key` or `dedup`)."""

    __slots__ = ("depends_on", "id", "name", "on_failure", "opts", "payload", "queue")

    def __init__(
        self,
        id: str,
        queue: str,
        name: str,
        payload: Any = None,
        *,
        depends_on: Iterable[str | FlowNode] = (),
        on_failure: str | int | None = None,
        **opts: Any,
    ) -> None:
        unknown = set(opts) - options.ENQUEUE_OPTIONS
        if unknown:
            raise TypeError(f"unknown enqueue option(s): {', '.join(sorted(unknown))}")
        self.id = str(id)
        self.queue = queue
        self.name = name
        self.payload = payload
        self.depends_on: list[str] = [d.id if isinstance(d, FlowNode) else str(d) for d in depends_on]
        self.on_failure = failure_policy(on_failure)
        self.opts = opts

    def __repr__(self) -> str:
        deps = f", depends_on={self.depends_on!r}" if self.depends_on else ""
        return f"FlowNode({self.id!r}, {self.queue!r}, {self.name!r}{deps})"

    def to_pb(self) -> pb.FlowNode:
        o, headers = options.enqueue_opts(self.opts)
        task = pb.TaskSpec(name=self.name, payload=payloads.encode(self.payload), headers=headers)
        return pb.FlowNode(
            id=self.id,
            queue=self.queue,
            task=task,
            opts=o,
            depends_on=self.depends_on,
            on_failure=self.on_failure,
        )


class Flow:
    """A graph of FlowNodes with an optional flow id: what `chain`, `group` and `chord`
    build and `Client.flow` submits. `heads` are the nodes that wait for no other node
    of this flow, `tails` those no other node of it waits for."""

    __slots__ = ("id", "nodes")

    def __init__(self, nodes: Iterable[FlowNode] = (), id: str | None = None) -> None:
        self.nodes: list[FlowNode] = list(nodes)
        self.id = id
        seen: set[str] = set()
        for n in self.nodes:
            if n.id in seen:
                raise ValueError(f"node id {n.id!r} is used twice in this flow; node ids must be unique")
            seen.add(n.id)

    @property
    def heads(self) -> list[FlowNode]:
        ids = {n.id for n in self.nodes}
        return [n for n in self.nodes if not any(d in ids for d in n.depends_on)]

    @property
    def tails(self) -> list[FlowNode]:
        waited = {d for n in self.nodes for d in n.depends_on}
        return [n for n in self.nodes if n.id not in waited]

    def __iter__(self):
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def __repr__(self) -> str:
        return f"Flow({self.nodes!r}" + (f", id={self.id!r})" if self.id else ")")

    def to_pb(self, id: str | None = None) -> pb.FlowSpec:
        return pb.FlowSpec(id=id or self.id or "", nodes=[n.to_pb() for n in self.nodes])


Step = FlowNode | Flow  # one node, or a Flow from chain / group / chord


def _copied(step: Step) -> Flow:
    if isinstance(step, FlowNode):
        return Flow([copy.deepcopy(step)])
    if isinstance(step, Flow):
        return Flow([copy.deepcopy(n) for n in step.nodes])
    raise TypeError(
        f"a flow step is a FlowNode, or a Flow from chain / group / chord, not {type(step).__name__}"
    )


def chain(*steps: Step, id: str | None = None) -> Flow:
    """Each step after the one before (Celery's chain): the first nodes of a step wait
    for the last nodes of the previous one."""
    out: list[FlowNode] = []
    before: list[FlowNode] = []
    for step in steps:
        f = _copied(step)
        heads, tails = f.heads, f.tails
        for h in heads:
            h.depends_on = [*h.depends_on, *(t.id for t in before if t.id not in h.depends_on)]
        out.extend(f.nodes)
        before = tails
    return Flow(out, id)


def group(*steps: Step, id: str | None = None) -> Flow:
    """The steps side by side (Celery's group): none waits for another."""
    return Flow([n for step in steps for n in _copied(step).nodes], id)


def chord(header: Iterable[Step] | Flow, body: Step, *, id: str | None = None) -> Flow:
    """`header` side by side, then `body`, which waits for all of them (Celery's chord;
    the body reads their results with `children_values`)."""
    head = header if isinstance(header, Flow) else group(*header)
    return chain(head, body, id=id)


def flow_spec(
    nodes: Flow | pb.FlowSpec | Iterable[FlowNode | pb.FlowNode], id: str | None = None
) -> pb.FlowSpec:
    """A FlowSpec from a Flow, a FlowSpec, or FlowNodes (or FlowNode messages); `id`
    (if given) overrides theirs."""
    if isinstance(nodes, pb.FlowSpec):
        spec = pb.FlowSpec()
        spec.CopyFrom(nodes)
    elif isinstance(nodes, Flow):
        spec = nodes.to_pb()
    elif isinstance(nodes, FlowNode | pb.FlowNode):
        raise TypeError("flow() takes the nodes as a list (or a Flow), not one FlowNode")
    else:
        items = list(nodes)
        Flow([n for n in items if isinstance(n, FlowNode)])  # unique ids, checked early
        spec = pb.FlowSpec(nodes=[n.to_pb() if isinstance(n, FlowNode) else n for n in items])
    if id:
        spec.id = id
    return spec
