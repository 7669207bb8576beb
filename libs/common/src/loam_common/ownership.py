"""Fenced ownership of queue shards (spec §6.3: each queue shard has one owner at a
time) for the processes that must not run twice on one shard: the sweeper and the
relay. What this module owns: the lease records, the fence check, the membership
heartbeat, and `ShardOwnership`, which spreads shards over the live members.

- **A lease per (kind, ns, queue, shard)**, `sys/own/<kind>/<ns>/<queue>/<shard>` →
  OwnershipLease(owner, epoch, expires_ns). `ownership_acquire_or_renew` takes a free
  or expired lease with epoch + 1 and renews its own; expiry is judged by the store
  clock (`tx.now_ns()`), never by the caller's.
- **The fence.** The holder passes `Fence(kind, owner, epoch, ns, queue, shard)` into
  each of its write transactions (`run_fenced`), which reads the lease in the same
  transaction and refuses (`OwnershipLost`) unless owner and epoch still match. A
  takeover writes the lease key, so on every backend the takeover and a fenced write
  are serialised: after a takeover commits, the old holder cannot write. As with job
  leases (spec §6.3), expiry alone does not break the fence; a takeover does.
- **Spread.** Each process heartbeats `sys/members/<kind>/<id>` with an expiry. A shard
  belongs to the rendezvous owner of `"<ns>/<queue>/<shard>"` among the live members
  (`loam_common.rendezvous`), so several processes split the shards, a new one takes
  about 1/n of them (the others release theirs), and a dead one's shards go to the
  survivors once its membership and leases expire (at most one TTL).
- A process that restarts under the same id takes its old leases at once, with a new
  epoch (it passes `held_epoch=0`), which fences anything its previous life still had
  in flight.

The namespace-wide sweeps (results, blobs) are owned like a shard `(ns, "", 0)`, the
store-wide one (commit tokens) like `("", "", 0)`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from loam_common import keys, registry, rendezvous
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import sweeps
from loam_common.store.base import Txn
from loam_common.store.runner import Store

ShardId = tuple[str, str, int]  # (ns, queue, shard); queue "" = namespace-wide
DEFAULT_TTL_NS = 10_000_000_000
#: members expired this long ago are deleted by the next heartbeat of their kind
MEMBER_FORGET_NS = 3600 * 1_000_000_000


class OwnershipLost(Exception):
    """The lease this write was fenced with is no longer the holder's: another process
    took the shard over (or it was released). The write was refused; stop working on
    the shard."""

    def __init__(self, fence: Fence, current: pb.OwnershipLease | None) -> None:
        now = "free" if current is None or not current.owner else f"{current.owner!r} epoch {current.epoch}"
        super().__init__(
            f"{fence.kind} {fence.owner!r} lost {fence.ns}/{fence.queue}/{fence.shard} "
            f"(held epoch {fence.epoch}; now {now})"
        )
        self.fence = fence
        self.current = current


@dataclass(frozen=True, slots=True)
class Fence:
    kind: str
    owner: str
    epoch: int
    ns: str
    queue: str
    shard: int

    @property
    def shard_id(self) -> ShardId:
        return (self.ns, self.queue, self.shard)

    def check(self, tx: Txn) -> None:
        ownership_check(tx, self)


# -- leases: transitions over one transaction --------------------------------------------
def ownership_get(tx: Txn, kind: str, ns: str, queue: str, shard: int) -> pb.OwnershipLease | None:
    raw = tx.get(keys.ownership(kind, ns, queue, shard))
    return pb.OwnershipLease.FromString(raw) if raw is not None else None


def ownership_acquire_or_renew(
    tx: Txn,
    kind: str,
    owner: str,
    ns: str,
    queue: str,
    shard: int,
    ttl_ns: int,
    held_epoch: int | None = None,
) -> pb.OwnershipLease | None:
    """Take the lease if it is free, released or expired (epoch + 1), or renew it if it
    is `owner`'s. Returns the lease now held, or None if another owner holds it.

    `held_epoch`: the epoch the caller believes it holds. None trusts any lease under
    `owner`'s name (renew, same epoch); a number renews only that epoch and otherwise
    takes the lease with a new one (0 after a restart: fence the previous life)."""
    if ttl_ns <= 0:
        raise ValueError(f"ttl_ns must be positive (got {ttl_ns})")
    key = keys.ownership(kind, ns, queue, shard)
    now = tx.now_ns()
    raw = tx.get(key)
    rec = pb.OwnershipLease.FromString(raw) if raw is not None else None
    if rec is not None and rec.owner == owner and (held_epoch is None or held_epoch == rec.epoch):
        rec.expires_ns = now + ttl_ns
    elif rec is None or not rec.owner or rec.expires_ns <= now or rec.owner == owner:
        epoch = (rec.epoch if rec is not None else 0) + 1
        rec = pb.OwnershipLease(owner=owner, epoch=epoch, expires_ns=now + ttl_ns, acquired_ns=now)
    else:
        return None
    tx.put(key, rec.SerializeToString())
    return rec


def ownership_release(
    tx: Txn, kind: str, owner: str, ns: str, queue: str, shard: int, epoch: int | None = None
) -> bool:
    """Give the lease up if `owner` (at `epoch`, if given) holds it. The record stays,
    ownerless, so the epoch keeps growing for the next holder."""
    key = keys.ownership(kind, ns, queue, shard)
    raw = tx.get(key)
    if raw is None:
        return False
    rec = pb.OwnershipLease.FromString(raw)
    if rec.owner != owner or (epoch is not None and rec.epoch != epoch):
        return False
    tx.put(key, pb.OwnershipLease(owner="", epoch=rec.epoch, expires_ns=0).SerializeToString())
    return True


def ownership_check(tx: Txn, fence: Fence) -> None:
    """Raise OwnershipLost unless `fence` is still the lease's holder and epoch. Locks
    the lease key, so a concurrent takeover and this transaction cannot both commit."""
    key = keys.ownership(fence.kind, fence.ns, fence.queue, fence.shard)
    tx.lock_for_update([key])
    raw = tx.get(key)
    rec = pb.OwnershipLease.FromString(raw) if raw is not None else None
    if rec is None or rec.owner != fence.owner or rec.epoch != fence.epoch:
        raise OwnershipLost(fence, rec)


def run_fenced(tx: Txn, fence: Fence, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(tx, *args)` if `fence` still holds, in the same transaction; else OwnershipLost
    and nothing is written. Use as `store.transact(run_fenced, fence, fn, *args)`."""
    ownership_check(tx, fence)
    return fn(tx, *args)


def ownership_list(tx: Txn, kind: str) -> dict[ShardId, pb.OwnershipLease]:
    """Every lease record of a kind (for admin views and tests)."""
    prefix = keys.ownership_all(kind)
    out: dict[ShardId, pb.OwnershipLease] = {}
    for key, value in tx.scan(prefix, keys.prefix_end(prefix)):
        ns, queue, rest = key[len(prefix) :].split(b"/", 2)
        out[(ns.decode(), queue.decode(), rest[0])] = pb.OwnershipLease.FromString(value)
    return out


# -- membership ----------------------------------------------------------------------------
def member_heartbeat(tx: Txn, kind: str, member_id: str, ttl_ns: int) -> pb.ServiceMember:
    """Say `member_id` is alive for `ttl_ns` more; forget members long dead."""
    now = tx.now_ns()
    key = keys.member(kind, member_id)
    raw = tx.get(key)
    rec = pb.ServiceMember.FromString(raw) if raw is not None else pb.ServiceMember(id=member_id)
    if not rec.started_ns or rec.expires_ns <= now:
        rec.started_ns = now
    rec.expires_ns = now + ttl_ns
    tx.put(key, rec.SerializeToString())
    prefix = keys.members_all(kind)
    for k, v in tx.scan(prefix, keys.prefix_end(prefix), limit=1000):
        if k != key and pb.ServiceMember.FromString(v).expires_ns < now - MEMBER_FORGET_NS:
            tx.delete(k)
    return rec


def member_leave(tx: Txn, kind: str, member_id: str) -> None:
    tx.delete(keys.member(kind, member_id))


def members_live(tx: Txn, kind: str) -> list[str]:
    """The ids of the members of `kind` whose heartbeat has not expired, sorted."""
    now = tx.now_ns()
    prefix = keys.members_all(kind)
    out = []
    for key, value in tx.scan(prefix, keys.prefix_end(prefix)):
        if pb.ServiceMember.FromString(value).expires_ns > now:
            out.append(key[len(prefix) :].decode())
    return out


# -- what there is to own ------------------------------------------------------------------
def list_shards(tx: Txn, *, namespace_wide: bool = False, orphans: bool = False) -> list[ShardId]:
    """Every queue shard in the store, in key order. `namespace_wide` adds `(ns, "", 0)`
    per namespace and the store-wide `("", "", 0)`; `orphans` adds the shards that have a
    shard meta but are not in the queue's config (an obliterated queue's, or shards
    dropped by a shard-count change), whose last outbox rows the relay must still move."""
    out: list[ShardId] = [("", "", 0)] if namespace_wide else []
    for ns in sweeps.namespace_list(tx):
        if namespace_wide:
            out.append((ns, "", 0))
        for queue in sweeps.queue_list_registered(tx, ns):
            n = sweeps.queue_shards(tx, ns, queue)
            out.extend((ns, queue, s) for s in range(n))
            if orphans:
                prefix = keys.QueueKeys(ns, queue).shard_metas()
                extra = (k[len(prefix)] for k, _ in tx.scan(prefix, keys.prefix_end(prefix)))
                out.extend((ns, queue, s) for s in extra if s >= n)
    return out


class ShardLister:
    """`list_shards` for a service's pass, listed again only when the registry version
    (registry.py) moved: an unchanged store costs one read, and the same list object
    comes back (so `ShardOwnership.refresh` sees at once that nothing changed)."""

    def __init__(self, store: Store, *, namespace_wide: bool = False, orphans: bool = False) -> None:
        self.store = store
        self.options = {"namespace_wide": namespace_wide, "orphans": orphans}
        self._version: int | None = None
        self._shards: list[ShardId] = []

    async def shards(self) -> list[ShardId]:
        version, listed = await self.store.snapshot(_list_if_moved, self._version, self.options)
        if listed is not None:
            self._version, self._shards = version, listed
        return self._shards


def _list_if_moved(tx: Txn, seen: int | None, options: dict) -> tuple[int, list[ShardId] | None]:
    version = registry.registry_version(tx)
    if version == seen:
        return version, None
    return version, list_shards(tx, **options)


# -- spreading shards over live members ------------------------------------------------------
def _observe(tx: Txn, kind: str, shards: list[ShardId]) -> tuple[list[str], dict[ShardId, pb.OwnershipLease]]:
    members = members_live(tx, kind)
    by_key = {keys.ownership(kind, *s): s for s in shards}
    found = tx.batch_get(by_key)
    return members, {by_key[k]: pb.OwnershipLease.FromString(v) for k, v in found.items()}


def _claim(
    tx: Txn,
    kind: str,
    owner: str,
    ttl_ns: int,
    take: list[tuple[ShardId, int]],
    give: list[tuple[ShardId, int]],
) -> dict[ShardId, pb.OwnershipLease | None]:
    out: dict[ShardId, pb.OwnershipLease | None] = {}
    for shard_id, held in take:
        out[shard_id] = ownership_acquire_or_renew(tx, kind, owner, *shard_id, ttl_ns, held_epoch=held)
    for shard_id, epoch in give:
        ownership_release(tx, kind, owner, *shard_id, epoch=epoch)
        out[shard_id] = None
    return out


def _renew(
    tx: Txn, kind: str, owner: str, ttl_ns: int, held: list[tuple[ShardId, bytes, int]]
) -> dict[ShardId, pb.OwnershipLease | None]:
    """Renew the leases `owner` holds (shard, lease key, epoch), in one transaction: the
    lease now held per shard (a new epoch if it had expired and was free), or None where
    another owner holds it. `ownership_acquire_or_renew`'s rules, with the common case
    (still ours at our epoch) inline: at 10,000 shards a renewal is 10,000 of these."""
    expires = tx.now_ns() + ttl_ns
    out: dict[ShardId, pb.OwnershipLease | None] = {}
    for shard_id, key, epoch in held:
        raw = tx.get(key)
        rec = pb.OwnershipLease.FromString(raw) if raw is not None else None
        if rec is not None and rec.owner == owner and rec.epoch == epoch:
            rec.expires_ns = expires
            tx.put(key, rec.SerializeToString())
            out[shard_id] = rec
        else:
            out[shard_id] = ownership_acquire_or_renew(tx, kind, owner, *shard_id, ttl_ns, held_epoch=epoch)
    return out


def _release_all(tx: Txn, kind: str, owner: str, held: list[tuple[ShardId, int]]) -> None:
    for shard_id, epoch in held:
        ownership_release(tx, kind, owner, *shard_id, epoch=epoch)
    member_leave(tx, kind, owner)


class ShardOwnership:
    """The shards one process owns for one kind. Call `refresh(shards)` at the start of
    each pass: it heartbeats, works out which shards are this process's by rendezvous
    hashing over the live members, takes or renews those leases (renewing once a third
    of the TTL has passed, so a steady pass writes nothing) and releases the others.
    Then `fence(shard)` gives the Fence for each owned shard's writes."""

    def __init__(self, store: Store, kind: str, owner: str, ttl_ns: int = DEFAULT_TTL_NS) -> None:
        if not owner or "/" in owner:
            raise ValueError(f"owner id {owner!r} must be non-empty and contain no '/'")
        self.store = store
        self.kind = kind
        self.owner = owner
        self.ttl_ns = ttl_ns
        self.held: dict[ShardId, pb.OwnershipLease] = {}
        self._member_expires_ns = 0
        # The last refresh that left this process holding every shard it should: its
        # shard list (the object), the live members, and when its first lease renewal is
        # due. Until something of that changes, a refresh reads the members and stops.
        self._steady: tuple[list[ShardId], list[str], int] | None = None
        self._fences: dict[ShardId, Fence] = {}  # what the last refresh returned
        self._lease_keys: dict[ShardId, bytes] = {}  # built once, for the renewals

    def _due(self, expires_ns: int, now: int) -> bool:
        return expires_ns - now < self.ttl_ns * 2 // 3

    async def refresh(self, shards: Iterable[ShardId]) -> dict[ShardId, Fence]:
        given = shards
        now = self.store.clock.now_ns()
        if self._due(self._member_expires_ns, now):
            rec = await self.store.transact(member_heartbeat, self.kind, self.owner, self.ttl_ns)
            self._member_expires_ns = rec.expires_ns
        steady = self._steady
        if steady is not None and steady[0] is given:
            members = await self.store.snapshot(members_live, self.kind)
            if members == steady[1]:
                if now < steady[2]:
                    return self._fences
                # Same shards, same members: the same shards are this process's, so the
                # renewal is of the leases held, without observing and placing every
                # shard again (at 10,000 queues that was most of an idle process's CPU).
                return await self._renew_held(given, members, now)
        shards = list(dict.fromkeys(given))
        members, records = await self.store.snapshot(_observe, self.kind, shards)
        observed_members = list(members)
        if self.owner not in members:
            members.append(self.owner)
        now = self.store.clock.now_ns()
        take: list[tuple[ShardId, int]] = []
        give: list[tuple[ShardId, int]] = []
        for shard_id in shards:
            rec = records.get(shard_id)
            mine = self.held.get(shard_id)
            if rendezvous.owner(rendezvous.shard_key(*shard_id), members) == self.owner:
                if (
                    rec is not None
                    and mine is not None
                    and rec.owner == self.owner
                    and rec.epoch == mine.epoch
                ):
                    if self._due(rec.expires_ns, now):
                        take.append((shard_id, mine.epoch))  # renew
                    else:
                        self.held[shard_id] = rec
                elif rec is None or not rec.owner or rec.expires_ns <= now or rec.owner == self.owner:
                    take.append((shard_id, 0))  # acquire with a new epoch
                else:
                    self.held.pop(shard_id, None)  # another live owner still holds it
            elif mine is not None or (rec is not None and rec.owner == self.owner):
                give.append((shard_id, (rec or mine).epoch))  # type: ignore[union-attr]
        wanted = set(shards)
        mine_all = True
        for shard_id in shards:
            if rendezvous.owner(rendezvous.shard_key(*shard_id), members) == self.owner:
                if shard_id not in self.held and not any(t[0] == shard_id for t in take):
                    mine_all = False  # another live owner still holds it: look again next pass
                    break
        for shard_id, mine in list(self.held.items()):
            if shard_id not in wanted:  # the queue is gone: let its lease go too
                give.append((shard_id, mine.epoch))
        if take or give:
            result = await self.store.transact(_claim, self.kind, self.owner, self.ttl_ns, take, give)
            for shard_id, rec in result.items():
                if rec is None:
                    self.held.pop(shard_id, None)
                else:
                    self.held[shard_id] = rec
        if (
            mine_all
            and all(rec is not None for rec in self.held.values())
            and not isinstance(given, Iterator)
        ):
            renew_at = min(
                (rec.expires_ns - self.ttl_ns * 2 // 3 for rec in self.held.values()),
                default=now + self.ttl_ns,
            )
            self._steady = (given, observed_members, renew_at)  # type: ignore[assignment]
        else:
            self._steady = None
        self._fences = {s: self._fence(s, rec) for s, rec in self.held.items()}
        return self._fences

    async def _renew_held(self, given: list[ShardId], members: list[str], now: int) -> dict[ShardId, Fence]:
        lease_keys = self._lease_keys
        if len(lease_keys) > 2 * len(self.held) + 1000:  # shards long gone
            lease_keys.clear()
        held = []
        for shard_id, rec in self.held.items():
            key = lease_keys.get(shard_id)
            if key is None:
                key = lease_keys[shard_id] = keys.ownership(self.kind, *shard_id)
            held.append((shard_id, key, rec.epoch))
        result = await self.store.transact(_renew, self.kind, self.owner, self.ttl_ns, held)
        changed = False
        for shard_id, rec in result.items():
            if rec is None:  # another owner took it meanwhile: look again next pass
                self.held.pop(shard_id, None)
                changed = True
            else:
                changed = changed or rec.epoch != self.held[shard_id].epoch
                self.held[shard_id] = rec
        if changed:
            self._steady = None
            self._fences = {s: self._fence(s, rec) for s, rec in self.held.items()}
        else:
            renew_at = min((rec.expires_ns for rec in self.held.values()), default=now + self.ttl_ns)
            self._steady = (given, members, renew_at - self.ttl_ns * 2 // 3)
        return self._fences

    def _fence(self, shard_id: ShardId, rec: pb.OwnershipLease) -> Fence:
        return Fence(self.kind, self.owner, rec.epoch, *shard_id)

    def owns(self, ns: str, queue: str, shard: int) -> bool:
        return (ns, queue, shard) in self.held

    def fence(self, ns: str, queue: str, shard: int) -> Fence | None:
        rec = self.held.get((ns, queue, shard))
        return self._fence((ns, queue, shard), rec) if rec is not None else None

    def lost(self, shard_id: ShardId) -> None:
        """Forget a shard whose fenced write was refused."""
        self.held.pop(shard_id, None)
        self._steady = None

    async def release_all(self) -> None:
        """Give every lease up and leave the membership (graceful shutdown), so the
        others take the shards over at once instead of after the TTL."""
        held = [(s, rec.epoch) for s, rec in self.held.items()]
        self.held.clear()
        self._steady = None
        self._member_expires_ns = 0
        await self.store.transact(_release_all, self.kind, self.owner, held)
