"""Fenced shard ownership (loam_common.ownership) and the sweeper service on it: the
lease rules, several sweepers splitting the shards, a dead sweeper's shards taken over
once its leases expire, and a sweeper whose lease was taken over unable to write.
All on a ManualClock; no sleeps."""

from __future__ import annotations

import collections

import pytest

from loam_common import rendezvous
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S
from loam_common.jobs import sweeps
from loam_common.ownership import (
    DEFAULT_TTL_NS,
    Fence,
    OwnershipLost,
    list_shards,
    members_live,
    ownership_acquire_or_renew,
    ownership_get,
    ownership_list,
    ownership_release,
    run_fenced,
)
from loam_common.sweeper import Sweeper
from loam_sweeper import SweeperService

NS = "acme"
SEC = 1_000_000_000

TTL = DEFAULT_TTL_NS
KIND = "sweeper"


# -- rendezvous ----------------------------------------------------------------------------
def test_rendezvous_is_stable_spread_and_moves_little():
    nodes = [f"n{i}" for i in range(4)]
    keys_ = [rendezvous.shard_key("ns", f"q{i}", i % 3) for i in range(2000)]
    owners = {k: rendezvous.owner(k, nodes) for k in keys_}
    assert owners == {k: rendezvous.owner(k, list(reversed(nodes))) for k in keys_}  # order-free
    spread = collections.Counter(owners.values())
    assert all(350 < n < 650 for n in spread.values()), spread
    # Removing a node moves only that node's keys; the others stay put.
    fewer = nodes[:3]
    for k, o in owners.items():
        if o != "n3":
            assert rendezvous.owner(k, fewer) == o
    assert rendezvous.ranked("k", nodes)[0] == rendezvous.owner("k", nodes)
    with pytest.raises(ValueError):
        rendezvous.owner("k", [])


# -- the lease record ----------------------------------------------------------------------
async def test_acquire_renew_release_and_expiry(store, clock):
    def acquire(tx, owner, held=None):
        return ownership_acquire_or_renew(tx, KIND, owner, NS, "q", 0, TTL, held_epoch=held)

    a = await store.transact(acquire, "a")
    assert (a.owner, a.epoch, a.expires_ns) == ("a", 1, clock.now_ns() + TTL)
    assert await store.transact(acquire, "b") is None  # held and live
    clock.advance(TTL // 2)
    renewed = await store.transact(acquire, "a", 1)
    assert (renewed.epoch, renewed.expires_ns) == (1, clock.now_ns() + TTL)  # same epoch, later expiry
    clock.advance(TTL)  # expired: anyone may take it, with the next epoch
    b = await store.transact(acquire, "b")
    assert (b.owner, b.epoch) == ("b", 2)
    # Releasing keeps the epoch, so the next holder's is still higher.
    assert not await store.transact(ownership_release, KIND, "a", NS, "q", 0)
    assert await store.transact(ownership_release, KIND, "b", NS, "q", 0, 2)
    rec = await store.snapshot(ownership_get, KIND, NS, "q", 0)
    assert (rec.owner, rec.epoch) == ("", 2)
    c = await store.transact(acquire, "c")
    assert (c.owner, c.epoch) == ("c", 3)
    # A restart under the same id (held epoch 0) takes its lease with a new epoch.
    again = await store.transact(acquire, "c", 0)
    assert (again.owner, again.epoch) == ("c", 4)


async def test_a_fenced_write_is_refused_after_a_takeover(store, clock, core, configure):
    await configure("q", visibility_ns=5 * SEC)
    await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"))
    (job,) = await core.jobs.lease(NS, ["q"], "w1")
    old = await store.transact(ownership_acquire_or_renew, KIND, "a", NS, "q", 0, TTL)
    fence_a = Fence(KIND, "a", old.epoch, NS, "q", 0)
    clock.advance(TTL + SEC)  # a's lease and the job's lease both ran out
    new = await store.transact(ownership_acquire_or_renew, KIND, "b", NS, "q", 0, TTL)
    assert new.epoch == old.epoch + 1

    with pytest.raises(OwnershipLost, match="lost acme/q/0"):
        await store.transact(run_fenced, fence_a, sweeps.sweep_stalled, NS, "q", 0)
    assert (await core.store.snapshot(_job, "q", job.id)).state == S.ACTIVE  # nothing written

    # Through the Sweeper: the stale fence makes the shard "lost" and sweeps nothing.
    stale = Sweeper(store, owns=lambda ns, q, s: q == "q", fence=lambda ns, q, s: fence_a)
    rep = await stale.run_once()
    assert rep.stalled == 0 and (NS, "q", 0) in rep.lost
    assert (await store.snapshot(_job, "q", job.id)).state == S.ACTIVE

    fence_b = Fence(KIND, "b", new.epoch, NS, "q", 0)
    assert await store.transact(run_fenced, fence_b, sweeps.sweep_stalled, NS, "q", 0) == 1
    assert (await store.snapshot(_job, "q", job.id)).state == S.WAITING


def _job(tx, queue, job_id):
    from loam_common import keys

    return pb.Job.FromString(tx.get(keys.QueueKeys(NS, queue).job(job_id)))


# -- several sweepers ----------------------------------------------------------------------
QUEUES = [f"q{i}" for i in range(6)]


async def _queues_with_stalled_jobs(core, configure, clock) -> list[str]:
    """Six queues of two shards, two active jobs per shard, then their leases expire."""
    ids = []
    for q in QUEUES:
        await configure(q, shards=2, visibility_ns=5 * SEC, max_stalled=5)
        for i in range(8):
            await core.jobs.enqueue(NS, q, pb.TaskSpec(name="t"), pb.EnqueueOpts(job_key=f"{q}-{i}"))
        ids += [j.id for j in await core.jobs.lease(NS, [q], "w", max_jobs=8)]
    clock.advance(6 * SEC)
    return ids


def _owners(tx) -> dict:
    return {s: rec.owner for s, rec in ownership_list(tx, KIND).items() if rec.owner}


async def test_two_sweepers_split_the_shards_and_sweep_each_once(store, clock, core, configure):
    ids = await _queues_with_stalled_jobs(core, configure, clock)
    a = SweeperService(store, None, "sweeper-a")
    b = SweeperService(store, None, "sweeper-b")
    # A joins first and, alone, takes everything (and sweeps everything).
    rep = await a.run_once()
    assert rep.stalled == len(ids)
    shards = await store.snapshot(lambda tx: list_shards(tx, namespace_wide=True))
    assert set((await store.snapshot(_owners)).values()) == {"sweeper-a"}
    assert set(await store.snapshot(_owners)) == set(shards)
    # B joins: it waits for A to let go of its share, then takes it.
    await b.run_once()
    assert set((await store.snapshot(_owners)).values()) == {"sweeper-a"}
    await a.run_once()  # sees B alive: releases B's rendezvous share
    await b.run_once()  # takes it
    owners = await store.snapshot(_owners)
    assert set(owners) == set(shards)
    members = ["sweeper-a", "sweeper-b"]
    assert await store.snapshot(members_live, KIND) == members
    for shard_id, who in owners.items():
        assert who == rendezvous.owner(rendezvous.shard_key(*shard_id), members)
    assert set(owners.values()) == set(members)
    assert set(a.ownership.held).isdisjoint(b.ownership.held)
    assert set(a.ownership.held) | set(b.ownership.held) == set(shards)

    # Every job stalls again; each is reclaimed exactly once, by its shard's owner.
    for q in QUEUES:
        await core.jobs.lease(NS, [q], "w", max_jobs=8)
    clock.advance(6 * SEC)
    rep_a, rep_b = await a.run_once(), await b.run_once()
    assert rep_a.stalled > 0 and rep_b.stalled > 0
    assert rep_a.stalled + rep_b.stalled == len(ids)
    stalled = collections.Counter()
    for q in QUEUES:
        for j in (await store.snapshot(_jobs, q)).values():
            stalled[j.stalled] += 1
    assert stalled == {2: len(ids)}  # two sweeps, two reclaims each: never twice in one
    assert rep_a.woke and rep_b.woke  # each made jobs leasable in the queues it reclaimed


def _jobs(tx, queue):
    from loam_common import keys

    k = keys.QueueKeys(NS, queue)
    return {
        pb.Job.FromString(v).id: pb.Job.FromString(v)
        for _k, v in tx.scan(k.jobs(), keys.prefix_end(k.jobs()))
    }


async def test_a_dead_sweepers_shards_are_taken_over_after_expiry(store, clock, core, configure):
    await _queues_with_stalled_jobs(core, configure, clock)
    a = SweeperService(store, None, "sweeper-a")
    b = SweeperService(store, None, "sweeper-b")
    for s in (a, b, a, b):
        await s.run_once()
    b_shards = set(b.ownership.held)
    assert b_shards and set(a.ownership.held).isdisjoint(b_shards)
    b_fences = {s: b.ownership.fence(*s) for s in b_shards}

    # B dies (no more passes). Within the TTL, A leaves B's shards alone.
    clock.advance(TTL // 2)
    await a.run_once()
    assert set(a.ownership.held).isdisjoint(b_shards)
    # Once B's membership and leases expire, A takes every shard over, with new epochs.
    clock.advance(TTL)
    await a.run_once()
    shards = await store.snapshot(lambda tx: list_shards(tx, namespace_wide=True))
    assert set(a.ownership.held) == set(shards)
    assert await store.snapshot(members_live, KIND) == ["sweeper-a"]
    for s, fence in b_fences.items():
        assert a.ownership.held[s].epoch == fence.epoch + 1

    # B comes back from a long pause with its old fences: every write is refused...
    for s, fence in b_fences.items():
        if s[1]:
            with pytest.raises(OwnershipLost):
                await store.transact(run_fenced, fence, sweeps.sweep_delayed, *s)
    # ...and its next pass sees A holding them, so it stops claiming them until A lets go.
    rep = await b.run_once()
    assert rep.stalled == 0
    assert set(b.ownership.held).isdisjoint(a.ownership.held)
    await a.run_once()
    await b.run_once()
    assert set(a.ownership.held) | set(b.ownership.held) == set(shards)
    assert set(a.ownership.held).isdisjoint(b.ownership.held) and b.ownership.held


async def test_graceful_stop_releases_at_once_and_restart_fences_the_old_life(store, clock, configure):
    for q in QUEUES[:3]:
        await configure(q)
    a = SweeperService(store, None, "sweeper-a", interval=60)
    b = SweeperService(store, None, "sweeper-b")
    a.start()
    while a.passes == 0:
        await _tick()
    old = {s: rec.epoch for s, rec in a.ownership.held.items()}
    await a.stop()  # releases every lease and leaves
    assert await store.snapshot(members_live, KIND) == []
    assert not await store.snapshot(_owners)
    await b.run_once()  # no TTL to wait for
    assert set(b.ownership.held) == set(old)
    assert all(b.ownership.held[s].epoch == e + 1 for s, e in old.items())

    # A sweeper killed without stopping and restarted under the same id takes its
    # leases back at once, with new epochs that fence its previous life.
    c1 = SweeperService(store, None, "sweeper-c")
    await c1.run_once()
    await b.run_once()
    await c1.run_once()
    mine = dict(c1.ownership.held)
    assert mine
    c2 = SweeperService(store, None, "sweeper-c")  # same id, fresh process
    await c2.run_once()
    assert set(c2.ownership.held) == set(mine)
    for s, rec in mine.items():
        assert c2.ownership.held[s].epoch == rec.epoch + 1
        with pytest.raises(OwnershipLost):
            await store.transact(run_fenced, c1.ownership.fence(*s), lambda tx: None)


async def _tick():
    import asyncio

    await asyncio.sleep(0.001)


async def test_renewal_writes_only_once_a_third_of_the_ttl_has_passed(store, clock, configure):
    await configure("q")
    a = SweeperService(store, None, "sweeper-a")
    await a.run_once()
    first = dict(a.ownership.held)
    clock.advance(TTL // 10)
    await a.run_once()
    assert {s: r.expires_ns for s, r in a.ownership.held.items()} == {
        s: r.expires_ns for s, r in first.items()
    }
    clock.advance(TTL // 3)
    await a.run_once()
    for s, r in a.ownership.held.items():
        assert r.epoch == first[s].epoch and r.expires_ns == clock.now_ns() + TTL
