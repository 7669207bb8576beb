"""CPU time and resident memory of a process tree from /proc (Linux), and `settle()`: wait until a store's
processes are idle, so one measurement does not pay for background work another one
left behind (a server catching up after a million enqueues, say)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
IDLE_CPU_S = 0.05  # at most 5 % of one core over a one-second window counts as idle


def _stat(pid: int) -> tuple[int, float] | None:
    """(ppid, user+system CPU seconds) of one process, None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK


def process_cpu(pid: int) -> float:
    """User+system CPU seconds of one process (its threads, not its children)."""
    st = _stat(pid)
    if st is None:
        raise ProcessLookupError(pid)
    return st[1]


def free_port() -> int:
    """A loopback TCP port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree_cpu(roots: Iterable[int]) -> dict[int, float]:
    """CPU seconds of each process in the trees under `roots` (the roots included)."""
    stats: dict[int, tuple[int, float]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                stats[int(name)] = st
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    out: dict[int, float] = {}
    todo = [p for p in roots if p in stats]
    while todo:
        pid = todo.pop()
        if pid not in out:
            out[pid] = stats[pid][1]
            todo.extend(children.get(pid, ()))
    return out


def tree_memory(roots: Iterable[int]) -> dict[str, float] | None:
    """Resident memory of the trees under `roots`, MB: `rss_mb` (what `ps` shows, pages
    shared between the processes counted in each) and `pss_mb` (each shared page split
    among its sharers: Postgres's backends share its buffers, so their RSS sum overcounts).
    None where /proc has no smaps_rollup."""
    rss = pss = 0
    pids = list(tree_cpu(roots))
    if not pids:
        return None
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1])
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1])
        except OSError:
            continue
    return {"rss_mb": round(rss / 1024, 1), "pss_mb": round(pss / 1024, 1), "processes": len(pids)}


def busy_cpu(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(after[p] - before[p] for p in after.keys() & before.keys())


def settle(roots: Iterable[int], max_wait: float = 300.0, window: float = 1.0) -> float:
    """Block until the trees under `roots` use less than IDLE_CPU_S per `window`; returns
    the seconds waited (max_wait at most)."""
    roots = [p for p in roots if p]
    if not roots or not os.path.isdir("/proc"):
        return 0.0
    t0 = time.monotonic()
    prev = tree_cpu(roots)
    while time.monotonic() - t0 < max_wait:
        time.sleep(window)
        cur = tree_cpu(roots)
        if busy_cpu(prev, cur) < IDLE_CPU_S * window:
            break
        prev = cur
    return time.monotonic() - t0


def settle_named(
    trees: dict[str, list[int]], max_wait: float = 300.0, window: float = 1.0
) -> tuple[float, dict]:
    """`settle()` over several named trees at once; also returns the CPU seconds each one
    used while it was waited for (who was busy)."""
    trees = {k: [p for p in v if p] for k, v in trees.items()}
    used = dict.fromkeys(trees, 0.0)
    if not any(trees.values()) or not os.path.isdir("/proc"):
        return 0.0, used
    t0 = time.monotonic()
    prev = {k: tree_cpu(v) for k, v in trees.items()}
    while time.monotonic() - t0 < max_wait:
        time.sleep(window)
        cur = {k: tree_cpu(v) for k, v in trees.items()}
        busy = {k: busy_cpu(prev[k], cur[k]) for k in trees}
        for k, b in busy.items():
            used[k] += b
        if sum(busy.values()) < IDLE_CPU_S * window:
            break
        prev = cur
    return time.monotonic() - t0, {k: round(v, 1) for k, v in used.items()}
