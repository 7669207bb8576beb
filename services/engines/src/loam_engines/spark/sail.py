"""Sail per namespace: `SailPool` starts a namespace's Sail server on its first call,
keeps the sessions opened on it, and stops it once it has been idle with no open
session.

Sail keeps session state (temp views, config, cached plans) in memory and, restarted,
re-creates any session id it is sent without a word, so stopping a server under an open
session would lose that session's state silently. A session therefore counts as open
from its first call until `ReleaseSession` (PySpark's `spark.stop()`), or until it has
been quiet for Sail's own session timeout (`SAIL_SPARK__SESSION_TIMEOUT_SECS`, set to
the same value here), after which Sail itself has dropped it. A server stops only when
no call is in flight, no session is open and `idle_s` has passed since the last call.
The check runs on a timer armed for the earliest moment it could pass, never on a
polling loop. A call does not touch the timer (that would cost every call a cancel and a
re-arm): a call only moves that moment later, and the timer, when it fires, re-arms
itself for the moment the calls since have moved it to; a session's end, which can move
it earlier, drops the timer for the last call in flight to arm again.

A call naming a session that a stopped or crashed server held is refused
(`SessionLost`) instead of being sent to a fresh server that would re-create it empty.

Warm spares (`spares`, default none here; the engine runner keeps one): a launcher that
has imported pysail and warmed a throwaway server (sail_launcher.py `--spare`) waits,
unassigned; a namespace's start claims it with the namespace's settings, so the start
costs the server's own ~50 ms instead of the import and the first request's process-wide
initialisation. The first spare is made when the pool first starts a server (or by
`prewarm()`), and another after each claim, so a process that never serves Spark never
runs one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from loam_engines import processes

log = logging.getLogger("loam.engines.sail")

LAUNCHER = Path(__file__).with_name("sail_launcher.py")
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


class BackendUnavailable(Exception):
    """The namespace's server cannot be started (no Spark environment, a crash at start)."""


class SessionLost(Exception):
    """The call names a session whose server has stopped since: its state is gone."""


@dataclass
class SailSettings:
    python: Path | None  # the Spark environment's python (.engines/spark/bin/python)
    work_dir: Path  # one working directory per namespace under it (spark-warehouse, ...)
    pid_dir: Path | None = None
    idle_s: float = 300.0
    session_timeout_s: float = 900.0
    start_timeout_s: float = 30.0
    memory_limit_bytes: int = 0  # 0 = no cap
    spill_dir: Path | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    # ns -> a directory of the namespace's own Python packages, on its server's PYTHONPATH
    pydeps: Callable[[str], Path] | None = None
    spares: int = 0  # warm launchers kept ready for the next namespace's start (0 or 1)


def find_spark_python(env_var: str = "LOAM_SPARK_VENV", name: str = "spark") -> Path | None:
    """The python of an engine environment: `$LOAM_SPARK_VENV/bin/python`, else
    `.engines/<name>/bin/python` in the nearest directory above this package that has
    one (a checkout with `make engines-spark` run)."""
    root = os.environ.get(env_var)
    if root:
        p = Path(root) / "bin" / "python"
        return p if p.exists() else None
    for d in Path(__file__).resolve().parents:
        p = d / ".engines" / name / "bin" / "python"
        if p.exists():
            return p
    return None


class SailBackend:
    """One running Sail server of a namespace: its process, port and channel."""

    def __init__(self, ns: str, generation: int, child: processes.Child, port: int) -> None:
        self.ns = ns
        self.generation = generation
        self.child = child
        self.port = port
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS)
        self.inflight = 0
        self.last_call = time.monotonic()
        self.stderr_tail: deque[str] = deque(maxlen=40)
        self.exited = asyncio.Event()
        self.authorization: str | None = None  # sent upstream by the proxy, if the server wants one

    @property
    def pid(self) -> int:
        return self.child.pid


class SailPool:
    """The namespaces' Sail servers. `acquire(ns, session)` -> a running backend (started
    if needed); `release(backend, session, closed)` once the call is over."""

    def __init__(self, settings: SailSettings) -> None:
        self.settings = settings
        self._backends: dict[str, SailBackend] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._generation = 0
        # session id -> (namespace, generation of the server it lives on, last call)
        self._sessions: dict[str, tuple[str, int, float]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task] = set()
        self.starts = 0  # servers started, for tests and the bench
        self.spare_claims = 0  # of those, started from a warm spare
        self._closed = False
        self._spare: asyncio.Task | None = None  # -> (child, stderr tail, stderr task): a ready spare
        self._spare_count = 0

    def backend(self, ns: str) -> SailBackend | None:
        b = self._backends.get(ns)
        return b if b is not None and not b.exited.is_set() else None

    # -- calls ---------------------------------------------------------------------------
    async def acquire(self, ns: str, session: str | None) -> SailBackend:
        if self._closed:
            raise BackendUnavailable("the Spark endpoint is shutting down")
        lock = self._locks.setdefault(ns, asyncio.Lock())
        async with lock:
            backend = self.backend(ns)
            if backend is None:
                backend = await self._start(ns)
            if session:
                known = self._sessions.get(session)
                if known is not None and (known[0] != ns or known[1] != backend.generation):
                    raise SessionLost(
                        f"session {session} was lost when its Spark server stopped; create a new SparkSession"
                    )
                self._sessions[session] = (ns, backend.generation, time.monotonic())
            backend.inflight += 1
            backend.last_call = time.monotonic()
            # The idle timer, if armed, stays: when it fires it finds the call (or the
            # later last_call) and stands down or re-arms, so a call costs no timer churn.
            return backend

    def release(self, backend: SailBackend, session: str | None, closed: bool = False) -> None:
        """The call is over; `closed` when it was the session's ReleaseSession."""
        backend.inflight -= 1
        now = time.monotonic()
        backend.last_call = now
        if session:
            if closed:
                self._sessions.pop(session, None)
                # The stop time may now come earlier than the armed timer's: the timer
                # goes, and the last call in flight arms a new one.
                timer = self._timers.pop(backend.ns, None)
                if timer is not None:
                    timer.cancel()
            elif session in self._sessions:
                ns, gen, _ = self._sessions[session]
                self._sessions[session] = (ns, gen, now)
        if backend.inflight == 0 and backend.ns not in self._timers:
            self._arm(backend)

    # -- idle stop -----------------------------------------------------------------------
    def _stoppable_at(self, backend: SailBackend) -> float:
        """The monotonic time after which `backend` may stop, if nothing happens first."""
        at = backend.last_call + self.settings.idle_s
        for ns, gen, last in self._sessions.values():
            if ns == backend.ns and gen == backend.generation:
                at = max(at, last + self.settings.session_timeout_s)
        return at

    def _arm(self, backend: SailBackend) -> None:
        if self._closed or self._backends.get(backend.ns) is not backend:
            return
        old = self._timers.pop(backend.ns, None)
        if old is not None:
            old.cancel()
        delay = max(0.0, self._stoppable_at(backend) - time.monotonic())
        loop = asyncio.get_running_loop()
        self._timers[backend.ns] = loop.call_later(delay, self._idle_check, backend)

    def _idle_check(self, backend: SailBackend) -> None:
        self._timers.pop(backend.ns, None)
        if backend.inflight or self._backends.get(backend.ns) is not backend:
            return
        if time.monotonic() < self._stoppable_at(backend):
            self._arm(backend)
            return
        log.info("stopping the idle %s server of namespace %s", self.label, backend.ns)
        self._spawn_task(self._stop_idle(backend))

    async def _stop_idle(self, backend: SailBackend) -> None:
        lock = self._locks.setdefault(backend.ns, asyncio.Lock())
        async with lock:
            if backend.inflight or self._backends.get(backend.ns) is not backend:
                return
            await self._stop(backend)

    # -- lifecycle -----------------------------------------------------------------------
    def _base_env(self) -> dict[str, str]:
        """The server's environment, what every namespace's has alike: Loam's minus anything
        Spark- or Loam-credential-shaped, plus the pool's Sail settings."""
        s = self.settings
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SPARK_", "PYSPARK_", "LOAM_TOKEN", "SAIL_"))}  # fmt: skip
        env["SAIL_SPARK__SESSION_TIMEOUT_SECS"] = str(max(1, int(s.session_timeout_s)))
        env.setdefault("RUST_LOG", "info")
        if s.memory_limit_bytes:
            env["SAIL_RUNTIME__MEMORY_POOL__TYPE"] = "greedy"
            env["SAIL_RUNTIME__MEMORY_POOL__GREEDY__MAX_SIZE"] = str(s.memory_limit_bytes)
        env.update(s.extra_env)
        return env

    def _ns_env(self, ns: str) -> dict[str, str]:
        """The namespace's own settings: its spill directory (Sail reads it at start)."""
        s = self.settings
        env = {}
        if s.spill_dir is not None:
            spill = s.spill_dir / processes.path_part(ns)
            spill.mkdir(parents=True, exist_ok=True)
            env["SAIL_RUNTIME__TEMPORARY_FILES__PATHS"] = json.dumps([str(spill)])  # a list
        return env

    def _env(self, ns: str) -> dict[str, str]:
        env = self._base_env()
        env.update(self._ns_env(ns))
        if self.settings.pydeps is not None:
            env["PYTHONPATH"] = str(self.settings.pydeps(ns))
        return env

    # -- warm spares ---------------------------------------------------------------------
    def prewarm(self) -> None:
        """Have a spare ready before the first namespace asks (no-op without `spares`)."""
        if self.settings.spares and self._spare is None and not self._closed:
            self._spare = asyncio.create_task(self._make_spare())

    async def _make_spare(self) -> tuple[processes.Child, deque[str], asyncio.Task]:
        s = self.settings
        self._spare_count += 1
        s.work_dir.mkdir(parents=True, exist_ok=True)
        child = await processes.spawn(
            f"sail-spare-{self._spare_count}",
            [str(s.python), str(LAUNCHER), "--ip", "127.0.0.1", "--port", "0", "--spare"],
            env=self._base_env(), cwd=s.work_dir, pid_dir=s.pid_dir, stop_signal=signal.SIGTERM,
            stdin=asyncio.subprocess.PIPE,
        )  # fmt: skip
        tail: deque[str] = deque(maxlen=40)
        stderr_task = asyncio.create_task(self._drain_stderr("(spare)", child, tail))
        try:
            line = await asyncio.wait_for(child.proc.stdout.readline(), s.start_timeout_s)
            ready = json.loads(line).get("spare") == "ready" if line else False
        except (TimeoutError, ValueError, AttributeError):
            ready = False
        except asyncio.CancelledError:  # the pool is closing while the spare warms up
            await child.stop(grace_s=1.0)
            raise
        if not ready:
            await child.stop(grace_s=1.0)
            raise BackendUnavailable(
                "the spare Sail server did not get ready: " + " | ".join(list(tail)[-3:])
            )
        return child, tail, stderr_task

    async def _claim_spare(
        self, ns: str, cwd: Path
    ) -> tuple[processes.Child, int, deque[str], asyncio.Task] | None:
        """The ready spare, started as `ns`'s server; None if there is none (a cold start follows)."""
        spare, self._spare = self._spare, None
        if spare is None:
            return None
        try:
            child, tail, stderr_task = await spare
        except Exception as e:  # noqa: BLE001 - a spare that failed: start cold, and say why
            log.warning("no warm Sail spare for namespace %s: %s", ns, e)
            return None
        claim = {"cwd": str(cwd), "env": self._ns_env(ns),
                 "sys_path": [str(self.settings.pydeps(ns))] if self.settings.pydeps is not None else []}  # fmt: skip
        try:
            child.proc.stdin.write((json.dumps(claim) + "\n").encode())
            await child.proc.stdin.drain()
            line = await asyncio.wait_for(child.proc.stdout.readline(), self.settings.start_timeout_s)
            port = int(json.loads(line)["port"])
        except (OSError, TimeoutError, ValueError, KeyError, TypeError):
            await child.stop(grace_s=1.0)
            log.warning("the warm Sail spare failed to start namespace %s's server: cold start", ns)
            return None
        self.spare_claims += 1
        return child, port, tail, stderr_task

    async def _close_spare(self) -> None:
        spare, self._spare = self._spare, None
        if spare is None:
            return
        spare.cancel()
        with contextlib.suppress(BaseException):
            child, _, _ = await spare
            await child.stop(grace_s=1.0)

    #: what the logs and errors call this pool's servers
    label = "Sail"

    async def _launch(self, ns: str, cwd: Path) -> tuple[processes.Child, int, deque[str], asyncio.Task]:
        """Start the server process; (child, port, its stderr tail, the task reading it).
        BackendUnavailable if it does not come up."""
        s = self.settings
        if s.python is None or not Path(s.python).exists():
            raise BackendUnavailable(
                "no Spark environment: run `make engines-spark` (or set LOAM_SPARK_VENV)"
            )
        child = await processes.spawn(
            f"sail-{ns}",
            [str(s.python), str(LAUNCHER), "--ip", "127.0.0.1", "--port", "0"],
            env=self._env(ns),
            cwd=cwd,
            pid_dir=s.pid_dir,
            stop_signal=signal.SIGTERM,  # the launcher turns it into a clean stop
        )
        tail: deque[str] = deque(maxlen=40)
        stderr_task = asyncio.create_task(self._drain_stderr(ns, child, tail))
        try:
            line = await asyncio.wait_for(child.proc.stdout.readline(), s.start_timeout_s)
            port = int(json.loads(line)["port"]) if line else None
        except (TimeoutError, ValueError, KeyError, TypeError):
            port = None
        if port is None:
            await self._give_up(ns, child, tail, stderr_task)
        return child, port, tail, stderr_task

    async def _give_up(
        self, ns: str, child: processes.Child, tail: deque[str], stderr_task: asyncio.Task
    ) -> None:
        await child.stop(grace_s=1.0)
        await asyncio.wait({stderr_task}, timeout=1.0)
        detail = " | ".join(list(tail)[-5:]) or "no output"
        raise BackendUnavailable(f"the {self.label} server of namespace {ns!r} did not start: {detail}")

    def _upstream_auth(self) -> str | None:
        """The `authorization` value the proxy sends this pool's servers (None: none)."""
        return None

    async def _start(self, ns: str) -> SailBackend:
        s = self.settings
        cwd = s.work_dir / processes.path_part(ns)
        cwd.mkdir(parents=True, exist_ok=True)
        self._generation += 1
        gen = self._generation
        started = time.monotonic()
        claimed = await self._claim_spare(ns, cwd) if self.settings.spares else None
        child, port, tail, stderr_task = claimed or await self._launch(ns, cwd)
        self.prewarm()  # the next namespace's spare, made now that Spark is in use
        backend = SailBackend(ns, gen, child, port)
        backend.stderr_tail = tail
        backend.authorization = self._upstream_auth()
        try:
            await asyncio.wait_for(backend.channel.channel_ready(), s.start_timeout_s)
        except TimeoutError:
            await self._stop(backend)
            raise BackendUnavailable(f"the {self.label} server of namespace {ns!r} did not answer") from None
        self._backends[ns] = backend
        self.starts += 1
        self._spawn_task(self._watch_exit(backend, stderr_task))
        log.info("started %s for namespace %s on port %d (pid %d) in %.0f ms", self.label, ns, port, child.pid,
                 (time.monotonic() - started) * 1000)  # fmt: skip
        return backend

    async def _drain_stderr(self, ns: str, child: processes.Child, tail: deque[str]) -> None:
        async for raw in child.proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            tail.append(line)
            log.debug("%s[%s] %s", self.label, ns, line)

    async def _watch_exit(self, backend: SailBackend, stderr_task: asyncio.Task) -> None:
        rc = await backend.child.proc.wait()
        with contextlib.suppress(Exception):
            await stderr_task
        backend.exited.set()
        if self._backends.get(backend.ns) is backend:
            del self._backends[backend.ns]
            log.warning("the %s server of namespace %s exited (rc %s)", self.label, backend.ns, rc)
        await backend.channel.close()

    async def _stop(self, backend: SailBackend) -> None:
        if self._backends.get(backend.ns) is backend:
            del self._backends[backend.ns]
        timer = self._timers.pop(backend.ns, None)
        if timer is not None:
            timer.cancel()
        await backend.channel.close()
        await backend.child.stop(grace_s=3.0)
        backend.exited.set()
        # Its sessions are gone with it: keep their ids (SessionLost) but not forever.
        self._forget_expired_sessions()

    def _forget_expired_sessions(self) -> None:
        limit = time.monotonic() - 2 * self.settings.session_timeout_s
        for sid in [sid for sid, (_, _, last) in self._sessions.items() if last < limit]:
            del self._sessions[sid]

    def _spawn_task(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Stop every server (shutdown of the runner)."""
        self._closed = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        await asyncio.gather(*(self._stop(b) for b in list(self._backends.values())), return_exceptions=True)
        await self._close_spare()
        for task in list(self._tasks):
            task.cancel()
