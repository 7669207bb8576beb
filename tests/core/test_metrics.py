"""Metrics (loam_common.metrics): after a mixed workload, split over two queue cores
(on SQLite, two stores on one file, as two processes would be), every counter and
gauge of `/metrics` agrees with the store's own records: the job records per state
(check_invariants), the events in the outbox, and the refusals the callers saw; and
either core serves the same numbers."""

from __future__ import annotations

from collections import Counter

import pytest

from loam_common import metrics
from loam_common.errors import Fenced
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S
from loam_common.jobs.complete import Fail, Ok, Release, Retry
from loam_common.store import Store
from loam_queue_core import QueueCore

NS = "acme"

SEC = 1_000_000_000


def _value(parsed, name: str, **labels) -> float:
    want = {"ns": NS, **labels}
    hits = [v for (n, lab), v in parsed.items() if n == name and dict(lab) == want]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


@pytest.fixture
async def second_core(store, tmp_path, clock, blobs):
    """Another queue core on the same store on disk: a second process (not memory)."""
    if not store.capabilities.multi_process:
        yield None
        return
    other = Store(type(store.backend)(store.backend.path, clock=clock))
    yield QueueCore(other, blobs)
    await other.close()


async def test_metrics_agree_with_the_store_after_a_mixed_workload(
    store, core, second_core, configure, sweep, clock, check_invariants, events_of
):
    cores = [core, second_core or core]
    await configure("q", dead_letter_queue="dlq", visibility_ns=5 * SEC, attempts=2)
    outcomes: Counter = Counter()
    fenced = 0
    for i in range(12):
        opts = pb.EnqueueOpts(priority=3 if i % 4 == 0 else 0)
        if i >= 10:
            opts.not_before.delay_ns = 3600 * SEC
        await cores[i % 2].jobs.enqueue(NS, "q", pb.TaskSpec(name=f"task{i % 3}"), opts)
    await cores[1].jobs.enqueue_bulk(NS, "other", [(pb.TaskSpec(name="x"), None)] * 3)
    leased = await cores[0].jobs.lease(NS, ["q"], "w1", max_jobs=4) + await cores[1].jobs.lease(
        NS, ["q"], "w2", max_jobs=3
    )
    assert len(leased) == 7
    plan = ["ok", "ok", "retry", "fail_dlq", "release", "stall", "ok"]
    stalled_job = None
    for k, (job, what) in enumerate(zip(leased, plan, strict=True)):
        c = cores[k % 2]
        if what == "ok":
            await c.jobs.complete(NS, "q", job.id, job.epoch, Ok())
        elif what == "retry":
            await c.jobs.complete(NS, "q", job.id, job.epoch, Retry(pb.JobError(message="again"), 0))
        elif what == "fail_dlq":
            await c.jobs.complete(
                NS, "q", job.id, job.epoch, Fail(pb.JobError(message="x"), dead_letter=True)
            )
        elif what == "release":
            await c.jobs.complete(NS, "q", job.id, job.epoch, Release())
        else:
            stalled_job = job
            continue
        outcomes[{"fail_dlq": "fail"}.get(what, what)] += 1
    clock.advance(10 * SEC)
    await sweep()  # reclaims the stalled lease: epoch + 1
    for c in cores:  # the first worker comes back late: fenced, on either core
        with pytest.raises(Fenced):
            await c.jobs.complete(NS, "q", stalled_job.id, stalled_job.epoch, Ok())
        fenced += 1
    with pytest.raises(Fenced):
        await core.jobs.extend(NS, "q", stalled_job.id, stalled_job.epoch, SEC)
    fenced += 1
    more = await cores[1].jobs.lease(NS, ["q"], "w3", max_jobs=2)
    clock.advance(2 * SEC)

    texts = [await metrics.render_store(c.store, process=False) for c in cores]
    assert texts[0] == texts[1]  # any process serves the same store-derived numbers
    parsed = metrics.parse(texts[0])

    for queue in ("q", "other", "dlq"):
        by_state = await check_invariants(queue)
        evs = await events_of(queue)
        names = Counter(e.event for e in evs)
        assert _value(parsed, "loam_jobs_enqueued_total", queue=queue) == names["added"]
        assert _value(parsed, "loam_jobs_leased_total", queue=queue) == names["active"]
        assert _value(parsed, "loam_jobs_stalled_total", queue=queue) == names["stalled"]
        assert _value(parsed, "loam_jobs_waiting", queue=queue, band="fifo") == by_state[S.WAITING]
        assert _value(parsed, "loam_jobs_waiting", queue=queue, band="prioritized") == by_state[S.PRIORITIZED]
        assert _value(parsed, "loam_jobs_delayed", queue=queue) == by_state[S.DELAYED]
        assert _value(parsed, "loam_jobs_active", queue=queue) == by_state[S.ACTIVE]
    assert _value(parsed, "loam_jobs_enqueued_total", queue="q") == 12
    assert _value(parsed, "loam_jobs_enqueued_total", queue="dlq") == 1
    assert _value(parsed, "loam_jobs_leased_total", queue="q") == 7 + len(more)
    assert _value(parsed, "loam_jobs_stalled_total", queue="q") == 1
    assert _value(parsed, "loam_jobs_fenced_total", queue="q") == fenced == 3
    for outcome in metrics.OUTCOMES:
        assert _value(parsed, "loam_jobs_completed_total", queue="q", outcome=outcome) == outcomes[outcome]
    assert _value(parsed, "loam_jobs_dlq_depth", queue="dlq") == 1
    assert _value(parsed, "loam_jobs_oldest_waiting_seconds", queue="q") >= 2.0
    assert _value(parsed, "loam_jobs_oldest_waiting_seconds", queue="dlq") >= 2.0


async def test_histograms_are_per_process_and_the_text_format_is_valid(store, core):
    before = metrics.PROCESS.run_seconds.series()
    await core.jobs.enqueue(NS, "h", pb.TaskSpec(name='odd "name"\\x'))
    (job,) = await core.jobs.lease(NS, ["h"], "w")
    await core.jobs.complete(NS, "h", job.id, job.epoch, Ok())
    text = await metrics.render_store(store)
    parsed = metrics.parse(text)
    assert metrics.PROCESS.run_seconds.series() >= before
    count = _value(parsed, "loam_jobs_run_seconds_count", queue="h", task='odd "name"\\x')
    assert count >= 1
    assert _value(parsed, "loam_jobs_lease_latency_seconds_count", queue="h") >= 1
    inf = _value(parsed, "loam_jobs_run_seconds_bucket", queue="h", task='odd "name"\\x', le="+Inf")
    assert inf == count
    families = [ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE")]
    assert len(families) == len(set(families))
    for name in ("loam_jobs_enqueued_total", "loam_jobs_leased_total", "loam_jobs_completed_total", "loam_jobs_stalled_total",
                 "loam_jobs_fenced_total", "loam_jobs_waiting", "loam_jobs_delayed", "loam_jobs_active",
                 "loam_jobs_oldest_waiting_seconds", "loam_jobs_lease_latency_seconds", "loam_jobs_run_seconds"):  # fmt: skip
        assert name in families
