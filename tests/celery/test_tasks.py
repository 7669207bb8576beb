"""A Celery app on Loam with only its broker URL and result backend changed: tasks,
results, retries, priorities, ETA, expires, acks_late and lost workers, rate limits,
canvas, and remote control through the fanout mailbox. Real workers (conftest.py)."""

from __future__ import annotations

import time
import uuid

import pytest
from celery import chain, chord, group
from celery.exceptions import TaskRevokedError
from celery_kit import eventually


def q() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


def test_tasks_results_and_retry_with_the_same_id(app, start_worker, marks):
    import proj

    start_worker()
    assert proj.add.delay(2, 3).get(timeout=10) == 5
    results = [proj.add.delay(i, i) for i in range(20)]
    assert [r.get(timeout=10) for r in results] == [2 * i for i in range(20)]

    kind = f"retry-{uuid.uuid4().hex[:6]}"
    r = proj.retry_once.delay(kind)
    assert r.get(timeout=15) == r.id  # every attempt ran under the one task id
    assert marks(kind) == ["try0", "try1", "try2"]


def test_priorities_follow_redis_order(app, start_worker, marks):
    """0 or none first (FIFO), then 1..9 lower first: what Celery on Redis does."""
    import proj

    queue, kind = q(), f"prio-{uuid.uuid4().hex[:6]}"
    for value, prio in [("p9", 9), ("p0a", 0), ("p5", 5), ("none", None), ("p1", 1), ("p0b", 0)]:
        proj.record_order.apply_async((kind, value), queue=queue, priority=prio)
    start_worker(queues=queue, concurrency=1)
    assert eventually(lambda: len(marks(kind)) == 6)
    order = [name.split("-", 1)[1] for name in marks(kind)]
    assert order == ["p0a", "none", "p0b", "p1", "p5", "p9"]


def test_eta_and_long_task_beyond_the_visibility_timeout_run_once(app, start_worker, marks):
    """The visibility timeout is 3 s: the ETA task is held by the server, not the worker;
    the 6 s acks_late task keeps its lease because the transport extends it."""
    import proj

    kind, slow = f"eta-{uuid.uuid4().hex[:6]}", f"slow-{uuid.uuid4().hex[:6]}"
    start_worker(vt=3)
    t0 = time.monotonic()
    eta = proj.mark_task.apply_async((kind,), countdown=5)
    long = proj.slow_mark.delay(slow, 6)
    assert eta.get(timeout=15) == kind
    assert time.monotonic() - t0 >= 4.9
    assert long.get(timeout=20) == 6
    time.sleep(3.5)  # a redelivery would have come by now
    assert len(marks(kind)) == 1
    assert len(marks(slow + "-start")) == 1 and len(marks(slow)) == 1


def test_expired_task_is_revoked_not_run(app, start_worker, marks):
    import proj

    queue, kind = q(), f"exp-{uuid.uuid4().hex[:6]}"
    r = proj.mark_task.apply_async((kind,), queue=queue, expires=1)
    time.sleep(1.5)
    start_worker(queues=queue)
    with pytest.raises(TaskRevokedError):
        r.get(timeout=10)
    assert r.status == "REVOKED"
    assert marks(kind) == []


def test_acks_late_task_of_a_killed_worker_is_redelivered_and_completes_once(app, start_worker, marks):
    import proj

    queue, kind = q(), f"kill-{uuid.uuid4().hex[:6]}"
    first = start_worker(queues=queue, vt=2, concurrency=1)
    r = proj.slow_mark.apply_async((kind, 2), queue=queue)
    assert eventually(lambda: marks(kind + "-start"), timeout=10)
    first.kill()  # SIGKILL, main process and pool: nothing is acked or released
    start_worker(queues=queue, vt=2, concurrency=1)
    assert r.get(timeout=30) == 2
    assert len(marks(kind + "-start")) == 2  # it ran again after the lease lapsed...
    assert len(marks(kind)) == 1  # ...and completed once


def test_task_reject_on_worker_lost_requeues(app, start_worker, marks):
    """The pool process dies mid-task: Celery rejects with requeue, the job is released
    and redelivered, and the re-forked pool process (forked after the parent's HTTP
    client started) runs it and stores the result."""
    import proj

    queue, kind = q(), f"lost-{uuid.uuid4().hex[:6]}"
    start_worker(queues=queue, concurrency=1)
    assert proj.die_once.apply_async((kind,), queue=queue).get(timeout=30) == "survived"
    assert len(marks(kind + "-start")) == 2 and len(marks(kind)) == 1


def test_rate_limited_task(app, start_worker, marks):
    import proj

    queue, kind = q(), f"rate-{uuid.uuid4().hex[:6]}"
    start_worker(queues=queue, concurrency=4)
    t0 = time.monotonic()
    results = [proj.rate_limited.apply_async((kind,), queue=queue) for _ in range(10)]
    times = sorted(r.get(timeout=20) for r in results)
    assert time.monotonic() - t0 >= 1.5  # 5/s: ten take at least ~1.8 s
    assert times[-1] - times[0] >= 1.4


def test_chain_group_chord(app, start_worker):
    import proj

    start_worker(concurrency=4)
    assert chain(proj.add.s(1, 2), proj.add.s(3), proj.add.s(4)).delay().get(timeout=10) == 10
    assert group(proj.add.s(i, i) for i in range(10)).delay().get(timeout=10) == [2 * i for i in range(10)]
    assert chord(proj.add.s(i, i) for i in range(10))(proj.tsum.s()).get(timeout=10) == 90


def test_many_results_waited_in_turn_are_each_tasks_own(app, start_worker):
    """Waiting on results one after another reads later ones ahead (backend.py): each
    `get` still answers its own task, in any order, failures included."""
    import proj

    start_worker(concurrency=4)
    results = [proj.fail.s(i) if i % 7 == 3 else proj.add.s(i, i) for i in range(120)]
    sent = [sig.delay() for sig in results]
    for order in (sent[:60], list(reversed(sent[60:]))):
        for r in order:
            i = sent.index(r)
            if i % 7 == 3:
                with pytest.raises(ValueError, match="proj.fail failed"):
                    r.get(timeout=20)
            else:
                assert r.get(timeout=20) == 2 * i
    again = sent[11]
    assert again.get(timeout=5) == 22  # read before: from Celery's own cache or the store
    again.forget()
    assert app.AsyncResult(again.id).state == "PENDING"


def test_a_task_replaced_under_its_own_id_runs_the_replacement(app, start_worker):
    """Task.replace publishes the replacement with the task's id from inside the task,
    while the task's own message is still leased (always so under acks_late)."""
    import proj

    start_worker(concurrency=2)
    assert proj.replace_with_add.delay(1).get(timeout=10) == 2
    assert proj.replace_with_add_late.delay(2).get(timeout=10) == 3


def test_a_failure_before_a_group_reaches_the_group_result(app, start_worker):
    """The group after a failed chain step never runs: its members' results carry the
    failure (as the steps after a failed one do), so waiting on the group raises it."""
    import proj

    start_worker(concurrency=2)
    result = (proj.add.s(1, 1) | proj.fail.s() | group(proj.add.s(1), proj.add.s(1))).delay()
    with pytest.raises(ValueError, match="proj.fail failed"):
        result.get(timeout=15)
    nested = (
        proj.fail.s(1) | group(proj.add.s(1), group(proj.add.s(2), proj.add.s(3) | proj.add.s(4)))
    ).delay()
    with pytest.raises(ValueError, match="proj.fail failed"):
        nested.get(timeout=15)


def test_chord_body_fires_once_under_concurrent_completion(app, start_worker, marks):
    import proj

    start_worker(concurrency=8)
    result = chord(proj.add.s(i, 0) for i in range(40))(proj.tsum.s())
    assert result.get(timeout=20) == sum(range(40))
    time.sleep(0.5)
    assert marks("tsum").count(result.id) == 1
    assert len(marks("tsum")) == len(set(marks("tsum")))  # no body of any chord ran twice


def test_chord_counts_a_redelivered_header_task_once(app, loam_server, celery_ns):
    """A header task that completes twice (a redelivery after its worker died between
    the count and the ack) must neither fire the body early nor fire it twice."""
    import proj
    from celery import states
    from celery.result import GroupResult

    from loam import SyncClient

    body_queue = q()
    backend = app.backend
    ids = [str(uuid.uuid4()) for _ in range(3)]
    gid = str(uuid.uuid4())
    GroupResult(gid, [app.AsyncResult(i) for i in ids]).save(backend=backend)
    body = proj.tsum.s().set(queue=body_queue)

    class Req:
        group = gid
        chord = dict(body, chord_size=3)

        def __init__(self, task_id):
            self.id = task_id

    def part(task_id):
        backend.store_result(task_id, 1, states.SUCCESS)
        backend.on_chord_part_return(Req(task_id), states.SUCCESS, 1)

    with SyncClient(loam_server.url, namespace=celery_ns) as client:
        part(ids[0])
        part(ids[0])  # redelivered: counted already
        part(ids[1])
        assert _waiting(client, body_queue) == 0  # 2 of 3: not yet
        part(ids[2])
        part(ids[1])  # a late duplicate after the body fired
        part(ids[2])
        assert _waiting(client, body_queue) == 1


def _waiting(client, queue: str) -> int:
    from loam.errors import NotFound

    try:
        c = client.queue_counts(queue)
    except NotFound:
        return 0
    return c["waiting"] + c["prioritized"]


def test_revoke_and_inspect_through_the_broadcast(app, start_worker):
    import proj

    queue = q()
    worker = start_worker(queues=queue, concurrency=1)
    # Generous margins: the revoke must reach the worker before `waiting` falls due, even
    # on a loaded machine.
    busy = proj.sleeper.apply_async((6,), queue=queue)
    waiting = proj.add.apply_async((1, 1), queue=queue, countdown=10)  # held by the server meanwhile
    insp = app.control.inspect(timeout=1.5)
    assert eventually(
        lambda: any(t["id"] == busy.id for ts in (insp.active() or {}).values() for t in ts), timeout=10
    )
    app.control.revoke(waiting.id)
    assert eventually(lambda: any(waiting.id in ids for ids in (insp.revoked() or {}).values()), timeout=10)
    with pytest.raises(TaskRevokedError):
        waiting.get(timeout=30)
    assert busy.get(timeout=20) == 6
    replies = app.control.ping(timeout=1.5)
    assert any(name.startswith("w") and "pong" in str(r) for reply in replies for name, r in reply.items())
    assert worker.proc.poll() is None


def test_tasks_with_a_loam_subject_header_run_one_at_a_time_in_order(app, start_worker, marks):
    """`headers={"loam_subject": ...}` routes by subject: a subject's tasks (acks_late, so
    a task holds its subject until it has run) run one at a time in the order sent, even
    on a worker with free slots; other subjects run beside them."""
    import proj

    queue, kind = q(), f"subject-{uuid.uuid4().hex[:6]}"
    for i in range(4):
        for subject in ("acct-1", "acct-2"):
            proj.timed_step.apply_async(
                (kind, f"{subject}:{i}"), queue=queue, headers={"loam_subject": subject}
            )
    start_worker(queues=queue, concurrency=4)
    assert eventually(lambda: len(marks(kind)) == 8, timeout=60)
    runs = sorted((float(s), float(e), v) for s, e, v in (m.split("-", 2) for m in marks(kind)))
    for subject in ("acct-1", "acct-2"):
        mine = [r for r in runs if r[2].startswith(subject)]
        assert [r[2] for r in mine] == [f"{subject}:{i}" for i in range(4)]  # in order
        assert all(a[1] <= b[0] for a, b in zip(mine, mine[1:], strict=False))  # never two at once
    assert any(
        a[2][:6] != b[2][:6] and b[0] < a[1] for a, b in zip(runs, runs[1:], strict=False)
    )  # side by side
