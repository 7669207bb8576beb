"""The relay (loam_relay, loam_common.events): each change writes its event straight
into the per-queue event log, so a relay has nothing to copy; outbox rows an earlier
server left reach the log exactly once and in order per shard, also when the relay dies
between copying and deleting; reads see logged and not-yet-relayed events once each;
retention trims by time; two relays split the shards and a fenced one writes nothing."""

from __future__ import annotations

import pytest

from loam_common import events, keys
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import admin
from loam_common.jobs.complete import Ok
from loam_common.ownership import (
    Fence,
    OwnershipLost,
    ownership_acquire_or_renew,
    run_fenced,
)
from loam_relay import RelayService

NS = "acme"
SEC = 1_000_000_000

DAY = 24 * 3600 * SEC


async def _traffic(core, queue: str, n: int) -> None:
    """n jobs through enqueue, lease and completion: several events each, both shards."""
    for _ in range(n):
        await core.jobs.enqueue(NS, queue, pb.TaskSpec(name="t"))
    for job in await core.jobs.lease(NS, [queue], "w", max_jobs=n):
        await core.jobs.complete(NS, queue, job.id, job.epoch, Ok())


def _to_outbox(tx, queue: str, since: dict[int, int]) -> None:
    """Move the log rows past `since[shard]` to the outbox: what an earlier server, which
    wrote each event to the outbox for the relay to copy, would have left."""
    k = keys.QueueKeys(NS, queue)
    for shard, after in since.items():
        prefix = k.event_log_shard(shard)
        for key, value in tx.scan(prefix + keys.U64.pack(after + 1), keys.prefix_end(prefix)):
            tx.put(k.outbox(shard, keys.seq_from_key(key, len(prefix))), value)
            tx.delete(key)


async def _earlier_servers_traffic(store, core, queue: str, n: int, shards: int = 2) -> None:
    """`_traffic`, its events left in the outbox as an earlier server left them."""
    heads = {s: await store.snapshot(events.shard_event_seq, NS, queue, s) for s in range(shards)}
    await _traffic(core, queue, n)
    await store.transact(_to_outbox, queue, heads)


def _key(e) -> tuple:
    return (e.shard, e.seq, e.event, e.job_id)


async def _all_outbox(outbox_of, queue, shards=2):
    return {s: await outbox_of(queue, s) for s in range(shards)}


def _assert_log(log, expected):
    """The log is exactly the expected events: same sequences, in order, no repeats."""
    assert [_key(e) for e in log] == [_key(e) for e in expected]
    seqs = [e.seq for e in log]
    assert seqs == sorted(set(seqs))


async def test_events_are_written_straight_into_the_log(store, core, configure, outbox_of, event_log_of):
    await configure("q", shards=2)
    # Jobs go to a shard by their random id: 30 leave one shard without events about
    # twice in a billion runs (10 did about twice in a thousand).
    await _traffic(core, "q", 30)
    for s in (0, 1):
        log = await event_log_of("q", s)
        assert [e.seq for e in log] == list(range(1, len(log) + 1)) and log
        assert log[-1].seq == await store.snapshot(events.shard_event_seq, NS, "q", s)
        assert await outbox_of("q", s) == []
    assert (await RelayService(store, "relay-a").run_once()).copied == 0


async def test_an_earlier_servers_outbox_is_copied_once_and_in_order_per_shard(
    store, core, configure, outbox_of, event_log_of
):
    await configure("q", shards=2)
    await _earlier_servers_traffic(store, core, "q", 20)
    before = await _all_outbox(outbox_of, "q")
    assert all(before[s] for s in (0, 1))
    relay = RelayService(store, "relay-a", batch=7)  # several batches per shard
    rep = await relay.run_once()
    assert rep.copied == sum(len(v) for v in before.values())
    for s in (0, 1):
        _assert_log(await event_log_of("q", s), before[s])
        assert [e.seq for e in before[s]] == list(range(1, len(before[s]) + 1))
        assert await outbox_of("q", s) == []
    # More rows are appended after what is there; a pass with nothing to do copies nothing.
    await _earlier_servers_traffic(store, core, "q", 5)
    more = await _all_outbox(outbox_of, "q")
    assert (await relay.run_once()).copied == sum(len(v) for v in more.values())
    assert (await relay.run_once()).copied == 0
    for s in (0, 1):
        _assert_log(await event_log_of("q", s), before[s] + more[s])


@pytest.mark.parametrize("one_transaction", [True, False])
async def test_a_crash_between_copy_and_delete_copies_nothing_twice(
    store, core, configure, outbox_of, event_log_of, monkeypatch, one_transaction
):
    await configure("q", shards=2)
    # Jobs go to a shard by their random id: 30 leave shard 0 fewer than the 4 rows
    # copied below about once in 30 million runs (10 did about once in a hundred).
    await _earlier_servers_traffic(store, core, "q", 30)
    before = await _all_outbox(outbox_of, "q")
    assert len(before[0]) > 4
    # A relay copied shard 0's first rows and died before deleting them.
    await store.transact(events.outbox_copy, NS, "q", 0, 4)
    assert len(await event_log_of("q", 0)) == 4 and len(await outbox_of("q", 0)) == len(before[0])

    # A second relay (split copy/delete) dies after its copy of shard 1 committed.
    crashing = RelayService(store, "relay-b", one_transaction=False)
    real_delete = events.outbox_delete_through

    def die(*a, **kw):
        raise RuntimeError("killed between copy and delete")

    monkeypatch.setattr(events, "outbox_delete_through", die)
    with pytest.raises(RuntimeError):
        await crashing.run_once()
    monkeypatch.setattr(events, "outbox_delete_through", real_delete)

    # Readers meanwhile see every event once: the log, then the outbox past its end.
    for s in (0, 1):
        seen = await store.snapshot(events.events_after, NS, "q", s, 0, 1000)
        _assert_log(seen, before[s])
        tail = await store.snapshot(events.events_after, NS, "q", s, 3, 1000)
        _assert_log(tail, before[s][3:])

    # The restarted relay finishes the job: each event in the log exactly once, in order.
    await crashing.on_stop()
    relay = RelayService(store, "relay-c", one_transaction=one_transaction)
    await relay.run_once()
    for s in (0, 1):
        _assert_log(await event_log_of("q", s), before[s])
        assert await outbox_of("q", s) == []
    assert await store.snapshot(events.shard_event_seq, NS, "q", 0) == before[0][-1].seq


async def test_retention_trims_by_time_and_the_admin_trim(store, clock, core, configure, event_log_of):
    await configure("q", shards=2)
    relay = RelayService(store, "relay-a", trim_every_s=3600)
    await _traffic(core, "q", 4)
    await relay.run_once()
    old = [len(await event_log_of("q", s)) for s in (0, 1)]
    clock.advance(6 * DAY)
    await _traffic(core, "q", 4)
    await relay.run_once()  # trim not due yet (hourly)
    assert [len(await event_log_of("q", s)) for s in (0, 1)] > old
    clock.advance(DAY + SEC)  # the first events are past 7 days now
    rep = await relay.run_once()
    assert rep.trimmed == sum(old)
    logs = [await event_log_of("q", s) for s in (0, 1)]
    assert all(e.time_ns >= clock.now_ns() - events.DEFAULT_RETENTION_NS for log in logs for e in log)
    assert sum(map(len, logs)) > 0
    # The admin call trims everything before a given time, in batches.
    total = 0
    while (n := await store.transact(events.event_log_trim, NS, "q", clock.now_ns(), 3)) == 3:
        total += n
    total += n
    assert total == sum(map(len, logs))
    assert [await event_log_of("q", s) for s in (0, 1)] == [[], []]


async def test_two_relays_split_shards_and_a_fenced_relay_writes_nothing(
    store, clock, core, configure, outbox_of, event_log_of
):
    queues = [f"q{i}" for i in range(4)]
    for q in queues:
        await configure(q, shards=2)
    # outbox_every_s=0: each pass looks at the outboxes (idle relays look every 10 s).
    a, b = RelayService(store, "relay-a", outbox_every_s=0), RelayService(store, "relay-b", outbox_every_s=0)
    for r in (a, b, a, b):
        await r.run_once()
    assert a.ownership.held and b.ownership.held
    assert set(a.ownership.held).isdisjoint(b.ownership.held)
    assert len(a.ownership.held) + len(b.ownership.held) == 8
    for q in queues:
        await _earlier_servers_traffic(store, core, q, 3)
    expected = {(q, s): await outbox_of(q, s) for q in queues for s in (0, 1)}
    ra, rb = await a.run_once(), await b.run_once()

    # Each relay copies exactly the outbox rows of the shards it holds (jobs land on
    # shards by hash, so one relay's shards may happen to hold none of them).
    def owed(relay):
        return sum(len(expected[(q, s)]) for _ns, q, s in relay.ownership.held)

    assert (ra.copied, rb.copied) == (owed(a), owed(b))
    assert ra.copied + rb.copied == sum(map(len, expected.values())) > 0
    for (q, s), evs in expected.items():
        _assert_log(await event_log_of(q, s), evs)

    # B's lease on one shard is taken over behind its back: its writes are refused.
    shard = next(iter(b.ownership.held))
    stale = b.ownership.fence(*shard)
    clock.advance(30 * SEC)
    await store.transact(ownership_acquire_or_renew, "relay", "relay-x", *shard, 10 * SEC)
    await _earlier_servers_traffic(store, core, shard[1], 2)
    pending = await outbox_of(shard[1], shard[2])
    with pytest.raises(OwnershipLost):
        await store.transact(run_fenced, stale, events.outbox_relay, *shard, 100)
    assert await outbox_of(shard[1], shard[2]) == pending


async def test_an_obliterated_queues_last_events_are_still_relayed(
    store, core, configure, outbox_of, event_log_of
):
    await configure("gone")
    await _earlier_servers_traffic(store, core, "gone", 2, shards=1)
    tail = await outbox_of("gone")
    await store.transact(admin.queue_obliterate, NS, "gone")
    assert await outbox_of("gone") == tail and tail  # kept: not relayed yet
    assert [e.event for e in await event_log_of("gone")] == ["obliterated"]
    await RelayService(store, "relay-a").run_once()
    assert await outbox_of("gone") == []
    assert [e.seq for e in await event_log_of("gone")] == list(range(1, len(tail) + 2))
    assert (await event_log_of("gone"))[-1].event == "obliterated"


async def test_the_loop_runs_on_wake(store, core, configure, event_log_of):
    import asyncio

    await configure("q")
    relay = RelayService(store, "relay-a", interval=3600)
    relay.start()
    try:
        while relay.passes == 0:
            await asyncio.sleep(0.001)
        await _traffic(core, "q", 1)
        relay.wake()
        while relay.passes < 2:
            await asyncio.sleep(0.001)
        names = [e.event for e in await event_log_of("q")]
        assert names[-2:] == ["completed", "drained"]  # the queue is idle again: BullMQ's drained
    finally:
        await relay.stop()
    assert not relay.ownership.held


def test_fence_is_a_value():
    f = Fence("relay", "a", 3, NS, "q", 1)
    assert f.shard_id == (NS, "q", 1)


async def test_an_idle_relay_backs_off_and_comes_back_with_the_first_rows(store, core):
    relay = RelayService(store, "relay-a", interval=0.1, idle_interval=1.0)
    waits = []
    for _ in range(6):  # nothing to copy: 0.2, 0.4, 0.8, then capped at 1 s
        await relay.run_once()
        waits.append(relay.interval)
    assert waits == [0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    await _earlier_servers_traffic(store, core, "q", 1, shards=1)
    assert (await relay.run_once()).copied > 0
    assert relay.interval == 0.1  # rows to copy: the short interval again


async def test_reads_merge_an_earlier_servers_outbox_with_the_log_by_sequence(store, core, configure):
    await configure("q")
    await _earlier_servers_traffic(store, core, "q", 3, shards=1)  # the outbox: 1..n
    await _traffic(core, "q", 3)  # this server's events, straight into the log: n+1..
    head = await store.snapshot(events.shard_event_seq, NS, "q", 0)
    seen = await store.snapshot(events.events_after, NS, "q", 0, 0, 1000)
    assert [e.seq for e in seen] == list(range(1, head + 1))
    # A limit takes the lowest sequences, wherever they are; a cursor resumes after it.
    first = await store.snapshot(events.events_after, NS, "q", 0, 0, 4)
    rest = await store.snapshot(events.events_after, NS, "q", 0, first[-1].seq, 1000)
    assert [_key(e) for e in first + rest] == [_key(e) for e in seen]


async def test_an_idle_relay_looks_at_the_outboxes_every_ten_seconds(store, core, clock):
    relay = RelayService(store, "relay-a")
    await _earlier_servers_traffic(store, core, "q", 1, shards=1)
    assert (await relay.run_once()).copied > 0  # a first pass looks
    assert (await relay.run_once()).copied == 0  # and so does the one after a copy
    await _earlier_servers_traffic(store, core, "q", 2, shards=1)
    assert (await relay.run_once()).copied == 0  # idle: not looked at yet
    clock.advance(10 * 1_000_000_000)
    assert (await relay.run_once()).copied > 0
