"""Watch (loam_queue_core.watch): a snapshot and a cursor taken in one store snapshot,
then the events after it; a stream resumed with its last cursor misses nothing and
repeats nothing, also while producers, workers, the relay and the watchers themselves
are stopped and started at random points. Wake-ups come from the commits of this
process; changes from another process arrive by the fallback timeout."""

from __future__ import annotations

import asyncio
import random

import pytest

from loam_common import cloudevents, events
from loam_common.errors import InvalidArgument, NotFound
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs.complete import Ok, Release
from loam_common.store import SqliteBackend, Store
from loam_queue_core import QueueCore
from loam_queue_core import watch as W
from loam_queue_core.rpc import CoreRpc
from loam_relay import RelayService

NS = "acme"
SEC = 1_000_000_000


def _req(cursor: bytes = b"", without_cloudevent: bool = False, **selector) -> J.WatchRequest:
    return J.WatchRequest(
        selector=J.Selector(**selector), cursor=cursor, without_cloudevent=without_cloudevent
    )


class Watcher:
    """A Watch stream in a task, collecting what it receives."""

    def __init__(
        self, rpc: CoreRpc, cursor: bytes = b"", without_cloudevent: bool = False, **selector
    ) -> None:
        self.items: list[J.WatchResponse] = []
        self.cursor = cursor
        self.ready = asyncio.Event()
        self.task = asyncio.create_task(self._run(rpc, without_cloudevent, selector))

    async def _run(self, rpc, without_cloudevent, selector) -> None:
        async for item in rpc.watch(NS, _req(self.cursor, without_cloudevent, **selector)):
            self.items.append(item)
            if item.cursor:
                self.cursor = item.cursor
            if item.ready:
                self.ready.set()

    @property
    def events(self):
        return [i.event for i in self.items if i.HasField("event")]

    async def stop(self) -> None:
        self.task.cancel()
        try:
            await self.task
        except asyncio.CancelledError:
            pass


async def _until(pred, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not pred():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def _log_after(tx, queue: str, start: dict[int, int]) -> dict[int, list]:
    return {
        s: events.events_after(tx, NS, queue, s, start.get(s, 0), 100_000)
        for s in events.event_shards(tx, NS, queue)
    }


async def test_queue_watch_snapshot_then_events_with_cloudevents(store, core):
    rpc = CoreRpc(core)
    await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"))
    w = Watcher(rpc, queue="q")
    await w.ready.wait()
    snap = w.items[0]
    assert snap.HasField("counts") and snap.counts.waiting == 1
    assert W.decode_cursor(snap.cursor) == {("q", 0): 2}  # added + waiting of the first job
    assert w.items[1].ready
    job = await core.jobs.enqueue(
        NS, "q", pb.TaskSpec(name="t", headers={"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"})
    )
    await _until(lambda: len(w.events) == 2)
    await w.stop()
    added, waiting = w.events
    assert (added.event, added.seq, added.job_id) == ("added", 3, job.job_id)
    assert (waiting.event, waiting.seq) == ("waiting", 4)
    item = next(i for i in w.items if i.HasField("event"))
    ce = dict(item.cloudevent)
    assert ce == cloudevents.attributes(NS, added)
    assert ce["type"] == "io.loams.dev.jobs.added.v1" and ce["id"] == f"{NS}/q/0/3"
    assert ce["traceparent"] == "00-" + "1" * 32 + "-" + "2" * 16 + "-01"  # the producer's, kept
    assert W.decode_cursor(w.items[-1].cursor) == {("q", 0): 4}


async def test_without_cloudevent_the_same_events_and_cursors_come_bare(store, core):
    """A reader that does not use the CloudEvents attributes (BullMQ's QueueEvents) gets
    the same events with the same cursors, and no attributes."""
    rpc = CoreRpc(core)
    full, bare = Watcher(rpc, queue="q"), Watcher(rpc, queue="q", without_cloudevent=True)
    await full.ready.wait()
    await bare.ready.wait()
    job = await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"))
    [leased] = await core.jobs.lease(NS, ["q"], "w", 1)
    await core.jobs.complete(NS, "q", leased.id, leased.epoch, Ok())
    await _until(lambda: len(full.events) == 5 and len(bare.events) == 5)
    await full.stop()
    await bare.stop()
    assert [e.event for e in bare.events] == ["added", "waiting", "active", "completed", "drained"]
    assert bare.events == full.events and all(e.job_id == job.job_id for e in bare.events[:4])
    events_of = lambda w: [i for i in w.items if i.HasField("event")]  # noqa: E731
    assert [i.cursor for i in events_of(bare)] == [i.cursor for i in events_of(full)]
    assert all(not i.cloudevent for i in events_of(bare)) and all(i.cloudevent for i in events_of(full))


async def test_job_watch_sees_only_that_job(store, core):
    rpc = CoreRpc(core)
    a = await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="a"), pb.EnqueueOpts(job_key="k-a"))
    await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="b"))
    w = Watcher(rpc, job=J.LeaseToken(queue="q", job="k-a"))  # a job key names the job too
    await w.ready.wait()
    assert w.items[0].snapshot.id == a.job_id
    for job in await core.jobs.lease(NS, ["q"], "w", max_jobs=2):
        await core.jobs.complete(NS, "q", job.id, job.epoch, Ok())
    await _until(lambda: [e.event for e in w.events] == ["active", "completed"])
    await w.stop()
    assert {e.job_id for e in w.events} == {a.job_id}
    with pytest.raises(NotFound):
        async for _ in rpc.watch(NS, _req(job=J.LeaseToken(queue="q", job="nope"))):
            pass


async def test_a_caught_up_stream_gets_a_burst_larger_than_its_small_reads(store, core):
    """A stream that has caught up reads small pages (on the event loop, where the store
    commits there); a burst of more events than such a page arrives whole and in order,
    each event once, as the stream goes back to full pages."""
    rpc = CoreRpc(core)
    w = Watcher(rpc, queue="q")
    await w.ready.wait()
    await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="first"))
    await _until(lambda: len(w.events) == 2)  # added, waiting: caught up
    burst = W.INLINE_PAGE * 3
    await core.jobs.enqueue_bulk(NS, "q", [(pb.TaskSpec(name=f"b{i}"), None) for i in range(burst)])
    await _until(lambda: len(w.events) == 2 + 2 * burst)
    await w.stop()
    seqs = [e.seq for e in w.events]
    assert seqs == sorted(set(seqs)) and len(seqs) == 2 + 2 * burst
    assert [e.name for e in w.events[2::2]] == [f"b{i}" for i in range(burst)]


async def test_a_filtered_watch_cursor_covers_the_events_it_skipped(store, core, clock, configure):
    """The cursor sent with a job watch's event has every shard at the events before it,
    those of other jobs (not sent) included: a watcher resuming from it reads none of
    them again."""
    await configure("q", shards=3)
    rpc = CoreRpc(core)
    a = await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="a"))
    w = Watcher(rpc, job=J.LeaseToken(queue="q", job=a.job_id))
    await w.ready.wait()
    others = [await core.jobs.enqueue(NS, "q", pb.TaskSpec(name=f"o{i}")) for i in range(12)]
    leased = {j.id: j for j in await core.jobs.lease(NS, ["q"], "w", max_jobs=13)}
    for other in others:
        job = leased[other.job_id]
        await core.jobs.complete(NS, "q", job.id, job.epoch, Ok())
    before = await store.snapshot(lambda tx: {s: events.shard_event_seq(tx, NS, "q", s) for s in range(3)})
    # Later than the others: the stream merges its shards by event time, and on a clock
    # that stands still a shard read in the same page could come after `a`'s event.
    clock.advance(1_000_000)
    await core.jobs.complete(NS, "q", a.job_id, leased[a.job_id].epoch, Ok())
    await _until(lambda: [e.event for e in w.events][-1:] == ["completed"])
    await w.stop()
    assert {e.job_id for e in w.events} == {a.job_id}
    done = w.items[-1]
    assert done.event.event == "completed" and sum(before.values()) > len(w.events)
    cursor = W.decode_cursor(done.cursor)
    assert cursor[("q", done.event.shard)] == done.event.seq
    # what was skipped, and no less; a shard none of the 13 jobs landed on has no events
    # and may be absent from the cursor (absent = 0)
    assert all(cursor.get(("q", s), 0) >= seq for s, seq in before.items())


async def test_flow_and_schedule_watch(store, core, clock):
    rpc = CoreRpc(core)
    spec = pb.FlowSpec(id="f1", nodes=[
        pb.FlowNode(id="child", queue="c", task=pb.TaskSpec(name="child")),
        pb.FlowNode(id="parent", queue="p", task=pb.TaskSpec(name="parent"), depends_on=["child"]),
    ])  # fmt: skip
    sub = await core.flows.submit(NS, spec)
    await core.jobs.enqueue(NS, "c", pb.TaskSpec(name="other"))  # not in the flow
    wf = Watcher(rpc, flow="f1")
    await wf.ready.wait()
    assert wf.items[0].flow.id == "f1" and {i.snapshot.id for i in wf.items if i.HasField("snapshot")} == set(
        sub.jobs.values()
    )
    child = (await core.jobs.lease(NS, ["c"], "w", max_jobs=1, names=["child"]))[0]
    await core.jobs.complete(NS, "c", child.id, child.epoch, Ok())
    await _until(lambda: ("p", "waiting") in {(e.queue, e.event) for e in wf.events})
    await wf.stop()
    assert {e.job_id for e in wf.events} <= set(sub.jobs.values())

    sched = await core.schedules.upsert(NS, pb.ScheduleSpec(id="s1", every_ns=60 * SEC, queue="sq", task=pb.TaskSpec(name="tick"),
                                                  immediately=True))  # fmt: skip
    await core.jobs.enqueue(NS, "sq", pb.TaskSpec(name="manual"))
    ws = Watcher(rpc, schedule="s1")
    await ws.ready.wait()
    assert ws.items[0].schedule.id == "s1"
    jobs = await core.jobs.lease(NS, ["sq"], "w", max_jobs=10)
    for job in jobs:
        await core.jobs.complete(NS, "sq", job.id, job.epoch, Ok())
    await _until(lambda: [e.event for e in ws.events] == ["active", "completed"])
    await ws.stop()
    assert {e.job_id for e in ws.events} == {sched.schedule.last_job_id}


async def test_wakeup_comes_from_the_commit_not_the_fallback(store, core, monkeypatch):
    monkeypatch.setattr(W, "POLL_S", 30.0)
    w = Watcher(CoreRpc(core), queue="q")
    await w.ready.wait()
    await asyncio.sleep(0.05)  # parked
    t0 = asyncio.get_running_loop().time()
    await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"))
    await _until(lambda: len(w.events) == 2, timeout=2.0)
    assert asyncio.get_running_loop().time() - t0 < 1.0
    await w.stop()
    assert core.hub.streams == 0  # the stream closed: nothing left to tell


async def test_changes_from_another_process_arrive_by_the_fallback(tmp_path, clock, monkeypatch):
    monkeypatch.setattr(W, "POLL_S", 0.1)
    a = Store(SqliteBackend(tmp_path / "shared.db", clock=clock))
    b = Store(SqliteBackend(tmp_path / "shared.db", clock=clock))  # "another process" on the same file
    try:
        core_a, core_b = QueueCore(a), QueueCore(b)
        await core_a.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"))
        w = Watcher(CoreRpc(core_a), queue="q")
        await w.ready.wait()
        # core_b's commits do notify this process's listeners (one process here), so keep
        # the hub from hearing them: only the fallback timeout may find the event.
        monkeypatch.setattr(core_a.hub, "notify", lambda ns, q: None)
        await core_b.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"))
        await _until(lambda: len(w.events) == 2, timeout=3.0)
        await w.stop()
    finally:
        await a.close()
        await b.close()


async def test_stale_or_foreign_cursor_is_refused(store, core, clock):
    rpc = CoreRpc(core)
    await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"))
    w = Watcher(rpc, queue="q")
    await w.ready.wait()
    cursor = w.cursor
    await w.stop()
    for _ in range(3):
        await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"))
    await RelayService(store, "r").run_once()
    clock.advance(SEC)
    trimmed = await rpc.queue_admin(
        NS,
        J.QueueAdminRequest(
            queue="q", op=J.QueueOp(trim_events=J.QueueOp.TrimEvents(before_ns=clock.now_ns()))
        ),
    )
    assert trimmed.affected == 8
    with pytest.raises(InvalidArgument) as e:
        async for _ in rpc.watch(NS, _req(cursor, queue="q")):
            pass
    assert e.value.field == "cursor"
    with pytest.raises(InvalidArgument):
        async for _ in rpc.watch(NS, _req(W.encode_cursor({("q", 0): 10**6}), queue="q")):
            pass
    with pytest.raises(InvalidArgument):
        async for _ in rpc.watch(NS, _req(b"\xff\xff", queue="q")):
            pass


async def test_new_shards_are_followed_from_their_start(store, core, configure):
    rpc = CoreRpc(core)
    w = Watcher(rpc, queue="fresh")  # the queue does not exist yet
    await w.ready.wait()
    assert w.items[0].counts == pb.QueueCounts()
    await configure("fresh", shards=4)
    for _ in range(12):
        await core.jobs.enqueue(NS, "fresh", pb.TaskSpec(name="t"))
    await _until(lambda: len([e for e in w.events if e.event == "added"]) == 12)
    await w.stop()
    assert len({e.shard for e in w.events}) > 1
    # Each event's cursor: every shard's position so far, this event's own moved to it.
    seen: dict = {}
    for item in w.items:
        if item.HasField("event"):
            ev = item.event
            seen[(ev.queue, ev.shard)] = ev.seq
            positions = W.decode_cursor(item.cursor)
            assert {p: s for p, s in positions.items() if p in seen} == seen
            assert item.cursor == W.encode_cursor(positions)


@pytest.mark.parametrize("seed", [1, 2])
async def test_resumed_watchers_see_exactly_the_committed_changes(store, core, configure, seed):
    """Producers and workers run concurrently; the relay and three watchers are killed and
    restarted at random points (each watcher resuming from the last cursor it received).
    Joined across reconnects, each watcher's events are exactly the event log after its
    first snapshot, in order per shard, none twice."""
    rng = random.Random(seed)
    await configure("q", shards=3)
    rpc = CoreRpc(core)
    await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="warm"))
    stop = asyncio.Event()
    n_jobs = 120

    async def producer(i: int) -> None:
        for _ in range(n_jobs // 2):
            await core.jobs.enqueue(
                NS, "q", pb.TaskSpec(name=f"p{i}"), pb.EnqueueOpts(priority=rng.choice([0, 0, 3]))
            )
            await asyncio.sleep(rng.random() * 0.02)

    async def worker(i: int) -> None:
        while not stop.is_set():
            for job in await core.jobs.lease(NS, ["q"], f"w{i}", max_jobs=3, wait_ns=20_000_000):
                if job.attempt == 0 and rng.random() < 0.2:
                    await core.jobs.report(NS, "q", job.id, job.epoch, progress=b"50")
                    await core.jobs.complete(NS, "q", job.id, job.epoch, Release())
                else:
                    await core.jobs.complete(NS, "q", job.id, job.epoch, Ok())

    relay = RelayService(store, "relay", interval=0.005, batch=7)

    async def relay_chaos() -> None:
        while not stop.is_set():
            relay.start()
            await asyncio.sleep(rng.random() * 0.05)
            await relay.stop()  # mid-batch or between batches: the copy is idempotent
            await asyncio.sleep(rng.random() * 0.02)

    class Resumer:
        def __init__(self) -> None:
            self.start: dict | None = None
            self.events: list = []
            self.cursor = b""
            self.restarts = 0

        async def run(self) -> None:
            while not stop.is_set():
                w = Watcher(rpc, self.cursor, queue="q")
                await asyncio.sleep(rng.random() * 0.06)
                await w.stop()  # killed at a random point
                self.restarts += 1
                if self.start is None and w.items:
                    self.start = W.decode_cursor(w.items[0].cursor)
                self.events += w.events
                self.cursor = w.cursor
            w = Watcher(rpc, self.cursor, queue="q")  # the last one stays to the end
            self.final = w

    resumers = [Resumer() for _ in range(3)]
    tasks = [asyncio.create_task(r.run()) for r in resumers]
    tasks.append(asyncio.create_task(relay_chaos()))
    workers = [asyncio.create_task(worker(i)) for i in range(2)]
    await asyncio.gather(producer(0), producer(1))

    async def drained() -> bool:
        counts = await rpc.queue_admin(NS, J.QueueAdminRequest(queue="q", op=J.QueueOp(counts={})))
        return counts.counts.completed == n_jobs + 1

    deadline = asyncio.get_running_loop().time() + 20
    while not await drained():
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.02)
    stop.set()
    await asyncio.gather(*tasks, *workers)
    await relay.stop()
    await RelayService(store, "relay").run_once()  # the outbox drained into the log
    final_seq = await store.snapshot(lambda tx: {s: events.shard_event_seq(tx, NS, "q", s) for s in range(3)})
    for r in resumers:
        await _until(lambda r=r: r.final.ready.is_set())
        if r.start is None:
            r.start = W.decode_cursor(r.final.items[0].cursor)

        def caught_up(r=r) -> bool:
            seen = W.decode_cursor(r.final.cursor)
            return all(seen.get(("q", s), 0) == final_seq[s] for s in range(3))

        await _until(caught_up, timeout=10)
        await r.final.stop()
        got = r.events + r.final.events
        log = await store.snapshot(_log_after, "q", {s: seq for (q, s), seq in r.start.items()})
        for s in range(3):
            mine = [(e.seq, e.event, e.job_id) for e in got if e.shard == s]
            want = [(e.seq, e.event, e.job_id) for e in log[s]]
            assert mine == want, (
                f"shard {s}: watcher saw {len(mine)} events, the log has {len(want)} after its snapshot"
            )
        assert r.restarts >= 5 and len(got) > 3 * n_jobs, (r.restarts, len(got))
