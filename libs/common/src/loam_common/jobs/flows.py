"""Flows (spec §8.2): jobs that wait for other jobs. BullMQ's FlowProducer trees, Celery's
chain / group / chord, and any DAG are one FlowSpec: nodes (queue, task, options) with
`depends_on` (the nodes that must finish first: a BullMQ parent depends on its children)
and a per-node failure policy (BullMQ's four flags).

`flow_submit` creates every node's job in one transaction: nodes without dependencies
are ready (or delayed), the others wait in `waiting-children`. The links live on the
jobs and are followed by dependencies.py, in the transition that finishes a child.

A running job adds children with `EnqueueOpts.parent` (`dependencies.attach_child`) and
then waits for them with the WaitChildren outcome (BullMQ's moveToWaitingChildren)."""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import dataclass, field

from loam_common import keys, validate
from loam_common.errors import AlreadyExists, InvalidArgument, NotFound
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S
from loam_common.jobs.dependencies import release_parent
from loam_common.jobs.insert import job_insert
from loam_common.jobs.linked import LinkedQueueTx
from loam_common.jobs.new_job import NewJob, check_opts
from loam_common.jobs.queue import QueueTx
from loam_common.store.base import Txn

MAX_NODES = 10_000
_FLAG_OF = {
    pb.FAILURE_POLICY_UNSPECIFIED: "fail_parent_on_failure",
    pb.FAILURE_POLICY_FAIL_PARENT: "fail_parent_on_failure",
    pb.FAILURE_POLICY_CONTINUE_PARENT: "continue_parent_on_failure",
    pb.FAILURE_POLICY_IGNORE_DEPENDENCY: "ignore_dependency_on_failure",
    pb.FAILURE_POLICY_REMOVE_DEPENDENCY: "remove_dependency_on_failure",
    pb.FAILURE_POLICY_KEEP_WAITING: "keep_waiting_on_failure",
}
_REFUSED_OPTS = {
    "idempotency": "the flow id makes a submit idempotent",
    "dedup": "a deduplicated node would not be created; flows create every node",
}


# -- submitting a flow --------------------------------------------------------------------------
def check_flow(spec: pb.FlowSpec, field: str = "graph") -> None:
    """Refuse a graph that cannot run, naming the field, before any transaction. Each
    node's queue, task and options are checked by the caller as for an enqueue."""
    if spec.id:
        validate.text(f"{field}.id", spec.id, 1024)
    if not spec.nodes:
        raise InvalidArgument(f"{field}.nodes", "a flow has at least one node")
    if len(spec.nodes) > MAX_NODES:
        raise InvalidArgument(f"{field}.nodes", f"at most {MAX_NODES} nodes per flow (got {len(spec.nodes)})")
    index: dict[str, int] = {}
    for i, node in enumerate(spec.nodes):
        f = f"{field}.nodes[{i}]"
        validate.text(f"{f}.id", node.id, 256, allow_empty=False)
        if node.id in index:
            raise InvalidArgument(f"{f}.id", f"{node.id!r} is also node {index[node.id]}")
        index[node.id] = i
        validate.name(f"{f}.queue", node.queue)
        validate.text(f"{f}.task.name", node.task.name, 256, allow_empty=False)
        check_opts(node.opts, f"{f}.opts")
        for name, why in _REFUSED_OPTS.items():
            if node.opts.HasField(name):
                raise InvalidArgument(f"{f}.opts.{name}", why)
        if node.on_failure not in _FLAG_OF:
            raise InvalidArgument(f"{f}.on_failure", f"unknown failure policy {node.on_failure}")
    depended_on = {dep for node in spec.nodes for dep in node.depends_on}
    for i, node in enumerate(spec.nodes):
        if node.opts.HasField("parent") and node.id in depended_on:
            # A node with no dependents may join a job outside the flow (BullMQ's flow
            # under a running job); the others are linked by depends_on.
            raise InvalidArgument(
                f"{field}.nodes[{i}].opts.parent", "flow nodes other nodes depend on are linked by depends_on"
            )
        if node.join_existing and node.depends_on:
            raise InvalidArgument(f"{field}.nodes[{i}].join_existing", "applies to nodes without depends_on")
        seen = set()
        for j, dep in enumerate(node.depends_on):
            f = f"{field}.nodes[{i}].depends_on[{j}]"
            if dep not in index:
                raise InvalidArgument(f, f"{dep!r} is not a node of this flow")
            if dep == node.id:
                raise InvalidArgument(f, "a node cannot depend on itself")
            if dep in seen:
                raise InvalidArgument(f, f"{dep!r} is listed twice")
            seen.add(dep)
    _check_acyclic(spec, index, field)


def _check_acyclic(spec: pb.FlowSpec, index: dict[str, int], field: str) -> None:
    pending = [len(n.depends_on) for n in spec.nodes]
    dependents: list[list[int]] = [[] for _ in spec.nodes]
    for i, node in enumerate(spec.nodes):
        for dep in node.depends_on:
            dependents[index[dep]].append(i)
    ready = deque(i for i, p in enumerate(pending) if p == 0)
    done = 0
    while ready:
        i = ready.popleft()
        done += 1
        for d in dependents[i]:
            pending[d] -= 1
            if pending[d] == 0:
                ready.append(d)
    if done < len(spec.nodes):
        stuck = [spec.nodes[i].id for i, p in enumerate(pending) if p][:5]
        raise InvalidArgument(f"{field}.nodes", f"the dependencies form a cycle (through {', '.join(stuck)})")


def request_hash(spec: pb.FlowSpec) -> bytes:
    """What a second submit with the same id must match. Take it before payloads move to
    the blob store."""
    return hashlib.sha256(spec.SerializeToString(deterministic=True)).digest()


@dataclass(frozen=True, slots=True)
class Submitted:
    flow_id: str
    jobs: dict[str, str]  # node id -> job id
    created: bool  # False: a flow with this id existed; these are its jobs
    ready_queues: set[str] = field(default_factory=set)


def flow_submit(
    tx: Txn, ns: str, flow_id: str, rhash: bytes, spec: pb.FlowSpec, news: list[NewJob]
) -> Submitted:
    """Create every node's job (`news[i]` is node i, validated and with its id). A flow id
    seen before returns that flow's jobs if the graph is the same, else AlreadyExists."""
    fkey = keys.flow(ns, flow_id)
    raw = tx.get(fkey)
    if raw is not None:
        rec = pb.FlowRecord.FromString(raw)
        if rec.request_hash != rhash:
            raise AlreadyExists(f"flow {flow_id!r} exists with another graph; use another flow id", flow_id)
        return Submitted(flow_id, {j.node: j.job_id for j in rec.jobs}, False)
    by_id = {node.id: (node, nj) for node, nj in zip(spec.nodes, news, strict=True)}
    parents: dict[str, list[pb.ParentRef]] = {node.id: [] for node in spec.nodes}
    for node, nj in by_id.values():
        for dep in node.depends_on:
            child = by_id[dep][0]
            ref = pb.ParentRef(queue=node.queue, job_id=nj.job_id)
            setattr(ref, _FLAG_OF[child.on_failure], True)
            parents[dep].append(ref)

    root = LinkedQueueTx(tx, ns, spec.nodes[0].queue)
    rec = pb.FlowRecord(id=flow_id, request_hash=rhash, created_ns=root.now)
    ready: set[str] = set()
    joined: dict[str, str] = {}  # node id -> the existing job it joined as (join_existing)
    for i, (node, nj) in enumerate(zip(spec.nodes, news, strict=True)):
        qt = root.peer(node.queue)

        def init(job: pb.Job, node=node) -> None:
            job.parents.extend(parents[node.id])
            job.flow, job.flow_node = flow_id, node.id
            if node.depends_on:
                job.state = S.WAITING_CHILDREN
                job.pending_children = job.children = len(node.depends_on)

        res = job_insert(qt, NewJob(nj.job_id, nj.task, nj.opts, init=init, sent_hash=nj.sent_hash))
        if not res.created:
            if not node.join_existing:
                raise AlreadyExists(
                    f"graph.nodes[{i}].opts.job_key {nj.opts.job_key!r} is taken by job {res.job_id}",
                    res.job_id,
                )
            joined[node.id] = res.job_id
        if res.state in S.READY:
            ready.add(node.queue)
        rec.jobs.add(node=node.id, queue=node.queue, job_id=res.job_id)
    # The links, once every node's job exists (a joined child's id is known only now).
    for node, nj in zip(spec.nodes, news, strict=True):
        qt = root.peer(node.queue)
        for dep in node.depends_on:
            child, cj = by_id[dep]
            child_id = joined.get(dep, cj.job_id)
            d = pb.Dependency(
                queue=child.queue,
                job_id=child_id,
                node=dep,
                state=pb.DEPENDENCY_STATE_PENDING,
                job_key=cj.opts.job_key,
                policy=child.on_failure or pb.FAILURE_POLICY_FAIL_PARENT,
            )
            if dep in joined:
                ref = pb.ParentRef(queue=node.queue, job_id=nj.job_id)
                setattr(ref, _FLAG_OF[child.on_failure], True)
                _join_parent(root.peer(child.queue), child_id, qt, ref, d)
            tx.put(qt.k.dependency(nj.job_id, child.queue, child_id), d.SerializeToString())
    root.flush()
    tx.put(fkey, rec.SerializeToString())
    return Submitted(flow_id, {j.node: j.job_id for j in rec.jobs}, True, ready)


def flow_get(tx: Txn, ns: str, flow_id: str) -> pb.FlowRecord:
    raw = tx.get(keys.flow(ns, flow_id))
    if raw is None:
        raise NotFound(f"flow {flow_id!r} not found")
    return pb.FlowRecord.FromString(raw)


def _join_parent(cq: QueueTx, child_id: str, pq: QueueTx, ref: pb.ParentRef, dep: pb.Dependency) -> None:
    """An existing job joins a new flow as the dependency `dep` of `ref`'s job (BullMQ
    re-adding a job id under a parent): counted at once if it completed, else pending.
    A job still linked to another live parent cannot change parents."""
    child = cq.require_job(child_id)
    live = []
    for old in child.parents:
        if cq.peer(old.queue).get_job(old.job_id) is None:
            continue  # that parent is gone: the link is stale
        if (old.queue, old.job_id) != (ref.queue, ref.job_id):
            raise AlreadyExists(
                f"job {child_id} is a dependency of job {old.job_id} in queue {old.queue!r}; it cannot join another",
                child_id,
            )
        live.append(old)
    del child.parents[:]
    child.parents.extend(live)
    child.parents.append(ref)
    cq.put_job(child)
    if child.state != S.COMPLETED:
        return
    parent = pq.require_job(ref.job_id)
    dep.state = pb.DEPENDENCY_STATE_PROCESSED
    dep.value.CopyFrom(child.result)
    dep.finished_ns = pq.now
    parent.pending_children = max(parent.pending_children - 1, 0)
    parent.children_completed += 1
    if parent.pending_children == 0 and parent.state == S.WAITING_CHILDREN:
        release_parent(pq, parent)
    else:
        pq.put_job(parent)


# -- reading a parent's children -------------------------------------------------------------
def children_of(tx: Txn, ns: str, queue: str, job_id: str) -> list[pb.Dependency]:
    """Every dependency of a job with its state, result or failure (BullMQ's
    getChildrenValues, getIgnoredChildrenFailures, getDependencies, ...)."""
    validate.name("queue", queue)
    k = keys.QueueKeys(ns, queue)
    if tx.get(k.job(job_id)) is None:
        raise NotFound(f"job {job_id!r} not found in queue {queue!r}")
    prefix = k.dependencies(job_id)
    return [pb.Dependency.FromString(v) for _, v in tx.scan(prefix, keys.prefix_end(prefix))]
