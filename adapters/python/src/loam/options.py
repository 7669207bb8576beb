"""`enqueue(..., **opts)` keyword options → `EnqueueOpts`, and `Outcome` constructors.

The keywords follow BullMQ's and Celery's names where they differ from the proto
(`delay`/`at` for `not_before`, `remove_on_complete`/`remove_on_fail` for retention), so
code moved from either reads the same. An unknown keyword is a TypeError, not a
silently ignored option."""

from __future__ import annotations

import datetime as dt
import time
import traceback
from collections.abc import Mapping
from typing import Any

from loam import payloads
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as jpb
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb

_DEDUP_MODES = {
    "simple": pb.DEDUP_MODE_SIMPLE,
    "throttle": pb.DEDUP_MODE_THROTTLE,
    "debounce": pb.DEDUP_MODE_DEBOUNCE,
}
_BACKOFF_KINDS = {
    "fixed": pb.BACKOFF_KIND_FIXED,
    "exponential": pb.BACKOFF_KIND_EXPONENTIAL,
    "custom": pb.BACKOFF_KIND_CUSTOM,
}

ENQUEUE_OPTIONS = frozenset(
    {
        "job_key", "idempotency_key", "idempotency_ttl", "dedup", "delay", "at", "priority",
        "lifo", "attempts", "backoff", "visibility", "timeout", "expires", "subject",
        "headers", "parent", "remove_on_complete", "remove_on_fail", "result_ttl",
        "durable_function", "opts", "replace", "placement",
    }
)  # fmt: skip


def backoff(value: Any) -> pb.Backoff:
    """`5` (fixed, seconds), `("exponential", 1)`, or BullMQ's
    `{"type": "exponential", "delay": 1, "max": 60, "jitter": 0.5}`; `"hold_subject": True`
    in the dict keeps the job's subject while it waits to retry."""
    if isinstance(value, pb.Backoff):
        return value
    if isinstance(value, (int, float, dt.timedelta)) and not isinstance(value, bool):
        return pb.Backoff(kind=pb.BACKOFF_KIND_FIXED, base_ns=payloads.ns(value, "backoff"))
    if isinstance(value, tuple) and len(value) == 2:
        value = {"type": value[0], "delay": value[1]}
    if isinstance(value, Mapping):
        kind = str(value.get("type", "fixed")).lower()
        if kind not in _BACKOFF_KINDS:
            raise ValueError(f"backoff type must be one of {sorted(_BACKOFF_KINDS)}, not {kind!r}")
        return pb.Backoff(
            kind=_BACKOFF_KINDS[kind],
            base_ns=payloads.ns(value.get("delay", 0), "backoff.delay"),
            max_ns=payloads.ns(value.get("max"), "backoff.max"),
            jitter=float(value.get("jitter", 0.0)),
            custom=str(value.get("custom", "")),
            hold_subject=bool(value.get("hold_subject", False)),
        )
    raise TypeError("backoff: seconds, (type, seconds) or {'type', 'delay', 'max', 'jitter'}")


def dedup(value: Any) -> pb.Dedup:
    """`"id"` (simple: while the job is not finished) or BullMQ's
    `{"id", "ttl", "extend", "replace", "keep_last_if_active"}`: a ttl makes it throttle,
    extend/replace make it debounce; `"mode"` names the mode outright."""
    if isinstance(value, pb.Dedup):
        return value
    if isinstance(value, str):
        return pb.Dedup(id=value, mode=pb.DEDUP_MODE_SIMPLE)
    if not isinstance(value, Mapping):
        raise TypeError("dedup: an id, or {'id', 'ttl', 'extend', 'replace', 'mode'}")
    ttl = payloads.ns(value.get("ttl"), "dedup.ttl")
    extend, replace = bool(value.get("extend")), bool(value.get("replace"))
    mode = value.get("mode")
    if mode is None:
        mode = "debounce" if (extend or replace) else "throttle" if ttl else "simple"
    if mode not in _DEDUP_MODES:
        raise ValueError(f"dedup mode must be one of {sorted(_DEDUP_MODES)}, not {mode!r}")
    return pb.Dedup(
        id=str(value["id"]),
        mode=_DEDUP_MODES[mode],
        ttl_ns=ttl,
        extend=extend,
        replace=replace,
        keep_last_if_active=bool(value.get("keep_last_if_active")),
    )


def _retention(r: pb.Retention, which: str, value: Any) -> None:
    """BullMQ's removeOnComplete/removeOnFail: True (remove at once), False (keep), a
    count to keep, or {"age": seconds, "count": n}."""
    count, age = f"{which}_count", f"{which}_age_ns"
    if value is True:
        setattr(r, count, 0)
    elif value is False or value is None:
        return
    elif isinstance(value, int):
        setattr(r, count, value)
    elif isinstance(value, Mapping):
        if value.get("count") is not None:
            setattr(r, count, int(value["count"]))
        if value.get("age") is not None:
            setattr(r, age, payloads.ns(value["age"], f"remove_on_{which}.age"))
    else:
        raise TypeError(f"remove_on_{which}: True, False, a count or {{'age', 'count'}}")


def parent(value: Any) -> pb.ParentRef:
    if isinstance(value, pb.ParentRef):
        return value
    if isinstance(value, Mapping):
        return pb.ParentRef(**value)
    if isinstance(value, tuple) and len(value) == 2:
        return pb.ParentRef(queue=value[0], job_id=value[1])
    raise TypeError("parent: a ParentRef, (queue, job_id) or a dict of ParentRef fields")


def enqueue_opts(options: Mapping[str, Any]) -> tuple[pb.EnqueueOpts, dict[str, str]]:
    """The EnqueueOpts and the task headers for one job. `idempotency_key` is handled by
    the client (it makes one per call by default); it is applied here only when given."""
    unknown = set(options) - ENQUEUE_OPTIONS
    if unknown:
        raise TypeError(f"unknown enqueue option(s): {', '.join(sorted(unknown))}")
    o = pb.EnqueueOpts()
    if options.get("opts") is not None:  # a ready-made EnqueueOpts, the keywords apply on top
        o.CopyFrom(options["opts"])
    get = options.get
    if get("job_key"):
        o.job_key = str(get("job_key"))
    if get("idempotency_key"):
        o.idempotency.key = str(get("idempotency_key"))
        o.idempotency.ttl_ns = payloads.ns(get("idempotency_ttl"), "idempotency_ttl")
    if get("dedup") is not None:
        o.dedup.CopyFrom(dedup(get("dedup")))
    if get("delay") is not None and get("at") is not None:
        raise ValueError("give delay or at, not both")
    if get("delay") is not None:
        o.not_before.delay_ns = payloads.ns(get("delay"), "delay")
    if get("at") is not None:
        o.not_before.at_ns = payloads.at_ns(get("at"), "at")
    if get("priority"):
        o.priority = int(get("priority"))
    if get("lifo"):
        o.lifo = True
    if get("attempts"):
        o.attempts = int(get("attempts"))
    if get("backoff") is not None:
        o.backoff.CopyFrom(backoff(get("backoff")))
    if get("visibility") is not None:
        o.visibility_ns = payloads.ns(get("visibility"), "visibility")
    if get("timeout") is not None:
        o.timeout_ns = payloads.ns(get("timeout"), "timeout")
    if get("expires") is not None:
        exp = get("expires")
        # Celery's `expires`: a datetime, or seconds from now.
        if isinstance(exp, (int, float, dt.timedelta)) and not isinstance(exp, bool):
            o.expires_ns = time.time_ns() + payloads.ns(exp, "expires")
        else:
            o.expires_ns = payloads.at_ns(exp, "expires")
    if get("subject"):
        o.subject = str(get("subject"))
    if get("replace"):  # True or "keep_later": keep whichever of the two runs later
        if get("replace") not in (True, "keep_later"):
            raise ValueError(f"replace must be True or 'keep_later', not {get('replace')!r}")
        o.replace = pb.SUBJECT_REPLACE_KEEP_LATER
    if get("placement"):
        o.placement = str(get("placement"))
    if get("parent") is not None:
        o.parent.CopyFrom(parent(get("parent")))
    if get("remove_on_complete") is not None:
        _retention(o.retention, "completed", get("remove_on_complete"))
    if get("remove_on_fail") is not None:
        _retention(o.retention, "failed", get("remove_on_fail"))
    if get("result_ttl") is not None:
        o.retention.result_ttl_ns = payloads.ns(get("result_ttl"), "result_ttl")
    if get("durable_function"):
        o.mode = pb.MODE_DURABLE
        o.durable_function = str(get("durable_function"))
    headers = {str(k): str(v) for k, v in (get("headers") or {}).items()}
    return o, headers


# -- outcomes ------------------------------------------------------------------------


def job_error(error: BaseException | str, *, code: str = "error") -> pb.JobError:
    """A JobError from an exception (type, message and traceback) or a message."""
    if isinstance(error, BaseException):
        message = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        stack = "".join(traceback.format_exception(error))
        return pb.JobError(code=getattr(error, "code", None) or code, message=message, stacktrace=stack)
    return pb.JobError(code=code, message=str(error))


class Outcome:
    """Constructors for the outcomes of spec §5.2, one per kind."""

    @staticmethod
    def ok(result: Any = None) -> jpb.Outcome:
        out = jpb.Outcome(ok=jpb.Outcome.Ok())
        if result is not None:
            out.ok.result.CopyFrom(payloads.encode(result))
        return out

    @staticmethod
    def retry(error: BaseException | str, after: float | dt.timedelta | None = None) -> jpb.Outcome:
        out = jpb.Outcome(retry=jpb.Outcome.Retry(error=job_error(error)))
        if after is not None:
            out.retry.after_ns = payloads.ns(after, "after")
        return out

    @staticmethod
    def fail(error: BaseException | str, dead_letter: bool = False) -> jpb.Outcome:
        return jpb.Outcome(fail=jpb.Outcome.Fail(error=job_error(error), dead_letter=dead_letter))

    @staticmethod
    def release(after: float | dt.timedelta | None = None) -> jpb.Outcome:
        out = jpb.Outcome(release=jpb.Outcome.Release())
        if after is not None:
            out.release.after_ns = payloads.ns(after, "after")
        return out

    @staticmethod
    def delay(until: dt.datetime | float) -> jpb.Outcome:
        return jpb.Outcome(delay=jpb.Outcome.Delay(until_ns=payloads.at_ns(until, "until")))

    @staticmethod
    def wait_children() -> jpb.Outcome:
        return jpb.Outcome(wait_children=jpb.Outcome.WaitChildren())

    @staticmethod
    def rate_limited(for_: float | dt.timedelta) -> jpb.Outcome:
        return jpb.Outcome(rate_limited=jpb.Outcome.RateLimited(for_ns=payloads.ns(for_, "for_")))
