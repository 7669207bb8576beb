"""`FlinkActions`: Flink deployments through the shared engine runner (issue 21 on the
runner of issue 20).

A deploy (`SubmitEngineJob(FlinkDeployment)`) and every control action
(`ControlEngineJob`: savepoint, suspend, resume, upgrade, rollback, cancel) is a queue-core
job on `engines.flink`, enqueued by the run facade (loam_engines.service) and leased by
the runner, which hands it here. So the process that owns the Flink session cluster does
every action, whether the request came in through `loam dev` or a queue core of the split
deployment, and a runner that dies mid-action gets the job back.

- The session cluster starts on first use: the first Flink job leased starts it under
  `<data>/flink`; so does a runner's start when a deployment should be running (its
  cluster died with the previous runner: `recover()` runs each again from its newest
  retained checkpoint) or an action was left in flight (`reconcile()` finishes it).
- One engine run per deployment lifetime: the lifecycle's recorder writes the run in the
  same transaction as the deployment (`sync_run`), so the run's state, `flink` status and
  log follow every step.
- Exactly once: a control job carries its action's sequence number (header
  `x-loam-flink-action`); the deployment records the number of the action it carried out
  (`Deployment.action_seq`, written with the action's first step), so a job leased again
  after a crash finds its action done (or finished by `reconcile()` at start-up) instead
  of doing it twice.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loam_common.errors import JobsError
from loam_common.gen.loam.jobs.v1 import engines_pb2 as E
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.store import Store, Txn
from loam_engines import runs
from loam_engines.flink.artifacts import kind_of
from loam_engines.flink.model import Deployment, JobSpec, State
from loam_engines.flink.recorder import StoreRunRecorder
from loam_engines.flink.rest import FlinkRestError

log = logging.getLogger("loam.engines.flink")

QUEUE = "engines.flink"
DEPLOY_CONTENT_TYPE = "application/x-protobuf; type=loam.jobs.v1.EngineJob"
CONTROL_CONTENT_TYPE = "application/x-protobuf; type=loam.jobs.v1.ControlEngineJobRequest"
HEADER_ACTION_SEQ = "x-loam-flink-action"
HEADER_STATUS_SEQ = "x-loam-flink-status"  # a live status read: its request number
ACTIONS = ("savepoint", "suspend", "resume", "upgrade", "rollback", "cancel", "status")

RUN_STATE = {State.CANCELLED: runs.CANCELED, State.FAILED: runs.FAILED}  # any other: RUNNING


def spec_of(f: E.FlinkDeployment) -> JobSpec:
    """The lifecycle's JobSpec of a checked FlinkDeployment whose artifact is stored."""
    return JobSpec(kind=kind_of(f.artifact), artifact=f.artifact, entry_class=f.entry_class or None,
                   args=tuple(f.args), parallelism=f.parallelism or 1, config=dict(f.config),
                   allow_non_restored_state=f.allow_non_restored_state,
                   upgrade_mode=f.upgrade_mode or "savepoint")  # fmt: skip


def status_of(d: Deployment) -> E.FlinkStatus:
    st = E.FlinkStatus(
        deployment=d.name, state=d.state.value, version=d.version, versions=len(d.versions),
        job_id=d.job_id or "", pending_action=d.pending.action if d.pending else "",
        pending_step=d.pending.step if d.pending else "", last_error=d.last_error or "",
    )  # fmt: skip
    st.timings_ms.update(d.timings_ms)
    for s in d.savepoints:
        st.savepoints.add(
            path=s.path, version=s.version, job_id=s.job_id, taken_ns=s.taken_ns, reason=s.reason
        )
    return st


def sync_run(tx: Txn, ns: str, d: Deployment, line: str | None) -> None:
    """The recorder's hook: the deployment's run follows it, in the same transaction."""
    if d.run_id:
        state = RUN_STATE.get(d.state, runs.RUNNING)
        runs.run_flink_sync(tx, ns, d.run_id, status_of(d), state, d.last_error or "", line)


class LinkedRecorder(StoreRunRecorder):
    """The store recorder with the run kept in step, waking whoever follows the run's log."""

    def __init__(self, store: Store, changed: Callable[[str, str], None]) -> None:
        super().__init__(store, linked=sync_run)
        self.changed = changed

    async def record(self, ns: str, deployment: Deployment, log: str | None = None) -> None:
        await super().record(ns, deployment, log)
        if deployment.run_id:
            self.changed(ns, deployment.run_id)

    async def create(self, ns: str, deployment: Deployment, log: str) -> bool:
        created = await super().create(ns, deployment, log)
        if created and deployment.run_id:
            self.changed(ns, deployment.run_id)
        return created


class FlinkActions:
    """Runs the `engines.flink` jobs the runner leases, on a Flink engine it starts on
    first use. `cluster`: an already started LocalFlinkCluster to use (tests share one)."""

    def __init__(self, store: Store, blobs: Any, engine_runs: Any, root: Path, *, cluster: Any = None,
                 **lifecycle_options: Any) -> None:  # fmt: skip
        self.store = store
        self.blobs = blobs
        self.runs = engine_runs
        self.root = Path(root)
        self.cluster = cluster
        self.options = lifecycle_options
        self.recorder = LinkedRecorder(store, engine_runs.changed)
        self._engine: Any = None
        self._starting = asyncio.Lock()

    @property
    def started(self) -> bool:
        return self._engine is not None

    async def engine(self) -> Any:
        """The Flink engine, started now if this is its first use (the session cluster, then
        `reconcile()` of anything left in flight)."""
        async with self._starting:
            if self._engine is None:
                from loam_engines.flink.facade import FlinkEngine  # the cluster's code, on first use

                log.warning("starting the Flink session cluster under %s (first use)", self.root)
                self._engine = await FlinkEngine.start(self.root, self.store, self.blobs, recorder=self.recorder,
                                                       cluster=self.cluster, **self.options)  # fmt: skip
                await self._close_reconciled_actions()
                await self._recover_lost_jobs()
            return self._engine

    async def start(self) -> None:
        """At the runner's start: an action a previous runner left in flight is finished now,
        and a deployment that was running runs again (its cluster died with that runner)."""
        if await self.recorder.in_flight() or await self._running():
            await self.engine()

    async def _running(self) -> list[tuple[str, Deployment]]:
        out = []
        for ns in await self.runs.namespaces():
            out += [(ns, d) for d in await self.recorder.list(ns) if d.state == State.RUNNING and d.job_id]
        return out

    async def _recover_lost_jobs(self) -> None:
        lc = self._engine.lifecycle
        for ns, d in await self._running():
            if await lc.recover(ns, d.name) is not None:
                log.warning(
                    "Flink deployment %s/%s ran again after its job was lost with the cluster", ns, d.name
                )

    async def close(self) -> None:
        if self._engine is not None:
            await self._engine.close(stop_cluster=self.cluster is None)
            self._engine = None

    async def _close_reconciled_actions(self) -> None:
        # reconcile() finished what a previous runner had started; the runs learn it now,
        # not when the jobs of those actions come back after their lease runs out.
        for ns in await self.runs.namespaces():
            for d in await self.recorder.list(ns):
                if not d.run_id or d.pending is not None or not d.action_seq:
                    continue
                run = await self.runs.get(ns, d.run_id)
                if run.flink.actions_done < d.action_seq:
                    await self.store.transact(runs.run_flink_action_done, ns, d.run_id, d.action_seq,
                                              "reconcile", d.last_error or "")  # fmt: skip

    # -- one leased job -----------------------------------------------------------------------
    async def handle(self, ns: str, lease: J.Lease) -> str:
        """Carry out the job's deploy or action: "" when done, else why not."""
        payload = lease.task.payload
        if payload.content_type == CONTROL_CONTENT_TYPE:
            req = J.ControlEngineJobRequest.FromString(payload.data)
            if req.action.action == "status":
                await self._live_status(ns, req.run, int(lease.task.headers.get(HEADER_STATUS_SEQ, "0") or 0))
                return ""
            seq = int(lease.task.headers.get(HEADER_ACTION_SEQ, "0") or 0)
            return await self._control(ns, req.run, req.action, seq)
        return await self._deploy(ns, lease.token.job, E.EngineJob.FromString(payload.data))

    async def _deploy(self, ns: str, run_id: str, job: E.EngineJob) -> str:
        f = job.flink
        # The job can be leased before its submit has written the run: either side creates it.
        run = await self.store.transact(runs.run_create_if_absent, ns, E.EngineRun(
            id=run_id, job=job, state=runs.QUEUED, queue=QUEUE))  # fmt: skip
        if run.state in runs.FINISHED:
            return ""  # canceled while it waited
        try:
            engine = await self.engine()
            d = await self.recorder.load(ns, f.deployment)
            if d is not None and d.run_id == run_id:
                return ""  # deployed by an earlier lease of this job (a crash in between)
            await engine.lifecycle.deploy(ns, f.deployment, spec_of(f), savepoint=f.savepoint or None,
                                          savepoint_interval_s=f.savepoint_interval_s, run_id=run_id)  # fmt: skip
            return ""
        except JobsError as e:
            d = await self.recorder.load(ns, f.deployment)
            if d is None or d.run_id != run_id:  # refused before anything was written
                await self.store.transact(runs.run_flink_refused, ns, run_id, e.message)
                self.runs.changed(ns, run_id)
            return e.message

    async def _live_status(self, ns: str, run_id: str, seq: int) -> None:
        """Read the deployment's job from Flink's REST API onto the run (`flink.live`). It
        takes no lock: it reads, and answers while an action is under way (that is when a
        savepoint is in progress)."""
        run = await self.runs.get(ns, run_id)
        live = E.FlinkJobLive(seq=seq, read_ns=time.time_ns())
        try:
            d = await self.recorder.load(ns, run.job.flink.deployment)
            job_id = (
                (d.job_id or (d.pending.new_job_id if d.pending else None))
                if d and d.run_id == run_id
                else None
            )
            # No job, nothing to ask (and no cluster to start for it: a suspended deployment's).
            job = await (await self.engine()).lifecycle.job_status(job_id) if job_id else None
            if job is None:
                live.job_id = job_id or ""
                live.error = (f"Flink does not know job {job_id}" if job_id else
                              f"no job runs now (the deployment is {d.state.value if d else 'not deployed'})")  # fmt: skip
            else:
                live.job_id, live.state, live.all_running, live.restarts = (job.job_id, job.state, job.all_running,
                                                                            job.restarts)  # fmt: skip
                live.checkpoints_completed, live.checkpoints_failed = job.checkpoints, job.checkpoints_failed
                live.last_checkpoint_path = job.latest_checkpoint or ""
                live.last_checkpoint_ns = job.latest_checkpoint_ms * 1_000_000
                live.savepoint_in_progress = job.savepoint_in_progress
                live.restored_from = job.restored_from or ""
        except (JobsError, FlinkRestError) as e:
            live.error = f"Flink's REST API could not be read: {e}"
        await self.store.transact(runs.run_flink_live, ns, run_id, live)
        self.runs.changed(ns, run_id)

    async def _control(self, ns: str, run_id: str, action: E.EngineAction, seq: int) -> str:
        run = await self.runs.get(ns, run_id)
        if seq and run.flink.actions_done >= seq:
            return ""
        name = run.job.flink.deployment
        error = ""
        try:
            lc = (await self.engine()).lifecycle
            d = await self.recorder.load(ns, name)
            if d is not None and d.run_id == run_id and d.action_seq >= seq > 0 and d.pending is None:
                error = d.last_error or ""  # carried out before a crash, or by reconcile()
            else:
                a = action.action
                if a == "savepoint":
                    await lc.savepoint(ns, name, seq=seq)
                elif a == "suspend":
                    await lc.suspend(ns, name, seq=seq)
                elif a == "resume":
                    await lc.resume(ns, name, savepoint=action.savepoint or None, seq=seq)
                elif a == "upgrade":
                    await lc.upgrade(ns, name, spec_of(action.flink), seq=seq)
                elif a == "rollback":
                    await lc.rollback(ns, name, version=action.version or None, savepoint=action.savepoint or None,
                                      seq=seq)  # fmt: skip
                elif a == "cancel":
                    await lc.cancel(ns, name, seq=seq)
                else:
                    error = f"{a!r} is not a Flink action"
        except JobsError as e:
            error = e.message
        await self.store.transact(runs.run_flink_action_done, ns, run_id, seq, action.action, error)
        self.runs.changed(ns, run_id)
        return error
