"""Rendezvous (highest random weight) hashing: which node of a set owns a key.

One function for every placement decision, so the gateway (which queue core serves a
queue), the sweeper (which queue core to wake; which sweeper owns a shard) and the
relay agree without talking to each other. Each node scores
`blake2b-64("<key>\\x00<node>")`; the highest score wins. Removing a node moves only
the keys it owned; adding one takes about 1/n of the keys from the others.

Keys for queues are `queue_key(ns, queue)` = `"<ns>\\x00<queue>"`; for queue shards
`shard_key(ns, queue, shard)` = `"<ns>\\x00<queue>\\x00<shard>"`. Node names are used as
given: callers strip a trailing `/` from URLs first, as the gateway does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def score(key: str, node: str) -> int:
    """`node`'s weight for `key`: blake2b-64 of `"<key>\\x00<node>"`, big-endian."""
    return int.from_bytes(hashlib.blake2b(f"{key}\x00{node}".encode(), digest_size=8).digest(), "big")


def owner(key: str, nodes: Sequence[str]) -> str:
    """The node that owns `key`. Raises ValueError when `nodes` is empty. Ties (equal
    scores, vanishingly rare) go to the greater node name, so every caller agrees."""
    if not nodes:
        raise ValueError("rendezvous.owner: no nodes to choose from")
    return max(nodes, key=lambda n: (score(key, n), n))


def ranked(key: str, nodes: Sequence[str]) -> list[str]:
    """Every node, best first: the owner, then who takes over if it is gone."""
    return sorted(nodes, key=lambda n: (score(key, n), n), reverse=True)


def queue_key(ns: str, queue: str) -> str:
    return f"{ns}\x00{queue}"


def shard_key(ns: str, queue: str, shard: int) -> str:
    return f"{ns}\x00{queue}\x00{shard}"


def queue_owner(ns: str, queue: str, nodes: Sequence[str]) -> str:
    """The node (e.g. queue-core URL) that serves `queue` of namespace `ns`."""
    return owner(queue_key(ns, queue), nodes)
