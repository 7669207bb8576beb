"""`Exchanges`: kombu's bindings stored in the core, and publishes routed by them, so a
Celery app's routing works without a broker of its own. A publish is checked against the
namespace's quotas in its transaction, every routed copy as one call."""

from __future__ import annotations

from loam_common.errors import JobsError
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import exchanges, quotas
from loam_common.jobs.new_job import Enqueued
from loam_common.jobs.quotas import QuotaExceeded
from loam_common.store.runner import Store
from loam_common.validate import Namespace
from loam_queue_core.facade.jobs import Jobs
from loam_queue_core.facade.payloads import Payloads


class Exchanges:
    def __init__(self, store: Store, payloads: Payloads, jobs: Jobs) -> None:
        self.store = store
        self.payloads = payloads
        self.jobs = jobs

    async def bind(self, ns: Namespace, exchange: str, routing_key: str, queue: str, ttl_ns: int) -> None:
        exchanges.check_binding(exchange, routing_key, queue)
        await self.store.transact(exchanges.exchange_bind, ns, exchange, routing_key, queue, ttl_ns)

    async def unbind(self, ns: Namespace, exchange: str, routing_key: str, queue: str) -> bool:
        exchanges.check_binding(exchange, routing_key, queue)
        return await self.store.transact(exchanges.exchange_unbind, ns, exchange, routing_key, queue)

    async def bindings(self, ns: Namespace, exchange: str) -> list[pb.ExchangeBinding]:
        exchanges.check_binding(exchange, "")
        return await self.store.snapshot(exchanges.exchange_bindings, ns, exchange)

    async def publish(
        self,
        ns: Namespace,
        exchange: str,
        kind: int,
        routing_key: str,
        task: pb.TaskSpec,
        opts: pb.EnqueueOpts,
    ) -> list[tuple[str, Enqueued | JobsError]]:
        """Route a message by the exchange's stored bindings and enqueue a copy in every
        queue it goes to, in one transaction; a copy refused for its key gets its error
        in its slot. No queue: nothing is written (kombu drops unroutable messages). Over
        one of the namespace's quotas the whole publish is refused (QuotaExceeded) and
        nothing is stored."""
        exchanges.check_binding(exchange, routing_key)
        kind = exchanges.check_type(kind)
        queues = await self.store.snapshot(exchanges.route, ns, exchange, kind, routing_key)
        if not queues:
            return []
        news = []
        for q in queues:
            t, o = pb.TaskSpec(), pb.EnqueueOpts()
            t.CopyFrom(task)
            o.CopyFrom(opts)
            news.append((q, await self.payloads.new_job(ns, q, t, o, "task")))
        try:
            if len(news) == 1:
                # A message routed to one queue (a direct or topic binding) is an enqueue with
                # its error in its slot, so it hands its job to a sleeping poll too.
                ((q, new),) = news
                try:
                    results = await self.jobs.enqueue_prepared(ns, q, [new], True)
                except QuotaExceeded:
                    raise  # the namespace's, not the copy's: the whole publish is refused
                except JobsError as e:  # refused whole (the queue's payload limit): in its slot
                    results = [e]
            elif quota := await self.jobs.quotas.of(ns):
                results = await self.store.transact(quotas.enqueue_routed_within_quota, ns, news, quota)
            else:
                results = await self.store.transact(exchanges.enqueue_routed, ns, news)
        except BaseException:
            await self.payloads.drop_unkept([new for _q, new in news], None)
            raise
        for (_q, new), result in zip(news, results, strict=True):
            await self.payloads.drop_unkept([new], [result])
        return [(q, r) for (q, _), r in zip(news, results, strict=True)]
