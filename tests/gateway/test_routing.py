"""The Router over two real queue-core servers (in this process, on loopback ports,
sharing one SQLite file): calls reach the owner of their queue, CompleteBatch is split
by owner and answered in request order, long-polls wake across the hop, errors pass
through unchanged, and a core that is down is `unavailable`."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from inproc import served
from processes import free_port

from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.store.runner import open_store
from loam_gateway.routing import Router
from loam_queue_core.core import QueueCore
from loam_queue_core.server import create_app

NS = "route"
TOKEN = "secret-internal-token"


@pytest.fixture
async def cluster(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'loam.db'}")
    cores = []
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(2):
            core = QueueCore(store)
            url = await stack.enter_async_context(served(create_app(core, internal_token=TOKEN)))
            cores.append((url, core))
        router = Router(cores=[u for u, _ in cores], internal_token=TOKEN)
        try:
            yield router, dict(cores)
        finally:
            await router.close()
    await store.close()


def queues_on_each_core(router: Router) -> tuple[str, str]:
    by_owner: dict[str, str] = {}
    for i in range(100):
        by_owner.setdefault(router.owner(NS, f"q{i}"), f"q{i}")
        if len(by_owner) == 2:
            return tuple(by_owner.values())
    raise AssertionError("rendezvous put 100 queues on one core")


async def enqueue(router: Router, queue: str, name: str = "t") -> str:
    r = await router.call(NS, "enqueue", J.EnqueueRequest(queue=queue, task=pb.TaskSpec(name=name)))
    return r.enqueued.job


async def test_complete_batch_is_split_by_owner(cluster):
    router, _ = cluster
    qa, qb = queues_on_each_core(router)
    for q in (qa, qb, qa):
        await enqueue(router, q)
    leases = []
    for q in (qa, qb):
        leases += (await router.call(NS, "lease", J.LeaseRequest(queues=[q], worker="w", max=5))).leases
    assert len(leases) == 3
    items = [J.CompleteRequest(token=x.token, outcome=J.Outcome(ok={})) for x in leases]
    items.append(J.CompleteRequest(token=J.LeaseToken(queue=qb, job=leases[0].token.job, epoch=1),
                                   outcome=J.Outcome(ok={})))  # fmt: skip  # the wrong queue
    r = await router.call(NS, "complete_batch", J.CompleteBatchRequest(items=items))
    kinds = [x.WhichOneof("result") for x in r.results]
    assert kinds == ["completed", "completed", "completed", "error"]
    assert r.results[3].error.code == "not_found"


async def test_a_split_complete_batch_leases_once(cluster):
    router, _ = cluster
    qa, qb = queues_on_each_core(router)
    for q in (qa, qb, qb, qb):
        await enqueue(router, q)
    leases = []
    for q in (qa, qb):
        leases += (await router.call(NS, "lease", J.LeaseRequest(queues=[q], worker="w", max=1))).leases
    items = [J.CompleteRequest(token=x.token, outcome=J.Outcome(ok={})) for x in leases]
    ask = J.LeaseRequest(queues=[qb], worker="w", max=5)
    r = await router.call(NS, "complete_batch", J.CompleteBatchRequest(items=items, lease=ask))
    assert [x.WhichOneof("result") for x in r.results] == ["completed", "completed"]
    assert sorted(x.token.queue for x in r.leases) == [qb, qb]  # the two still waiting in qb, once
    again = await router.call(NS, "lease", J.LeaseRequest(queues=[qa, qb], worker="w", max=5))
    assert list(again.leases) == []


async def test_a_lease_after_completions_does_not_wait(cluster):
    router, _ = cluster
    q, _ = queues_on_each_core(router)
    ask = J.LeaseRequest(queues=[q], worker="w", wait_ns=10**9)
    with pytest.raises(ConnectError) as err:
        await router.call(NS, "complete_batch", J.CompleteBatchRequest(lease=ask))
    assert err.value.code == Code.INVALID_ARGUMENT and "lease.wait_ns" in err.value.message


async def test_long_poll_wakes_through_the_hop(cluster):
    router, cores = cluster
    q, _ = queues_on_each_core(router)
    t0 = time.monotonic()
    parked = asyncio.create_task(
        router.call(NS, "lease", J.LeaseRequest(queues=[q], worker="w", wait_ns=10**10))
    )
    await asyncio.sleep(0.3)
    assert cores[router.owner(NS, q)].waiters.parked(NS, q) == 1  # parked on the owner
    job = await enqueue(router, q)
    r = await asyncio.wait_for(parked, 5)
    assert [x.token.job for x in r.leases] == [job]
    assert time.monotonic() - t0 < 2


async def test_errors_pass_through(cluster):
    router, _ = cluster
    with pytest.raises(ConnectError) as err:
        await router.call(NS, "enqueue", J.EnqueueRequest(queue="bad name", task=pb.TaskSpec(name="t")))
    assert err.value.code == Code.INVALID_ARGUMENT
    assert err.value.details  # the ErrorDetail survived the hop
    with pytest.raises(ConnectError) as err:
        await router.call(NS, "submit_engine_job", J.SubmitEngineJobRequest())
    assert err.value.code == Code.INVALID_ARGUMENT  # the queue cores serve the engine RPCs
    assert "job" in err.value.message


async def test_queue_list_from_any_core(cluster):
    router, _ = cluster
    qa, qb = queues_on_each_core(router)
    await enqueue(router, qa)
    await enqueue(router, qb)
    assert set(await router.queue_list(NS)) >= {qa, qb}


async def test_wrong_internal_token_is_refused(cluster):
    router, _ = cluster
    bad = Router(cores=router.cores, internal_token="wrong")
    try:
        with pytest.raises(ConnectError) as err:
            await bad.call(NS, "query", J.QueryRequest(queue="q1"))
        assert err.value.code == Code.UNAUTHENTICATED
    finally:
        await bad.close()


async def test_core_down_is_unavailable():
    router = Router(cores=[f"http://127.0.0.1:{free_port()}"])
    try:
        with pytest.raises(ConnectError) as err:
            await router.call(NS, "query", J.QueryRequest(queue="q1"))
        assert err.value.code == Code.UNAVAILABLE
        with pytest.raises(ConnectError) as err:
            await router.queue_list(NS)
        assert err.value.code == Code.UNAVAILABLE
    finally:
        await router.close()


def test_router_needs_one_kind_of_target():
    with pytest.raises(ValueError):
        Router()
