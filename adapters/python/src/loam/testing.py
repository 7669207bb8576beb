"""`loam.testing`: test against the real server, in your own test suite.

    from loam.testing import LoamServer

    with LoamServer() as server:            # `loam dev` on a free port, temp data dir
        kit = server.kit()                   # a namespace of its own + a SyncClient
        kit.client.enqueue("emails", "send", {"to": "a@example.com"})
        kit.assert_enqueued("emails", name="send", payload={"to": "a@example.com"})
        ran = kit.drain("emails", send)      # run jobs until none are left
        assert ran[0].ok

With pytest the fixtures come ready (this module is a pytest plugin, registered by the
`loam` package): `loam_server` (one server per test session; `LOAM_TEST_URL` points
the session at a server you started yourself) and `loam` (a `LoamTestKit` in a fresh
namespace per test, so tests do not see each other's jobs).

The server is `python -m loam_gateway.dev` in a subprocess: the same code `loam dev`
runs, so what passes here passes against a real deployment's semantics.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the client stack is imported on first use, so loading the plugin is cheap
    import pytest

    from loam.client import Client, SyncClient
    from loam.views import JobInfo, LeasedJob

__all__ = ["ANY", "LoamServer", "LoamTestKit", "Ran", "drain", "free_port"]

PENDING = ("waiting", "prioritized", "delayed")


class _Any:
    def __eq__(self, other: object) -> bool:
        return True

    def __repr__(self) -> str:
        return "ANY"


#: matches any payload in assertions
ANY: Any = _Any()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class LoamServer:
    """`loam dev` in a subprocess on a free port, with a temporary data directory
    (removed on stop unless `data_dir` was given). `start()` returns once it answers
    /healthz; `stop()` stops it as Ctrl-C does."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        auth: bool = False,
        startup_timeout: float = 60.0,
        python: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.auth = auth
        self.startup_timeout = startup_timeout
        self.python = python or sys.executable
        self.env = env
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        assert self.data_dir is not None
        return self.data_dir / "server.log"

    def start(self) -> LoamServer:
        if self.proc is not None:
            return self
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="loam-test-"))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fixed = self.port is not None
        for attempt in range(3):  # a free port can be taken between probing and binding
            if not fixed:
                self.port = free_port(self.host)
            try:
                self._spawn()
                return self
            except RuntimeError:
                self._kill()
                if fixed or attempt == 2:
                    raise
        return self

    def _spawn(self) -> None:
        argv = [self.python, "-m", "loam_gateway.dev", "--host", self.host, "--port", str(self.port),
                "--data", str(self.data_dir)]  # fmt: skip
        if self.auth:
            argv.append("--auth")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(self.env or {})}
        if not self.auth:
            env.pop("LOAM_AUTH", None)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"loam dev exited with {self.proc.returncode}:\n{self._tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        raise RuntimeError(
            f"loam dev did not become healthy in {self.startup_timeout:.0f} s:\n{self._tail()}"
        )

    def _tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        self._kill()
        if self._own_dir and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None

    def __enter__(self) -> LoamServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what tests use ------------------------------------------------------------------
    def client(self, *, namespace: str | None = None, token: str | None = None, **kw: Any) -> Client:
        """A new async client of this server (close it, or use `async with`)."""
        from loam.client import Client

        return Client(self.url, namespace=namespace, token=token, **kw)

    def sync_client(self, *, namespace: str | None = None, token: str | None = None, **kw: Any) -> SyncClient:
        from loam.client import SyncClient

        return SyncClient(self.url, namespace=namespace, token=token, **kw)

    def kit(self, namespace: str | None = None, *, token: str | None = None) -> LoamTestKit:
        return LoamTestKit(self.url, namespace=namespace, token=token)


@dataclass(slots=True)
class Ran:
    """One job `drain` ran: the job, its outcome kind ("ok", "retry", "fail",
    "release", ...), the handler's result (ok) or the error message (retry, fail)."""

    job: LeasedJob
    outcome: str
    result: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


async def drain(
    client: Client,
    queues: str | Iterable[str],
    handler: Callable[[LeasedJob], Any],
    *,
    max_jobs: int = 10_000,
    promote_delayed: bool = False,
    names: Iterable[str] | None = None,
) -> list[Ran]:
    """Lease and run jobs of `queues` one at a time, in the server's order, until none
    is ready; a retried job that comes straight back (no backoff) runs again.
    `promote_delayed` also runs delayed jobs (and retries waiting out a backoff) at once.
    Handlers run as a Worker runs them (same outcome rules)."""
    from loam import payloads
    from loam.worker import outcome_of

    qs = [queues] if isinstance(queues, str) else list(queues)
    ran: list[Ran] = []
    while len(ran) < max_jobs:
        jobs = await client.lease(qs, max=1, wait=0, names=names)
        if not jobs:
            if promote_delayed and await _promote(client, qs):
                continue
            break
        job = jobs[0]
        outcome = await outcome_of(handler, job)
        await client.complete(job, outcome)
        kind = outcome.WhichOneof("kind")
        r = Ran(job, kind)
        if kind == "ok" and outcome.ok.HasField("result"):
            r.result = payloads.decode(outcome.ok.result)
        elif kind in ("retry", "fail"):
            r.error = getattr(outcome, kind).error.message
        ran.append(r)
    return ran


async def _promote(client: Client, queues: list[str]) -> int:
    moved = 0
    for q in queues:
        if (await client.queue_counts(q))["delayed"]:
            moved += await client.promote_all(q)
    return moved


class LoamTestKit:
    """A namespace of its own on a running server, a `SyncClient` bound to it
    (`.client`), and assertions over what is in its queues."""

    def __init__(self, url: str, *, namespace: str | None = None, token: str | None = None) -> None:
        from loam.client import SyncClient

        self.url = url
        self.token = token
        self.namespace = namespace or (None if token else f"test-{uuid.uuid4().hex[:12]}")
        self.client = SyncClient(url, namespace=self.namespace, token=token)

    def aclient(self, **kw: Any) -> Client:
        """A new async client for the same namespace (close it, or `async with`)."""
        from loam.client import Client

        return Client(self.url, namespace=self.namespace, token=self.token, **kw)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> LoamTestKit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ---------------------------------------------------------------------------
    def jobs(
        self, queue: str, *, states: str | Iterable[str] | None = None, name: str | None = None
    ) -> list[JobInfo]:
        """The queue's jobs (in `states`, with task `name`), newest first; none for a
        queue that does not exist yet."""
        from loam.errors import NotFound

        try:
            return list(self.client.iter_jobs(queue, states=states, name=name))
        except NotFound:
            return []

    def counts(self, queue: str) -> dict[str, Any]:
        """Jobs per state (all 0 for a queue that does not exist yet), and `paused`."""
        from loam.errors import NotFound

        try:
            return self.client.queue_counts(queue)
        except NotFound:
            from loam_common.gen.loam.jobs.v1 import types_pb2

            return {
                f.name: False if f.name == "paused" else 0 for f in types_pb2.QueueCounts.DESCRIPTOR.fields
            }

    # -- assertions ------------------------------------------------------------------------
    def assert_enqueued(
        self,
        queue: str,
        name: str | None = None,
        *,
        payload: Any = ANY,
        count: int | None = None,
        states: str | Iterable[str] = PENDING,
    ) -> list[JobInfo]:
        """Assert jobs wait in `queue` (waiting, prioritized or delayed by default) with
        task `name` and `payload`; exactly `count` of them if given, else at least one.
        Returns the matching jobs, oldest first."""
        found = [j for j in self.jobs(queue, states=states, name=name) if payload == j.payload]
        found.reverse()
        what = (
            f"{queue!r}"
            + (f" named {name!r}" if name else "")
            + ("" if payload is ANY else f" with payload {payload!r}")
        )
        if count is None:
            assert found, f"no job enqueued in {what}; the queue has: {self._summary(queue)}"
        else:
            assert len(found) == count, (
                f"{len(found)} job(s) enqueued in {what}, expected {count}; the queue has: {self._summary(queue)}"
            )
        return found

    def assert_not_enqueued(self, queue: str, name: str | None = None, *, payload: Any = ANY) -> None:
        self.assert_enqueued(queue, name, payload=payload, count=0)

    def assert_counts(self, queue: str, **expected: int) -> None:
        """`kit.assert_counts("emails", completed=3, failed=0)`."""
        counts = self.counts(queue)
        wrong = {k: (counts.get(k), v) for k, v in expected.items() if counts.get(k) != v}
        assert not wrong, "counts differ (actual, expected): " + ", ".join(
            f"{k}={a},{e}" for k, (a, e) in wrong.items()
        )

    def _summary(self, queue: str) -> str:
        jobs = self.jobs(queue)[:20]
        return ", ".join(f"{j.name}[{j.state}]={j.payload!r}" for j in jobs) or "no jobs"

    # -- running ---------------------------------------------------------------------------
    def drain(self, queues: str | Iterable[str], handler: Callable[[LeasedJob], Any], **kw: Any) -> list[Ran]:
        """Run jobs until none is ready (see `loam.testing.drain`)."""
        return self.client.run(drain(self.client.aclient, queues, handler, **kw))

    def work(self, queues: str | Iterable[str], handler: Any, *, idle: float = 0.5, **worker_kw: Any) -> Any:
        """Run a real `loam.Worker` until it has had nothing to do for `idle` seconds;
        returns the worker (its counters: processed, retried, failed, released)."""
        from loam.worker import Worker

        worker = Worker(self.client.aclient, queues, handler, **worker_kw)
        self.client.run(worker.run_until_idle(idle))
        return worker


# -- the pytest plugin ------------------------------------------------------------------------
try:
    import pytest as _pytest
except ImportError:  # pragma: no cover - pytest is optional
    _pytest = None  # type: ignore[assignment]

if _pytest is not None:

    @_pytest.fixture(scope="session")
    def loam_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
        """One `loam dev` for the test session ($LOAM_TEST_URL: use that server instead)."""
        url = os.environ.get("LOAM_TEST_URL")
        if url:
            yield _External(url)
            return
        server = LoamServer(tmp_path_factory.mktemp("loam"))
        server.start()
        try:
            yield server
        finally:
            server.stop()

    @_pytest.fixture
    def loam(loam_server: Any) -> Iterator[LoamTestKit]:
        """A LoamTestKit in a namespace of this test's own."""
        with contextlib.closing(loam_server.kit()) as kit:
            yield kit


class _External:
    """A server somebody else runs, with LoamServer's client-making methods."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    client = LoamServer.client
    sync_client = LoamServer.sync_client
    kit = LoamServer.kit
