"""`loam.testing` as a user's test suite uses it: the `loam` fixture (a namespace of
the test's own on the session's server), assertions, drain, and a real Worker."""

from __future__ import annotations

import pytest

from loam import UnrecoverableError
from loam.testing import ANY, LoamServer


def send_welcome(job):
    if job.payload.get("to") is None:
        raise UnrecoverableError("no address")
    return f"sent to {job.payload['to']}"


def signup(client, email):  # the user's code under test
    client.enqueue("emails", "welcome", {"to": email}, delay=0)


def test_user_style(loam) -> None:
    signup(loam.client, "a@example.com")
    signup(loam.client, "b@example.com")
    jobs = loam.assert_enqueued("emails", "welcome", payload={"to": "a@example.com"}, count=1)
    assert jobs[0].name == "welcome"
    loam.assert_enqueued("emails", count=2)
    loam.assert_not_enqueued("emails", "goodbye")
    ran = loam.drain("emails", send_welcome)
    assert [r.result for r in ran] == ["sent to a@example.com", "sent to b@example.com"]
    assert all(r.ok for r in ran)
    loam.assert_counts("emails", completed=2, waiting=0)


def test_failures_and_message(loam) -> None:
    loam.client.enqueue("emails", "welcome", {"to": None})
    (r,) = loam.drain("emails", send_welcome)
    assert r.outcome == "fail" and "no address" in r.error
    with pytest.raises(
        AssertionError, match="no job enqueued in 'emails' named 'welcome'.*welcome\\[failed\\]"
    ):
        loam.assert_enqueued("emails", "welcome")


def test_drain_runs_retries_and_promotes_delayed(loam) -> None:
    loam.client.enqueue("retry", "t", 1, attempts=3)
    loam.client.enqueue("retry", "later", 2, delay=3600)
    tries = []

    def flaky(job):
        tries.append(job.attempt)
        if job.name == "t" and job.attempt < 3:
            raise RuntimeError("not yet")
        return job.attempt

    ran = loam.drain("retry", flaky)
    assert [r.outcome for r in ran] == ["retry", "retry", "ok"]
    loam.assert_enqueued("retry", "later", payload=ANY, states="delayed")
    assert [r.job.name for r in loam.drain("retry", flaky, promote_delayed=True)] == ["later"]


def test_work_runs_a_real_worker(loam) -> None:
    loam.client.enqueue_bulk("w", [("t", i) for i in range(20)])

    async def double(job):
        return job.payload * 2

    worker = loam.work("w", double, concurrency=4, idle=0.3)
    assert worker.processed == 20
    loam.assert_counts("w", completed=20)


def test_namespaces_keep_tests_apart(loam, loam_server) -> None:
    loam.client.enqueue("shared-name", "t")
    with loam_server.kit() as other:
        other.assert_not_enqueued("shared-name")


def test_a_server_of_ones_own(tmp_path) -> None:
    with LoamServer(tmp_path / "mine") as server, server.kit("default") as kit:
        kit.client.enqueue("q", "t", "x")
        kit.assert_enqueued("q", payload="x")
        assert (tmp_path / "mine" / "loam.lmdb" / "data.mdb").exists()
