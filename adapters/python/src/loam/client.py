"""The Loam Jobs client: `Client` (asyncio) over the generated Connect client, and
`SyncClient`, which runs one `Client` on an event loop in a background thread.

Every call sends the caller's credential (a bearer token) or, on a dev server without
auth, the namespace header; the namespace is never a request field. Errors come back
as the typed classes of `loam.errors` (spec §5.3). Every `enqueue` carries an
idempotency key by default, made once per call and reused across that call's retries
on Unavailable, so a retried enqueue never makes a second job (§5.3)."""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import inspect
import json
import os
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, Literal, TypeVar

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from pyqwest import Client as HTTPClient

from loam import options, payloads
from loam.async_unary import AsyncUnaryClient
from loam.blocking import BlockingJobsClient
from loam.errors import JobsError, NotFound, Unavailable, from_connect, from_item
from loam.flows import Flow, FlowNode, flow_spec
from loam.views import (
    Child,
    Completed,
    Enqueued,
    FlowInfo,
    JobInfo,
    LeasedJob,
    Page,
    ScheduleInfo,
    state_value,
)
from loam_common.api.headers import NAMESPACE_HEADER
from loam_common.gen.loam.jobs.v1 import engines_pb2 as epb
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as jpb
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:7720"


def env_url() -> str | None:
    """The server URL from the environment: $LOAM_URL, every Loam client's name for it,
    or $LOAM_JOBS_URL, accepted as an alias (@loam/bullmq's earlier name); None if unset."""
    return os.environ.get("LOAM_URL") or os.environ.get("LOAM_JOBS_URL") or None


DEV_NAMESPACE = "default"
#: retries of a call that failed with Unavailable (enqueue, enqueue_bulk), with backoff
RETRIES = 3

Token = jpb.LeaseToken | LeasedJob


_UUID7_CLEAR = ~(0xF << 76 | 0x3 << 62)
_UUID7_SET = 0x7 << 76 | 0x2 << 62  # version 7, RFC 4122 variant


def uuid7() -> str:
    """A UUIDv7 (RFC 9562): 48-bit Unix ms, version, 74 random bits. Time-ordered, so
    the server's idempotency records for one producer stay close in the key space."""
    return uuid7s(1)[0]


def uuid7s(n: int) -> list[str]:
    """`n` UUIDv7s from one clock reading and one read of the random source: a bulk
    enqueue makes one per job, and `uuid.UUID` objects cost more than the jobs' messages."""
    ms = (time.time_ns() // 1_000_000 & (1 << 48) - 1) << 80
    rand = os.urandom(10 * n)
    out = []
    for i in range(0, 10 * n, 10):
        h = f"{(ms | int.from_bytes(rand[i : i + 10], 'big')) & _UUID7_CLEAR | _UUID7_SET:032x}"
        out.append(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
    return out


def worker_id() -> str:
    """host/pid/random, as spec §4 names workers."""
    return f"{socket.gethostname()}/{os.getpid()}/{os.urandom(3).hex()}"


def _token(t: Token) -> jpb.LeaseToken:
    return t.token if isinstance(t, LeasedJob) else t


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else max(int(seconds * 1000), 1)


_MISFIRE = {
    "fire_latest": pb.MISFIRE_POLICY_FIRE_LATEST,
    "latest": pb.MISFIRE_POLICY_FIRE_LATEST,
    "skip": pb.MISFIRE_POLICY_SKIP,
    "fire_all": pb.MISFIRE_POLICY_FIRE_ALL,
    "all": pb.MISFIRE_POLICY_FIRE_ALL,
}


def misfire_policy(value: str | int | None) -> int:
    """'fire_latest' (default), 'skip' or 'fire_all' (or the enum value) → MisfirePolicy."""
    if value is None:
        return pb.MISFIRE_POLICY_UNSPECIFIED
    if isinstance(value, int):
        return value
    key = str(value).strip().lower().replace("-", "_")
    if key not in _MISFIRE:
        raise ValueError(f"unknown misfire policy {value!r}; one of fire_latest, skip, fire_all")
    return _MISFIRE[key]


def _tz_name(tz: str | dt.tzinfo | None) -> str:
    if tz is None or isinstance(tz, str):
        return tz or ""
    key = getattr(tz, "key", None)  # zoneinfo.ZoneInfo
    if key:
        return key
    if tz is dt.UTC:
        return "UTC"
    raise TypeError(f"tz: an IANA zone name or a zoneinfo.ZoneInfo, not {tz!r}")


def _schedule_spec(
    schedule_id: str, queue: str, name: str, payload: Any, *, cron: str | None, tz: str | dt.tzinfo | None,
    every: float | dt.timedelta | None, limit: int | None, start: dt.datetime | float | None,
    end: dt.datetime | float | None, offset: float | dt.timedelta | None, immediately: bool,
    misfire: str | int | None, misfire_grace: float | dt.timedelta | None, opts: Mapping[str, Any],
) -> pb.ScheduleSpec:  # fmt: skip
    o, headers = options.enqueue_opts(opts)
    return pb.ScheduleSpec(
        id=schedule_id,
        queue=queue,
        task=pb.TaskSpec(name=name, payload=payloads.encode(payload), headers=headers),
        opts=o,
        cron=cron or "",
        tz=_tz_name(tz),
        every_ns=payloads.ns(every, "every"),
        limit=int(limit or 0),
        start_ns=payloads.at_ns(start, "start") if start is not None else 0,
        end_ns=payloads.at_ns(end, "end") if end is not None else 0,
        offset_ns=payloads.ns(offset, "offset"),
        immediately=bool(immediately),
        misfire=misfire_policy(misfire),
        misfire_grace_ns=payloads.ns(misfire_grace, "misfire_grace"),
    )


class Client:
    """An asyncio client of one Loam Jobs server.

    `url` defaults to $LOAM_URL (alias $LOAM_JOBS_URL), then http://127.0.0.1:7720; `token` to $LOAM_TOKEN;
    `namespace` (dev servers without auth) to $LOAM_NAMESPACE, then "default".
    `timeout` bounds each call in seconds (a long-poll lease gets its wait on top)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        namespace: str | None = None,
        timeout: float | None = 30.0,
        retries: int = RETRIES,
        idempotent: bool = True,
        http_transport: Any = None,
        blocking: bool = False,
    ) -> None:
        self.url = (url or env_url() or DEFAULT_URL).rstrip("/")
        self.token = token if token is not None else os.environ.get("LOAM_TOKEN") or None
        ns = namespace if namespace is not None else os.environ.get("LOAM_NAMESPACE") or None
        self.namespace = ns or (None if self.token else DEV_NAMESPACE)
        self.timeout = timeout
        self.retries = retries
        self.idempotent = idempotent
        headers: dict[str, str] = {}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        if self.namespace:
            headers[NAMESPACE_HEADER] = self.namespace
        self._headers = headers
        self._worker_id: str | None = None
        #: `blocking` (what SyncClient uses): every call is made in the caller's thread
        #: (loam.blocking) and the coroutines complete without suspending.
        self._blocking = blocking
        if blocking:
            self._transport = self._http = None
            self._rpc: Any = BlockingJobsClient(self.url)
            return
        # The REST reads (`list_queues`) go over this client's own connections unless a
        # pyqwest Transport is given (`http_transport`, with `aclose`). No pyqwest runtime
        # is started otherwise: its threads could abort the interpreter at exit, which
        # turned a finished `loam queues ls` into SIGABRT.
        self._transport = http_transport
        self._http = HTTPClient(http_transport) if http_transport is not None else None
        # JobsService's calls on this loop (loam.async_unary): no thread hand-off per call.
        # No request compression: the payloads are small protobufs and gzip costs more
        # CPU per job than it saves on a local network.
        self._rpc = AsyncUnaryClient(self.url, timeout_ms=_ms(timeout))

    def __repr__(self) -> str:
        return f"Client({self.url!r}, namespace={self.namespace!r})"

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._blocking:
            self._rpc.close()
            return
        await self._rpc.close()
        if self._transport is not None:
            await self._transport.aclose()

    @property
    def worker(self) -> str:
        """This client's default worker id for leases."""
        if self._worker_id is None:
            self._worker_id = worker_id()
        return self._worker_id

    # -- transport -------------------------------------------------------------------
    async def _call(
        self, method: Callable[..., Awaitable[T]], request: Any, *, timeout: float | None = None
    ) -> T:
        try:
            if self._blocking:
                return method(request, headers=self._headers, timeout_ms=_ms(timeout))  # type: ignore[return-value]
            return await method(request, headers=self._headers, timeout_ms=_ms(timeout))
        except ConnectError as e:
            task = None if self._blocking else asyncio.current_task()
            if e.code is Code.CANCELED and task is not None and task.cancelling():
                raise asyncio.CancelledError from None  # connectrpc turns our cancel into an error
            raise from_connect(e) from None

    async def _retrying(self, method: Callable[..., Awaitable[T]], request: Any) -> T:
        """Retry on Unavailable, with backoff: only for calls whose request carries what
        makes a repeat harmless (an idempotency key, a job key)."""
        delay = 0.1
        for attempt in range(self.retries + 1):
            try:
                return await self._call(method, request)
            except Unavailable:
                if attempt == self.retries:
                    raise
                if self._blocking:
                    time.sleep(delay)
                else:
                    await asyncio.sleep(delay)
                delay *= 3
        raise AssertionError("unreachable")

    # -- producing -------------------------------------------------------------------
    def _fill(
        self, task: pb.TaskSpec, o: pb.EnqueueOpts, name: str, payload: Any, opts: Mapping[str, Any],
        auto_key: bool = True,
    ) -> None:  # fmt: skip
        """Write one job into its request's `task` and `opts` in place (building separate
        messages and copying them in costs a bulk call more than all else it does).
        `auto_key`: give the job an idempotency key of its own when the caller gave none
        (a bulk call has one for the whole call instead)."""
        task.name = name
        if payload is None:
            task.payload.SetInParent()
        else:
            task.payload.CopyFrom(payloads.encode(payload))
        if opts:
            built, headers = options.enqueue_opts(opts)
            o.CopyFrom(built)
            if headers:
                task.headers.update(headers)
            if opts.get("idempotency_key") is not None:
                return  # given (or False: none)
        if auto_key and self.idempotent and not o.HasField("idempotency"):
            o.idempotency.key = uuid7()
            if opts.get("idempotency_ttl") is not None:
                o.idempotency.ttl_ns = payloads.ns(opts["idempotency_ttl"], "idempotency_ttl")

    async def enqueue(self, queue: str, name: str, payload: Any = None, **opts: Any) -> Enqueued:
        """Add one job. `payload`: bytes, str or anything JSON can encode. `opts`:
        job_key, idempotency_key (False: none), idempotency_ttl, dedup, delay (seconds
        or timedelta) or at (datetime), priority, lifo, attempts, backoff, visibility,
        timeout, expires, subject, headers, parent, remove_on_complete, remove_on_fail,
        result_ttl, durable_function, opts (a ready-made EnqueueOpts)."""
        req = jpb.EnqueueRequest(queue=queue)
        self._fill(req.task, req.opts, name, payload, opts)
        resp = await self._retrying(self._rpc.enqueue, req)
        return Enqueued.from_pb(resp.enqueued)

    async def enqueue_bulk(
        self,
        queue: str,
        jobs: Iterable[Any],
        *,
        idempotency_key: str | Literal[False] | None = None,
        idempotency_ttl: float | dt.timedelta | None = None,
    ) -> list[Enqueued | JobsError]:
        """Add many jobs in one call and one transaction. Each job is a dict
        `{"name", "payload", **opts}`, a `(name, payload)` or `(name, payload, opts)`
        tuple, or a BulkItem. A job refused for its key gets its error in its slot.
        `idempotency_key`: the call's (made here when None and the client is idempotent;
        False: none): a retry with it gets the first call's answers and adds nothing. A
        job's own `idempotency_key` still applies to that job."""
        req = jpb.EnqueueBulkRequest(queue=queue)
        add = req.jobs.add
        for job in jobs:
            if isinstance(job, jpb.BulkItem):
                add().CopyFrom(job)
                continue
            item = add()
            if isinstance(job, Mapping):
                rest = {k: v for k, v in job.items() if k not in ("name", "payload")}
                self._fill(item.task, item.opts, job["name"], job.get("payload"), rest, auto_key=False)
            else:
                name, payload, *more = job
                self._fill(item.task, item.opts, name, payload, more[0] if more else {}, auto_key=False)
        if idempotency_key is None:
            idempotency_key = uuid7() if self.idempotent else False
        if idempotency_key is not False:  # an empty one is the server's to refuse
            req.idempotency.key = idempotency_key
            if idempotency_ttl is not None:
                req.idempotency.ttl_ns = payloads.ns(idempotency_ttl, "idempotency_ttl")
        resp = await self._retrying(self._rpc.enqueue_bulk, req)
        return [
            Enqueued.from_pb(r.enqueued)
            if r.WhichOneof("result") == "enqueued"
            else from_item(r.error.code, r.error.message)
            for r in resp.results
        ]

    async def write_batch(self, items: Iterable[Mapping[str, Any]]) -> list[Enqueued | str]:
        """Several writes in one transaction, all or none: each item is
        `{"enqueue": {"queue", "name", "payload", **opts}}`, `{"cancel": {"queue", "job",
        "reason"}}` (a job that has not started) or `{"result_set": {"key", "value", "ttl"}}`.
        One answer per item: Enqueued, or the canceled job's id, or the result key set.
        A refused item raises its error, naming `items[i]`, and nothing is written."""
        req = jpb.WriteBatchRequest()
        for i, item in enumerate(items):
            if len(item) != 1:
                raise ValueError(f"items[{i}]: one of enqueue, cancel, result_set")
            ((kind, spec),) = item.items()
            if kind == "enqueue":
                rest = {k: v for k, v in spec.items() if k not in ("queue", "name", "payload")}
                enq = req.items.add().enqueue
                enq.queue = spec["queue"]
                self._fill(enq.task, enq.opts, spec["name"], spec.get("payload"), rest)
            elif kind == "cancel":
                cancel = jpb.WriteItem.Cancel(
                    queue=spec["queue"], job=spec["job"], reason=spec.get("reason", "")
                )
                req.items.add(cancel=cancel)
            elif kind == "result_set":
                value, ttl = payloads.encode(spec.get("value")), payloads.ns(spec.get("ttl"), "ttl")
                req.items.add(result_set=jpb.ResultSetRequest(key=spec["key"], value=value, ttl_ns=ttl))
            else:
                raise ValueError(f"items[{i}]: one of enqueue, cancel, result_set, not {kind!r}")
        resp = await self._call(self._rpc.write_batch, req)
        out: list[Enqueued | str] = []
        for o in resp.outcomes:
            kind = o.WhichOneof("kind")
            if kind == "enqueued":
                out.append(Enqueued.from_pb(o.enqueued))
            elif kind == "canceled":
                out.append(o.canceled.job)
            else:
                out.append(o.result_stored.key)
        return out

    # -- consuming -------------------------------------------------------------------
    async def lease(
        self,
        queues: str | Iterable[str],
        *,
        max: int = 1,  # noqa: A002 - the spec's name
        wait: float | dt.timedelta = 0,
        worker: str | None = None,
        names: Iterable[str] | None = None,
        subject_batch: int = 0,
    ) -> list[LeasedJob]:
        """Up to `max` jobs from `queues` (in order of preference), waiting up to `wait`
        seconds (at most 30) for one to arrive. `subject_batch`: after a job with a
        subject, up to that many consecutive jobs of its subject and task name with it
        (in `max`), run in order; complete them together with `complete_batch`."""
        qs = [queues] if isinstance(queues, str) else list(queues)
        wait_ns = payloads.ns(wait, "wait")
        req = jpb.LeaseRequest(queues=qs, worker=worker or self.worker, max=max, wait_ns=wait_ns,
                               names=names or (), subject_batch=subject_batch)  # fmt: skip
        timeout = None if self.timeout is None else self.timeout + wait_ns / 1e9
        resp = await self._call(self._rpc.lease, req, timeout=timeout)
        return [LeasedJob(lease) for lease in resp.leases]

    async def end_lease_wait(self, queues: str | Iterable[str], *, worker: str | None = None) -> int:
        """Answer `worker`'s waiting Leases of `queues` now, each with the jobs it holds:
        how a worker stops waiting without losing a job leased for it meanwhile. Returns
        how many were waiting (0: the worker's next waiting Lease answers at once)."""
        qs = [queues] if isinstance(queues, str) else list(queues)
        req = jpb.EndLeaseWaitRequest(queues=qs, worker=worker or self.worker)
        return (await self._call(self._rpc.end_lease_wait, req)).ended

    async def extend(self, token: Token, by: float | dt.timedelta) -> int:
        """Move the lease deadline to now + `by` (never past the job's timeout);
        returns the new deadline (ns)."""
        req = jpb.ExtendRequest(token=_token(token), by_ns=payloads.ns(by, "by"))
        return (await self._call(self._rpc.extend, req)).deadline_ns

    async def complete(self, token: Token, outcome: jpb.Outcome | None = None) -> Completed:
        """Record a job's outcome (default: Ok with no result). See `loam.Outcome`."""
        req = jpb.CompleteRequest(token=_token(token), outcome=outcome or options.Outcome.ok())
        return Completed.from_pb((await self._call(self._rpc.complete, req)).completed)

    async def complete_batch(
        self, items: Iterable[tuple[Token, jpb.Outcome] | jpb.CompleteRequest]
    ) -> list[Completed | JobsError]:
        """Many completions in one call and one transaction; one answer per item."""
        reqs = [
            i if isinstance(i, jpb.CompleteRequest) else jpb.CompleteRequest(token=_token(i[0]), outcome=i[1])
            for i in items
        ]
        resp = await self._call(self._rpc.complete_batch, jpb.CompleteBatchRequest(items=reqs))
        return [
            Completed.from_pb(r.completed)
            if r.WhichOneof("result") == "completed"
            else from_item(r.error.code, r.error.message)
            for r in resp.results
        ]

    async def report(
        self,
        token: Token,
        *,
        progress: Any = None,
        log: str | None = None,
        data: Any = None,
        progress_json: bytes | None = None,
    ) -> None:
        """Progress (any JSON value), a log line, and/or new job data, for a job held."""
        req = jpb.ReportRequest(token=_token(token))
        if progress_json is not None:
            req.progress = progress_json
        elif progress is not None:
            req.progress = json.dumps(progress).encode()
        if log is not None:
            req.log_line = log
        if data is not None:
            req.data.CopyFrom(payloads.encode(data))
        await self._call(self._rpc.report, req)

    # -- queue admin -----------------------------------------------------------------
    async def queue_admin(self, queue: str, op: jpb.QueueOp) -> jpb.QueueAdminResponse:
        return await self._call(self._rpc.queue_admin, jpb.QueueAdminRequest(queue=queue, op=op))

    @staticmethod
    def _queue_config(queue: str, config: Mapping[str, Any]) -> pb.QueueConfig:
        c = pb.QueueConfig(name=queue)
        for key, value in config.items():
            if value is None:
                continue
            if key == "visibility":
                c.visibility_ns = payloads.ns(value, key)
            elif key == "backoff":
                c.backoff.CopyFrom(options.backoff(value))
            elif key == "rate_limit":
                mx, per = value if isinstance(value, tuple) else (value["max"], value["duration"])
                c.rate_limit.CopyFrom(
                    pb.RateLimit(max=mx, duration_ns=payloads.ns(per, "rate_limit.duration"))
                )
            elif key in ("attempts", "max_stalled", "concurrency", "shards", "log_cap", "payload_limit"):
                setattr(c, key, int(value))
            elif key in ("dead_letter_queue", "dead_letter_on_exhausted", "paused"):
                setattr(c, key, value)
            elif key in ("remove_on_complete", "remove_on_fail"):
                options._retention(
                    c.retention, "completed" if key == "remove_on_complete" else "failed", value
                )
            elif key == "config":
                c.MergeFrom(value)
            else:
                raise TypeError(f"unknown queue setting {key!r}")
        return c

    async def list_queues(self) -> list[dict[str, Any]]:
        """Every queue of the namespace with its counts: `[{"name", "counts"}]`. From
        the gateway's REST facade (`GET /v1/queues`): JobsService has no listing call."""
        try:
            if self._http is not None:
                resp = await asyncio.wait_for(
                    self._http.get(f"{self.url}/v1/queues", headers=self._headers), self.timeout
                )
                status, content = resp.status, resp.content
            else:
                status, content = await asyncio.wait_for(
                    self._rpc.get("/v1/queues", headers=self._headers), self.timeout
                )
        except TimeoutError:
            raise from_item("deadline_exceeded", f"GET {self.url}/v1/queues timed out") from None
        except Exception as e:  # connection refused, reset, ...
            raise from_item("unavailable", f"GET {self.url}/v1/queues: {e}") from None
        try:
            body = json.loads(content or b"{}")
        except ValueError:
            body = {}
        if status == 404 and "code" not in body:
            raise from_item(
                "not_found", f"{self.url} has no /v1/queues: point the client at a gateway or `loam dev`"
            )
        if status != 200:
            raise from_item(body.get("code", "unavailable" if status >= 500 else "internal"),
                            body.get("message", f"GET /v1/queues answered HTTP {status}"))  # fmt: skip
        return list(body.get("queues", []))

    async def create_queue(self, queue: str, **config: Any) -> pb.QueueConfig:
        """Create a queue with settings: visibility, attempts, backoff, max_stalled,
        rate_limit=(max, seconds), concurrency, shards, dead_letter_queue,
        dead_letter_on_exhausted, remove_on_complete, remove_on_fail, log_cap,
        payload_limit. Queues also spring into being on first enqueue."""
        op = jpb.QueueOp(create=jpb.QueueOp.Create(config=self._queue_config(queue, config)))
        return (await self.queue_admin(queue, op)).config

    async def update_queue(self, queue: str, **config: Any) -> pb.QueueConfig:
        op = jpb.QueueOp(update=jpb.QueueOp.Update(config=self._queue_config(queue, config)))
        return (await self.queue_admin(queue, op)).config

    async def queue_counts(self, queue: str) -> dict[str, Any]:
        """Jobs per state (`waiting`, ..., `dead_lettered`), and `paused`."""
        counts = (await self.queue_admin(queue, jpb.QueueOp(counts=jpb.QueueOp.Counts()))).counts
        return {f.name: getattr(counts, f.name) for f in counts.DESCRIPTOR.fields}

    async def pause(self, queue: str) -> None:
        await self.queue_admin(queue, jpb.QueueOp(pause=jpb.QueueOp.Pause()))

    async def resume(self, queue: str) -> None:
        await self.queue_admin(queue, jpb.QueueOp(resume=jpb.QueueOp.Resume()))

    async def drain(self, queue: str, *, delayed: bool = False, limit: int = 0) -> int:
        """Remove the waiting jobs (and the delayed ones with `delayed`): at most `limit`,
        or (0) all of them; how many went. Steps with a limit suit a big queue: each call
        ends quickly, and the caller can show progress."""
        op = jpb.QueueOp.Drain(delayed=delayed, limit=limit)
        return (await self.queue_admin(queue, jpb.QueueOp(drain=op))).affected

    async def clean(
        self, queue: str, state: str | int = "completed", *, grace: float | dt.timedelta = 0, limit: int = 0
    ) -> int:
        """Remove up to `limit` jobs in `state` older than `grace` seconds; how many."""
        op = jpb.QueueOp(
            clean=jpb.QueueOp.Clean(state=state_value(state), grace_ns=payloads.ns(grace), limit=limit)
        )
        return (await self.queue_admin(queue, op)).affected

    async def obliterate(self, queue: str, *, force: bool = False) -> int:
        return (
            await self.queue_admin(queue, jpb.QueueOp(obliterate=jpb.QueueOp.Obliterate(force=force)))
        ).affected

    async def retry_all(self, queue: str, state: str | int = "failed") -> int:
        op = jpb.QueueOp(retry_all=jpb.QueueOp.RetryAll(state=state_value(state)))
        return (await self.queue_admin(queue, op)).affected

    async def promote_all(self, queue: str) -> int:
        return (await self.queue_admin(queue, jpb.QueueOp(promote_all=jpb.QueueOp.PromoteAll()))).affected

    async def redrive_dead_letters(self, queue: str, *, limit: int = 0) -> int:
        op = jpb.QueueOp(redrive_dead_letters=jpb.QueueOp.RedriveDeadLetters(limit=limit))
        return (await self.queue_admin(queue, op)).affected

    async def set_rate_limit(self, queue: str, max: int, per: float | dt.timedelta) -> None:  # noqa: A002
        rl = pb.RateLimit(max=max, duration_ns=payloads.ns(per, "per"))
        await self.queue_admin(queue, jpb.QueueOp(set_rate_limit=jpb.QueueOp.SetRateLimit(rate_limit=rl)))

    async def set_concurrency(self, queue: str, concurrency: int) -> None:
        await self.queue_admin(
            queue, jpb.QueueOp(set_concurrency=jpb.QueueOp.SetConcurrency(concurrency=concurrency))
        )

    async def workers(self, queue: str) -> list[pb.Worker]:
        return list((await self.queue_admin(queue, jpb.QueueOp(workers=jpb.QueueOp.Workers()))).workers)

    # -- job admin -------------------------------------------------------------------
    async def job_admin(self, queue: str, job: str, op: jpb.JobOp) -> jpb.JobAdminResponse:
        """`job` is a job id or a job key."""
        return await self._call(self._rpc.job_admin, jpb.JobAdminRequest(queue=queue, job=job, op=op))

    async def get_job(self, queue: str, job: str) -> JobInfo:
        """The job (by id or job key); NotFound if there is none."""
        return JobInfo((await self.job_admin(queue, job, jpb.JobOp(get=jpb.JobOp.Get()))).job)

    async def retry_job(self, queue: str, job: str) -> JobInfo:
        return JobInfo((await self.job_admin(queue, job, jpb.JobOp(retry=jpb.JobOp.Retry()))).job)

    async def remove_job(self, queue: str, job: str) -> bool:
        return (await self.job_admin(queue, job, jpb.JobOp(remove=jpb.JobOp.Remove()))).removed

    async def promote_job(self, queue: str, job: str) -> JobInfo:
        return JobInfo((await self.job_admin(queue, job, jpb.JobOp(promote=jpb.JobOp.Promote()))).job)

    async def cancel_job(self, queue: str, job: str) -> JobInfo:
        return JobInfo((await self.job_admin(queue, job, jpb.JobOp(cancel=jpb.JobOp.Cancel()))).job)

    async def change_priority(self, queue: str, job: str, priority: int, *, lifo: bool = False) -> JobInfo:
        op = jpb.JobOp(change_priority=jpb.JobOp.ChangePriority(priority=priority, lifo=lifo))
        return JobInfo((await self.job_admin(queue, job, op)).job)

    async def change_delay(self, queue: str, job: str, delay: float | dt.timedelta) -> JobInfo:
        op = jpb.JobOp(change_delay=jpb.JobOp.ChangeDelay(delay_ns=payloads.ns(delay, "delay")))
        return JobInfo((await self.job_admin(queue, job, op)).job)

    async def update_job_data(self, queue: str, job: str, payload: Any) -> JobInfo:
        op = jpb.JobOp(update_data=jpb.JobOp.UpdateData(data=payloads.encode(payload)))
        return JobInfo((await self.job_admin(queue, job, op)).job)

    async def job_logs(self, queue: str, job: str, *, start: int = 0, end: int = 0) -> list[pb.LogLine]:
        op = jpb.JobOp(logs=jpb.JobOp.Logs(start=start, end=end))
        return list((await self.job_admin(queue, job, op)).logs)

    async def remove_dedup_key(self, queue: str, dedup_id: str) -> None:
        await self.job_admin(
            queue, "", jpb.JobOp(remove_dedup_key=jpb.JobOp.RemoveDedupKey(dedup_id=dedup_id))
        )

    # -- query -----------------------------------------------------------------------
    @staticmethod
    def _query_request(
        queue: str,
        states: str | int | Iterable[str | int] | None,
        name: str | None,
        since: dt.datetime | float | None,
        until: dt.datetime | float | None,
        page_size: int,
        page_token: str,
    ) -> jpb.QueryRequest:
        if isinstance(states, (str, int)):
            states = [states]
        return jpb.QueryRequest(
            queue=queue,
            states=[state_value(s) for s in states or ()],
            name=name or "",
            since_ns=payloads.at_ns(since) if since is not None else 0,
            until_ns=payloads.at_ns(until) if until is not None else 0,
            page_size=page_size,
            page_token=page_token,
        )

    async def query(
        self,
        queue: str,
        *,
        states: str | int | Iterable[str | int] | None = None,
        name: str | None = None,
        since: dt.datetime | float | None = None,
        until: dt.datetime | float | None = None,
        page_size: int = 100,
        page_token: str = "",
    ) -> Page:
        """One page of a queue's jobs, newest first. A page may come back short with a
        next token; stop when `next_page_token` is empty (or use `iter_jobs`)."""
        req = self._query_request(queue, states, name, since, until, page_size, page_token)
        resp = await self._call(self._rpc.query, req)
        return Page([JobInfo(j) for j in resp.jobs], resp.next_page_token)

    async def iter_jobs(
        self,
        queue: str,
        *,
        states: str | int | Iterable[str | int] | None = None,
        name: str | None = None,
        limit: int | None = None,
        page_size: int = 100,
    ) -> AsyncIterator[JobInfo]:
        """Every matching job, newest first, fetched a page at a time."""
        token, seen = "", 0
        while True:
            page = await self.query(queue, states=states, name=name, page_size=page_size, page_token=token)
            for job in page.jobs:
                yield job
                seen += 1
                if limit is not None and seen >= limit:
                    return
            token = page.next_page_token
            if not token:
                return

    # -- result store ----------------------------------------------------------------
    async def result_get(self, key: str, *, raw: bool = False) -> Any:
        """The value under `key` (decoded; the Payload with `raw`), or None."""
        resp = await self._call(self._rpc.result_get, jpb.ResultGetRequest(key=key))
        if not resp.found:
            return None
        return resp.value if raw else payloads.decode(resp.value)

    async def result_mget(self, keys: Iterable[str], *, raw: bool = False) -> list[Any]:
        resp = await self._call(self._rpc.result_m_get, jpb.ResultMGetRequest(keys=list(keys)))
        return [(v.value if raw else payloads.decode(v.value)) if v.found else None for v in resp.values]

    async def result_set(self, key: str, value: Any, *, ttl: float | dt.timedelta | None = None) -> None:
        req = jpb.ResultSetRequest(key=key, value=payloads.encode(value), ttl_ns=payloads.ns(ttl, "ttl"))
        await self._call(self._rpc.result_set, req)

    async def result_set_many(self, items: Iterable[tuple[str, Any, float | dt.timedelta | None]]) -> None:
        """`result_set` for each `(key, value, ttl)`, in order, in one call and one
        transaction (all or none; at most 1000)."""
        req = jpb.ResultSetManyRequest(items=[
            jpb.ResultSetRequest(key=key, value=payloads.encode(value), ttl_ns=payloads.ns(ttl, "ttl"))
            for key, value, ttl in items
        ])  # fmt: skip
        await self._call(self._rpc.result_set_many, req)

    async def result_delete(self, key: str) -> None:
        await self._call(self._rpc.result_delete, jpb.ResultDeleteRequest(key=key))

    async def result_incr(self, key: str, member: str, *, ttl: float | dt.timedelta | None = None) -> int:
        """Count `member` under `key` once (atomic); returns how many distinct members."""
        req = jpb.ResultIncrRequest(key=key, member=member, ttl_ns=payloads.ns(ttl, "ttl"))
        return (await self._call(self._rpc.result_incr, req)).size

    async def result_expire(self, key: str, ttl: float | dt.timedelta) -> None:
        await self._call(
            self._rpc.result_expire, jpb.ResultExpireRequest(key=key, ttl_ns=payloads.ns(ttl, "ttl"))
        )

    async def result_add(
        self, key: str, member: str, *, ttl: float | dt.timedelta | None = None
    ) -> tuple[int, bool]:
        """`result_incr`, also saying whether this call added `member` (False: it had
        counted already). Of the calls that see the size reach N, exactly one added."""
        req = jpb.ResultIncrRequest(key=key, member=member, ttl_ns=payloads.ns(ttl, "ttl"))
        resp = await self._call(self._rpc.result_incr, req)
        return resp.size, resp.added

    async def result_wait(
        self, key: str, after_version: int = 0, *, wait: float | dt.timedelta = 10, raw: bool = False
    ) -> tuple[Any, int]:
        """Long-poll: `(value, version)` of `key` once its version is not `after_version`
        (0: absent), or as it is when `wait` seconds (at most 30) run out."""
        wait_ns = payloads.ns(wait, "wait")
        req = jpb.ResultGetRequest(key=key, wait_ns=wait_ns, after_version=after_version)
        timeout = None if self.timeout is None else self.timeout + wait_ns / 1e9
        resp = await self._call(self._rpc.result_get, req, timeout=timeout)
        if not resp.found:
            return None, 0
        return (resp.value if raw else payloads.decode(resp.value)), resp.version

    # -- schedules -------------------------------------------------------------------
    async def schedule(
        self,
        id: str | pb.ScheduleSpec,  # noqa: A002 - the schedule id, as the API names it
        queue: str | None = None,
        name: str | None = None,
        payload: Any = None,
        *,
        cron: str | None = None,
        tz: str | dt.tzinfo | None = None,
        every: float | dt.timedelta | None = None,
        limit: int | None = None,
        start: dt.datetime | float | None = None,
        end: dt.datetime | float | None = None,
        offset: float | dt.timedelta | None = None,
        immediately: bool = False,
        misfire: str | int | None = None,
        misfire_grace: float | dt.timedelta | None = None,
        **opts: Any,
    ) -> ScheduleInfo:
        """Create or replace schedule `id`: each tick enqueues `name(payload)` in `queue`
        with the enqueue options `opts` (priority, attempts, backoff, headers, dedup, ...;
        not job_key, idempotency_key, delay/at or parent: every tick is its own job).

        The rule is `cron` (5 fields, 6 with seconds first, or @daily, ...) in time zone
        `tz` (default UTC), or `every` (seconds or a timedelta). `limit`: at most this
        many ticks; `start` / `end` (datetimes or Unix seconds) bound them; `offset`
        shifts every tick; `immediately` also fires one now. `misfire` says what ticks
        missed while no sweeper ran do: "fire_latest" (the default: the latest one
        fires once), "skip" or "fire_all"; a tick within `misfire_grace` (default 60 s)
        of its time is on time. The same rule again changes nothing (`changed` False).

        A ready-made ScheduleSpec may be passed instead, alone."""
        if isinstance(id, pb.ScheduleSpec):
            if queue is not None or name is not None or opts:
                raise TypeError("schedule(spec) takes the ScheduleSpec alone")
            spec = id
        else:
            if not queue or not name:
                raise TypeError("schedule() needs an id, a queue and a task name")
            spec = _schedule_spec(id, queue, name, payload, cron=cron, tz=tz, every=every, limit=limit,
                                  start=start, end=end, offset=offset, immediately=immediately,
                                  misfire=misfire, misfire_grace=misfire_grace, opts=opts)  # fmt: skip
        # An upsert is idempotent (the same rule again changes nothing): safe to retry.
        resp = await self._retrying(self._rpc.schedule, jpb.ScheduleRequest(spec=spec))
        return ScheduleInfo(resp.schedule, resp.changed)

    async def unschedule(self, schedule_id: str) -> bool:
        """Remove a schedule (the jobs its ticks enqueued stay); False if there was none."""
        return (await self._call(self._rpc.unschedule, jpb.UnscheduleRequest(id=schedule_id))).removed

    async def get_schedule(self, schedule_id: str) -> ScheduleInfo:
        """The schedule with its next tick, last tick and count; NotFound if none."""
        return ScheduleInfo(
            (await self._call(self._rpc.get_schedule, jpb.GetScheduleRequest(id=schedule_id))).schedule
        )

    async def iter_schedules(self, *, page_size: int = 100) -> AsyncIterator[ScheduleInfo]:
        """Every schedule of the namespace, in id order, a page at a time."""
        token = ""
        while True:
            req = jpb.ListSchedulesRequest(page_size=page_size, page_token=token)
            resp = await self._call(self._rpc.list_schedules, req)
            for rec in resp.schedules:
                yield ScheduleInfo(rec)
            token = resp.next_page_token
            if not token:
                return

    async def list_schedules(self) -> list[ScheduleInfo]:
        """Every schedule of the namespace, in id order."""
        return [s async for s in self.iter_schedules(page_size=1000)]

    # -- quotas -------------------------------------------------------------------------
    QUOTA_NAMES = ("enqueue_rate", "stored_jobs", "payload_bytes", "active_leases", "schedules")

    @staticmethod
    def _quotas_dict(r: jpb.GetQuotasResponse | jpb.SetQuotasResponse) -> dict[str, Any]:
        names = Client.QUOTA_NAMES
        return {"quotas": {n: getattr(r.quotas, n) for n in names}, "source": r.source,
                "usage": {n: getattr(r.usage, n) for n in names}}  # fmt: skip

    async def get_quotas(self) -> dict[str, Any]:
        """The namespace's quotas in force (0: no limit), where they come from
        (`namespace` or `deployment`), and what it holds now (`usage`)."""
        return self._quotas_dict(await self._call(self._rpc.get_quotas, jpb.GetQuotasRequest()))

    async def set_quotas(self, **limits: int) -> dict[str, Any]:
        """Replace the namespace's quotas whole (a name not given: no limit); needs a
        deployment:admin token. `set_quotas()` with no names lifts every limit."""
        unknown = set(limits) - set(self.QUOTA_NAMES)
        if unknown:
            raise ValueError(f"unknown quota {sorted(unknown)[0]!r}: use {', '.join(self.QUOTA_NAMES)}")
        req = jpb.SetQuotasRequest(quotas=pb.NamespaceQuotas(**limits))
        return self._quotas_dict(await self._call(self._rpc.set_quotas, req))

    async def reset_quotas(self) -> dict[str, Any]:
        """Drop the namespace's own quotas: the deployment's (--quotas) apply again."""
        return self._quotas_dict(await self._call(self._rpc.set_quotas, jpb.SetQuotasRequest(reset=True)))

    # -- engine runs (Spark) ------------------------------------------------------------
    async def submit_spark(
        self,
        script: str | os.PathLike[str] | bytes,
        *,
        entrypoint: str | None = None,
        args: Iterable[str] = (),
        conf: Mapping[str, str] | None = None,
        python_deps: Iterable[str] = (),
        jvm: bool = False,
        attempts: int = 1,
        timeout: float | dt.timedelta | None = None,
        name: str = "",
        schedule: str | None = None,
        cron: str | None = None,
        every: float | dt.timedelta | None = None,
        tz: str | None = None,
    ) -> epb.EngineRun | str:
        """Run a PySpark script as an engine run: a SparkBatch on the namespace's Sail
        (its `SparkSession.builder.getOrCreate()` lands there), or with `jvm=True` a
        SparkSubmit (`spark-submit`, for RDD / SparkContext code). `script` is a path,
        or the source with `entrypoint` naming it. `attempts` and `timeout` (per attempt)
        are the run's policy; `python_deps` (pip requirements or wheel paths) are installed
        for the namespace first, for the script and its UDFs. With `schedule` (an id) and `cron` or `every`, nothing runs
        now: the schedule's id is returned and each tick starts a run."""
        if isinstance(script, bytes):
            source, file_name = script, entrypoint
        elif isinstance(script, os.PathLike) or (
            isinstance(script, str) and "\n" not in script and os.path.exists(script)
        ):
            with open(script, "rb") as f:
                source = f.read()
            file_name = entrypoint or os.path.basename(os.fspath(script))
        else:
            source, file_name = str(script).encode(), entrypoint
        if not file_name:
            raise TypeError("submit_spark(source) needs entrypoint=, the script's file name")
        job = epb.EngineJob(name=name, attempts=attempts,
                            timeout_ns=payloads.ns(timeout, "timeout") if timeout is not None else 0)  # fmt: skip
        spec = job.spark_submit if jvm else job.spark_batch
        spec.entrypoint = file_name
        spec.source = source
        spec.args.extend(args)
        spec.conf.update(conf or {})
        if python_deps:
            if jvm:
                raise TypeError("python_deps are for SparkBatch runs on Sail, not jvm=True")
            spec.python_deps.extend(python_deps)
        req = jpb.SubmitEngineJobRequest(job=job)
        if schedule is not None:
            req.schedule.CopyFrom(_schedule_spec(schedule, "engines", "engine", None, cron=cron, tz=tz, every=every,
                                                 limit=None, start=None, end=None, offset=None, immediately=False,
                                                 misfire=None, misfire_grace=None, opts={}))  # fmt: skip
        resp = await self._call(self._rpc.submit_engine_job, req)
        return resp.schedule if schedule is not None else resp.record

    async def engine_run(self, run: str) -> epb.EngineRun:
        """One engine run: state, attempts with exit status and timings; NotFound if none."""
        return (await self._call(self._rpc.get_engine_run, jpb.GetEngineRunRequest(run=run))).record

    async def engine_runs(self, *, page_size: int = 100) -> list[epb.EngineRun]:
        """The namespace's engine runs, newest first (one page)."""
        req = jpb.ListEngineRunsRequest(page_size=page_size)
        return list((await self._call(self._rpc.list_engine_runs, req)).runs)

    async def engine_run_logs(
        self, run: str, *, after: int = 0, wait: float = 0
    ) -> tuple[list[epb.EngineLogLine], bool]:
        """The run's lines numbered after `after`, and whether the run is over; with
        `wait` (seconds, at most 30), waits for the next line when there is none yet."""
        req = jpb.ListEngineRunLogsRequest(run=run, after=after, wait_ns=int(wait * 1e9))
        resp = await self._call(self._rpc.list_engine_run_logs, req, timeout=(self.timeout or 0) + wait)
        return list(resp.lines), resp.finished

    async def follow_engine_run(self, run: str, *, after: int = 0) -> AsyncIterator[epb.EngineLogLine]:
        """Every line of the run's log as it comes, until the run is over."""
        while True:
            lines, finished = await self.engine_run_logs(run, after=after, wait=25)
            for line in lines:
                after = line.n
                yield line
            if finished:
                return

    async def wait_engine_run(self, run: str) -> epb.EngineRun:
        """Wait for the run to finish (following its log), then its record."""
        async for _ in self.follow_engine_run(run):
            pass
        return await self.engine_run(run)

    async def cancel_engine_run(self, run: str) -> epb.EngineRun:
        """Cancel a run: a waiting one at once, a running one once its process stopped."""
        req = jpb.ControlEngineJobRequest(run=run, action=epb.EngineAction(action="cancel"))
        return (await self._call(self._rpc.control_engine_job, req)).record

    async def restart_engine_run(self, run: str) -> epb.EngineRun:
        """Run a finished Spark run's script again, with the same args, conf and policy, as
        a new run (its `restarted_from` names the old one)."""
        req = jpb.ControlEngineJobRequest(run=run, action=epb.EngineAction(action="restart"))
        return (await self._call(self._rpc.control_engine_job, req)).record

    # -- Flink -----------------------------------------------------------------------
    async def deploy_flink(
        self,
        deployment: str,
        artifact: str | os.PathLike[str] | bytes | None = None,
        *,
        entrypoint: str = "",
        sql: str | None = None,
        entry_class: str = "",
        args: Iterable[str] = (),
        parallelism: int = 0,
        config: Mapping[str, str] | None = None,
        savepoint: str = "",
        savepoint_interval: float | dt.timedelta = 0,
        allow_non_restored_state: bool = False,
        wait: bool = True,
    ) -> epb.EngineRun:
        """Deploy a Flink job as an engine run: a jar (with `entry_class`), a PyFlink
        script, or Flink SQL (`sql`, statements) on the local Flink session cluster. The
        run lasts as long as the deployment: RUNNING through savepoints, upgrades,
        suspend and resume; CANCELED by cancel. With `wait` (default), returns once the
        deploy is done (the record's `flink.state` says how it went)."""
        spec = _flink_spec(deployment, artifact, entrypoint=entrypoint, sql=sql, entry_class=entry_class,
                           args=args, parallelism=parallelism, config=config)  # fmt: skip
        spec.savepoint = savepoint
        interval = (
            savepoint_interval.total_seconds()
            if isinstance(savepoint_interval, dt.timedelta)
            else savepoint_interval
        )
        spec.savepoint_interval_s = int(interval)
        spec.allow_non_restored_state = allow_non_restored_state
        req = jpb.SubmitEngineJobRequest(job=epb.EngineJob(flink=spec))
        run = (await self._call(self._rpc.submit_engine_job, req)).record
        return await self.wait_flink(run.id) if wait else run

    async def flink_action(
        self,
        run: str,
        action: str,
        *,
        savepoint: str = "",
        version: int = 0,
        upgrade: epb.FlinkDeployment | None = None,
        wait: bool = True,
    ) -> epb.EngineRun:
        """A control action on a Flink run: savepoint, suspend, resume (`savepoint`: a
        recorded one, default the newest), upgrade (`upgrade`: the new version, see
        `flink_spec`), rollback (`version`, `savepoint`: default the previous version from
        its newest savepoint), cancel. Refused at once (nothing changes) when the
        deployment's state does not allow it; with `wait`, returns once it is done, the
        record's `flink.last_action_error` empty if it went well. `status` reads the job
        from Flink's REST API in any state (busy too) and, with `wait`, returns the record
        with Flink's answer in `flink.live` (job state, checkpoints, a savepoint in progress)."""
        action_ = epb.EngineAction(action=action, savepoint=savepoint, version=version)
        if upgrade is not None:
            action_.flink.CopyFrom(upgrade)
        req = jpb.ControlEngineJobRequest(run=run, action=action_)
        record = (await self._call(self._rpc.control_engine_job, req)).record
        if action == "status":  # a live read of Flink, answered on the run as `flink.live`
            return await self._wait_flink_status(run, record.flink.status_requested) if wait else record
        return await self.wait_flink(run) if wait else record

    async def _wait_flink_status(self, run: str, seq: int) -> epb.EngineRun:
        after = 0
        while True:
            record = await self.engine_run(run)
            if record.flink.live.seq >= seq or record.state in _ENGINE_FINISHED:
                return record
            lines, _ = await self.engine_run_logs(run, after=after, wait=25)
            after = lines[-1].n if lines else after

    @staticmethod
    def flink_spec(
        artifact: str | os.PathLike[str] | bytes | None = None,
        *,
        entrypoint: str = "",
        sql: str | None = None,
        entry_class: str = "",
        args: Iterable[str] = (),
        parallelism: int = 0,
        config: Mapping[str, str] | None = None,
        upgrade_mode: str = "",
    ) -> epb.FlinkDeployment:
        """A Flink job version (for `flink_action(run, "upgrade", upgrade=...)`).
        `upgrade_mode`: how the upgrade to it carries the state: "savepoint" (the default),
        "last-state" (from the newest retained checkpoint, no savepoint taken) or
        "stateless" (start empty)."""
        spec = _flink_spec("", artifact, entrypoint=entrypoint, sql=sql, entry_class=entry_class, args=args,
                           parallelism=parallelism, config=config)  # fmt: skip
        spec.upgrade_mode = upgrade_mode
        return spec

    async def flink_run(self, deployment: str) -> epb.EngineRun:
        """The newest engine run of the Flink deployment of that name; NotFound if none."""
        token = ""
        while True:
            resp = await self._call(self._rpc.list_engine_runs, jpb.ListEngineRunsRequest(page_size=500,
                                                                                            page_token=token))  # fmt: skip
            for r in resp.runs:
                if r.job.WhichOneof("spec") == "flink" and r.job.flink.deployment == deployment:
                    return r
            if not resp.next_page_token:
                raise NotFound(f"no Flink deployment {deployment!r} in this namespace")
            token = resp.next_page_token

    async def wait_flink(self, run: str) -> epb.EngineRun:
        """The Flink run once its deploy and every action asked of it are done; woken by
        the run's log, which each step of an action writes to."""
        after = 0
        while True:
            record = await self.engine_run(run)
            deployed = record.state != epb.ENGINE_RUN_STATE_QUEUED and not record.flink.pending_action
            if deployed and record.flink.actions_done >= record.flink.actions_requested:
                return record
            lines, _ = await self.engine_run_logs(run, after=after, wait=25)
            after = lines[-1].n if lines else after

    # -- flows -----------------------------------------------------------------------
    async def flow(
        self,
        nodes: Flow | pb.FlowSpec | Iterable[FlowNode | pb.FlowNode],
        id: str | None = None,  # noqa: A002 - the flow id, as the API names it
    ) -> FlowInfo:
        """Submit a flow: every node's job in one transaction, the nodes that wait for
        others in waiting-children until those finish. `nodes`: FlowNodes (see
        `loam.FlowNode`), or what `loam.chain` / `group` / `chord` build. The flow `id`
        makes the submit idempotent (the same id and graph again returns the same jobs,
        `created` False; another graph under it is AlreadyExists); without one the
        client makes one per call, so its retries on Unavailable create the flow once."""
        spec = flow_spec(nodes, id)
        if not spec.id and self.idempotent:
            spec.id = uuid7()
        req = jpb.FlowRequest(graph=spec)
        resp = await (self._retrying(self._rpc.flow, req) if spec.id else self._call(self._rpc.flow, req))
        queues = {n.id: n.queue for n in spec.nodes}
        jobs = {n.id: resp.jobs[n.id] for n in spec.nodes if n.id in resp.jobs}
        return FlowInfo(resp.flow, jobs, queues, resp.created)

    async def get_flow(self, flow_id: str) -> FlowInfo:
        """A flow's jobs by node; NotFound if there is no such flow."""
        return FlowInfo.from_record(
            (await self._call(self._rpc.get_flow, jpb.GetFlowRequest(id=flow_id))).flow
        )

    async def children(self, queue: str, job: str) -> list[Child]:
        """A job's dependencies (its children) with their state, result or failure
        (BullMQ's getDependencies / getIgnoredChildrenFailures). `job`: id or job key."""
        resp = await self.job_admin(queue, job, jpb.JobOp(children=jpb.JobOp.Children()))
        return [Child(d) for d in resp.children]

    async def children_values(self, queue: str, job: str) -> dict[str, Any]:
        """The results of a job's finished children (BullMQ's getChildrenValues), by
        flow node id (`queue:job key or id` for children added with `parent=`)."""
        return {c.key: c.value for c in await self.children(queue, job) if c.state == "processed"}

    # -- exchanges (kombu's bindings, stored server-side) ----------------------------
    async def exchange_bind(
        self, exchange: str, routing_key: str, queue: str, *, ttl: float | dt.timedelta | None = None
    ) -> None:
        req = jpb.ExchangeBindRequest(exchange=exchange, routing_key=routing_key, queue=queue,
                                      ttl_ns=payloads.ns(ttl, "ttl"))  # fmt: skip
        await self._call(self._rpc.exchange_bind, req)

    async def exchange_unbind(self, exchange: str, routing_key: str, queue: str) -> bool:
        req = jpb.ExchangeUnbindRequest(exchange=exchange, routing_key=routing_key, queue=queue)
        return (await self._call(self._rpc.exchange_unbind, req)).removed

    async def exchange_bindings(self, exchange: str) -> list[pb.ExchangeBinding]:
        req = jpb.ExchangeBindingsRequest(exchange=exchange)
        return list((await self._call(self._rpc.exchange_bindings, req)).bindings)

    async def exchange_publish(
        self,
        exchange: str,
        kind: int,
        routing_key: str,
        task: pb.TaskSpec,
        opts: pb.EnqueueOpts | None = None,
    ) -> list[tuple[str, Enqueued | JobsError]]:
        """Route by the exchange's stored bindings and enqueue a copy in each queue;
        `kind` is an ExchangeType. Returns (queue, answer) per queue; none: unroutable."""
        req = jpb.ExchangePublishRequest(exchange=exchange, type=kind, routing_key=routing_key, task=task,
                                         opts=opts or pb.EnqueueOpts())  # fmt: skip
        resp = await self._retrying(self._rpc.exchange_publish, req)
        return [
            (r.queue, Enqueued.from_pb(r.result.enqueued) if r.result.WhichOneof("result") == "enqueued"
             else from_item(r.result.error.code, r.result.error.message))
            for r in resp.routed
        ]  # fmt: skip


class SyncClient:
    """The same calls as `Client`, blocking. Unary calls run in the caller's thread on a
    blocking `Client` (loam.blocking: a kept-alive connection per thread); streams, and
    code that needs the async client (`aclient`, `loop`, `run`), use one `Client` on an
    event loop in a background thread, started on first use. The sync surface wraps the
    async client; it does not copy it. Use from threads freely; do not call it from
    inside its own loop."""

    def __init__(self, url: str | None = None, **kwargs: Any) -> None:
        self._args = (url, kwargs)
        self._direct = Client(
            url, **{k: v for k, v in kwargs.items() if k != "http_transport"}, blocking=True
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._aclient: Client | None = None
        self._start_lock = threading.Lock()
        self._closed = False

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._start_lock:
            if self._closed:
                raise RuntimeError("this SyncClient is closed")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=loop.run_forever, name="loam-sync-client", daemon=True)
                self._thread.start()
                url, kwargs = self._args

                async def make() -> Client:
                    return Client(url, **kwargs)

                self._aclient = asyncio.run_coroutine_threadsafe(make(), loop).result()
                self._aclient._worker_id = self._direct.worker  # one worker id for both
                self._loop = loop
            return self._loop

    @property
    def aclient(self) -> Client:
        """The async client underneath, for code that runs on `loop`."""
        self._started()
        assert self._aclient is not None
        return self._aclient

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._started()

    def run(self, coro: Awaitable[T]) -> T:
        """Run a coroutine on this client's loop and wait for its result."""
        if self._closed:
            raise RuntimeError("this SyncClient is closed")
        loop = self._started()
        if threading.current_thread() is self._thread:
            raise RuntimeError("SyncClient called from its own event loop; use .aclient there")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()  # type: ignore[arg-type]

    def close(self) -> None:
        if self._closed:
            return
        try:
            self._direct._rpc.close()
            if self._loop is not None and self._aclient is not None:
                asyncio.run_coroutine_threadsafe(self._aclient.close(), self._loop).result()
        finally:
            self._closed = True
            if self._loop is not None and self._thread is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(timeout=10)
                self._loop.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SyncClient({self._direct.url!r}, namespace={self._direct.namespace!r})"

    url = property(lambda self: self._direct.url)
    namespace = property(lambda self: self._direct.namespace)
    worker = property(lambda self: self._direct.worker, doc="This client's default worker id for leases.")


# Unary methods that wait on something else than their server call (the REST listing):
# they run on the loop.
_ON_THE_LOOP = frozenset({"list_queues"})


def _blocking(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.isasyncgenfunction(fn):

        @functools.wraps(fn)
        def gen(self: SyncClient, *args: Any, **kwargs: Any) -> Iterator[Any]:
            agen = getattr(self.aclient, name)(*args, **kwargs)
            try:
                while True:
                    try:
                        yield self.run(agen.__anext__())
                    except StopAsyncIteration:
                        return
            finally:
                if not self._closed:
                    self.run(agen.aclose())

        return gen

    if name in _ON_THE_LOOP:

        @functools.wraps(fn)
        def on_loop(self: SyncClient, *args: Any, **kwargs: Any) -> Any:
            return self.run(getattr(self.aclient, name)(*args, **kwargs))

        return on_loop

    @functools.wraps(fn)
    def call(self: SyncClient, *args: Any, **kwargs: Any) -> Any:
        if self._closed:
            raise RuntimeError("this SyncClient is closed")
        coro = getattr(self._direct, name)(*args, **kwargs)
        try:
            coro.send(None)  # a blocking Client's coroutine runs to its end here
        except StopIteration as done:
            return done.value
        coro.close()
        raise RuntimeError(f"SyncClient.{name} waited on something other than its server call")

    return call


for _name, _fn in inspect.getmembers(
    Client, lambda f: inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f)
):
    if not _name.startswith("_") and _name not in ("close",):
        setattr(SyncClient, _name, _blocking(_name, _fn))
del _name, _fn
SyncClient.flink_spec = staticmethod(Client.flink_spec)  # builds a request: nothing to block on


_ENGINE_FINISHED = frozenset(
    {epb.ENGINE_RUN_STATE_SUCCEEDED, epb.ENGINE_RUN_STATE_FAILED, epb.ENGINE_RUN_STATE_CANCELED}
)


def _flink_spec(
    deployment: str,
    artifact: str | os.PathLike[str] | bytes | None,
    *,
    entrypoint: str,
    sql: str | None,
    entry_class: str,
    args: Iterable[str],
    parallelism: int,
    config: Mapping[str, str] | None,
) -> epb.FlinkDeployment:
    spec = epb.FlinkDeployment(deployment=deployment, entry_class=entry_class, parallelism=parallelism)
    spec.args.extend(args)
    spec.config.update(config or {})
    if sql is not None:
        if artifact is not None:
            raise TypeError("give the artifact or sql, not both")
        spec.sql = sql
        spec.entrypoint = entrypoint
    elif isinstance(artifact, bytes):
        if not entrypoint:
            raise TypeError(
                "an artifact given as bytes needs entrypoint=, its file name (job.jar, job.py, job.sql)"
            )
        spec.source, spec.entrypoint = artifact, entrypoint
    elif artifact is not None:
        with open(artifact, "rb") as f:
            spec.source = f.read()
        spec.entrypoint = entrypoint or os.path.basename(os.fspath(artifact))
    else:
        raise TypeError("give the artifact (a path or bytes) or sql")
    return spec
