"""Loam Jobs: the Python SDK.

    import loam

    async with loam.Client() as client:                     # http://127.0.0.1:7720
        await client.enqueue("emails", "send", {"to": "a@example.com"}, delay=10)
        await loam.Worker(client, "emails", send, concurrency=8).run()

Schedules: `client.schedule("nightly", "reports", "build", cron="0 3 * * *",
tz="Europe/Paris")` (or `every=30`). Flows: `client.flow([loam.FlowNode(...), ...])`,
or `loam.chain(...)`, `loam.group(...)`, `loam.chord(header, body)` (loam.flows).

Durable functions: `loam.resonate(group="billing")` is Resonate's own client pointed at
Loam (URL, token, namespace from $LOAM_URL, $LOAM_TOKEN, $LOAM_NAMESPACE; $LOAM_URL is every
Loam client's name for the server, and $LOAM_JOBS_URL is accepted as an alias).

`SyncClient` offers the same calls, blocking. Errors are the typed classes of
`loam.errors` (NotFound, Fenced, ...); a handler raises `UnrecoverableError` to fail
its job without more attempts. `loam.testing` runs a real server for tests.
`loam.spark_session()` opens a PySpark session on the namespace's Spark endpoint
(loam.spark; needs pyspark-client).
"""

from loam import errors
from loam.client import Client, SyncClient
from loam.durable import resonate
from loam.errors import JobsError, PermanentError, Retry, UnrecoverableError
from loam.flows import Flow, FlowNode, chain, chord, group
from loam.options import Outcome
from loam.views import Child, Enqueued, FlowInfo, JobInfo, LeasedJob, ScheduleInfo
from loam.worker import Worker


def spark_session(url: str | None = None, **kwargs):  # noqa: ANN201 - a pyspark SparkSession
    """A PySpark session on Loam's Spark endpoint with the LOAM_TOKEN header (loam.spark)."""
    from loam.spark import spark_session as _spark_session

    return _spark_session(url, **kwargs)


__all__ = [
    "Child",
    "Client",
    "Enqueued",
    "Flow",
    "FlowInfo",
    "FlowNode",
    "JobInfo",
    "JobsError",
    "LeasedJob",
    "Outcome",
    "Retry",
    "ScheduleInfo",
    "SyncClient",
    "PermanentError",
    "UnrecoverableError",
    "resonate",
    "Worker",
    "chain",
    "chord",
    "errors",
    "group",
    "spark_session",
]
