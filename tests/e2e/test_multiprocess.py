"""Multi-process: gateway, queue core, sweeper and relay as separate OS processes on one
SQLite file, under a steady load of producers and workers (the generated Connect
client through the gateway). Mid-load the queue core is killed with SIGKILL twice,
the sweeper once (and restarted under a new id, so its shards move only once its
leases expire), and the relay once. A "dead worker" leases jobs and drops them just
before the sweeper dies, so their reclaim needs the replacement sweeper; it tries to
complete them late, and must be fenced.

Verified on the store's final state: every acknowledged job is completed; each job
has exactly one `completed` event in the event log and no outbox row is left behind;
each shard's event log is the gap-free sequence 1..outbox_seq; no worker got two
successful completions for one job; every late completion was refused.
"""

from __future__ import annotations

import asyncio
import collections
import random
import secrets
import time

import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from processes import Proc, free_port, service_env

from loam_common import keys
from loam_common.connect_client import jobs_client
from loam_common.gen.loam.jobs.v1 import events_pb2
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.gen.loam.jobs.v1.jobs_connect import JobsServiceClient
from loam_common.jobs import states as S
from loam_common.jobs.queue import QueueTx
from loam_common.store.runner import open_store

NS = "e2e"
QUEUE = "work"
SHARDS = 2
SEC = 1_000_000_000
HEADERS = {"x-loam-namespace": NS}
RETRYABLE = {
    Code.UNAVAILABLE,
    Code.DEADLINE_EXCEEDED,
    Code.UNKNOWN,
    Code.INTERNAL,
    Code.CANCELED,
    Code.ABORTED,
}

LOAD_S = 11.0  # producers stop after this
DRAIN_S = 35.0  # every acknowledged job must be completed within this after that


def _configure(tx) -> None:
    with QueueTx(tx, NS, QUEUE) as qt:
        qt.cfg.shards = SHARDS
        qt.cfg.visibility_ns = 2 * SEC  # lost leases come back quickly
        qt.cfg.max_stalled = -1  # a job may stall more than once here (kills); never fail it for that
        qt.ensure_exists()
        qt.save_config()


def _final_state(
    tx,
) -> tuple[dict[str, pb.Job], list[events_pb2.JobEvent], list[events_pb2.JobEvent], dict[int, int]]:
    k = keys.QueueKeys(NS, QUEUE)
    jobs = {}
    for _k, v in tx.scan(k.jobs(), keys.prefix_end(k.jobs())):
        j = pb.Job.FromString(v)
        jobs[j.id] = j
    log, outbox, heads = [], [], {}
    for shard in range(SHARDS):
        p = k.event_log_shard(shard)
        log += [events_pb2.JobEvent.FromString(v) for _k, v in tx.scan(p, keys.prefix_end(p))]
        p = k.outbox_shard(shard)
        outbox += [events_pb2.JobEvent.FromString(v) for _k, v in tx.scan(p, keys.prefix_end(p))]
        raw = tx.get(k.shard_meta(shard))
        heads[shard] = pb.ShardMeta.FromString(raw).outbox_seq if raw else 0
    return jobs, log, outbox, heads


def _completed_ids(tx, ids: list[str]) -> set[str]:
    k = keys.QueueKeys(NS, QUEUE)
    found = tx.batch_get([k.job(i) for i in ids])
    return {
        i
        for i in ids
        if (raw := found.get(k.job(i))) is not None and pb.Job.FromString(raw).state == S.COMPLETED
    }


def _outbox_empty(tx) -> bool:
    k = keys.QueueKeys(NS, QUEUE)
    return not tx.scan(k.outboxes(), keys.prefix_end(k.outboxes()), limit=1)


async def test_every_acknowledged_job_completes_once_across_kill_9(tmp_path):
    db = tmp_path / "loam.db"
    url = f"sqlite:///{db}"
    logs = tmp_path / "logs"
    logs.mkdir()
    core_port, gw_port = free_port(), free_port()
    core_url, gw_url = f"http://127.0.0.1:{core_port}", f"http://127.0.0.1:{gw_port}"
    env = service_env(LOAM_INTERNAL_TOKEN=secrets.token_hex(16))

    store = open_store(url)
    await store.transact(_configure)

    core = Proc("queue-core", ["loam_queue_core.server", "--store", url, "--port", str(core_port)], env, logs)
    gateway = Proc(
        "gateway",
        ["loam_gateway", "--queue-cores", core_url, "--store", url, "--port", str(gw_port)],
        env,
        logs,
    )
    sweeper_args = ["loam_sweeper", "--store", url, "--blobs", str(tmp_path / "blobs"), "--queue-cores", core_url,
                    "--interval", "0.2", "--lease-ttl", "2"]  # fmt: skip
    sweeper = Proc("sweeper", [*sweeper_args, "--id", "sweeper-a"], env, logs)
    relay = Proc("relay", ["loam_relay", "--store", url, "--id", "relay-a", "--interval", "0.1"], env, logs)
    procs = [core, gateway, sweeper, relay]
    for p in procs:
        p.start()
    clients: list[JobsServiceClient] = []

    def client() -> JobsServiceClient:
        c = jobs_client(gw_url, timeout_ms=10_000)
        clients.append(c)
        return c

    acked: list[str] = []
    completions_ok: collections.Counter[str] = collections.Counter()
    refused: collections.Counter[str] = collections.Counter()
    errors: collections.Counter[str] = collections.Counter()
    stop_producing = asyncio.Event()
    stop_working = asyncio.Event()

    async def producer(i: int) -> None:
        c = client()
        n = 0
        while not stop_producing.is_set():
            n += 1
            req = J.EnqueueRequest(
                queue=QUEUE, task=pb.TaskSpec(name="noop", payload=pb.Payload(data=b"%d-%d" % (i, n)))
            )
            try:
                resp = await c.enqueue(req, headers=HEADERS)
                acked.append(resp.enqueued.job)
            except ConnectError as e:
                errors[f"enqueue:{e.code.name}"] += 1
                assert e.code in RETRYABLE, e
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.01)

    async def complete(c: JobsServiceClient, lease: J.Lease, *, retry_s: float = 15.0) -> bool:
        req = J.CompleteRequest(token=lease.token, outcome=J.Outcome(ok=J.Outcome.Ok()))
        deadline = time.monotonic() + retry_s
        while True:
            try:
                await c.complete(req, headers=HEADERS)
                completions_ok[lease.token.job] += 1
                return True
            except ConnectError as e:
                errors[f"complete:{e.code.name}"] += 1
                if e.code in RETRYABLE and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
                    continue
                # Fenced (reclaimed and leased again), or already completed by a retry whose
                # first answer was lost: this worker's outcome is not the recorded one.
                refused[lease.token.job] += 1
                return False

    async def worker(i: int) -> None:
        c = client()
        while not stop_working.is_set():
            try:
                resp = await c.lease(
                    J.LeaseRequest(queues=[QUEUE], worker=f"w{i}", max=8, wait_ns=SEC // 2), headers=HEADERS
                )
            except ConnectError as e:
                errors[f"lease:{e.code.name}"] += 1
                assert e.code in RETRYABLE, e
                await asyncio.sleep(0.05)
                continue
            for lease in resp.leases:
                await asyncio.sleep(random.random() * 0.003)  # the "work"
                await complete(c, lease)

    dropped: list[J.Lease] = []

    async def dead_worker() -> None:
        """Leases a few jobs and walks away; comes back late to complete them."""
        c = client()
        while len(dropped) < 5:
            try:
                # A long poll, like the other workers: an enqueue hands its job to the
                # poll that has waited longest, so a poll that never waits gets little.
                resp = await c.lease(
                    J.LeaseRequest(queues=[QUEUE], worker="dead", max=5 - len(dropped), wait_ns=SEC // 2),
                    headers=HEADERS,
                )
                dropped.extend(resp.leases)
            except ConnectError:
                await asyncio.sleep(0.05)

    try:
        await asyncio.gather(*(p.wait_ready() for p in procs))
        t0 = time.monotonic()

        async def at(t: float) -> None:
            await asyncio.sleep(max(0.0, t0 + t - time.monotonic()))

        tasks = [asyncio.create_task(producer(i)) for i in range(3)]
        tasks += [asyncio.create_task(worker(i)) for i in range(4)]

        await at(2.5)
        await dead_worker()  # leases due at ~4.5 s; sweeper-a dies before then
        await at(3.0)
        core.kill9()
        await at(3.5)
        sweeper.kill9()
        await at(4.0)
        core.start()
        await core.wait_ready()
        await at(5.0)
        sweeper.start([*sweeper_args, "--id", "sweeper-b"])  # takes over once sweeper-a's leases expire
        await sweeper.wait_ready()
        await at(6.5)
        relay.kill9()
        await at(7.0)
        relay.start()
        await relay.wait_ready()
        await at(8.0)
        core.kill9()
        await at(8.5)
        core.start()
        await core.wait_ready()
        await at(LOAD_S)
        stop_producing.set()

        # The dead worker comes back: its jobs were reclaimed (epoch + 1), so it is fenced.
        c = client()
        late = [await complete(c, lease, retry_s=5.0) for lease in dropped]
        assert len(dropped) == 5 and late == [False] * 5, (late, dict(errors))

        # Drain: every acknowledged job completed (and no outbox row left to relay).
        deadline = time.monotonic() + DRAIN_S
        pending = list(dict.fromkeys(acked))
        while pending and time.monotonic() < deadline:
            done = await store.snapshot(_completed_ids, pending)
            pending = [i for i in pending if i not in done]
            if pending:
                await asyncio.sleep(0.25)
        assert not pending, f"{len(pending)} acknowledged jobs not completed, e.g. {pending[:5]}"
        stop_working.set()
        while not await store.snapshot(_outbox_empty) and time.monotonic() < deadline + 5:
            await asyncio.sleep(0.1)
        await asyncio.wait_for(asyncio.gather(*tasks), 20)

        jobs, log, outbox, heads = await store.snapshot(_final_state)
        assert outbox == [], f"relay left {len(outbox)} outbox rows"
        # The event log per shard is exactly 1..outbox_seq: nothing lost, nothing twice.
        for shard in range(SHARDS):
            seqs = [e.seq for e in log if e.shard == shard]
            assert seqs == list(range(1, heads[shard] + 1)), (
                f"shard {shard}: seqs {seqs[:5]}... head {heads[shard]}"
            )
        completed_events = collections.Counter(e.job_id for e in log if e.event == "completed")
        acked_set = set(acked)
        assert len(acked_set) == len(acked) > 300, len(acked)
        for job_id in acked_set:
            assert jobs[job_id].state == S.COMPLETED, (job_id, S.name(jobs[job_id].state))
            assert completed_events[job_id] == 1, (job_id, completed_events[job_id])
        # Jobs whose enqueue answer was lost in a kill may exist too: at most one outcome each.
        assert all(n == 1 for n in completed_events.values())
        assert all(completed_events[j] == 1 for j, job in jobs.items() if job.state == S.COMPLETED)
        assert max(completions_ok.values()) == 1  # no worker was told twice that a job completed
        # The kills happened and were survived: failed calls, stalled reclaims by sweeper-b.
        assert errors, "no call failed: were the kills effective?"
        stalled = {e.job_id for e in log if e.event == "stalled"}
        assert {lease.token.job for lease in dropped} <= stalled
        print(
            f"acked {len(acked)}, stalled {len(stalled)}, refused {sum(refused.values())}, errors {dict(errors)}"
        )
        owners = await store.snapshot(
            lambda tx: {v for k, v in tx.scan(b"sys/own/sweeper/", b"sys/own/sweeper0")}
        )
        assert all(pb.OwnershipLease.FromString(v).owner in ("sweeper-b", "") for v in owners)
    except BaseException:
        print("errors:", dict(errors))
        for p in procs:
            print(p.tail())
        raise
    finally:
        stop_producing.set()
        stop_working.set()
        for c in clients:
            try:
                await c.close()
            except Exception:
                pass
        codes = {p.name: p.term() for p in reversed(procs)}
        await store.close()
    assert codes == {"queue-core": 0, "gateway": 0, "sweeper": 0, "relay": 0}, codes


pytestmark = pytest.mark.timeout(120)
