"""One chaos run on the split deployment: the workload of workload.py for `load_s`
seconds while faults hit the processes, then a drain, then the checker. Used by the
bounded test (test_chaos.py) and the soak (`make test-chaos`, soak.py).

Two queues: `work` (2 shards, subjects, many workers: no order promised but per subject,
and the run producer's subjects leased as subject batches too) and `fifo` (1
shard, one priority, no retries or delays: lease order is enqueue order, which the
checker holds it to)."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from checker import Report, check, read_final_state
from cluster import MINUTE, SplitDeployment
from history import History
from workload import Workload

from loam_common import keys
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S
from loam_common.store.runner import open_store

NS, QUEUE, SHARDS = "chaos", "work", 2
FIFO_QUEUE = "fifo"
QUEUES = {QUEUE: SHARDS, FIFO_QUEUE: 1}
#: how far the server clock may wander from the wall clock, either way
CLOCK_SPAN_NS = 5 * MINUTE
#: the steps of each durable workflow (durable_steps_worker.py: chain)
DURABLE_STEPS = 3


@dataclass
class RunResult:
    history: History
    report: Report
    usage: dict[str, list[tuple[float, int, int]]] = field(default_factory=dict)  # name -> (t, rss KiB, fds)
    exit_codes: dict = field(default_factory=dict)
    #: the latest time a job record was written, less the wall clock when it was read:
    #: about the server clock's final offset when the processes honoured the jumps
    server_clock_lead_ns: int = 0


async def faults(cluster: SplitDeployment, history: History, rng: random.Random, load_s: float,
                 every_s: float) -> None:  # fmt: skip
    """Faults at random points, every `every_s` on average, until `load_s` is over and
    every kind has happened once: kill -9 (and restart) of a process, SIGSTOP of one
    longer than a lease (then SIGCONT), and a jump of the server clock by 1-4 minutes
    forward or back (kept within CLOCK_SPAN_NS of the wall clock)."""
    t_end = time.monotonic() + load_s - 2
    pause_s = cluster.visibility_ns / 1e9 + 1.5
    kinds = [("kill9", p) for p in [*cluster.procs, cluster.durable_worker]]
    kinds += [("stop", cluster.core), ("stop", cluster.sweeper), ("stop", cluster.gateway)]
    kinds += [("clock-forward", None), ("clock-back", None)]
    order = kinds[:]  # every kind once first, in a random order, then at random
    rng.shuffle(order)
    while order or time.monotonic() < t_end:  # every kind at least once, however short the run
        await asyncio.sleep(rng.uniform(0.3, 1.7) * every_s)
        if not order and time.monotonic() >= t_end:
            break
        kind, proc = order.pop() if order else rng.choice(kinds)
        if proc is None:
            jump = rng.randrange(1 * MINUTE, 4 * MINUTE)
            if kind == "clock-back":
                jump = -jump
            if abs(cluster.clock_offset_ns + jump) > CLOCK_SPAN_NS:
                jump, kind = -jump, ("clock-back" if kind == "clock-forward" else "clock-forward")
            history.faults[kind] += 1
            cluster.jump_clock(jump)
            continue
        history.faults[f"{kind}:{proc.name}"] += 1
        if kind == "kill9":
            proc.kill9()
            await asyncio.sleep(rng.uniform(0.1, 1.0))
            proc.start()
            await proc.wait_ready()
        else:
            proc.signal(signal.SIGSTOP)
            await asyncio.sleep(pause_s)
            proc.signal(signal.SIGCONT)
    # A lease's deadline is judged by the clock that set it: one taken while the clock
    # was ahead stays held after a jump back until the clock catches up with it. The
    # drain cannot wait minutes for that, so the run ends with one more jump forward, to
    # a minute past the furthest the clock went ahead.
    history.faults["clock-forward"] += 1
    cluster.jump_clock(cluster.max_clock_offset_ns + MINUTE - cluster.clock_offset_ns)
    # The load goes on for a moment on that clock (each process reads the jump within
    # 50 ms), so the run's last writes carry it: the test checks they do.
    await asyncio.sleep(1.0)


def _durable_promise(tx, ns: str, promise_id: str) -> dict | None:
    raw = tx.get(keys.durable_promise(ns, promise_id))
    return json.loads(raw) if raw is not None else None


def _durable_settled(promise: dict | None) -> bool:
    return promise is not None and promise.get("state") != "pending"


def _durable_promises(tx, ns: str) -> dict[str, dict]:
    p = keys.durable_promises(ns)
    return {(d := json.loads(v))["id"]: d for _k, v in tx.scan(p, keys.prefix_end(p))}


def _heads(tx, queue: str = QUEUE) -> dict[int, int]:
    k = keys.QueueKeys(NS, queue)
    out = {}
    for shard in range(QUEUES[queue]):
        raw = tx.get(k.shard_meta(shard))
        out[shard] = pb.ShardMeta.FromString(raw).outbox_seq if raw else 0
    return out


def _settled(tx, ids: list[tuple[str, str]]) -> set[tuple[str, str]]:
    """Which of the (queue, job) pairs are completed."""
    wanted = {keys.QueueKeys(NS, q).job(j): (q, j) for q, j in ids}
    found = tx.batch_get(list(wanted))
    return {wanted[k] for k, raw in found.items() if pb.Job.FromString(raw).state == S.COMPLETED}


async def chaos_run(data: Path, load_s: float, seed: int, *, every_s: float = 3.0, drain_s: float = 90.0,
                    sample_s: float = 0.0, durable_every_s: float = 1.0) -> RunResult:  # fmt: skip
    cluster = SplitDeployment(data)
    store = open_store(cluster.url)
    for queue, shards in QUEUES.items():
        await cluster.configure(store, NS, queue, shards)
    history = History()
    rng = random.Random(seed)
    work = Workload(cluster.gateway_url, NS, QUEUE, history, seed, fifo_queue=FIFO_QUEUE)
    result = RunResult(history, Report())
    tasks: list[asyncio.Task] = []
    try:
        await cluster.start()
        ready = asyncio.Event()
        watcher = asyncio.create_task(work.watcher(ready, lambda: store.snapshot(_heads)))
        await asyncio.wait_for(ready.wait(), 30)
        producers = [asyncio.create_task(work.producer(i)) for i in range(3)]
        producers += [asyncio.create_task(work.run_producer()),
                      asyncio.create_task(work.batch_stalling_worker(cluster.visibility_ns / 1e9 + 1.0))]  # fmt: skip
        producers += [asyncio.create_task(work.fifo_producer()), asyncio.create_task(work.vandal()),
                      asyncio.create_task(work.stalling_worker(cluster.visibility_ns / 1e9 + 1.0)),
                      asyncio.create_task(work.durable_starter(cluster.durable_url, cluster.durable_group,
                                                               DURABLE_STEPS, durable_every_s))]  # fmt: skip
        tasks = [*producers, *(asyncio.create_task(work.worker(i)) for i in range(4))]
        tasks += [asyncio.create_task(work.batch_worker(i)) for i in range(2)]
        tasks.append(asyncio.create_task(work.fifo_worker()))
        sampler = asyncio.create_task(_sample(cluster, result, sample_s)) if sample_s else None
        await faults(cluster, history, rng, load_s, every_s)
        work.stop_producing.set()
        # every call the producers made has its answer before the drain takes their list
        await asyncio.wait_for(asyncio.gather(*producers), 60)

        # Drain: every acknowledged job completed, then the Watch catches up to the heads.
        deadline = time.monotonic() + drain_s
        pending = list(dict.fromkeys((o.args["queue"], o.value) for o in history.of("enqueue", "ok")))
        roots = list(dict.fromkeys(o.value for o in history.of("durable-start", "ok")))
        while (pending or roots) and time.monotonic() < deadline:
            done = await store.snapshot(_settled, pending)
            pending = [i for i in pending if i not in done]
            roots = [
                r
                for r in roots
                if not _durable_settled(await store.snapshot(_durable_promise, cluster.durable_ns, r))
            ]
            if pending or roots:
                await asyncio.sleep(0.25)
        work.stop_working.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        await asyncio.sleep(1.0)  # the relay's last batch
        work.stop_watching.set()
        try:
            await asyncio.wait_for(watcher, 60)
        except TimeoutError:
            pass  # the checker reports what the Watch missed
        if sampler is not None:
            sampler.cancel()
        finals = {q: await store.snapshot(read_final_state, NS, q) for q in QUEUES}
        promises = await store.snapshot(_durable_promises, cluster.durable_ns)
        runs = [json.loads(line) for line in cluster.durable_runs.read_text().splitlines()] \
            if cluster.durable_runs.exists() else []  # fmt: skip
        result.report = check(history, finals, watched=QUEUE, fifo=FIFO_QUEUE, durable=(promises, runs))
        latest = max((j.state_ns for f in finals.values() for j in f.jobs.values()), default=0)
        result.server_clock_lead_ns = latest - time.time_ns()
    except BaseException:
        print(cluster.tails())
        raise
    finally:
        work.stop_producing.set()
        work.stop_working.set()
        work.stop_watching.set()
        for t in tasks:
            t.cancel()
        await work.close()
        result.exit_codes = cluster.stop()
        await store.close()
        history.dump(data / "history.jsonl")
    return result


async def _sample(cluster: SplitDeployment, result: RunResult, every_s: float) -> None:
    t0 = time.monotonic()
    while True:
        for p in [*cluster.procs, cluster.durable_worker]:
            try:
                rss, fds = p.usage()
            except (OSError, StopIteration):
                continue  # between a kill and its restart
            result.usage.setdefault(p.name, []).append((time.monotonic() - t0, rss, fds))
        await asyncio.sleep(every_s)
