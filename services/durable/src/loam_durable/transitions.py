"""The Resonate state machines as transitions: each a sync function `fn(tx, fx, ...)` over
one store transaction, named for its guard. `fx` (`Effects`) carries the namespace, the
time of the transaction and the pushes (`execute`, `unblock`) the commit must send; the
facade sends them once the transaction has committed, or (a timer process with no
connections of its own) they go into the store's outbox in the same transaction.

Rules kept here, from the protocol notes:
- Timeout always wins: every promise a request touches is read through `_promise`, which
  settles it by its timeout first (`resolved` for a timer, else `rejected_timedout`,
  settled at its `timeoutAt`), with the full cascade, before the request is judged.
- Fencing: every lease-guarded request (fence, suspend, fulfill, release, heartbeat)
  needs the task `acquired` at the request's `version`; the version changes on acquire.
- First settle wins; a settle cascades in its own transaction: the task of the promise is
  fulfilled, its listeners get `unblock`, the tasks awaiting it resume.
- One timer per promise (its timeout), task (lease while acquired, retry while pending)
  and schedule (next fire), each a key in the due index; a timer re-checks its object.

A refusal raises DurableError; the runner rolls the transition back, so bad input
changes nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from loam_common import keys
from loam_common.jobs.queue import QueueTx
from loam_common.store.base import Txn
from loam_durable.records import (
    PENDING,
    TAG_BRANCH,
    TAG_ORIGIN,
    TAG_PARENT,
    TAG_PREFIX,
    TAG_SCHEDULE,
    TAG_TARGET,
    TASK_ACQUIRED,
    TASK_FULFILLED,
    TASK_HALTED,
    TASK_PENDING,
    TASK_SUSPENDED,
    DurableError,
    PromiseCreate,
    bad,
    branch_prefix,
    dumps,
    execute_message,
    is_awaitable,
    loads,
    parse_address,
    parse_promise_create,
    promise_wire,
    task_wire,
    timeout_state,
    unblock_message,
)
from loam_durable.search import SEARCH_EXAMINE, PromiseQuery, id_range, index_rows, search_plan, state_group

MS = 1_000_000
#: the queue whose event log holds a namespace's durable events (`durable.<change>`, so
#: CloudEvents type `io.loams.dev.jobs.durable.<change>.v1`): Watch and the export see them
EVENT_QUEUE = "durable"
DEFAULT_RETRY_MS = 30_000
PRELOAD_LIMIT = 1000
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000


@dataclass
class Effects:
    """What one transaction of namespace `ns` at `now` (ms) must push after it commits."""

    ns: str
    now: int
    retry_ms: int = DEFAULT_RETRY_MS
    messages: list[tuple[str, dict]] = field(default_factory=list)
    #: (kind, subject, detail) of what changed, for the event log
    changes: list[tuple[str, str, dict]] = field(default_factory=list)
    #: pushes went to the store's outbox (a process without connections): after the
    #: commit the processes that hold connections are told to drain it
    outboxed: int = 0

    def send(self, address: str, message: dict) -> None:
        self.messages.append((address, message))

    def changed(self, kind: str, subject: str, **detail: Any) -> None:
        self.changes.append((kind, subject, detail))


def run(tx: Txn, ns: str, retry_ms: int, outbox: bool, fn: Any, *args: Any) -> tuple[Any, Effects]:
    """The wrapper every transition runs in: a fresh Effects per attempt (a retried
    transaction starts over), the namespace registered, the outbox written if asked."""
    fx = Effects(ns, tx.now_ns() // MS, retry_ms)
    result = fn(tx, fx, *args)
    if fx.messages or fx.changes:
        reg = keys.durable_namespaces(ns)
        if tx.get(reg) is None:
            tx.put(reg, b"")
    if fx.changes:
        _record_changes(tx, fx)
    if outbox and fx.messages:
        for address, message in fx.messages:
            tx.put(
                keys.durable_outbox(ns, tx.now_ns(), os.urandom(8)),
                dumps({"address": address, "message": message}),
            )
        fx.outboxed = len(fx.messages)
        fx.messages = []
    return result, fx


def _record_changes(tx: Txn, fx: Effects) -> None:
    """The changes of this transaction as events in the namespace's `durable` event log,
    written in the same transaction (the outbox rule of every other change in Loam)."""
    with QueueTx(tx, fx.ns, EVENT_QUEUE) as q:
        q.ensure_exists()
        for kind, subject, detail in fx.changes:
            q.emit("durable." + kind, None, 0, job_id=subject, detail=dumps(detail).decode())


def _visible(p: dict) -> bool:
    """Roots and the promises other tasks or people wait on make events; a workflow's
    local steps do not (their many small writes are read through the promise tree)."""
    return ":" not in p["id"] or is_awaitable(p["tags"])


# -- records ---------------------------------------------------------------------------------
def _get(tx: Txn, key: bytes) -> dict | None:
    raw = tx.get(key)
    return None if raw is None else loads(raw)


def _put_promise(tx: Txn, fx: Effects, p: dict) -> None:
    tx.put(keys.durable_promise(fx.ns, p["id"]), dumps(p))


def _index(tx: Txn, fx: Effects, p: dict) -> None:
    """A new promise's search index rows (search.py): its state and its tags."""
    for key in index_rows(fx.ns, p):
        tx.put(key, b"")


def _put_task(tx: Txn, fx: Effects, t: dict) -> None:
    tx.put(keys.durable_task(fx.ns, t["id"]), dumps(t))


def _promise(tx: Txn, fx: Effects, promise_id: str) -> dict | None:
    """The promise, settled by its timeout first if that has passed (timeout always wins)."""
    p = _get(tx, keys.durable_promise(fx.ns, promise_id))
    if p is not None and p["state"] == PENDING and p["timeoutAt"] <= fx.now:
        _settle(tx, fx, p, timeout_state(p["tags"]), p.get("value", {}), p["timeoutAt"])
    return p


def _task(tx: Txn, fx: Effects, task_id: str) -> dict | None:
    return _get(tx, keys.durable_task(fx.ns, task_id))


def _arm_task_timer(tx: Txn, fx: Effects, t: dict, at: int | None) -> None:
    """A task has at most one timer: its lease while acquired, its retry while pending."""
    old = t.get("timerAt")
    if old is not None:
        tx.delete(keys.durable_timer(fx.ns, old, keys.DURABLE_TIMER_TASK, t["id"]))
    if at is None:
        t.pop("timerAt", None)
    else:
        t["timerAt"] = at
        tx.put(keys.durable_timer(fx.ns, at, keys.DURABLE_TIMER_TASK, t["id"]), b"")


def _preload(tx: Txn, fx: Effects, promise_id: str) -> list[dict]:
    """The promises a replay of `promise_id` reuses: its branch's descendants."""
    start = keys.durable_promise(fx.ns, branch_prefix(promise_id))
    rows = tx.scan(start, keys.prefix_end(start), limit=PRELOAD_LIMIT)
    return [promise_wire(loads(v)) for _, v in rows]


def _dispatch(fx: Effects, t: dict) -> None:
    fx.send(t["target"], execute_message(t["id"], t["version"]))


def _to_pending(tx: Txn, fx: Effects, t: dict, *, send: bool = True) -> None:
    t["state"] = TASK_PENDING
    t.pop("pid", None)
    t.pop("ttl", None)
    _arm_task_timer(tx, fx, t, fx.now + fx.retry_ms)
    if send:
        _dispatch(fx, t)


# -- the settle cascade ---------------------------------------------------------------------
def _settle(tx: Txn, fx: Effects, p: dict, state: str, value: dict, settled_at: int) -> None:
    """Settle a pending promise and cascade (§3.3): its task is fulfilled, its listeners
    get `unblock`, the tasks awaiting it resume."""
    p["state"] = state
    p["value"] = value
    p["settledAt"] = settled_at
    if is_awaitable(p["tags"]):
        tx.delete(keys.durable_timer(fx.ns, p["timeoutAt"], keys.DURABLE_TIMER_PROMISE, p["id"]))
    listeners = p.pop("listeners", [])
    callbacks = p.pop("callbacks", [])
    _put_promise(tx, fx, p)
    if state_group(state) != PENDING:  # the state index: pending -> its settled group
        tx.delete(keys.durable_promise_state(fx.ns, PENDING, p["id"]))
        tx.put(keys.durable_promise_state(fx.ns, state_group(state), p["id"]), b"")
    if ":" not in p["id"]:  # a root: its tree is retained, then deleted, as one
        tx.put(keys.durable_retention(fx.ns, settled_at, p["id"]), b"")
    if _visible(p):
        fx.changed("promise.settled", p["id"], state=state)
    t = _task(tx, fx, p["id"])
    if t is not None and t["state"] != TASK_FULFILLED:
        _fulfil(tx, fx, t)
    for address in listeners:
        fx.send(address, unblock_message(p))
    for awaiter in callbacks:
        _resume(tx, fx, awaiter, p["id"])


def _fulfil(tx: Txn, fx: Effects, t: dict) -> None:
    t["state"] = TASK_FULFILLED
    t.pop("pid", None)
    t.pop("ttl", None)
    t["resumes"] = []
    _arm_task_timer(tx, fx, t, None)
    _put_task(tx, fx, t)


def _resume(tx: Txn, fx: Effects, awaiter_id: str, settled_id: str) -> None:
    """A promise the task `awaiter_id` awaits has settled (§4.4)."""
    ap = _promise(tx, fx, awaiter_id)
    if ap is None or ap["state"] != PENDING:
        return
    t = _task(tx, fx, awaiter_id)
    if t is None:
        return
    if t["state"] == TASK_SUSPENDED:
        t["resumes"] = [settled_id]
        _to_pending(tx, fx, t)
        _put_task(tx, fx, t)
        fx.changed("task.resumed", t["id"], awaited=settled_id)
    elif t["state"] in (TASK_PENDING, TASK_ACQUIRED, TASK_HALTED):
        if settled_id not in t["resumes"]:
            t["resumes"].append(settled_id)
            _put_task(tx, fx, t)


# -- promises -------------------------------------------------------------------------------
def promise_get_with_timeout(tx: Txn, fx: Effects, promise_id: str) -> dict:
    p = _promise(tx, fx, promise_id)
    if p is None:
        raise DurableError(404, "Promise not found")
    return {"promise": promise_wire(p)}


def _create(tx: Txn, fx: Effects, req: PromiseCreate, *, task_state: str | None = None,
            pid: str | None = None, ttl: int | None = None, created_at: int | None = None) -> tuple[dict, dict | None]:  # fmt: skip
    """Create a new promise (and its task when targeted). `task_state` acquired is
    task.create's own task, leased by its caller, with no execute sent."""
    now = fx.now
    created = now if created_at is None else created_at
    p = {"id": req.id, "state": PENDING, "param": req.param, "value": {}, "tags": req.tags,
         "timeoutAt": req.timeout_at, "createdAt": created}  # fmt: skip
    target = req.target
    if req.timeout_at <= now:  # born timed out
        p["createdAt"] = min(created, req.timeout_at)
        p["state"] = timeout_state(req.tags)
        p["settledAt"] = req.timeout_at
        _put_promise(tx, fx, p)
        _index(tx, fx, p)
        if ":" not in req.id:
            tx.put(keys.durable_retention(fx.ns, req.timeout_at, req.id), b"")
        t = None
        if target is not None:
            t = {"id": req.id, "state": TASK_FULFILLED, "version": 0, "resumes": [], "target": target,
                 "timeoutAt": req.timeout_at}  # fmt: skip
            _put_task(tx, fx, t)
        if _visible(p):
            fx.changed("promise.created", req.id, state=p["state"])
        return p, t
    _put_promise(tx, fx, p)
    _index(tx, fx, p)
    if is_awaitable(req.tags):
        tx.put(keys.durable_timer(fx.ns, req.timeout_at, keys.DURABLE_TIMER_PROMISE, req.id), b"")
    if _visible(p):
        fx.changed("promise.created", req.id, state=PENDING)
    if target is None:
        return p, None
    # the task carries its promise's timeout: a lease-guarded request then needs only the task
    t = {"id": req.id, "state": TASK_PENDING, "version": 0, "resumes": [], "target": target,
         "timeoutAt": req.timeout_at}  # fmt: skip
    if task_state == TASK_ACQUIRED:
        t.update(state=TASK_ACQUIRED, version=1, pid=pid, ttl=ttl)
        _arm_task_timer(tx, fx, t, now + ttl)  # type: ignore[operator]
    elif req.delay_at is not None and req.delay_at > now:
        _arm_task_timer(tx, fx, t, req.delay_at)  # the first execute waits for the delay
    else:
        _arm_task_timer(tx, fx, t, now + fx.retry_ms)
        _dispatch(fx, t)
    _put_task(tx, fx, t)
    return p, t


def promise_create_if_absent(tx: Txn, fx: Effects, req: PromiseCreate) -> dict:
    p = _promise(tx, fx, req.id)
    if p is None:
        p, _ = _create(tx, fx, req)
    return {"promise": promise_wire(p)}


def promise_settle_if_pending(tx: Txn, fx: Effects, promise_id: str, state: str, value: dict) -> dict:
    p = _promise(tx, fx, promise_id)
    if p is None:
        raise DurableError(404, "Promise not found")
    if p["state"] == PENDING:
        _settle(tx, fx, p, state, value, fx.now)
    return {"promise": promise_wire(p)}


def promise_listen_if_pending(tx: Txn, fx: Effects, awaited: str, address: str) -> dict:
    p = _promise(tx, fx, awaited)
    if p is None:
        raise DurableError(404, "Promise not found")
    if p["state"] == PENDING:
        listeners = p.setdefault("listeners", [])
        if address not in listeners:
            listeners.append(address)
            _put_promise(tx, fx, p)
    return {"promise": promise_wire(p)}


def promise_callback_if_pending(tx: Txn, fx: Effects, awaited: str, awaiter: str) -> dict:
    p = _promise(tx, fx, awaited)
    if p is None:
        raise DurableError(404, "Awaited promise not found")
    ap = _promise(tx, fx, awaiter)
    if ap is None:
        raise DurableError(422, "Awaiter promise not found")
    if TAG_TARGET not in ap["tags"]:
        raise DurableError(422, "Awaiter promise has no resonate:target")
    if ap["state"] == PENDING:
        if p["state"] == PENDING:
            callbacks = p.setdefault("callbacks", [])
            if awaiter not in callbacks:
                callbacks.append(awaiter)
                _put_promise(tx, fx, p)
        else:
            _resume(tx, fx, awaiter, awaited)
    return {"promise": promise_wire(p)}


def promise_search(tx: Txn, fx: Effects, q: PromiseQuery) -> dict:
    """One page of the promises matching `q`, in id order, read through the narrowest
    index the query allows (search.py says which), never the whole namespace: at most
    `SEARCH_EXAMINE` records are read per page, and a page that stops there early still
    carries a cursor. States are the effective ones: the promise timeouts already due are
    settled first, in this transaction, so none is reported pending past its timeout."""
    _settle_due_timeouts(tx, fx)
    out: list[dict] = []
    examined = 0
    last = ""
    plan = search_plan(fx.ns, q)
    start = plan.start
    while len(out) < q.limit and examined < SEARCH_EXAMINE:
        rows = tx.scan(start, plan.end, limit=min(SEARCH_EXAMINE - examined, max(q.limit, 100)))
        if not rows:
            last = ""
            break
        if plan.by_index:
            ids = [k[plan.id_at :].decode() for k, _ in rows]
            found = tx.batch_get([keys.durable_promise(fx.ns, i) for i in ids])
            records = [(i, found.get(keys.durable_promise(fx.ns, i))) for i in ids]
        else:
            records = [(k[plan.id_at :].decode(), v) for k, v in rows]
        for promise_id, raw in records:
            examined += 1
            last = promise_id
            if raw is None:
                continue
            p = loads(raw)
            if p["state"] == PENDING and p["timeoutAt"] <= fx.now:
                p = _promise(tx, fx, promise_id) or p  # its effective state
            if q.matches(p):
                out.append(promise_wire(p))
                if len(out) == q.limit:
                    break
        start = rows[-1][0] + b"\x00"
    result: dict = {"promises": out}
    if last and (len(out) == q.limit or examined >= SEARCH_EXAMINE):
        result["cursor"] = last
    return result


def _settle_due_timeouts(tx: Txn, fx: Effects, limit: int = 1000) -> None:
    """Settle the awaitable promises whose timeout is due (what the timers would do on
    their next pass), so a read that lists promises by state sees effective states."""
    base = keys.durable_timers(fx.ns)
    for key, _ in tx.scan(base, base + keys.U64.pack(fx.now + 1), limit=limit):
        _, kind, object_id = keys.durable_timer_parts(fx.ns, key)
        if kind == keys.DURABLE_TIMER_PROMISE:
            _promise(tx, fx, object_id)


# -- tasks ----------------------------------------------------------------------------------
def _leased(tx: Txn, fx: Effects, task_id: str, version: int, *also: bytes, promise: bool = True) -> dict:
    """The task, if the caller holds its lease at `version` (the fencing token). The
    task, its promise (unless `promise` is False) and `also` are read in one round trip."""
    tx.prefetch(
        [keys.durable_task(fx.ns, task_id), keys.durable_promise(fx.ns, task_id), *also]
        if promise
        else [keys.durable_task(fx.ns, task_id), *also]
    )
    t = _task(tx, fx, task_id)
    if t is None:
        raise DurableError(404, "Task not found")
    if t["state"] != TASK_ACQUIRED:
        raise DurableError(409, f"Task is {t['state']}, not acquired")
    if t["version"] != version:
        raise DurableError(409, f"Task version mismatch: the task is at version {t['version']}")
    return t


def _leased_live(tx: Txn, fx: Effects, task_id: str, version: int, *also: bytes) -> dict:
    """The task, leased at `version`, whose promise is still pending and unexpired. A
    task is acquired only while its promise is pending (a settle fulfils the task in the
    same transaction), and it carries its promise's `timeoutAt`, so before that time
    the task alone answers and the promise is not read: the hot path of every step."""
    t = _leased(tx, fx, task_id, version, *also, promise=False)
    if t.get("timeoutAt", 0) > fx.now:
        return t
    p = _promise(tx, fx, task_id)  # settles it by its timeout, if that has passed
    if p is None or p["state"] != PENDING:
        raise DurableError(409, "Task's promise is already settled")
    return _task(tx, fx, task_id) or t


def task_create_if_absent(tx: Txn, fx: Effects, req: PromiseCreate, pid: str, ttl: int) -> dict:
    p = _promise(tx, fx, req.id)
    if p is None:
        p, t = _create(tx, fx, req, task_state=TASK_ACQUIRED, pid=pid, ttl=ttl)
        assert t is not None
        return {"task": task_wire(t), "promise": promise_wire(p), "preload": []}
    if TAG_TARGET not in p["tags"]:
        raise DurableError(422, "Promise exists without a task")
    t = _task(tx, fx, req.id)
    if t is None:
        raise DurableError(422, "Promise exists without a task")
    if p["state"] != PENDING or t["state"] == TASK_FULFILLED:
        return {"task": task_wire(t), "promise": promise_wire(p), "preload": []}
    if t["state"] != TASK_PENDING:
        raise DurableError(409, f"Task is {t['state']}")
    _acquire(tx, fx, t, pid, ttl)
    return {"task": task_wire(t), "promise": promise_wire(p), "preload": _preload(tx, fx, req.id)}


def _acquire(tx: Txn, fx: Effects, t: dict, pid: str, ttl: int) -> None:
    t.update(state=TASK_ACQUIRED, version=t["version"] + 1, pid=pid, ttl=ttl, resumes=[])
    _arm_task_timer(tx, fx, t, fx.now + ttl)
    _put_task(tx, fx, t)
    fx.changed("task.acquired", t["id"], version=t["version"], pid=pid)


def task_acquire_if_pending(tx: Txn, fx: Effects, task_id: str, version: int, pid: str, ttl: int) -> dict:
    tx.prefetch([keys.durable_task(fx.ns, task_id), keys.durable_promise(fx.ns, task_id)])
    t = _task(tx, fx, task_id)
    if t is None:
        raise DurableError(404, "Task not found")
    p = _promise(tx, fx, task_id)
    t = _task(tx, fx, task_id)  # the timeout may have fulfilled it
    assert t is not None
    if p is None or p["state"] != PENDING:
        raise DurableError(409, "Task's promise is already settled")
    if t["state"] != TASK_PENDING:
        raise DurableError(409, f"Task is {t['state']}, not pending")
    if t["version"] != version:
        raise DurableError(409, f"Task version mismatch: the task is at version {t['version']}")
    _acquire(tx, fx, t, pid, ttl)
    return {"task": task_wire(t), "promise": promise_wire(p), "preload": _preload(tx, fx, task_id)}


def task_get(tx: Txn, fx: Effects, task_id: str) -> dict:
    t = _task(tx, fx, task_id)
    if t is None:
        raise DurableError(404, "Task not found")
    return {"task": task_wire(t)}


def task_fence_create_if_acquired(
    tx: Txn, fx: Effects, task_id: str, version: int, req: PromiseCreate
) -> dict:
    _leased_live(tx, fx, task_id, version, keys.durable_promise(fx.ns, req.id))
    return promise_create_if_absent(tx, fx, req)


def task_fence_settle_if_acquired(tx: Txn, fx: Effects, task_id: str, version: int,
                                  promise_id: str, state: str, value: dict) -> tuple[int, Any]:  # fmt: skip
    """(inner status, inner data): an unknown promise is an inner 404."""
    _leased_live(
        tx,
        fx,
        task_id,
        version,
        keys.durable_promise(fx.ns, promise_id),
        keys.durable_task(fx.ns, promise_id),
    )
    try:
        return 200, promise_settle_if_pending(tx, fx, promise_id, state, value)
    except DurableError as e:
        if e.status == 404:
            return 404, e.message
        raise


def task_suspend_if_acquired(
    tx: Txn, fx: Effects, task_id: str, version: int, awaited: list[str]
) -> tuple[int, dict]:
    t = _leased_live(tx, fx, task_id, version)
    promises = []
    for promise_id in awaited:
        p = _promise(tx, fx, promise_id)
        if p is None:
            raise DurableError(422, f"Awaited promise {promise_id!r} not found")
        promises.append(p)
    t = _task(tx, fx, task_id)  # a settle above may have resumed into it
    assert t is not None
    if any(p["state"] != PENDING for p in promises):
        t["resumes"] = []
        _put_task(tx, fx, t)
        return 300, {"preload": _preload(tx, fx, task_id)}
    for p in promises:
        callbacks = p.setdefault("callbacks", [])
        if task_id not in callbacks:
            callbacks.append(task_id)
            _put_promise(tx, fx, p)
    t["state"] = TASK_SUSPENDED
    t.pop("pid", None)
    t.pop("ttl", None)
    t["resumes"] = []
    _arm_task_timer(tx, fx, t, None)
    _put_task(tx, fx, t)
    fx.changed("task.suspended", task_id, awaiting=awaited)
    return 200, {}


def task_fulfill_if_acquired(
    tx: Txn, fx: Effects, task_id: str, version: int, state: str, value: dict
) -> dict:
    t = _leased(tx, fx, task_id, version)
    p = _promise(tx, fx, task_id)
    if p is None:
        raise DurableError(404, "Promise not found")
    if p["state"] == PENDING:
        _settle(tx, fx, p, state, value, fx.now)
    else:
        t = _task(tx, fx, task_id) or t
        if t["state"] != TASK_FULFILLED:
            _fulfil(tx, fx, t)
    return {"promise": promise_wire(p)}


def task_release_if_acquired(tx: Txn, fx: Effects, task_id: str, version: int) -> dict:
    t = _leased(tx, fx, task_id, version)
    _to_pending(tx, fx, t)
    _put_task(tx, fx, t)
    fx.changed("task.released", task_id, version=version)
    return {}


def task_heartbeat_if_acquired(tx: Txn, fx: Effects, pid: str, leases: list[tuple[str, int]]) -> dict:
    tx.prefetch([keys.durable_task(fx.ns, task_id) for task_id, _ in leases])
    for task_id, version in leases:
        t = _task(tx, fx, task_id)
        if t is None or t["state"] != TASK_ACQUIRED or t["version"] != version or t.get("pid") != pid:
            continue
        _arm_task_timer(tx, fx, t, fx.now + t["ttl"])
        _put_task(tx, fx, t)
    return {}


# -- schedules ------------------------------------------------------------------------------
def schedule_create_if_absent(tx: Txn, fx: Effects, s: dict, first_run_at: int) -> dict:
    key = keys.durable_schedule(fx.ns, s["id"])
    existing = _get(tx, key)
    if existing is not None:
        return {"schedule": existing}
    s = dict(s, createdAt=fx.now, nextRunAt=first_run_at)
    tx.put(key, dumps(s))
    tx.put(keys.durable_timer(fx.ns, first_run_at, keys.DURABLE_TIMER_SCHEDULE, s["id"]), b"")
    fx.changed("schedule.created", s["id"], cron=s["cron"])
    return {"schedule": s}


def schedule_get(tx: Txn, fx: Effects, schedule_id: str) -> dict:
    s = _get(tx, keys.durable_schedule(fx.ns, schedule_id))
    if s is None:
        raise DurableError(404, "Schedule not found")
    return {"schedule": s}


def schedule_delete_if_present(tx: Txn, fx: Effects, schedule_id: str) -> dict:
    key = keys.durable_schedule(fx.ns, schedule_id)
    s = _get(tx, key)
    if s is None:
        raise DurableError(404, "Schedule not found")
    tx.delete(key)
    tx.delete(keys.durable_timer(fx.ns, s["nextRunAt"], keys.DURABLE_TIMER_SCHEDULE, schedule_id))
    fx.changed("schedule.deleted", schedule_id)
    return {}


def schedule_search(tx: Txn, fx: Effects, tags: dict, limit: int, cursor: str) -> dict:
    base = keys.durable_schedules(fx.ns)
    start = keys.durable_schedule(fx.ns, cursor) + b"\x00" if cursor else base
    out: list[dict] = []
    for _, v in tx.scan(start, keys.prefix_end(base)):
        s = loads(v)
        if all(s["promiseTags"].get(k) == val for k, val in tags.items()):
            out.append(s)
            if len(out) == limit:
                break
    result: dict = {"schedules": out}
    if len(out) == limit:
        result["cursor"] = out[-1]["id"]
    return result


def _fire_schedule(tx: Txn, fx: Effects, s: dict, at: int) -> None:
    """Create the promise of one occurrence `at` (ms), as of that time; idempotent."""
    promise_id = s["promiseId"].replace("{{.id}}", s["id"]).replace("{{.timestamp}}", str(at))
    tags = dict(s["promiseTags"])
    tags.update({TAG_SCHEDULE: s["id"], TAG_ORIGIN: promise_id, TAG_BRANCH: promise_id,
                 TAG_PARENT: promise_id, TAG_PREFIX: promise_id})  # fmt: skip
    if _promise(tx, fx, promise_id) is not None:
        return
    try:
        parse_address(tags.get(TAG_TARGET), "Invalid resonate:target address")
    except DurableError:
        return  # checked at create; never fires to a bad address
    req = PromiseCreate(promise_id, at + s["promiseTimeout"], s["promiseParam"], tags, None)
    _create(tx, fx, req, created_at=at)
    fx.changed("schedule.fired", s["id"], promise=promise_id)


# -- timers ---------------------------------------------------------------------------------
@dataclass
class TimerReport:
    fired: int = 0
    more: bool = False


def timers_fire_due(tx: Txn, fx: Effects, next_cron: Any, limit: int = 200) -> TimerReport:
    """Fire every timer of the namespace due by now (at most `limit`): promise timeouts,
    task lease expiries and retries, schedule fires. `next_cron(cron, after_ms)` gives a
    schedule's next occurrence."""
    base = keys.durable_timers(fx.ns)
    end = base + keys.U64.pack(fx.now + 1)
    rows = tx.scan(base, end, limit=limit)
    rep = TimerReport(more=len(rows) == limit)
    for key, _ in rows:
        due, kind, object_id = keys.durable_timer_parts(fx.ns, key)
        tx.delete(key)
        rep.fired += 1
        if kind == keys.DURABLE_TIMER_PROMISE:
            _promise(tx, fx, object_id)  # settles it by its timeout if still pending
        elif kind == keys.DURABLE_TIMER_TASK:
            _task_timer(tx, fx, object_id, due)
        elif kind == keys.DURABLE_TIMER_SCHEDULE:
            _schedule_timer(tx, fx, object_id, due, next_cron)
    if len(rows) < limit:
        started = _start_requested(tx, fx, limit - len(rows))
        rep.fired += started
        rep.more = started == limit - len(rows)
    return rep


def _start_requested(tx: Txn, fx: Effects, limit: int) -> int:
    """Create (if absent) and dispatch the root promises Loam schedules' ticks asked for
    (loam_common.jobs.schedules: a `dur/st/` row each, holding its promise.create data
    and the tick as `createdAt`). Idempotent per tick: the promise id is the tick's own."""
    base = keys.durable_starts(fx.ns)
    rows = tx.scan(base, keys.prefix_end(base), limit=limit)
    for key, value in rows:
        tx.delete(key)
        data = loads(value)
        try:
            req = parse_promise_create(data)
        except DurableError:
            continue  # built by the schedule's tick from a checked spec; never expected
        if _promise(tx, fx, req.id) is not None:
            continue
        _create(tx, fx, req, created_at=int(data.get("createdAt", fx.now)))
        fx.changed("schedule.fired", req.tags.get("loam:schedule", ""), promise=req.id)
    return len(rows)


def _task_timer(tx: Txn, fx: Effects, task_id: str, due: int) -> None:
    t = _task(tx, fx, task_id)
    if t is None or t.get("timerAt") != due:
        return  # a stale timer: the task moved on
    t.pop("timerAt", None)  # its key is deleted already
    p = _promise(tx, fx, task_id)
    t = _task(tx, fx, task_id)
    if t is None or p is None or p["state"] != PENDING or t["state"] == TASK_FULFILLED:
        return  # timeout always wins: no new work for a settled promise
    if t["state"] == TASK_ACQUIRED:  # the lease lapsed: the worker is gone
        fx.changed("task.lease_expired", task_id, version=t["version"], pid=t.get("pid"))
        _to_pending(tx, fx, t)
    elif t["state"] == TASK_PENDING:  # execute again, in case the last one was lost
        _arm_task_timer(tx, fx, t, fx.now + fx.retry_ms)
        _dispatch(fx, t)
    _put_task(tx, fx, t)


def _schedule_timer(
    tx: Txn, fx: Effects, schedule_id: str, due: int, next_cron: Any, catch_up: int = 100
) -> None:
    key = keys.durable_schedule(fx.ns, schedule_id)
    s = _get(tx, key)
    if s is None or s["nextRunAt"] != due:
        return
    at = due
    fired = 0
    while at is not None and at <= fx.now and fired < catch_up:
        _fire_schedule(tx, fx, s, at)
        s["lastRunAt"] = at
        fired += 1
        at = next_cron(s["cron"], at)
    if at is None:  # a rule with no further occurrence
        at = 2**63 - 1
    s["nextRunAt"] = at
    tx.put(key, dumps(s))
    tx.put(keys.durable_timer(fx.ns, at, keys.DURABLE_TIMER_SCHEDULE, schedule_id), b"")


# -- retention ------------------------------------------------------------------------------
def retention_get(tx: Txn, fx: Effects) -> int:
    cfg = _get(tx, keys.durable_config(fx.ns)) or {}
    return int(cfg.get("retentionMs", DEFAULT_RETENTION_MS))


def retention_set(tx: Txn, fx: Effects, retention_ms: int) -> dict:
    if retention_ms < 1:
        raise bad("retentionMs must be at least 1")
    cfg = _get(tx, keys.durable_config(fx.ns)) or {}
    cfg["retentionMs"] = retention_ms
    tx.put(keys.durable_config(fx.ns), dumps(cfg))
    return cfg


def retention_sweep(tx: Txn, fx: Effects, limit: int = 50) -> int:
    """Delete the trees of roots settled longer ago than the namespace's TTL: the root
    promise, every promise under it (`root:...`) and their tasks and timers. Only whole
    trees go, so a replay never misses a finished step of a live workflow."""
    ttl = retention_get(tx, fx)
    base = keys.durable_retention_all(fx.ns)
    rows = tx.scan(base, base + keys.U64.pack(max(fx.now - ttl, 0) + 1), limit=limit)
    for key, _ in rows:
        _, root = keys.durable_retention_parts(fx.ns, key)
        tx.delete(key)
        p = _get(tx, keys.durable_promise(fx.ns, root))
        if p is None or p["state"] == PENDING:
            continue
        ids = [root] + [pk[len(keys.durable_promises(fx.ns)):].decode() for pk, _ in
                        tx.scan(keys.durable_promise(fx.ns, root + ":"), keys.prefix_end(keys.durable_promise(fx.ns, root + ":")))]  # fmt: skip
        for promise_id in ids:
            child = _get(tx, keys.durable_promise(fx.ns, promise_id))
            if child is not None and child["state"] == PENDING and is_awaitable(child["tags"]):
                tx.delete(
                    keys.durable_timer(fx.ns, child["timeoutAt"], keys.DURABLE_TIMER_PROMISE, promise_id)
                )
            if child is not None:
                for index_key in index_rows(fx.ns, child):
                    tx.delete(index_key)
            t = _task(tx, fx, promise_id)
            if t is not None:
                _arm_task_timer(tx, fx, t, None)
                tx.delete(keys.durable_task(fx.ns, promise_id))
            tx.delete(keys.durable_promise(fx.ns, promise_id))
        fx.changed("promise.deleted", root, promises=len(ids))
    return len(rows)


def search_index_backfill(tx: Txn, fx: Effects, limit: int = 500) -> bool:
    """Write the search index rows (search.py) of promises stored before the index
    existed, `limit` a transaction, resuming after the last id done (kept in the
    namespace's config). True once the namespace is done; rows that exist are rewritten
    unchanged, so running it again is harmless."""
    cfg = _get(tx, keys.durable_config(fx.ns)) or {}
    after = cfg.get("searchIndexedAfter", "")
    if after is None:
        return True
    base = keys.durable_promises(fx.ns)
    start = keys.durable_promise(fx.ns, after) + b"\x00" if after else base
    rows = tx.scan(start, keys.prefix_end(base), limit=limit)
    for _, raw in rows:
        for key in index_rows(fx.ns, loads(raw)):
            tx.put(key, b"")
    cfg["searchIndexedAfter"] = rows[-1][0][len(base) :].decode() if len(rows) == limit else None
    tx.put(keys.durable_config(fx.ns), dumps(cfg))
    return cfg["searchIndexedAfter"] is None


def check_create(data: Any) -> PromiseCreate:
    return parse_promise_create(data)


# -- visibility (reads) -----------------------------------------------------------------------
def retention_read(tx: Txn, ns: str) -> int:
    return retention_get(tx, Effects(ns, tx.now_ns() // MS))


def durable_executions(tx: Txn, ns: str, state: str | None, id_prefix: str, cursor: str, limit: int) -> dict:
    """One page of the namespace's durable executions: its root promises (ids without a
    `:`), in id order, from `id_prefix` and after `cursor`, optionally in one state group
    (pending, resolved, rejected). A root's promises (`<root>:...`) are skipped with one
    seek each, not read; a page reads at most `SEARCH_EXAMINE` rows and then answers with
    what it found and a cursor. States are as stored (`timedOut` as in `promise_tree`)."""
    now = tx.now_ns() // MS
    base = keys.durable_promises(ns)
    plan = id_range(base, id_prefix, cursor)
    start, end = plan.start, plan.end
    out: list[dict] = []
    examined = 0
    last = ""
    while len(out) < limit and examined < SEARCH_EXAMINE:
        rows = tx.scan(start, end, limit=min(SEARCH_EXAMINE - examined, 2 * limit + 10))
        if not rows:
            last = ""
            break
        for k, v in rows:
            examined += 1
            promise_id = k[len(base) :].decode()
            if ":" in promise_id:  # under a root: skip the rest of that root's promises
                start = keys.prefix_end(base + (promise_id.split(":", 1)[0] + ":").encode())
                break
            last = promise_id
            p = promise_wire(loads(v))
            if state is None or state_group(p["state"]) == state:
                entry: dict[str, Any] = {"promise": p}
                if p["state"] == PENDING and p["timeoutAt"] <= now:
                    entry["timedOut"] = True
                out.append(entry)
                if len(out) == limit:
                    break
        else:
            start = k + b"\x00"
    return {
        "executions": out,
        "cursor": last if last and (len(out) == limit or examined >= SEARCH_EXAMINE) else None,
    }


def promise_tree(tx: Txn, ns: str, root_id: str) -> dict:
    """A promise and every promise under it (`<id>:...` for a root, `<id>.` below), in id
    order, each with its task (state, version = attempts, timing). States are as stored:
    a pending promise past its timeout shows `timedOut: true` until a timer settles it."""
    now = tx.now_ns() // MS
    base = keys.durable_promises(ns)
    root = _get(tx, keys.durable_promise(ns, root_id))
    if root is None:
        raise DurableError(404, f"promise {root_id!r} not found")
    start = keys.durable_promise(ns, branch_prefix(root_id) if ":" in root_id else root_id + ":")
    rows = [(keys.durable_promise(ns, root_id), dumps(root))] + tx.scan(
        start, keys.prefix_end(start), limit=10_000
    )
    ids = [k[len(base) :].decode() for k, _ in rows]
    tasks = tx.batch_get([keys.durable_task(ns, i) for i in ids])
    nodes = []
    for (_, v), promise_id in zip(rows, ids, strict=True):
        p = promise_wire(loads(v))
        node: dict[str, Any] = {
            "promise": p,
            "parent": p["tags"].get(TAG_PARENT) if promise_id != root_id else None,
        }
        if p["state"] == PENDING and p["timeoutAt"] <= now:
            node["timedOut"] = True
        raw = tasks.get(keys.durable_task(ns, promise_id))
        if raw is not None:
            t = loads(raw)
            node["task"] = task_wire(t) | {"attempts": t["version"]}
        nodes.append(node)
    return {"root": root_id, "promises": nodes}
