"""The registry version: one store-wide counter (`keys.registry_version`) that moves
whenever the set of namespaces or queue shards changes (a queue created or obliterated,
its shard count changed, a namespace first used). The services that list every queue
shard each pass (the sweeper's and the relay's ownership) read this one key instead and
list again only when it moved (`ownership.ShardLister`)."""

from __future__ import annotations

from loam_common import keys
from loam_common.store.base import Txn


def registry_version(tx: Txn) -> int:
    raw = tx.get(keys.registry_version())
    return keys.U64.unpack(raw)[0] if raw else 0


def registry_changed(tx: Txn) -> None:
    """Move the version: a namespace or a queue shard appeared or went."""
    tx.put(keys.registry_version(), keys.U64.pack(registry_version(tx) + 1))


def register_namespace(tx: Txn, ns: str) -> None:
    """Put `ns` in the namespace registry, if it is not there yet (read first, so later
    writes neither write nor conflict on the shared keys)."""
    key = keys.namespace_registry(ns)
    if tx.get(key) is None:
        tx.put(key, b"")
        registry_changed(tx)
