"""`AuditedAction`: an operator action's transactions, each with its audit record.

An action taken for a caller (the `Actor` the gateway set, loam_common.audit) writes its
record in its own transaction: the record exists exactly when the action committed. An
action done in several bounded transactions (a drain, a clean) has one record, written
by its first transaction and whose count each later transaction raises by the jobs it
touched. Without an actor (sweeps, schedules, in-process callers) the transactions run
as they are, unrecorded.

Writes that create jobs (an enqueue, a write batch, a flow) are recorded only for a
caller that came by REST (`transact_if_rest`): a person, the console or a script with a
token. Over Connect they are the producers' hot path (the SDKs, workers), not audited
(decision 0040)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from loam_common.audit import AuditStep, current_actor
from loam_common.store.runner import Store


class AuditedAction:
    def __init__(
        self,
        store: Store,
        ns: str,
        action: str,
        queue: str,
        job: str = "",
        detail: str = "",
        count: Callable[[Any], int] = lambda _result: 1,
        job_of: Callable[[Any], str] | None = None,
    ) -> None:
        self.store = store
        actor = current_actor()
        self._step = (
            AuditStep(ns, actor, action, queue, job, detail, count, job_of=job_of)
            if actor is not None
            else None
        )

    async def transact(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`store.transact(fn, *args)`, recorded in the same transaction."""
        if self._step is None:
            return await self.store.transact(fn, *args)
        result, record_id = await self.store.transact(self._step, fn, *args)
        if not self._step.record_id:  # the later transactions add to this record
            self._step = dataclasses.replace(self._step, record_id=record_id)
        return result


def transact_if_rest(
    store: Store,
    ns: str,
    action: str,
    queue: str,
    detail: Callable[[], str],
    count: Callable[[Any], int],
    job_of: Callable[[Any], str] | None = None,
    *,
    inline: bool = False,
) -> Callable[..., Awaitable[Any]]:
    """How a job-creating write's transaction runs: `store.transact`, audited (one record,
    `count` jobs, the job `job_of` its result names, if one) when its caller came by REST;
    as it is otherwise (`inline`: Store.transact's, for a small one). `detail` is built
    only for a record."""
    actor = current_actor()
    if actor is None or actor.via != "rest":
        return functools.partial(store.transact, inline=True) if inline else store.transact
    return AuditedAction(store, ns, action, queue, "", detail(), count, job_of).transact


def jobs_touched(result: Any) -> int:
    """The count of a batch transition that returns how many jobs it touched."""
    return int(result)


def none_touched(_result: Any) -> int:
    return 0
