"""`Outcome` is a sum type: one class per way a worker finishes its lease, each with only
its own fields, so a combination that means nothing cannot be built; bad values are
refused when the outcome is made, before any transaction."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from loam_common.errors import InvalidArgument
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs.complete import (
    OUTCOMES,
    Delay,
    Fail,
    Ok,
    Outcome,
    RateLimited,
    Release,
    Retry,
    WaitChildren,
)

ERR = pb.JobError(code="e", message="boom")


def test_each_outcome_holds_only_its_own_fields():
    assert Ok(pb.Payload(data=b"1")).result.data == b"1"
    assert Retry(ERR, 5).after_ns == 5
    assert Fail(ERR, dead_letter=True).dead_letter
    assert Delay(10).until_ns == 10
    with pytest.raises(TypeError):
        Ok(until_ns=5)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Release(error=ERR)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        WaitChildren(for_ns=1)  # type: ignore[call-arg]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Ok().result = pb.Payload()  # type: ignore[misc]


def test_every_outcome_takes_the_common_options_by_keyword():
    keep = pb.Retention(completed_count=1)
    for out in (Ok(retention=keep), Fail(ERR, retention=keep, clock_ns=7), RateLimited(1, metrics=(1, 2))):
        assert out.retention == keep or out.metrics == (1, 2)
    assert dataclasses.replace(Retry(ERR), clock_ns=3) == Retry(ERR, clock_ns=3)


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: Retry(None), "outcome.error"),  # type: ignore[arg-type]
        (lambda: Fail(None), "outcome.error"),  # type: ignore[arg-type]
        (lambda: Retry(ERR, -1), "outcome.after_ns"),
        (lambda: Release(-1), "outcome.after_ns"),
        (lambda: RateLimited(0), "outcome.for_ns"),
    ],
)
def test_bad_values_are_refused_when_the_outcome_is_made(make, field):
    with pytest.raises(InvalidArgument) as e:
        make()
    assert e.value.field == field


def test_the_sum_names_every_kind_once():
    # The kinds are the labels of loam_jobs_completed_total{outcome}.
    assert OUTCOMES == ("ok", "retry", "fail", "release", "delay", "wait_children", "rate_limited")
    assert [k.kind for k in typing.get_args(Outcome)] == list(OUTCOMES)
