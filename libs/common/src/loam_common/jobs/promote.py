"""Delayed jobs coming due (spec §6.3): `promote_due` moves the delayed jobs of one shard
whose time has come to the ready index; lease, retry and the delayed sweep call it.
`next_due_ns` says when the next one is due, so a long-poll sleeps no longer."""

from __future__ import annotations

from loam_common import keys
from loam_common.jobs import states as S
from loam_common.jobs.queue import QueueTx

PROMOTE_BATCH = 1000


def promote_due(qt: QueueTx, shard: int, limit: int = PROMOTE_BATCH) -> int:
    """Move delayed jobs whose time has come to the ready index."""
    if not qt.meta(shard).counts.get(S.DELAYED):
        return 0  # the shard's counts say its delayed index is empty: no scan
    prefix = qt.k.delayed_shard(shard)
    due = qt.tx.scan(prefix, prefix + keys.U64.pack(qt.now + 1), limit=limit)
    plen = len(prefix)
    for key, _ in due:
        job = qt.require_job(keys.index_job_id(key, plen))
        keep_place = qt.subject_reclaim_if_stepped_aside(job)
        qt.move(job, S.ready_state(job.opts.priority), "waiting", keep_place=keep_place)
    return len(due)


def next_due_ns(qt: QueueTx, shard: int) -> int:
    if not qt.meta(shard).counts.get(S.DELAYED):
        return 0
    prefix = qt.k.delayed_shard(shard)
    head = qt.tx.scan(prefix, keys.prefix_end(prefix), limit=1)
    return keys.index_time(head[0][0], len(prefix)) if head else 0
