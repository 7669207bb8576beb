"""One chaos run on the split deployment: the workload of workload.py for `load_s`
seconds while faults hit the processes, then a drain, then the checker. Used by the
bounded test (test_chaos.py) and the soak (`make test-chaos`, soak.py)."""

from __future__ import annotations

import asyncio
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from checker import Report, check, read_final_state
from cluster import SplitDeployment
from history import History
from workload import Workload

from loam_common import keys
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S
from loam_common.store.runner import open_store

NS, QUEUE, SHARDS = "chaos", "work", 2


@dataclass
class RunResult:
    history: History
    report: Report
    usage: dict[str, list[tuple[float, int, int]]] = field(default_factory=dict)  # name -> (t, rss KiB, fds)
    exit_codes: dict = field(default_factory=dict)


async def faults(cluster: SplitDeployment, history: History, rng: random.Random, load_s: float,
                 every_s: float) -> None:  # fmt: skip
    """kill -9 (and restart) or SIGSTOP (longer than a lease, then SIGCONT) a random
    process at random points, every `every_s` on average, until `load_s` is over and
    every kind has happened once."""
    t_end = time.monotonic() + load_s - 2
    pause_s = cluster.visibility_ns / 1e9 + 1.5
    kinds = [("kill9", p) for p in cluster.procs] + [("stop", cluster.core), ("stop", cluster.sweeper),
                                                     ("stop", cluster.gateway)]  # fmt: skip
    order = kinds[:]  # every kind once first, in a random order, then at random
    rng.shuffle(order)
    while order or time.monotonic() < t_end:  # every kind at least once, however short the run
        await asyncio.sleep(rng.uniform(0.3, 1.7) * every_s)
        if not order and time.monotonic() >= t_end:
            return
        kind, proc = order.pop() if order else rng.choice(kinds)
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


def _heads(tx) -> dict[int, int]:
    k = keys.QueueKeys(NS, QUEUE)
    out = {}
    for shard in range(SHARDS):
        raw = tx.get(k.shard_meta(shard))
        out[shard] = pb.ShardMeta.FromString(raw).outbox_seq if raw else 0
    return out


def _settled(tx, ids: list[str]) -> set[str]:
    k = keys.QueueKeys(NS, QUEUE)
    found = tx.batch_get([k.job(i) for i in ids])
    return {i for i in ids if (raw := found.get(k.job(i))) and pb.Job.FromString(raw).state == S.COMPLETED}


async def chaos_run(data: Path, load_s: float, seed: int, *, every_s: float = 3.0, drain_s: float = 90.0,
                    sample_s: float = 0.0) -> RunResult:  # fmt: skip
    cluster = SplitDeployment(data)
    store = open_store(cluster.url)
    await cluster.configure(store, NS, QUEUE, SHARDS)
    history = History()
    rng = random.Random(seed)
    work = Workload(cluster.gateway_url, NS, QUEUE, history, seed)
    result = RunResult(history, Report())
    tasks: list[asyncio.Task] = []
    try:
        await cluster.start()
        ready = asyncio.Event()
        watcher = asyncio.create_task(work.watcher(ready, lambda: store.snapshot(_heads)))
        await asyncio.wait_for(ready.wait(), 30)
        tasks = [asyncio.create_task(work.producer(i)) for i in range(3)]
        tasks += [asyncio.create_task(work.worker(i)) for i in range(4)]
        tasks += [asyncio.create_task(work.stalling_worker(cluster.visibility_ns / 1e9 + 1.0)),
                  asyncio.create_task(work.vandal())]  # fmt: skip
        sampler = asyncio.create_task(_sample(cluster, result, sample_s)) if sample_s else None
        await faults(cluster, history, rng, load_s, every_s)
        work.stop_producing.set()

        # Drain: every acknowledged job completed, then the Watch catches up to the heads.
        deadline = time.monotonic() + drain_s
        pending = list(dict.fromkeys(o.value for o in history.of("enqueue", "ok")))
        while pending and time.monotonic() < deadline:
            done = await store.snapshot(_settled, pending)
            pending = [i for i in pending if i not in done]
            if pending:
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
        final = await store.snapshot(read_final_state, NS, QUEUE)
        result.report = check(history, final)
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
        for p in cluster.procs:
            try:
                rss, fds = p.usage()
            except (OSError, StopIteration):
                continue  # between a kill and its restart
            result.usage.setdefault(p.name, []).append((time.monotonic() - t0, rss, fds))
        await asyncio.sleep(every_s)
