"""The store's format version, and the steps that bring an older store to it.

`open_store` runs `ensure_current` before anything else reads the store, in every
process that opens it; the first one to get there moves the keys, in one transaction
that re-reads the version, so the others find it done.

- Format 1 (no `sys/format` record): a subject's holder under `Q sj/<subject>`.
- Format 2: the holder under `Q sq/<subject>`, the key its backlog's entries extend,
  so handing the subject on touches one B-tree page (decision 0046).
- Format 3: an idempotency record under its key (`Q ik/`, `Q ike/`) instead of the key's
  SHA-256 (`Q i/`, `Q ie/`), so a producer's keys share index pages (decision 0055).
  Nothing moves: a hash cannot be turned back into its key, so format 2's records are
  read and swept where they are until they have expired (keys.py, jobs/queue.py). The
  number changes so that an older Loam, which would not see the new records, refuses
  the store instead of enqueueing a retried request twice.

A store of a newer format is refused: this code would misread its keys.
"""

from __future__ import annotations

from loam_common import keys
from loam_common.store.base import Backend, CommitUnknown, RegionError, StoreError, WriteConflict

FORMAT = 3
_ATTEMPTS = 20


class NewerStoreFormat(StoreError):
    """The store was written by a newer version of Loam."""


def stored_format(backend: Backend) -> int:
    txn = backend.begin(read_only=True)
    try:
        return _read(txn)
    finally:
        txn.rollback()


def ensure_current(backend: Backend) -> int:
    """Bring the store to FORMAT (a no-op when it is there); return the format it had."""
    had = stored_format(backend)
    _refuse_newer(had)
    if had == FORMAT:
        return had
    for _ in range(_ATTEMPTS):
        txn = backend.begin()
        committed = False
        try:
            found = _read(txn)
            _refuse_newer(found)
            if found == FORMAT:  # another process, or our commit whose answer was lost
                return had
            if found < 2:
                _subject_holders_beside_backlogs(txn)
            # 2 -> 3 moves nothing (see the module docstring).
            txn.put(keys.store_format(), keys.U64.pack(FORMAT))
            txn.commit()
            committed = True
            return had
        except (WriteConflict, RegionError, CommitUnknown):
            continue  # read the version again: the move is one transaction, all or nothing
        finally:
            if not committed:
                txn.rollback()
    raise StoreError(
        f"could not bring the store to format {FORMAT}: it kept changing under {_ATTEMPTS} attempts"
    )


def _read(txn) -> int:  # noqa: ANN001 - a backend's Txn
    raw = txn.get(keys.store_format())
    return keys.U64.unpack(raw)[0] if raw else 1


def _refuse_newer(found: int) -> None:
    if found > FORMAT:
        raise NewerStoreFormat(
            f"the store is in format {found}, written by a newer Loam; this one reads format {FORMAT} at most"
        )


def _subject_holders_beside_backlogs(txn) -> None:  # noqa: ANN001 - a backend's Txn
    """1 -> 2: every queue's `sj/<subject>` rows move to `sq/<subject>`."""
    registry = keys.namespace_registry()
    for ns_key, _ in txn.scan(registry, keys.prefix_end(registry)):
        ns = ns_key[len(registry) :].decode()
        queues = keys.queue_registry(ns)
        for queue_key, _ in txn.scan(queues, keys.prefix_end(queues)):
            k = keys.QueueKeys(ns, keys.queue_from_registry_key(ns, queue_key))
            old = k.subject_holders_format_1()
            for key, holder in txn.scan(old, keys.prefix_end(old)):
                txn.put(k.subject_current_from_format_1(key), holder)
                txn.delete(key)
