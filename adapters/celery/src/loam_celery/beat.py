"""The beat scheduler `loam` (spec §7.1.6): beat entries become Loam schedules, and the
server fires them.

`sync_schedules(app)` upserts every `beat_schedule` entry as a schedule whose id is the
entry name: `crontab` -> cron (in the app's time zone), a `timedelta` / number ->
`every`; `solar` (and any other schedule class) is refused with a clear message, before
anything is written. The job template is the task message the entry would publish,
made deterministic (fixed placeholder id, no origin), so the same entry upserts to "no
change"; each tick gets its own task id when it is delivered (messages.py). Schedules
this app synced earlier and no longer in `beat_schedule` are removed.

`LoamScheduler` does that on start and then only sleeps: running it twice, or
restarting it, neither duplicates nor misses a tick, because the server fires each
(schedule, tick) once. `loam-celery sync-schedules <app>` does the upsert with no beat
process at all."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass
from typing import Any

from celery.beat import ScheduleEntry, Scheduler
from celery.exceptions import ImproperlyConfigured
from celery.schedules import crontab, schedule, solar
from kombu import Connection
from kombu.transport import virtual

from loam_celery import messages
from loam_celery.connection import Settings, client_for, declare_queue
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb

HEADER_APP = "x-loam-celery-app"  # on each synced schedule's task: the app that owns it
PLACEHOLDER_NS = uuid.UUID("b0c2a7e4-51f3-4d8e-8f0a-2c6d9e1b3a57")
SEC = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Synced:
    name: str
    changed: bool


# -- rules -------------------------------------------------------------------------------------
def _field(values: set[int], lo: int, hi: int) -> str:
    if set(values) == set(range(lo, hi + 1)):
        return "*"
    return ",".join(str(v) for v in sorted(values))


def _tz_name(sched: Any, app: Any) -> str:
    tz = getattr(sched, "tz", None) or app.timezone
    name = getattr(tz, "key", None) or getattr(tz, "zone", None) or str(tz or "UTC")
    return "UTC" if name in ("utc", "UTC", "Etc/UTC") else name


def rule_of(name: str, sched: Any, app: Any) -> dict[str, Any]:
    """{"cron", "tz"} or {"every_ns"} for one entry; ImproperlyConfigured if Loam cannot
    fire it."""
    if isinstance(sched, solar):
        raise ImproperlyConfigured(
            f"beat entry {name!r} uses solar({sched.event!r}, ...): Loam schedules take cron "
            "rules and intervals, not solar events; keep the standard scheduler for solar entries"
        )
    if isinstance(sched, crontab):
        cron = " ".join((
            _field(sched.minute, 0, 59), _field(sched.hour, 0, 23), _field(sched.day_of_month, 1, 31),
            _field(sched.month_of_year, 1, 12), _field(sched.day_of_week, 0, 6),
        ))  # fmt: skip
        return {"cron": cron, "tz": _tz_name(sched, app)}
    if type(sched) is schedule:
        every = sched.run_every
        seconds = every.total_seconds() if isinstance(every, dt.timedelta) else float(every)
        if seconds <= 0:
            raise ImproperlyConfigured(f"beat entry {name!r}: the interval must be positive")
        return {"every_ns": int(round(seconds * SEC))}
    raise ImproperlyConfigured(
        f"beat entry {name!r} uses {type(sched).__name__}: Loam schedules take crontab and "
        "intervals (timedelta or seconds) only"
    )


# -- the message template -------------------------------------------------------------------------
class _CaptureChannel(virtual.Channel):
    def basic_publish(self, message: dict, exchange: str, routing_key: str, **kwargs: Any) -> None:
        self._inplace_augment_message(message, exchange, routing_key)
        self.connection.captured.append((message, exchange, routing_key))


class _CaptureTransport(virtual.Transport):
    """Records what a publish would send instead of sending it."""

    Channel = _CaptureChannel
    implements = virtual.Transport.implements.extend(exchange_type=frozenset(["direct", "topic", "fanout"]))

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        self.captured: list[tuple[dict, str, str]] = []


def task_message(app: Any, entry: ScheduleEntry) -> tuple[dict[str, Any], str, str]:
    """The message `entry` would publish, its exchange and routing key."""
    options = dict(entry.options or {})
    expires_in = options.pop("expires", None)
    options.pop("countdown", None)
    options.pop("eta", None)
    options.setdefault("headers", {})["celery_beat_task"] = True
    placeholder = str(uuid.uuid5(PLACEHOLDER_NS, entry.name))
    with Connection(transport=_CaptureTransport) as conn:
        with app.producer_or_acquire(conn.Producer()) as producer:
            app.send_task(
                entry.task, entry.args, entry.kwargs, producer=producer, task_id=placeholder, **options
            )
        message, exchange, routing_key = conn.transport.captured[-1]
    headers = message["headers"]
    headers["origin"] = "loam-schedule"
    for key in ("eta", "expires"):
        headers.pop(key, None)
    if isinstance(expires_in, (int, float)) and not isinstance(expires_in, bool):
        headers[messages.HEADER_EXPIRES_IN] = float(expires_in)
    props = message["properties"]
    props["delivery_tag"] = placeholder
    props.pop("reply_to", None)
    props.pop("expiration", None)
    return message, exchange, routing_key


def _queue_for(client: Any, exchange: str, routing_key: str) -> str:
    if not exchange:
        return routing_key
    for b in client.exchange_bindings(exchange):
        if b.routing_key == routing_key:
            return b.queue
    return routing_key


# -- syncing ---------------------------------------------------------------------------------------
def _entries(app: Any, beat_schedule: dict[str, Any] | None) -> dict[str, ScheduleEntry]:
    raw = app.conf.beat_schedule if beat_schedule is None else beat_schedule
    out = {}
    for name, entry in (raw or {}).items():
        if isinstance(entry, ScheduleEntry):
            out[name] = entry
        else:
            out[name] = ScheduleEntry(**dict(entry, name=name, app=app))
    return out


def app_settings(app: Any) -> tuple[Settings, float]:
    opts = dict(app.conf.broker_transport_options or {})
    url = app.conf.broker_url or "loam://"
    if isinstance(url, (list, tuple)):
        url = url[0]
    return Settings.from_url(url.split(";")[0], opts), float(opts.get("visibility_timeout") or 60)


def sync_schedules(
    app: Any, beat_schedule: dict[str, Any] | None = None, *, prune: bool = True
) -> list[Synced]:
    """Upsert every beat entry as a Loam schedule (id = entry name); remove this app's
    schedules that are no longer entries. Refuses (before writing) entries Loam cannot fire."""
    entries = _entries(app, beat_schedule)
    rules = {name: rule_of(name, e.schedule, app) for name, e in entries.items()}
    settings, visibility = app_settings(app)
    client = client_for(settings)
    owner = app.main or "celery"
    out, declared = [], set()
    for name, entry in entries.items():
        message, exchange, routing_key = task_message(app, entry)
        queue = _queue_for(client, exchange, routing_key)
        if queue not in declared:
            declare_queue(client, queue, visibility)
            declared.add(queue)
        spec = pb.ScheduleSpec(id=name, queue=queue, **rules[name])
        spec.task.name = str(entry.task)
        spec.task.headers[HEADER_APP] = owner
        spec.task.payload.data = json.dumps(
            message, sort_keys=True, separators=(",", ":"), default=str
        ).encode()
        spec.task.payload.content_type = messages.CONTENT_TYPE
        order = (app.conf.broker_transport_options or {}).get("priority_order", "redis")
        prio = messages.loam_priority(message["properties"].get("priority"), order)
        if prio:
            spec.opts.priority = prio
        out.append(Synced(name, client.schedule(spec).changed))
    if prune:
        for rec in list(client.iter_schedules()):
            if rec.task.headers.get(HEADER_APP) == owner and rec.id not in entries:
                client.unschedule(rec.id)
    return out


class LoamScheduler(Scheduler):
    """`beat_scheduler = "loam"`: sync on start, then let the server fire the entries."""

    def setup_schedule(self) -> None:
        self.install_default_entries(self.data)
        self.merge_inplace(self.app.conf.beat_schedule)
        synced = sync_schedules(self.app, self.schedule)
        changed = sum(1 for s in synced if s.changed)
        self.logger.info("loam: %d beat entries synced as Loam schedules (%d changed); the server fires them",
                         len(synced), changed)  # fmt: skip

    def tick(self, *args: Any, **kwargs: Any) -> float:
        return self.max_interval  # nothing to send: Loam fires the schedules

    def sync(self) -> None:
        pass

    @property
    def info(self) -> str:
        settings, _ = app_settings(self.app)
        return f"loam schedules at {settings.url} (namespace {settings.namespace or 'default'})"


def schedules_of(app: Any) -> list[pb.ScheduleRecord]:
    """The Loam schedules this app synced."""
    settings, _ = app_settings(app)
    owner = app.main or "celery"
    return [r for r in client_for(settings).iter_schedules() if r.task.headers.get(HEADER_APP) == owner]
