"""Watch (spec §6.6): a snapshot of a job, a queue, a flow or a schedule, and the
events after it, streamed; resumable with a cursor without missing or repeating one.

**The cursor argument, on this store.** Every state change writes its outbox row
(sequence = the shard's `ShardMeta.outbox_seq` + 1) in the transaction that makes the
change. The snapshot reads the state and each relevant shard's `outbox_seq` in one
store snapshot, so exactly the events with a sequence at or below it are reflected in
the state; the stream then delivers, per shard, the events above it, in sequence
order, reading the event log and then the rows the relay has not moved yet
(`events.events_after`, one snapshot per read, each sequence once). The cursor is the
last sequence delivered per (queue, shard) (`WatchCursor`, serialized: opaque to
clients), sent with every event, so a client that reconnects with the last cursor it
received resumes right after the last event it saw. A shard that appears later (a
queue created or re-sharded after the snapshot) starts at 0: all its events are newer.
A cursor older than the log's retention (default 7 days) or than an obliterate is
refused (`invalid_argument` on `cursor`): re-watch without one.

**Wake-ups, not polling.** A stream parks on its queue core's `EventHub`; every
transaction committed through the core's store that wrote a watched queue's events
declares `effects.Changed`, which the core's effect sink passes on (effects.py), and
so does the sweeper's cross-process wake. Changes committed by other processes (another queue core leasing from a
queue it does not own, a flow's queues owned by other cores) are seen
after at most `LOAM_WATCH_POLL_S` (default 1 s): the fallback timeout of each park. An
idle check is one store snapshot with one `get` per watched shard. (The relay never
needs to wake anyone: reads include the outbox rows it has not moved yet.)

A stream sends a heartbeat (a message with only the cursor) after `HEARTBEAT_S` of
silence, and sooner when filtered-out events moved the cursor, so proxies keep the
connection and a resumed stream need not re-read what it skipped.
"""

from __future__ import annotations

import asyncio
import heapq
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from loam_common import cloudevents, events, keys, validate
from loam_common.errors import InvalidArgument, NotFound
from loam_common.gen.loam.jobs.v1 import events_pb2
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import admin, flows, job_admin, schedules
from loam_common.store.base import Txn

POLL_S = float(os.environ.get("LOAM_WATCH_POLL_S", "1.0"))
HEARTBEAT_S = 15.0
SKIP_HEARTBEAT_S = 1.0
PAGE = 500
#: A stream of at most INLINE_POSITIONS positions whose last read did not fill a page
#: reads next on the event loop, where the store commits there, at most INLINE_PAGE events
#: a position: a hop to a reader thread and back costs more than such a read, and a
#: listener through a drain (BullMQ's QueueEvents) reads at every wake-up. A first read,
#: or one after a page that filled (a stream catching up), goes to the reader thread with
#: PAGE events a position.
INLINE_PAGE = 64
INLINE_POSITIONS = 8

Position = tuple[str, int]  # (queue, shard)


# -- the per-process notification ---------------------------------------------------------------
class EventHub:
    """Where Watch streams of this process park until a queue they watch changes."""

    def __init__(self) -> None:
        self._parked: dict[tuple[str, str], set[asyncio.Future[None]]] = {}
        self._streams = 0

    def open(self) -> None:
        self._streams += 1

    def close(self) -> None:
        self._streams = max(self._streams - 1, 0)

    @property
    def streams(self) -> int:
        return self._streams

    def park(self, ns: str, queues: list[str]) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for q in queues:
            self._parked.setdefault((ns, q), set()).add(fut)
        return fut

    def unpark(self, ns: str, queues: list[str], fut: asyncio.Future[None]) -> None:
        if not fut.done():
            fut.cancel()
        for q in queues:
            s = self._parked.get((ns, q))
            if s is not None:
                s.discard(fut)
                if not s:
                    del self._parked[(ns, q)]

    def notify(self, ns: str, queue: str) -> None:
        """Wake every stream parked on the queue (safe from any thread)."""
        waiting = self._parked.get((ns, queue))
        if not waiting:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for fut in list(waiting):
            loop = fut.get_loop()
            if loop is running:
                _wake(fut)
            else:
                try:
                    loop.call_soon_threadsafe(_wake, fut)
                except RuntimeError:
                    pass  # that loop is closed


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


# -- cursors ---------------------------------------------------------------------------------------
def encode_cursor(positions: dict[Position, int]) -> bytes:
    c = J.WatchCursor()
    for (q, s), seq in sorted(positions.items()):
        c.positions.add(queue=q, shard=s, seq=seq)
    return c.SerializeToString()


class _Cursor:
    """A stream's cursor after each event: `encode_cursor(positions)`, from one message
    kept between events, in which an event moves one position (a new message each time
    cost four times as much). `moved`: the positions changed since the last call (a
    namespace's stream has one a queue shard: only those are looked at). Built again
    when positions were added (a stream's positions are only ever added)."""

    __slots__ = ("msg", "slots")

    def __init__(self) -> None:
        self.msg = J.WatchCursor()
        self.slots: dict[Position, Any] = {}

    def advance(self, positions: dict[Position, int], moved: set[Position]) -> bytes:
        slots = self.slots
        if len(slots) != len(positions):
            self.msg = J.WatchCursor()
            slots.clear()
            for (q, s), seq in sorted(positions.items()):
                slots[(q, s)] = self.msg.positions.add(queue=q, shard=s, seq=seq)
        else:
            for pos in moved:
                slots[pos].seq = positions[pos]
        moved.clear()
        return self.msg.SerializeToString()


def decode_cursor(raw: bytes) -> dict[Position, int]:
    try:
        c = J.WatchCursor.FromString(raw)
    except Exception:  # noqa: BLE001 - any decode failure is the caller's bad cursor
        raise InvalidArgument("cursor", "is not a Watch cursor: pass back one this server sent") from None
    out = {}
    for p in c.positions:
        if not p.queue or p.shard > 255:
            raise InvalidArgument("cursor", "is not a Watch cursor: pass back one this server sent")
        out[(p.queue, p.shard)] = p.seq
    return out


# -- what a selector watches ------------------------------------------------------------------------
@dataclass
class Target:
    kind: str
    queues: list[str]
    job_id: str = ""  # job
    schedule_id: str = ""  # schedule
    flow_id: str = ""  # flow
    flow_jobs: set[tuple[str, str]] = field(default_factory=set)  # flow: (queue, job id)

    def wants(self, ev: events_pb2.JobEvent) -> bool:
        if self.kind == "queue":
            return True
        if self.kind == "job":
            return ev.job_id == self.job_id
        if self.kind == "schedule":
            return ev.headers.get(schedules.HEADER_SCHEDULE) == self.schedule_id
        return (ev.queue, ev.job_id) in self.flow_jobs


def _target(ns: str, sel: J.Selector) -> Target:
    kind = sel.WhichOneof("what")
    if kind == "job":
        validate.name("selector.job.queue", sel.job.queue)
        validate.text("selector.job.job", sel.job.job, 256, allow_empty=False)
        return Target("job", [sel.job.queue], job_id=sel.job.job)
    if kind == "queue":
        validate.name("selector.queue", sel.queue)
        return Target("queue", [sel.queue])
    if kind == "flow":
        validate.text("selector.flow", sel.flow, 1024, allow_empty=False)
        return Target("flow", [], flow_id=sel.flow)
    if kind == "schedule":
        validate.text("selector.schedule", sel.schedule, 1024, allow_empty=False)
        return Target("schedule", [], schedule_id=sel.schedule)
    raise InvalidArgument("selector", "set one of job, queue, flow, schedule")


def _positions_now(tx: Txn, ns: str, queues: list[str]) -> dict[Position, int]:
    return {
        (q, s): events.shard_event_seq(tx, ns, q, s) for q in queues for s in events.event_shards(tx, ns, q)
    }


def _resolve(tx: Txn, ns: str, t: Target) -> list[J.WatchResponse]:
    """Fill in the target's queues (flow, schedule) and return the snapshot messages."""
    if t.kind == "job":
        by_key = tx.get(keys.QueueKeys(ns, t.queues[0]).job_key(t.job_id))
        if tx.get(keys.QueueKeys(ns, t.queues[0]).job(t.job_id)) is None and by_key is not None:
            t.job_id = by_key.decode()  # a job key names the job
        job = job_admin.job_get(tx, ns, t.queues[0], t.job_id)  # NotFound if there is none
        return [J.WatchResponse(snapshot=job)]
    if t.kind == "queue":
        try:
            counts = admin.queue_counts(tx, ns, t.queues[0])
        except NotFound:  # not created yet: watch it come
            counts = pb.QueueCounts()
        return [J.WatchResponse(counts=counts)]
    if t.kind == "schedule":
        rec = schedules.schedule_get(tx, ns, t.schedule_id)
        t.queues = [rec.queue]
        return [J.WatchResponse(schedule=rec)]
    rec = flows.flow_get(tx, ns, t.flow_id)
    t.flow_jobs = {(j.queue, j.job_id) for j in rec.jobs}
    t.queues = sorted({j.queue for j in rec.jobs})
    out = [J.WatchResponse(flow=rec)]
    for j in rec.jobs:
        try:
            out.append(J.WatchResponse(snapshot=job_admin.job_get(tx, ns, j.queue, j.job_id)))
        except NotFound:
            pass  # removed by retention: its events say so
    return out


def _snapshot(tx: Txn, ns: str, t: Target) -> tuple[list[J.WatchResponse], dict[Position, int]]:
    """The state and the positions it reflects, in one store snapshot."""
    items = _resolve(tx, ns, t)
    return items, _positions_now(tx, ns, t.queues)


def _resume(tx: Txn, ns: str, t: Target) -> None:
    """On a resumed stream: the target's queues (flow, schedule), no snapshot."""
    try:
        _resolve(tx, ns, t)
    except NotFound:
        if t.kind in ("flow", "schedule"):
            raise
        # a job removed since: its remaining events are still in the log


def _read(
    tx: Txn, ns: str, queues: list[str], positions: dict[Position, int], limit: int
) -> dict[Position, list[events_pb2.JobEvent]]:
    """The events after each position (new shards from 0), in one snapshot."""
    for q in queues:
        for s in events.event_shards(tx, ns, q):
            positions.setdefault((q, s), 0)
    out = {}
    for (q, s), seq in positions.items():
        last = events.shard_event_seq(tx, ns, q, s)
        if seq > last:
            raise InvalidArgument(
                "cursor",
                f"is ahead of queue {q!r} shard {s} ({seq} > {last}): not a cursor of this store; re-watch without one",
            )
        if seq == last:
            continue
        evs = events.events_after(tx, ns, q, s, seq, limit)
        if seq and (not evs or evs[0].seq != seq + 1):
            raise InvalidArgument(
                "cursor",
                f"is older than the event log of queue {q!r} shard {s} (trimmed by retention or an obliterate): "
                "re-watch without a cursor",
            )
        out[(q, s)] = evs
    return out


# -- the stream ----------------------------------------------------------------------------------
async def watch(core, ns: str, req: J.WatchRequest) -> AsyncIterator[J.WatchResponse]:
    """The Watch stream (see the module docstring). `core` is the QueueCore."""
    target = _target(ns, req.selector)
    store, hub = core.store, core.hub
    org = cloudevents.org()
    plain = req.without_cloudevent
    if req.cursor:
        positions = decode_cursor(req.cursor)
        await store.snapshot(_resume, ns, target)
        positions = {p: s for p, s in positions.items() if p[0] in target.queues}
    else:
        items, positions = await store.snapshot(_snapshot, ns, target)
        cursor = encode_cursor(positions)
        for item in items:
            item.cursor = cursor
            yield item
    sent_cursor = encode_cursor(positions)
    yield J.WatchResponse(ready=True, cursor=sent_cursor)
    cursor_of = _Cursor()
    moved: set[Position] = set()  # positions the cursor sent last does not have yet
    caught_up = False  # the last read did not fill a page: the next runs on the loop
    loop = asyncio.get_running_loop()
    last_sent = loop.time()
    hub.open()
    try:
        while True:
            fut = hub.park(ns, target.queues)  # before reading: a commit after the read wakes us
            try:
                limit = INLINE_PAGE if caught_up else PAGE
                pages = await store.snapshot(_read, ns, target.queues, positions, limit, inline=caught_up)
                full = any(len(p) >= limit for p in pages.values())
                caught_up = not full and len(positions) <= INLINE_POSITIONS
                delivered = False
                # Merge the shards by time; each shard's own order is kept as is.
                for ev in heapq.merge(*pages.values(), key=lambda e: e.time_ns):
                    pos = (ev.queue, ev.shard)
                    positions[pos] = ev.seq
                    moved.add(pos)
                    if target.wants(ev):
                        sent_cursor = cursor_of.advance(positions, moved)
                        if plain:
                            yield J.WatchResponse(event=ev, cursor=sent_cursor)
                        else:
                            yield J.WatchResponse(
                                event=ev,
                                cursor=sent_cursor,
                                cloudevent=cloudevents.attributes(ns, ev, org=org),
                            )
                        delivered = True
                now = loop.time()
                if delivered:
                    last_sent = now
                if full:
                    continue
                cursor = encode_cursor(positions)
                idle = now - last_sent
                if cursor != sent_cursor and idle >= SKIP_HEARTBEAT_S or idle >= HEARTBEAT_S:
                    sent_cursor, last_sent = cursor, now
                    yield J.WatchResponse(cursor=cursor)
                if not delivered:
                    try:
                        await asyncio.wait_for(asyncio.shield(fut), POLL_S)
                    except TimeoutError:
                        pass
            finally:
                hub.unpark(ns, target.queues, fut)
    finally:
        hub.close()
