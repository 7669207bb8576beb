"""`Flows` (spec §8.2): a graph of jobs created in one transaction, each node's
completion updating its dependents in the transaction that finishes it. A new flow is
checked against the namespace's quotas in that transaction, all its jobs as one call.
A flow submitted over REST is audited in that transaction too (`flow.submit`, counting
the jobs it created), as a REST enqueue is (facade.audited)."""

from __future__ import annotations

from loam_common import ids, validate
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import flows, quotas
from loam_common.store.runner import Store
from loam_common.validate import Namespace
from loam_queue_core.facade.audited import transact_if_rest
from loam_queue_core.facade.payloads import Payloads
from loam_queue_core.facade.quotas import Quotas


class Flows:
    def __init__(self, store: Store, payloads: Payloads, quotas: Quotas | None = None) -> None:
        self.store = store
        self.payloads = payloads
        self.quotas = quotas or Quotas(store)  # each namespace's quotas in force

    async def submit(self, ns: Namespace, spec: pb.FlowSpec) -> flows.Submitted:
        """Create every job of a flow in one transaction; a flow id seen before returns
        that flow's jobs (`created` False)."""
        flows.check_flow(spec)
        rhash = flows.request_hash(spec)  # before payloads move to the blob store
        flow_id = spec.id or ids.new_ulid()
        news = [
            await self.payloads.new_job(ns, n.queue, n.task, n.opts, f"graph.nodes[{i}]")
            for i, n in enumerate(spec.nodes)
        ]
        created = False
        queues = sorted({n.queue for n in spec.nodes})

        def detail() -> str:
            return f"flow {flow_id}: {len(spec.nodes)} jobs" + (
                f"; queues {', '.join(queues)}" if len(queues) > 1 else ""
            )

        transact = transact_if_rest(self.store, ns, "flow.submit", queues[0] if len(queues) == 1 else "", detail,
                                    lambda sub: len(sub.jobs) if sub.created else 0)  # fmt: skip
        try:
            if quota := await self.quotas.of(ns):
                sub = await transact(quotas.flow_submit_within_quota, ns, flow_id, rhash, spec, news, quota)
            else:
                sub = await transact(flows.flow_submit, ns, flow_id, rhash, spec, news)
            created = sub.created
        finally:
            if not created:
                await self.payloads.drop_unkept(news, None)
        return sub

    async def get(self, ns: Namespace, flow_id: str) -> pb.FlowRecord:
        validate.text("id", flow_id, 1024, allow_empty=False)
        return await self.store.snapshot(flows.flow_get, ns, flow_id)

    async def children(self, ns: Namespace, queue: str, job_id: str) -> list[pb.Dependency]:
        """A parent's dependencies with their state, result and failure (BullMQ's
        getChildrenValues and friends); results held in the blob store are inlined."""
        deps = await self.store.snapshot(flows.children_of, ns, queue, job_id)
        return await self.payloads.inline_values(deps)
