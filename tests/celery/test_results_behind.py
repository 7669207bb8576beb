"""Results written behind the task (loam_celery/write_behind.py, decision 0017): a task
acked before it ran has its result sent by a thread of its pool process, in order, and
flushed at the process's exit; an `acks_late` task's result is stored before the task
reports back."""

from __future__ import annotations

import uuid

import pytest
from celery import Celery, states
from celery.app.task import Context

from loam.errors import Unavailable
from loam.testing import LoamServer, free_port


def test_results_of_pool_processes_that_exit_after_each_task_are_all_stored(app, start_worker):
    """`--max-tasks-per-child 1`: each pool process exits right after its task, so its
    result is still being written when it exits."""
    import proj

    start_worker("--max-tasks-per-child", "1")
    results = [proj.add.delay(i, 1) for i in range(12)]
    assert [r.get(timeout=20) for r in results] == [i + 1 for i in range(12)]


def _app(port: int, **options: object) -> Celery:
    app = Celery(
        f"behind-{uuid.uuid4().hex[:6]}", backend=f"loam://127.0.0.1:{port}/behind", set_as_current=False
    )
    app.conf.update(result_expires=600, result_backend_transport_options=options)

    @app.task(name=f"{app.main}.early")
    def early() -> None: ...

    @app.task(name=f"{app.main}.late", acks_late=True)
    def late() -> None: ...

    return app


def _worker_request(backend, task: str) -> Context:
    tid = str(uuid.uuid4())
    return Context(
        id=tid, task=f"{backend.app.main}.{task}", delivery_info={"exchange": "", "routing_key": "celery"}
    )


def test_a_result_handed_over_while_the_server_is_down_is_stored_when_it_is_back(tmp_path):
    port = free_port()
    late_backend = _app(port).backend
    req = _worker_request(late_backend, "late")
    with pytest.raises(Unavailable):  # acks_late: stored before the task reports back, or raises
        late_backend.store_result(req.id, 1, states.SUCCESS, request=req)
    strict_backend = _app(port, write_behind=False).backend
    req = _worker_request(strict_backend, "early")
    with pytest.raises(Unavailable):  # the option off: the same for every task
        strict_backend.store_result(req.id, 1, states.SUCCESS, request=req)

    backend = _app(port).backend
    reqs = [_worker_request(backend, "early") for _ in range(4)]
    reqs[2].id = "x" * 2000  # a key the server refuses: only this write is lost
    for i, r in enumerate(reqs):  # early ack: returns at once, the server being down
        backend.store_result(r.id, i, states.SUCCESS, request=r)
    assert not backend._behind.flush(timeout=0.3)

    with LoamServer(tmp_path / "data", port=port) as server:
        assert backend._behind.flush(timeout=30)  # all four went in one call, refused, then one by one
        with server.sync_client(namespace="behind") as client:
            keys = [backend.get_key_for_task(r.id).decode() for r in reqs if r is not reqs[2]]
            stored = [client.result_get(key, raw=True) for key in keys]
        assert [backend.decode_result(v.data)["result"] for v in stored] == [0, 1, 3]
        req = _worker_request(late_backend, "late")
        late_backend.store_result(req.id, 7, states.SUCCESS, request=req)
        with server.sync_client(namespace="behind") as client:
            assert client.result_get(late_backend.get_key_for_task(req.id).decode(), raw=True) is not None


def test_calls_after_a_write_behind_come_after_it(loam_server):
    """The process's own later calls see its writes: a read at once, and a forget (a
    delete) that follows the write is not undone by it."""
    backend = _app(loam_server.port).backend
    req = _worker_request(backend, "early")
    backend.store_result(req.id, 42, states.SUCCESS, request=req)
    assert backend.get_task_meta(req.id)["result"] == 42
    backend._cache.clear()

    req = _worker_request(backend, "early")
    backend.store_result(req.id, 43, states.SUCCESS, request=req)
    backend.forget(req.id)
    backend._cache.clear()
    assert backend.get_task_meta(req.id)["status"] == states.PENDING


def test_write_behind_option_must_be_a_bool():
    from loam_celery.connection import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="write_behind must be True or False"):
        _ = _app(free_port(), write_behind="no").backend
