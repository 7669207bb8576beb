"""The local Flink session cluster Loam runs: one JobManager and one TaskManager JVM as
foreground children, everything of theirs under one root directory.

    <root>/conf/         config.yaml written here (the wheel's conf/ is never edited), log4j
    <root>/log/          jobmanager.out, taskmanager.out (print sinks write there), Flink's logs
    <root>/checkpoints/  execution.checkpointing.dir
    <root>/savepoints/   execution.checkpointing.savepoint-dir
    <root>/uploads/      web.upload.dir (uploaded jars survive a JobManager restart)
    <root>/tmp/ <root>/pid/   io.tmp.dirs and Flink's own pid dir, emptied on every start
    <root>/cluster.json  the children's pids and ports, for the next manager to check
    <root>/manager.lock  flock held while a manager runs the cluster

No orphan JVM outlives its manager: each child asks the kernel for SIGTERM when the manager
dies (PR_SET_PDEATHSIG, kept across the scripts' exec into java) and runs in its own process
group; and `start()` reads the previous `cluster.json` and stops any JVM of this root still
alive (a pid is only trusted when its command line names this root's conf dir, so a reused
pid is never signalled).
"""

from __future__ import annotations

import asyncio
import ctypes
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from loam_common.errors import Unavailable
from loam_engines.flink.distribution import FlinkDistribution
from loam_engines.flink.rest import FlinkRest, FlinkRestError

_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)


class FlinkClusterError(Unavailable):
    """The cluster did not start, or another manager holds it."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: a new process group, and SIGTERM when the
    # manager goes away, however it goes (kill -9 included).
    os.setpgrp()
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def wheel_java_opts(home: Path) -> str:
    """`env.java.opts.all` of the wheel's own config.yaml: the `--add-opens` flags Flink
    needs on Java 17. Read from the nested YAML by indentation (the file is Flink's, fixed)."""
    path: list[tuple[int, str]] = []
    for raw in (home / "conf" / "config.yaml").read_text().splitlines():
        if not raw.strip() or raw.lstrip().startswith("#") or ":" not in raw:
            continue
        indent = len(raw) - len(raw.lstrip())
        key, _, value = raw.strip().partition(":")
        while path and path[-1][0] >= indent:
            path.pop()
        path.append((indent, key.strip()))
        if [k for _, k in path] in (["env", "java", "opts", "all"], ["env.java.opts.all"]):
            return value.strip()
    return ""


class LocalFlinkCluster:
    """A session cluster rooted at `root`. `start()` is idempotent within one manager."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        dist: FlinkDistribution | None = None,
        *,
        slots: int = 4,
        jobmanager_memory: str = "1024m",
        taskmanager_memory: str = "1536m",
        checkpoint_interval: str = "10s",
        extra_config: dict[str, str] | None = None,
    ) -> None:
        self.root = Path(root).resolve()
        self.dist = dist or FlinkDistribution.locate()
        self.slots = slots
        self.jobmanager_memory = jobmanager_memory
        self.taskmanager_memory = taskmanager_memory
        self.checkpoint_interval = checkpoint_interval
        self.extra_config = dict(extra_config or {})
        self.rest_port: int | None = None
        self._children: dict[str, subprocess.Popen] = {}
        self._lock_fd: int | None = None

    # -- paths -----------------------------------------------------------------------------------
    @property
    def conf_dir(self) -> Path:
        return self.root / "conf"

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    @property
    def savepoint_dir(self) -> Path:
        return self.root / "savepoints"

    @property
    def checkpoint_dir(self) -> Path:
        return self.root / "checkpoints"

    @property
    def rest_url(self) -> str:
        if self.rest_port is None:
            raise FlinkClusterError("the Flink cluster is not started")
        return f"http://localhost:{self.rest_port}"

    @property
    def taskmanager_out(self) -> Path:
        """The TaskManager's stdout: where print sinks write."""
        return self.log_dir / "taskmanager.out"

    def pids(self) -> dict[str, int]:
        return {role: p.pid for role, p in self._children.items()}

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self, timeout_s: float = 180.0) -> None:
        """Start the JobManager and TaskManager; return once a TaskManager has registered."""
        if self._children and all(p.poll() is None for p in self._children.values()):
            return
        self.root.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        await asyncio.to_thread(self.reap_orphans)
        self._prepare_dirs()
        self.rest_port = free_port()
        self._write_config(rpc_port=free_port())
        env = self._env()
        for role in ("jobmanager", "taskmanager"):
            self._children[role] = self._spawn(role, env)
        self._write_state()
        try:
            await self._wait_ready(timeout_s)
        except BaseException:
            await self.stop()
            raise

    def _spawn(self, role: str, env: dict[str, str]) -> subprocess.Popen:
        # The scripts exec java, so the child's pid is the JVM's. preexec_fn is the only way to
        # set PR_SET_PDEATHSIG; it runs no Python that could take a lock another thread holds.
        with open(self.log_dir / f"{role}.out", "ab") as out:
            return subprocess.Popen(
                [str(self.dist.home / "bin" / f"{role}.sh"), "start-foreground"],
                env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent, cwd=self.root,  # noqa: PLW1509
            )  # fmt: skip

    async def _wait_ready(self, timeout_s: float) -> None:
        # Flink announces nothing when a TaskManager registers: ask /overview until it counts
        # one, and give up early when a JVM has exited.
        deadline = time.monotonic() + timeout_s
        async with FlinkRest(self.rest_url, timeout_s=5.0) as rest:
            while True:
                for role, p in self._children.items():
                    if p.poll() is not None:
                        raise FlinkClusterError(
                            f"the Flink {role} exited with {p.returncode} while starting; "
                            f"its output ends:\n{self._tail(self.log_dir / f'{role}.out')}"
                        )
                try:
                    if (await rest.overview()).taskmanagers >= 1:
                        return
                except FlinkRestError:
                    pass  # REST not up yet
                if time.monotonic() > deadline:
                    raise FlinkClusterError(
                        f"the Flink cluster at {self.root} was not ready within {timeout_s:.0f} s"
                    )
                await asyncio.sleep(0.25)

    async def healthy(self) -> bool:
        """Both JVMs alive, REST answering, a TaskManager registered."""
        if not self._children or any(p.poll() is not None for p in self._children.values()):
            return False
        try:
            async with FlinkRest(self.rest_url, timeout_s=5.0) as rest:
                return (await rest.overview()).taskmanagers >= 1
        except FlinkRestError:
            return False

    async def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM both JVMs (each stops in ~2 s), SIGKILL what is left at the deadline."""
        children, self._children = self._children, {}
        await asyncio.to_thread(_terminate, [p.pid for p in children.values() if p.poll() is None], timeout_s)
        for p in children.values():
            p.wait()
        (self.root / "cluster.json").unlink(missing_ok=True)
        shutil.rmtree(self.root / "tmp", ignore_errors=True)
        self._release_lock()

    def reap_orphans(self) -> list[int]:
        """Stop JVMs a previous manager of this root left running; the pids it stopped."""
        state = self.root / "cluster.json"
        if not state.exists():
            return []
        try:
            pids = [int(p) for p in json.loads(state.read_text()).get("pids", {}).values()]
        except (ValueError, OSError):
            pids = []
        mine = [p for p in pids if _runs_with(p, str(self.conf_dir))]
        _terminate(mine, 20.0)
        state.unlink(missing_ok=True)
        return mine

    # -- helpers ---------------------------------------------------------------------------------
    def _take_lock(self) -> None:
        if self._lock_fd is not None:
            return
        fd = os.open(self.root / "manager.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise FlinkClusterError(f"another Loam process runs the Flink cluster at {self.root}") from None
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _prepare_dirs(self) -> None:
        for d in ("tmp", "pid"):
            shutil.rmtree(self.root / d, ignore_errors=True)
        for d in ("conf", "log", "checkpoints", "savepoints", "uploads", "tmp", "pid"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        for pattern in ("log4j*.properties", "logback*.xml"):
            for f in (self.dist.home / "conf").glob(pattern):
                shutil.copy(f, self.conf_dir / f.name)

    def config(self, rpc_port: int) -> dict[str, str]:
        py = str(self.dist.python)
        cfg = {
            "env.java.opts.all": wheel_java_opts(self.dist.home),
            "env.pid.dir": str(self.root / "pid"),
            "env.log.dir": str(self.log_dir),
            "jobmanager.bind-host": "localhost",
            "jobmanager.rpc.address": "localhost",
            "jobmanager.rpc.port": str(rpc_port),
            "jobmanager.memory.process.size": self.jobmanager_memory,
            "taskmanager.bind-host": "localhost",
            "taskmanager.host": "localhost",
            "taskmanager.numberOfTaskSlots": str(self.slots),
            "taskmanager.memory.process.size": self.taskmanager_memory,
            "rest.address": "localhost",
            "rest.bind-address": "localhost",
            "rest.port": str(self.rest_port),
            "blob.server.port": "0",
            "taskmanager.rpc.port": "0",
            "parallelism.default": "1",
            "metrics.fetcher.update-interval": "1000",  # status shows restarts within a second
            "execution.checkpointing.interval": self.checkpoint_interval,
            "execution.checkpointing.dir": self.checkpoint_dir.as_uri(),
            "execution.checkpointing.savepoint-dir": self.savepoint_dir.as_uri(),
            "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
            "state.backend.type": "hashmap",
            "web.upload.dir": str(self.root / "uploads"),
            "io.tmp.dirs": str(self.root / "tmp"),
            "python.executable": py,
            "python.client.executable": py,
        }
        cfg.update(self.extra_config)
        return cfg

    def _write_config(self, rpc_port: int) -> None:
        # Flattened keys are valid in Flink 2's config.yaml; values are quoted as YAML strings.
        lines = [f"{k}: {json.dumps(v)}" for k, v in self.config(rpc_port).items()]
        (self.conf_dir / "config.yaml").write_text("\n".join(lines) + "\n")

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            FLINK_HOME=str(self.dist.home), FLINK_CONF_DIR=str(self.conf_dir), JAVA_HOME=str(self.dist.java_home),
            FLINK_LOG_DIR=str(self.log_dir), FLINK_PID_DIR=str(self.root / "pid"), USER=env.get("USER", "loam"),
            PATH=f"{self.dist.venv / 'bin'}:{self.dist.home / 'bin'}:{env.get('PATH', '')}",
        )  # fmt: skip
        env.pop("PYTHONPATH", None)
        return env

    def _write_state(self) -> None:
        state = {"pids": self.pids(), "rest_port": self.rest_port}
        tmp = self.root / "cluster.json.tmp"
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.root / "cluster.json")

    @staticmethod
    def _tail(path: Path, lines: int = 20) -> str:
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no output)"


def _runs_with(pid: int, marker: str) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace"
        )
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _terminate(pids: list[int], timeout_s: float) -> None:
    """SIGTERM each pid's process group, then SIGKILL whatever is alive at the deadline."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.killpg(pid, sig)
            except (ProcessLookupError, PermissionError):
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
        deadline = time.monotonic() + (timeout_s if sig == signal.SIGTERM else 5.0)
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)  # a process's exit wakes nobody but its parent: look again shortly
        if not any(_alive(p) for p in pids):
            return
