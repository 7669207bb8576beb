"""JobsError <-> ConnectError: every class keeps its code, message and fields through the
Connect wire format (the JSON error body both Connect codecs use); the Connect service
built from the method table answers any failure with its code, never Connect's unknown."""

from __future__ import annotations

import pytest
from connectrpc._protocol import ConnectWireError, _error_to_http_status
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from loam_common import errors as E
from loam_common.api.methods import METHODS
from loam_common.api.service import JobsServiceHandlers
from loam_common.connect_errors import HTTP_STATUS, from_connect, to_connect
from loam_common.store.base import StoreUnavailable

CASES = [
    (E.InvalidArgument("queue", "bad name"), {"field": "queue"}),
    (E.NotFound("queue 'q' does not exist"), {}),
    (
        E.AlreadyExists("job key taken", "01J0000000000000000000000A"),
        {"existing": "01J0000000000000000000000A"},
    ),
    (E.IdempotencyConflict("idem-1"), {"key": "idem-1"}),
    (
        E.Fenced("01J0000000000000000000000A", 3, 5),
        {"job_id": "01J0000000000000000000000A", "epoch": 3, "current_epoch": 5},
    ),
    (E.InvalidState("j1", "active", "promote"), {"job_id": "j1", "from_state": "active", "to": "promote"}),
    (
        E.InvalidState(
            "q", "has 2 active jobs", "obliterate", "queue 'q' has 2 active jobs; cannot obliterate"
        ),
        {"job_id": "q", "from_state": "has 2 active jobs", "to": "obliterate"},
    ),
    (E.QueuePaused("queue 'q' is paused"), {}),
    (E.RateLimited("slow down", 1_500_000_000), {"retry_after_ns": 1_500_000_000}),
    (E.PayloadTooLarge(100, 10), {"size": 100, "limit": 10}),
    (E.Unavailable("store down"), {}),
    (E.DeadlineExceeded("too late"), {}),
    (E.Unauthenticated("no token"), {}),
    (E.PermissionDenied("no action"), {}),
    (E.Internal("bug"), {}),
]


def over_the_wire(err: ConnectError) -> ConnectError:
    wire = ConnectWireError.from_exception(err)
    return ConnectWireError.from_dict(wire.to_dict(), wire.to_http_status().code, Code.UNKNOWN).to_exception()


@pytest.mark.parametrize(
    "error,fields", CASES, ids=lambda c: type(c).__name__ if isinstance(c, E.JobsError) else ""
)
def test_round_trip(error, fields):
    err = to_connect(error)
    assert err.code.value == error.code
    back = from_connect(over_the_wire(err))
    assert type(back) is type(error)
    assert back.code == error.code and back.message == error.message
    for name, value in fields.items():
        assert getattr(back, name) == value


def test_without_detail_the_code_picks_the_class():
    back = from_connect(ConnectError(Code.FAILED_PRECONDITION, "nope"))
    assert isinstance(back, E.InvalidState) and back.code == "failed_precondition"
    back = from_connect(ConnectError(Code.UNIMPLEMENTED, "later"))
    assert isinstance(back, E.Internal) and back.code == "unimplemented"


def test_other_failures():
    assert to_connect(StoreUnavailable("disk gone")).code == Code.UNAVAILABLE
    bug = to_connect(KeyError("x"))
    assert bug.code == Code.INTERNAL and "KeyError" in bug.message
    same = ConnectError(Code.ABORTED, "as is")
    assert to_connect(same) is same


def test_http_status_is_connects():
    for code, status in _error_to_http_status.items():
        assert HTTP_STATUS[code.value] == status.code


@pytest.mark.parametrize(
    "error,fields", CASES, ids=lambda c: type(c).__name__ if isinstance(c, E.JobsError) else ""
)
def test_an_error_rebuilds_from_its_args_and_pickles(error, fields):
    """Celery serializes a task's exception as its type and `args` and rebuilds it with
    `type(e)(*e.args)`; pickle does the same."""
    import pickle

    for again in (type(error)(*error.args), pickle.loads(pickle.dumps(error))):
        assert type(again) is type(error) and str(again) == str(error) == error.message
        for name, value in fields.items():
            assert getattr(again, name) == value


class Failing(JobsServiceHandlers):
    """Every method fails with `error`, after noting which row of the table it was given."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.seen: list[str] = []

    async def dispatch(self, method, request, ctx):
        self.seen.append(method.name)
        raise self.error

    async def dispatch_stream(self, method, request, ctx):
        self.seen.append(method.name)
        raise self.error
        yield  # pragma: no cover


@pytest.mark.parametrize("error", [E.NotFound("no such queue"), KeyError("bug")], ids=["jobs-error", "bug"])
async def test_the_table_service_answers_failures_with_their_code(error):
    svc = Failing(error)
    with pytest.raises(ConnectError) as err:
        await svc.complete_batch(METHODS["complete_batch"].request(), None)
    assert err.value.code == to_connect(error).code
    with pytest.raises(ConnectError) as err:
        async for _ in svc.watch(METHODS["watch"].request(), None):
            pass
    assert err.value.code == to_connect(error).code
    assert svc.seen == ["complete_batch", "watch"]
