"""`PeriodicSavepoints`: the loop that applies each deployment's savepoint policy
(`savepoint_interval_s`), one `FlinkLifecycle.take_due_savepoints()` per pass."""

from __future__ import annotations

from loam_common.loop import Loop
from loam_engines.flink.lifecycle import FlinkLifecycle


class PeriodicSavepoints(Loop):
    name = "flink-periodic-savepoints"

    def __init__(self, lifecycle: FlinkLifecycle, interval: float = 5.0) -> None:
        super().__init__(interval)
        self.lifecycle = lifecycle

    async def run_once(self) -> int:
        return len(await self.lifecycle.take_due_savepoints())
