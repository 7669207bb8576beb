"""The event log (spec §6.6): each queue's events, and the reads and trims over it.
Functions over one transaction, like the rest of the state machine.

- Every state change writes its event at `Q ev/<shard><seq>` in its own transaction
  (`QueueTx.emit`); the shard's `ShardMeta.outbox_seq` is the last sequence written. The
  log is the outbox: it lives in the same store, so a copy would buy nothing (decision
  0020).
- A store written by an earlier server may still hold outbox rows `Q o/<shard><seq>`
  that were never copied. The relay (`outbox_relay`, or `outbox_copy` then
  `outbox_delete_through`) copies them, in sequence order, to the log under the **same
  sequence**, then deletes them. A copy is a put of the same key and value, so a relay
  that died between copying and deleting copies again and changes nothing.
- `events_after` reads a shard from a sequence on, from the log and from any such
  outbox rows, merged by sequence, in one snapshot, so a reader never waits for the
  relay and never sees a sequence twice. With `shard_event_seq` read in the snapshot of
  a state read, that is Watch's cursor argument of §6.6.
- Retention is by time: `event_log_trim_shard` / `event_log_trim` delete the events
  older than a cutoff (the relay does it with `DEFAULT_RETENTION_NS`, 7 days; an admin
  call may trim earlier).
- A transaction that wrote a queue's events declares `effects.Changed(ns, queue)`
  (`QueueTx` does), which wakes the queue core's Watch streams once it has committed.
"""

from __future__ import annotations

from loam_common import keys
from loam_common.gen.loam.jobs.v1 import events_pb2
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.store.base import Txn

BATCH = 500
DEFAULT_RETENTION_NS = 7 * 24 * 3600 * 1_000_000_000

JobEvent = events_pb2.JobEvent


# -- the relay's transitions (outbox rows an earlier server left) ----------------------------
def outbox_copy(tx: Txn, ns: str, queue: str, shard: int, limit: int = BATCH) -> int:
    """Copy the first `limit` outbox rows of a shard to the event log (same sequence).
    Returns the highest sequence copied, 0 if the outbox was empty. Idempotent."""
    k = keys.QueueKeys(ns, queue)
    prefix = k.outbox_shard(shard)
    rows = tx.scan(prefix, keys.prefix_end(prefix), limit=limit)
    last = 0
    for key, value in rows:
        last = keys.seq_from_key(key, len(prefix))
        tx.put(k.event_log(shard, last), value)
    return last


def outbox_delete_through(tx: Txn, ns: str, queue: str, shard: int, seq: int) -> int:
    """Delete the outbox rows of a shard up to and including `seq` (already copied).
    Returns how many were deleted."""
    if seq <= 0:
        return 0
    k = keys.QueueKeys(ns, queue)
    prefix = k.outbox_shard(shard)
    rows = tx.scan(prefix, k.outbox(shard, seq + 1) if seq < keys.MAX_U64 else keys.prefix_end(prefix))
    for key, _ in rows:
        tx.delete(key)
    return len(rows)


def outbox_relay(tx: Txn, ns: str, queue: str, shard: int, limit: int = BATCH) -> int:
    """Copy then delete up to `limit` outbox rows in one transaction; returns how many."""
    last = outbox_copy(tx, ns, queue, shard, limit)
    return outbox_delete_through(tx, ns, queue, shard, last)


def outbox_pending(tx: Txn, shards: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    """The shards among `shards` whose outbox holds rows (one short scan each)."""
    out = []
    for ns, queue, shard in shards:
        prefix = keys.QueueKeys(ns, queue).outbox_shard(shard)
        if tx.scan(prefix, keys.prefix_end(prefix), limit=1):
            out.append((ns, queue, shard))
    return out


# -- reads ---------------------------------------------------------------------------------
def shard_event_seq(tx: Txn, ns: str, queue: str, shard: int) -> int:
    """The last event sequence committed in a shard (relayed or not): a Watch cursor
    read in the same snapshot as the state it goes with."""
    raw = tx.get(keys.QueueKeys(ns, queue).shard_meta(shard))
    return pb.ShardMeta.FromString(raw).outbox_seq if raw else 0


def event_shards(tx: Txn, ns: str, queue: str) -> list[int]:
    """The shards of a queue that have (or had) events: those with a shard meta."""
    prefix = keys.QueueKeys(ns, queue).shard_metas()
    return [key[len(prefix)] for key, _ in tx.scan(prefix, keys.prefix_end(prefix))]


def event_log_read(
    tx: Txn, ns: str, queue: str, shard: int, after_seq: int = 0, limit: int = BATCH
) -> list[JobEvent]:
    """Events in a shard's log with a sequence above `after_seq`, in order."""
    k = keys.QueueKeys(ns, queue)
    return _rows_after(tx, k.event_log_shard(shard), after_seq, limit)


def events_after(
    tx: Txn, ns: str, queue: str, shard: int, after_seq: int = 0, limit: int = BATCH
) -> list[JobEvent]:
    """Every event of a shard after `after_seq`, in sequence order, each once: the log
    and any outbox rows not yet relayed (an earlier server's), merged."""
    out = event_log_read(tx, ns, queue, shard, after_seq, limit)
    left = _rows_after(tx, keys.QueueKeys(ns, queue).outbox_shard(shard), after_seq, limit)
    if left:  # rare: only a store an earlier server wrote, until the relay's next pass
        seen = {e.seq for e in out}
        out = sorted([*out, *(e for e in left if e.seq not in seen)], key=lambda e: e.seq)[:limit]
    return out


def _rows_after(tx: Txn, prefix: bytes, after_seq: int, limit: int) -> list[JobEvent]:
    if after_seq >= keys.MAX_U64:
        return []
    start = prefix + keys.U64.pack(after_seq + 1)
    return [JobEvent.FromString(v) for _k, v in tx.scan(start, keys.prefix_end(prefix), limit=limit)]


# -- retention -------------------------------------------------------------------------------
def event_log_trim_shard(tx: Txn, ns: str, queue: str, shard: int, before_ns: int, limit: int = BATCH) -> int:
    """Delete up to `limit` of a shard's oldest events whose time is before `before_ns`;
    stops at the first newer one (a shard's log is in time order). Returns how many."""
    k = keys.QueueKeys(ns, queue)
    prefix = k.event_log_shard(shard)
    n = 0
    for key, value in tx.scan(prefix, keys.prefix_end(prefix), limit=limit):
        if JobEvent.FromString(value).time_ns >= before_ns:
            break
        tx.delete(key)
        n += 1
    return n


def event_log_trim(tx: Txn, ns: str, queue: str, before_ns: int, limit: int = BATCH) -> int:
    """The admin trim: delete up to `limit` events of a queue (all shards) older than
    `before_ns`. Returns how many; call again while it returns `limit`."""
    n = 0
    for shard in event_shards(tx, ns, queue):
        if n >= limit:
            break
        n += event_log_trim_shard(tx, ns, queue, shard, before_ns, limit - n)
    return n
