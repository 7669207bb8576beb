"""SyncClient: the same calls, blocking, over one async Client on a background loop."""

from __future__ import annotations

import threading

import pytest

from loam import Outcome, SyncClient, errors


def test_sync_basics(url: str, ns: str) -> None:
    with SyncClient(url, namespace=ns) as c:
        e = c.enqueue("s", "t", {"n": 1}, priority=2)
        assert e.state == "prioritized"
        c.enqueue_bulk("s", [("t", i) for i in range(3)])
        jobs = c.lease("s", max=10, wait=1)
        assert len(jobs) == 4
        assert c.complete_batch([(j, Outcome.ok()) for j in jobs])[0].state == "completed"
        assert c.queue_counts("s")["completed"] == 4
        assert len(list(c.iter_jobs("s", page_size=2))) == 4
        with pytest.raises(errors.NotFound):
            c.get_job("s", "01ARZ3NDEKTSV4RRFFQ69G5FAV")


def test_sync_client_from_many_threads(url: str, ns: str) -> None:
    with SyncClient(url, namespace=ns) as c:
        threads = [threading.Thread(target=lambda i=i: c.enqueue("th", "t", i)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert c.queue_counts("th")["waiting"] == 8


def test_sync_client_wraps_the_async_one() -> None:
    from loam import Client

    public = {n for n in dir(Client) if not n.startswith("_") and callable(getattr(Client, n))}
    assert public - {"close"} <= set(dir(SyncClient))
    # a wrapper, not a copy: each call is the async method run on the client's loop
    assert SyncClient.enqueue.__wrapped__ is Client.enqueue
