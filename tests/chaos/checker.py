"""The checker: what a run's history and the store's final state must satisfy.

- no acknowledged enqueue lost: every job an enqueue was told about exists and, after
  the drain, is completed;
- no job with two outcomes: at most one terminal event per job in the event log, and at
  most one completion acknowledged per job;
- no completion by a fenced lease: an acknowledged completion's epoch is the epoch the
  job's `completed` event records;
- at most one active job per subject: no two jobs of one subject held by workers at
  once, judged by client times (a lease's answer arrived before the other's completion
  was sent, both completions acknowledged), but for the jobs of one subject batch
  (one lease with `subject_batch`), which run together;
- subject batches keep their subject's order: for the subjects the run producer
  enqueued one job at a time (workload.RUN_SUBJECTS), walking the event log, a job is
  leased (`active`) only when every job of its subject acknowledged before it is
  completed or active (leased with it, or in the run still running): FIFO per subject,
  one run at a time, and a dead worker's run, taken back by the stalled sweep, leased
  again in order before anything behind it. Every job completed once is checked above;
- per-queue FIFO where it is promised (the FIFO queue: one shard, one priority, no
  retries or delays): the jobs' first leases, in the order the log records them, are
  in the order their enqueues were acknowledged by its one sequential producer. The
  log's order counts, not the worker's: a lease whose answer was lost still took its
  job in order, and the job's later lease (after the stalled sweep) is a redelivery;
- counts equal to the records: each state's counter is the number of job records in it;
- durable steps (the Resonate SDK worker's runs, durable_steps_worker.py, against the
  durable promises the store ends with): every acknowledged workflow resolved; no step
  ran once its promise was settled (each run asked the server first); every settled
  step's value is the output of one of its runs, and every later step, in every run,
  was fed exactly that value (a promise settled twice, or a result read two ways,
  would feed two); each workflow's result is its last step's settled value;
- the event log per shard is 1..head with no gap or repeat, and a Watch that reconnected
  along the way received a gapless, repeat-free run of it up to the head.
"""

from __future__ import annotations

import base64
import collections
import json
from dataclasses import dataclass, field

from history import History

from loam_common import keys
from loam_common.gen.loam.jobs.v1 import events_pb2
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import admin
from loam_common.jobs import states as S

TERMINAL_EVENTS = ("completed", "failed", "dead-lettered")


@dataclass
class FinalState:
    jobs: dict[str, pb.Job]
    log: list[events_pb2.JobEvent]
    heads: dict[int, int]
    counts: pb.QueueCounts


def read_final_state(tx, ns: str, queue: str) -> FinalState:
    k = keys.QueueKeys(ns, queue)
    jobs = {}
    for _k, v in tx.scan(k.jobs(), keys.prefix_end(k.jobs())):
        j = pb.Job.FromString(v)
        jobs[j.id] = j
    log, heads = [], {}
    cfg = admin.queue_config(tx, ns, queue)
    for shard in range(max(cfg.shards, 1)):
        p = k.event_log_shard(shard)
        log += [events_pb2.JobEvent.FromString(v) for _k, v in tx.scan(p, keys.prefix_end(p))]
        raw = tx.get(k.shard_meta(shard))
        heads[shard] = pb.ShardMeta.FromString(raw).outbox_seq if raw else 0
    return FinalState(jobs, log, heads, admin.queue_counts(tx, ns, queue))


@dataclass
class Report:
    operations: int = 0
    ok: int = 0
    acknowledged_jobs: int = 0
    completions: int = 0
    fenced: int = 0
    fifo_checked: int = 0
    durable_workflows: int = 0
    durable_steps: int = 0
    durable_step_runs: int = 0
    subject_batches: int = 0  # leases that took more than one job as a subject batch
    subject_run_jobs: int = 0  # jobs of RUN_SUBJECTS checked for their subject's order
    subject_run_releases: int = 0  # of those, leased again after going back (stalled, fenced)
    events_watched: int = 0
    watch_reconnects: int = 0
    lost: list[str] = field(default_factory=list)
    doubled: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    def text(self, history: History) -> str:
        faults = ", ".join(f"{k} {v}" for k, v in sorted(history.faults.items())) or "none"
        return (
            f"operations checked {self.operations} ({self.ok} ok); jobs acknowledged {self.acknowledged_jobs}, "
            f"completions acknowledged {self.completions}, fenced {self.fenced}; FIFO order checked over "
            f"{self.fifo_checked} jobs; subject batches {self.subject_batches}, subject order checked over "
            f"{self.subject_run_jobs} jobs ({self.subject_run_releases} leased again); durable workflows {self.durable_workflows}, steps settled "
            f"{self.durable_steps} in {self.durable_step_runs} runs; events watched "
            f"{self.events_watched} over {self.watch_reconnects} reconnects; faults: {faults}; bad inputs tried "
            f"{history.bad_inputs} ({len(history.bad_input_failures)} answered wrongly); violations {len(self.violations)}; "
            f"lost {len(self.lost)}, doubled {len(self.doubled)}"
        )


def check(history: History, finals: dict[str, FinalState], *, watched: str, fifo: str | None = None,
          durable: tuple[dict[str, dict], list[dict]] | None = None) -> Report:  # fmt: skip
    """Check a run over several queues (`finals`: each queue's final state): `watched` is
    the queue the run's Watch followed, `fifo` the queue that promises FIFO order,
    `durable` the durable promises at the end (by id) and the worker's step runs."""
    r = Report(operations=len(history.ops), ok=sum(1 for o in history.ops if o.status == "ok"))
    v = r.violations
    final = FinalState({}, [], {}, None)  # every queue's jobs and log, for the per-job checks
    for f in finals.values():
        final.jobs.update(f.jobs)
        final.log += f.log

    acked = {o.value for o in history.of("enqueue", "ok")}
    r.acknowledged_jobs = len(acked)
    for job_id in sorted(acked):
        job = final.jobs.get(job_id)
        if job is None or job.state != S.COMPLETED:
            r.lost.append(job_id)
            v.append(
                f"lost: job {job_id} acknowledged, {'missing' if job is None else S.name(job.state)} at the end"
            )

    terminal = collections.Counter(e.job_id for e in final.log if e.event in TERMINAL_EVENTS)
    completed_epoch = {e.job_id: e.epoch for e in final.log if e.event == "completed"}
    acked_completions = collections.Counter()
    for op in history.of("complete", "ok"):
        acked_completions[op.args["job"]] += 1
        if completed_epoch.get(op.args["job"]) != op.args["epoch"]:
            v.append(f"fenced lease completed: job {op.args['job']} epoch {op.args['epoch']}, "
                     f"recorded {completed_epoch.get(op.args['job'])}")  # fmt: skip
    r.completions = sum(acked_completions.values())
    r.fenced = sum(1 for o in history.of("complete", "fail") if "stale" in o.error)
    for job_id in sorted(set(terminal) | set(acked_completions)):
        if terminal[job_id] > 1 or acked_completions[job_id] > 1:
            r.doubled.append(job_id)
            v.append(f"two outcomes: job {job_id}: {terminal[job_id]} terminal events, "
                     f"{acked_completions[job_id]} acknowledged completions")  # fmt: skip

    _check_subjects(history, v)
    _check_subject_runs(history, final, r)
    if fifo is not None:
        _check_fifo(history, finals[fifo], fifo, r)
    for queue, f in finals.items():
        _check_counts(queue, f, v)
    _check_event_log(history, finals[watched], r)
    if durable is not None:
        _check_durable(history, *durable, r)
    for bad in history.bad_input_failures:
        v.append(f"a bad input was answered wrongly: {bad}")
    return r


def _check_subjects(history: History, v: list[str]) -> None:
    # (job, epoch) -> (lease answered, subject, the lease op when it was a subject batch)
    leased_at: dict[tuple[str, int], tuple[float, str, int]] = {}
    for n, op in enumerate(history.ops):
        if op.kind != "lease" or op.status != "ok":
            continue
        batch = n if op.args.get("subject_batch", 0) > 1 else -1
        for job, epoch, subject in op.value:
            if subject:
                leased_at[(job, epoch)] = (op.completed, subject, batch)
    held: dict[str, list[tuple[float, float, str, int]]] = collections.defaultdict(list)
    for op in history.of("complete", "ok"):
        got = leased_at.get((op.args["job"], op.args["epoch"]))
        if got is not None:
            held[got[1]].append((got[0], op.invoked, op.args["job"], got[2]))
    for subject, spans in held.items():
        spans.sort()
        for i, (b0, _b1, b, b_batch) in enumerate(spans):
            for a0, a1, a, a_batch in spans[:i]:
                if b0 < a1 and a != b and (a_batch < 0 or a_batch != b_batch):
                    v.append(
                        f"subject {subject}: jobs {a} and {b} held at once ({a0:.3f}-{a1:.3f}, {b0:.3f}-)"
                    )


def _check_subject_runs(history: History, final: FinalState, r: Report) -> None:
    """workload.RUN_SUBJECTS: each job leased only once every job acknowledged before it
    on its subject is completed or active (see the module's docstring)."""
    r.subject_batches = sum(
        1 for o in history.of("lease", "ok") if o.args.get("subject_batch", 0) > 1 and len(o.value) > 1
    )
    order: dict[str, tuple[str, int]] = {}  # job -> (subject, its place in the subject's order)
    per_subject: dict[str, list[str]] = collections.defaultdict(list)
    for op in sorted(history.of("enqueue", "ok"), key=lambda o: o.invoked):
        if op.process == "run-producer":
            subject = op.args["subject"]
            order[op.value] = (subject, len(per_subject[subject]))
            per_subject[subject].append(op.value)
    r.subject_run_jobs = len(order)
    state: dict[str, str] = {}
    activations = collections.Counter()
    for e in sorted(final.log, key=lambda e: (e.shard, e.seq)):
        if e.job_id not in order:
            continue
        if e.event == "active":
            subject, place = order[e.job_id]
            ahead = [j for j in per_subject[subject][:place] if state.get(j) not in ("completed", "active")]
            if ahead:
                r.violations.append(f"subject {subject}: job {e.job_id} leased (epoch {e.epoch}) while {ahead[:3]}, "
                                    "acknowledged before it, waited")  # fmt: skip
            state[e.job_id] = "active"
            activations[e.job_id] += 1
        elif e.event == "completed":
            state[e.job_id] = "completed"
        elif e.event in ("stalled", "waiting", "delayed", "failed", "removed"):
            state[e.job_id] = e.event
    r.subject_run_releases = sum(1 for n in activations.values() if n > 1)


def _check_fifo(history: History, final: FinalState, queue: str, r: Report) -> None:
    enqueued = [o for o in history.of("enqueue", "ok") if o.args["queue"] == queue]
    enqueued.sort(key=lambda o: o.invoked)
    order = {o.value: i for i, o in enumerate(enqueued)}
    first_leases: list[str] = []
    seen: set[str] = set()
    for e in sorted(final.log, key=lambda e: (e.shard, e.seq)):
        if e.event == "active" and e.job_id not in seen:
            seen.add(e.job_id)
            if e.job_id in order:
                first_leases.append(e.job_id)
    r.fifo_checked = len(first_leases)
    for a, b in zip(first_leases, first_leases[1:], strict=False):
        if order[b] < order[a]:
            r.violations.append(f"FIFO queue {queue}: job {b} (enqueued {order[b]}th) first leased after "
                                f"job {a} (enqueued {order[a]}th)")  # fmt: skip


def _decoded(value: dict | None):
    """A settled promise's value as the SDK wrote it (base64 of JSON)."""
    data = (value or {}).get("data")
    return json.loads(base64.b64decode(data)) if data else None


def _check_durable(history: History, promises: dict[str, dict], runs: list[dict], r: Report) -> None:
    v = r.violations
    roots = {o.value for o in history.of("durable-start", "ok")}
    r.durable_workflows = len(roots)
    r.durable_step_runs = len(runs)
    runs_of: dict[str, list[dict]] = collections.defaultdict(list)
    for run in runs:
        runs_of[run["promise"]].append(run)
        if run["settled_before"]:
            v.append(
                f"durable step {run['promise']} ran although its promise was already {run['state_at_start']}"
            )
    settled: dict[str, str] = {}  # step promise -> its value
    for pid, step_runs in runs_of.items():
        p = promises.get(pid)
        if p is None or p["state"] == "pending":
            continue  # a run whose workflow went another way (never the case here) or is unfinished
        value = _decoded(p.get("value"))
        settled[pid] = value
        if value not in {run["output"] for run in step_runs}:
            v.append(
                f"durable step {pid}: settled with {value!r}, which none of its {len(step_runs)} runs returned"
            )
    r.durable_steps = len(settled)
    fed = set(settled.values())
    for run in runs:
        if "+" in run["input"] and run["input"] not in fed:  # not a workflow's start value
            v.append(f"durable step {run['promise']} was fed {run['input']!r}, no settled step's value")
    for root in sorted(roots):
        p = promises.get(root)
        if p is None or p["state"] != "resolved":
            r.lost.append(root)
            v.append(
                f"lost: durable workflow {root} acknowledged, {'missing' if p is None else p['state']} at the end"
            )
            continue
        result = _decoded(p.get("value"))
        if result not in fed:
            v.append(f"durable workflow {root}: result {result!r} is no settled step's value")


def _check_counts(queue: str, final: FinalState, v: list[str]) -> None:
    by_state = collections.Counter(S.name(j.state) for j in final.jobs.values())
    counted = admin.counts_by_state_name(final.counts)
    for state, n in counted.items():
        if n != by_state.get(state, 0):
            v.append(f"counts of {queue}: {state} counter {n}, records {by_state.get(state, 0)}")


def _check_event_log(history: History, final: FinalState, r: Report) -> None:
    v = r.violations
    for shard, head in final.heads.items():
        seqs = [e.seq for e in final.log if e.shard == shard]
        if seqs != list(range(1, head + 1)):
            v.append(f"event log shard {shard}: not 1..{head} (got {len(seqs)} entries)")
    watched: dict[int, list[int]] = collections.defaultdict(list)
    for op in history.of("watch"):
        for shard, seq in op.value or ():
            watched[shard].append(seq)
    r.watch_reconnects = max(len(history.of("watch")) - 1, 0)
    r.events_watched = sum(len(s) for s in watched.values())
    for shard, seqs in watched.items():
        if not seqs:
            continue
        # Safety: what the Watch delivered is one run of the log, no gap, no repeat...
        if seqs != list(range(seqs[0], seqs[-1] + 1)):
            dups = len(seqs) - len(set(seqs))
            gaps = len(set(range(seqs[0], max(seqs) + 1)) - set(seqs))
            v.append(
                f"watch shard {shard}: {len(seqs)} events from {seqs[0]}: {dups} repeated, {gaps} skipped"
            )
        # ...and liveness: it caught up with the head once the load stopped.
        head = final.heads.get(shard, 0)
        if seqs[-1] < head:
            v.append(f"watch shard {shard}: stopped at {seqs[-1]}, the log's head is {head}")
