"""Helpers of the Flink tests: the test jobs' names and reading their printed output."""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from pathlib import Path

from loam_engines.flink.cluster import LocalFlinkCluster

JOBS = Path(__file__).parent / "jobs"
NS = "flink-tests"
COUNTER_CLASS = "loam.KeyedCounter"


# -- reading the jobs' output ----------------------------------------------------------------------
_LINE = re.compile(r"loam-(?:py)?counter tag=(\S+) key=(\d+) count=(\d+) (?:seq|id)=(\d+)")


@dataclass(frozen=True)
class Count:
    tag: str
    key: int
    count: int
    seq: int


class Output:
    """The counter lines printed to the TaskManager's stdout after a mark."""

    def __init__(self, cluster: LocalFlinkCluster, marker: str) -> None:
        self.path = cluster.taskmanager_out
        self.marker = marker  # the tag prefix of the deployment under test

    def mark(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def read(self, since: int = 0) -> list[Count]:
        with open(self.path, "rb") as f:
            f.seek(since)
            text = f.read().decode(errors="replace")
        out = []
        for m in _LINE.finditer(text):
            if m.group(1).startswith(self.marker):
                out.append(Count(m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))))
        return out

    async def wait(self, since: int, predicate, timeout_s: float = 60.0) -> list[Count]:
        # Print sinks write to a file; nothing signals a new line, so look again shortly.
        deadline = time.monotonic() + timeout_s
        while True:
            lines = self.read(since)
            if predicate(lines):
                return lines
            if time.monotonic() > deadline:
                raise AssertionError(f"no matching output within {timeout_s} s; last lines: {lines[-5:]}")
            await asyncio.sleep(0.2)


# -- what Flink guarantees, as the counter shows it ---------------------------------------------
# The counter's source emits 0, 1, 2, ... and keys n by n % 2, so a line whose count and seq
# come from one consistent state (the counter's and the source position restored from the
# same checkpoint or savepoint) has count == seq // 2 + 1, however often it is printed.
# Flink's state is exactly-once; the print sink is not transactional, so what a job printed
# after the checkpoint it restores from is printed again (at-least-once output).
def state_exactly_once(lines: list[Count]) -> list[Count]:
    """The lines whose count disagrees with their position in the source (none is right)."""
    return [c for c in lines if c.count != c.seq // 2 + 1]


def gaps(lines: list[Count]) -> list[int]:
    """The source positions up to the newest printed that no line printed: none is right
    for a job and its restores (a replay repeats positions; it never skips one)."""
    seen = {c.seq for c in lines}
    return [n for n in range(min(seen, default=0), max(seen, default=-1) + 1) if n not in seen]


def last_per_key(lines: list[Count]) -> dict[int, Count]:
    out: dict[int, Count] = {}
    for c in lines:
        out[c.key] = c
    return out


def first_per_key(lines: list[Count]) -> dict[int, Count]:
    out: dict[int, Count] = {}
    for c in lines:
        out.setdefault(c.key, c)
    return out


# -- the SQL test job ----------------------------------------------------------------------------
COUNTS_SQL = """
-- counts per id % 3 of a sequence, printed as "<tag>> +U[k, n, top]"
SET 'pipeline.name' = 'loam-sql-counts';
CREATE TABLE seq (id BIGINT) WITH ('connector' = 'datagen', 'rows-per-second' = '20',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '1000000');
CREATE TABLE counts (k BIGINT, n BIGINT, top BIGINT, PRIMARY KEY (k) NOT ENFORCED)
  WITH ('connector' = 'print', 'print-identifier' = '{tag}');
INSERT INTO counts SELECT id % 3, COUNT(*), MAX(id) FROM seq GROUP BY id % 3;
"""


def sql_counts(path, tag: str, since: int) -> list[tuple[int, int]]:
    """(key, count) of each +I/+U line the SQL job printed after `since`."""
    with open(path, "rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    return [
        (int(k), int(n)) for k, n in re.findall(rf"^{tag}> \+[IU]\[(\d+), (\d+), \d+\]", text, re.MULTILINE)
    ]


def sql_state_disagrees(path, tag: str, since: int = 0) -> list[tuple[int, int, int]]:
    """The (k, n, top) lines whose count is not the number of ids up to `top` in the group
    (ids 1, 2, 3, ... grouped by id % 3; top, the group's newest id, is in group k): none for
    exactly-once state, however often a restore prints a line again."""
    with open(path, "rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    rows = [
        tuple(map(int, m)) for m in re.findall(rf"^{tag}> \+[IU]\[(\d+), (\d+), (\d+)\]", text, re.MULTILINE)
    ]
    return [(k, n, top) for k, n, top in rows if n != (top - k) // 3 + (1 if k else 0)]


def sql_gaps(path, tag: str, since: int = 0) -> list[tuple[int, int, int]]:
    """(k, count, next count) wherever a group's printed count jumps by more than one: every
    id updates its group's count, so a count printed again after a restore (a replay) may go
    down, and otherwise goes up by one; a jump is an id whose update was lost."""
    last: dict[int, int] = {}
    out = []
    for k, n in sql_counts(path, tag, since):
        if k in last and n > last[k] + 1:
            out.append((k, last[k], n))
        last[k] = n
    return out


async def wait_counts(path, tag, since, predicate, timeout_s=60.0):
    for _ in range(int(timeout_s / 0.2)):  # print sinks write to a file: look again shortly
        found = sql_counts(path, tag, since)
        if predicate(found):
            return found
        await asyncio.sleep(0.2)
    raise AssertionError(f"no matching SQL output: {sql_counts(path, tag, since)[-5:]}")
