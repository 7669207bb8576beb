"""Long-poll waiters: a Lease that found nothing parks here until a write to one of
its queues wakes it, or its wait ends. No polling loop: a waiter is a future.

A waiter that sleeps (`sleep`) may instead be claimed by an enqueue (`claim`), which
leases for it in its own transaction and answers it with the jobs (`hand`): the job goes
to the waiting worker without a second transaction (decision 0023).

A worker that stops waiting (closing, or kicked to take other work) asks for its polls
to be ended (`end`) rather than dropping the call: a poll may have leased jobs that are
on their way to it, and only an answered call delivers them."""

from __future__ import annotations

import asyncio
import time
from collections import deque

#: What an enqueue needs to lease for a sleeping poll: job_lease's worker, max_jobs,
#: names, visibility_ns and subject_batch.
LeaseArgs = tuple

#: How long an end that found no poll waits for the poll it was meant for (the worker's
#: Lease and its end may arrive in either order).
END_AHEAD_S = 5.0


class Waiters:
    def __init__(self) -> None:
        self._by_queue: dict[tuple[str, str], deque[asyncio.Future]] = {}
        self._sleeping: dict[asyncio.Future, tuple[list[str], LeaseArgs]] = {}
        self._claimed: set[asyncio.Future] = set()
        self._by_worker: dict[tuple[str, str], dict[asyncio.Future, list[str]]] = {}
        self._ended: set[asyncio.Future] = set()
        self._end_ahead: dict[tuple[str, str], float] = {}  # (ns, worker) -> until (monotonic)

    def park(self, ns: str, queues: list[str], worker: str = "") -> asyncio.Future:
        """Register before reading, so a write between the read and the wait is seen."""
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        for q in queues:
            self._by_queue.setdefault((ns, q), deque()).append(fut)
        if worker:
            self._by_worker.setdefault((ns, worker), {})[fut] = queues
            until = self._end_ahead.pop((ns, worker), None)
            if until is not None and until > time.monotonic():
                self._ended.add(fut)  # its end came first: answer after one read
        return fut

    def end(self, ns: str, queues: list[str], worker: str) -> int:
        """End `worker`'s polls of any of `queues`: a sleeping one answers at once (with
        nothing, or the jobs an enqueue is leasing for it); one that is reading answers
        with what it read. With none there, the worker's next poll is ended instead."""
        now = time.monotonic()
        for k in [k for k, until in self._end_ahead.items() if until <= now]:
            del self._end_ahead[k]
        wanted = set(queues)
        ended = 0
        for fut, fut_queues in self._by_worker.get((ns, worker), {}).items():
            if fut.done() or fut in self._ended or (wanted and wanted.isdisjoint(fut_queues)):
                continue
            self._ended.add(fut)
            ended += 1
            if fut not in self._claimed:
                fut.set_result(None)
        if not ended:
            self._end_ahead[(ns, worker)] = now + END_AHEAD_S
        return ended

    def ended(self, fut: asyncio.Future) -> bool:
        """The poll's worker asked for it to end: answer now, read nothing more."""
        return fut in self._ended

    def sleep(self, fut: asyncio.Future, queues: list[str], lease_args: LeaseArgs) -> None:
        """The poll read nothing and now waits on `fut`: an enqueue may claim it."""
        if not fut.done():
            self._sleeping[fut] = (queues, lease_args)

    def claim(self, ns: str, queue: str) -> tuple[asyncio.Future, LeaseArgs] | None:
        """The oldest sleeping poll of `queue`, taken out of every queue it waits on, so
        nothing else wakes or claims it until `hand` answers it."""
        for fut in self._by_queue.get((ns, queue), ()):
            if not fut.done() and fut in self._sleeping:
                queues, args = self._sleeping.pop(fut)
                self._forget(ns, queues, fut)
                self._claimed.add(fut)
                return fut, args
        return None

    def claimed(self, fut: asyncio.Future) -> bool:
        return fut in self._claimed

    def hand(self, fut: asyncio.Future, jobs: list | None) -> bool:
        """Answer a claimed poll with the jobs leased for it, or None to have it read
        again. False when the poll is gone (its caller left), with `jobs` unanswered."""
        self._claimed.discard(fut)
        if fut.done():
            return False
        fut.set_result(jobs)
        return True

    def wake(self, ns: str, queue: str, n: int = 1) -> None:
        """Wake up to `n` waiters of a queue (n < 0: all), oldest first."""
        dq = self._by_queue.get((ns, queue))
        if not dq:
            return
        while dq and n != 0:
            fut = dq.popleft()
            if not fut.done():
                fut.set_result(None)
                n -= 1
        if not dq:
            del self._by_queue[(ns, queue)]

    def unpark(self, ns: str, queues: list[str], fut: asyncio.Future, worker: str = "") -> None:
        """The poll is done with `fut` (answered, timed out or cancelled). A claimed one
        is cancelled too: the enqueue that claimed it then returns its jobs (`hand`)."""
        if not fut.done():
            fut.cancel()
        self._sleeping.pop(fut, None)
        self._ended.discard(fut)
        self._forget(ns, queues, fut)
        if worker:
            polls = self._by_worker.get((ns, worker))
            if polls is not None:
                polls.pop(fut, None)
                if not polls:
                    del self._by_worker[(ns, worker)]

    def _forget(self, ns: str, queues: list[str], fut: asyncio.Future) -> None:
        for q in queues:
            dq = self._by_queue.get((ns, q))
            if dq is not None:
                try:
                    dq.remove(fut)
                except ValueError:
                    pass
                if not dq:
                    del self._by_queue[(ns, q)]

    def parked(self, ns: str, queue: str) -> int:
        """Polls of the queue registered to be woken (some may still be reading)."""
        return sum(1 for f in self._by_queue.get((ns, queue), ()) if not f.done())

    def sleeping(self, ns: str, queue: str) -> int:
        """Polls of the queue that read nothing and wait: an enqueue may claim them."""
        return sum(1 for f in self._by_queue.get((ns, queue), ()) if not f.done() and f in self._sleeping)
