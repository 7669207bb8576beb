"""Events → Apache Arrow / Parquet (spec 002 §4, D372), for analytics.

One row per event, the CloudEvents columns of the Loam profile (cloudevents.py):

| column                                      | Arrow type                          |
|---------------------------------------------|-------------------------------------|
| id, subject, dataschema, datacontenttype,   | utf8                                |
| traceparent, tracestate                     |                                     |
| source, type, tenantid                      | dictionary<int32, utf8>             |
| time                                        | timestamp[ns, tz=UTC]               |
| ext, ext_types                              | map<utf8, utf8> (empty: the profile |
|                                             | has no other extensions)            |
| data                                        | struct derived from JobEvent's      |
|                                             | descriptor                          |
| data_raw                                    | binary: the protobuf, for replay    |

`data` is derived from the protobuf descriptor, not written by hand: scalars to
scalars (enums as their int32 number), repeated to list, messages to (nullable)
struct, maps to map; every field carries `proto_path` and `proto_tag` metadata, so a
later JobEvent field is a new column (additive evolution). `event_from_data` is the
inverse, so a row reads back as the event it came from.

`export_events(store, ns, queue, since_ns, until_ns)` reads the queue's events (the
log, then the rows not yet relayed) in that time range; `write_table` / `table_bytes`
write Parquet or the Arrow IPC file format; `export_bytes` is both, with its inputs
checked (what a queue core and `loam dev`'s gateway serve). pyarrow is imported when
first used.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any

from loam_common import cloudevents, events, validate
from loam_common.errors import InvalidArgument
from loam_common.gen.loam.jobs.v1 import events_pb2
from loam_common.store.runner import Store

FORMATS = {"parquet": "application/vnd.apache.parquet", "arrow": "application/vnd.apache.arrow.file"}
ATTRIBUTE_COLUMNS = ("id", "source", "type", "subject", "dataschema", "datacontenttype", "tenantid",
                     "traceparent", "tracestate")  # fmt: skip
DICTIONARY_COLUMNS = ("source", "type", "tenantid")
# How far out of time order two events of one shard may be (clocks of different writers):
# reading a shard stops this long after the first event past the range.
CLOCK_SKEW_NS = 60 * 1_000_000_000
PAGE = events.BATCH


# -- the schema, derived from the descriptor -----------------------------------------------------
def _pa():
    import pyarrow as pa

    return pa


def _is_repeated(fd) -> bool:
    r = getattr(fd, "is_repeated", None)
    return r if isinstance(r, bool) else fd.label == fd.LABEL_REPEATED


def _is_map(fd) -> bool:
    return fd.type == fd.TYPE_MESSAGE and fd.message_type.GetOptions().map_entry


def _scalar_type(fd):
    pa = _pa()
    t = fd.type
    return {
        fd.TYPE_DOUBLE: pa.float64(), fd.TYPE_FLOAT: pa.float32(),
        fd.TYPE_INT64: pa.int64(), fd.TYPE_SINT64: pa.int64(), fd.TYPE_SFIXED64: pa.int64(),
        fd.TYPE_UINT64: pa.uint64(), fd.TYPE_FIXED64: pa.uint64(),
        fd.TYPE_INT32: pa.int32(), fd.TYPE_SINT32: pa.int32(), fd.TYPE_SFIXED32: pa.int32(),
        fd.TYPE_UINT32: pa.uint32(), fd.TYPE_FIXED32: pa.uint32(),
        fd.TYPE_BOOL: pa.bool_(), fd.TYPE_STRING: pa.string(), fd.TYPE_BYTES: pa.binary(),
        fd.TYPE_ENUM: pa.int32(),
    }[t]  # fmt: skip


def _value_type(fd, path: str, depth: int):
    if fd.type == fd.TYPE_MESSAGE:
        return message_struct(fd.message_type, path, depth + 1)
    return _scalar_type(fd)


def _field(fd, path: str, depth: int):
    pa = _pa()
    p = f"{path}.{fd.name}" if path else fd.name
    meta = {"proto_path": p, "proto_tag": str(fd.number)}
    if _is_map(fd):
        k, v = fd.message_type.fields_by_name["key"], fd.message_type.fields_by_name["value"]
        typ = pa.map_(_scalar_type(k), _value_type(v, p, depth))
    elif _is_repeated(fd):
        typ = pa.list_(_value_type(fd, p, depth))
    else:
        typ = _value_type(fd, p, depth)
    nullable = fd.type == fd.TYPE_MESSAGE and not _is_repeated(fd)
    return pa.field(fd.name, typ, nullable=nullable, metadata=meta)


def message_struct(descriptor, path: str = "", depth: int = 0):
    """The Arrow struct of a protobuf message descriptor."""
    if depth > 16:
        raise ValueError(f"{descriptor.full_name}: message nesting too deep for an Arrow struct")
    return _pa().struct([_field(fd, path, depth) for fd in descriptor.fields])


_SCHEMA = None


def schema():
    """The Arrow schema of exported events."""
    global _SCHEMA
    if _SCHEMA is None:
        pa = _pa()
        utf8_map = pa.map_(pa.string(), pa.string())
        dict_utf8 = pa.dictionary(pa.int32(), pa.string())
        cols = [pa.field(c, dict_utf8 if c in DICTIONARY_COLUMNS else pa.string(),
                         nullable=c in ("subject", "tracestate")) for c in ATTRIBUTE_COLUMNS]  # fmt: skip
        cols += [
            pa.field("time", pa.timestamp("ns", tz="UTC"), nullable=False),
            pa.field("ext", utf8_map, nullable=False),
            pa.field("ext_types", utf8_map, nullable=False),
            pa.field(
                "data",
                message_struct(events_pb2.JobEvent.DESCRIPTOR),
                nullable=False,
                metadata={"proto_message": events_pb2.JobEvent.DESCRIPTOR.full_name},
            ),  # fmt: skip
            pa.field("data_raw", pa.binary(), nullable=False),
        ]
        _SCHEMA = pa.schema(cols, metadata={"loam.dataschema": cloudevents.DATASCHEMA})
    return _SCHEMA


# -- values ----------------------------------------------------------------------------------
def message_to_data(msg) -> dict[str, Any]:
    """A message as the Python value of its struct column."""
    out: dict[str, Any] = {}
    for fd in msg.DESCRIPTOR.fields:
        v = getattr(msg, fd.name)
        if _is_map(fd):
            vfd = fd.message_type.fields_by_name["value"]
            out[fd.name] = [
                (k, message_to_data(x) if vfd.type == vfd.TYPE_MESSAGE else x) for k, x in sorted(v.items())
            ]
        elif _is_repeated(fd):
            out[fd.name] = [message_to_data(x) for x in v] if fd.type == fd.TYPE_MESSAGE else list(v)
        elif fd.type == fd.TYPE_MESSAGE:
            out[fd.name] = message_to_data(v) if msg.HasField(fd.name) else None
        else:
            out[fd.name] = v
    return out


def data_to_message(data: dict[str, Any], msg) -> Any:
    """Fill `msg` from a struct value (the inverse of `message_to_data`)."""
    for fd in msg.DESCRIPTOR.fields:
        v = data.get(fd.name)
        if v is None:
            continue
        if _is_map(fd):
            vfd = fd.message_type.fields_by_name["value"]
            target = getattr(msg, fd.name)
            for k, x in v.items() if isinstance(v, dict) else v:
                if vfd.type == vfd.TYPE_MESSAGE:
                    data_to_message(x, target[k])
                else:
                    target[k] = x
        elif _is_repeated(fd):
            target = getattr(msg, fd.name)
            for x in v:
                data_to_message(x, target.add()) if fd.type == fd.TYPE_MESSAGE else target.append(x)
        elif fd.type == fd.TYPE_MESSAGE:
            data_to_message(v, getattr(msg, fd.name))
            getattr(msg, fd.name).SetInParent()
        else:
            setattr(msg, fd.name, v)
    return msg


def event_from_data(data: dict[str, Any]) -> events_pb2.JobEvent:
    return data_to_message(data, events_pb2.JobEvent())


def events_table(ns: str, evs: Iterable[events_pb2.JobEvent], *, org: str | None = None):
    """An Arrow table of job events (one row each, in the order given)."""
    pa = _pa()
    sch = schema()
    cols: dict[str, list] = {f.name: [] for f in sch}
    org = org or cloudevents.org()
    for ev in evs:
        attrs = cloudevents.attributes(ns, ev, org=org)
        for c in ATTRIBUTE_COLUMNS:
            cols[c].append(attrs.get(c))
        cols["time"].append(ev.time_ns)
        cols["ext"].append([])
        cols["ext_types"].append([])
        cols["data"].append(message_to_data(ev))
        cols["data_raw"].append(ev.SerializeToString(deterministic=True))
    arrays = [pa.array(cols[f.name], type=f.type) for f in sch]
    return pa.Table.from_arrays(arrays, schema=sch)


# -- reading a queue's events ---------------------------------------------------------------------
def _read_page(tx, ns: str, queue: str, after: dict[int, int]) -> dict[int, list[events_pb2.JobEvent]]:
    shards = events.event_shards(tx, ns, queue)
    return {s: events.events_after(tx, ns, queue, s, after.get(s, 0), PAGE) for s in shards}


async def read_events(store: Store, ns: str, queue: str, since_ns: int = 0, until_ns: int | None = None
                      ) -> list[events_pb2.JobEvent]:  # fmt: skip
    """The retained events of a queue with `since_ns <= time < until_ns`, by time (then
    shard and sequence)."""
    after: dict[int, int] = {}
    done: set[int] = set()
    past: dict[int, int] = {}
    out: list[events_pb2.JobEvent] = []
    while True:
        pages = await store.snapshot(_read_page, ns, queue, after)
        progressed = False
        for shard, page in pages.items():
            if shard in done or not page:
                done.add(shard)
                continue
            progressed = True
            for ev in page:
                if until_ns is not None and ev.time_ns >= until_ns:
                    first = past.setdefault(shard, ev.time_ns)
                    if ev.time_ns - first > CLOCK_SKEW_NS:
                        done.add(shard)
                        break
                    continue
                if ev.time_ns >= since_ns:
                    out.append(ev)
            after[shard] = page[-1].seq
            if len(page) < PAGE:
                done.add(shard)
        if not progressed or all(s in done for s in pages):
            break
    out.sort(key=lambda e: (e.time_ns, e.shard, e.seq))
    return out


async def export_events(store: Store, ns: str, queue: str, since_ns: int = 0, until_ns: int | None = None,
                        *, org: str | None = None):  # fmt: skip
    """The Arrow table of a queue's events in `[since_ns, until_ns)`."""
    return events_table(ns, await read_events(store, ns, queue, since_ns, until_ns), org=org)


async def export_bytes(
    store: Store, ns: str, queue: str, since_ns: int, until_ns: int | None, fmt: str
) -> tuple[bytes, str]:
    """A queue's events in [since_ns, until_ns) as `parquet` or `arrow` bytes, and the media type."""
    validate.name("queue", queue)
    if fmt not in FORMATS:
        raise InvalidArgument("format", f"one of {', '.join(FORMATS)}")
    for name, v in (("since_ns", since_ns), ("until_ns", until_ns)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            raise InvalidArgument(name, "must be a non-negative integer (ns since the epoch)")
    table = await export_events(store, ns, queue, since_ns, until_ns)
    return table_bytes(table, fmt), FORMATS[fmt]


def write_table(table, sink: Any, fmt: str = "parquet") -> None:
    """Write to a path or a binary file object, as `parquet` or `arrow` (IPC file)."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, sink)
    elif fmt == "arrow":
        pa = _pa()
        with pa.ipc.new_file(sink, table.schema) as w:
            w.write_table(table)
    else:
        raise ValueError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")


def table_bytes(table, fmt: str = "parquet") -> bytes:
    buf = io.BytesIO()
    write_table(table, buf, fmt)
    return buf.getvalue()


def read_table(source: Any, fmt: str = "parquet"):
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(source)
    pa = _pa()
    return pa.ipc.open_file(source).read_all()
