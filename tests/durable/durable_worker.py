"""A Resonate worker process (the stock Python SDK) for the durable tests, against the
Loam server at `--url`. Each step body appends its name to `--counts` (one line per
run, flushed and fsynced) so a test can tell how often every step really ran.

    python durable_worker.py --url http://127.0.0.1:PORT/resonate --group workers \\
        --counts /tmp/counts [--die-in step2] [--ttl 3]

`--die-in NAME`: the step NAME records its run, then the process dies at once
(`os._exit`, as a kill -9 would: no release, no goodbye) — the resume tests.
Prints "worker ready" once connected.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from datetime import timedelta
from pathlib import Path

from resonate.resonate import Resonate
from resonate.retry import Never

ARGS: argparse.Namespace


def record(name: str) -> None:
    with open(ARGS.counts, "a") as f:
        f.write(name + "\n")
        f.flush()
        os.fsync(f.fileno())
    if ARGS.die_in == name:
        os._exit(9)


async def step(ctx, name: str, value: str) -> str:
    record(name)
    return f"{value}+{name}"


async def forever(ctx) -> None:
    record("forever")
    await asyncio.sleep(3600)


def build(url: str, group: str, ttl: float) -> Resonate:
    resonate = Resonate(url=url, group=group, ttl=timedelta(seconds=ttl), retry_policy=Never())

    @resonate.register
    async def wf(ctx, x: str) -> str:
        a = await ctx.run(step, "step1", x)
        b = await ctx.run(step, "step2", a)
        return await ctx.run(step, "step3", b)

    @resonate.register
    async def parent(ctx, x: str) -> str:
        record("parent-body")
        child = await ctx.options(target="other").rpc("child", x)
        mine = await ctx.run(step, "parent-step", x)
        return f"{child}|{mine}"

    @resonate.register
    async def child(ctx, x: str) -> str:
        record(f"child@{group}")
        return f"child({x})"

    @resonate.register
    async def sleeper(ctx, seconds: float) -> str:
        record("sleeper-body")
        await ctx.run(step, "before", "s")
        await ctx.sleep(timedelta(seconds=seconds))
        await ctx.run(step, "after", "s")
        return "slept"

    @resonate.register
    async def ticked(ctx) -> str:
        record("tick")
        return "ticked"

    @resonate.register
    async def billed(ctx, customer: str, amount: int = 0) -> str:  # a Loam schedule's target
        await ctx.run(step, f"bill:{customer}:{amount}", customer)
        return f"billed {customer}"

    @resonate.register
    async def hangs(ctx) -> str:
        await ctx.run(forever)
        return "never"

    @resonate.register
    async def approval(ctx) -> str:
        p = ctx.promise()
        promise_id = await p.id()
        Path(ARGS.counts + ".external").write_text(promise_id)
        record("approval-body")
        answer = await p
        return f"approved:{answer}"

    return resonate


async def main() -> None:
    resonate = build(ARGS.url, ARGS.group, ARGS.ttl)
    await asyncio.sleep(0.5)  # the SSE stream connects in the background
    print("worker ready", flush=True)
    await asyncio.Event().wait()
    await resonate.stop()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--group", default="workers")
    p.add_argument("--counts", required=True)
    p.add_argument("--die-in", default="")
    p.add_argument("--ttl", type=float, default=3.0)
    ARGS = p.parse_args()
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
