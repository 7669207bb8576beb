"""`Schedules` (spec §8.1): cron / every rules the sweeper fires, and BullMQ's job
schedulers, which the caller's iterations drive. A tick enqueues exactly one job, in
the transaction that records the tick."""

from __future__ import annotations

from loam_common import validate
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import quotas, schedules
from loam_common.store.runner import Store
from loam_common.validate import Namespace
from loam_queue_core.facade.quotas import Quotas


class Schedules:
    def __init__(self, store: Store, quotas: Quotas | None = None) -> None:
        self.store = store
        self.quotas = quotas or Quotas(store)  # each namespace's quotas in force

    async def upsert(self, ns: Namespace, spec: pb.ScheduleSpec) -> schedules.Upserted:
        """Create or replace schedule `spec.id`; the same rule again changes nothing."""
        schedules.check_schedule(spec)
        if quota := await self.quotas.of(ns):
            return await self.store.transact(quotas.schedule_upsert_within_quota, ns, spec, quota)
        return await self.store.transact(schedules.schedule_upsert, ns, spec)

    async def iterate(self, ns: Namespace, req: schedules.Iteration) -> schedules.Iterated:
        """An iteration-driven schedule (BullMQ's job schedulers): upsert it or advance
        it by one, with the iteration's job in the same transaction."""
        schedules.check_iteration(req)
        if not req.advance:
            schedules.check_schedule(req.spec)
        return await self.store.transact(schedules.schedule_iterate, ns, req)

    async def remove(self, ns: Namespace, schedule_id: str) -> bool:
        return await self.store.transact(schedules.schedule_remove, ns, _id(schedule_id))

    async def get(self, ns: Namespace, schedule_id: str) -> pb.ScheduleRecord:
        return await self.store.snapshot(schedules.schedule_get, ns, _id(schedule_id))

    async def list(
        self, ns: Namespace, after: str = "", limit: int = 100
    ) -> tuple[list[pb.ScheduleRecord], str]:
        """A page of schedules in id order and the token (an id) for the next page."""
        validate.text("page_token", after, 1024)
        return await self.store.snapshot(schedules.schedule_list, ns, after, limit or 100)


def _id(schedule_id: str) -> str:
    return validate.text("id", schedule_id, 1024, allow_empty=False)
