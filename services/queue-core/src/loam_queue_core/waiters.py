"""Long-poll waiters: a Lease that found nothing parks here until a write to one of
its queues wakes it, or its wait ends. No polling loop: a waiter is a future."""

from __future__ import annotations

import asyncio
from collections import deque


class Waiters:
    def __init__(self) -> None:
        self._by_queue: dict[tuple[str, str], deque[asyncio.Future[None]]] = {}

    def park(self, ns: str, queues: list[str]) -> asyncio.Future[None]:
        """Register before reading, so a write between the read and the wait is seen."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for q in queues:
            self._by_queue.setdefault((ns, q), deque()).append(fut)
        return fut

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

    def unpark(self, ns: str, queues: list[str], fut: asyncio.Future[None]) -> None:
        if not fut.done():
            fut.cancel()
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
        return sum(1 for f in self._by_queue.get((ns, queue), ()) if not f.done())
