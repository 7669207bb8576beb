"""The spec's Celery example (§7.1.8), as a real app for the tests: the Celery task
`charge_task` (acks_late, on `loam://`) runs the durable function `charge` through
`loam.resonate`, with the promise id derived from the Celery task id, so a redelivered
task resumes the same execution instead of starting it again.

Each step appends its name to $DURABLE_MARKS (a side file). While the file
$DURABLE_MARKS.hold exists, `capture` blocks after recording itself: the test kills the
worker there (kill -9) and removes the file so the resumed run goes through.
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import timedelta
from pathlib import Path

from celery import Celery

import loam
import loam_celery  # noqa: F401 - registers the loam:// transport alias

URL = os.environ.get("LOAM_CELERY_URL", "loam://127.0.0.1:7720/durable-celery")
MARKS = Path(os.environ.get("DURABLE_MARKS", "/tmp/durable-marks"))

app = Celery("charge_app", broker=URL, backend=URL)
app.conf.update(
    broker_transport_options={"visibility_timeout": 3.0},
    task_serializer="json",
    accept_content=["json"],
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


def record(step: str) -> None:
    with open(MARKS, "a") as f:
        f.write(step + "\n")
        f.flush()
        os.fsync(f.fileno())


def reserve(ctx, order_id: str) -> str:
    record("reserve")
    return f"hold-{order_id}"


def capture(ctx, hold: str, idempotency_key: str) -> str:
    record("capture")
    while Path(str(MARKS) + ".hold").exists():  # the test kills the worker here
        time.sleep(0.05)
    return f"receipt-{hold}"


def send_receipt(ctx, receipt: str, idempotency_key: str) -> None:
    record("send_receipt")


async def charge(ctx, order_id: str) -> str:
    promise_id = ctx.info.id  # the spec's `ctx.id` is `ctx.info.id` in resonate-sdk 0.8
    hold = await ctx.run(reserve, order_id)
    receipt = await ctx.run(capture, hold, idempotency_key=f"{promise_id}:capture")
    await ctx.run(send_receipt, receipt, idempotency_key=f"{promise_id}:send_receipt")
    return receipt


@app.task(bind=True, acks_late=True)
def charge_task(self, order_id: str) -> str:
    async def run() -> str:
        resonate = loam.resonate(group="billing", ttl=timedelta(seconds=3))
        resonate.register(charge, name="charge")
        try:
            # the id is the job's: a redelivery resumes the execution (no ':' in a root id)
            handle = resonate.run(f"celery-{self.request.id}", charge, order_id)
            return await handle.result()
        finally:
            await resonate.stop()

    return asyncio.run(run())
