"""Flows (spec §8.2): jobs that wait for other jobs. BullMQ's FlowProducer trees, Celery's
chain / group / chord, and any DAG are one FlowSpec: nodes (queue, task, options) with
`depends_on` (the nodes that must finish first: a BullMQ parent depends on its children)
and a per-node failure policy (BullMQ's four flags).

The links live on the jobs, so every step is part of the transition that causes it:

- a child lists the jobs waiting on it in `Job.parents` (ParentRef, with its policy);
- a parent counts its unfinished dependencies in `Job.pending_children` and keeps one
  Dependency record per child under `Q dep/<parent>/<child queue>/<child id>`, which
  holds the child's result or failure once it finishes (getChildrenValues).

`flow_submit` creates every node's job in one transaction: nodes without dependencies
are ready (or delayed), the others wait in `waiting-children`. When a job leaves the live
states, QueueTx calls `on_job_finished` in that same transaction (a cheap check of
`job.parents` keeps other jobs out of here): each parent's record is updated and a parent
whose last dependency finished becomes ready, or fails, as the child's policy says.
Nothing waits forever: a dependency that fails, is canceled or is removed under the
default policy fails its dependents with a `child-failed` error.

A running job adds children with `EnqueueOpts.parent` (`attach_child`) and then waits
for them with the WaitChildren outcome (BullMQ's moveToWaitingChildren)."""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
from collections import deque
from dataclasses import dataclass, field

from loam_common import keys, validate
from loam_common.errors import AlreadyExists, InvalidArgument, InvalidState, NotFound
from loam_common.gen.loam.jobs.v1 import jobs_pb2
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S
from loam_common.jobs.enqueue import NewJob, _enqueue_one, check_opts
from loam_common.jobs.queue import QueueTx
from loam_common.store.base import Txn

MAX_NODES = 10_000
CHILD_FAILED = "child-failed"
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
def check_flow(spec: jobs_pb2.FlowSpec, field: str = "graph") -> None:
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


def _check_acyclic(spec: jobs_pb2.FlowSpec, index: dict[str, int], field: str) -> None:
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


def request_hash(spec: jobs_pb2.FlowSpec) -> bytes:
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
    tx: Txn, ns: str, flow_id: str, rhash: bytes, spec: jobs_pb2.FlowSpec, news: list[NewJob]
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

    root = QueueTx(tx, ns, spec.nodes[0].queue)
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

        res = _enqueue_one(qt, NewJob(nj.job_id, nj.task, nj.opts, init=init))
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
        _release(pq, parent)
    else:
        pq.put_job(parent)


# -- children added to a running job (BullMQ `opts.parent`) -------------------------------------
def attach_child(qt: QueueTx, job: pb.Job) -> None:
    """Enqueue of `job` with `opts.parent`: register it with its parent, which must exist
    and not have finished. Checks before it writes, so a refusal leaves nothing."""
    ref = pb.ParentRef()
    ref.CopyFrom(job.opts.parent)
    pq = qt.peer(ref.queue)
    parent = pq.get_job(ref.job_id)
    if parent is None:  # the parent named by its job key (BullMQ's parent id)
        by_key = qt.tx.get(pq.k.job_key(ref.job_id))
        parent = pq.get_job(by_key.decode()) if by_key is not None else None
    if parent is None:
        raise NotFound(f"parent job {ref.job_id!r} not found in queue {ref.queue!r}")
    if parent.state in S.FINISHED:
        raise InvalidState(parent.id, S.name(parent.state), "add a child to a finished job")
    parent.pending_children += 1
    parent.children += 1
    pq.put_job(parent)
    dep = pb.Dependency(
        queue=qt.name,
        job_id=job.id,
        state=pb.DEPENDENCY_STATE_PENDING,
        job_key=job.opts.job_key,
        policy=_policy(ref),
    )
    qt.tx.put(pq.k.dependency(parent.id, qt.name, job.id), dep.SerializeToString())
    ref.job_id = parent.id  # the links hold job ids, whichever name the caller used
    job.parents.append(ref)


# -- a dependency finished ------------------------------------------------------------------------
def _policy(ref: pb.ParentRef) -> int:
    if ref.keep_waiting_on_failure:
        return pb.FAILURE_POLICY_KEEP_WAITING
    if ref.remove_dependency_on_failure:
        return pb.FAILURE_POLICY_REMOVE_DEPENDENCY
    if ref.ignore_dependency_on_failure:
        return pb.FAILURE_POLICY_IGNORE_DEPENDENCY
    if ref.continue_parent_on_failure:
        return pb.FAILURE_POLICY_CONTINUE_PARENT
    return pb.FAILURE_POLICY_FAIL_PARENT


def _failure(job: pb.Job, removed: bool) -> pb.JobError:
    if removed:
        return pb.JobError(code="removed", message=f"was removed while {S.name(job.state)}")
    last = job.errors[-1] if job.errors else pb.JobError(code=S.name(job.state))
    err = pb.JobError()
    err.CopyFrom(last)
    return err


def _failure_message(queue: str, job: pb.Job, removed: bool, why: str) -> str:
    label = f"{queue}:{job.id}" + (f" (node {job.flow_node!r})" if job.flow_node else "")
    if removed:
        return f"child {label} was removed"
    if job.state == S.CANCELED:
        return f"child {label} was canceled: {why}"
    return f"child {label} failed: {why}"


def on_job_finished(qt: QueueTx, job: pb.Job) -> None:
    """`job` left the live states (finished, or removed while live): settle its record in
    each parent and move the parents its policy moves. Runs inside the transition."""
    removed = job.state not in S.FINISHED
    for ref in job.parents:
        pq = qt.peer(ref.queue)
        dkey = pq.k.dependency(ref.job_id, qt.name, job.id)
        raw = qt.tx.get(dkey)
        parent = pq.get_job(ref.job_id) if raw is not None else None
        if parent is None:
            continue  # the parent is gone (its records went with it)
        dep = pb.Dependency.FromString(raw)  # type: ignore[arg-type]
        if dep.state != pb.DEPENDENCY_STATE_PENDING:
            continue  # settled already (a retried child finishing again)
        if job.state != S.COMPLETED and _policy(ref) == pb.FAILURE_POLICY_KEEP_WAITING:
            if removed:
                _forget(pq, parent, dkey)
            continue  # failed: it stays pending, and the parent waits for a retry
        dep.finished_ns = qt.now
        parent.pending_children = max(parent.pending_children - 1, 0)
        release = parent.pending_children == 0
        policy = failure = None
        if job.state == S.COMPLETED:
            dep.state = pb.DEPENDENCY_STATE_PROCESSED
            dep.value.CopyFrom(job.result)
            parent.children_completed += 1
        else:
            parent.children_failed += 1
            dep.error.CopyFrom(_failure(job, removed))
            policy = _policy(ref)
            ignored = policy == pb.FAILURE_POLICY_IGNORE_DEPENDENCY
            dep.state = pb.DEPENDENCY_STATE_IGNORED if ignored else pb.DEPENDENCY_STATE_FAILED
            if policy == pb.FAILURE_POLICY_CONTINUE_PARENT:
                release = True  # the parent runs now, whatever else is pending
            elif policy == pb.FAILURE_POLICY_FAIL_PARENT:
                failure = _failure_message(qt.name, job, removed, dep.error.message)
        if policy == pb.FAILURE_POLICY_REMOVE_DEPENDENCY:
            qt.tx.delete(dkey)  # forgotten, as if it had never been a dependency
        else:
            qt.tx.put(dkey, dep.SerializeToString())
        if failure:
            _fail_parent(pq, parent, failure, f"child {qt.name}:{job.opts.job_key or job.id} failed")
        elif release and parent.state == S.WAITING_CHILDREN:
            _release(pq, parent)
        else:
            pq.put_job(parent)


def on_job_retried(qt: QueueTx, job: pb.Job) -> None:
    """A finished dependency runs again (BullMQ's job.retry): each parent still waiting
    counts it as pending once more, and one it had released that has not started yet
    waits for it again. A parent that runs or finished, or forgot it, is left alone."""
    for ref in job.parents:
        pq = qt.peer(ref.queue)
        dkey = pq.k.dependency(ref.job_id, qt.name, job.id)
        raw = qt.tx.get(dkey)
        parent = pq.get_job(ref.job_id) if raw is not None else None
        if parent is None or parent.state == S.ACTIVE or parent.state in S.FINISHED:
            continue
        dep = pb.Dependency.FromString(raw)  # type: ignore[arg-type]
        if dep.state == pb.DEPENDENCY_STATE_PENDING:
            continue
        if dep.state == pb.DEPENDENCY_STATE_PROCESSED:
            parent.children_completed = max(parent.children_completed - 1, 0)
        else:
            parent.children_failed = max(parent.children_failed - 1, 0)
        dep.state = pb.DEPENDENCY_STATE_PENDING
        dep.ClearField("value")
        dep.ClearField("error")
        dep.finished_ns = 0
        qt.tx.put(dkey, dep.SerializeToString())
        parent.pending_children += 1
        if parent.state in S.READY:
            pq.move(parent, S.WAITING_CHILDREN, "waiting-children")
        else:
            pq.put_job(parent)


_CLEANING: contextvars.ContextVar[str] = contextvars.ContextVar("flows_cleaning", default="")


@contextlib.contextmanager
def cleaning(queue: str):
    """Removals by a clean of `queue` (BullMQ's hard removal): a parent in that queue
    left with nothing pending goes too, instead of running without the children."""
    token = _CLEANING.set(queue)
    try:
        yield
    finally:
        _CLEANING.reset(token)


def _forget(pq: QueueTx, parent: pb.Job, dkey: bytes) -> None:
    """Drop a pending dependency (keep-waiting policy, the child removed); a parent left
    with nothing pending runs (or, cleaned with its queue, is removed)."""
    pq.tx.delete(dkey)
    parent.pending_children = max(parent.pending_children - 1, 0)
    parent.children = max(parent.children - 1, 0)
    if parent.pending_children == 0 and parent.state == S.WAITING_CHILDREN:
        if _CLEANING.get() == pq.name:
            pq.remove(parent, event="removed")
        else:
            _release(pq, parent)
    else:
        pq.put_job(parent)


def on_finished_job_removed(qt: QueueTx, job: pb.Job) -> None:
    """A finished job was removed (retention, remove, clean): a parent still counting it
    as pending (keep-waiting policy: it failed) forgets it."""
    for ref in job.parents:
        if _policy(ref) != pb.FAILURE_POLICY_KEEP_WAITING:
            continue
        pq = qt.peer(ref.queue)
        dkey = pq.k.dependency(ref.job_id, qt.name, job.id)
        raw = qt.tx.get(dkey)
        parent = pq.get_job(ref.job_id) if raw is not None else None
        if parent is not None and pb.Dependency.FromString(raw).state == pb.DEPENDENCY_STATE_PENDING:
            _forget(pq, parent, dkey)


def _release(pq: QueueTx, parent: pb.Job) -> None:
    """waiting-children -> ready (or delayed, if its own delay has not passed)."""
    if parent.opts.subject:
        pq._subject_claim(parent)  # a released parent queues behind its subject like a new job
    if parent.due_ns > pq.now and not parent.subject_blocked:
        pq.move(parent, S.DELAYED, "delayed")
    else:
        pq.move(parent, S.ready_state(parent.opts.priority), "waiting")  # wakes a poll


def _fail_parent(pq: QueueTx, parent: pb.Job, message: str, deferred: str) -> None:
    """A dependency failed under the fail policy. A running parent fails when it asks to
    wait for its children (it may still finish on its own); a waiting one fails now,
    which in turn settles its own parents. With the queue's defer_child_failure, a
    waiting one goes to the front instead, carrying `deferred` for the worker to report
    (BullMQ: the parent fails in a worker, so it emits `failed` from active)."""
    from loam_common.jobs import complete  # complete imports enqueue, which imports this lazily

    if parent.state in S.FINISHED:
        pq.put_job(parent)
        return
    if parent.state == S.ACTIVE:
        if not parent.failed_child:
            parent.failed_child = message
        pq.put_job(parent)
        return
    if pq.cfg.defer_child_failure:
        if not parent.deferred_failure:
            parent.deferred_failure = deferred
        if parent.state in S.READY:
            pq.put_job(parent)
        else:
            parent.due_ns = 0
            pq.move(parent, S.ready_state(parent.opts.priority), "waiting")  # wakes a poll
        return
    err = pb.JobError(code=CHILD_FAILED, message=message)
    complete._record_error(pq, parent, err)
    complete._fail(pq, parent, err, False)


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


def remove_child_dependency(qt: QueueTx, child: pb.Job) -> bool:
    """BullMQ's removeChildDependency: `child` stops being a dependency of its parents; a
    parent left with nothing pending is released. False if no pending link was there."""
    removed = False
    for ref in list(child.parents):
        pq = qt.peer(ref.queue)
        dkey = pq.k.dependency(ref.job_id, qt.name, child.id)
        raw = qt.tx.get(dkey)
        parent = pq.get_job(ref.job_id)
        if raw is None or parent is None:
            continue
        if pb.Dependency.FromString(raw).state == pb.DEPENDENCY_STATE_PENDING:
            parent.pending_children = max(parent.pending_children - 1, 0)
            removed = True
        qt.tx.delete(dkey)
        parent.children = max(parent.children - 1, 0)
        if parent.pending_children == 0 and parent.state == S.WAITING_CHILDREN:
            _release(pq, parent)
        else:
            pq.put_job(parent)
    del child.parents[:]
    if child.opts.HasField("parent"):
        child.opts.ClearField("parent")
    qt.put_job(child)
    return removed


def drop_dependencies(qt: QueueTx, job: pb.Job) -> None:
    """A parent is being removed: its dependency records go with it."""
    prefix = qt.k.dependencies(job.id)
    for key, _ in qt.tx.scan(prefix, keys.prefix_end(prefix)):
        qt.tx.delete(key)
