"""What a job search matches: a text in a job's id or key, task name, payload, result or
error (message, code, stack trace), in any case. One rule for the search route and for
batches selected by a search (rest_console.py, rest_batches.py)."""

from __future__ import annotations

from typing import Literal

from loam_common.gen.loam.jobs.v1 import types_pb2 as pb

SearchField = Literal["any", "id", "name", "payload", "result", "error"]


def job_matches(job: pb.Job, needle: str, field: str) -> bool:
    """Does `needle` (lower case) occur in the job's `field` (case-insensitive)?"""
    def has(text: str | bytes) -> bool:
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        return needle in text.lower()

    checks = {
        "id": lambda: has(job.id) or has(job.opts.job_key),
        "name": lambda: has(job.task.name),
        "payload": lambda: has(job.task.payload.data),
        "result": lambda: job.HasField("result") and has(job.result.data),
        "error": lambda: any(has(e.message) or has(e.stacktrace) or has(e.code) for e in job.errors),
    }
    if field == "any":
        return any(check() for check in checks.values())
    return checks[field]()
