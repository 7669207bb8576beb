"""What loam-celery's start-up hook (loam_celery.pth, decision 0029) costs every Python
process of the environment: which loam/kombu/celery modules `-X importtime` shows at
start-up (none expected); the .pth line timed in-process; and the wall time of
`python -c pass` with the hook and without it (the .pth moved aside for those runs,
interleaved with the others so machine load hits both alike, and put back in any case).

    .venv/bin/python bench/celery_startup.py [runs]
"""

from __future__ import annotations

import re
import shutil
import site
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

PY = sys.executable


def hook_path() -> Path:
    for d in site.getsitepackages():
        if (Path(d) / "loam_celery.pth").exists():
            return Path(d) / "loam_celery.pth"
    sys.exit("loam_celery.pth is not installed here (make venv)")


def importtime_us() -> dict[str, int]:
    """Cumulative import time (µs) of each loam/kombu/celery module imported at start-up."""
    err = subprocess.run([PY, "-X", "importtime", "-c", "pass"], capture_output=True, text=True).stderr
    out = {}
    for m in re.finditer(r"import time:\s+(\d+) \|\s+(\d+) \|\s+(\S+)$", err, re.M):
        if m.group(3).startswith(("loam", "kombu", "celery")):
            out[m.group(3)] = int(m.group(2))
    return out


def pth_line_us(number: int = 2000) -> float:
    """The .pth line run in this process (compile, class, insert), best of 5, in µs."""
    from loam_celery.startup import PTH_LINE

    saved = list(sys.meta_path)

    def once() -> None:
        exec(PTH_LINE, {})
        sys.meta_path[:] = saved

    return min(timeit.repeat(once, number=number, repeat=5)) / number * 1e6


def wall_ms() -> float:
    t = time.perf_counter()
    subprocess.run([PY, "-c", "pass"], check=True)
    return (time.perf_counter() - t) * 1000


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    pth = hook_path()
    samples = [importtime_us() for _ in range(runs)]
    imported = sorted({name for s in samples for name in s})
    with_hook: list[float] = []
    without: list[float] = []
    aside = Path(tempfile.mkdtemp()) / pth.name
    try:
        for _ in range(runs):
            with_hook.append(wall_ms())
            shutil.move(pth, aside)
            try:
                without.append(wall_ms())
            finally:
                shutil.move(aside, pth)
    finally:
        if aside.exists():
            shutil.move(aside, pth)
    print(f"runs: {runs}; python: {PY}")
    print(f"loam/kombu/celery modules imported at start-up (-X importtime): {imported or 'none'}")
    print(f"the .pth line itself: {pth_line_us():.0f} us")
    for name, v in (("with the hook", with_hook), ("without", without)):
        print(f"python -c pass {name}: min {min(v):.2f} ms, median {statistics.median(v):.2f} ms")


if __name__ == "__main__":
    main()
