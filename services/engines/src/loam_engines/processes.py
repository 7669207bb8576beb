"""Child processes of the engine runner: started so they cannot outlive it, recorded so
a restarted runner can find and end the ones a crash left behind.

Every child is started
- in its own session (`setsid`), so the runner signals the whole process group: an
  engine's own children (a JVM under spark-submit, UDF workers) go with it;
- with the parent-death signal SIGKILL (Linux, through `setpriv --pdeathsig`), so the
  kernel kills it the moment the runner dies, even by `kill -9`;
- with a pid file `<dir>/<name>.pid` holding its pid and start time (`/proc/<pid>/stat`
  field 22): `reap_orphans(dir)` at start-up kills every group whose leader is still the
  process that file names (a reused pid has another start time), for the children the
  death signal cannot reach (grandchildren that changed their parent death signal).

`stop()` asks first (SIGTERM, or the signal the engine needs: Sail's CLI only stops
cleanly on SIGINT), then kills the group after a grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("loam.engines.processes")

# The parent-death signal is set by util-linux's `setpriv`, which execs the command: no
# Python runs between fork and exec (a `preexec_fn` would run the interpreter's at-fork
# hooks in the child, and grpcio's crash a process forked while its poller runs).
SETPRIV = shutil.which("setpriv")


def _dying_with_parent(argv: Sequence[str]) -> list[str]:
    if SETPRIV is None:  # not Linux util-linux: the pid files still cover restarts
        return list(argv)
    return [SETPRIV, "--pdeathsig", "KILL", "--", *argv]


def path_part(name: str) -> str:
    """A Loam name (namespace, run id) as one path segment: names may be `.` or `..`."""
    return f"_{name}" if name in (".", "..") else name


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its last ')'
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


def _kill_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


@dataclass
class Child:
    """One running child: `proc` is asyncio's handle, `pgid` its group (= its pid)."""

    name: str
    proc: asyncio.subprocess.Process
    pid_file: Path | None
    stop_signal: int = signal.SIGTERM

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def wait(self) -> int:
        rc = await self.proc.wait()
        self._forget()
        return rc

    async def stop(self, grace_s: float = 5.0) -> int:
        """Ask the group to stop; kill it after `grace_s`. Returns the exit status."""
        if self.proc.returncode is None:
            _kill_group(self.pid, self.stop_signal)
            try:
                await asyncio.wait_for(asyncio.shield(self.proc.wait()), grace_s)
            except TimeoutError:
                log.warning("%s (pid %d) ignored signal %d for %.1fs: killing it", self.name, self.pid,
                            self.stop_signal, grace_s)  # fmt: skip
        # Whatever the leader did, nothing of its group may stay behind.
        _kill_group(self.pid, signal.SIGKILL)
        rc = await self.proc.wait()
        self._forget()
        return rc

    def kill(self) -> None:
        """SIGKILL to the group, now (synchronous: for shutdown paths)."""
        _kill_group(self.pid, signal.SIGKILL)

    def _forget(self) -> None:
        if self.pid_file is not None:
            with contextlib.suppress(FileNotFoundError):
                self.pid_file.unlink()


async def spawn(
    name: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    pid_dir: Path | None = None,
    stop_signal: int = signal.SIGTERM,
    stdin: int | None = asyncio.subprocess.DEVNULL,
    stdout: int | None = asyncio.subprocess.PIPE,
    stderr: int | None = asyncio.subprocess.PIPE,
) -> Child:
    """Start `argv` as a supervised child (see the module docstring). `name` must be
    unique among the live children sharing `pid_dir` (it names the pid file)."""
    proc = await asyncio.create_subprocess_exec(
        *_dying_with_parent(argv),
        env=dict(env) if env is not None else None,
        cwd=cwd,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        start_new_session=True,
    )
    pid_file = None
    if pid_dir is not None:
        pid_dir.mkdir(parents=True, exist_ok=True)
        pid_file = pid_dir / f"{name}.pid"
        record = {"pid": proc.pid, "start": start_time(proc.pid), "argv0": str(argv[0])}
        tmp = pid_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, pid_file)
    return Child(name, proc, pid_file, stop_signal)


def reap_orphans(pid_dir: Path) -> list[int]:
    """Kill the process group of every child a previous runner left in `pid_dir` (its
    leader still alive and still the same process), and drop the pid files. Returns
    the pids killed."""
    killed = []
    if not pid_dir.is_dir():
        return killed
    for pid_file in pid_dir.glob("*.pid"):
        try:
            record = json.loads(pid_file.read_text())
            pid, started = int(record["pid"]), record.get("start")
        except (OSError, ValueError, KeyError, TypeError):
            pid_file.unlink(missing_ok=True)
            continue
        if started is not None and start_time(pid) == started and alive(pid):
            if _kill_group(pid, signal.SIGKILL):
                killed.append(pid)
                log.warning("killed process group %d (%s) left by an earlier runner", pid, pid_file.stem)
        pid_file.unlink(missing_ok=True)
    return killed


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False


def child_env() -> dict[str, str]:
    """The environment engine children start from: this process's, without credentials
    or Spark / Sail settings of its own."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("SPARK_", "PYSPARK_", "LOAM_TOKEN", "SAIL_", "LOAM_INTERNAL"))}  # fmt: skip
