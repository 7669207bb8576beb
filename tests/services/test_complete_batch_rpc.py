"""CompleteBatch as the queue core's RPC answers it (loam_queue_core.rpc): each item's
result in its slot and in order, a malformed item refusing the whole call by its field
name with nothing completed, and an outcome's options (a worker's retention and clock,
as @loam/bullmq sends them) applied as on a single Complete."""

from __future__ import annotations

import pytest

from loam_common.errors import InvalidArgument, NotFound
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S
from loam_queue_core.rpc import CoreRpc

NS = "acme"


async def _leased(core, queue: str, n: int) -> list[pb.Job]:
    for i in range(n):
        await core.jobs.enqueue(NS, queue, pb.TaskSpec(name=f"t{i}"), pb.EnqueueOpts(attempts=2))
    return await core.jobs.lease(NS, [queue], "w1", n)


def _item(job: pb.Job, epoch: int | None = None, **outcome) -> J.CompleteRequest:
    token = J.LeaseToken(queue=job.queue, job=job.id, epoch=job.epoch if epoch is None else epoch)
    out = J.Outcome(**outcome) if outcome else J.Outcome(ok=J.Outcome.Ok())
    return J.CompleteRequest(token=token, outcome=out)


async def test_each_item_gets_its_result_in_its_slot(core):
    rpc = CoreRpc(core)
    a, b, c = await _leased(core, "q", 3)
    other = (await _leased(core, "r", 1))[0]
    req = J.CompleteBatchRequest(
        items=[
            _item(a),
            _item(b, epoch=b.epoch + 7),  # a stale lease: fenced, in its own slot
            _item(other),
            _item(c, retry=J.Outcome.Retry(error=pb.JobError(message="boom"), after_ns=10**12)),
        ]
    )
    out = await rpc.complete_batch(NS, req)
    kinds = [r.WhichOneof("result") for r in out.results]
    assert kinds == ["completed", "error", "completed", "completed"]
    assert [out.results[i].completed.state for i in (0, 2, 3)] == [S.COMPLETED, S.COMPLETED, S.DELAYED]
    assert all(out.results[i].completed.moved for i in (0, 2, 3))
    assert out.results[1].error.code == "failed_precondition"  # fenced
    got = await core.job_admin.get(NS, "q", b.id)
    assert got.state == S.ACTIVE  # the fenced item changed nothing


@pytest.mark.parametrize(
    ("token", "field"),
    [
        (J.LeaseToken(queue="q", job="a/b", epoch=1), "items[1].token.job"),
        (J.LeaseToken(queue="q", job="", epoch=1), "items[1].token.job"),
        (J.LeaseToken(queue="bad queue", job="x", epoch=1), "items[1].token.queue"),
        (J.LeaseToken(queue="q", job="x" * 300, epoch=1), "items[1].token.job"),
        (None, "items[1].token"),
    ],
)
async def test_a_malformed_item_refuses_the_call_by_its_field_and_completes_nothing(core, token, field):
    rpc = CoreRpc(core)
    (a,) = await _leased(core, "q", 1)
    bad = J.CompleteRequest(outcome=J.Outcome(ok=J.Outcome.Ok()))
    if token is not None:
        bad.token.CopyFrom(token)
    with pytest.raises(InvalidArgument) as e:
        await rpc.complete_batch(NS, J.CompleteBatchRequest(items=[_item(a), bad]))
    assert e.value.field == field
    assert (await core.job_admin.get(NS, "q", a.id)).state == S.ACTIVE


async def test_an_outcome_without_a_kind_is_refused_by_its_field(core):
    rpc = CoreRpc(core)
    a, b = await _leased(core, "q", 2)
    empty = J.CompleteRequest(token=_item(b).token)
    with pytest.raises(InvalidArgument) as e:
        await rpc.complete_batch(NS, J.CompleteBatchRequest(items=[_item(a), empty]))
    assert e.value.field == "items[1].outcome"


async def test_a_workers_retention_and_clock_apply_to_its_completions(core):
    rpc = CoreRpc(core)
    a, b = await _leased(core, "q", 2)
    clock_ms = 1_700_000_000_000
    drop = J.Outcome(ok=J.Outcome.Ok(), retention=pb.Retention(completed_count=0), clock_ms=clock_ms)
    keep = J.Outcome(ok=J.Outcome.Ok(), clock_ms=clock_ms)
    req = J.CompleteBatchRequest(
        items=[
            J.CompleteRequest(token=_item(a).token, outcome=drop),
            J.CompleteRequest(token=_item(b).token, outcome=keep),
        ]
    )
    out = await rpc.complete_batch(NS, req)
    assert [r.completed.state for r in out.results] == [S.COMPLETED, S.COMPLETED]
    with pytest.raises(NotFound):  # removed on completion (count 0)
        await core.job_admin.get(NS, "q", a.id)
    kept = await core.job_admin.get(NS, "q", b.id)
    assert kept.state == S.COMPLETED and kept.finished_ns == clock_ms * 1_000_000


async def test_equal_outcomes_each_record_their_result_and_a_refused_one_stays_refused(core):
    rpc = CoreRpc(core)
    jobs = await _leased(core, "q", 3)
    same = J.Outcome(ok=J.Outcome.Ok(result=pb.Payload(data=b"42", content_type="application/json")))
    batches = [jobs[:2], jobs[2:]]  # the same outcome bytes in two calls
    for batch in batches:
        req = J.CompleteBatchRequest(
            items=[J.CompleteRequest(token=_item(j).token, outcome=same) for j in batch]
        )
        out = await rpc.complete_batch(NS, req)
        assert [r.completed.state for r in out.results] == [S.COMPLETED] * len(batch)
    for j in jobs:
        assert (await core.job_admin.get(NS, "q", j.id)).result.data == b"42"
    (extra,) = await _leased(core, "q", 1)
    bad = J.Outcome(ok=J.Outcome.Ok(), metrics=J.Outcome.Metrics(at_ms=1, max_data_points=0))
    for _ in range(2):  # checked on every call: a refused outcome is never kept
        req = J.CompleteBatchRequest(items=[J.CompleteRequest(token=_item(extra).token, outcome=bad)])
        with pytest.raises(InvalidArgument) as e:
            await rpc.complete_batch(NS, req)
        assert e.value.field == "items[0].outcome.metrics.max_data_points"
    assert (await core.job_admin.get(NS, "q", extra.id)).state == S.ACTIVE
