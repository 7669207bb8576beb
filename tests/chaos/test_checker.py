"""The checker (checker.py) catches what it claims to: histories and final states made
by hand, each with one defect (a FIFO inversion, a durable step run after its promise
was settled, a step fed a value its predecessor was not settled with, a workflow never
resolved), are each reported, and the clean version of each is not."""

from __future__ import annotations

import base64
import json

from checker import FinalState, check
from history import History

from loam_common.gen.loam.jobs.v1 import events_pb2
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S


def _final(jobs: list[str], lease_order: list[str]) -> FinalState:
    log, seq = [], 0
    for j in jobs:
        seq += 1
        log.append(events_pb2.JobEvent(event="waiting", job_id=j, shard=0, seq=seq))
    for j in lease_order:
        seq += 1
        log.append(events_pb2.JobEvent(event="active", job_id=j, shard=0, seq=seq))
    for j in jobs:
        seq += 1
        log.append(events_pb2.JobEvent(event="completed", job_id=j, shard=0, seq=seq, epoch=1))
    records = {j: pb.Job(id=j, state=S.COMPLETED) for j in jobs}
    return FinalState(records, log, {0: seq}, pb.QueueCounts(completed=len(jobs)))


def _history(jobs: list[str]) -> History:
    h = History()
    for j in jobs:
        h.ok(h.invoke("enqueue", "fifo-producer", queue="fifo", subject=""), j)
    for j in jobs:
        h.ok(h.invoke("complete", "fifo-worker", job=j, epoch=1))
    return h


def test_fifo_inversions_are_reported_and_redeliveries_are_not():
    jobs = ["a", "b", "c"]
    ok = check(_history(jobs), {"fifo": _final(jobs, ["a", "b", "a", "c"])}, watched="fifo", fifo="fifo")
    assert ok.violations == [] and ok.fifo_checked == 3  # a's second lease is a redelivery
    bad = check(_history(jobs), {"fifo": _final(jobs, ["a", "c", "b"])}, watched="fifo", fifo="fifo")
    assert len(bad.violations) == 1 and "FIFO queue fifo: job b" in bad.violations[0]


def _value(v: str) -> dict:
    return {"data": base64.b64encode(json.dumps(v).encode()).decode()}


def _durable(runs: list[dict], settled: dict[str, str], root_state: str = "resolved"):
    promises = {pid: {"id": pid, "state": "resolved", "value": _value(v)} for pid, v in settled.items()}
    promises["wf"] = {
        "id": "wf",
        "state": root_state,
        "value": _value(settled.get("wf.2", "")) if root_state == "resolved" else {},
    }
    return promises, runs


def _run(pid: str, inp: str, out: str, settled_before: bool = False) -> dict:
    return {"promise": pid, "input": inp, "output": out, "settled_before": settled_before,
            "state_at_start": "resolved" if settled_before else "pending"}  # fmt: skip


def _check_durable(promises, runs):
    h = History()
    h.ok(h.invoke("durable-start", "durable-starter", id="wf"), "wf")
    empty = FinalState({}, [], {}, pb.QueueCounts())
    return check(h, {"q": empty}, watched="q", durable=(promises, runs)).violations


def test_durable_checks_pass_a_clean_run_with_a_rerun_before_the_settle():
    runs = [_run("wf.1", "w", "w+s1#a"), _run("wf.1", "w", "w+s1#b"), _run("wf.2", "w+s1#a", "w+s1#a+s2#c")]
    assert _check_durable(*_durable(runs, {"wf.1": "w+s1#a", "wf.2": "w+s1#a+s2#c"})) == []


def test_a_step_run_after_its_promise_settled_is_reported():
    runs = [_run("wf.1", "w", "w+s1#a"), _run("wf.1", "w", "w+s1#b", settled_before=True),
            _run("wf.2", "w+s1#a", "w+s1#a+s2#c")]  # fmt: skip
    (v,) = _check_durable(*_durable(runs, {"wf.1": "w+s1#a", "wf.2": "w+s1#a+s2#c"}))
    assert "wf.1 ran although its promise was already resolved" in v


def test_a_step_fed_a_value_its_predecessor_was_not_settled_with_is_reported():
    runs = [_run("wf.1", "w", "w+s1#a"), _run("wf.1", "w", "w+s1#b"),
            _run("wf.2", "w+s1#a", "w+s1#a+s2#c"), _run("wf.2", "w+s1#b", "w+s1#b+s2#d")]  # fmt: skip
    violations = _check_durable(*_durable(runs, {"wf.1": "w+s1#a", "wf.2": "w+s1#a+s2#c"}))
    assert any("was fed 'w+s1#b'" in v for v in violations), violations


def test_a_settled_value_no_run_returned_and_an_unresolved_workflow_are_reported():
    runs = [_run("wf.1", "w", "w+s1#a")]
    violations = _check_durable(*_durable(runs, {"wf.1": "w+s1#zzz"}, root_state="pending"))
    assert any("none of its 1 runs returned" in v for v in violations), violations
    assert any("lost: durable workflow wf" in v for v in violations), violations


def _run_history(jobs: list[str], leases: list[tuple[list[str], int]]) -> History:
    """The run producer's jobs of one subject, then `leases`: (jobs, subject_batch),
    each lease's jobs completed (epoch 1) after every lease was answered."""
    h = History()
    for j in jobs:
        h.ok(h.invoke("enqueue", "run-producer", queue="work", subject="run-0"), j)
    for got, batch in leases:
        h.ok(
            h.invoke("lease", "batch-worker-0", queue="work", max=4, subject_batch=batch),
            [(j, 1, "run-0") for j in got],
        )
    for got, _batch in leases:
        for j in got:
            h.ok(h.invoke("complete", "batch-worker-0", job=j, epoch=1))
    return h


def test_a_subject_batch_may_hold_its_subject_together_but_two_leases_may_not():
    jobs = ["a", "b", "c"]
    final = {"work": _final(jobs, ["a", "b", "c"])}
    ok = check(_run_history(jobs, [(["a", "b", "c"], 4)]), final, watched="work")
    assert ok.violations == [] and ok.subject_batches == 1 and ok.subject_run_jobs == 3
    # the same three jobs held at once by three plain leases: one subject, three holders
    bad = check(_run_history(jobs, [(["a"], 0), (["b"], 0), (["c"], 0)]), final, watched="work")
    assert sum("held at once" in v for v in bad.violations) == 3, bad.violations


def _log(events: list[tuple[str, str]]) -> FinalState:
    log = [
        events_pb2.JobEvent(event=ev, job_id=j, shard=0, seq=n, epoch=1)
        for n, (ev, j) in enumerate(events, 1)
    ]
    jobs = sorted({j for _ev, j in events})
    return FinalState(
        {j: pb.Job(id=j, state=S.COMPLETED) for j in jobs},
        log,
        {0: len(log)},
        pb.QueueCounts(completed=len(jobs)),
    )


def test_a_run_that_comes_back_in_order_passes_and_one_overtaken_is_reported():
    jobs = ["a", "b", "c", "d"]
    h = _run_history(jobs, [])
    added = [("waiting", j) for j in jobs]
    # a done; b and c of a dead worker's run stalled, then leased again in order, then d
    came_back = added + [("active", "a"), ("active", "b"), ("active", "c"), ("completed", "a"),
                         ("stalled", "b"), ("stalled", "c"), ("active", "b"), ("active", "c"),
                         ("completed", "b"), ("completed", "c"), ("active", "d"), ("completed", "d")]  # fmt: skip
    ok = check(h, {"work": _log(came_back)}, watched="work")
    assert ok.violations == [] and ok.subject_run_releases == 2
    # d leased while the stalled c waited: the run did not come back before what is behind it
    overtaken = added + [("active", "a"), ("active", "b"), ("active", "c"), ("completed", "a"),
                         ("completed", "b"), ("stalled", "c"), ("active", "d"), ("active", "c"),
                         ("completed", "c"), ("completed", "d")]  # fmt: skip
    (v,) = check(h, {"work": _log(overtaken)}, watched="work").violations
    assert "job d leased" in v and "['c']" in v
