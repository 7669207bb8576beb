"""Engine runs in the store: the transitions over one transaction, `fn(tx, ns, ...)`.

An engine run (`EngineRun`, `t/<ns>/eng/run/<id>`) is the user-facing record of one
engine job: its spec, state, attempts with their exit status and timings, and its log
(`t/<ns>/eng/log/<id>/<n>`). Its id is the id of the queue-core job that carries it, so
the job's admission, retries, schedules and events stay the queue core's; the run adds
what the job does not know (processes, exit codes, output).

Either side may create the record: the submit that enqueued the job, or the runner
leasing a job a schedule enqueued. `run_create_if_absent` therefore never overwrites.
States: QUEUED -> RUNNING -> (RETRYING -> RUNNING)* -> SUCCEEDED | FAILED | CANCELED.
"""

from __future__ import annotations

from dataclasses import dataclass

from loam_common import keys
from loam_common.errors import InvalidState, NotFound
from loam_common.gen.loam.jobs.v1 import engines_pb2 as E
from loam_common.store.base import Txn

QUEUED = E.ENGINE_RUN_STATE_QUEUED
RUNNING = E.ENGINE_RUN_STATE_RUNNING
RETRYING = E.ENGINE_RUN_STATE_RETRYING
SUCCEEDED = E.ENGINE_RUN_STATE_SUCCEEDED
FAILED = E.ENGINE_RUN_STATE_FAILED
CANCELED = E.ENGINE_RUN_STATE_CANCELED
FINISHED = frozenset({SUCCEEDED, FAILED, CANCELED})

STATE_NAMES = {
    QUEUED: "queued",
    RUNNING: "running",
    RETRYING: "retrying",
    SUCCEEDED: "succeeded",
    FAILED: "failed",
    CANCELED: "canceled",
}
MAX_LINE_CHARS = 8192


def state_name(state: int) -> str:
    return STATE_NAMES.get(state, "unspecified")


def _load(tx: Txn, ns: str, run_id: str) -> E.EngineRun | None:
    raw = tx.get(keys.engine_run(ns, run_id))
    return E.EngineRun.FromString(raw) if raw is not None else None


def _must(tx: Txn, ns: str, run_id: str) -> E.EngineRun:
    run = _load(tx, ns, run_id)
    if run is None:
        raise NotFound(f"no engine run {run_id!r} in namespace {ns!r}")
    return run


def _put(tx: Txn, ns: str, run: E.EngineRun) -> None:
    tx.put(keys.engine_run(ns, run.id), run.SerializeToString())


def engine_namespace_register(tx: Txn, ns: str) -> None:
    if tx.get(keys.engine_namespace(ns)) is None:
        tx.put(keys.engine_namespace(ns), b"")


def engine_namespaces(tx: Txn) -> list[str]:
    prefix = keys.engine_namespaces_all()
    return [keys.engine_namespace_from_key(k) for k, _ in tx.scan(prefix, keys.prefix_end(prefix))]


def run_create_if_absent(tx: Txn, ns: str, run: E.EngineRun) -> E.EngineRun:
    """The run as stored: `run` if it was new, else the record already there."""
    engine_namespace_register(tx, ns)
    existing = _load(tx, ns, run.id)
    if existing is not None:
        return existing
    run.created_ns = run.created_ns or tx.now_ns()
    _put(tx, ns, run)
    return run


def run_get(tx: Txn, ns: str, run_id: str) -> E.EngineRun:
    return _must(tx, ns, run_id)


def run_list(tx: Txn, ns: str, limit: int, before: str = "") -> list[E.EngineRun]:
    """Newest first (ids are ULIDs), `limit` of them, older than the run id `before`."""
    prefix = keys.engine_runs_all(ns)
    end = keys.engine_run(ns, before) if before else keys.prefix_end(prefix)
    return [E.EngineRun.FromString(v) for _, v in tx.scan(prefix, end, limit, True)]


@dataclass(frozen=True, slots=True)
class AttemptStart:
    run_id: str
    queue: str
    job: E.EngineJob  # the job's payload: the spec (a schedule-fired run has no record yet)
    attempt: int  # 1-based, the lease's
    epoch: int
    runner: str
    schedule: str = ""


def run_start_attempt_if_runnable(tx: Txn, ns: str, start: AttemptStart) -> E.EngineRun | None:
    """Mark the run RUNNING with a new attempt (creating the record for a run a schedule
    enqueued). None if the run was canceled meanwhile: the runner drops the job."""
    run = _load(tx, ns, start.run_id)
    if run is None:
        run = E.EngineRun(id=start.run_id, job=start.job, state=QUEUED, queue=start.queue,
                          schedule=start.schedule, created_ns=tx.now_ns())  # fmt: skip
        engine_namespace_register(tx, ns)
    if run.state in FINISHED:
        return None
    if run.cancel_requested:  # canceled while its job was being leased: it ends here
        run.state = CANCELED
        run.finished_ns = tx.now_ns()
        run.error = "canceled"
        _put(tx, ns, run)
        return None
    now = tx.now_ns()
    # A lease of the same attempt again (the runner restarted and the job came back
    # after its lease ran out) closes the attempt left open.
    if run.attempts and not run.attempts[-1].finished_ns:
        last = run.attempts[-1]
        last.finished_ns = now
        last.error = last.error or "the runner stopped during this attempt"
    run.attempts.add(attempt=start.attempt, started_ns=now, runner=start.runner)
    run.state = RUNNING
    run.epoch = start.epoch
    run.started_ns = run.started_ns or now
    _put(tx, ns, run)
    return run


def run_set_pid(tx: Txn, ns: str, run_id: str, pid: int) -> None:
    run = _must(tx, ns, run_id)
    if run.attempts:
        run.attempts[-1].pid = pid
        _put(tx, ns, run)


def run_finish_attempt(
    tx: Txn, ns: str, run_id: str, state: int, exit_code: int | None, error: str
) -> E.EngineRun:
    """Close the attempt in flight: `state` is RETRYING (another attempt follows) or a
    final state. Writes a last log line saying how the attempt ended."""
    run = _must(tx, ns, run_id)
    now = tx.now_ns()
    if run.attempts and not run.attempts[-1].finished_ns:
        a = run.attempts[-1]
        a.finished_ns = now
        if exit_code is not None:
            a.exit_code = exit_code
        a.error = error
    if exit_code is not None:
        run.exit_code = exit_code
    else:
        run.ClearField("exit_code")
    run.error = error
    run.state = state
    if state in FINISHED:
        run.finished_ns = now
    run.epoch = 0
    _put(tx, ns, run)
    return run


def run_cancel_if_unfinished(tx: Txn, ns: str, run_id: str, running: bool) -> E.EngineRun:
    """Ask for the run to stop. A run not running is CANCELED at once (its job is
    canceled by the caller); a running one keeps RUNNING with `cancel_requested` until
    its runner has stopped the process."""
    run = _must(tx, ns, run_id)
    if run.state in FINISHED:
        raise InvalidState(run_id, state_name(run.state), "canceled",
                           f"engine run {run_id} is already {state_name(run.state)}")  # fmt: skip
    run.cancel_requested = True
    if not running:
        run.state = CANCELED
        run.finished_ns = tx.now_ns()
        run.error = "canceled"
    _put(tx, ns, run)
    return run


def runs_running_on(tx: Txn, ns: str, runner: str) -> list[E.EngineRun]:
    """The namespace's runs whose attempt in flight belongs to `runner` (its restart
    closes them)."""
    prefix = keys.engine_runs_all(ns)
    out = []
    for _, raw in tx.scan(prefix, keys.prefix_end(prefix)):
        run = E.EngineRun.FromString(raw)
        if run.state == RUNNING and run.attempts and run.attempts[-1].runner == runner:
            out.append(run)
    return out


def run_append_logs(tx: Txn, ns: str, run_id: str, lines: list[tuple[int, str, str]]) -> int:
    """Append `(at_ns, stream, line)` lines; returns the run's line count."""
    run = _must(tx, ns, run_id)
    n = run.log_count
    for at_ns, stream, line in lines:
        n += 1
        rec = E.EngineLogLine(n=n, at_ns=at_ns or tx.now_ns(), stream=stream, line=line[:MAX_LINE_CHARS])
        tx.put(keys.engine_log(ns, run_id, n), rec.SerializeToString())
    run.log_count = n
    _put(tx, ns, run)
    return n


def run_logs(
    tx: Txn, ns: str, run_id: str, after: int, limit: int
) -> tuple[list[E.EngineLogLine], E.EngineRun]:
    run = _must(tx, ns, run_id)
    start = keys.engine_log(ns, run_id, after + 1)
    end = keys.prefix_end(keys.engine_logs(ns, run_id))
    return [E.EngineLogLine.FromString(v) for _, v in tx.scan(start, end, limit)], run


# -- Flink runs: one run per deployment lifetime, kept in step by the lifecycle's recorder --
def _append_loam_line(tx: Txn, ns: str, run: E.EngineRun, line: str) -> None:
    run.log_count += 1
    rec = E.EngineLogLine(n=run.log_count, at_ns=tx.now_ns(), stream="loam", line=line[:MAX_LINE_CHARS])
    tx.put(keys.engine_log(ns, run.id, run.log_count), rec.SerializeToString())


def run_flink_sync(
    tx: Txn, ns: str, run_id: str, status: E.FlinkStatus, state: int, error: str, log: str | None
) -> None:
    """Copy the deployment's view onto its run (the action counters stay the run's own),
    with the lifecycle's log line. A run that no longer exists is left alone."""
    run = _load(tx, ns, run_id)
    if run is None:
        return
    keep = (run.flink.actions_requested, run.flink.actions_done, run.flink.last_action,
            run.flink.last_action_error, run.flink.status_requested)  # fmt: skip
    live = E.FlinkJobLive()
    live.CopyFrom(run.flink.live)
    run.flink.CopyFrom(status)
    (run.flink.actions_requested, run.flink.actions_done, run.flink.last_action,
     run.flink.last_action_error, run.flink.status_requested) = keep  # fmt: skip
    if live.seq:
        run.flink.live.CopyFrom(live)
    now = tx.now_ns()
    if state == RUNNING and not run.started_ns:
        run.started_ns = now
    if state in FINISHED and run.state not in FINISHED:
        run.finished_ns = now
    elif state not in FINISHED:
        run.finished_ns = 0
    run.state = state
    run.error = error
    if log:
        _append_loam_line(tx, ns, run, log)
    _put(tx, ns, run)


def run_flink_request_action(tx: Txn, ns: str, run_id: str, action: str) -> tuple[E.EngineRun, int]:
    """Count a control action in: (the run, the action's sequence number)."""
    run = _must(tx, ns, run_id)
    if run.state == CANCELED:
        raise InvalidState(run_id, state_name(run.state), action,
                           f"engine run {run_id} is canceled: deploy the job again as a new run")  # fmt: skip
    run.flink.actions_requested += 1
    _append_loam_line(tx, ns, run, f"{action} requested (action {run.flink.actions_requested})")
    _put(tx, ns, run)
    return run, run.flink.actions_requested


def run_flink_request_status(tx: Txn, ns: str, run_id: str) -> tuple[E.EngineRun, int]:
    """Count a live status read in: (the run, the request's number). Not an action: it
    changes nothing, waits for nothing, and is answered in any state."""
    run = _must(tx, ns, run_id)
    run.flink.status_requested += 1
    _put(tx, ns, run)
    return run, run.flink.status_requested


def run_flink_live(tx: Txn, ns: str, run_id: str, live: E.FlinkJobLive) -> E.EngineRun | None:
    """Record Flink's answer to a status request (a newer one is never overwritten by an
    older one that finished later)."""
    run = _load(tx, ns, run_id)
    if run is None or live.seq <= run.flink.live.seq:
        return run
    run.flink.live.CopyFrom(live)
    # A line of its own: the log is what the caller waits on, and says what Flink said when.
    _append_loam_line(
        tx,
        ns,
        run,
        f"status {live.seq}: "
        + (
            live.error
            or (
                f"job {live.job_id} {live.state}, {live.checkpoints_completed} checkpoints"
                + (f", the last {live.last_checkpoint_path}" if live.last_checkpoint_path else "")
                + (", a savepoint in progress" if live.savepoint_in_progress else "")
            )
        ),
    )
    _put(tx, ns, run)
    return run


def run_flink_action_done(tx: Txn, ns: str, run_id: str, seq: int, action: str, error: str) -> E.EngineRun:
    run = _must(tx, ns, run_id)
    run.flink.actions_done = max(run.flink.actions_done, seq)
    run.flink.last_action = action
    run.flink.last_action_error = error
    _append_loam_line(tx, ns, run, f"{action} {'failed: ' + error if error else 'done'} (action {seq})")
    _put(tx, ns, run)
    return run


def run_flink_refused(tx: Txn, ns: str, run_id: str, error: str) -> E.EngineRun:
    """A deploy the lifecycle refused before any deployment was written: the run ends FAILED."""
    run = _must(tx, ns, run_id)
    if run.state not in FINISHED:
        run.state = FAILED
        run.finished_ns = tx.now_ns()
    run.error = error
    _append_loam_line(tx, ns, run, f"deploy refused: {error}")
    _put(tx, ns, run)
    return run
