"""Result writes sent behind the task: a pool process hands a finished task's result to a
thread of its own and takes its next task without waiting for the server's answer
(docs/decisions/0017).

- One thread per process sends the writes in the order they were handed over: each call
  (ResultSetMany, one transaction) carries every write waiting at that moment, so a
  process that finishes tasks faster than one round trip makes fewer calls, not a
  longer queue. Unavailable is tried again (backoff up to 2 s) for as long as the
  process lives. A refused call is sent again one write at a time, so only the refused
  write is dropped, and logged with its key.
- `flush()` returns once everything handed over before it is answered. The backend
  flushes before any other call it makes, so this process's own calls (a chord count, a
  read, a delete) always come after its earlier writes; processes' chord counts then
  see every header result stored.
- A process flushes at exit: Celery's `worker_process_shutdown` (a pool process that
  exits after `max_tasks_per_child`), `worker_shutdown`, and `atexit`.
- At most MAX_PENDING writes wait: past that, handing over waits for room.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable

from loam.errors import Unavailable

log = logging.getLogger("loam_celery.write_behind")

MAX_PENDING = 1000  # also the most one call carries (the server's limit)
RETRY_MAX_S = 2.0
EXIT_FLUSH_S = 30.0

Write = tuple[str, bytes, "float | None"]  # key, value, ttl (s)
Send = Callable[[list[Write]], None]
_instances: weakref.WeakSet[WriteBehind] = weakref.WeakSet()


class WriteBehind:
    def __init__(self, send: Send) -> None:
        self._send = send
        self._reset()
        _instances.add(self)

    def _reset(self) -> None:
        """A fresh state: also what a forked child starts from (its parent's thread and
        lock did not come along; the parent sends its own pending writes)."""
        self._cond = threading.Condition()
        self._pending: deque[Write] = deque()
        self._handed = 0
        self._answered = 0
        self._thread: threading.Thread | None = None

    def put(self, key: str, value: bytes, ttl: float | None) -> None:
        with self._cond:
            self._cond.wait_for(lambda: len(self._pending) < MAX_PENDING)
            self._pending.append((key, value, ttl))
            self._handed += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="loam-result-writes", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Until every write handed over before this call is answered; False if
        `timeout` ran out first."""
        with self._cond:
            target = self._handed
            if self._answered >= target:
                return True
            if threading.current_thread() is self._thread:
                return False  # the sender itself: waiting would never end
            return self._cond.wait_for(lambda: self._answered >= target, timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._pending))
                batch = list(self._pending)  # stays pending (and counted) until answered
            self._send_batch(batch)
            with self._cond:
                for _ in batch:
                    self._pending.popleft()
                self._answered += len(batch)
                self._cond.notify_all()

    def _send_batch(self, batch: list[Write]) -> None:
        delay = 0.1
        while True:
            try:
                self._send(batch)
                return
            except Unavailable as e:
                log.warning("%d result(s) not stored yet (%s); trying again in %.1f s", len(batch), e, delay)
                time.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
            except Exception as e:  # noqa: BLE001 - reported; the write cannot succeed as it is
                if len(batch) > 1:  # find the refused one: the others are stored
                    for write in batch:
                        self._send_batch([write])
                else:
                    log.error("result %s was refused and is not stored: %s", batch[0][0], e)
                return


def flush_all(timeout: float = EXIT_FLUSH_S) -> None:
    deadline = time.monotonic() + timeout
    for wb in list(_instances):
        if not wb.flush(max(deadline - time.monotonic(), 0.0)):
            log.error("results of finished tasks were not all stored before exit: %d pending",
                      wb._handed - wb._answered)  # fmt: skip


def _after_fork_in_child() -> None:
    for wb in list(_instances):
        wb._reset()


def _flush_on_signal(*args: object, **kwargs: object) -> None:
    flush_all()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(flush_all)
try:
    from celery import signals

    signals.worker_process_shutdown.connect(_flush_on_signal, weak=False)
    signals.worker_shutdown.connect(_flush_on_signal, weak=False)
except ImportError:  # pragma: no cover - loam-celery depends on Celery
    pass
