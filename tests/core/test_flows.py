"""Flows (spec §8.2) through QueueCore on every backend: Celery's chain, group and chord
and a three-level BullMQ tree under concurrent workers that crash mid-node; every failure
policy; removal and cancellation inside a flow; WaitChildren with children added by a
running job (BullMQ's moveToWaitingChildren); getChildrenValues; a flow id submitted
twice; graph checks that change nothing."""

from __future__ import annotations

import asyncio
import json
import random
import time

import pytest

from loam_common.errors import AlreadyExists, InvalidArgument, InvalidState, NotFound
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import admin, job_admin
from loam_common.jobs import states as S
from loam_common.jobs.complete import Fail, Ok, Retry, WaitChildren
from loam_common.store import RESERVED_PREFIX

NS = "acme"
SEC = 1_000_000_000
P = pb  # failure policies: P.FAILURE_POLICY_...


def node(
    nid: str, *deps: str, queue: str = "q", name: str | None = None, policy: int = 0, **opts
) -> pb.FlowNode:
    return pb.FlowNode(
        id=nid,
        queue=queue,
        task=pb.TaskSpec(name=name or nid, payload=pb.Payload(data=json.dumps({"node": nid}).encode())),
        opts=pb.EnqueueOpts(**opts),
        depends_on=list(deps),
        on_failure=policy,
    )


def graph(*nodes: pb.FlowNode, fid: str = "") -> pb.FlowSpec:
    return pb.FlowSpec(id=fid, nodes=list(nodes))


def err(message: str = "boom") -> pb.JobError:
    return pb.JobError(code="error", message=message)


async def lease_all(core, queues=("q",), n: int = 100) -> list[pb.Job]:
    return await core.jobs.lease(NS, list(queues), "w", n)


async def ok(core, job: pb.Job, result: bytes | None = None):
    res = pb.Payload(data=result if result is not None else f"done:{job.flow_node}".encode())
    return await core.jobs.complete(NS, job.queue, job.id, job.epoch, Ok(res))


async def fail(core, job: pb.Job, message: str = "boom"):
    return await core.jobs.complete(NS, job.queue, job.id, job.epoch, Fail(err(message)))


async def state(job_of, job_id: str, queue: str = "q") -> int:
    return (await job_of(job_id, queue)).state


async def run_waves(core, queues=("q",)) -> list[list[str]]:
    """Lease everything ready, complete it, repeat: the node ids of each wave."""
    waves = []
    while jobs := await lease_all(core, queues):
        waves.append(sorted(j.flow_node for j in jobs))
        for j in jobs:
            await ok(core, j)
    return waves


async def stored(store) -> list[tuple[bytes, bytes]]:
    rows = await store.snapshot(lambda tx: tx.scan(b"", b"\xff\xff"))
    return [(k, v) for k, v in rows if not k.startswith(RESERVED_PREFIX)]


def values(children: list[pb.Dependency]) -> dict[str, tuple[str, bytes]]:
    names = {
        pb.DEPENDENCY_STATE_PROCESSED: "processed",
        pb.DEPENDENCY_STATE_FAILED: "failed",
        pb.DEPENDENCY_STATE_IGNORED: "ignored",
        pb.DEPENDENCY_STATE_PENDING: "pending",
    }
    return {c.node or c.job_id: (names[c.state], c.value.data or c.error.message.encode()) for c in children}


# -- Celery's canvas and BullMQ's tree -----------------------------------------------------------------
async def test_chain_runs_one_node_per_wave(core, job_of, check_invariants):
    sub = await core.flows.submit(NS, graph(node("a"), node("b", "a"), node("c", "b")))
    assert sub.created and set(sub.jobs) == {"a", "b", "c"}
    assert await state(job_of, sub.jobs["b"]) == S.WAITING_CHILDREN
    (a,) = await lease_all(core)
    assert a.flow_node == "a" and a.flow == sub.flow_id
    await ok(core, a)
    # b is ready in the transaction that completed a
    assert await state(job_of, sub.jobs["b"]) == S.WAITING
    assert await run_waves(core) == [["b"], ["c"]]
    children = await core.flows.children(NS, "q", sub.jobs["c"])
    assert values(children) == {"b": ("processed", b"done:b")}
    await check_invariants()


async def test_group_is_one_wave(core, check_invariants):
    sub = await core.flows.submit(NS, graph(*(node(f"g{i}") for i in range(5))))
    assert await run_waves(core) == [[f"g{i}" for i in range(5)]]
    assert len(sub.jobs) == 5
    await check_invariants()


async def test_chord_callback_runs_after_the_whole_group_with_its_results(
    core, job_of, events_of, check_invariants
):
    sub = await core.flows.submit(NS, graph(node("h1"), node("h2"), node("h3"), node("cb", "h1", "h2", "h3")))
    jobs = await lease_all(core)
    assert sorted(j.flow_node for j in jobs) == ["h1", "h2", "h3"]
    for j in jobs[:-1]:
        await ok(core, j)
        assert await state(job_of, sub.jobs["cb"]) == S.WAITING_CHILDREN
    await ok(core, jobs[-1])
    cb = await job_of(sub.jobs["cb"])
    assert cb.state == S.WAITING and cb.pending_children == 0 and cb.children_completed == 3
    names = [e.event for e in await events_of("q", sub.jobs["cb"])]
    assert names == ["added", "waiting-children", "waiting"]
    children = await core.flows.children(NS, "q", sub.jobs["cb"])
    assert values(children) == {f"h{i}": ("processed", f"done:h{i}".encode()) for i in (1, 2, 3)}
    assert await run_waves(core) == [["cb"]]
    await check_invariants()


def _tree() -> pb.FlowSpec:
    """BullMQ's three levels across three queues: root <- (c1 <- g1 g2 g3), (c2 <- g4)."""
    return graph(
        node("root", "c1", "c2", queue="parents"),
        node("c1", "g1", "g2", "g3", queue="children"),
        node("c2", "g4", queue="children"),
        *(node(f"g{i}", queue="leaves") for i in (1, 2, 3, 4)),
    )


async def test_three_level_tree_with_concurrent_workers_and_a_crash(
    core, clock, sweep, job_of, configure, check_invariants
):
    queues = ("leaves", "children", "parents")
    for q in queues:
        await configure(q, visibility_ns=30 * SEC)
    sub = await core.flows.submit(NS, _tree())
    ran: list[str] = []
    crashed: list[str] = []
    rng = random.Random(3)

    async def worker(name: str) -> None:
        idle = 0
        while idle < 50:
            jobs = await core.jobs.lease(NS, list(queues), name, 1)
            if not jobs:
                idle += 1
                await asyncio.sleep(0)
                continue
            idle = 0
            (job,) = jobs
            if job.flow_node in ("g2", "c1") and job.flow_node not in crashed:
                crashed.append(job.flow_node)  # the lessee vanishes mid-node
                continue
            await asyncio.sleep(rng.random() / 1000)
            ran.append(job.flow_node)
            children = await core.flows.children(NS, job.queue, job.id)
            assert all(c.state == pb.DEPENDENCY_STATE_PROCESSED for c in children)
            await ok(core, job, json.dumps(sorted(c.node for c in children)).encode())

    for _ in range(4):
        await asyncio.gather(*(worker(f"w{i}") for i in range(4)))
        if (await job_of(sub.jobs["root"], "parents")).state == S.COMPLETED:
            break
        clock.advance(31 * SEC)  # the crashed leases expire; the stalled sweep redelivers
        await sweep()
    assert sorted(crashed) == ["c1", "g2"]
    root = await job_of(sub.jobs["root"], "parents")
    assert root.state == S.COMPLETED and root.result.data == b'["c1", "c2"]'
    assert sorted(ran) == sorted(["root", "c1", "c2", "g1", "g2", "g3", "g4"])
    assert ran.index("root") == len(ran) - 1
    assert ran.index("c1") > max(ran.index(g) for g in ("g1", "g2", "g3"))
    c1 = await job_of(sub.jobs["c1"], "children")
    assert c1.stalled == 1
    await check_invariants(*queues)


async def test_bullmq_tree_parent_reads_children_values(core, job_of):
    sub = await core.flows.submit(NS, _tree())
    for q in ("leaves", "children"):
        for j in await lease_all(core, (q,)):
            await ok(core, j, json.dumps({"from": j.flow_node}).encode())
    (root,) = await lease_all(core, ("parents",))
    children = await core.flows.children(NS, "parents", root.id)
    assert {c.node: (c.queue, c.job_id, c.value.data) for c in children} == {
        "c1": ("children", sub.jobs["c1"], b'{"from": "c1"}'),
        "c2": ("children", sub.jobs["c2"], b'{"from": "c2"}'),
    }


# -- failure policies -------------------------------------------------------------------------------------
async def test_default_policy_fails_the_parent_and_its_ancestors(core, job_of, check_invariants):
    sub = await core.flows.submit(NS, _tree())
    leaves = {j.flow_node: j for j in await lease_all(core, ("leaves",))}
    await ok(core, leaves["g1"])
    await fail(core, leaves["g2"], "disk full")
    c1 = await job_of(sub.jobs["c1"], "children")
    assert c1.state == S.FAILED and c1.errors[-1].code == "child-failed"
    assert c1.errors[-1].message == f"child leaves:{sub.jobs['g2']} (node 'g2') failed: disk full"
    root = await job_of(sub.jobs["root"], "parents")
    assert (
        root.state == S.FAILED and f"children:{sub.jobs['c1']} (node 'c1') failed" in root.errors[-1].message
    )
    assert values(await core.flows.children(NS, "children", sub.jobs["c1"])) == {
        "g1": ("processed", b"done:g1"),
        "g2": ("failed", b"disk full"),
        "g3": ("pending", b""),
    }
    # The rest of the flow still runs to the end and leaves nothing waiting.
    await ok(core, leaves["g3"])
    await ok(core, leaves["g4"])
    assert [j.flow_node for j in await lease_all(core, ("children",))] == ["c2"]
    await check_invariants("leaves", "children", "parents")


async def test_fail_parent_on_failure(core, job_of):
    sub = await core.flows.submit(
        NS, graph(node("a", policy=P.FAILURE_POLICY_FAIL_PARENT), node("b"), node("p", "a", "b"))
    )
    jobs = {j.flow_node: j for j in await lease_all(core)}
    await fail(core, jobs["a"])
    assert await state(job_of, sub.jobs["p"]) == S.FAILED


async def test_continue_parent_on_failure_runs_the_parent_at_once(core, job_of, check_invariants):
    sub = await core.flows.submit(
        NS, graph(node("a", policy=P.FAILURE_POLICY_CONTINUE_PARENT), node("b"), node("p", "a", "b"))
    )
    jobs = {j.flow_node: j for j in await lease_all(core)}
    await fail(core, jobs["a"], "nope")
    p = await job_of(sub.jobs["p"])
    assert p.state == S.WAITING and p.pending_children == 1 and p.children_failed == 1
    assert values(await core.flows.children(NS, "q", p.id)) == {
        "a": ("failed", b"nope"),
        "b": ("pending", b""),
    }
    (leased,) = await lease_all(core)
    assert leased.id == p.id
    await ok(core, jobs["b"])  # finishing later: recorded, the running parent is not moved
    assert values(await core.flows.children(NS, "q", p.id))["b"] == ("processed", b"done:b")
    assert (await job_of(p.id)).state == S.ACTIVE
    await ok(core, leased)
    await check_invariants()


async def test_ignore_dependency_on_failure_counts_as_done(core, job_of, check_invariants):
    sub = await core.flows.submit(
        NS, graph(node("a", policy=P.FAILURE_POLICY_IGNORE_DEPENDENCY), node("b"), node("p", "a", "b"))
    )
    jobs = {j.flow_node: j for j in await lease_all(core)}
    await fail(core, jobs["a"], "ignored failure")
    assert await state(job_of, sub.jobs["p"]) == S.WAITING_CHILDREN
    await ok(core, jobs["b"])
    assert await state(job_of, sub.jobs["p"]) == S.WAITING
    assert values(await core.flows.children(NS, "q", sub.jobs["p"])) == {
        "a": ("ignored", b"ignored failure"),
        "b": ("processed", b"done:b"),
    }
    await check_invariants()


async def test_remove_dependency_on_failure_forgets_it(core, job_of, check_invariants):
    sub = await core.flows.submit(
        NS, graph(node("a", policy=P.FAILURE_POLICY_REMOVE_DEPENDENCY), node("b"), node("p", "a", "b"))
    )
    jobs = {j.flow_node: j for j in await lease_all(core)}
    await fail(core, jobs["a"])
    assert await state(job_of, sub.jobs["p"]) == S.WAITING_CHILDREN
    await ok(core, jobs["b"])
    assert await state(job_of, sub.jobs["p"]) == S.WAITING
    assert values(await core.flows.children(NS, "q", sub.jobs["p"])) == {"b": ("processed", b"done:b")}
    await check_invariants()


async def test_retries_come_first_only_the_final_failure_counts(core, job_of):
    sub = await core.flows.submit(NS, graph(node("a", attempts=3), node("p", "a")))
    for attempt in range(3):
        (a,) = await lease_all(core)
        await core.jobs.complete(NS, "q", a.id, a.epoch, Retry(err(f"try {attempt}")))
        want = S.WAITING_CHILDREN if attempt < 2 else S.FAILED
        assert await state(job_of, sub.jobs["p"]) == want
    assert "try 2" in (await job_of(sub.jobs["p"])).errors[-1].message


async def test_a_child_failed_by_the_stalled_sweep_fails_its_parent(core, clock, sweep, job_of, configure):
    await configure("q", visibility_ns=10 * SEC)
    sub = await core.flows.submit(NS, graph(node("a"), node("p", "a")))
    for _ in range(2):  # BullMQ's maxStalledCount 1: the second stall fails the job
        await lease_all(core)
        clock.advance(11 * SEC)
        await sweep()
    p = await job_of(sub.jobs["p"])
    assert p.state == S.FAILED and "job stalled more than allowable limit" in p.errors[-1].message


# -- removing and cancelling parts of a flow -------------------------------------------------------------------
async def test_removing_a_pending_child_fails_its_parent_under_the_default_policy(core, store, job_of):
    sub = await core.flows.submit(NS, graph(node("a"), node("b"), node("p", "a", "b")))
    await store.transact(job_admin.job_remove, NS, "q", sub.jobs["a"])
    p = await job_of(sub.jobs["p"])
    assert p.state == S.FAILED and p.errors[-1].message == f"child q:{sub.jobs['a']} (node 'a') was removed"


async def test_removing_a_child_under_remove_dependency_lets_the_parent_go_on(core, store, job_of):
    sub = await core.flows.submit(
        NS, graph(node("a", policy=P.FAILURE_POLICY_REMOVE_DEPENDENCY), node("b"), node("p", "a", "b"))
    )
    await store.transact(job_admin.job_remove, NS, "q", sub.jobs["a"])
    (b,) = await lease_all(core)
    await ok(core, b)
    assert await state(job_of, sub.jobs["p"]) == S.WAITING


async def test_cancelling_a_child_fails_its_parent_with_the_reason(core, store, job_of):
    sub = await core.flows.submit(NS, graph(node("a"), node("p", "a")))
    await store.transact(job_admin.job_cancel, NS, "q", sub.jobs["a"], "not needed")
    p = await job_of(sub.jobs["p"])
    assert p.state == S.FAILED and p.errors[-1].message.endswith("was canceled: not needed")


async def test_removing_a_parent_drops_its_records_and_children_finish_alone(
    core, store, job_of, check_invariants
):
    sub = await core.flows.submit(NS, graph(node("a"), node("p", "a"), node("top", "p")))
    await store.transact(job_admin.job_remove, NS, "q", sub.jobs["p"])
    assert not [k for k, _ in await stored(store) if b"/dep/" + sub.jobs["p"].encode() in k]
    assert (await job_of(sub.jobs["top"])).state == S.FAILED  # its own dependent does not wait forever
    (a,) = await lease_all(core)
    await ok(core, a)
    await check_invariants()


async def test_retention_removing_a_child_keeps_its_value_for_the_parent(core, job_of):
    sub = await core.flows.submit(
        NS, graph(node("a", retention=pb.Retention(completed_count=0)), node("p", "a"))
    )
    (a,) = await lease_all(core)
    await ok(core, a, b"kept")
    assert await job_of(sub.jobs["a"]) is None
    assert values(await core.flows.children(NS, "q", sub.jobs["p"])) == {"a": ("processed", b"kept")}


async def test_large_child_results_are_inlined_from_the_blob_store(core):
    sub = await core.flows.submit(NS, graph(node("a"), node("p", "a")))
    (a,) = await lease_all(core)
    big = b"r" * 40_000
    await ok(core, a, big)
    (child,) = await core.flows.children(NS, "q", sub.jobs["p"])
    assert child.value.blob_ref and child.value.data == big


# -- WaitChildren: children added by a running job --------------------------------------------------------------
async def test_wait_children_like_bullmq_move_to_waiting_children(core, job_of, check_invariants):
    await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="parent"))
    (parent,) = await lease_all(core)
    ref = pb.ParentRef(queue="q", job_id=parent.id)
    kids = [
        (await core.jobs.enqueue(NS, "kids", pb.TaskSpec(name=f"k{i}"), pb.EnqueueOpts(parent=ref))).job_id
        for i in range(2)
    ]
    p = await job_of(parent.id)
    assert p.state == S.ACTIVE and p.pending_children == 2
    done = await core.jobs.complete(NS, "q", parent.id, parent.epoch, WaitChildren())
    assert done.moved and done.state == S.WAITING_CHILDREN
    for j in await lease_all(core, ("kids",)):
        await ok(core, j, j.task.name.encode())
    (again,) = await lease_all(core)
    assert again.id == parent.id and again.epoch == parent.epoch + 1
    children = await core.flows.children(NS, "q", parent.id)
    assert {c.job_id: c.value.data for c in children} == {kids[0]: b"k0", kids[1]: b"k1"}
    done = await core.jobs.complete(NS, "q", again.id, again.epoch, WaitChildren())
    assert done.moved is False and done.state == S.ACTIVE  # nothing pending: go on
    await ok(core, again)
    await check_invariants("q", "kids")


async def test_a_child_failing_while_its_parent_runs_fails_the_parent_when_it_waits(core, job_of):
    await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="parent"))
    (parent,) = await lease_all(core)
    ref = pb.ParentRef(queue="q", job_id=parent.id)
    await core.jobs.enqueue(NS, "kids", pb.TaskSpec(name="k"), pb.EnqueueOpts(parent=ref))
    (kid,) = await lease_all(core, ("kids",))
    await fail(core, kid, "bad kid")
    assert (await job_of(parent.id)).state == S.ACTIVE
    done = await core.jobs.complete(NS, "q", parent.id, parent.epoch, WaitChildren())
    assert done.state == S.FAILED
    p = await job_of(parent.id)
    assert p.errors[-1].code == "child-failed" and "bad kid" in p.errors[-1].message


async def test_ok_with_if_no_pending_children_is_refused_while_a_child_is_pending(core, job_of):
    await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="parent"))
    (parent,) = await lease_all(core)
    ref = pb.ParentRef(queue="q", job_id=parent.id)
    await core.jobs.enqueue(NS, "kids", pb.TaskSpec(name="k"), pb.EnqueueOpts(parent=ref))
    strict = Ok(pb.Payload(data=b"1"), if_no_pending_children=True)
    with pytest.raises(InvalidState, match="pending dependencies"):
        await core.jobs.complete(NS, "q", parent.id, parent.epoch, strict)
    (res,) = await core.jobs.complete_many(NS, [("q", parent.id, parent.epoch, strict)])
    assert isinstance(res, InvalidState)
    assert (await job_of(parent.id)).state == S.ACTIVE  # still leased: it may fail or wait
    (kid,) = await lease_all(core, ("kids",))
    await ok(core, kid)
    done = await core.jobs.complete(NS, "q", parent.id, parent.epoch, strict)
    assert done.state == S.COMPLETED


async def test_deferred_child_failure_sends_the_parent_to_a_worker_to_fail(core, job_of, configure):
    await configure("children", defer_child_failure=True)
    sub = await core.flows.submit(
        NS,
        graph(
            node("g", queue="leaves", policy=P.FAILURE_POLICY_FAIL_PARENT, job_key="gk"),
            node("h", queue="leaves"),
            node("c", "g", "h", queue="children"),
        ),
    )
    jobs = {j.flow_node: j for j in await lease_all(core, ("leaves",))}
    await fail(core, jobs["g"], "disk full")
    c = await job_of(sub.jobs["c"], "children")
    assert c.state == S.WAITING and c.deferred_failure == "child leaves:gk failed"
    (lease,) = await lease_all(core, ("children",))
    assert lease.id == sub.jobs["c"] and lease.deferred_failure == "child leaves:gk failed"


async def test_a_flow_node_may_join_a_running_job_outside_the_flow(core, job_of):
    await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="parent"))
    (parent,) = await lease_all(core)
    ref = pb.ParentRef(queue="q", job_id=parent.id, fail_parent_on_failure=True)
    sub = await core.flows.submit(
        NS, graph(node("g", queue="leaves"), node("c", "g", queue="kids", parent=ref))
    )
    p = await job_of(parent.id)
    assert p.pending_children == 1
    (g,) = await lease_all(core, ("leaves",))
    await ok(core, g)
    (c,) = await lease_all(core, ("kids",))
    assert c.id == sub.jobs["c"]
    await ok(core, c)
    assert (await job_of(parent.id)).pending_children == 0


async def test_join_existing_links_a_finished_or_live_job_to_a_new_parent(core, job_of):
    done = await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="done"), pb.EnqueueOpts(job_key="mon"))
    (j,) = await lease_all(core)
    await ok(core, j, b"42")
    live = await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="live"), pb.EnqueueOpts(job_key="tue"))

    def existing(nid: str, key: str) -> pb.FlowNode:
        n = node(nid, job_key=key, job_key_keeps_first=True)
        n.join_existing = True
        return n

    sub = await core.flows.submit(NS, graph(node("p", "m", "t"), existing("m", "mon"), existing("t", "tue")))
    assert sub.jobs["m"] == done.job_id and sub.jobs["t"] == live.job_id
    p = await job_of(sub.jobs["p"])
    assert p.state == S.WAITING_CHILDREN and p.pending_children == 1
    assert values(await core.flows.children(NS, "q", p.id))["m"] == ("processed", b"42")
    (t,) = await lease_all(core)
    await ok(core, t)
    assert (await job_of(p.id)).state == S.WAITING
    # a job still linked to a live parent cannot join another one
    with pytest.raises(AlreadyExists):
        await core.flows.submit(NS, graph(node("p2", "t2"), existing("t2", "tue")))


async def test_a_retried_child_is_pending_again_for_a_parent_that_has_not_started(core, store, job_of):
    sub = await core.flows.submit(
        NS, graph(node("a", policy=P.FAILURE_POLICY_IGNORE_DEPENDENCY), node("b"), node("p", "a", "b"))
    )
    jobs = {j.flow_node: j for j in await lease_all(core)}
    await ok(core, jobs["b"])
    await fail(core, jobs["a"])
    assert await state(job_of, sub.jobs["p"]) == S.WAITING  # released: a ignored, b done
    await store.transact(job_admin.job_retry, NS, "q", sub.jobs["a"])
    p = await job_of(sub.jobs["p"])
    assert p.state == S.WAITING_CHILDREN and p.pending_children == 1
    assert values(await core.flows.children(NS, "q", p.id))["a"] == ("pending", b"")
    await store.transact(job_admin.job_retry, NS, "q", sub.jobs["b"])  # a completed one too
    assert (await job_of(p.id)).pending_children == 2
    assert await run_waves(core) == [["a", "b"], ["p"]]


async def test_children_need_a_live_parent_and_a_refusal_writes_nothing(core, store):
    missing = pb.ParentRef(queue="q", job_id="01NOPE")
    with pytest.raises(NotFound):
        await core.jobs.enqueue(NS, "kids", pb.TaskSpec(name="k"), pb.EnqueueOpts(parent=missing))
    await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="parent"))
    (parent,) = await lease_all(core)
    await ok(core, parent)
    before = await stored(store)
    with pytest.raises(InvalidState):
        ref = pb.ParentRef(queue="q", job_id=parent.id)
        await core.jobs.enqueue(NS, "kids", pb.TaskSpec(name="k"), pb.EnqueueOpts(parent=ref))
    assert await stored(store) == before
    both = pb.ParentRef(
        queue="q", job_id=parent.id, fail_parent_on_failure=True, remove_dependency_on_failure=True
    )
    with pytest.raises(InvalidArgument) as e:
        await core.jobs.enqueue(NS, "kids", pb.TaskSpec(name="k"), pb.EnqueueOpts(parent=both))
    assert e.value.field == "task.opts.parent"
    dedup = pb.Dedup(id="d", mode=pb.DEDUP_MODE_SIMPLE)
    with pytest.raises(InvalidArgument) as e:
        await core.jobs.enqueue(
            NS, "kids", pb.TaskSpec(name="k"), pb.EnqueueOpts(parent=missing, dedup=dedup)
        )
    assert e.value.field == "task.opts.dedup"


# -- submitting ------------------------------------------------------------------------------------------------
async def test_a_flow_submitted_twice_with_one_id_is_created_once(core, store):
    first = await core.flows.submit(NS, graph(node("a"), node("b", "a"), fid="nightly-2024-06-01"))
    before = await stored(store)
    again = await core.flows.submit(NS, graph(node("a"), node("b", "a"), fid="nightly-2024-06-01"))
    assert again.created is False and again.jobs == first.jobs and again.flow_id == first.flow_id
    assert await stored(store) == before
    with pytest.raises(AlreadyExists):
        await core.flows.submit(NS, graph(node("a"), node("b"), fid="nightly-2024-06-01"))
    record = await core.flows.get(NS, "nightly-2024-06-01")
    assert {j.node: j.job_id for j in record.jobs} == first.jobs


async def test_concurrent_submits_of_one_flow_id_create_it_once(core, jobs_of):
    subs = await asyncio.gather(
        *(core.flows.submit(NS, graph(node("a"), node("b", "a"), fid="f")) for _ in range(8))
    )
    assert sum(s.created for s in subs) == 1
    assert len({tuple(sorted(s.jobs.items())) for s in subs}) == 1
    assert len(await jobs_of()) == 2


async def test_a_delayed_node_waits_out_its_delay_after_its_dependencies(core, clock, sweep, job_of):
    sub = await core.flows.submit(
        NS, graph(node("a"), node("b", "a", not_before=pb.Delay(delay_ns=60 * SEC)))
    )
    (a,) = await lease_all(core)
    await ok(core, a)
    assert await state(job_of, sub.jobs["b"]) == S.DELAYED
    clock.advance(61 * SEC)
    await sweep()
    assert await state(job_of, sub.jobs["b"]) == S.WAITING


async def test_job_key_on_a_node_must_be_free(core, store):
    await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="x"), pb.EnqueueOpts(job_key="taken"))
    before = await stored(store)
    with pytest.raises(AlreadyExists):
        await core.flows.submit(NS, graph(node("a"), node("b", "a", job_key="taken")))
    assert await stored(store) == before


@pytest.mark.parametrize(
    ("nodes", "field"),
    [
        ([], "graph.nodes"),
        ([node("a"), node("a")], "graph.nodes[1].id"),
        ([node("")], "graph.nodes[0].id"),
        ([node("a", "zz")], "graph.nodes[0].depends_on[0]"),
        ([node("a", "a")], "graph.nodes[0].depends_on[0]"),
        ([node("a"), node("b", "a", "a")], "graph.nodes[1].depends_on[1]"),
        ([node("a", "c"), node("b", "a"), node("c", "b")], "graph.nodes"),  # a cycle
        ([node("a", queue="no/slash")], "graph.nodes[0].queue"),
        ([node("a", priority=2**22)], "graph.nodes[0].opts.priority"),
        # a node another depends on is linked by depends_on, not by a parent of its own
        (
            [node("a", parent=pb.ParentRef(queue="q", job_id="x")), node("b", "a")],
            "graph.nodes[0].opts.parent",
        ),
        ([node("a", idempotency=pb.Idempotency(key="k"))], "graph.nodes[0].opts.idempotency"),
        ([node("a", dedup=pb.Dedup(id="d", mode=pb.DEDUP_MODE_SIMPLE))], "graph.nodes[0].opts.dedup"),
        ([node("a", policy=42)], "graph.nodes[0].on_failure"),
    ],
)
async def test_bad_graphs_are_refused_naming_the_field(core, store, nodes, field):
    before = await stored(store)
    with pytest.raises(InvalidArgument) as e:
        await core.flows.submit(NS, graph(*nodes))
    assert e.value.field == field, e.value.message
    assert await stored(store) == before


# -- transactions that touch several queues ------------------------------------------------------------------------
async def test_a_batched_complete_that_releases_a_parent_in_a_queue_it_also_completes(
    core, job_of, check_invariants
):
    sub = await core.flows.submit(
        NS, graph(node("a", queue="kids"), node("p", "a", queue="q"), node("other", queue="q"))
    )
    (a,) = await lease_all(core, ("kids",))
    (other,) = await lease_all(core, ("q",))
    results = await core.jobs.complete_many(
        NS,
        [
            ("q", other.id, other.epoch, Ok()),
            ("kids", a.id, a.epoch, Ok()),  # releases p in q, whose counts item 1 changed
            ("q", "01MISSING", 1, Ok()),  # refused: rolled back alone
            ("q", other.id, other.epoch, Ok()),  # refused: not active any more
        ],
    )
    assert [type(r).__name__ for r in results] == ["Completed", "Completed", "NotFound", "InvalidState"]
    assert await state(job_of, sub.jobs["p"]) == S.WAITING
    await check_invariants("q", "kids")


async def test_a_parent_made_ready_in_another_queue_wakes_its_long_poll(core):
    await core.flows.submit(NS, graph(node("a", queue="kids"), node("p", "a", queue="parents")))
    (a,) = await lease_all(core, ("kids",))
    started = time.monotonic()
    poll = asyncio.create_task(core.jobs.lease(NS, ["parents"], "w2", 1, wait_ns=10 * SEC))
    await asyncio.sleep(0.05)
    await ok(core, a)
    (p,) = await asyncio.wait_for(poll, 5)
    assert p.flow_node == "p" and time.monotonic() - started < 5


async def test_a_clean_that_removes_the_last_pending_child_removes_its_parent_in_that_queue(
    core, store, job_of
):
    keep = P.FAILURE_POLICY_KEEP_WAITING
    sub = await core.flows.submit(
        NS, graph(node("a", policy=keep), node("b", policy=keep), node("p", "a", "b"))
    )
    other = await core.flows.submit(NS, graph(node("x", policy=keep), node("o", "x", queue="parents")))
    await store.transact(admin.queue_clean, NS, "q", S.WAITING, 0, 0)
    assert await job_of(sub.jobs["p"]) is None  # BullMQ's hard removal: the parent went too
    # A parent in another queue is not the clean's to remove: it runs without the child.
    assert await state(job_of, other.jobs["o"], "parents") == S.WAITING
