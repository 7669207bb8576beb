"""`EngineRuns`: the engine-run facade, the one place that runs the transactions of
runs.py. The transports (the JobsService engine methods, REST `/v1/engines/...`) and
the runner call it; nothing else touches the run records.

A submit stores the script as an artifact (the blob store, content-addressed), then
hands the run to the queue core as a job on the kind's queue (`engines.spark` for
SparkBatch, `engines.spark-jvm` for SparkSubmit) with the run's attempts and backoff as
the job's, or as a Loam schedule that enqueues such a job per tick. The queue core does
the admission, the retries and the schedule; the runner leases those jobs. `restart`
runs a finished Spark run's spec again as a new run.

A Flink deployment (`FlinkDeployment`) is one run per deployment lifetime: its deploy and
every control action are jobs on `engines.flink` that the runner carries out
(loam_engines.flink.actions). What can be refused without Flink is refused here, before
anything is enqueued: a bad spec, a name already deployed, an action the deployment's
state does not allow, a savepoint or version it does not have.

`jobs` is anything with the JobsService methods as `(ns, request) -> response` (the
queue core's CoreRpc in process, a Connect client otherwise): this package sees the
queue core only through its protobuf surface.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Callable
from typing import Any

from loam_common import validate
from loam_common.blobs import BlobStore
from loam_common.errors import AlreadyExists, InvalidArgument, InvalidState, NotFound
from loam_common.gen.loam.jobs.v1 import engines_pb2 as E
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.store.runner import Store
from loam_engines import runs
from loam_engines.flink import actions as flink_actions
from loam_engines.flink.artifacts import Artifacts, kind_of
from loam_engines.flink.lifecycle import MAX_PARALLELISM, FlinkRefused
from loam_engines.flink.model import ACTION_FROM, Deployment, State
from loam_engines.flink.model import UPGRADE_MODES as MODEL_UPGRADE_MODES
from loam_engines.flink.recorder import flink_deployment_get
from loam_engines.spark.pydeps import check_requirements

# spec kind (EngineJob's oneof) -> the queue its runs wait on
QUEUES: dict[str, str] = {
    "spark_batch": "engines.spark",
    "spark_submit": "engines.spark-jvm",
    "flink": flink_actions.QUEUE,
}
KIND_ENGINE = {"spark_batch": E.ENGINE_KIND_SAIL, "spark_submit": E.ENGINE_KIND_SPARK_JVM,
               "flink": E.ENGINE_KIND_FLINK}  # fmt: skip
SPARK_ACTIONS = ("cancel", "restart")
# A Flink action's job may come back after a runner crash (its lease runs out): attempts
# for that, never for a refusal (the runner fails those outright).
FLINK_JOB_ATTEMPTS = 5
UPGRADE_MODES = ("", *MODEL_UPGRADE_MODES)  # "": savepoint
CONTENT_TYPE = "application/x-protobuf; type=loam.jobs.v1.EngineJob"
MAX_SOURCE_BYTES = 10 * 1024 * 1024
MAX_ATTEMPTS = 100
DEFAULT_TIMEOUT_NS = 3600 * 10**9
MAX_TIMEOUT_NS = 7 * 24 * 3600 * 10**9
MAX_WAIT_NS = 30 * 10**9
_ENTRYPOINT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\.py")


def spec_kind(job: E.EngineJob) -> str:
    kind = job.WhichOneof("spec")
    if kind not in QUEUES:
        raise InvalidArgument("job", f"set one of {', '.join(QUEUES)}")
    return kind


def _check(job: E.EngineJob) -> str:
    """The kind of a valid job; InvalidArgument naming the field otherwise."""
    kind = spec_kind(job)
    spec = getattr(job, kind)
    if not _ENTRYPOINT.fullmatch(spec.entrypoint):
        raise InvalidArgument(
            f"job.{kind}.entrypoint", f"{spec.entrypoint!r} is not a script file name like job.py"
        )
    if not spec.source and not job.artifact:
        raise InvalidArgument(f"job.{kind}.source", "is empty: send the script")
    if len(spec.source) > MAX_SOURCE_BYTES:
        raise InvalidArgument(f"job.{kind}.source", f"is over {MAX_SOURCE_BYTES} bytes")
    if len(spec.args) > 256:
        raise InvalidArgument(f"job.{kind}.args", "at most 256")
    for i, a in enumerate(spec.args):
        validate.text(f"job.{kind}.args[{i}]", a, 4096)
        if "\0" in a:
            raise InvalidArgument(f"job.{kind}.args[{i}]", "contains a NUL byte")
    for k, v in spec.conf.items():
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,256}", k):
            raise InvalidArgument(f"job.{kind}.conf", f"{k!r} is not a Spark conf key")
        validate.text(f"job.{kind}.conf[{k}]", v, 4096)
    if kind == "spark_batch":
        check_requirements(spec.python_deps, "job.spark_batch.python_deps")
    if job.attempts > MAX_ATTEMPTS:
        raise InvalidArgument("job.attempts", f"at most {MAX_ATTEMPTS}")
    if not 0 <= job.timeout_ns <= MAX_TIMEOUT_NS:
        raise InvalidArgument("job.timeout_ns", "must be between 0 (one hour) and 7 days")
    validate.text("job.name", job.name, 256)
    return kind


def _check_flink(f: E.FlinkDeployment, field: str = "job.flink", *, upgrade: bool = False) -> None:
    """A FlinkDeployment's fields, each refused by name; the artifact's own checks (file
    name, kind) come when it is stored."""
    if not upgrade:
        validate.name(f"{field}.deployment", f.deployment)
    if f.sql and f.source:
        raise InvalidArgument(f"{field}.sql", "give either source (with entrypoint) or sql, not both")
    if not f.sql and not f.source and not f.artifact:
        raise InvalidArgument(f"{field}.source", "is empty: send the jar, the .py script or the SQL")
    if f.source and not f.entrypoint:
        raise InvalidArgument(f"{field}.entrypoint", "name the artifact's file: job.jar, job.py or job.sql")
    if f.entry_class and not f.entry_class.replace(".", "").replace("$", "").replace("_", "").isalnum():
        raise InvalidArgument(f"{field}.entry_class", f"{f.entry_class!r} is not a Java class name")
    if len(f.args) > 256:
        raise InvalidArgument(f"{field}.args", "at most 256")
    for i, a in enumerate(f.args):
        validate.text(f"{field}.args[{i}]", a, 4096)
    if f.parallelism > MAX_PARALLELISM:
        raise InvalidArgument(f"{field}.parallelism", f"at most {MAX_PARALLELISM}")
    if len(f.config) > 128:
        raise InvalidArgument(f"{field}.config", "at most 128 options")
    for k, v in f.config.items():
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,256}", k):
            raise InvalidArgument(f"{field}.config", f"{k!r} is not a Flink option name")
        validate.text(f"{field}.config[{k}]", v, 4096)
    if f.upgrade_mode not in UPGRADE_MODES:
        raise InvalidArgument(
            f"{field}.upgrade_mode", f"{f.upgrade_mode!r}: use {', '.join(UPGRADE_MODES[1:])}"
        )
    if f.savepoint_interval_s > 366 * 86400:
        raise InvalidArgument(f"{field}.savepoint_interval_s", "at most a year")
    validate.text(f"{field}.savepoint", f.savepoint, 4096)


def job_from_payload(payload: pb.Payload) -> E.EngineJob:
    return E.EngineJob.FromString(payload.data)


class EngineRuns:
    def __init__(self, store: Store, blobs: BlobStore, jobs: Any) -> None:
        self.store = store
        self.blobs = blobs
        self.jobs = jobs
        # Hooks the in-process runner sets: a namespace has engine jobs now; cancel a run.
        self.on_namespace: Callable[[str], None] | None = None
        self.on_cancel: Callable[[str, str], bool] | None = None
        self._log_waiters: dict[tuple[str, str], asyncio.Event] = {}
        # False where the runner is known to run no Flink (`loam dev --no-flink`): a Flink
        # deploy is refused at once rather than left waiting for a runner that never comes.
        self.flink_enabled = True

    # -- submit --------------------------------------------------------------------------
    async def submit(
        self, ns: str, job: E.EngineJob, schedule: pb.ScheduleSpec | None = None, *, restarted_from: str = ""
    ) -> tuple[E.EngineRun | None, str]:
        """(the run, "") or, with a schedule, (None, the schedule's id)."""
        validate.name("namespace", ns)
        if job.WhichOneof("spec") == "flink":
            if schedule is not None:
                raise InvalidArgument(
                    "schedule", "a Flink deployment runs until it is cancelled: it has no schedule"
                )
            return await self._submit_flink(ns, job), ""
        kind = _check(job)
        stored = E.EngineJob()
        stored.CopyFrom(job)
        stored.engine = KIND_ENGINE[kind]
        spec = getattr(stored, kind)
        if spec.source:
            digest = hashlib.sha256(spec.source).hexdigest()
            ref = f"{ns}/engines/{digest}/{spec.entrypoint}"
            await self.blobs.put(ref, spec.source)  # content-addressed: a resubmit rewrites the same
            stored.artifact = ref
            spec.ClearField("source")
        task = pb.TaskSpec(
            name=kind, payload=pb.Payload(data=stored.SerializeToString(), content_type=CONTENT_TYPE)
        )
        opts = pb.EnqueueOpts(attempts=max(1, job.attempts))
        if job.HasField("backoff"):
            opts.backoff.CopyFrom(job.backoff)
        queue = QUEUES[kind]
        await self.store.transact(runs.engine_namespace_register, ns)
        if self.on_namespace is not None:
            self.on_namespace(ns)
        if schedule is not None:
            spec_ = pb.ScheduleSpec()
            spec_.CopyFrom(schedule)
            spec_.queue = queue
            spec_.task.CopyFrom(task)
            spec_.opts.CopyFrom(opts)
            resp = await self.jobs.schedule(ns, J.ScheduleRequest(spec=spec_))
            return None, resp.id
        resp = await self.jobs.enqueue(ns, J.EnqueueRequest(queue=queue, task=task, opts=opts))
        run = E.EngineRun(id=resp.enqueued.job, job=stored, state=runs.QUEUED, queue=queue,
                          restarted_from=restarted_from)  # fmt: skip
        return await self.store.transact(runs.run_create_if_absent, ns, run), ""

    async def restart(self, ns: str, run_id: str) -> E.EngineRun:
        """A finished Spark run's spec (its stored script, args, conf, policy) run again as
        a new run; the old run stays as it ended."""
        old = await self.get(ns, run_id)
        if old.state not in runs.FINISHED:
            raise InvalidState(run_id, runs.state_name(old.state), "restart",
                               f"engine run {run_id} is {runs.state_name(old.state)}: cancel it first")  # fmt: skip
        job = E.EngineJob()
        job.CopyFrom(old.job)
        run, _ = await self.submit(ns, job, restarted_from=run_id)
        assert run is not None
        return run

    # -- Flink ---------------------------------------------------------------------------
    async def _deployment(self, ns: str, name: str) -> Deployment | None:
        raw = await self.store.snapshot(flink_deployment_get, ns, name)
        return Deployment.from_json(raw) if raw is not None else None

    async def _store_flink_artifact(self, ns: str, f: E.FlinkDeployment, field: str) -> None:
        """Keep the artifact in the blob store (by content) and name it in `f.artifact`."""
        arts = Artifacts(self.blobs, ".")
        if f.sql:
            name = f.entrypoint or "statements.sql"
            if kind_of(name).value != "sql":
                raise InvalidArgument(f"{field}.entrypoint", "SQL statements go in a .sql file")
            f.artifact = await arts.put(ns, name, f.sql.encode())
        elif f.source:
            if not f.entrypoint.endswith((".jar", ".py", ".sql")):
                raise InvalidArgument(
                    f"{field}.entrypoint", f"{f.entrypoint!r} is not a .jar, .py or .sql file"
                )
            f.artifact = await arts.put(ns, f.entrypoint, f.source)
        else:
            arts.check_ref(f.artifact)
            if not await arts.exists(ns, f.artifact):
                raise NotFound(f"no artifact {f.artifact!r} in this namespace: send its source")
        f.ClearField("sql")
        f.ClearField("source")

    async def _submit_flink(self, ns: str, job: E.EngineJob) -> E.EngineRun:
        f = job.flink
        if not self.flink_enabled:
            raise FlinkRefused("this server runs no Flink engine (it was started with --no-flink)")
        _check_flink(f)
        if f.entry_class and f.sql:
            raise InvalidArgument("job.flink.entry_class", "is for jar jobs")
        d = await self._deployment(ns, f.deployment)
        if d is not None and d.state not in (State.CANCELLED, State.FAILED):
            raise AlreadyExists(f"Flink deployment {f.deployment!r} is deployed ({d.state}, run {d.run_id}): "
                                "upgrade it, or cancel it first", f.deployment)  # fmt: skip
        stored = E.EngineJob()
        stored.CopyFrom(job)
        stored.engine = E.ENGINE_KIND_FLINK
        stored.attempts = FLINK_JOB_ATTEMPTS
        await self._store_flink_artifact(ns, stored.flink, "job.flink")
        if kind_of(stored.flink.artifact).value != "jar" and stored.flink.entry_class:
            raise InvalidArgument("job.flink.entry_class", "is for jar jobs")
        stored.artifact = stored.flink.artifact
        task = pb.TaskSpec(name="flink_deploy", payload=pb.Payload(data=stored.SerializeToString(),
                                                                    content_type=flink_actions.DEPLOY_CONTENT_TYPE))  # fmt: skip
        await self.store.transact(runs.engine_namespace_register, ns)
        if self.on_namespace is not None:
            self.on_namespace(ns)
        resp = await self.jobs.enqueue(ns, J.EnqueueRequest(queue=flink_actions.QUEUE, task=task,
                                                            opts=pb.EnqueueOpts(attempts=FLINK_JOB_ATTEMPTS)))  # fmt: skip
        run = E.EngineRun(id=resp.enqueued.job, job=stored, state=runs.QUEUED, queue=flink_actions.QUEUE)
        return await self.store.transact(runs.run_create_if_absent, ns, run)

    async def control(self, ns: str, run_id: str, action: E.EngineAction) -> E.EngineRun:
        """A control action on a run: cancel or restart a Spark run; a Flink run's actions
        are checked here and carried out by the runner (the record counts them in
        `flink.actions_requested`; `flink.actions_done` reaches it when they are done)."""
        run = await self.get(ns, run_id)
        if run.job.WhichOneof("spec") == "flink":
            return await self._control_flink(ns, run, action)
        if action.action == "cancel":
            return await self.cancel(ns, run_id)
        if action.action == "restart":
            return await self.restart(ns, run_id)
        raise InvalidArgument("action.action", f"{action.action!r} is not an action of a Spark run: use "
                              f"{', '.join(SPARK_ACTIONS)}")  # fmt: skip

    async def _control_flink(self, ns: str, run: E.EngineRun, action: E.EngineAction) -> E.EngineRun:
        a = action.action
        if a not in flink_actions.ACTIONS:
            raise InvalidArgument("action.action", f"{a!r} is not an action of a Flink run: use "
                                  f"{', '.join(flink_actions.ACTIONS)}")  # fmt: skip
        name = run.job.flink.deployment
        if a == "status":
            return await self._flink_status(ns, run)
        d = await self._deployment(ns, name)
        if d is None or d.run_id != run.id:
            if a == "cancel" and run.state not in runs.FINISHED:
                return await self.cancel(ns, run.id)  # its deploy has not started: the job goes
            raise FlinkRefused(f"run {run.id} has no deployment running ({runs.state_name(run.state)}): "
                               "wait for its deploy, or deploy again")  # fmt: skip
        if d.pending is not None:
            raise FlinkRefused(f"{name!r} is busy: {d.pending.action} is at step {d.pending.step}")
        if d.state not in ACTION_FROM[a]:
            allowed = " or ".join(sorted(ACTION_FROM[a]))
            raise FlinkRefused(f"cannot {a} {name!r}: it is {d.state}, and {a} needs {allowed}")
        clean = E.EngineAction(action=a)
        if a == "upgrade":
            if not action.HasField("flink"):
                raise InvalidArgument("action.flink", "an upgrade needs the new version")
            _check_flink(action.flink, "action.flink", upgrade=True)
            clean.flink.CopyFrom(action.flink)
            clean.flink.deployment = name
            await self._store_flink_artifact(ns, clean.flink, "action.flink")
        if a in ("resume", "rollback") and action.savepoint:
            if (
                d.savepoint(action.savepoint) is None
                and d.savepoint(action.savepoint.replace("file:///", "file:/")) is None
            ):
                raise NotFound(
                    f"{action.savepoint!r} is not a savepoint of {name!r}: see its savepoints in status"
                )
            clean.savepoint = action.savepoint
        if a == "rollback" and action.version:
            if action.version not in {v.number for v in d.versions}:
                raise NotFound(f"{name!r} has no version {action.version}: it has "
                               + ", ".join(f"v{v.number}" for v in d.versions))  # fmt: skip
            clean.version = action.version
        run, seq = await self.store.transact(runs.run_flink_request_action, ns, run.id, a)
        task = pb.TaskSpec(name=f"flink_{a}", headers={flink_actions.HEADER_ACTION_SEQ: str(seq)},
                           payload=pb.Payload(data=J.ControlEngineJobRequest(run=run.id, action=clean).SerializeToString(),
                                              content_type=flink_actions.CONTROL_CONTENT_TYPE))  # fmt: skip
        if self.on_namespace is not None:
            self.on_namespace(ns)
        await self.jobs.enqueue(ns, J.EnqueueRequest(queue=flink_actions.QUEUE, task=task,
                                                     opts=pb.EnqueueOpts(attempts=FLINK_JOB_ATTEMPTS)))  # fmt: skip
        self.changed(ns, run.id)
        return run

    async def _flink_status(self, ns: str, run: E.EngineRun) -> E.EngineRun:
        """A live read of the run's Flink job, by the runner that has the cluster: counted in
        (`flink.status_requested`), answered on the run as `flink.live` (its `seq` reaching
        the count). Any state, busy or not; a run whose deploy has not started has nothing
        to read."""
        if run.state in runs.FINISHED or not run.flink.deployment:
            return run
        run, seq = await self.store.transact(runs.run_flink_request_status, ns, run.id)
        payload = J.ControlEngineJobRequest(run=run.id, action=E.EngineAction(action="status"))
        task = pb.TaskSpec(name="flink_status", headers={flink_actions.HEADER_STATUS_SEQ: str(seq)},
                           payload=pb.Payload(data=payload.SerializeToString(),
                                              content_type=flink_actions.CONTROL_CONTENT_TYPE))  # fmt: skip
        if self.on_namespace is not None:
            self.on_namespace(ns)
        await self.jobs.enqueue(ns, J.EnqueueRequest(queue=flink_actions.QUEUE, task=task,
                                                     opts=pb.EnqueueOpts(attempts=FLINK_JOB_ATTEMPTS)))  # fmt: skip
        return run

    # -- reads ---------------------------------------------------------------------------
    async def get(self, ns: str, run_id: str) -> E.EngineRun:
        validate.name("run", run_id)
        return await self.store.snapshot(runs.run_get, ns, run_id)

    async def list(self, ns: str, page_size: int = 0, page_token: str = "") -> tuple[list[E.EngineRun], str]:
        validate.name("namespace", ns)
        size = page_size or 100
        validate.in_range("page_size", size, 1, 1000)
        if page_token:
            validate.name("page_token", page_token)
        page = await self.store.snapshot(runs.run_list, ns, size + 1, page_token)
        more = len(page) > size
        page = page[:size]
        return page, (page[-1].id if more and page else "")

    async def logs(
        self, ns: str, run_id: str, after: int = 0, limit: int = 0, wait_ns: int = 0
    ) -> tuple[list[E.EngineLogLine], bool]:
        """Lines numbered after `after`, and whether the run is over. With none yet and
        `wait_ns`, waits for the next line (or the end) up to that long."""
        validate.name("run", run_id)
        limit = limit or 1000
        validate.in_range("limit", limit, 1, 10_000)
        validate.in_range("wait_ns", wait_ns, 0, MAX_WAIT_NS)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ns / 1e9
        event: asyncio.Event | None = None
        while True:
            lines, run = await self.store.snapshot(runs.run_logs, ns, run_id, after, limit)
            finished = run.state in runs.FINISHED
            left = deadline - loop.time()
            if lines or finished or left <= 0:
                return lines, finished and len(lines) < limit
            if event is None:
                # Register, then read again: a line written between the two is not missed.
                event = self._log_waiters.setdefault((ns, run_id), asyncio.Event())
                continue
            try:
                await asyncio.wait_for(event.wait(), left)
            except TimeoutError:
                pass
            event = None

    def changed(self, ns: str, run_id: str) -> None:
        event = self._log_waiters.pop((ns, run_id), None)
        if event is not None:
            event.set()

    # -- cancel --------------------------------------------------------------------------
    async def cancel(self, ns: str, run_id: str) -> E.EngineRun:
        run = await self.get(ns, run_id)
        if run.state in runs.FINISHED:
            raise InvalidState(run_id, runs.state_name(run.state), "canceled",
                               f"engine run {run_id} is already {runs.state_name(run.state)}")  # fmt: skip
        running = run.state == runs.RUNNING
        if not running:
            # Waiting or between attempts: the job itself is canceled; a lease that wins
            # the race sees `cancel_requested` and drops the job.
            try:
                await self.jobs.job_admin(ns, J.JobAdminRequest(queue=run.queue, job=run_id,
                                                                op=J.JobOp(cancel=J.JobOp.Cancel())))  # fmt: skip
            except Exception:  # noqa: BLE001 - leased meanwhile: the runner stops it below
                running = True
        run = await self.store.transact(runs.run_cancel_if_unfinished, ns, run_id, running)
        if running and self.on_cancel is not None:
            self.on_cancel(ns, run_id)
        self.changed(ns, run_id)
        return run

    # -- the runner's side ---------------------------------------------------------------
    async def namespaces(self) -> list[str]:
        return await self.store.snapshot(runs.engine_namespaces)

    async def attempt_started(self, ns: str, start: runs.AttemptStart) -> E.EngineRun | None:
        run = await self.store.transact(runs.run_start_attempt_if_runnable, ns, start)
        self.changed(ns, start.run_id)
        return run

    async def attempt_pid(self, ns: str, run_id: str, pid: int) -> None:
        await self.store.transact(runs.run_set_pid, ns, run_id, pid)

    async def append_logs(self, ns: str, run_id: str, lines: list[tuple[int, str, str]]) -> None:
        if lines:
            await self.store.transact(runs.run_append_logs, ns, run_id, lines)
            self.changed(ns, run_id)

    async def attempt_finished(
        self, ns: str, run_id: str, state: int, exit_code: int | None, error: str
    ) -> E.EngineRun:
        run = await self.store.transact(runs.run_finish_attempt, ns, run_id, state, exit_code, error)
        self.changed(ns, run_id)
        return run

    async def running_on(self, ns: str, runner: str) -> list[E.EngineRun]:
        return await self.store.snapshot(runs.runs_running_on, ns, runner)
