"""`loam_common.loop.Loop`: the start/stop primitive of the maintenance loops."""

from __future__ import annotations

import asyncio

from loam_common.loop import Loop


class Flaky(Loop):
    name = "flaky"

    def __init__(self) -> None:
        super().__init__(interval=3600)
        self.calls = 0
        self.stopped = 0

    async def run_once(self) -> None:
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("store unavailable")

    async def on_stop(self) -> None:
        self.stopped += 1


async def _until(cond) -> None:
    while not cond():
        await asyncio.sleep(0.001)


async def test_wake_runs_a_pass_at_once_and_a_failed_pass_does_not_stop_the_loop():
    loop = Flaky()
    loop.start()
    loop.start()  # idempotent
    await asyncio.wait_for(_until(lambda: loop.calls == 1), 2)
    loop.wake()  # this pass fails...
    await asyncio.wait_for(_until(lambda: loop.failures == 1), 2)
    loop.wake_threadsafe()  # ...and the loop carries on
    await asyncio.wait_for(_until(lambda: loop.calls == 3), 2)
    assert loop.running and loop.passes == 2
    await loop.stop()
    await loop.stop()
    assert not loop.running and loop.stopped == 1
