"""JobQuery (spec §5.4): list a queue's jobs, newest first, a page at a time, from the
index each state already keeps, so a page costs about its size at any backlog:

| states asked for                | listed from                    | "newest" = latest   | time range on |
|---------------------------------|--------------------------------|---------------------|---------------|
| none                            | `j/` job records (ULID ids)    | created             | creation (ms) |
| finished, waiting-children      | `s/` state index               | entered the state   | the index     |
| active                          | `a/` active index              | lease deadline      | state time    |
| delayed                         | `d/` delayed index             | due time            | state time    |
| waiting, prioritized            | `r/` ready band, then subjects | last in serving order | state time  |

Several states are listed one after another, in the order asked (as BullMQ's
getJobs does). A queue with several shards is merged across them. Filters the index
cannot apply (task name, a time range on an unindexed time) are checked per job, at
most MAX_EXAMINED entries per call: a page may then come back short, or empty, with a
next token. Stop when the token is empty.

The page token is opaque: the position of the last entry looked at, plus a
fingerprint of the query so a token is not reused with another query.
"""

from __future__ import annotations

import base64
import heapq
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from loam_common import ids, keys, validate
from loam_common.errors import InvalidArgument
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S
from loam_common.jobs.queue import QueueTx
from loam_common.store.base import Txn

DEFAULT_PAGE = 100
MAX_PAGE = 1000
MAX_EXAMINED = 10_000
_CHUNK = 256


@dataclass(frozen=True, slots=True)
class _Source:
    """One index to list, possibly spread over shards: (shard, key prefix) pairs."""

    prefixes: list[tuple[int, bytes]]
    id_at: int | None  # where the job id starts in the key after the prefix; None = the value
    state: int | None = None  # only jobs in this state (a subject backlog holds two)
    lo: bytes = b""  # inclusive lower bound of the key after the prefix
    hi: bytes | None = None  # exclusive upper bound
    time_filter: bool = False  # check the job's state time against the range
    # The subject backlogs, where a subject's holder key names a job not behind it
    # (listed from its own index): only the jobs waiting behind their subject count.
    behind_subject: bool = False


def _sources(qt: QueueTx, states: list[int], since_ns: int, until_ns: int) -> list[_Source]:
    k, shards = qt.k, range(max(qt.cfg.shards, 1))
    if not states:
        hi = ids.ulid_floor(until_ns).encode() if until_ns else None
        lo = ids.ulid_floor(since_ns).encode() if since_ns else b""
        return [_Source([(0, k.jobs())], id_at=0, lo=lo, hi=hi)]
    out = []
    for st in states:
        if st in S.STATE_INDEXED:
            hi = keys.U64.pack(until_ns) if until_ns else None
            out.append(
                _Source([(s, k.state_shard(st, s)) for s in shards], 8, st, keys.U64.pack(since_ns), hi)
            )
        elif st == S.ACTIVE:
            out.append(_Source([(s, k.active_shard(s)) for s in shards], 8, st, time_filter=True))
        elif st == S.DELAYED:
            out.append(_Source([(s, k.delayed_shard(s)) for s in shards], 8, st, time_filter=True))
        else:
            band = keys.PRIORITY_BAND if st == S.PRIORITIZED else keys.FIFO_BAND
            out.append(_Source([(s, k.ready_band(s, band)) for s in shards], None, st, time_filter=True))
            # Jobs queued behind their subject's in-flight job live in the subject FIFOs.
            out.append(_Source([(0, k.subject_backlogs())], None, st, time_filter=True, behind_subject=True))
    return out


def _shard_desc(tx: Txn, src: _Source, shard: int, prefix: bytes, cursor: tuple[bytes, int] | None):
    """One shard's entries, newest first, strictly after `cursor` in the merged order
    (suffix, shard) descending."""
    start = prefix + src.lo
    end = prefix + src.hi if src.hi is not None else keys.prefix_end(prefix)
    if cursor is not None:
        suffix, cshard = cursor
        # Equal suffixes are ordered by shard, so a lower shard still owes that suffix.
        end = min(end, prefix + suffix + (b"\x00" if shard < cshard else b""))
    plen = len(prefix)
    while True:
        rows = tx.scan(start, end, limit=_CHUNK, reverse=True)
        for key, value in rows:
            yield key[plen:], shard, value
        if len(rows) < _CHUNK:
            return
        end = rows[-1][0]


def _entries(tx: Txn, src: _Source, cursor: tuple[bytes, int] | None) -> Iterator[tuple[bytes, int, bytes]]:
    its = [_shard_desc(tx, src, shard, prefix, cursor) for shard, prefix in src.prefixes]
    return heapq.merge(*its, key=lambda e: (e[0], e[1]), reverse=True)


def _fingerprint(queue: str, states: list[int], name: str | None, since_ns: int, until_ns: int) -> int:
    return zlib.crc32(repr((queue, states, name, since_ns, until_ns)).encode())


def _encode_token(fp: int, src: int, suffix: bytes, shard: int) -> str:
    raw = json.dumps({"f": fp, "i": src, "c": base64.b64encode(suffix).decode(), "s": shard})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_token(token: str, fp: int, n_sources: int) -> tuple[int, tuple[bytes, int] | None]:
    try:
        d = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        src, cursor = int(d["i"]), (base64.b64decode(d["c"], validate=True), int(d["s"]))
        ok = d["f"] == fp and 0 <= src < n_sources
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise InvalidArgument("page_token", "is not a token returned by this query; start again without one")
    return src, cursor


def _check(states: list[int] | None, since_ns: int, until_ns: int, page_size: int) -> list[int]:
    picked: list[int] = []
    for st in states or ():
        if st not in S.NAMES:
            raise InvalidArgument("states", f"unknown state {st}")
        if st not in picked:
            picked.append(st)
    validate.time_ns("since_ns", since_ns)
    validate.time_ns("until_ns", until_ns)
    if until_ns and until_ns <= since_ns:
        raise InvalidArgument("until_ns", "must be after since_ns (or 0 for no bound)")
    validate.non_negative("page_size", page_size)
    return picked


def job_query(
    tx: Txn,
    ns: str,
    queue: str,
    states: list[int] | None = None,
    name: str | None = None,
    since_ns: int = 0,
    until_ns: int = 0,
    page_size: int = DEFAULT_PAGE,
    page_token: str = "",
) -> tuple[list[pb.Job], str]:
    """A page of jobs, newest first, and the token of the next page ("" at the end).
    The time range is [since_ns, until_ns); 0 leaves a side open."""
    validate.name("queue", queue)
    picked = _check(states, since_ns, until_ns, page_size)
    page_size = min(page_size or DEFAULT_PAGE, MAX_PAGE)
    with QueueTx(tx, ns, queue, create=False) as qt:
        sources = _sources(qt, picked, since_ns, until_ns)
        fp = _fingerprint(queue, picked, name, since_ns, until_ns)
        first, cursor = _decode_token(page_token, fp, len(sources)) if page_token else (0, None)
        page: list[pb.Job] = []
        last: tuple[int, bytes, int] | None = None  # the position of page[-1]
        examined = 0
        for i in range(first, len(sources)):
            src = sources[i]
            for suffix, shard, value in _entries(tx, src, cursor if i == first else None):
                job = _load(qt, src, suffix, value)
                if job is not None and _matches(job, src, name, since_ns, until_ns):
                    if len(page) == page_size:  # one more exists: the page is full
                        return page, _encode_token(fp, *last)
                    page.append(job)
                    last = (i, suffix, shard)
                examined += 1
                if examined >= MAX_EXAMINED:  # budget spent: resume after this entry
                    return page, _encode_token(fp, i, suffix, shard)
        return page, ""


def _load(qt: QueueTx, src: _Source, suffix: bytes, value: bytes) -> pb.Job | None:
    job_id = value.decode() if src.id_at is None else suffix[src.id_at :].decode()
    return qt.get_job(job_id)


def _matches(job: pb.Job, src: _Source, name: str | None, since_ns: int, until_ns: int) -> bool:
    if src.state is not None and job.state != src.state:
        return False
    if src.behind_subject and not job.subject_blocked:
        return False
    if name is not None and job.task.name != name:
        return False
    if src.time_filter and (job.state_ns < since_ns or (until_ns and job.state_ns >= until_ns)):
        return False
    return True
