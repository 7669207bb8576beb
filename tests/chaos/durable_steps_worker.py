"""The chaos run's durable worker: the stock Resonate Python SDK against the split
deployment's `/resonate`, running `chain(ctx, start, n)`: n steps one after another,
each fed the previous step's result.

Every run of a step appends one JSON line to `--runs` (flushed and fsynced, so a kill
-9 loses none): its promise id, the input it was given, the output it returned (with a
fresh nonce, so two runs of one step are told apart), and whether the step's own
promise was already settled on the server when the run began (`settled_before`: the
step asks the server itself, `promise.get`, before doing anything). The checker
(checker.py: check_durable) reads these lines against the promises the store ends with.

    python durable_steps_worker.py --url http://127.0.0.1:PORT/ns/NS/resonate --group G --runs FILE
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import urllib.error
import urllib.request
import uuid
from datetime import timedelta

from resonate.resonate import Resonate
from resonate.retry import Never

VERSION = "2026-04-01"
ARGS: argparse.Namespace


def promise_state(promise_id: str) -> str:
    """The promise's state on the server, or "unknown" when the server cannot say (a
    fault): asked with a raw envelope, as any client could."""
    body = json.dumps({"kind": "promise.get", "head": {"corrId": uuid.uuid4().hex, "version": VERSION},
                       "data": {"id": promise_id}}).encode()  # fmt: skip
    req = urllib.request.Request(ARGS.url.rstrip("/") + "/", data=body, method="POST",
                                 headers={"content-type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.loads(resp.read())["data"]["promise"]["state"]
    except (OSError, urllib.error.URLError, ValueError, KeyError, TypeError):
        return "unknown"


def record(line: dict) -> None:
    with open(ARGS.runs, "a") as f:
        f.write(json.dumps(line) + "\n")
        f.flush()
        os.fsync(f.fileno())


async def step(ctx, name: str, value: str) -> str:
    # The SDK has no public accessor for the id of the promise a ctx.run runs under.
    promise_id = ctx._state.id
    state = await asyncio.to_thread(promise_state, promise_id)
    out = f"{value}+{name}#{uuid.uuid4().hex[:8]}"
    record({"promise": promise_id, "input": value, "output": out, "state_at_start": state,
            "settled_before": state not in ("pending", "unknown")})  # fmt: skip
    return out


def build() -> Resonate:
    resonate = Resonate(url=ARGS.url, group=ARGS.group, ttl=timedelta(seconds=ARGS.ttl), retry_policy=Never())

    @resonate.register
    async def chain(ctx, start: str, n: int) -> str:
        value = start
        for i in range(1, n + 1):
            value = await ctx.run(step, f"s{i}", value)
        return value

    return resonate


async def main() -> None:
    resonate = build()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)  # exit 0 when told to stop
    await asyncio.sleep(0.5)  # the SSE stream connects in the background
    print("worker ready", flush=True)
    await stop.wait()
    await resonate.stop()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--runs", required=True)
    p.add_argument("--ttl", type=float, default=3.0)
    ARGS = p.parse_args()
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
