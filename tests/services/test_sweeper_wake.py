"""The sweeper service wakes the queue core that owns a queue over HTTP
(`POST <core>/internal/v1/wake` with the internal token) after a pass that made jobs
ready, so a long-poll parked in another process returns at once."""

from __future__ import annotations

import asyncio

from inproc import served
from processes import free_port

from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_queue_core.server import create_app
from loam_sweeper import SweeperService

NS = "acme"
SEC = 1_000_000_000


async def test_a_reclaim_wakes_a_lease_parked_on_the_owning_core(store, clock, core, configure):
    await configure("q", visibility_ns=5 * SEC)
    async with served(create_app(core, internal_token="s3cret")) as core_url:
        await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"))
        (lost,) = await core.jobs.lease(NS, ["q"], "w1")
        clock.advance(6 * SEC)  # w1's lease ran out
        parked = asyncio.create_task(core.jobs.lease(NS, ["q"], "w2", wait_ns=20 * SEC))
        await asyncio.sleep(0.05)
        assert not parked.done()

        other = f"http://127.0.0.1:{free_port()}"  # a second core that does not own "q"
        cores = [f"{core_url}/", other]
        from loam_common import rendezvous

        if rendezvous.queue_owner(NS, "q", [c.rstrip("/") for c in cores]) == other:
            cores = cores[:1]
        wrong = SweeperService(store, None, "sweeper-x", cores, internal_token="nope")
        good = SweeperService(store, None, "sweeper-a", cores, internal_token="s3cret")
        rep = await good.run_once()
        assert rep.stalled == 1 and good.wakes_sent == 1 and good.wakes_failed == 0
        (job,) = await asyncio.wait_for(parked, 2)
        assert job.id == lost.id and job.stalled == 1

        # A wrong token is refused by the core; the sweeper logs it and carries on.
        await wrong._post_wake(cores[0].rstrip("/"), NS, "q")
        assert wrong.wakes_failed == 1
