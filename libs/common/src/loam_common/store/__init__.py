"""The store: an ordered transactional key-value seam (`base`), its backends (`lmdb`,
`sqlite`, `memory`, `tikv`) and the one async runner over them (`runner.Store`, `open_store`).
The TiKV client itself is imported only when a TikvBackend is constructed.
"""

from loam_common.store.base import (
    Backend,
    Capabilities,
    Clock,
    CommitUnknown,
    ManualClock,
    RegionError,
    StoreError,
    StoreUnavailable,
    Txn,
    WriteConflict,
)
from loam_common.store.lmdb import LmdbBackend
from loam_common.store.memory import Fault, FaultPlan, MemoryBackend
from loam_common.store.runner import COMMIT_TOKEN_PREFIX, RESERVED_PREFIX, Store, open_store
from loam_common.store.sqlite import SqliteBackend
from loam_common.store.tikv import TikvBackend

__all__ = [
    "COMMIT_TOKEN_PREFIX",
    "RESERVED_PREFIX",
    "Backend",
    "Capabilities",
    "Clock",
    "CommitUnknown",
    "Fault",
    "FaultPlan",
    "LmdbBackend",
    "ManualClock",
    "MemoryBackend",
    "RegionError",
    "SqliteBackend",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "TikvBackend",
    "Txn",
    "WriteConflict",
    "open_store",
]
