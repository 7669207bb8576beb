"""Traces (spec §6.11): a W3C trace context on every job, and OpenTelemetry spans for
enqueue, lease and completion — off unless the standard OTEL_ variables turn them on.

- Every job carries a `traceparent` header from enqueue on: the producer's if it sent
  one (kept as is), else one generated here (`new_traceparent`: two random numbers and
  a format, no OpenTelemetry involved, so it costs next to nothing). Its events carry
  it too, and so do their CloudEvents (`traceparent` attribute).
- Spans exist only after `configure_from_env()` found an exporter in
  `OTEL_TRACES_EXPORTER` (`console`, `otlp`, … any exporter registered under the
  `opentelemetry_traces_exporter` entry point) and `OTEL_SDK_DISABLED` is not `true`.
  Everything else is the SDK's own environment: `OTEL_SERVICE_NAME`,
  `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER[_ARG]`, `OTEL_EXPORTER_OTLP_*`,
  `OTEL_BSP_*`. Off, `tracer` is None and the callers' `if tracing.tracer is not None`
  is the whole cost.
- With spans on: `enqueue <queue>` (producer) is a child of the producer's trace
  context or of the request's span, and a job enqueued without a context gets the
  enqueue span's; `lease <queue>` (consumer) and `complete <queue>` are children of
  the job's context, so one job's life is one trace.
"""

from __future__ import annotations

import logging
import os
import random
from typing import Any

log = logging.getLogger(__name__)

TRACE_HEADERS = ("traceparent", "tracestate")
TRACER_NAME = "loam.jobs"

#: the OpenTelemetry tracer, or None when tracing is off (the default)
tracer: Any = None
_provider: Any = None

_getrandbits = random.getrandbits


def new_traceparent() -> str:
    """A fresh W3C traceparent (version 00, random trace and span ids, sampled)."""
    return f"00-{_getrandbits(128) or 1:032x}-{_getrandbits(64) or 1:016x}-01"


def valid_traceparent(value: str) -> bool:
    parts = value.split("-")
    if (
        len(parts) < 4
        or len(parts[0]) != 2
        or len(parts[1]) != 32
        or len(parts[2]) != 16
        or len(parts[3]) != 2
    ):
        return False
    try:
        return (
            int(parts[1], 16) != 0 and int(parts[2], 16) != 0 and parts[0] != "ff" and int(parts[3], 16) >= 0
        )
    except ValueError:
        return False


def enabled() -> bool:
    return tracer is not None


# -- configuration ---------------------------------------------------------------------------
def exporters_from_env(env: dict[str, str] | None = None) -> list[str]:
    env = os.environ if env is None else env
    if (env.get("OTEL_SDK_DISABLED") or "").strip().lower() == "true":
        return []
    names = [n.strip() for n in (env.get("OTEL_TRACES_EXPORTER") or "").split(",")]
    return [n for n in names if n and n != "none"]


def configure_from_env(service_name: str) -> bool:
    """Turn spans on if the environment asks for an exporter; True if it did. Unknown
    exporter names are logged and skipped."""
    names = exporters_from_env()
    if not names:
        return False
    from importlib.metadata import entry_points

    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    attrs = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: service_name}
    provider = TracerProvider(resource=Resource.create(attrs))
    found = {ep.name: ep for ep in entry_points(group="opentelemetry_traces_exporter")}
    added = 0
    for name in names:
        ep = found.get(name)
        if ep is None:
            log.warning(
                "OTEL_TRACES_EXPORTER names %r, which is not installed (have: %s)",
                name,
                ", ".join(sorted(found)),
            )
            continue
        provider.add_span_processor(BatchSpanProcessor(ep.load()()))
        added += 1
    if not added:
        return False
    configure(provider)
    return True


def configure(provider: Any) -> None:
    """Turn spans on with this TracerProvider (also made the global one, so the FastAPI
    instrumentation and Loam's spans share it). Tests pass one with an in-memory exporter."""
    global tracer, _provider
    from opentelemetry import trace

    try:
        trace.set_tracer_provider(provider)
    except Exception:  # noqa: BLE001 - the global can be set once; ours is used directly anyway
        pass
    _provider = provider
    tracer = provider.get_tracer(TRACER_NAME)


def disable() -> None:
    global tracer, _provider
    if _provider is not None:
        try:
            _provider.shutdown()
        except Exception:  # noqa: BLE001
            log.exception("tracer provider shutdown failed")
    tracer, _provider = None, None


def instrument_asgi(app: Any) -> Any:
    """The FastAPI app instrumented (server spans, context from incoming traceparent)
    when spans are on; the app unchanged otherwise."""
    if tracer is None:
        return app
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    FastAPIInstrumentor.instrument_app(app, tracer_provider=_provider)
    return app


# -- spans (call only when `tracer is not None`) -----------------------------------------------
def _parent(traceparent: str | None) -> Any:
    """The context of a traceparent, or None (= the current context)."""
    if not traceparent:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    ctx = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    from opentelemetry import trace

    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def start_span(name: str, kind: str, traceparent: str | None = None, attributes: dict | None = None,
               start_ns: int | None = None) -> Any:  # fmt: skip
    from opentelemetry.trace import SpanKind

    return tracer.start_span(
        name,
        context=_parent(traceparent),
        kind=getattr(SpanKind, kind.upper()),
        attributes=attributes,
        start_time=start_ns,
    )


def traceparent_of(span: Any) -> str:
    sc = span.get_span_context()
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags):02x}"


def record_error(span: Any, error: BaseException) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR, str(error)))
