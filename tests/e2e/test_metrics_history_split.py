"""The metrics history has wait and run time percentiles in a split deployment too: two
queue-core processes and a gateway process apart, on one SQLite file, over real HTTP.
Each core writes what it observed into the store's per-queue histograms; the gateway's
sampler reads them there. Two queues, each owned by a different core, get their jobs
leased and completed through the gateway (each by its owner); one of them also has jobs
leased at the other core and completed at its owner, so its histograms hold the
observations of both cores, added up."""

from __future__ import annotations

import asyncio
import json
import secrets
import time

import httpx
from processes import Proc, free_port, service_env

from loam_common import keys, rendezvous
from loam_common.connect_client import jobs_client
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.store.runner import open_store

NS = "split-history"
RUN_S = 0.06  # each job "runs" at least this long
WAIT_S = 60  # for the samplers' ticks, seen from outside, on a loaded machine


def owned_queues(cores: list[str]) -> list[str]:
    """One queue name owned by each core (rendezvous hashing, as the gateway routes)."""
    picked: dict[str, str] = {}
    for i in range(1000):
        name = f"q{i}"
        picked.setdefault(rendezvous.queue_owner(NS, name, cores), name)
        if len(picked) == len(cores):
            return [picked[c] for c in cores]
    raise AssertionError("no queue for every core")


async def run_jobs(client, headers: dict[str, str], queue: str, n: int, complete_client=None) -> None:
    """Lease `n` waiting jobs of `queue` through `client`, let them run RUN_S, and complete
    them through `complete_client` (default the same)."""
    got: list[J.Lease] = []
    while len(got) < n:
        resp = await client.lease(
            J.LeaseRequest(queues=[queue], worker="w", max=n - len(got), wait_ns=5 * 10**9), headers=headers
        )
        got += resp.leases
    await asyncio.sleep(RUN_S)
    for lease in got:
        req = J.CompleteRequest(token=lease.token, outcome=J.Outcome(ok=J.Outcome.Ok()))
        await (complete_client or client).complete(req, headers=headers)


async def stored_counts(url: str, queue: str) -> tuple[int, int]:
    """(waits, runs) observed for `queue`, as the store's histograms hold them."""
    store = open_store(url)
    try:
        raw = await store.snapshot(lambda tx: tx.get(keys.metrics_histograms(NS, queue)))
    finally:
        await store.close()
    if raw is None:
        return 0, 0
    hist = json.loads(raw)
    return sum(n for _, n in hist["wait"]), sum(n for _, n in hist["run"])


async def test_the_history_of_a_split_deployment_has_the_percentiles(tmp_path):
    url = f"sqlite:///{tmp_path / 'loam.db'}"
    logs = tmp_path / "logs"
    logs.mkdir()
    token = secrets.token_hex(16)
    env = service_env(LOAM_INTERNAL_TOKEN=token)
    ports = [free_port(), free_port()]
    core_urls = [f"http://127.0.0.1:{p}" for p in ports]
    gw_port = free_port()
    gw_url = f"http://127.0.0.1:{gw_port}"
    cores = [
        Proc(
            f"queue-core-{i}",
            ["loam_queue_core.server", "--store", url, "--port", str(port), "--histogram-flush", "0.2"],
            env,
            logs,
        )  # fmt: skip
        for i, port in enumerate(ports)
    ]
    gateway = Proc("gateway", ["loam_gateway", "--queue-cores", ",".join(core_urls), "--store", url,
                               "--port", str(gw_port), "--metrics-interval", "0.3"], env, logs)  # fmt: skip
    procs = [*cores, gateway]
    for p in procs:
        p.start()
    clients = []
    try:
        for p in procs:
            await p.wait_ready()
        qa, qb = owned_queues(core_urls)  # qa is core 0's, qb core 1's
        dev = {"x-loam-namespace": NS}
        internal = {"x-loam-namespace": NS, "x-loam-internal-token": token}
        async with httpx.AsyncClient(base_url=gw_url, headers=dev, timeout=30) as rest:
            for queue, n in ((qa, 6), (qb, 4)):
                for i in range(n):
                    r = await rest.post(f"/v1/queues/{queue}/jobs", json={"name": "t", "data": {"i": i}})
                    assert r.status_code == 200, r.text
            via_gateway = jobs_client(gw_url, timeout_ms=30_000)
            core_a, core_b = (jobs_client(u, timeout_ms=30_000) for u in core_urls)
            clients += [via_gateway, core_a, core_b]
            await run_jobs(via_gateway, dev, qa, 4)  # at qa's owner, core 0
            await run_jobs(via_gateway, dev, qb, 4)  # at qb's owner, core 1
            # two of qa's jobs leased at core 1 (waits observed there), completed at core 0
            await run_jobs(core_b, internal, qa, 2, complete_client=core_a)

            def history(queue: str) -> list[dict]:
                r = httpx.get(f"{gw_url}/v1/queues/{queue}/metrics?range=1h", headers=dev, timeout=10)
                assert r.status_code == 200, r.text
                return r.json()["points"]

            async def charted(queue: str, jobs: int) -> list[dict]:
                """Until the history holds every job's completion and some wait and run times
                (in one step or in two: a flush can fall between a lease and its completion)."""
                deadline = time.monotonic() + WAIT_S
                while True:
                    points = await asyncio.to_thread(history, queue)
                    timed = [p for p in points if p["run_p50_s"] is not None or p["wait_p50_s"] is not None]
                    runs = any(p["run_p50_s"] is not None for p in timed)
                    waits = any(p["wait_p50_s"] is not None for p in timed)
                    if sum(p["completed"] for p in points) >= jobs and runs and waits:
                        return timed
                    assert time.monotonic() < deadline, f"{queue}: no percentiles after {WAIT_S}s: {points}"
                    await asyncio.sleep(0.1)

            for queue, jobs in ((qa, 6), (qb, 4)):
                timed = await charted(queue, jobs)
                for p in timed:  # every job ran at least RUN_S: its bucket starts at 0.05 s
                    if p["run_p50_s"] is not None:
                        assert p["run_p50_s"] >= 0.05 and p["run_p99_s"] >= p["run_p95_s"] >= p["run_p50_s"]
                    if p["wait_p50_s"] is not None:
                        assert p["wait_p99_s"] >= p["wait_p95_s"] >= p["wait_p50_s"] >= 0

        # what each core observed, added up per queue in the store: qa's from both cores
        deadline = time.monotonic() + WAIT_S
        while (counts := await stored_counts(url, qa)) != (6, 6):
            assert time.monotonic() < deadline, f"{qa}: the store holds {counts} observations, not (6, 6)"
            await asyncio.sleep(0.1)
        assert await stored_counts(url, qb) == (4, 4)
    finally:
        for c in clients:
            await c.close()
        codes = {p.name: p.term() for p in procs}
    assert codes == {"queue-core-0": 0, "queue-core-1": 0, "gateway": 0}, "\n".join(p.tail() for p in procs)
