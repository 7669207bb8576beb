"""Where the lifecycle records what it did: the `RunRecorder` protocol (the engine runner's
generic run record implements it) and `StoreRunRecorder`, its implementation over the store.

The lifecycle writes the whole deployment after every step (state, versions, savepoints,
the action in flight) together with one log line, in one transaction: a restarted runner
reads back exactly the step it reached. `in_flight()` lists, across namespaces, the
deployments whose action did not finish, for `FlinkLifecycle.reconcile()`; `periodic()` the
running ones with a savepoint policy, for `PeriodicSavepoints`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Protocol

from loam_common import keys
from loam_common.store import Store, Txn
from loam_engines.flink.model import Deployment, LogLine

LOG_CAP = 1000  # lines kept per deployment; older ones are deleted as new ones come


class RunRecorder(Protocol):
    async def load(self, ns: str, name: str) -> Deployment | None: ...

    async def list(self, ns: str) -> list[Deployment]: ...

    async def record(self, ns: str, deployment: Deployment, log: str | None = None) -> None:
        """Write the deployment (state, versions, savepoints, pending step) and append `log`."""
        ...

    async def create(self, ns: str, deployment: Deployment, log: str) -> bool:
        """Write a new deployment; False when one of that name exists (nothing written)."""
        ...

    async def logs(self, ns: str, name: str, limit: int = 100) -> list[LogLine]: ...

    async def in_flight(self) -> list[tuple[str, str]]:
        """(namespace, deployment) of every action that has not finished."""
        ...

    async def periodic(self) -> list[tuple[str, str]]:
        """(namespace, deployment) of every RUNNING deployment with a savepoint policy."""
        ...


# -- transitions (one transaction each) -----------------------------------------------------------
def flink_deployment_get(tx: Txn, ns: str, name: str) -> bytes | None:
    return tx.get(keys.flink_deployment(ns, name))


def flink_deployments_list(tx: Txn, ns: str) -> list[bytes]:
    prefix = keys.flink_deployments(ns)
    return [v for _, v in tx.scan(prefix, keys.prefix_end(prefix))]


def flink_deployment_put(tx: Txn, ns: str, deployment: Deployment, log: str | None) -> None:
    if log is not None:
        deployment.log_seq += 1
        line = {"seq": deployment.log_seq, "at_ns": tx.now_ns(), "text": log}
        tx.put(keys.flink_log(ns, deployment.name, deployment.log_seq), json.dumps(line).encode())
        if deployment.log_seq > LOG_CAP:
            tx.delete(keys.flink_log(ns, deployment.name, deployment.log_seq - LOG_CAP))
    deployment.updated_ns = tx.now_ns()
    tx.put(keys.flink_deployment(ns, deployment.name), deployment.to_json())
    for key, present in ((keys.flink_busy(ns, deployment.name), deployment.pending is not None),
                         (keys.flink_periodic(ns, deployment.name), deployment.periodic)):  # fmt: skip
        if present:
            tx.put(key, b"")
        else:
            tx.delete(key)


def flink_deployment_create_if_absent(tx: Txn, ns: str, deployment: Deployment, log: str) -> bool:
    if tx.get(keys.flink_deployment(ns, deployment.name)) is not None:
        return False
    deployment.created_ns = tx.now_ns()
    flink_deployment_put(tx, ns, deployment, log)
    return True


def flink_logs_tail(tx: Txn, ns: str, name: str, limit: int) -> list[bytes]:
    prefix = keys.flink_logs(ns, name)
    return [v for _, v in reversed(tx.scan(prefix, keys.prefix_end(prefix), limit=limit, reverse=True))]


def flink_busy_list(tx: Txn) -> list[tuple[str, str]]:
    prefix = keys.flink_busy_all()
    return [keys.flink_busy_from_key(k) for k, _ in tx.scan(prefix, keys.prefix_end(prefix))]


def flink_periodic_list(tx: Txn) -> list[tuple[str, str]]:
    prefix = keys.flink_periodic_all()
    return [keys.flink_periodic_from_key(k) for k, _ in tx.scan(prefix, keys.prefix_end(prefix))]


# Called inside the transaction that writes a deployment: the shared engine runner keeps
# the deployment's engine run in step with it (loam_engines.flink.actions.sync_run).
Linked = Callable[[Txn, str, Deployment, str | None], None]


class StoreRunRecorder:
    """`RunRecorder` over Loam's store (keys `t/<ns>/flink/...`, `sys/flink/busy/...`)."""

    def __init__(self, store: Store, linked: Linked | None = None) -> None:
        self.store = store
        self.linked = linked

    async def load(self, ns: str, name: str) -> Deployment | None:
        raw = await self.store.snapshot(flink_deployment_get, ns, name)
        return Deployment.from_json(raw) if raw is not None else None

    async def list(self, ns: str) -> list[Deployment]:
        return [Deployment.from_json(r) for r in await self.store.snapshot(flink_deployments_list, ns)]

    async def record(self, ns: str, deployment: Deployment, log: str | None = None) -> None:
        # The transition bumps log_seq on the object it is given; a retried transaction must
        # start from the same value, so each attempt works on its own copy.
        def attempt(tx: Txn) -> Deployment:
            copy = Deployment.from_json(deployment.to_json())
            flink_deployment_put(tx, ns, copy, log)
            if self.linked is not None:
                self.linked(tx, ns, copy, log)
            return copy

        done = await self.store.transact(attempt)
        deployment.log_seq, deployment.updated_ns = done.log_seq, done.updated_ns

    async def create(self, ns: str, deployment: Deployment, log: str) -> bool:
        def attempt(tx: Txn) -> Deployment | None:
            copy = Deployment.from_json(deployment.to_json())
            if not flink_deployment_create_if_absent(tx, ns, copy, log):
                return None
            if self.linked is not None:
                self.linked(tx, ns, copy, log)
            return copy

        done = await self.store.transact(attempt)
        if done is None:
            return False
        deployment.log_seq, deployment.created_ns, deployment.updated_ns = (
            done.log_seq,
            done.created_ns,
            done.updated_ns,
        )
        return True

    async def logs(self, ns: str, name: str, limit: int = 100) -> list[LogLine]:
        return [LogLine(**json.loads(r)) for r in await self.store.snapshot(flink_logs_tail, ns, name, limit)]

    async def in_flight(self) -> list[tuple[str, str]]:
        return await self.store.snapshot(flink_busy_list)

    async def periodic(self) -> list[tuple[str, str]]:
        return await self.store.snapshot(flink_periodic_list)
