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
