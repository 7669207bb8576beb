"""The result store (spec §7.1.4): Celery's key-value result backend — get, mget, set,
delete, expire and incr — with a TTL per key, one transaction per call.

`result_incr` is the native chord counter: the counter is the set of members that
counted (`resm/` keys), so a redelivered header task adds nothing and exactly one call
sees the size reach the chord size. Its value reads back as the count in ASCII, as a
Redis counter would.

Expiry: a record past its `expires_ns` reads as absent at once; `sweep_results` deletes
it later through the `rexp/` index, which holds one entry per record with a TTL at its
current expiry time (moved whenever the TTL changes). A TTL of 0 or None means the
record never expires.
"""

from __future__ import annotations

from loam_common import keys, registry, validate
from loam_common.effects import ResultChanged
from loam_common.errors import InvalidArgument
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.store.base import Txn

MAX_KEY_BYTES = 1024
MAX_MGET = 1000
MAX_SET_MANY = 1000
SWEEP_BATCH = 500


def _check_key(key: str, field: str = "key") -> str:
    if not isinstance(key, str):
        raise InvalidArgument(field, "must be a string")
    return validate.text(field, key, MAX_KEY_BYTES, allow_empty=False)


def _check_ttl(ttl_ns: int | None, field: str = "ttl_ns") -> int:
    return 0 if ttl_ns is None else validate.duration_ns(field, ttl_ns)


def _live(tx: Txn, ns: str, key: str) -> pb.ResultRecord | None:
    raw = tx.get(keys.result(ns, key))
    return _decode_live(raw, tx.now_ns())


def _decode_live(raw: bytes | None, now: int) -> pb.ResultRecord | None:
    if raw is None:
        return None
    rec = pb.ResultRecord.FromString(raw)
    return None if rec.expires_ns and rec.expires_ns <= now else rec


def _purge(tx: Txn, ns: str, key: str, rec: pb.ResultRecord | None) -> None:
    """Delete a record with its expiry entry and its members."""
    tx.delete(keys.result(ns, key))
    if rec is not None and rec.expires_ns:
        tx.delete(keys.result_expiry(ns, rec.expires_ns, key))
    prefix = keys.result_members(ns, key)
    for member_key, _ in tx.scan(prefix, keys.prefix_end(prefix)):
        tx.delete(member_key)


def _current(tx: Txn, ns: str, key: str) -> pb.ResultRecord | None:
    """The live record; an expired one the sweep has not reached yet is purged first,
    so a write over it starts clean (no stale members)."""
    raw = tx.get(keys.result(ns, key))
    rec = _decode_live(raw, tx.now_ns())
    if raw is not None and rec is None:
        _purge(tx, ns, key, pb.ResultRecord.FromString(raw))
    return rec


def _write(tx: Txn, ns: str, key: str, rec: pb.ResultRecord, old_expires_ns: int, ttl_ns: int | None) -> None:
    """Store `rec`; with `ttl_ns` not None its expiry becomes now + ttl (0 = never),
    and the expiry index entry follows it."""
    if ttl_ns is not None:
        rec.expires_ns = tx.now_ns() + ttl_ns if ttl_ns else 0
    rec.version = max(rec.version + 1, tx.now_ns())  # grows across a delete and re-create too
    if old_expires_ns != rec.expires_ns:
        if old_expires_ns:
            tx.delete(keys.result_expiry(ns, old_expires_ns, key))
        if rec.expires_ns:
            tx.put(keys.result_expiry(ns, rec.expires_ns, key), b"")
    tx.put(keys.result(ns, key), rec.SerializeToString())
    # The sweeper finds namespaces in the registry; read first so that every write
    # after the first one does not write (and conflict on) this one shared key.
    registry.register_namespace(tx, ns)


def result_get(tx: Txn, ns: str, key: str) -> pb.Payload | None:
    rec = _live(tx, ns, _check_key(key))
    return rec.value if rec is not None else None


def result_get_versioned(tx: Txn, ns: str, key: str) -> tuple[pb.Payload | None, int]:
    """The value and its version (0: absent), for a long-poll on the key."""
    rec = _live(tx, ns, _check_key(key))
    return (rec.value, rec.version or 1) if rec is not None else (None, 0)


def result_mget(tx: Txn, ns: str, key_list: list[str]) -> list[pb.Payload | None]:
    if len(key_list) > MAX_MGET:
        raise InvalidArgument("keys", f"at most {MAX_MGET} keys per call (got {len(key_list)})")
    for i, key in enumerate(key_list):
        _check_key(key, f"keys[{i}]")
    found = tx.batch_get([keys.result(ns, key) for key in key_list])
    now = tx.now_ns()
    out: list[pb.Payload | None] = []
    for key in key_list:
        rec = _decode_live(found.get(keys.result(ns, key)), now)
        out.append(rec.value if rec is not None else None)
    return out


def result_set(tx: Txn, ns: str, key: str, value: pb.Payload, ttl_ns: int | None = None) -> None:
    """Store `value` under `key`, expiring `ttl_ns` from now (0 / None: never). A
    counter's members survive a set, so the count stays true."""
    _check_key(key)
    ttl = _check_ttl(ttl_ns)
    old = _current(tx, ns, key)
    rec = pb.ResultRecord(value=value, members=old.members if old is not None else 0,
                          version=old.version if old is not None else 0)  # fmt: skip
    _write(tx, ns, key, rec, old.expires_ns if old is not None else 0, ttl)
    tx.declare(ResultChanged(ns, key))  # its long-polls read it again


def result_set_many(tx: Txn, ns: str, items: list[tuple[str, pb.Payload, int]]) -> None:
    """`result_set` for each `(key, value, ttl_ns)` in order, all or none: every item is
    checked before the first is written."""
    if len(items) > MAX_SET_MANY:
        raise InvalidArgument("items", f"at most {MAX_SET_MANY} items per call (got {len(items)})")
    for i, (key, _value, ttl_ns) in enumerate(items):
        _check_key(key, f"items[{i}].key")
        _check_ttl(ttl_ns, f"items[{i}].ttl_ns")
    for key, value, ttl_ns in items:
        result_set(tx, ns, key, value, ttl_ns)


def result_delete(tx: Txn, ns: str, key: str) -> bool:
    """Delete `key` (and a counter's members). Returns whether a live record existed."""
    _check_key(key)
    raw = tx.get(keys.result(ns, key))
    rec = pb.ResultRecord.FromString(raw) if raw is not None else None
    _purge(tx, ns, key, rec)
    tx.declare(ResultChanged(ns, key))
    return _decode_live(raw, tx.now_ns()) is not None


def result_expire(tx: Txn, ns: str, key: str, ttl_ns: int) -> bool:
    """Make `key` expire `ttl_ns` from now (0: never). False if there is no live
    record, as Redis EXPIRE returns 0."""
    _check_key(key)
    ttl = _check_ttl(ttl_ns)
    rec = _current(tx, ns, key)
    if rec is None:
        return False
    _write(tx, ns, key, rec, rec.expires_ns, ttl)
    return True


def result_incr(tx: Txn, ns: str, key: str, member: str, ttl_ns: int | None = None) -> int:
    """Add `member` to the counter `key` and return the counter's size. A member counts
    at most once: adding it again changes nothing (not even the TTL) and returns the
    same size. A new member (re)sets the TTL when `ttl_ns` is given."""
    return result_add(tx, ns, key, member, ttl_ns)[0]


def result_add(tx: Txn, ns: str, key: str, member: str, ttl_ns: int | None = None) -> tuple[int, bool]:
    """`result_incr`, also saying whether this call added `member`: of the calls that
    see the size reach N, exactly one added the member (a chord's one-time claim)."""
    _check_key(key)
    validate.text("member", member, MAX_KEY_BYTES, allow_empty=False)
    ttl = None if ttl_ns is None else _check_ttl(ttl_ns)
    rec = _current(tx, ns, key)
    member_key = keys.result_member(ns, key, member)
    if rec is not None and tx.get(member_key) is not None:
        return rec.members, False
    old_expires = rec.expires_ns if rec is not None else 0
    if rec is None:
        rec = pb.ResultRecord()
    rec.members += 1
    rec.value.data = str(rec.members).encode()
    rec.value.content_type = "text/plain"
    tx.put(member_key, b"")
    _write(tx, ns, key, rec, old_expires, ttl)
    tx.declare(ResultChanged(ns, key))
    return rec.members, True


def sweep_results(tx: Txn, ns: str, limit: int = SWEEP_BATCH) -> int:
    """Delete up to `limit` expired records of the namespace, soonest-expired first.
    Returns how many expiry entries it processed; a full batch means call again."""
    validate.non_negative("limit", limit)
    now = tx.now_ns()
    prefix = keys.result_expiry_all(ns)
    rows = tx.scan(prefix, prefix + keys.U64.pack(now + 1), limit=limit or SWEEP_BATCH)
    for expiry_key, _ in rows:
        expires_ns, key = keys.result_key_from_expiry(ns, expiry_key)
        raw = tx.get(keys.result(ns, key))
        # Only the record this entry describes: a later set may have renewed the key.
        if raw is not None and pb.ResultRecord.FromString(raw).expires_ns == expires_ns:
            _purge(tx, ns, key, None)
        tx.delete(expiry_key)
    return len(rows)
