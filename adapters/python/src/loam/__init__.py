"""Loam Jobs: the Python SDK.

    import loam

    async with loam.Client() as client:                     # http://127.0.0.1:7720
        await client.enqueue("emails", "send", {"to": "a@example.com"}, delay=10)
        await loam.Worker(client, "emails", send, concurrency=8).run()

`SyncClient` offers the same calls, blocking. Errors are the typed classes of
`loam.errors` (NotFound, Fenced, ...); a handler raises `UnrecoverableError` to fail
its job without more attempts. `loam.testing` runs a real server for tests.
"""

from loam import errors
from loam.client import Client, SyncClient
from loam.errors import JobsError, Retry, UnrecoverableError
from loam.options import Outcome
from loam.views import Enqueued, JobInfo, LeasedJob
from loam.worker import Worker

__all__ = [
    "Client",
    "Enqueued",
    "JobInfo",
    "JobsError",
    "LeasedJob",
    "Outcome",
    "Retry",
    "SyncClient",
    "UnrecoverableError",
    "Worker",
    "errors",
]
