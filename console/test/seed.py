"""Real jobs for the console's browser tests, made the way users make them: tokens on the
store (as `loam tokens create` does), then the Python SDK against the running server.

    seed.py tokens <data-dir>          -> {"admin_a", "viewer_a", "admin_b"} as JSON
    seed.py jobs <url> <token> <queue-prefix> -> the ids of the jobs it made, as JSON
    seed.py work <url> <token> <queue> <ok> <failed> -> jobs run by a worker: {"ok", "failed"}
    seed.py bulk <url> <token> <queue> <n>  -> n jobs by bulk enqueue: {"first", "middle", "last"}

`jobs` makes, in `<prefix>emails`: waiting jobs, a prioritized one, a delayed one, a
completed one with a result, progress and logs, a failed one (two attempts, each with
its error and stack trace); in `<prefix>orders` (dead letters to `<prefix>orders-dlq`) a
job failed into the dead-letter queue; and an hourly schedule.
"""

from __future__ import annotations

import asyncio
import json
import sys

from loam import Client, Outcome
from loam_common import auth
from loam_common.store.runner import open_store, store_url_of


async def tokens(data: str) -> dict[str, str]:
    store = open_store(store_url_of(data))  # the data directory's store, as `loam dev` opens it
    try:
        out = {}
        for label, ns, actions in (
            ("admin_a", "team-a", sorted(auth.ACTIONS)),
            ("viewer_a", "team-a", [auth.READ]),
            ("admin_b", "team-b", sorted(auth.ACTIONS)),
        ):
            token, _ = await store.transact(auth.token_create, ns, actions, label)
            out[label] = token
        return out
    finally:
        await store.close()


def boom(n: int) -> Exception:
    try:
        raise ValueError(f"card declined (attempt {n})")
    except ValueError as e:
        return e


async def jobs(url: str, token: str, prefix: str) -> dict[str, str]:
    emails, orders, dlq = f"{prefix}emails", f"{prefix}orders", f"{prefix}orders-dlq"
    async with Client(url, token=token) as c:
        await c.create_queue(emails, attempts=2, visibility=3600)  # worker-2 holds its job for the whole run
        await c.create_queue(dlq)
        await c.create_queue(orders, attempts=1, dead_letter_queue=dlq)
        out: dict[str, str] = {}
        # finished first: leased in order, so these are the oldest jobs
        out["completed"] = (await c.enqueue(emails, "send-welcome", {"to": "ada@example.com"})).id
        [held] = await c.lease(emails, worker="worker-1")
        await c.report(held.token, progress={"percent": 100}, log="rendered the template")
        await c.report(held.token, log="handed to the mail server")
        await c.complete(held.token, Outcome.ok({"message_id": "m-1"}))
        out["failed"] = (await c.enqueue(emails, "send-invoice", {"to": "bob@example.com", "amount": 42})).id
        for attempt in (1, 2):
            [held] = await c.lease(emails, worker="worker-1")
            await c.complete(
                held.token,
                Outcome.retry(boom(attempt), after=0) if attempt == 1 else Outcome.fail(boom(attempt)),
            )
        out["active"] = (await c.enqueue(emails, "send-digest", {"to": "cy@example.com"})).id
        [held] = await c.lease(emails, worker="worker-2", max=1)
        out["active_token_job"] = held.id
        for i in range(3):
            out[f"waiting{i}"] = (
                await c.enqueue(emails, "send-newsletter", {"to": f"user{i}@example.com"})
            ).id
        out["prioritized"] = (await c.enqueue(emails, "send-alert", {"to": "ops@example.com"}, priority=5)).id
        out["delayed"] = (await c.enqueue(emails, "send-reminder", {"to": "dee@example.com"}, delay=3600)).id
        out["dead"] = (await c.enqueue(orders, "charge", {"order": 7})).id
        [held] = await c.lease(orders, worker="worker-3")
        await c.complete(held.token, Outcome.fail(boom(1), dead_letter=True))
        await c.schedule(f"{prefix}nightly-report", emails, "build-report", {"kind": "daily"}, every=3600)
        return out


async def work(url: str, token: str, queue: str, ok: str, failed: str) -> dict[str, int]:
    """Jobs enqueued, leased and completed (or failed for good) by a worker: what the
    metrics history counts."""
    async with Client(url, token=token) as c:
        await c.create_queue(queue, attempts=1)
        n_ok, n_failed = int(ok), int(failed)
        await c.enqueue_bulk(queue, [("step", {"n": i}) for i in range(n_ok + n_failed)])
        done = 0
        while done < n_ok + n_failed:
            for held in await c.lease(queue, worker="metrics-worker", max=50):
                outcome = Outcome.ok({"n": done}) if done < n_ok else Outcome.fail(boom(done))
                await c.complete(held.token, outcome)
                done += 1
        return {"ok": n_ok, "failed": n_failed}


async def bulk(url: str, token: str, queue: str, n: str) -> dict[str, str]:
    """`n` jobs, each payload naming its number (`{"n": i, "email": "user-<i>@example.com"}`),
    through the SDK's bulk enqueue: one Connect call and one transaction per 1,000."""
    total, ids = int(n), []
    async with Client(url, token=token) as c:
        for start in range(0, total, 1000):
            items = [
                ("import", {"n": i, "email": f"user-{i}@example.com"})
                for i in range(start, min(start + 1000, total))
            ]
            got = await c.enqueue_bulk(queue, items)
            ids += [x.id for x in got]
    return {"first": ids[0], "middle": ids[total // 2], "last": ids[-1]}


def main() -> None:
    cmd, *args = sys.argv[1:]
    run = {"tokens": tokens, "jobs": jobs, "work": work, "bulk": bulk}[cmd]
    result = asyncio.run(run(*args))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
