"""Exchanges (exchanges.py) through CoreRpc: stored bindings route a publish to the
matching queues in one call, TTL bindings lapse, and the result store's long-poll and
`added` answer (the chord claim) used by loam-celery."""

from __future__ import annotations

import asyncio

from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_queue_core.rpc import CoreRpc

NS = "acme"
SEC = 1_000_000_000


def _task(name: str = "t") -> pb.TaskSpec:
    return pb.TaskSpec(name=name, payload=pb.Payload(data=b"{}", content_type="application/json"))


async def _publish(rpc: CoreRpc, exchange: str, kind: int, key: str) -> list[str]:
    req = J.ExchangePublishRequest(exchange=exchange, type=kind, routing_key=key, task=_task())
    r = await rpc.exchange_publish(NS, req)
    return sorted(x.queue for x in r.routed)


async def test_direct_topic_fanout_routing(core, clock):
    rpc = CoreRpc(core)
    for ex, key, queue, ttl in [("d", "a", "qa", 0), ("d", "b", "qb", 0), ("t", "task.*", "qt", 0),
                                ("t", "#", "qall", 0), ("f", "", "m1", 0), ("f", "", "m2", 2 * SEC)]:  # fmt: skip
        await rpc.exchange_bind(
            NS, J.ExchangeBindRequest(exchange=ex, routing_key=key, queue=queue, ttl_ns=ttl)
        )
    assert await _publish(rpc, "d", pb.EXCHANGE_TYPE_DIRECT, "a") == ["qa"]
    assert await _publish(rpc, "t", pb.EXCHANGE_TYPE_TOPIC, "task.sent") == ["qall", "qt"]
    assert await _publish(rpc, "t", pb.EXCHANGE_TYPE_TOPIC, "worker.heartbeat") == ["qall"]
    assert await _publish(rpc, "f", pb.EXCHANGE_TYPE_FANOUT, "ignored") == ["m1", "m2"]
    assert await _publish(rpc, "nobody", pb.EXCHANGE_TYPE_DIRECT, "x") == []
    counts = await rpc.queue_admin(
        NS, J.QueueAdminRequest(queue="m2", op=J.QueueOp(counts=J.QueueOp.Counts()))
    )
    assert counts.counts.waiting == 1
    clock.advance(3 * SEC)  # m2's binding lapsed: no longer renewed
    assert await _publish(rpc, "f", pb.EXCHANGE_TYPE_FANOUT, "") == ["m1"]
    r = await rpc.exchange_unbind(NS, J.ExchangeUnbindRequest(exchange="d", routing_key="a", queue="qa"))
    assert r.removed and await _publish(rpc, "d", pb.EXCHANGE_TYPE_DIRECT, "a") == []
    table = await rpc.exchange_bindings(NS, J.ExchangeBindingsRequest(exchange="t"))
    assert [(b.routing_key, b.queue) for b in table.bindings] == [("#", "qall"), ("task.*", "qt")]


async def test_result_incr_added_and_long_poll(core):
    rpc = CoreRpc(core)
    first = await rpc.result_incr(NS, J.ResultIncrRequest(key="c", member="a"))
    again = await rpc.result_incr(NS, J.ResultIncrRequest(key="c", member="a"))
    assert (first.size, first.added, again.size, again.added) == (1, True, 1, False)

    waiter = asyncio.create_task(
        rpc.result_get(NS, J.ResultGetRequest(key="k", wait_ns=5 * SEC, after_version=0))
    )
    await asyncio.sleep(0.05)
    assert not waiter.done()  # absent: it waits
    await rpc.result_set(NS, J.ResultSetRequest(key="k", value=pb.Payload(data=b"1")))
    got = await asyncio.wait_for(waiter, 2)
    assert got.found and got.value.data == b"1" and got.version > 0
    now = await rpc.result_get(NS, J.ResultGetRequest(key="k", wait_ns=SEC, after_version=0))
    assert now.version == got.version  # a different version answers at once


# -- a routed publish and the sleeping polls of its queues ----------------------------------------
async def _sleeping_poll(core, queue: str) -> asyncio.Task:
    poll = asyncio.create_task(core.jobs.lease(NS, [queue], "w-" + queue, max_jobs=1, wait_ns=20 * SEC))
    async with asyncio.timeout(5):
        while core.waiters.sleeping(NS, queue) == 0:  # read nothing and waits: a publish may claim it
            await asyncio.sleep(0.001)
    return poll


async def test_a_publish_routed_to_one_queue_hands_its_job_to_a_sleeping_poll(
    core, count_transactions, check_invariants
):
    rpc = CoreRpc(core)
    await rpc.exchange_bind(NS, J.ExchangeBindRequest(exchange="celery", routing_key="celery", queue="q"))
    poll = await _sleeping_poll(core, "q")
    txs = count_transactions()
    r = await rpc.exchange_publish(NS, J.ExchangePublishRequest(
        exchange="celery", type=pb.EXCHANGE_TYPE_DIRECT, routing_key="celery", task=_task()))  # fmt: skip
    (got,) = await asyncio.wait_for(poll, 5)
    assert got.id == r.routed[0].result.enqueued.job and got.worker == "w-q"
    assert txs == ["job_enqueue_then_lease"]  # the poll did not read again
    await check_invariants()


async def test_a_fanout_wakes_the_sleeping_poll_of_every_queue(core):
    rpc = CoreRpc(core)
    for queue in ("m1", "m2"):
        await rpc.exchange_bind(NS, J.ExchangeBindRequest(exchange="f", queue=queue))
    polls = [await _sleeping_poll(core, queue) for queue in ("m1", "m2")]
    r = await rpc.exchange_publish(
        NS, J.ExchangePublishRequest(exchange="f", type=pb.EXCHANGE_TYPE_FANOUT, task=_task())
    )
    got = await asyncio.wait_for(asyncio.gather(*polls), 5)
    assert sorted(j.id for (j,) in got) == sorted(x.result.enqueued.job for x in r.routed)


async def test_a_routed_copy_over_its_queues_payload_limit_is_refused_in_its_slot(core, store):
    from loam_common.jobs import admin

    await store.transact(admin.queue_create, NS, "small", pb.QueueConfig(payload_limit=1))
    rpc = CoreRpc(core)
    for queue in ("small", "big"):
        await rpc.exchange_bind(NS, J.ExchangeBindRequest(exchange="f", queue=queue))
    await rpc.exchange_bind(NS, J.ExchangeBindRequest(exchange="d", routing_key="k", queue="small"))
    fanout = await rpc.exchange_publish(
        NS, J.ExchangePublishRequest(exchange="f", type=pb.EXCHANGE_TYPE_FANOUT, task=_task())
    )
    direct = await rpc.exchange_publish(NS, J.ExchangePublishRequest(
        exchange="d", type=pb.EXCHANGE_TYPE_DIRECT, routing_key="k", task=_task()))  # fmt: skip
    by_queue = {x.queue: x.result.WhichOneof("result") for x in fanout.routed}
    assert by_queue == {"small": "error", "big": "enqueued"}
    assert [(x.queue, x.result.WhichOneof("result")) for x in direct.routed] == [("small", "error")]
    assert "payload" in direct.routed[0].result.error.message.lower()
    for queue, waiting in (("small", 0), ("big", 1)):
        counts = await rpc.queue_admin(
            NS, J.QueueAdminRequest(queue=queue, op=J.QueueOp(counts=J.QueueOp.Counts()))
        )
        assert counts.counts.waiting == waiting
