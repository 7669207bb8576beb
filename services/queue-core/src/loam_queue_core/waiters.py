"""Long-poll waiters: a Lease that found nothing parks here until a write to one of
its queues wakes it, or its wait ends. No polling loop: a waiter is a future.

A waiter that sleeps (`sleep`) may instead be claimed by an enqueue (`claim`), which
leases for it in its own transaction and answers it with the jobs (`hand`): the job goes
to the waiting worker without a second transaction (decision 0023)."""

from __future__ import annotations

import asyncio
from collections import deque

#: What an enqueue needs to lease for a sleeping poll: job_lease's worker, max_jobs,
#: names and visibility_ns.
LeaseArgs = tuple


class Waiters:
    def __init__(self) -> None:
        self._by_queue: dict[tuple[str, str], deque[asyncio.Future]] = {}
        self._sleeping: dict[asyncio.Future, tuple[list[str], LeaseArgs]] = {}
        self._claimed: set[asyncio.Future] = set()

    def park(self, ns: str, queues: list[str]) -> asyncio.Future:
        """Register before reading, so a write between the read and the wait is seen."""
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        for q in queues:
            self._by_queue.setdefault((ns, q), deque()).append(fut)
        return fut

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

    def unpark(self, ns: str, queues: list[str], fut: asyncio.Future) -> None:
        """The poll is done with `fut` (answered, timed out or cancelled). A claimed one
        is cancelled too: the enqueue that claimed it then returns its jobs (`hand`)."""
        if not fut.done():
            fut.cancel()
        self._sleeping.pop(fut, None)
        self._forget(ns, queues, fut)

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
