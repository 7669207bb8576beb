"""The long chaos run (`make test-chaos`): the run of test_chaos.py for `--seconds`
(600 by default) at a steady mixed load (jobs with and without subjects, subject
batches, a FIFO queue,
durable workflows on a Resonate SDK worker, a Watch, a vandal) with the faults on
(kill -9 and SIGSTOP of the processes, server clock jumps), every process's RSS and
open file descriptors sampled, the checker's figures and the resource figures printed.
Exits 1 on any violation.

    .venv/bin/python tests/chaos/soak.py --seconds 600 [--seed N] [--every 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))  # tests/support/processes.py
from run import chaos_run  # noqa: E402  (the path above)


def resource_lines(usage: dict[str, list[tuple[float, int, int]]]) -> list[str]:
    """Per process: RSS and fds at its first sample past the first minute (or its first)
    and at its last, with the peak; a process restarted by a kill starts a new run of
    samples, so the figures are of its last incarnation's whole life where it had one."""
    out = []
    for name, samples in sorted(usage.items()):
        settled = [s for s in samples if s[0] >= 60] or samples
        (t0, rss0, fd0), (t1, rss1, fd1) = settled[0], samples[-1]
        peak = max(s[1] for s in samples)
        out.append(f"  {name:<10} rss {rss0 / 1024:.1f} MiB at {t0:.0f} s -> {rss1 / 1024:.1f} MiB at {t1:.0f} s "
                   f"(peak {peak / 1024:.1f}); fds {fd0} -> {fd1}")  # fmt: skip
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=float(os.environ.get("LOAM_SOAK_S", 600)))
    p.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(2)))
    p.add_argument("--every", type=float, default=8.0, help="seconds between faults, on average")
    p.add_argument("--data", help="keep the run's data, logs and history here")
    args = p.parse_args()
    data = Path(args.data or tempfile.mkdtemp(prefix="loam-soak-"))
    result = asyncio.run(
        chaos_run(data, args.seconds, args.seed, every_s=args.every, drain_s=120, sample_s=5)
    )
    print(f"soak {args.seconds:.0f} s (seed {args.seed}): {result.report.text(result.history)}")
    print("resources (RSS, open fds) per process:")
    print("\n".join(resource_lines(result.usage)))
    print(f"exit codes {result.exit_codes}; history and logs in {data}")
    for v in result.report.violations[:50]:
        print("VIOLATION", v)
    return 1 if result.report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
