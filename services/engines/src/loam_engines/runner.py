"""`EngineRunner`: leases engine jobs from the queue core and runs each as a supervised
child process, recording the run as it goes (EngineRuns).

Per namespace with engine jobs and per kind's queue, one loop long-polls `Lease` (a
wake-up, not a poll), up to `max_parallel` runs of that namespace and queue at a time
(a cap per loop: an idle long-poll holds a slot of its own loop only, so namespaces
never starve each other). A leased job:
1. starts an attempt of its run (`attempt_started`; a run canceled meanwhile is dropped);
2. fetches its script from the blob store into a working directory;
3. starts the kind's command (`Executor`) as a child (loam_engines.processes), streams
   its stdout and stderr into the run's log, extends the job's lease on a heartbeat and
   enforces the attempt's wall-clock limit;
4. records the attempt's end, then completes the job: Ok on exit status 0, else Retry
   with the error, so the queue core applies the run's attempts and backoff (its answer
   says whether the run is RETRYING or FAILED).

Jobs on `engines.flink` are not child processes: each is a Flink deploy or control
action, handed to `FlinkActions` (loam_engines.flink.actions) with its lease kept alive
while the action runs; it completes Ok, or Fail with the reason (a refused action is not
retried; a runner that dies mid-action gets the job back when its lease runs out).

A runner keeps its id across restarts. Started again after a crash, it kills what the
crash left (pid files), and for every run its id was running it closes the attempt and
hands the job back to the queue core as a Retry, so the run's state is right at once
rather than after the lease runs out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from loam_common.errors import JobsError
from loam_common.gen.loam.jobs.v1 import engines_pb2 as E
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs.schedules import HEADER_SCHEDULE
from loam_engines import processes, runs
from loam_engines.service import DEFAULT_TIMEOUT_NS, QUEUES, EngineRuns, job_from_payload

log = logging.getLogger("loam.engines.runner")

LEASE_WAIT_NS = 25 * 10**9
VISIBILITY_NS = 30 * 10**9
STOP_GRACE_S = 5.0


@dataclass
class Launch:
    """What an executor wants started: argv and environment, and what to undo after."""

    argv: Sequence[str]
    env: Mapping[str, str]
    cleanup: Callable[[], Awaitable[None]] | None = None


class Executor(Protocol):
    """Turns one attempt of a run into a command line."""

    async def launch(self, ns: str, run: E.EngineRun, script: Path, timeout_s: float) -> Launch: ...


@dataclass
class _Attempt:
    ns: str
    run_id: str
    child: processes.Child | None = None
    canceled: bool = False
    lease_lost: bool = False
    started: float = field(default_factory=time.monotonic)


class EngineRunner:
    def __init__(
        self,
        engine_runs: EngineRuns,
        jobs: Any,
        blobs: Any,
        executors: Mapping[str, Executor],
        *,
        runner_id: str,
        work_dir: Path,
        pid_dir: Path,
        max_parallel: int = 4,
        visibility_ns: int = VISIBILITY_NS,
        flink: Any = None,
    ) -> None:
        self.runs = engine_runs
        self.jobs = jobs
        self.blobs = blobs
        self.executors = dict(executors)
        self.runner_id = runner_id
        self.work_dir = work_dir
        self.pid_dir = pid_dir
        self.visibility_ns = visibility_ns
        self.max_parallel = max_parallel
        self.flink = flink  # FlinkActions, or None: this runner runs no Flink
        self._loops: dict[tuple[str, str], asyncio.Task] = {}
        self._attempts: dict[tuple[str, str], _Attempt] = {}
        self._tasks: set[asyncio.Task] = set()
        self._stopping = False
        engine_runs.on_namespace = self.watch_namespace
        engine_runs.on_cancel = self.cancel

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        processes.reap_orphans(self.pid_dir)
        if self.flink is not None:
            # In the background: a cluster to bring back takes its JVMs' start-up (10-40 s),
            # which the server's readiness and the Spark runs need not wait for; Flink
            # actions leased meanwhile wait for it (FlinkActions.engine).
            self._spawn(self._start_flink())
        for ns in await self.runs.namespaces():
            await self._recover(ns)
            self.watch_namespace(ns)

    async def stop(self) -> None:
        """Stop leasing, stop the children, and give their jobs back (Release: the
        attempt does not count against the run)."""
        self._stopping = True
        for task in self._loops.values():
            task.cancel()
        await asyncio.gather(*self._loops.values(), return_exceptions=True)
        for attempt in list(self._attempts.values()):
            if attempt.child is not None:
                attempt.child.kill()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.flink is not None:
            await self.flink.close()

    async def _start_flink(self) -> None:
        try:
            await self.flink.start()
        except Exception:  # noqa: BLE001 - Spark runs go on; Flink actions report the cause
            log.exception("the Flink engine could not bring back the deployments a previous runner left")

    def watch_namespace(self, ns: str) -> None:
        """Lease this namespace's engine queues (idempotent)."""
        if self._stopping:
            return
        for kind, queue in QUEUES.items():
            runs_here = kind in self.executors or (kind == "flink" and self.flink is not None)
            if runs_here and (ns, queue) not in self._loops:
                self._loops[(ns, queue)] = asyncio.create_task(self._lease_loop(ns, queue))

    def cancel(self, ns: str, run_id: str) -> bool:
        attempt = self._attempts.get((ns, run_id))
        if attempt is None:
            return False
        attempt.canceled = True
        if attempt.child is not None:
            self._spawn(attempt.child.stop(STOP_GRACE_S))
        return True

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- leasing -------------------------------------------------------------------------
    async def _lease_loop(self, ns: str, queue: str) -> None:
        req = J.LeaseRequest(queues=[queue], worker=self.runner_id, max=1, wait_ns=LEASE_WAIT_NS,
                             visibility_ns=self.visibility_ns)  # fmt: skip
        slots = asyncio.Semaphore(self.max_parallel)
        while not self._stopping:
            await slots.acquire()
            try:
                resp = await self.jobs.lease(ns, req)
            except asyncio.CancelledError:
                slots.release()
                raise
            except Exception:  # noqa: BLE001 - a store hiccup: try again shortly
                slots.release()
                log.exception("lease from %s/%s failed", ns, queue)
                await asyncio.sleep(1.0)
                continue
            if not resp.leases:
                slots.release()
                continue
            for lease in resp.leases:
                self._spawn(self._run_then_free(ns, lease, slots))

    async def _run_then_free(self, ns: str, lease: J.Lease, slots: asyncio.Semaphore) -> None:
        try:
            if lease.token.queue == QUEUES["flink"]:
                await self._run_flink(ns, lease)
            else:
                await self._run(ns, lease)
        except Exception:  # noqa: BLE001 - one run's failure must not stop the runner
            log.exception("engine run %s/%s failed in the runner", ns, lease.token.job)
        finally:
            slots.release()

    # -- a Flink action ------------------------------------------------------------------
    async def _run_flink(self, ns: str, lease: J.Lease) -> None:
        keep = asyncio.create_task(self._keep_lease(ns, lease.token))
        try:
            error = await self.flink.handle(ns, lease)
        except Exception as e:  # noqa: BLE001 - the action's job says what went wrong
            log.exception("Flink action %s/%s failed in the runner", ns, lease.token.job)
            error = f"the runner failed: {e}"
        finally:
            keep.cancel()
        if error:
            await self._complete(ns, lease.token, J.Outcome(fail=J.Outcome.Fail(
                error=pb.JobError(code="flink", message=error))))  # fmt: skip
        else:
            await self._complete(ns, lease.token, J.Outcome(ok=J.Outcome.Ok()))

    async def _keep_lease(self, ns: str, token: J.LeaseToken) -> None:
        req = J.ExtendRequest(token=token, by_ns=self.visibility_ns)
        while True:
            await asyncio.sleep(self.visibility_ns / 3e9)
            try:
                await self.jobs.extend(ns, req)
            except Exception as e:  # noqa: BLE001 - the action goes on; its job may come back
                log.warning("extending the lease of Flink action %s/%s: %s", ns, token.job, e)

    # -- one attempt ---------------------------------------------------------------------
    async def _run(self, ns: str, lease: J.Lease) -> None:
        token = lease.token
        run_id = token.job
        try:
            job = job_from_payload(lease.task.payload)
            kind = job.WhichOneof("spec")
        except Exception:  # noqa: BLE001 - not an engine job: fail it, do not retry
            await self._complete(ns, token, J.Outcome(fail=J.Outcome.Fail(
                error=pb.JobError(code="invalid", message="the job is not an engine job"))))  # fmt: skip
            return
        start = runs.AttemptStart(run_id=run_id, queue=token.queue, job=job, attempt=lease.attempt,
                                  epoch=token.epoch, runner=self.runner_id,
                                  schedule=lease.task.headers.get(HEADER_SCHEDULE, ""))  # fmt: skip
        run = await self.runs.attempt_started(ns, start)
        if run is None:  # canceled or finished while it waited: the job follows the run
            await self._complete(ns, token, J.Outcome(fail=J.Outcome.Fail(
                error=pb.JobError(code="canceled", message="the engine run was canceled"))))  # fmt: skip
            return
        attempt = _Attempt(ns, run_id)
        self._attempts[(ns, run_id)] = attempt
        try:
            rc, error = await self._attempt(ns, run, job, kind, lease, attempt)
        finally:
            del self._attempts[(ns, run_id)]
        await self._finish(ns, run_id, token, rc, error, attempt)

    async def _attempt(
        self, ns: str, run: E.EngineRun, job: E.EngineJob, kind: str, lease: J.Lease, attempt: _Attempt
    ) -> tuple[int | None, str]:
        """Run the child to its end: (exit status or None, error text or "")."""
        spec = getattr(job, kind)
        work = self.work_dir / processes.path_part(ns) / f"{run.id}-{lease.attempt}"
        work.mkdir(parents=True, exist_ok=True)
        timeout_s = (job.timeout_ns or DEFAULT_TIMEOUT_NS) / 1e9
        launch = None
        try:
            try:
                source = await self.blobs.get(job.artifact)
            except (FileNotFoundError, ValueError):
                return None, f"the script artifact {job.artifact!r} is missing"
            script = work / spec.entrypoint
            script.write_bytes(source)
            executor = self.executors[kind]
            try:
                launch = await executor.launch(ns, run, script, timeout_s)
            except JobsError as e:
                return None, e.message
            await self.runs.append_logs(ns, run.id, [(0, "loam", f"attempt {lease.attempt} starting: "
                                                      + " ".join(map(str, launch.argv[1:])))])  # fmt: skip
            child = await processes.spawn(f"run-{ns}-{run.id}", launch.argv, env=launch.env, cwd=work,
                                          pid_dir=self.pid_dir)  # fmt: skip
            attempt.child = child
            if attempt.canceled:  # canceled while starting
                self._spawn(child.stop(STOP_GRACE_S))
            await self.runs.attempt_pid(ns, run.id, child.pid)
            heartbeat = asyncio.create_task(self._heartbeat(ns, lease.token, attempt))
            logs = asyncio.create_task(self._pump_logs(ns, run.id, child))
            try:
                rc = await asyncio.wait_for(asyncio.shield(child.proc.wait()), timeout_s)
                timed_out = False
            except TimeoutError:
                timed_out = True
                rc = await child.stop(STOP_GRACE_S)
            finally:
                heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(logs, 5.0)
            await child.stop(0.5)  # the leader is gone: nothing of its group stays either
            if timed_out:
                return rc, f"timed out after {timeout_s:g}s"
            if attempt.canceled:
                return rc, "canceled"
            if attempt.lease_lost:
                return rc, "the runner lost the job's lease"
            return rc, "" if rc == 0 else f"exited with status {rc}"
        finally:
            if launch is not None and launch.cleanup is not None:
                with contextlib.suppress(Exception):
                    await launch.cleanup()
            shutil.rmtree(work, ignore_errors=True)

    async def _finish(
        self, ns: str, run_id: str, token: J.LeaseToken, rc: int | None, error: str, attempt: _Attempt
    ) -> None:
        if attempt.canceled:
            await self.runs.attempt_finished(ns, run_id, runs.CANCELED, rc, "canceled")
            await self._complete(ns, token, J.Outcome(fail=J.Outcome.Fail(
                error=pb.JobError(code="canceled", message="the engine run was canceled"))))  # fmt: skip
            return
        if rc == 0 and not error:
            await self.runs.attempt_finished(ns, run_id, runs.SUCCEEDED, rc, "")
            await self._complete(ns, token, J.Outcome(ok=J.Outcome.Ok()))
            return
        await self.runs.append_logs(ns, run_id, [(0, "loam", f"attempt failed: {error}")])
        # Record it as retrying first; the queue core decides whether attempts remain.
        await self.runs.attempt_finished(ns, run_id, runs.RETRYING, rc, error)
        state = await self._complete(ns, token, J.Outcome(retry=J.Outcome.Retry(
            error=pb.JobError(code="engine", message=error))))  # fmt: skip
        if state in (pb.JOB_STATE_FAILED, pb.JOB_STATE_DEAD_LETTERED, None):
            await self.runs.attempt_finished(ns, run_id, runs.FAILED, rc, error)

    async def _complete(self, ns: str, token: J.LeaseToken, outcome: J.Outcome) -> int | None:
        """The job's state after the outcome; None if the queue core refused it (the
        lease was lost: the job is someone else's now)."""
        try:
            resp = await self.jobs.complete(ns, J.CompleteRequest(token=token, outcome=outcome))
            return resp.completed.state
        except Exception as e:  # noqa: BLE001 - fenced, or the job was canceled meanwhile
            log.warning("completing engine job %s/%s: %s", ns, token.job, getattr(e, "message", e))
            return None

    async def _heartbeat(self, ns: str, token: J.LeaseToken, attempt: _Attempt) -> None:
        """Keep the job's lease while the child runs; a lost lease stops the child (the
        job is another runner's, or canceled)."""
        req = J.ExtendRequest(token=token, by_ns=self.visibility_ns)
        while True:
            await asyncio.sleep(self.visibility_ns / 3e9)
            try:
                await self.jobs.extend(ns, req)
                # A cancel made through another process reaches this runner here.
                if not attempt.canceled and (await self.runs.get(ns, token.job)).cancel_requested:
                    self.cancel(ns, token.job)
            except JobsError as e:
                log.warning("engine run %s/%s lost its lease: %s", ns, token.job, e.message)
                attempt.lease_lost = True
                if attempt.child is not None:
                    await attempt.child.stop(STOP_GRACE_S)
                return
            except Exception:  # noqa: BLE001 - the next beat tries again
                log.exception("extending the lease of %s/%s", ns, token.job)

    async def _pump_logs(self, ns: str, run_id: str, child: processes.Child) -> None:
        """stdout and stderr, line by line, into the run's log: each write takes every
        line that arrived while the previous one committed."""
        lines: asyncio.Queue = asyncio.Queue()

        async def read(stream: asyncio.StreamReader, name: str) -> None:
            while True:
                try:
                    raw = await stream.readline()
                except ValueError:  # a line over the stream limit: take it in pieces
                    raw = await stream.read(64 * 1024)
                if not raw:
                    break
                lines.put_nowait((time.time_ns(), name, raw.decode(errors="replace").rstrip("\n")))
            lines.put_nowait(None)

        readers = [asyncio.create_task(read(child.proc.stdout, "stdout")),
                   asyncio.create_task(read(child.proc.stderr, "stderr"))]  # fmt: skip
        open_streams = 2
        try:
            while open_streams:
                batch = []
                item = await lines.get()
                while True:
                    if item is None:
                        open_streams -= 1
                    else:
                        batch.append(item)
                    if lines.empty() or len(batch) >= 500:
                        break
                    item = lines.get_nowait()
                await self.runs.append_logs(ns, run_id, batch)
        finally:
            for r in readers:
                r.cancel()

    # -- after a crash -------------------------------------------------------------------
    async def _recover(self, ns: str) -> None:
        for run in await self.runs.running_on(ns, self.runner_id):
            error = "the runner stopped during this attempt; its process was ended"
            token = J.LeaseToken(queue=run.queue, job=run.id, epoch=run.epoch)
            state = await self._complete(ns, token, J.Outcome(retry=J.Outcome.Retry(
                error=pb.JobError(code="engine", message=error))))  # fmt: skip
            if state is None:  # the lease had run out: ask the job where it is
                state = await self._job_state(ns, run.queue, run.id)
            final = {pb.JOB_STATE_FAILED: runs.FAILED, pb.JOB_STATE_DEAD_LETTERED: runs.FAILED,
                     pb.JOB_STATE_CANCELED: runs.CANCELED, pb.JOB_STATE_COMPLETED: runs.FAILED}.get(state)  # fmt: skip
            await self.runs.append_logs(ns, run.id, [(0, "loam", error)])
            await self.runs.attempt_finished(ns, run.id, final or runs.RETRYING, None, error)
            log.warning("engine run %s/%s: closed the attempt a stopped runner left", ns, run.id)

    async def _job_state(self, ns: str, queue: str, job_id: str) -> int | None:
        try:
            resp = await self.jobs.job_admin(ns, J.JobAdminRequest(queue=queue, job=job_id,
                                                                   op=J.JobOp(get=J.JobOp.Get())))  # fmt: skip
            return resp.job.state
        except Exception:  # noqa: BLE001
            return None
