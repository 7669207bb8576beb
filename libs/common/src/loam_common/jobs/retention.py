"""Retention (spec §6.10): BullMQ's removeOnComplete / removeOnFail by count and by
age. Applied when a job finishes, as BullMQ does, and by the sweeper for ages that
pass while nothing finishes. A job's own retention overrides its queue's."""

from __future__ import annotations

from loam_common import keys
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S
from loam_common.jobs.queue import QueueTx, retention_of

TRIM_BATCH = 1000


def retention_policy(qt: QueueTx, job: pb.Job | None, state: int) -> tuple[int | None, int | None]:
    """(count, age_ns) to keep for `state`; None = keep. A job's own retention overrides
    its queue's, field by field."""
    queue_policy = qt.queue_retention(state)
    if job is not None:
        opts = job.opts
        if opts.HasField("retention"):
            count, age = retention_of(opts.retention, state)
            return (
                queue_policy[0] if count is None else count,
                queue_policy[1] if age is None else age,
            )
    return queue_policy


def on_finished(qt: QueueTx, job: pb.Job, clock_ns: int | None = None) -> None:
    """`clock_ns`: the finishing worker's clock (BullMQ), by which ages are judged then."""
    if job.state not in (S.COMPLETED, S.FAILED):
        return
    count, age = retention_policy(qt, job, job.state)
    if count == 0:
        qt.remove(job, event=None)
    elif count is not None or age is not None:  # keep everything: nothing to trim
        trim(qt, job.state, job.shard, count, age, clock_ns)


def trim(
    qt: QueueTx, state: int, shard: int, count: int | None, age_ns: int | None, clock_ns: int | None = None
) -> int:
    """Remove the oldest finished jobs of one shard beyond `count` or older than `age`:
    by the store's clock and the index's times, or with `clock_ns` by that clock and the
    jobs' finished times (BullMQ judges ages by the worker's timestamp)."""
    prefix = qt.k.state_shard(state, shard)
    end = keys.prefix_end(prefix)
    removed = 0
    if age_ns is not None and clock_ns is not None:
        removed += _trim_by_clock(qt, prefix, end, clock_ns - age_ns)
    elif age_ns is not None:
        cutoff = qt.now - age_ns
        for key, _ in qt.tx.scan(prefix, prefix + keys.U64.pack(max(cutoff, 0)), limit=TRIM_BATCH):
            removed += _remove_entry(qt, key, len(prefix))
    if count is not None:
        held = qt.meta(shard).counts[state]
        excess = held - count
        if excess > 0:
            for key, _ in qt.tx.scan(prefix, end, limit=min(excess, TRIM_BATCH)):
                removed += _remove_entry(qt, key, len(prefix))
    return removed


def _trim_by_clock(qt: QueueTx, prefix: bytes, end: bytes, cutoff: int) -> int:
    """Remove the jobs of one state index, oldest first, up to the first one finished
    after `cutoff` by its own record (TRIM_BATCH entries looked at, at most). The index
    is read a page at a time, from one entry up: this runs at every finish, when one job
    at most is usually due, and reading TRIM_BATCH entries each time made a completion
    cost four times as much (bench/README.md)."""
    removed = seen = 0
    start, page = prefix, 1
    while seen < TRIM_BATCH:
        rows = qt.tx.scan(start, end, limit=page)
        for key, _ in rows:
            job = qt.get_job(keys.index_job_id(key, len(prefix)))
            if job is None:
                qt.tx.delete(key)  # an index entry without its job: repair
            elif job.finished_ns > cutoff:
                return removed
            else:
                qt.remove(job, event=None)
                removed += 1
        seen += len(rows)
        if len(rows) < page:
            break
        start = rows[-1][0] + b"\x00"  # the next key after the page's last
        page = min(page * 8, TRIM_BATCH - seen)
    return removed


def _remove_entry(qt: QueueTx, key: bytes, plen: int) -> int:
    job = qt.get_job(keys.index_job_id(key, plen))
    if job is None:
        qt.tx.delete(key)  # an index entry without its job: repair
        return 0
    qt.remove(job, event=None)
    return 1


def sweep_queue(qt: QueueTx) -> int:
    """The sweeper's pass: apply the queue's age limits to every shard."""
    removed = 0
    for state in (S.COMPLETED, S.FAILED):
        count, age = retention_policy(qt, None, state)
        if count is None and age is None:
            continue
        for shard in range(max(qt.cfg.shards, 1)):
            removed += trim(qt, state, shard, count, age)
    return removed
