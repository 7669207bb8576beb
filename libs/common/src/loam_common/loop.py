"""`Loop`: the one start/stop primitive of the small maintenance loops (the sweeper,
the relay, schedule firing). A loop is an object with `run_once()`; `start()` runs it
every `interval` seconds, or at once after `wake()`, until `stop()`. Tests call
`run_once()` directly and never sleep; time inside a pass comes from the store clock.

A pass that raises is logged and the loop carries on after the interval (a store
that is briefly unavailable must not kill a sweeper). `stop()` lets the current pass
finish, then calls `on_stop()` (release leases, close clients) exactly once.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)


class Loop:
    #: shown in logs and task names
    name = "loop"

    def __init__(self, interval: float = 1.0) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive (got {interval})")
        self.interval = interval
        self.passes = 0  # completed passes, for tests and metrics
        self.failures = 0
        self._task: asyncio.Task[None] | None = None
        self._wake_event: asyncio.Event | None = None
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- what a subclass writes --------------------------------------------------------
    async def run_once(self) -> Any:
        raise NotImplementedError

    async def on_stop(self) -> None:
        """Runs once after the last pass, when stop() is called."""

    # -- the primitive -----------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the loop on the running event loop (idempotent)."""
        if self.running:
            return
        self._loop = asyncio.get_running_loop()
        self._wake_event = asyncio.Event()
        self._stopping = False
        self._task = asyncio.create_task(self._main(), name=f"loam-{self.name}")

    def wake(self) -> None:
        """Run the next pass now (from the loop's own event-loop thread)."""
        if self._wake_event is not None:
            self._wake_event.set()

    def wake_threadsafe(self) -> None:
        """`wake()` from any thread."""
        if self._loop is not None and self._wake_event is not None:
            try:
                self._loop.call_soon_threadsafe(self._wake_event.set)
            except RuntimeError:
                pass  # the loop is closed

    async def stop(self) -> None:
        """Finish the current pass, stop, and run `on_stop()`."""
        task = self._task
        if task is None:
            return
        self._stopping = True
        self.wake()
        try:
            await task
        finally:
            self._task = None
            await self.on_stop()

    async def _main(self) -> None:
        assert self._wake_event is not None
        while not self._stopping:
            self._wake_event.clear()
            try:
                await self.run_once()
                self.passes += 1
            except asyncio.CancelledError:
                raise
            except Exception:
                self.failures += 1
                log.exception("%s: pass failed; trying again in %.3g s", self.name, self.interval)
            if self._stopping:
                break
            try:
                await asyncio.wait_for(self._wake_event.wait(), self.interval)
            except TimeoutError:
                pass


async def serve_until_signalled(service: Loop, store: Any, label: str) -> None:
    """Run a maintenance service as its own process: start it, print one "ready" line,
    stop it and close its store on SIGINT or SIGTERM."""
    import signal

    stop = asyncio.Event()
    running = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        running.add_signal_handler(sig, stop.set)
    try:
        service.start()
        print(f"{label}: ready", flush=True)
        await stop.wait()
    finally:
        await service.stop()
        await store.close()
        print(f"{label}: stopped", flush=True)


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
