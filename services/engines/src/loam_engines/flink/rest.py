"""A typed async client of Flink's REST API (the subset Loam drives; shared/notes/flink.md §6).

Every call maps Flink's JSON onto small frozen dataclasses, and every error onto
`FlinkRestError`, whose message is the root cause Flink buried in a Java stack trace (the
last `Caused by:` line) rather than the trace itself.

Flink pushes nothing: an asynchronous operation (a savepoint, a stop, a disposal) is a
trigger id to ask about, so `wait_*` ask at a short, growing interval until a deadline.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import httpx

PYTHON_DRIVER = "org.apache.flink.client.python.PythonDriver"
TERMINAL_STATES = frozenset({"FINISHED", "CANCELED", "FAILED"})


class FlinkRestError(Exception):
    """Flink refused a call, or did not answer. `status` is the HTTP status (0: no answer)."""

    def __init__(self, status: int, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.detail = detail

    def __str__(self) -> str:
        return self.message


def root_cause(errors: list[str]) -> str:
    """The line a person can act on: the last `Caused by:` of Flink's first error, else its
    first line (`errors[0]` is often a whole Java stack trace)."""
    if not errors:
        return "Flink gave no reason"
    text = str(errors[0])
    causes = [line.strip() for line in text.splitlines() if line.strip().startswith("Caused by:")]
    if causes:
        return causes[-1][len("Caused by:") :].strip()
    return text.strip().splitlines()[0] if text.strip() else "Flink gave no reason"


@dataclass(frozen=True)
class ClusterOverview:
    taskmanagers: int
    slots_total: int
    slots_available: int
    jobs_running: int
    flink_version: str


@dataclass(frozen=True)
class JobOverview:
    id: str
    name: str
    state: str
    start_time_ms: int


@dataclass(frozen=True)
class Vertex:
    name: str
    status: str
    parallelism: int


@dataclass(frozen=True)
class JobDetail:
    id: str
    name: str
    state: str
    vertices: tuple[Vertex, ...]

    @property
    def all_running(self) -> bool:
        """Flink says RUNNING as soon as the job is scheduled; it truly runs once every vertex does."""
        return (
            self.state == "RUNNING"
            and bool(self.vertices)
            and all(v.status == "RUNNING" for v in self.vertices)
        )


@dataclass(frozen=True)
class CheckpointStats:
    completed: int
    latest_completed_path: str | None
    restored_path: str | None
    failed: int = 0
    latest_completed_ms: int = 0  # when the newest completed (its last acknowledgement), ms
    savepoint_in_progress: bool = False  # a savepoint or a stop-with-savepoint is being taken


@dataclass(frozen=True)
class Jar:
    id: str
    name: str


@dataclass(frozen=True)
class RunRequest:
    entry_class: str | None = None
    args: tuple[str, ...] = ()
    parallelism: int | None = None
    savepoint_path: str | None = None
    allow_non_restored_state: bool = False
    job_id: str | None = None  # 32 hex: lets a retried submission be recognised
    config: dict[str, str] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "programArgsList": list(self.args),
            "allowNonRestoredState": self.allow_non_restored_state,
        }
        if self.entry_class:
            out["entryClass"] = self.entry_class
        if self.parallelism:
            out["parallelism"] = self.parallelism
        if self.savepoint_path:
            out["savepointPath"] = self.savepoint_path
            out["claimMode"] = "NO_CLAIM"  # the savepoint stays ours: rollback may need it again
        if self.job_id:
            out["jobId"] = self.job_id
        if self.config:
            out["flinkConfiguration"] = dict(self.config)
        return out


@dataclass(frozen=True)
class AsyncOperation:
    """A savepoint / stop / disposal: `done` once Flink finished it; `location` on success."""

    done: bool
    location: str | None = None
    failure: str | None = None


class FlinkRest:
    """One Flink cluster's REST API at `base_url` (`http://localhost:<rest.port>`)."""

    def __init__(
        self, base_url: str, *, timeout_s: float = 30.0, client: httpx.AsyncClient | None = None
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = client or httpx.AsyncClient(base_url=self.base_url, timeout=timeout_s)
        self._owns_client = client is None

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _call(self, method: str, path: str, **kw: Any) -> Any:
        try:
            r = await self._client.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise FlinkRestError(0, f"Flink's REST API at {self.base_url} did not answer: {e!r}") from e
        if r.status_code >= 400:
            try:
                errors = r.json().get("errors", [])
            except ValueError:
                errors = [r.text]
            raise FlinkRestError(r.status_code, root_cause(errors), "\n".join(map(str, errors)))
        return r.json() if r.content else {}

    # -- cluster -------------------------------------------------------------------------------
    async def overview(self) -> ClusterOverview:
        d = await self._call("GET", "/overview")
        return ClusterOverview(
            taskmanagers=d.get("taskmanagers", 0), slots_total=d.get("slots-total", 0),
            slots_available=d.get("slots-available", 0), jobs_running=d.get("jobs-running", 0),
            flink_version=d.get("flink-version", ""),
        )  # fmt: skip

    # -- jobs ----------------------------------------------------------------------------------
    async def jobs(self) -> list[JobOverview]:
        d = await self._call("GET", "/jobs/overview")
        return [
            JobOverview(j["jid"], j.get("name", ""), j["state"], j.get("start-time", 0))
            for j in d.get("jobs", [])
        ]

    async def job(self, job_id: str) -> JobDetail | None:
        """None when the cluster does not know the job (never submitted, or a restarted JobManager)."""
        try:
            d = await self._call("GET", f"/jobs/{job_id}")
        except FlinkRestError as e:
            if e.status == 404:
                return None
            raise
        vertices = tuple(
            Vertex(v.get("name", ""), v.get("status", ""), v.get("parallelism", 0))
            for v in d.get("vertices", [])
        )
        return JobDetail(d["jid"], d.get("name", ""), d["state"], vertices)

    async def checkpoints(self, job_id: str) -> CheckpointStats:
        d = await self._call("GET", f"/jobs/{job_id}/checkpoints")
        return checkpoint_stats(d)

    async def restarts(self, job_id: str) -> int:
        d = await self._call("GET", f"/jobs/{job_id}/metrics", params={"get": "numRestarts"})
        for m in d if isinstance(d, list) else []:
            if m.get("id") == "numRestarts":
                return int(float(m.get("value", 0)))
        return 0

    async def exceptions(self, job_id: str) -> list[str]:
        """The job's failures, newest first, each as its root cause."""
        d = await self._call("GET", f"/jobs/{job_id}/exceptions")
        out = []
        for e in (d.get("exceptionHistory") or {}).get("entries", []):
            out.append(root_cause([e.get("stacktrace") or e.get("exceptionName", "")]))
        return out

    async def cancel(self, job_id: str) -> None:
        try:
            await self._call("PATCH", f"/jobs/{job_id}", params={"mode": "cancel"})
        except FlinkRestError as e:
            if e.status != 404:  # already gone: cancelled is what was asked
                raise

    # -- jars ----------------------------------------------------------------------------------
    async def jars(self) -> list[Jar]:
        d = await self._call("GET", "/jars")
        return [Jar(f["id"], f.get("name", "")) for f in d.get("files", [])]

    async def upload_jar(self, path: Path, name: str | None = None) -> str:
        data = await asyncio.to_thread(Path(path).read_bytes)
        files = {"jarfile": (name or Path(path).name, data, "application/x-java-archive")}
        d = await self._call("POST", "/jars/upload", files=files)
        return d["filename"].rsplit("/", 1)[-1]

    async def run_jar(self, jar_id: str, request: RunRequest, timeout_s: float = 120.0) -> str:
        # The JobManager runs the program's main() before it answers (a PyFlink script or
        # the SQL runner starts a Python interpreter there): seconds, more on a busy machine.
        d = await self._call("POST", f"/jars/{jar_id}/run", json=request.body(), timeout=timeout_s)
        return d["jobid"]

    # -- savepoints ----------------------------------------------------------------------------
    async def trigger_savepoint(self, job_id: str, target_dir: str) -> str:
        body = {"target-directory": target_dir, "cancel-job": False, "formatType": "CANONICAL"}
        return (await self._call("POST", f"/jobs/{job_id}/savepoints", json=body))["request-id"]

    async def trigger_stop(self, job_id: str, target_dir: str, *, drain: bool = False) -> str:
        body = {"targetDirectory": target_dir, "drain": drain, "formatType": "CANONICAL"}
        return (await self._call("POST", f"/jobs/{job_id}/stop", json=body))["request-id"]

    async def savepoint_status(self, job_id: str, trigger_id: str) -> AsyncOperation:
        return _operation(await self._call("GET", f"/jobs/{job_id}/savepoints/{trigger_id}"))

    async def wait_savepoint(self, job_id: str, trigger_id: str, timeout_s: float = 120.0) -> str:
        """The savepoint's location once Flink wrote it (FlinkRestError if it failed)."""
        op = await _wait(
            lambda: self.savepoint_status(job_id, trigger_id), timeout_s, f"savepoint of job {job_id}"
        )
        if op.failure or not op.location:
            raise FlinkRestError(409, f"the savepoint of job {job_id} failed: {op.failure or 'no location'}")
        return op.location

    async def dispose_savepoint(self, path: str, timeout_s: float = 60.0) -> None:
        rid = (await self._call("POST", "/savepoint-disposal", json={"savepoint-path": path}))["request-id"]

        async def status() -> AsyncOperation:
            return _operation(await self._call("GET", f"/savepoint-disposal/{rid}"))

        op = await _wait(status, timeout_s, f"disposal of {path}")
        if op.failure:
            raise FlinkRestError(409, f"disposing of {path} failed: {op.failure}")


def checkpoint_stats(d: dict) -> CheckpointStats:
    """GET /jobs/:id/checkpoints: counts, the newest completed checkpoint or savepoint
    (`latest.completed` / `latest.savepoint`, whichever is newer), what the job restored
    from, and whether a savepoint is being taken (an IN_PROGRESS entry of the history
    marked `is_savepoint`: a triggered savepoint, or a stop's)."""
    latest = d.get("latest") or {}
    counts = d.get("counts") or {}
    done = [c for c in (latest.get("completed"), latest.get("savepoint")) if c]
    newest = max(done, key=lambda c: c.get("latest_ack_timestamp") or 0) if done else {}
    restored = latest.get("restored") or {}
    in_progress = any(
        h.get("status") == "IN_PROGRESS" and h.get("is_savepoint") for h in d.get("history") or ()
    )
    return CheckpointStats(
        completed=counts.get("completed", 0),
        latest_completed_path=newest.get("external_path"),
        restored_path=restored.get("external_path"),
        failed=counts.get("failed", 0),
        latest_completed_ms=newest.get("latest_ack_timestamp") or 0,
        savepoint_in_progress=in_progress,
    )


def _operation(d: dict) -> AsyncOperation:
    if (d.get("status") or {}).get("id") != "COMPLETED":
        return AsyncOperation(done=False)
    op = d.get("operation") or {}
    failure = op.get("failure-cause")
    reason = None
    if failure:
        reason = root_cause([failure.get("stack-trace") or failure.get("class", "")])
    return AsyncOperation(done=True, location=op.get("location"), failure=reason)


async def _wait(ask, timeout_s: float, what: str) -> AsyncOperation:
    deadline = time.monotonic() + timeout_s
    delay = 0.05
    while True:
        op = await ask()
        if op.done:
            return op
        if time.monotonic() > deadline:
            raise FlinkRestError(504, f"{what} did not finish within {timeout_s:.0f} s")
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.5)
