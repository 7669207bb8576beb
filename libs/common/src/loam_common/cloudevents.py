"""Job events as CloudEvents 1.0 with the Loam profile (spec 002 §2).

| attribute         | value                                                              |
|-------------------|--------------------------------------------------------------------|
| `specversion`     | `1.0`                                                              |
| `id`              | `<ns>/<queue>/<shard>/<seq>`: the event's place in its queue shard, |
|                   | so a re-delivered or re-relayed event has the same id              |
| `source`          | `/loam/jobs/<ns>/<queue>`                                          |
| `type`            | `io.loams.dev.jobs.<event>.v1` (BullMQ's event names)              |
| `subject`         | the job id (absent for queue events)                               |
| `time`            | RFC 3339, UTC, nanoseconds: the commit's store time                |
| `tenantid`        | `<org>/<ns>`; org is `$LOAM_ORG`, `default` when unset             |
| `traceparent`     | the job's W3C trace context; for queue events, one derived from the |
|                   | id (stable across re-delivery, not sampled)                        |
| `dataschema`      | `urn:loam:proto:loam.jobs.v1.JobEvent`                             |
| `datacontenttype` | `application/protobuf`                                             |
| data              | the `JobEvent` protobuf                                            |

`attributes()` gives the attributes (Watch sends them in `WatchResponse.cloudevent`,
binary content mode: the event itself is the data); `to_structured()` the JSON
structured mode (data as `data_base64`, what SSE sends); `to_binary()` the HTTP
binary mode (`ce-` headers and the protobuf body); `from_structured()` reads one back.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import hashlib
import os
from typing import Any

from loam_common.gen.loam.jobs.v1 import events_pb2

SPECVERSION = "1.0"
TYPE_PREFIX = "io.loams.dev.jobs."
DATASCHEMA = "urn:loam:proto:loam.jobs.v1.JobEvent"
CONTENT_TYPE = "application/protobuf"
REQUIRED = ("specversion", "id", "source", "type", "time", "tenantid", "traceparent", "dataschema")
DEFAULT_ORG = "default"

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def event_type(event: str) -> str:
    return f"{TYPE_PREFIX}{event}.v1"


def source(ns: str, queue: str) -> str:
    return f"/loam/jobs/{ns}/{queue}"


def event_id(ns: str, queue: str, shard: int, seq: int) -> str:
    return f"{ns}/{queue}/{shard}/{seq}"


def org() -> str:
    """The org of `tenantid`: `$LOAM_ORG`, `default` when unset. A stream of events reads
    it once (an environment lookup costs more than the rest of an event's tenant id)."""
    return os.environ.get("LOAM_ORG") or DEFAULT_ORG


def tenant_id(ns: str, org_name: str | None = None) -> str:
    return f"{org_name or org()}/{ns}"


def rfc3339_ns(time_ns: int) -> str:
    """`2026-10-01T12:00:00.123456789Z`: RFC 3339 in UTC with nanoseconds."""
    secs, ns = divmod(time_ns, 1_000_000_000)
    return f"{_second(secs)}.{ns:09d}Z"


@functools.lru_cache(maxsize=256)
def _second(secs: int) -> str:
    """A second's date and time: the events of a stream mostly share their second, and
    formatting it was most of an event's attributes."""
    return (_EPOCH + dt.timedelta(seconds=secs)).strftime("%Y-%m-%dT%H:%M:%S")


def parse_rfc3339_ns(text: str) -> int:
    """The inverse of `rfc3339_ns` (any RFC 3339 time with up to 9 fraction digits)."""
    body = text.rstrip("Z")
    offset = 0
    if not text.endswith("Z"):
        sign = 1 if body[-6] == "+" else -1
        hh, mm = int(body[-5:-3]), int(body[-2:])
        offset = sign * (hh * 3600 + mm * 60)
        body = body[:-6]
    whole, _, frac = body.partition(".")
    t = dt.datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.UTC)
    secs = int((t - _EPOCH).total_seconds()) - offset
    return secs * 1_000_000_000 + int((frac + "000000000")[:9])


def derived_traceparent(ce_source: str, ce_id: str) -> str:
    """For events without a job trace context: stable for the same event, not sampled."""
    h = hashlib.sha256(f"{ce_source}\x00{ce_id}".encode()).hexdigest()
    return f"00-{h[:32]}-{h[32:48]}-00"


def attributes(ns: str, ev: events_pb2.JobEvent, *, org: str | None = None) -> dict[str, str]:
    """The CloudEvents attributes of one job event (every value a string)."""
    src = source(ns, ev.queue)
    eid = event_id(ns, ev.queue, ev.shard, ev.seq)
    attrs = {
        "specversion": SPECVERSION,
        "id": eid,
        "source": src,
        "type": event_type(ev.event),
        "time": rfc3339_ns(ev.time_ns),
        "tenantid": tenant_id(ns, org),
        "traceparent": ev.headers.get("traceparent") or derived_traceparent(src, eid),
        "dataschema": DATASCHEMA,
        "datacontenttype": CONTENT_TYPE,
    }
    if ev.job_id:
        attrs["subject"] = ev.job_id
    tracestate = ev.headers.get("tracestate")
    if tracestate:
        attrs["tracestate"] = tracestate
    return attrs


def to_structured(ns: str, ev: events_pb2.JobEvent, *, org: str | None = None) -> dict[str, Any]:
    """JSON structured content mode (`application/cloudevents+json`): the attributes and
    the protobuf data as `data_base64`."""
    out: dict[str, Any] = attributes(ns, ev, org=org)
    out["data_base64"] = base64.b64encode(ev.SerializeToString(deterministic=True)).decode()
    return out


def to_binary(ns: str, ev: events_pb2.JobEvent, *, org: str | None = None) -> tuple[dict[str, str], bytes]:
    """HTTP binary content mode: `ce-*` headers, `content-type`, and the protobuf body."""
    attrs = attributes(ns, ev, org=org)
    headers = {"content-type": attrs.pop("datacontenttype")}
    headers.update({f"ce-{k}": v for k, v in attrs.items()})
    return headers, ev.SerializeToString(deterministic=True)


def from_structured(obj: dict[str, Any]) -> tuple[dict[str, str], events_pb2.JobEvent]:
    """A structured CloudEvent back into (attributes, JobEvent)."""
    attrs = {k: v for k, v in obj.items() if k not in ("data", "data_base64")}
    if attrs.get("dataschema") != DATASCHEMA:
        raise ValueError(f"not a Loam job event: dataschema {attrs.get('dataschema')!r}")
    return attrs, events_pb2.JobEvent.FromString(base64.b64decode(obj["data_base64"]))
