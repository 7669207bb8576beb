"""The links between jobs that wait for other jobs (spec §8.2; flows.py submits whole
graphs). A child lists the jobs waiting on it in `Job.parents` (ParentRef, with its
failure policy); a parent counts its unfinished dependencies in `Job.pending_children`
and keeps one Dependency record per child under `Q dep/<parent>/<child queue>/<child id>`,
which holds the child's result or failure once it finishes (getChildrenValues).

Every step is part of the transition that causes it: `attach_child` when a job is
enqueued with `EnqueueOpts.parent`; `on_job_finished` when a job leaves the live
states (QueueTx calls it through linked.LinkedQueueTx): each parent's record is
updated and a parent whose last dependency finished becomes ready, or fails, as the
child's policy says. Nothing waits forever: a dependency that fails, is canceled or is
removed under the default policy fails its dependents with a `child-failed` error."""

from __future__ import annotations

import contextlib
import contextvars

from loam_common.errors import InvalidState, NotFound
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S
from loam_common.jobs.failure import job_fail_if_live, job_record_error
from loam_common.jobs.queue import QueueTx

CHILD_FAILED = "child-failed"


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
        policy=failure_policy(ref),
    )
    qt.tx.put(pq.k.dependency(parent.id, qt.name, job.id), dep.SerializeToString())
    ref.job_id = parent.id  # the links hold job ids, whichever name the caller used
    job.parents.append(ref)


# -- a dependency finished ------------------------------------------------------------------------
def failure_policy(ref: pb.ParentRef) -> int:
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
        if job.state != S.COMPLETED and failure_policy(ref) == pb.FAILURE_POLICY_KEEP_WAITING:
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
            policy = failure_policy(ref)
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
            release_parent(pq, parent)
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
            release_parent(pq, parent)
    else:
        pq.put_job(parent)


def on_finished_job_removed(qt: QueueTx, job: pb.Job) -> None:
    """A finished job was removed (retention, remove, clean): a parent still counting it
    as pending (keep-waiting policy: it failed) forgets it."""
    for ref in job.parents:
        if failure_policy(ref) != pb.FAILURE_POLICY_KEEP_WAITING:
            continue
        pq = qt.peer(ref.queue)
        dkey = pq.k.dependency(ref.job_id, qt.name, job.id)
        raw = qt.tx.get(dkey)
        parent = pq.get_job(ref.job_id) if raw is not None else None
        if parent is not None and pb.Dependency.FromString(raw).state == pb.DEPENDENCY_STATE_PENDING:
            _forget(pq, parent, dkey)


def release_parent(pq: QueueTx, parent: pb.Job) -> None:
    """waiting-children -> ready (or delayed, if its own delay has not passed)."""
    if parent.opts.subject:
        pq.subject_claim(parent)  # a released parent queues behind its subject like a new job
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
    job_record_error(pq, parent, err)
    job_fail_if_live(pq, parent, err, False)


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
            release_parent(pq, parent)
        else:
            pq.put_job(parent)
    del child.parents[:]
    if child.opts.HasField("parent"):
        child.opts.ClearField("parent")
    qt.put_job(child)
    return removed
