"""The domain types of Flink on Loam: a deployment, its versions (each a job spec) and its
savepoints, and the action in flight. Plain dataclasses stored as JSON (encoding version 1),
so the engine runner's own run record can carry them unchanged.

Deployment states and the actions that move between them:

    deploy   -> DEPLOYING -> RUNNING | FAILED
    savepoint   RUNNING -> RUNNING
    suspend     RUNNING -> SUSPENDING -> SUSPENDED
    resume      SUSPENDED -> RESUMING -> RUNNING
    upgrade     RUNNING -> UPGRADING -> RUNNING (new version) | RUNNING (old version, rolled back)
    rollback    RUNNING | SUSPENDED | FAILED -> ROLLING_BACK -> RUNNING
    cancel      any but CANCELLED -> CANCELLED
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

ENCODING = 1
UPGRADE_MODES = ("savepoint", "last-state", "stateless")


class Kind(StrEnum):
    JAR = "jar"  # a DataStream (or Table API) jar, unmodified
    PYTHON = "python"  # a PyFlink script, run through PythonDriver
    SQL = "sql"  # Flink SQL statements, run by loam_engines.flink.sql_runner


class State(StrEnum):
    DEPLOYING = "DEPLOYING"
    RUNNING = "RUNNING"
    SUSPENDING = "SUSPENDING"
    SUSPENDED = "SUSPENDED"
    RESUMING = "RESUMING"
    UPGRADING = "UPGRADING"
    ROLLING_BACK = "ROLLING_BACK"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"


# The state an action may start from. `cancel` works from any state but CANCELLED.
ACTION_FROM: dict[str, frozenset[State]] = {
    "savepoint": frozenset({State.RUNNING}),
    "suspend": frozenset({State.RUNNING}),
    "resume": frozenset({State.SUSPENDED}),
    "upgrade": frozenset({State.RUNNING}),
    "rollback": frozenset({State.RUNNING, State.SUSPENDED, State.FAILED}),
    "cancel": frozenset(set(State) - {State.CANCELLED}),
}


@dataclass(frozen=True)
class JobSpec:
    """What runs: the artifact and how to start it. One per version."""

    kind: Kind
    artifact: str  # an artifact reference (artifacts.py)
    entry_class: str | None = None
    args: tuple[str, ...] = ()
    parallelism: int = 1
    config: dict[str, str] = field(default_factory=dict)
    allow_non_restored_state: bool = False
    # How an upgrade *to* this version carries the state (the Flink operator's modes):
    # savepoint (stop with a savepoint, start from it), last-state (cancel, start from the
    # newest retained checkpoint: no savepoint taken), stateless (cancel, start empty).
    upgrade_mode: str = "savepoint"

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["kind"] = self.kind.value
        d["args"] = list(self.args)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> JobSpec:
        return cls(kind=Kind(d["kind"]), artifact=d["artifact"], entry_class=d.get("entry_class"),
                   args=tuple(d.get("args", ())), parallelism=d.get("parallelism", 1), config=dict(d.get("config", {})),
                   allow_non_restored_state=d.get("allow_non_restored_state", False),
                   upgrade_mode=d.get("upgrade_mode", "savepoint"))  # fmt: skip


@dataclass(frozen=True)
class Version:
    number: int
    spec: JobSpec
    created_ns: int


@dataclass(frozen=True)
class Savepoint:
    path: str
    version: int  # the version whose job wrote it
    job_id: str
    taken_ns: int
    # savepoint | periodic | suspend | upgrade | rollback; last-state: not a savepoint but the
    # retained checkpoint a last-state upgrade started from (kept so a rollback can use it)
    reason: str


@dataclass
class Pending:
    """The action in flight, with the step reached: what a restarted runner resumes from."""

    action: str
    step: str
    target_version: int
    started_ns: int
    job_id: str | None = None  # the job being stopped
    new_job_id: str | None = None  # the job submitted (its id fixed before the submission)
    trigger_id: str | None = None  # Flink's id of a savepoint / stop in progress
    savepoint: str | None = None  # where the new job restores from
    from_version: int | None = None
    stop_requested_ns: int | None = None  # when the old job was asked to stop (downtime starts)
    failed_version: int | None = None  # an upgrade rolling back: the version that failed
    mode: str = "savepoint"  # an upgrade's: savepoint | last-state | stateless (JobSpec.upgrade_mode)


@dataclass
class Deployment:
    name: str
    state: State
    version: int  # the version running (or to resume)
    versions: list[Version]
    generation: int = 0  # bumped per submission: the Flink job id derives from it
    job_id: str | None = None
    savepoints: list[Savepoint] = field(default_factory=list)
    pending: Pending | None = None
    last_error: str | None = None
    created_ns: int = 0
    updated_ns: int = 0
    timings_ms: dict[str, float] = field(default_factory=dict)
    log_seq: int = 0
    savepoint_interval_s: int = 0  # policy: a periodic savepoint this often while RUNNING (0: none)
    running_since_ns: int = 0
    run_id: str = ""  # the engine run that carries this deployment (the shared runner's record)
    action_seq: int = 0  # the run's control action this deployment's last action carried out

    @property
    def periodic(self) -> bool:
        return self.state == State.RUNNING and self.pending is None and self.savepoint_interval_s > 0

    def spec(self, number: int | None = None) -> JobSpec:
        n = self.version if number is None else number
        for v in self.versions:
            if v.number == n:
                return v.spec
        raise KeyError(n)

    def savepoint(self, path: str) -> Savepoint | None:
        return next((s for s in self.savepoints if s.path == path), None)

    def latest_savepoint(self, version: int | None = None) -> Savepoint | None:
        found = [s for s in self.savepoints if version is None or s.version == version]
        return found[-1] if found else None

    def to_json(self) -> bytes:
        d = dataclasses.asdict(self)
        d.pop("periodic", None)
        d["enc"] = ENCODING
        d["state"] = self.state.value
        d["versions"] = [
            {"number": v.number, "spec": v.spec.to_dict(), "created_ns": v.created_ns} for v in self.versions
        ]
        return json.dumps(d, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Deployment:
        d = json.loads(raw)
        return cls(
            name=d["name"], state=State(d["state"]), version=d["version"],
            versions=[Version(v["number"], JobSpec.from_dict(v["spec"]), v["created_ns"]) for v in d["versions"]],
            generation=d.get("generation", 0), job_id=d.get("job_id"),
            savepoints=[Savepoint(**s) for s in d.get("savepoints", [])],
            pending=Pending(**d["pending"]) if d.get("pending") else None,
            last_error=d.get("last_error"), created_ns=d.get("created_ns", 0), updated_ns=d.get("updated_ns", 0),
            timings_ms=dict(d.get("timings_ms", {})), log_seq=d.get("log_seq", 0),
            savepoint_interval_s=d.get("savepoint_interval_s", 0), running_since_ns=d.get("running_since_ns", 0),
            run_id=d.get("run_id", ""), action_seq=d.get("action_seq", 0),
        )  # fmt: skip


def job_id_for(ns: str, d: Deployment) -> str:
    """The Flink job id of the deployment's current generation (its `generation`-th submission):
    fixed in advance, so a runner that crashed after submitting finds the job instead of
    submitting it twice. The creation time keeps a deployment made again under an old name
    (or by another store on the same cluster) from meeting its predecessor's jobs."""
    seed = f"loam-flink/{ns}/{d.name}/{d.created_ns}/{d.generation}"
    return hashlib.sha256(seed.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class LogLine:
    seq: int
    at_ns: int
    text: str
