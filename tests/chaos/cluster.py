"""The split deployment as separate OS processes on one SQLite file (gateway, queue
core, sweeper, relay, started as `loam` starts them, through tests/support/processes.py),
and the faults a harness injects into them: kill -9 and restart, SIGSTOP then SIGCONT,
and jumps of the server processes' clock (`jump_clock`: the store clock's test hook,
`loam_common.store.base.OffsetFileClock`, one offset file every process reads). Each
process's RSS and open file descriptors can be read for the soak's report."""

from __future__ import annotations

import asyncio
import os
import secrets
from pathlib import Path

from processes import Proc, free_port, service_env

from loam_common.jobs.queue import QueueTx

SEC = 1_000_000_000
MINUTE = 60 * SEC


class SplitDeployment:
    """gateway -> queue core, a sweeper and a relay, on `data/loam.db`."""

    def __init__(self, data: Path, visibility_s: float = 2.0) -> None:
        self.data = data
        data.mkdir(parents=True, exist_ok=True)
        self.url = f"sqlite:///{data / 'loam.db'}"
        logs = data / "logs"
        logs.mkdir(exist_ok=True)
        core_port, gw_port = free_port(), free_port()
        self.core_url, self.gateway_url = f"http://127.0.0.1:{core_port}", f"http://127.0.0.1:{gw_port}"
        # The server clock is the wall clock plus the offset in this file (jump_clock).
        self.clock_file = data / "clock-offset-ns"
        self.clock_offset_ns = self.max_clock_offset_ns = 0
        env = service_env(LOAM_INTERNAL_TOKEN=secrets.token_hex(16), LOAM_TEST_HOOKS="1",
                          LOAM_TEST_CLOCK_OFFSET_FILE=str(self.clock_file))  # fmt: skip
        self.visibility_ns = int(visibility_s * SEC)
        self.core = Proc("queue-core", ["loam_queue_core.server", "--store", self.url, "--port", str(core_port),
                                        "--blobs", str(data / "blobs")], env, logs)  # fmt: skip
        self.gateway = Proc("gateway", ["loam_gateway", "--queue-cores", self.core_url, "--store", self.url,
                                        "--port", str(gw_port)], env, logs)  # fmt: skip
        self.sweeper = Proc("sweeper", ["loam_sweeper", "--store", self.url, "--blobs", str(data / "blobs"),
                                        "--queue-cores", self.core_url, "--interval", "0.2", "--lease-ttl", "2",
                                        "--id", "sweeper-a"], env, logs)  # fmt: skip
        self.relay = Proc("relay", ["loam_relay", "--store", self.url, "--id", "relay-a", "--interval", "0.1"],
                          env, logs)  # fmt: skip
        self.procs = [self.core, self.gateway, self.sweeper, self.relay]
        # A client of the deployment, started once it serves: a Resonate SDK worker on the
        # gateway's /resonate in namespace `durable_ns` (durable_steps_worker.py).
        self.durable_ns, self.durable_group = "chaos", "chaos-steps"
        self.durable_url = f"{self.gateway_url}/ns/{self.durable_ns}/resonate"
        self.durable_runs = data / "durable-runs.jsonl"
        worker = Path(__file__).resolve().parent / "durable_steps_worker.py"
        self.durable_worker = Proc("durable-worker", [str(worker), "--url", self.durable_url, "--group",
                                                      self.durable_group, "--runs", str(self.durable_runs)],
                                   service_env(), logs, script=True)  # fmt: skip

    async def configure(self, store, ns: str, queue: str, shards: int) -> None:
        def configure(tx) -> None:
            with QueueTx(tx, ns, queue) as qt:
                qt.cfg.shards = shards
                qt.cfg.visibility_ns = self.visibility_ns  # lost leases come back quickly
                qt.cfg.max_stalled = -1  # kills and pauses stall jobs; never fail one for that
                qt.ensure_exists()
                qt.save_config()

        await store.transact(configure)

    def jump_clock(self, delta_ns: int) -> None:
        """Move every server process's clock by `delta_ns` (forward or back) at once; each
        sees it within 50 ms (OffsetFileClock). Written by rename so no reader sees half."""
        self.clock_offset_ns += delta_ns
        self.max_clock_offset_ns = max(self.max_clock_offset_ns, self.clock_offset_ns)
        tmp = self.clock_file.with_suffix(".tmp")
        tmp.write_text(str(self.clock_offset_ns))
        os.replace(tmp, self.clock_file)

    async def start(self) -> None:
        for p in self.procs:
            p.start()
        await asyncio.gather(*(p.wait_ready() for p in self.procs))
        self.durable_worker.start()
        await self.durable_worker.wait_ready()

    def stop(self) -> dict[str, int | None]:
        return {p.name: p.term() for p in [self.durable_worker, *reversed(self.procs)]}

    def tails(self) -> str:
        return "\n".join(p.tail() for p in [*self.procs, self.durable_worker])
