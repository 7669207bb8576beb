"""The sweeper's store-wide due index and the listings' registry version: between its
full passes (`FULL_PASS_NS`) a sweeper pass reads only the queue shards whose place in the
due index has come, yet still reclaims expired leases, promotes due delayed jobs and
applies retention ages on time; an idle store costs a pass no per-queue read; the shard
listings of the sweeper and the relay are read again only when queues appear or go."""

from __future__ import annotations

from loam_common import keys
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S
from loam_common.jobs import sweeps
from loam_common.jobs.complete import Ok
from loam_common.ownership import ShardLister, ShardOwnership
from loam_common.sweeper import FULL_PASS_NS, Sweeper

NS = "acme"
SEC = 1_000_000_000


def counting(monkeypatch, name: str) -> list[tuple]:
    """Record the arguments of every call of `sweeps.<name>`."""
    calls: list[tuple] = []
    real = getattr(sweeps, name)

    def counted(tx, *args):
        calls.append(args)
        return real(tx, *args)

    monkeypatch.setattr(sweeps, name, counted)
    return calls


async def test_a_pass_reads_only_the_queues_whose_time_came(
    core, store, clock, configure, jobs_of, monkeypatch
):
    for i in range(30):
        await configure(f"idle{i}")
    await configure("q", visibility_ns=10 * SEC)
    await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"))
    delayed = await core.jobs.enqueue(
        NS, "q", pb.TaskSpec(name="t"), pb.EnqueueOpts(not_before=pb.Delay(delay_ns=5 * SEC))
    )
    (leased,) = await core.jobs.lease(NS, ["q"], "w", 1)
    sweeper = Sweeper(store)
    await sweeper.run_once()  # the first pass is a full one: every queue gets its place
    looked_at = counting(monkeypatch, "due")
    rep = await sweeper.run_once()
    assert looked_at == [] and rep.promoted == rep.stalled == 0  # nothing due: no queue read

    clock.advance(5 * SEC)  # the delayed job is due; the lease is not yet
    rep = await sweeper.run_once()
    assert looked_at == [(NS, "q")] and rep.promoted == 1
    assert (await jobs_of("q"))[delayed.job_id].state == S.WAITING

    clock.advance(5 * SEC + 1)  # past the lease's deadline, still well before a full pass
    assert 10 * SEC < FULL_PASS_NS
    rep = await sweeper.run_once()
    assert looked_at == [(NS, "q"), (NS, "q")] and rep.stalled == 1
    assert (await jobs_of("q"))[leased.id].state == S.WAITING


async def test_a_lease_taken_after_the_place_was_set_moves_it_earlier(core, store, clock, configure):
    await configure("q", visibility_ns=60 * SEC)
    for _ in range(2):
        await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"))
    await core.jobs.lease(NS, ["q"], "w", 1, visibility_ns=50 * SEC)
    sweeper = Sweeper(store)
    await sweeper.run_once()
    (short,) = await core.jobs.lease(NS, ["q"], "w", 1, visibility_ns=5 * SEC)  # due before the first
    place = await store.snapshot(lambda tx: tx.get(keys.QueueKeys(NS, "q").next_due(0)))
    assert keys.U64.unpack(place)[0] == short.deadline_ns
    clock.advance(5 * SEC + 1)
    assert (await sweeper.run_once()).stalled == 1


async def test_retention_by_age_is_applied_between_full_passes(core, store, clock, configure, jobs_of):
    await configure("q", retention=pb.Retention(completed_age_ns=10 * SEC))
    sweeper = Sweeper(store)
    await sweeper.run_once()
    await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"))
    (job,) = await core.jobs.lease(NS, ["q"], "w", 1)
    await core.jobs.complete(NS, "q", job.id, job.epoch, Ok())
    clock.advance(11 * SEC)
    assert (await sweeper.run_once()).retained == 1
    assert await jobs_of("q") == {}


async def test_obliterated_queues_leave_the_due_index(core, store, configure):
    from loam_common.jobs import admin

    await configure("q")
    await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"))
    await core.jobs.lease(NS, ["q"], "w", 1)
    await store.transact(admin.queue_obliterate, NS, "q", True, 0)
    rows = await store.snapshot(lambda tx: tx.scan(keys.DUE_INDEX, keys.prefix_end(keys.DUE_INDEX)))
    assert rows == []


async def test_listings_are_read_again_only_when_queues_change(store, configure, monkeypatch):
    await configure("a")
    lister = ShardLister(store, namespace_wide=True)
    first = await lister.shards()
    assert (NS, "a", 0) in first
    assert await lister.shards() is first  # nothing changed: the same list, not listed again
    await configure("b")
    second = await lister.shards()
    assert second is not first and (NS, "b", 0) in second
    await configure("b", shards=2)  # a shard more
    assert (NS, "b", 1) in await lister.shards()

    ownership = ShardOwnership(store, "sweeper", "s1")
    shards = await lister.shards()
    await ownership.refresh(shards)
    assert set(ownership.held) == set(shards)
    observed = counting_observe(monkeypatch)
    fences = await ownership.refresh(shards)
    assert observed == [] and set(fences) == set(shards)  # steady: no lease read, no write
    ownership.lost((NS, "a", 0))
    await ownership.refresh(shards)
    assert len(observed) == 1 and (NS, "a", 0) in ownership.held  # taken back at once


def counting_observe(monkeypatch) -> list[tuple]:
    from loam_common import ownership

    calls: list[tuple] = []
    real = ownership._observe

    def counted(tx, *args):
        calls.append(args)
        return real(tx, *args)

    monkeypatch.setattr(ownership, "_observe", counted)
    return calls


async def test_a_steady_owner_renews_its_leases_without_placing_every_shard_again(
    store, clock, configure, monkeypatch
):
    from loam_common import ownership as own

    for q in ("a", "b", "c"):
        await configure(q)
    shards = await ShardLister(store).shards()
    ownership = ShardOwnership(store, "sweeper", "s1", ttl_ns=9 * SEC)
    fences = await ownership.refresh(shards)
    observed = counting_observe(monkeypatch)
    clock.advance(4 * SEC)  # past a third of the TTL: the leases are due for renewal
    assert await ownership.refresh(shards) == fences  # same epochs, same fences
    assert observed == []  # no shard observed or placed again
    leases = await store.snapshot(own.ownership_list, "sweeper")
    assert {leases[s].expires_ns for s in shards} == {clock.now_ns() + 9 * SEC}
    assert await ownership.refresh(shards) is fences  # renewed: nothing to do until due again

    # A lease another owner took meanwhile (its own expired first) is given up.
    clock.advance(10 * SEC)
    await store.transact(own.ownership_acquire_or_renew, "sweeper", "s2", NS, "a", 0, 9 * SEC)
    fences = await ownership.refresh(shards)
    assert (NS, "a", 0) not in fences and (NS, "b", 0) in fences
    leases = await store.snapshot(own.ownership_list, "sweeper")
    assert leases[(NS, "a", 0)].owner == "s2" and leases[(NS, "b", 0)].owner == "s1"
