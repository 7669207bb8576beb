"""Publishes and acks sent in the background, batched: what lets one producer thread
and one worker's consumer thread keep pace with Redis, whose round trips are cheaper
than a transaction.

- A publish (`_put`) joins its queue's pending list and returns; one EnqueueBulk per
  queue is in flight at a time, carrying everything that piled up meanwhile, so a
  queue's messages keep their order. `(id, retries)` job keys make a retried bulk
  harmless.
- An ack joins the pending completions and is sent `ack_linger` (default 10 ms) later
  with every ack that arrived meanwhile, in one CompleteBatch; one is in flight at a
  time. Waiting a few milliseconds turns a worker's acks into a few calls a second
  instead of one per handful of tasks; an ack lost with a crashing worker only means a
  redelivery, which at-least-once delivery allows anyway (docs/decisions/0015).
- `wait()` returns once everything handed over has been answered by the server. It
  runs before a reject or release (so they follow the acks and publishes before them),
  when the transport closes, at process exit, and after each task in a worker's pool
  process (Celery's `task_postrun`), so a task's publishes (a chain's next step, a
  retry) reach the server before the task's own ack can.

`confirm_publish=True` (transport option) makes each publish wait for the server instead.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import threading
from typing import Any

from loam.errors import AlreadyExists, Fenced, InvalidState, JobsError, NotFound
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as jpb
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb

log = logging.getLogger("loam_celery.pipeline")

BATCH = 1000
ACK_LINGER_S = 0.01
_LOST = (Fenced, NotFound, InvalidState)


class Pipeline:
    def __init__(self, client: Any) -> None:
        self.client = client
        self._cond = threading.Condition()
        self._pending: dict[str, list[jpb.BulkItem]] = {}
        self._flushing: set[str] = set()
        self._acks: list[jpb.CompleteRequest] = []
        self._acking = False
        # Handed over / answered, per stream (the acks, each queue's publishes): each is
        # answered in order, so wait() knows when what was handed over before it is done.
        self._handed: dict[str | None, int] = {}
        self._answered: dict[str | None, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # asyncio keeps only weak references
        self.ack_linger = ACK_LINGER_S
        self._hurry: asyncio.Event | None = None  # set by wait(): send the acks now

    def _start(self, coro_fn: Any, *args: Any) -> None:
        loop = self.client.loop

        def spawn() -> None:
            task = loop.create_task(coro_fn(*args))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        loop.call_soon_threadsafe(spawn)

    # -- publishing --------------------------------------------------------------------------
    def publish(self, queue: str, task: pb.TaskSpec, opts: pb.EnqueueOpts) -> None:
        with self._cond:
            self._pending.setdefault(queue, []).append(jpb.BulkItem(task=task, opts=opts))
            self._handed[queue] = self._handed.get(queue, 0) + 1
            start = queue not in self._flushing
            if start:
                self._flushing.add(queue)
        if start:
            self._start(self._flush_queue, queue)

    async def _flush_queue(self, queue: str) -> None:
        while True:
            with self._cond:
                items = self._pending.get(queue, [])
                batch, rest = items[:BATCH], items[BATCH:]
                if rest:
                    self._pending[queue] = rest
                else:
                    self._pending.pop(queue, None)
                if not batch:
                    self._flushing.discard(queue)
                    self._cond.notify_all()
                    return
            try:
                for r in await self.client.aclient.enqueue_bulk(queue, batch):
                    if isinstance(r, JobsError) and not isinstance(r, AlreadyExists):
                        log.error("publish to %s refused: %s", queue, r)
            except asyncio.CancelledError:
                raise
            except AlreadyExists as e:  # a batch of one may be refused as a whole
                log.debug("message for %s was published before: %s", queue, e)
            except Exception as e:  # noqa: BLE001 - reported; nothing else can be done here
                log.error("%d message(s) for %s were not published: %s", len(batch), queue, e)
            finally:
                with self._cond:
                    self._answered[queue] = self._answered.get(queue, 0) + len(batch)
                    self._cond.notify_all()

    # -- acks ----------------------------------------------------------------------------------
    def complete(self, token: jpb.LeaseToken, outcome: jpb.Outcome) -> None:
        with self._cond:
            self._acks.append(jpb.CompleteRequest(token=token, outcome=outcome))
            self._handed[None] = self._handed.get(None, 0) + 1
            start = not self._acking
            self._acking = True
        if start:
            self._start(self._flush_acks)

    async def _flush_acks(self) -> None:
        while True:
            if self.ack_linger > 0 and len(self._acks) < BATCH:
                if self._hurry is None:
                    self._hurry = asyncio.Event()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._hurry.wait(), self.ack_linger)
                self._hurry.clear()
            with self._cond:
                batch, self._acks = self._acks[:BATCH], self._acks[BATCH:]
                if not batch:
                    self._acking = False
                    self._cond.notify_all()
                    return
            try:
                for req, r in zip(batch, await self.client.aclient.complete_batch(batch), strict=True):
                    if isinstance(r, _LOST):
                        log.warning("ack of %s/%s came too late: %s", req.token.queue, req.token.job, r)
                    elif isinstance(r, JobsError):
                        log.error("ack of %s/%s refused: %s", req.token.queue, req.token.job, r)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the leases lapse and the jobs come back
                log.error("%d ack(s) were not sent (the jobs will be redelivered): %s", len(batch), e)
            finally:
                with self._cond:
                    self._answered[None] = self._answered.get(None, 0) + len(batch)
                    self._cond.notify_all()

    def _set_hurry(self) -> None:
        if self._hurry is not None:
            self._hurry.set()

    # -- waiting -------------------------------------------------------------------------------
    def wait(self, timeout: float | None = 30.0) -> bool:
        """Until everything handed over before this call is answered (acks waiting out
        their linger are sent at once); False if `timeout` ran out first."""
        if threading.current_thread() is getattr(self.client, "_thread", None):
            return False  # on the loop itself: nothing to wait for safely
        with self._cond:
            targets = {k: n for k, n in self._handed.items() if self._answered.get(k, 0) < n}
            if not targets:
                return True
            if None in targets:
                self.client.loop.call_soon_threadsafe(self._set_hurry)
            return self._cond.wait_for(lambda: all(self._answered.get(k, 0) >= n for k, n in targets.items()),
                                       timeout)  # fmt: skip


_pipelines: dict[int, Pipeline] = {}
_lock = threading.Lock()


def pipeline_for(client: Any) -> Pipeline:
    p = _pipelines.get(id(client))
    if p is None:
        with _lock:
            p = _pipelines.setdefault(id(client), Pipeline(client))
    return p


def wait_all(timeout: float = 10.0) -> None:
    for p in list(_pipelines.values()):
        p.wait(timeout)


def _after_fork_in_child() -> None:
    global _lock
    _pipelines.clear()
    _lock = threading.Lock()


import os  # noqa: E402

os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(wait_all)
