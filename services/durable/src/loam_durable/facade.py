"""`DurableCore`: the one place durable transactions run. `await core.request(ns, kind,
data)` checks one request of the Resonate protocol (its `data`, kind by kind), runs its
transition in one store transaction and, once that has committed, hands the pushes it
made to the `Hub` (or, in a process without connections, they were written to the
store's outbox by the same transaction). It returns `(status, data)` for the envelope.

The namespace always comes in resolved from the caller's credential.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any
from zoneinfo import ZoneInfo

from loam_common.errors import InvalidArgument
from loam_common.schedule_rules import CronRule, parse_cron
from loam_common.store.runner import Store
from loam_durable import transitions as tr
from loam_durable.hub import Hub
from loam_durable.peers import OutboxNotice, Peers
from loam_durable.records import (
    TAG_DELAY,
    TAG_TARGET,
    DurableError,
    bad,
    check_id,
    check_int,
    check_tags,
    check_value,
    parse_address,
    parse_promise_create,
    parse_settle,
    response,
)
from loam_durable.search import SEARCH_LIMIT_MAX, parse_promise_query

log = logging.getLogger(__name__)

_UTC = ZoneInfo("UTC")


def next_cron(cron: str, after_ms: int) -> int | None:
    """The first occurrence of a (checked) Resonate cron strictly after `after_ms`, UTC."""
    expr = parse_cron(_five_or_six(cron))
    nxt = CronRule(expr, _UTC).next_after(after_ms * 1_000_000)
    return None if nxt is None else nxt // 1_000_000


def _five_or_six(cron: str) -> str:
    # Resonate also takes a 7th field, the year; a `*` there says nothing.
    parts = cron.split()
    if len(parts) == 7 and parts[6] == "*":
        parts = parts[:6]
    return " ".join(parts)


def check_cron(cron: Any) -> str:
    if not isinstance(cron, str) or not cron.strip():
        raise bad("cron must be a non-empty string")
    try:
        parse_cron(_five_or_six(cron))
    except InvalidArgument as e:
        raise bad(f"Invalid cron expression: {e.message}") from None
    return cron


class DurableCore:
    def __init__(
        self,
        store: Store,
        hub: Hub | None,
        *,
        retry_ms: int = tr.DEFAULT_RETRY_MS,
    ) -> None:
        self.store = store
        self.hub = hub
        self.retry_ms = retry_ms
        #: the other processes serving the push channel (a split deployment), set by the
        #: process that starts them: a push no local stream takes is offered to them
        self.peers: Peers | None = None
        #: in a process without connections (a sweeper): who is told, after a commit that
        #: wrote pushes to the store's outbox, to drain it (peers.OutboxNotice)
        self.outbox_notice: OutboxNotice | None = None
        #: in a process with connections: wakes its outbox drain (timers.DurableOutbox)
        self.outbox_waiting: Callable[[], None] | None = None
        self._handlers: dict[str, Callable[[str, dict], Awaitable[tuple[int, Any]]]] = {
            "promise.get": self._promise_get,
            "promise.create": self._promise_create,
            "promise.settle": self._promise_settle,
            "promise.register_listener": self._promise_register_listener,
            "promise.register_callback": self._promise_register_callback,
            "promise.search": self._promise_search,
            "task.create": self._task_create,
            "task.acquire": self._task_acquire,
            "task.get": self._task_get,
            "task.fence": self._task_fence,
            "task.suspend": self._task_suspend,
            "task.fulfill": self._task_fulfill,
            "task.release": self._task_release,
            "task.heartbeat": self._task_heartbeat,
            "schedule.create": self._schedule_create,
            "schedule.get": self._schedule_get,
            "schedule.delete": self._schedule_delete,
            "schedule.search": self._schedule_search,
        }

    def knows(self, kind: str) -> bool:
        return kind in self._handlers

    async def request(self, ns: str, kind: str, data: dict) -> tuple[int, Any]:
        """(status, data) of one request; DurableError for a refusal."""
        return await self._handlers[kind](ns, data)

    async def transact(self, ns: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run one transition and deliver its pushes after the commit. Inline: a request's
        transaction is small and its caller waits for it (Store.transact)."""
        result, fx = await self.store.transact(
            tr.run, ns, self.retry_ms, self.hub is None, fn, *args, inline=True
        )
        self.deliver(fx)
        return result

    def deliver(self, fx: tr.Effects) -> None:
        """Hand the pushes of a committed transaction to this process's connections (or,
        written to the outbox, tell the processes that have connections)."""
        if fx.outboxed and self.outbox_notice is not None:
            self.outbox_notice.notify(fx.ns)
        for address, message in fx.messages:
            self.push(fx.ns, address, message)

    def push(self, ns: str, address: str, message: dict) -> None:
        """One push to this process's streams, else (in the background) to a peer's."""
        hub = self.hub
        if hub is None:
            return
        peers = self.peers
        if peers is None:
            hub.send(ns, address, message)
        elif not hub.send(ns, address, message, hold=False):
            peers.forward_later(ns, address, message, lambda: hub.hold(ns, address, message))

    # -- visibility (the REST facade's reads and settings) -------------------------------
    async def tree(self, ns: str, root_id: str) -> dict:
        """A promise with every promise under it and their tasks (NotFound: DurableError 404)."""
        return await self.store.snapshot(tr.promise_tree, ns, root_id)

    async def executions(self, ns: str, state: str | None, id_prefix: str, cursor: str, limit: int) -> dict:
        """A page of the namespace's durable executions (root promises), in id order."""
        return await self.store.snapshot(tr.durable_executions, ns, state, id_prefix, cursor, limit)

    async def set_retention(self, ns: str, retention_ms: int) -> dict:
        return await self.transact(ns, tr.retention_set, retention_ms)

    async def get_retention(self, ns: str) -> int:
        return await self.store.snapshot(tr.retention_read, ns)

    # -- promises ------------------------------------------------------------------------
    async def _promise_get(self, ns: str, data: dict) -> tuple[int, Any]:
        return 200, await self.transact(ns, tr.promise_get_with_timeout, check_id(data.get("id")))

    async def _promise_create(self, ns: str, data: dict) -> tuple[int, Any]:
        return 200, await self.transact(ns, tr.promise_create_if_absent, parse_promise_create(data))

    async def _promise_settle(self, ns: str, data: dict) -> tuple[int, Any]:
        return 200, await self.transact(ns, tr.promise_settle_if_pending, *parse_settle(data))

    async def _promise_register_listener(self, ns: str, data: dict) -> tuple[int, Any]:
        awaited = check_id(data.get("awaited"), "awaited")
        address = data.get("address")
        parse_address(address, "Invalid listener address")
        return 200, await self.transact(ns, tr.promise_listen_if_pending, awaited, address)

    async def _promise_register_callback(self, ns: str, data: dict) -> tuple[int, Any]:
        awaited = check_id(data.get("awaited"), "awaited")
        awaiter = check_id(data.get("awaiter"), "awaiter")
        _check_awaits(awaited, awaiter)
        return 200, await self.transact(ns, tr.promise_callback_if_pending, awaited, awaiter)

    async def _promise_search(self, ns: str, data: dict) -> tuple[int, Any]:
        return 200, await self.transact(ns, tr.promise_search, parse_promise_query(data))

    # -- tasks ---------------------------------------------------------------------------
    async def _task_create(self, ns: str, data: dict) -> tuple[int, Any]:
        pid = check_id(data.get("pid"), "pid")
        ttl = check_int(data.get("ttl"), "ttl", 1)
        req = parse_promise_create(_action_data(data, "promise.create"))
        if TAG_TARGET not in req.tags:
            raise bad("task.create requires a resonate:target tag")
        if TAG_DELAY in req.tags:
            raise bad("task.create does not take a resonate:delay tag")
        return 200, await self.transact(ns, tr.task_create_if_absent, req, pid, ttl)

    async def _task_acquire(self, ns: str, data: dict) -> tuple[int, Any]:
        task_id = check_id(data.get("id"))
        version = check_int(data.get("version"), "version")
        pid = check_id(data.get("pid"), "pid")
        ttl = check_int(data.get("ttl"), "ttl", 1)
        return 200, await self.transact(ns, tr.task_acquire_if_pending, task_id, version, pid, ttl)

    async def _task_get(self, ns: str, data: dict) -> tuple[int, Any]:
        return 200, await self.transact(ns, tr.task_get, check_id(data.get("id")))

    async def _task_fence(self, ns: str, data: dict) -> tuple[int, Any]:
        task_id = check_id(data.get("id"))
        version = check_int(data.get("version"), "version")
        action = data.get("action")
        if not isinstance(action, dict):
            raise bad("action must be an object")
        kind = action.get("kind")
        inner = action.get("data")
        head = action.get("head") if isinstance(action.get("head"), dict) else {}
        corr_id = head.get("corrId", "")
        if not isinstance(inner, dict):
            raise bad("action.data must be an object")
        if inner.get("id") == task_id:
            raise bad("a fenced action may not name the task's own promise")
        if kind == "promise.create":
            req = parse_promise_create(inner)
            status, out = (
                200,
                await self.transact(ns, tr.task_fence_create_if_acquired, task_id, version, req),
            )
        elif kind == "promise.settle":
            promise_id, state, value = parse_settle(inner)
            status, out = await self.transact(
                ns, tr.task_fence_settle_if_acquired, task_id, version, promise_id, state, value
            )
        else:
            raise bad("action.kind must be promise.create or promise.settle")
        return 200, {"action": response(kind, corr_id, status, out), "preload": []}

    async def _task_suspend(self, ns: str, data: dict) -> tuple[int, Any]:
        task_id = check_id(data.get("id"))
        version = check_int(data.get("version"), "version")
        actions = data.get("actions")
        if not isinstance(actions, list) or not actions:
            raise bad("actions must be a non-empty list")
        awaited: list[str] = []
        for a in actions:
            if (
                not isinstance(a, dict)
                or a.get("kind") != "promise.register_callback"
                or not isinstance(a.get("data"), dict)
            ):
                raise bad("every action must be a promise.register_callback")
            target = check_id(a["data"].get("awaited"), "awaited")
            awaiter = check_id(a["data"].get("awaiter"), "awaiter")
            if awaiter != task_id:
                raise bad("awaiter must be the suspending task")
            _check_awaits(target, awaiter)
            if target in awaited:
                raise bad(f"awaited {target!r} appears twice")
            awaited.append(target)
        return await self.transact(ns, tr.task_suspend_if_acquired, task_id, version, awaited)

    async def _task_fulfill(self, ns: str, data: dict) -> tuple[int, Any]:
        task_id = check_id(data.get("id"))
        version = check_int(data.get("version"), "version")
        promise_id, state, value = parse_settle(_action_data(data, "promise.settle"))
        if promise_id != task_id:
            raise bad("task.fulfill settles the task's own promise: action.data.id must equal id")
        return 200, await self.transact(ns, tr.task_fulfill_if_acquired, task_id, version, state, value)

    async def _task_release(self, ns: str, data: dict) -> tuple[int, Any]:
        task_id = check_id(data.get("id"))
        version = check_int(data.get("version"), "version")
        return 200, await self.transact(ns, tr.task_release_if_acquired, task_id, version)

    async def _task_heartbeat(self, ns: str, data: dict) -> tuple[int, Any]:
        pid = check_id(data.get("pid"), "pid")
        tasks = data.get("tasks")
        if not isinstance(tasks, list):
            raise bad("tasks must be a list")
        leases = []
        for t in tasks:
            if not isinstance(t, dict):
                raise bad("tasks must hold {id, version} objects")
            leases.append((check_id(t.get("id")), check_int(t.get("version"), "version")))
        if not leases:
            return 200, {}
        return 200, await self.transact(ns, tr.task_heartbeat_if_acquired, pid, leases)

    # -- schedules -----------------------------------------------------------------------
    async def _schedule_create(self, ns: str, data: dict) -> tuple[int, Any]:
        schedule_id = check_id(data.get("id"))
        if ":" in schedule_id:
            raise bad("schedule id must not contain ':'")
        cron = check_cron(data.get("cron"))
        promise_id = check_id(data.get("promiseId"), "promiseId")
        timeout = check_int(data.get("promiseTimeout"), "promiseTimeout")
        param = check_value(data.get("promiseParam"), "promiseParam")
        tags = check_tags(data.get("promiseTags"))
        if TAG_TARGET not in tags:
            raise bad("promiseTags must include a resonate:target tag")
        parse_address(tags[TAG_TARGET], "Invalid resonate:target address")
        s = {"id": schedule_id, "cron": cron, "promiseId": promise_id, "promiseTimeout": timeout,
             "promiseParam": param, "promiseTags": tags}  # fmt: skip
        first = next_cron(cron, self.store.clock.now_ns() // 1_000_000)
        return 200, await self.transact(
            ns, tr.schedule_create_if_absent, s, first if first is not None else 2**63 - 1
        )

    async def _schedule_get(self, ns: str, data: dict) -> tuple[int, Any]:
        return 200, await self.transact(ns, tr.schedule_get, check_id(data.get("id")))

    async def _schedule_delete(self, ns: str, data: dict) -> tuple[int, Any]:
        return 200, await self.transact(ns, tr.schedule_delete_if_present, check_id(data.get("id")))

    async def _schedule_search(self, ns: str, data: dict) -> tuple[int, Any]:
        limit, cursor = _page(data)
        return 200, await self.transact(ns, tr.schedule_search, check_tags(data.get("tags")), limit, cursor)


def _action_data(data: dict, kind: str) -> dict:
    action = data.get("action")
    if not isinstance(action, dict) or action.get("kind") != kind:
        raise bad(f"action must be a {kind} envelope")
    inner = action.get("data")
    if not isinstance(inner, dict):
        raise bad("action.data must be an object")
    return inner


def _check_awaits(awaited: str, awaiter: str) -> None:
    if awaited == awaiter:
        raise bad("a promise cannot await itself")
    if awaited.split(":", 1)[0] != awaiter.split(":", 1)[0]:
        raise bad("awaited and awaiter must share an origin")


def _page(data: dict) -> tuple[int, str]:
    limit = data.get("limit", 10)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= SEARCH_LIMIT_MAX:
        raise bad(f"limit must be between 1 and {SEARCH_LIMIT_MAX}")
    cursor = data.get("cursor") or ""
    if not isinstance(cursor, str):
        raise bad("cursor must be a string")
    return limit, cursor


__all__ = ["DurableCore", "DurableError", "next_cron"]
