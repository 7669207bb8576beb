"""The event formats: CloudEvents with the Loam profile (spec 002 §2), read back by the
CloudEvents SDK; the Arrow / Parquet export with the columns of spec 002 §4, whose
rows read back equal the events; the trace context every job gets at enqueue."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re

import pyarrow as pa
import pytest

from loam_common import cloudevents, event_export, events, tracing
from loam_common.gen.loam.jobs.v1 import events_pb2
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs.complete import Fail, Ok, Retry
from loam_relay import RelayService

NS = "acme"
SEC = 1_000_000_000

TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$")


async def _workload(core, clock, queue: str = "q") -> None:
    """Jobs through most transitions: added, waiting, delayed, active, progress,
    completed, failed, retries-exhausted, paused/resumed (queue events)."""
    for i in range(6):
        opts = pb.EnqueueOpts(priority=i % 2, attempts=2)
        if i == 5:
            opts.not_before.delay_ns = SEC
        await core.jobs.enqueue(
            NS, queue, pb.TaskSpec(name=f"t{i % 3}", payload=pb.Payload(data=b'{"i": %d}' % i)), opts
        )
        clock.advance(1000)
    jobs = await core.jobs.lease(NS, [queue], "w", max_jobs=5)
    await core.jobs.report(NS, queue, jobs[0].id, jobs[0].epoch, progress=b"50")
    await core.jobs.complete(NS, queue, jobs[0].id, jobs[0].epoch, Ok(pb.Payload(data=b"1")))
    await core.jobs.complete(
        NS, queue, jobs[1].id, jobs[1].epoch, Fail(pb.JobError(code="x", message="boom"))
    )
    err = pb.JobError(message="again")
    await core.jobs.complete(NS, queue, jobs[2].id, jobs[2].epoch, Retry(err, 0))
    clock.advance(1000)
    again = [j for j in await core.jobs.lease(NS, [queue], "w", max_jobs=5) if j.id == jobs[2].id]
    await core.jobs.complete(NS, queue, again[0].id, again[0].epoch, Retry(err, 0))


async def _all_events(store, queue="q"):
    return await store.snapshot(
        lambda tx: [
            e
            for s in events.event_shards(tx, NS, queue)
            for e in events.events_after(tx, NS, queue, s, 0, 10**6)
        ]
    )


# -- CloudEvents ----------------------------------------------------------------------------------
async def test_cloudevents_profile(store, core, clock):
    await _workload(core, clock)
    evs = await _all_events(store)
    names = {e.event for e in evs}
    assert {
        "added",
        "waiting",
        "delayed",
        "active",
        "progress",
        "completed",
        "failed",
        "retries-exhausted",
    } <= names
    ids = set()
    for ev in evs:
        ce = cloudevents.to_structured(NS, ev)
        for attr in cloudevents.REQUIRED:
            assert ce[attr], attr
        assert ce["specversion"] == "1.0"
        assert ce["type"] == f"io.loams.dev.jobs.{ev.event}.v1"
        assert re.fullmatch(r"io\.loams\.dev\.jobs\.[a-z-]+\.v1", ce["type"])
        assert ce["source"] == f"/loam/jobs/{NS}/q"
        assert ce["id"] == f"{NS}/q/{ev.shard}/{ev.seq}"
        assert ce["dataschema"] == "urn:loam:proto:loam.jobs.v1.JobEvent"
        assert ce["datacontenttype"] == "application/protobuf"
        assert ce["tenantid"] == f"default/{NS}"
        assert TRACEPARENT.match(ce["traceparent"])
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z", ce["time"])
        assert cloudevents.parse_rfc3339_ns(ce["time"]) == ev.time_ns
        assert ce.get("subject") == (ev.job_id or None)
        assert events_pb2.JobEvent.FromString(base64.b64decode(ce["data_base64"])) == ev
        attrs, back = cloudevents.from_structured(json.loads(json.dumps(ce)))
        assert back == ev and attrs["id"] == ce["id"]
        ids.add(ce["id"])
    assert len(ids) == len(evs)  # unique per event...
    # ...and stable: read again, after a relay pass (which finds nothing to move: each
    # event was written straight into the log), each event has the same id.
    assert (await RelayService(store, "r").run_once()).copied == 0
    assert [cloudevents.to_structured(NS, e) for e in await _all_events(store)] == [
        cloudevents.to_structured(NS, e) for e in evs
    ]


async def test_cloudevents_read_by_the_sdk_and_binary_mode(store, core, clock, monkeypatch):
    try:
        from cloudevents.v1.http import (
            from_http,  # cloudevents 2.x keeps the 1.x API here
        )
    except ImportError:
        from cloudevents.http import from_http

    monkeypatch.setenv("LOAM_ORG", "acme-org")
    await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"))
    ev = (await _all_events(store))[0]
    headers, body = cloudevents.to_binary(NS, ev)
    assert headers["content-type"] == "application/protobuf" and headers["ce-tenantid"] == f"acme-org/{NS}"
    sdk = from_http(headers, body)
    assert sdk["type"] == "io.loams.dev.jobs.added.v1" and sdk["id"] == f"{NS}/q/0/1"
    assert sdk["tenantid"] == f"acme-org/{NS}" and sdk["dataschema"] == cloudevents.DATASCHEMA
    assert events_pb2.JobEvent.FromString(sdk.data) == ev
    structured = json.dumps(cloudevents.to_structured(NS, ev)).encode()
    sdk2 = from_http({"content-type": "application/cloudevents+json"}, structured)
    assert sdk2["id"] == sdk["id"] and events_pb2.JobEvent.FromString(sdk2.data) == ev


async def test_queue_events_get_a_stable_derived_traceparent():
    ev = events_pb2.JobEvent(event="paused", queue="q", shard=0, seq=9, time_ns=1)
    a, b = cloudevents.attributes(NS, ev), cloudevents.attributes(NS, ev)
    assert a["traceparent"] == b["traceparent"] and a["traceparent"].endswith("-00") and "subject" not in a


# -- trace context at enqueue ---------------------------------------------------------------------
async def test_every_job_gets_a_traceparent_and_a_given_one_is_kept(store, core, clock):
    given = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    a = await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t", headers={"traceparent": given}))
    b = await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"))
    (ja, jb) = [await store.snapshot(lambda tx, i=i: __import__("loam_common.jobs.job_admin", fromlist=["x"]).job_get(tx, NS, "q", i))
                for i in (a.job_id, b.job_id)]  # fmt: skip
    assert ja.task.headers["traceparent"] == given
    assert TRACEPARENT.match(jb.task.headers["traceparent"]) and tracing.valid_traceparent(
        jb.task.headers["traceparent"]
    )
    evs = await _all_events(store)
    assert {e.headers["traceparent"] for e in evs if e.job_id == b.job_id} == {jb.task.headers["traceparent"]}
    # The trace context is not part of the canonical request: a retry with another one is the same call.
    opts = pb.EnqueueOpts(idempotency=pb.Idempotency(key="k"))
    first = await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"), opts)
    again = await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t", headers={"traceparent": given}), opts)
    assert again.job_id == first.job_id


async def test_spans_for_enqueue_lease_and_completion(store, core):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
        InMemorySpanExporter,
    )

    assert tracing.tracer is None  # off by default
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.configure(provider)
    try:
        given = "00-" + "12" * 16 + "-" + "34" * 8 + "-01"
        await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="kept", headers={"traceparent": given}))
        await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="fresh"))
        for job in await core.jobs.lease(NS, ["q"], "w", max_jobs=2):
            await core.jobs.complete(NS, "q", job.id, job.epoch, Ok())
        spans = exporter.get_finished_spans()
    finally:
        tracing.disable()
    by_name: dict[str, list] = {}
    for s in spans:
        by_name.setdefault(s.name, []).append(s)
    assert sorted(by_name) == ["complete q", "enqueue q", "lease q"]
    assert all(len(v) == 2 for v in by_name.values())
    traces = {}
    for s in spans:
        traces.setdefault(s.context.trace_id, []).append(s.name)
    assert int("12" * 16, 16) in traces  # the producer's trace continues
    assert all(sorted(v) == ["complete q", "enqueue q", "lease q"] for v in traces.values())
    kept_enqueue = next(s for s in by_name["enqueue q"] if s.context.trace_id == int("12" * 16, 16))
    assert kept_enqueue.parent.span_id == int("34" * 8, 16)
    fresh_enqueue = next(s for s in by_name["enqueue q"] if s is not kept_enqueue)
    fresh_lease = next(s for s in by_name["lease q"] if s.context.trace_id == fresh_enqueue.context.trace_id)
    assert (
        fresh_lease.parent.span_id == fresh_enqueue.context.span_id
    )  # the job carries the enqueue span's context


def test_tracing_is_off_unless_an_exporter_is_named(monkeypatch):
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    assert tracing.exporters_from_env() == [] and tracing.configure_from_env("t") is False
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert tracing.exporters_from_env() == []
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console,otlp")
    assert tracing.exporters_from_env() == ["console", "otlp"]
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert tracing.exporters_from_env() == []


# -- Arrow / Parquet --------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
async def test_export_round_trips(store, core, clock, configure, fmt):
    await configure("q", shards=2)
    await _workload(core, clock)
    await RelayService(store, "r").run_once()  # part relayed...
    await _workload(core, clock)  # ...part still in the outbox
    evs = sorted(await _all_events(store), key=lambda e: (e.time_ns, e.shard, e.seq))
    table = await event_export.export_events(store, NS, "q")
    data = event_export.table_bytes(table, fmt)
    back = event_export.read_table(pa.BufferReader(data), fmt)
    assert back.num_rows == len(evs) > 20
    assert back.schema.equals(event_export.schema())
    assert (
        back.schema.field("data").type.field("error").metadata[b"proto_path"] == b"error"
    )  # survives the file
    rows = back.drop_columns(["time"]).to_pylist()
    times = back.column("time").cast(pa.int64()).to_pylist()
    for ev, row, t in zip(evs, rows, times, strict=True):
        assert event_export.event_from_data(row["data"]) == ev
        assert events_pb2.JobEvent.FromString(row["data_raw"]) == ev
        assert t == ev.time_ns
        attrs = cloudevents.attributes(NS, ev)
        assert {c: row[c] for c in event_export.ATTRIBUTE_COLUMNS if row[c] is not None} == {
            c: attrs[c] for c in event_export.ATTRIBUTE_COLUMNS if c in attrs
        }
        assert row["ext"] == [] and row["ext_types"] == []


async def test_export_schema_and_time_range(store, core, clock):
    sch = event_export.schema()
    assert sch.names == ["id", "source", "type", "subject", "dataschema", "datacontenttype", "tenantid",
                         "traceparent", "tracestate", "time", "ext", "ext_types", "data", "data_raw"]  # fmt: skip
    for c in ("source", "type", "tenantid"):
        assert pa.types.is_dictionary(sch.field(c).type)
    assert sch.field("time").type == pa.timestamp("ns", tz="UTC")
    assert sch.field("ext").type == pa.map_(pa.string(), pa.string())
    data = sch.field("data").type
    err = data.field("error")
    assert pa.types.is_struct(err.type) and err.metadata[b"proto_tag"] == b"13"
    assert err.type.field("code").metadata[b"proto_path"] == b"error.code"
    assert data.field("headers").type == pa.map_(pa.string(), pa.string())
    # A time range: [since, until)
    await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="early"))
    clock.advance(10 * SEC)
    mid = clock.now_ns()
    await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="late"))
    clock.advance(10 * SEC)
    late = (await event_export.export_events(store, NS, "q", mid)).to_pylist()
    early = (await event_export.export_events(store, NS, "q", 0, mid)).drop_columns(["time"]).to_pylist()
    assert [r["data"]["name"] for r in early] == ["early", "early"]
    assert len(late) == 2 and (await event_export.export_events(store, NS, "nope")).num_rows == 0
    buf = io.BytesIO()
    event_export.write_table(await event_export.export_events(store, NS, "q"), buf, "parquet")
    assert buf.getvalue()[:4] == b"PAR1"


async def test_events_cli_exports_and_trims(tmp_path):
    from loam_common.store.runner import open_store
    from loam_queue_core import QueueCore, events_cli

    db = tmp_path / "cli.db"
    async with open_store(f"sqlite:///{db}") as s:
        core = QueueCore(s)
        for _ in range(3):
            await core.jobs.enqueue(NS, "q", pb.TaskSpec(name="t"))
        await RelayService(s, "r").run_once()
    out = tmp_path / "e.parquet"
    args = ["--store", str(db), "--namespace", NS, "--queue", "q"]
    assert await asyncio.to_thread(events_cli.main, ["export", *args, "--out", str(out)]) == 0
    assert event_export.read_table(str(out)).num_rows == 6
    assert await asyncio.to_thread(events_cli.main, ["trim", *args, "--before", "2100-01-01T00:00:00Z"]) == 0
    assert (
        await asyncio.to_thread(events_cli.main, ["export", *args, "--out", str(out), "--format", "arrow"])
        == 0
    )
    assert event_export.read_table(str(out), "arrow").num_rows == 0
    assert events_cli.parse_time("1970-01-01T00:00:01Z") == SEC
