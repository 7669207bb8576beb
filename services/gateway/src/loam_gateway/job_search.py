"""What a job search matches: a text in a job's id or key, task name, payload, result or
error (message, code, stack trace), in any case; and a failed job's error signature, by
which failures are grouped. One rule for the search and failures routes and for batches
selected by either (rest_console.py, rest_batches.py)."""

from __future__ import annotations

import json
import re
from typing import Literal

from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_gateway.redaction import Redactor

SearchField = Literal["any", "id", "name", "payload", "result", "error"]


def job_matches(job: pb.Job, needle: str, field: str, redact: Redactor | None = None) -> bool:
    """Does `needle` (lower case) occur in the job's `field` (case-insensitive)? With
    `redact`, a JSON payload or result is matched as REST shows it, redacted: a search
    cannot find a job by a value it hides."""

    def has(text: str | bytes) -> bool:
        if isinstance(text, bytes):
            text = shown(text)
        return needle in text.lower()

    def shown(raw: bytes) -> str:
        text = raw.decode("utf-8", "replace")
        if redact is None:
            return text
        try:
            return json.dumps(redact(json.loads(text)), ensure_ascii=False)
        except ValueError:  # not JSON: no fields to hide
            return text

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


# What varies between two failures of one cause: numbers, ids, hex, quoted values.
_VARYING = re.compile(
    r"""'[^']*'|"[^"]*"|\b0x[0-9a-fA-F]+\b|\b[0-9A-Za-z]*\d[0-9A-Za-z_-]{7,}\b|\d+(\.\d+)?"""
)
SIGNATURE_MAX = 200


def error_signature(job: pb.Job) -> str:
    """The last error's code and first message line with what varies blanked out (`#`,
    `'…'`): failures of one cause share it. Empty for a job without errors."""
    if not job.errors:
        return ""
    e = job.errors[-1]
    line = (e.message.splitlines() or [""])[0]
    blanked = _VARYING.sub(lambda m: "'…'" if m.group(0)[:1] in "'\"" else "#", line)
    return f"{e.code or 'error'}: {blanked}"[:SIGNATURE_MAX]
