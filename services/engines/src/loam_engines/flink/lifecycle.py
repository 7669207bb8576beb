"""The lifecycle of Flink deployments on a session cluster, through Flink's REST API:
deploy, savepoint, suspend, resume, upgrade (rolled back by itself when the new version is
not running and checkpointing by the readiness deadline), rollback, cancel, status, and
`reconcile()` for a runner that restarts mid-action.

Every action is a short program of steps over `Deployment.pending`:

    stop    stop the running job with a savepoint (its trigger id recorded first)
    cancel  a last-state or stateless upgrade: cancel the job, no savepoint; last-state
            restores from its newest retained checkpoint
    submit  submit the target version, from the savepoint, under a job id fixed in advance
    verify  wait until every vertex runs, a checkpoint completed, and nothing restarted

The step reached is recorded before and after each call to Flink (one store transaction
each), so `_drive` run again on the same record continues where it stopped: a job whose
fixed id Flink already knows is adopted, never submitted twice; a stop whose trigger id
Flink still knows is waited for, not repeated. Flink's own checkpoints and savepoints are
the jobs' only state; Loam records their paths (spec §10.2).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loam_common import validate
from loam_common.errors import AlreadyExists, InvalidArgument, JobsError, NotFound
from loam_engines.flink.artifacts import Artifacts, kind_of
from loam_engines.flink.distribution import FlinkDistribution
from loam_engines.flink.model import (
    ACTION_FROM,
    UPGRADE_MODES,
    Deployment,
    JobSpec,
    Kind,
    Pending,
    Savepoint,
    State,
    Version,
    job_id_for,
)  # fmt: skip
from loam_engines.flink.recorder import RunRecorder
from loam_engines.flink.rest import PYTHON_DRIVER, TERMINAL_STATES, FlinkRest, FlinkRestError, RunRequest

log = logging.getLogger(__name__)
SQL_RUNNER = Path(__file__).with_name("sql_runner.py")
MAX_PARALLELISM = 256


class FlinkRefused(JobsError):
    """The action cannot run now, or Flink refused it; the message says why."""

    code = "failed_precondition"


class UpgradeRolledBack(FlinkRefused):
    """The new version did not become ready; the previous one runs again from the savepoint."""


class NotReady(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class JobStatus:
    """What Flink says of a deployment's current job."""

    job_id: str
    state: str
    all_running: bool
    restarts: int
    checkpoints: int
    latest_checkpoint: str | None
    restored_from: str | None
    checkpoints_failed: int = 0
    latest_checkpoint_ms: int = 0
    savepoint_in_progress: bool = False


class FlinkLifecycle:
    def __init__(
        self,
        recorder: RunRecorder,
        rest: FlinkRest,
        artifacts: Artifacts,
        dist: FlinkDistribution,
        *,
        savepoint_dir: Path,
        checkpoint_dir: Path | None = None,
        readiness_timeout_s: float = 90.0,
        savepoint_timeout_s: float = 120.0,
        keep_savepoints: int = 10,
        require_checkpoint: bool = True,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.recorder = recorder
        self.rest = rest
        self.artifacts = artifacts
        self.dist = dist
        self.savepoint_dir = Path(savepoint_dir)
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self.readiness_timeout_s = readiness_timeout_s
        self.savepoint_timeout_s = savepoint_timeout_s
        self.keep_savepoints = keep_savepoints
        self.require_checkpoint = require_checkpoint
        self._now = clock  # ns since the epoch: record times and the periodic policy's
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._jar_ids: dict[str, str] = {}

    # -- actions ---------------------------------------------------------------------------------
    async def deploy(self, ns: str, name: str, spec: JobSpec, *, savepoint: str | None = None,
                     savepoint_interval_s: int = 0, run_id: str = "") -> Deployment:  # fmt: skip
        """Run `spec` as version 1 of a new deployment (or the next version of a cancelled or
        failed one of the same name), from `savepoint` if given; with `savepoint_interval_s`,
        `take_due_savepoints` takes a savepoint that often while it runs."""
        validate.name("name", name)
        if not 0 <= savepoint_interval_s <= 366 * 86400:
            raise InvalidArgument("savepoint_interval_s", "must be 0 (none) to a year, in seconds")
        await self.check_spec(ns, spec)
        if savepoint is not None:
            _check_savepoint_dir(savepoint)
        async with self._lock(ns, name):
            d = await self.recorder.load(ns, name)
            if d is not None and d.state not in (State.CANCELLED, State.FAILED):
                raise AlreadyExists(
                    f"Flink deployment {name!r} exists ({d.state}): upgrade it, or cancel it first", name
                )
            number = (max(v.number for v in d.versions) + 1) if d else 1
            pending = Pending("deploy", "submit", number, self._now(), savepoint=savepoint)
            if d is None:
                d = Deployment(name=name, state=State.DEPLOYING, version=number, versions=[], pending=pending)
            d.versions.append(Version(number, spec, self._now()))
            d.state, d.pending, d.last_error = State.DEPLOYING, pending, None
            d.savepoint_interval_s = savepoint_interval_s
            d.run_id, d.action_seq = run_id, 0
            log = f"deploy v{number} ({spec.kind}, {spec.artifact})" + (
                f" from {savepoint}" if savepoint else ""
            )
            if len(d.versions) == 1:
                if not await self.recorder.create(ns, d, log):
                    raise AlreadyExists(f"Flink deployment {name!r} exists", name)
            else:
                await self.recorder.record(ns, d, log)
            return await self._run(ns, d)

    async def savepoint(self, ns: str, name: str, *, reason: str = "savepoint", seq: int = 0) -> Savepoint:
        """A savepoint of the running job; it keeps running."""
        async with self._lock(ns, name):
            d = await self._for_action(ns, name, "savepoint")
            d.action_seq = max(d.action_seq, seq)
            assert d.job_id is not None
            try:
                trigger = await self.rest.trigger_savepoint(d.job_id, self.savepoint_dir.as_uri())
                location = await self.rest.wait_savepoint(d.job_id, trigger, self.savepoint_timeout_s)
            except FlinkRestError as e:
                raise FlinkRefused(f"the savepoint of {name!r} failed: {e}") from e
            sp = Savepoint(location, d.version, d.job_id, self._now(), reason)
            d.savepoints.append(sp)
            await self.recorder.record(ns, d, f"{reason} savepoint {location}")
            await self._retain(ns, d)
            return sp

    async def take_due_savepoints(self) -> list[tuple[str, str, Savepoint]]:
        """One pass of the periodic policy: a savepoint of every running deployment whose last
        one (or whose start) is older than its interval. One that cannot be taken now (the
        deployment is busy or stopped) goes to the runner's log; the next pass tries again."""
        taken = []
        now = self._now()
        for ns, name in await self.recorder.periodic():
            d = await self.recorder.load(ns, name)
            if d is None or not d.periodic:
                continue
            last = max([d.running_since_ns] + [s.taken_ns for s in d.savepoints if s.job_id == d.job_id])
            if now - last < d.savepoint_interval_s * 1_000_000_000:
                continue
            try:
                taken.append((ns, name, await self.savepoint(ns, name, reason="periodic")))
            except (FlinkRefused, NotFound) as e:  # busy, or no longer running: the next pass sees
                log.warning("periodic savepoint of %s/%s skipped: %s", ns, name, e)
        return taken

    async def suspend(self, ns: str, name: str, *, seq: int = 0) -> Deployment:
        """Stop the job with a savepoint; `resume` continues from it."""
        async with self._lock(ns, name):
            d = await self._for_action(ns, name, "suspend")
            d.action_seq = max(d.action_seq, seq)
            d.state = State.SUSPENDING
            d.pending = Pending("suspend", "stop", d.version, self._now(), job_id=d.job_id)
            await self.recorder.record(ns, d, f"suspend: stop job {d.job_id} with a savepoint")
            return await self._run(ns, d)

    async def resume(self, ns: str, name: str, *, savepoint: str | None = None, seq: int = 0) -> Deployment:
        """Run the suspended version again from its newest savepoint (or a named one)."""
        async with self._lock(ns, name):
            d = await self._for_action(ns, name, "resume")
            d.action_seq = max(d.action_seq, seq)
            sp = self._recorded_savepoint(d, savepoint) if savepoint else d.latest_savepoint()
            d.state = State.RESUMING
            d.pending = Pending("resume", "submit", d.version, self._now(), savepoint=sp.path if sp else None)
            await self.recorder.record(
                ns, d, f"resume v{d.version}" + (f" from {sp.path}" if sp else " without state")
            )
            return await self._run(ns, d)

    async def upgrade(self, ns: str, name: str, spec: JobSpec, *, seq: int = 0) -> Deployment:
        """Run `spec` as the next version, carrying the state as its `upgrade_mode` says (the
        Flink operator's modes): `savepoint` stops the job with a savepoint and starts the new
        version from it; `last-state` cancels the job without a savepoint and starts from its
        newest retained checkpoint (what a savepoint would hold, minus the time since that
        checkpoint, which the sources replay); `stateless` cancels it and starts empty. If the
        new version is not ready by the readiness deadline, the previous one runs again from
        the same state (raises UpgradeRolledBack)."""
        await self.check_spec(ns, spec)
        async with self._lock(ns, name):
            d = await self._for_action(ns, name, "upgrade")
            mode = spec.upgrade_mode
            if mode == "last-state" and not (d.job_id and self._latest_checkpoint(d.job_id)) \
                    and d.latest_savepoint() is None:  # fmt: skip
                raise FlinkRefused(f"{name!r} has no retained checkpoint or savepoint for a last-state upgrade "
                                   "to start from: use the savepoint mode")  # fmt: skip
            d.action_seq = max(d.action_seq, seq)
            number = max(v.number for v in d.versions) + 1
            d.versions.append(Version(number, spec, self._now()))
            d.state = State.UPGRADING
            d.pending = Pending("upgrade", "stop" if mode == "savepoint" else "cancel", number, self._now(),
                                job_id=d.job_id, from_version=d.version, mode=mode)  # fmt: skip
            how = {"savepoint": "stop job {} with a savepoint", "last-state": "cancel job {} (its state: "
                   "the newest retained checkpoint)", "stateless": "cancel job {} (no state carried)"}[mode]  # fmt: skip
            await self.recorder.record(
                ns, d, f"upgrade v{d.version} -> v{number} ({mode}): {how.format(d.job_id)}"
            )
            return await self._run(ns, d)

    async def rollback(
        self, ns: str, name: str, *, version: int | None = None, savepoint: str | None = None, seq: int = 0
    ) -> Deployment:
        """Run a recorded version again from a recorded savepoint. By default the version before
        the current one, from that version's newest savepoint; a running job is stopped with
        a savepoint first (so the state it had is kept, and can be rolled forward to)."""
        async with self._lock(ns, name):
            d = await self._for_action(ns, name, "rollback")
            numbers = [v.number for v in d.versions]
            if version is None:
                earlier = [n for n in numbers if n < d.version]
                if not earlier:
                    raise FlinkRefused(
                        f"{name!r} runs its first version v{d.version}: there is nothing to roll back to"
                    )
                version = earlier[-1]
            if version not in numbers:
                raise NotFound(
                    f"{name!r} has no version {version}: it has {', '.join(f'v{n}' for n in numbers)}"
                )
            if savepoint is not None:
                sp = self._recorded_savepoint(d, savepoint)
            else:
                sp = d.latest_savepoint(version)
                if sp is None:
                    raise FlinkRefused(f"v{version} of {name!r} has no savepoint: name one to roll back from")
            _check_savepoint_dir(sp.path)
            d.action_seq = max(d.action_seq, seq)
            stop = d.state == State.RUNNING and d.job_id is not None
            d.state = State.ROLLING_BACK
            d.pending = Pending("rollback", "stop" if stop else "submit", version, self._now(),
                                job_id=d.job_id if stop else None, savepoint=sp.path, from_version=d.version)  # fmt: skip
            await self.recorder.record(ns, d, f"rollback v{d.version} -> v{version} from {sp.path}")
            return await self._run(ns, d)

    async def cancel(self, ns: str, name: str, *, seq: int = 0) -> Deployment:
        """Cancel the job without a savepoint (Flink keeps its retained checkpoints)."""
        async with self._lock(ns, name):
            d = await self._load(ns, name)
            if d.state == State.CANCELLED:
                raise FlinkRefused(f"{name!r} is already cancelled")
            d.action_seq = max(d.action_seq, seq)
            jobs = {d.job_id, d.pending.new_job_id if d.pending else None} - {None}
            for job in jobs:
                await self._cancel_job(job)
            d.state, d.job_id, d.pending = State.CANCELLED, None, None
            await self.recorder.record(
                ns, d, "cancelled" + (f" job {', '.join(sorted(jobs))}" if jobs else "")
            )
            return d

    async def status(self, ns: str, name: str) -> tuple[Deployment, JobStatus | None]:
        d = await self._load(ns, name)
        return d, (await self.job_status(d.job_id) if d.job_id else None)

    async def job_status(self, job_id: str) -> JobStatus | None:
        detail = await self.rest.job(job_id)
        if detail is None:
            return None
        cps = await self.rest.checkpoints(job_id)
        restarts = await self.rest.restarts(job_id) if detail.state not in TERMINAL_STATES else 0
        return JobStatus(job_id, detail.state, detail.all_running, restarts, cps.completed,
                         cps.latest_completed_path, cps.restored_path, cps.failed, cps.latest_completed_ms,
                         cps.savepoint_in_progress)  # fmt: skip

    async def reconcile(self) -> list[tuple[str, str]]:
        """Finish every action a previous runner left in flight; the deployments it touched."""
        done = []
        for ns, name in await self.recorder.in_flight():
            async with self._lock(ns, name):
                d = await self.recorder.load(ns, name)
                if d is None or d.pending is None:
                    continue
                await self.recorder.record(
                    ns, d, f"resume {d.pending.action} at step {d.pending.step} after a restart"
                )
                with contextlib.suppress(FlinkRefused):
                    await self._run(ns, d)
                done.append((ns, name))
        return done

    async def recover(self, ns: str, name: str) -> Deployment | None:
        """A RUNNING deployment whose job the cluster does not know runs again, under a new job
        id, from its job's newest retained checkpoint, else its newest savepoint. That is the
        case after the runner (and with it the session cluster, whose JobManager keeps no jobs
        across a restart) died: the deployment's state is its checkpoints on disk. None when
        there was nothing to recover."""
        async with self._lock(ns, name):
            d = await self.recorder.load(ns, name)
            if d is None or d.pending is not None or d.state != State.RUNNING or d.job_id is None:
                return None
            if await self.rest.job(d.job_id) is not None:
                return None
            sp = d.latest_savepoint()
            restore = self._latest_checkpoint(d.job_id) or (sp.path if sp else None)
            lost, d.state, d.job_id = d.job_id, State.RESUMING, None
            d.pending = Pending("recover", "submit", d.version, self._now(), savepoint=restore)
            await self.recorder.record(ns, d, f"job {lost} was lost with the previous cluster: v{d.version} runs "
                                       f"again from {restore or 'no state'}")  # fmt: skip
            with contextlib.suppress(FlinkRefused):  # recorded as FAILED with the reason
                await self._run(ns, d)
            return d

    def _latest_checkpoint(self, job_id: str) -> str | None:
        """The newest completed checkpoint a job left on disk (retained: RETAIN_ON_CANCELLATION)."""
        if self.checkpoint_dir is None:
            return None
        done = [p for p in (self.checkpoint_dir / job_id).glob("chk-*") if (p / "_metadata").exists()]
        if not done:
            return None
        return max(done, key=lambda p: int(p.name.split("-", 1)[1])).as_uri()

    # -- validation --------------------------------------------------------------------------------
    async def check_spec(self, ns: str, spec: JobSpec) -> None:
        """Refuse a spec Flink could not run, before anything changes."""
        self.artifacts.check_ref(spec.artifact)
        if kind_of(spec.artifact) != spec.kind:
            raise InvalidArgument("artifact", f"{spec.artifact!r} is not a {spec.kind} artifact")
        if spec.upgrade_mode not in UPGRADE_MODES:
            raise InvalidArgument("upgrade_mode", f"{spec.upgrade_mode!r}: use {', '.join(UPGRADE_MODES)}")
        if not 1 <= spec.parallelism <= MAX_PARALLELISM:
            raise InvalidArgument("parallelism", f"must be 1-{MAX_PARALLELISM}")
        if spec.kind != Kind.JAR and spec.entry_class:
            raise InvalidArgument("entry_class", f"is for jar jobs; a {spec.kind} job has none")
        if not await self.artifacts.exists(ns, spec.artifact):
            raise NotFound(f"no artifact {spec.artifact!r} in this namespace: upload it first")

    # -- the step machine ------------------------------------------------------------------------
    async def _run(self, ns: str, d: Deployment) -> Deployment:
        failure = await self._drive(ns, d)
        if failure is not None:
            raise failure
        return d

    async def _drive(self, ns: str, d: Deployment) -> FlinkRefused | None:
        failure: FlinkRefused | None = None
        while d.pending is not None:
            p = d.pending
            try:
                if p.step == "stop":
                    await self._step_stop(ns, d)
                elif p.step == "cancel":
                    await self._step_cancel(ns, d)
                elif p.step == "submit":
                    await self._step_submit(ns, d)
                elif p.step == "verify":
                    await self._step_verify(ns, d)
                else:
                    raise NotReady(f"unknown step {p.step!r}")
            except (NotReady, FlinkRestError) as e:
                failure = await self._failed(ns, d, str(e))
        return failure

    async def _step_stop(self, ns: str, d: Deployment) -> None:
        p = d.pending
        assert p is not None and p.job_id is not None
        job = p.job_id
        try:
            if p.trigger_id is None:
                p.stop_requested_ns = self._now()
                p.trigger_id = await self.rest.trigger_stop(job, self.savepoint_dir.as_uri())
                await self.recorder.record(ns, d)
            location = await self.rest.wait_savepoint(job, p.trigger_id, self.savepoint_timeout_s)
        except FlinkRestError as e:
            detail = await self.rest.job(job)
            if (
                e.status == 404
                and p.trigger_id is not None
                and detail is not None
                and detail.state == "RUNNING"
            ):
                p.trigger_id = None  # a restarted JobManager forgot the trigger: stop again
                return
            lost_at = self._latest_checkpoint(job) if detail is None else None
            if lost_at is not None:
                # The job went with the cluster (the runner died mid-action, and its JVMs with
                # it): its newest retained checkpoint stands in for the savepoint it was taking.
                await self._stopped(ns, d, job, lost_at, f"job {job} was lost with the previous cluster; "
                                    f"its newest checkpoint {lost_at} stands in for the savepoint")  # fmt: skip
                return
            # The job did not stop, or its savepoint failed: abandon the action, and say so;
            # a job still running stays the deployment's job.
            running = detail is not None and detail.state == "RUNNING"
            d.state, d.pending = (State.RUNNING if running else State.FAILED), None
            if not running:
                d.job_id = None
            if p.action == "upgrade":
                d.versions = [v for v in d.versions if v.number != p.target_version]
            d.last_error = f"{p.action} abandoned: stopping job {job} with a savepoint failed: {e}"
            await self.recorder.record(ns, d, d.last_error)
            raise FlinkRefused(d.last_error) from e
        await self._wait_stopped(job)
        self._forget_checkpoints(job)
        await self._stopped(ns, d, job, location, f"job {job} stopped with savepoint {location}")

    async def _step_cancel(self, ns: str, d: Deployment) -> None:
        """A last-state or stateless upgrade: the old job is cancelled, no savepoint taken.
        Cancelling a job that is gone (a restarted runner) is no error, so this step may run
        again. last-state goes on from the job's newest retained checkpoint (Flink keeps it on
        cancel: RETAIN_ON_CANCELLATION), recorded as a restore point a rollback can use; a job
        lost without one goes on from the deployment's newest savepoint."""
        p = d.pending
        assert p is not None and p.job_id is not None
        job = p.job_id
        if p.stop_requested_ns is None:
            p.stop_requested_ns = self._now()
        try:
            await self._cancel_job(job)
        except (NotReady, FlinkRestError) as e:
            # The job did not go: abandon the upgrade, and say so; a job still running stays
            # the deployment's (as when a savepoint upgrade's stop fails).
            detail = await self.rest.job(job)
            running = detail is not None and detail.state not in TERMINAL_STATES
            d.state, d.pending = (State.RUNNING if running else State.FAILED), None
            d.job_id = job if running else None
            d.versions = [v for v in d.versions if v.number != p.target_version]
            d.last_error = f"upgrade abandoned: cancelling job {job} failed: {e}"
            await self.recorder.record(ns, d, d.last_error)
            raise FlinkRefused(d.last_error) from e
        d.job_id = None
        line = f"job {job} cancelled"
        if p.mode == "last-state":
            checkpoint = self._latest_checkpoint(job)
            if checkpoint is not None:
                d.savepoints.append(Savepoint(checkpoint, d.version, job, self._now(), "last-state"))
                p.savepoint = checkpoint
            else:
                sp = d.latest_savepoint()
                p.savepoint = sp.path if sp else None
            line += f"; v{p.target_version} starts from " + (p.savepoint or "no state (nothing retained)")
        else:
            p.savepoint = None
            line += f"; v{p.target_version} starts without state"
        p.step = "submit"
        await self.recorder.record(ns, d, line)
        await self._retain(ns, d)

    async def _stopped(self, ns: str, d: Deployment, job: str, location: str, line: str) -> None:
        """The old job is gone and `location` holds its state: the action goes on from it."""
        p = d.pending
        assert p is not None
        d.savepoints.append(Savepoint(location, d.version, job, self._now(), p.action))
        d.job_id = None
        if p.action == "suspend":
            d.state, d.pending = State.SUSPENDED, None
            d.timings_ms["suspend_ms"] = (self._now() - p.started_ns) / 1e6
            await self.recorder.record(ns, d, f"{line}; suspended at {location}")
        else:
            if p.action == "upgrade":
                p.savepoint = location
            p.step, p.trigger_id = "submit", None
            await self.recorder.record(ns, d, line)
        await self._retain(ns, d)

    async def _step_submit(self, ns: str, d: Deployment) -> None:
        p = d.pending
        assert p is not None
        if p.new_job_id is None:
            d.generation += 1
            p.new_job_id = job_id_for(ns, d)
            await self.recorder.record(ns, d)  # the id is known before Flink hears of it
        if await self.rest.job(p.new_job_id) is None:
            request = await self._run_request(ns, d.spec(p.target_version), p.new_job_id, p.savepoint)
            jar_id = await self._jar_for(ns, d.spec(p.target_version))
            try:
                await self.rest.run_jar(jar_id, request)
            except FlinkRestError as e:
                # No answer is not a refusal: the submission may still be under way, under the
                # job id fixed for it. A retried submission Flink already has is no refusal either.
                if e.status == 0:
                    if not await self._appears(p.new_job_id):
                        raise NotReady(f"Flink did not take v{p.target_version}: {e}") from e
                elif "Duplicate" not in e.detail:
                    raise NotReady(f"Flink refused v{p.target_version}: {e}") from e
        d.job_id = p.new_job_id
        p.step = "verify"
        await self.recorder.record(ns, d, f"submitted v{p.target_version} as job {p.new_job_id}"
                                   + (f" from {p.savepoint}" if p.savepoint else ""))  # fmt: skip

    async def _step_verify(self, ns: str, d: Deployment) -> None:
        p = d.pending
        assert p is not None and p.new_job_id is not None
        await self._wait_ready(p.new_job_id)
        now = self._now()
        d.version, d.state, d.pending, d.running_since_ns = p.target_version, State.RUNNING, None, now
        d.timings_ms[f"{p.action}_ms"] = (now - p.started_ns) / 1e6
        if p.stop_requested_ns is not None:  # from the stop request to the new job checkpointing
            d.timings_ms[f"{p.action}_downtime_ms"] = (now - p.stop_requested_ns) / 1e6
        if p.action == "upgrade" and p.failed_version is None:
            d.last_error = None
        await self.recorder.record(ns, d, f"v{d.version} running as job {d.job_id} ({p.action} took "
                                   f"{d.timings_ms[f'{p.action}_ms']:.0f} ms)")  # fmt: skip

    async def _failed(self, ns: str, d: Deployment, reason: str) -> FlinkRefused:
        """The target version did not start. An upgrade rolls back to the version it came from;
        any other action leaves the deployment FAILED with the reason."""
        p = d.pending
        assert p is not None
        if p.new_job_id is not None:
            await self._cancel_job(p.new_job_id)
        stateless = p.mode == "stateless"  # the previous version then starts empty too
        if (
            p.action == "upgrade"
            and p.failed_version is None
            and p.from_version is not None
            and (p.savepoint or stateless)
        ):
            failed = p.target_version
            d.last_error = f"upgrade to v{failed} failed: {reason}"
            p.failed_version, p.target_version, p.new_job_id, p.step = failed, p.from_version, None, "submit"
            d.job_id = None
            source = p.savepoint or "no state"
            await self.recorder.record(
                ns, d, f"{d.last_error}; rolling back to v{p.from_version} from {source}"
            )
            return UpgradeRolledBack(f"{d.last_error}; v{p.from_version} runs again from {source}")
        d.state, d.job_id, d.pending = State.FAILED, None, None
        d.last_error = f"{p.action} of v{p.target_version} failed: {reason}"
        await self.recorder.record(ns, d, d.last_error)
        return FlinkRefused(d.last_error)

    async def _wait_ready(self, job_id: str) -> None:
        # Ready = every vertex RUNNING, a checkpoint completed since the start, no failure.
        # A failure shows at once in the job's exception history (the numRestarts metric lags
        # by the JobManager's metric fetch interval). Flink announces none of this: ask at a
        # short interval until the deadline.
        deadline = time.monotonic() + self.readiness_timeout_s
        state = "unknown"
        while time.monotonic() < deadline:
            detail = await self.rest.job(job_id)
            if detail is not None:
                state = detail.state
                causes = await self.rest.exceptions(job_id)
                if causes:
                    raise NotReady(f"job {job_id} failed: {causes[0]}")
                if state in TERMINAL_STATES:
                    raise NotReady(f"job {job_id} is {state}")
                if detail.all_running and (
                    not self.require_checkpoint or (await self.rest.checkpoints(job_id)).completed
                ):
                    return
            await asyncio.sleep(0.25)
        raise NotReady(f"job {job_id} was not running and checkpointing within {self.readiness_timeout_s:.0f} s "
                       f"(state {state})")  # fmt: skip

    async def _appears(self, job_id: str) -> bool:
        """Whether Flink gets to know the job within the readiness deadline (asked at a short
        interval: Flink announces nothing)."""
        deadline = time.monotonic() + self.readiness_timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(FlinkRestError):
                if await self.rest.job(job_id) is not None:
                    return True
            await asyncio.sleep(0.5)
        return False

    async def _wait_stopped(self, job_id: str) -> None:
        # A savepoint completes (a cancel returns) a moment before the job reaches FINISHED
        # (CANCELED) and frees its slots.
        deadline = time.monotonic() + self.savepoint_timeout_s
        while time.monotonic() < deadline:
            detail = await self.rest.job(job_id)
            if detail is None or detail.state in TERMINAL_STATES:
                return
            await asyncio.sleep(0.1)
        raise NotReady(
            f"job {job_id} wrote its savepoint but did not stop within {self.savepoint_timeout_s:.0f} s"
        )

    # -- Flink requests ----------------------------------------------------------------------------
    async def _run_request(self, ns: str, spec: JobSpec, job_id: str, savepoint: str | None) -> RunRequest:
        path = await self.artifacts.local_path(ns, spec.artifact)
        py = str(self.dist.python)
        python_args = ["-pyexec", py, "-pyclientexec", py]
        if spec.kind == Kind.JAR:
            entry, args = spec.entry_class, list(spec.args)
        elif spec.kind == Kind.PYTHON:
            entry, args = PYTHON_DRIVER, ["-py", str(path), *python_args, *spec.args]
        else:
            entry, args = PYTHON_DRIVER, ["-py", str(SQL_RUNNER), *python_args, "--script", str(path)]
        return RunRequest(entry_class=entry, args=tuple(args), parallelism=spec.parallelism, savepoint_path=savepoint,
                          allow_non_restored_state=spec.allow_non_restored_state, job_id=job_id,
                          config=dict(spec.config))  # fmt: skip

    async def _jar_for(self, ns: str, spec: JobSpec) -> str:
        if spec.kind == Kind.JAR:
            path = await self.artifacts.local_path(ns, spec.artifact)
            upload_name = spec.artifact.replace("/", "-")  # <sha256>-<filename>.jar: one upload per content
        else:
            path = self.dist.python_jar
            upload_name = path.name
        if upload_name not in self._jar_ids:
            known = {j.name: j.id for j in await self.rest.jars()}
            self._jar_ids[upload_name] = known.get(upload_name) or await self.rest.upload_jar(
                path, upload_name
            )
        return self._jar_ids[upload_name]

    async def _cancel_job(self, job_id: str) -> None:
        detail = await self.rest.job(job_id)
        if detail is not None and detail.state not in TERMINAL_STATES:
            await self.rest.cancel(job_id)
            await self._wait_stopped(job_id)

    # -- savepoint and checkpoint retention ----------------------------------------------------------
    async def _retain(self, ns: str, d: Deployment) -> None:
        """Keep the newest `keep_savepoints` savepoints and the newest of each version (what a
        rollback needs); dispose of the others."""
        newest_per_version = {s.version: s.path for s in d.savepoints}
        keep = {s.path for s in d.savepoints[-self.keep_savepoints :]} | set(newest_per_version.values())
        if d.pending and d.pending.savepoint:
            keep.add(d.pending.savepoint)
        dropped = [s for s in d.savepoints if s.path not in keep]
        if not dropped:
            return
        for s in dropped:
            if s.reason == "last-state" and self.checkpoint_dir is not None:
                # a retained checkpoint of a cancelled job: its job's whole directory goes
                shutil.rmtree(self.checkpoint_dir / s.job_id, ignore_errors=True)
                continue
            try:
                await self.rest.dispose_savepoint(s.path)
            except FlinkRestError:
                shutil.rmtree(_local(s.path), ignore_errors=True)
        d.savepoints = [s for s in d.savepoints if s.path in keep]
        await self.recorder.record(ns, d, f"disposed of {len(dropped)} old savepoint(s)")

    def _forget_checkpoints(self, job_id: str) -> None:
        # A job stopped with a savepoint leaves checkpoints/<job>/ with empty shared/ and
        # taskowned/ behind; the savepoint supersedes them.
        if self.checkpoint_dir is not None:
            shutil.rmtree(self.checkpoint_dir / job_id, ignore_errors=True)

    # -- helpers -----------------------------------------------------------------------------------
    def _lock(self, ns: str, name: str) -> asyncio.Lock:
        return self._locks.setdefault((ns, name), asyncio.Lock())

    async def _load(self, ns: str, name: str) -> Deployment:
        validate.name("name", name)
        d = await self.recorder.load(ns, name)
        if d is None:
            raise NotFound(f"no Flink deployment {name!r} in this namespace")
        return d

    async def _for_action(self, ns: str, name: str, action: str) -> Deployment:
        d = await self._load(ns, name)
        if d.pending is not None:
            raise FlinkRefused(f"{name!r} is busy: {d.pending.action} is at step {d.pending.step}")
        if d.state not in ACTION_FROM[action]:
            allowed = " or ".join(sorted(ACTION_FROM[action]))
            raise FlinkRefused(f"cannot {action} {name!r}: it is {d.state}, and {action} needs {allowed}")
        return d

    @staticmethod
    def _recorded_savepoint(d: Deployment, path: str) -> Savepoint:
        sp = d.savepoint(path) or d.savepoint(path.replace("file:///", "file:/"))
        if sp is None:
            raise NotFound(f"{path!r} is not a savepoint of {d.name!r}: see its savepoints in status")
        return sp


def _local(path: str) -> Path:
    for prefix in ("file://", "file:"):
        if path.startswith(prefix):
            return Path(path[len(prefix) :])
    return Path(path)


def _check_savepoint_dir(path: str) -> None:
    if not (_local(path) / "_metadata").exists():
        raise NotFound(f"no savepoint at {path!r} (no _metadata there)")
