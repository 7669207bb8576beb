"""CPU time and resident memory of a process tree from /proc (Linux), and `settle()`: wait until a store's
processes are idle, so one measurement does not pay for background work another one
left behind (a server catching up after a million enqueues, say). `python_build()` names
the interpreter the figures were measured on."""

from __future__ import annotations

import os
import platform
import socket
import statistics
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterable

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
IDLE_CPU_S = 0.05  # at most 5 % of one core over a one-second window counts as idle


def python_build() -> str:
    """This interpreter's version and whether it was built with profile-guided and
    link-time optimization, as production Pythons are: Loam's transitions run 1.16-1.26x
    slower on a build without them (docs/decisions/0057), so every result says which."""
    args = sysconfig.get_config_var("CONFIG_ARGS") or ""
    opts = [name for flag, name in (("--enable-optimizations", "PGO"), ("--with-lto", "LTO")) if flag in args]
    return f"{platform.python_version()} ({' + '.join(opts) if opts else 'built without PGO or LTO'})"


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


# A fixed piece of pure-Python work (dict, string and call traffic, as a server's request
# handling is), timed by its own process's CPU clock every half second (~1 % of a core).
_PROBE = """
import sys, time
def work():
    d = {}
    for i in range(4000):
        k = "k%d" % (i & 255)
        d[k] = d.get(k, 0) + len(k)
    return len(d)
work()
while True:
    t = time.process_time(); work(); print(round((time.process_time() - t) * 1e6), flush=True)
    time.sleep(0.5)
"""


class SpeedProbe:
    """How fast the machine runs Python while a benchmark runs: a child process times the
    same small piece of work every half second. On a shared VM the CPU a given piece of
    code takes can change by 2x from one minute to the next with nothing else running
    here (bench/README.md), so a CPU figure from one run compares with another run's only
    next to this one. `stop()` gives the median µs of the work over the run."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen([sys.executable, "-c", _PROBE], stdout=subprocess.PIPE, text=True)

    def stop(self) -> float | None:
        self._proc.terminate()
        out, _ = self._proc.communicate()
        times = [int(line) for line in out.split() if line.isdigit()]
        return round(statistics.median(times)) if times else None
