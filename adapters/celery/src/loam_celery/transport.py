"""The kombu transport `loam` (spec §7.1.2): a virtual transport whose visibility
timeout is a Loam lease, following kombu's pgmq/SQS model rather than the in-process
one.

| kombu                              | Loam                                                  |
|------------------------------------|-------------------------------------------------------|
| `_put(queue, message)`             | Enqueue (messages.py maps the message)                |
| publish to a named exchange        | ExchangePublish: routed by the bindings in the store  |
| `queue_bind`                       | ExchangeBind (TTL = the queue's `x-expires`, renewed) |
| fetching                           | one long-poll Lease over every consumed queue, `max` = the free prefetch slots: from a fetcher thread feeding Celery's event loop through a pipe, or in `drain_events` for plain kombu callers |
| `basic_ack`                        | Complete(Ok), batched after `ack_linger` (pipeline.py) |
| `basic_reject(requeue=True)`       | Complete(Release)                                     |
| `basic_reject(requeue=False)`      | Complete(Fail, dead-letter if the queue has a DLQ)    |
| `basic_recover`, `_restore`, close | Complete(Release) for each unacked message            |
| `_new_queue` / `_has_queue` / `_size` / `_purge` / `queue_delete` | QueueAdmin Create / Counts / Counts / Drain / Obliterate |

Unacked messages (running tasks, acks_late ones included) are extended every
`visibility_timeout / 3` by a thread of the transport, so a live worker never has a
task redelivered under it; a dead worker's leases lapse and the server's stalled path
hands the jobs to another worker (`max_stalled` -1 on Celery queues: never failed for it).

Messages of no-ack consumers (kombu's pidbox, events) are completed as soon as they are
delivered. Fanout: a publish copies the message into every queue bound at that moment
(so a consumer sees broadcasts from when it bound, "from latest"); those queues' bindings
carry a TTL that the consuming process renews, so a dead worker's mailbox stops getting
copies. `driver_type` is "loam": Celery's mingle and gossip (hard-wired to amqp and
redis) stay off; remote control and events work through fanout and stored bindings.
`asynchronous` is True, so a worker runs Celery's event loop as on Redis: a full pool
never blocks delivery, and a revoke or an inspect is handled while every process is busy.

Transport options: `visibility_timeout` (s, default 60), `token_env` (default
LOAM_TOKEN), `priority_order` ("redis" or "amqp"), `expires_grace` (s, default 3600),
`polling_interval` (the longest single long-poll, s, default 1), `confirm_publish`
(default False: publishes and acks go in the background, batched; see pipeline.py),
`ack_linger` (s, default 0.01: how long an ack waits for others to share its call), `ssl`.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import os
import sys
import threading
import time
from collections.abc import Iterable
from queue import Empty
from typing import Any

from kombu.transport import virtual
from kombu.utils.objects import cached_property

from loam import Outcome
from loam.errors import (
    AlreadyExists,
    Fenced,
    InvalidState,
    JobsError,
    NotFound,
    PermissionDenied,
    Unavailable,
)
from loam_celery import messages
from loam_celery.connection import Settings, client_for, declare_queue
from loam_celery.pipeline import ACK_LINGER_S, Pipeline, pipeline_for, wait_all
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as jpb
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb

log = logging.getLogger("loam_celery.transport")

EXCHANGE_TYPES = {
    "direct": pb.EXCHANGE_TYPE_DIRECT,
    "topic": pb.EXCHANGE_TYPE_TOPIC,
    "fanout": pb.EXCHANGE_TYPE_FANOUT,
}
DEFAULT_VISIBILITY_TIMEOUT = 60.0
DEFAULT_EXPIRES_GRACE = 3600.0
NOACK_BATCH = 16  # messages of no-ack queues fetched at once (mailboxes)
UNLIMITED_BATCH = 100  # prefetch 0 (unlimited): this many per lease
FULL_POLL_S = 0.05  # prefetch full: how long one look at the no-ack queues may wait
_LOST = (Fenced, NotFound, InvalidState)  # the lease is gone: the job was redelivered or finished


class Channel(virtual.Channel):
    supports_fanout = True
    do_restore = True
    from_transport_options = (*virtual.Channel.from_transport_options, "priority_order", "expires_grace")
    priority_order = "redis"
    expires_grace = DEFAULT_EXPIRES_GRACE

    def __init__(self, connection: Transport, **kwargs: Any) -> None:
        self._noack_queues: set[str] = set()
        super().__init__(connection, **kwargs)

    @property
    def loam(self) -> Any:
        return self.connection.loam

    # -- consuming -----------------------------------------------------------------------
    def basic_consume(self, queue: str, no_ack: bool, callback: Any, consumer_tag: str, **kwargs: Any) -> Any:
        if no_ack:
            self._noack_queues.add(queue)
        return super().basic_consume(queue, no_ack, callback, consumer_tag, **kwargs)

    def basic_cancel(self, consumer_tag: str) -> Any:
        queue = self._tag_to_queue.get(consumer_tag)
        if queue is not None:
            self._noack_queues.discard(queue)
        return super().basic_cancel(consumer_tag)

    def basic_get(self, queue: str, no_ack: bool = False, **kwargs: Any) -> Any:
        leases = self.loam.lease([queue], max=1, wait=0, worker=self.connection.worker_id)
        if not leases:
            return None
        payload, tag = messages.from_lease(leases[0])
        message = self.Message(payload, channel=self)
        if no_ack:
            self.connection.settle([leases[0].token])
        else:
            self.connection.hold(tag, leases[0].token)
            self.qos.append(message, tag)
        return message

    def _get(self, queue: str, timeout: float | None = None) -> dict[str, Any]:
        leases = self.loam.lease([queue], max=1, wait=0, worker=self.connection.worker_id)
        if not leases:
            raise Empty()
        payload, tag = messages.from_lease(leases[0])
        self.connection.hold(tag, leases[0].token)
        return payload

    def drain_events(self, timeout: float | None = None, callback: Any = None) -> None:
        self.connection.drain_events(self.connection, timeout=timeout)

    def basic_ack(self, delivery_tag: str, multiple: bool = False) -> None:
        self.connection.ack_tag(delivery_tag)
        super().basic_ack(delivery_tag, multiple)

    def basic_reject(self, delivery_tag: str, requeue: bool = False) -> None:
        outcome = Outcome.release() if requeue else Outcome.fail("rejected by the consumer", dead_letter=True)
        self.connection.settle_tag(delivery_tag, outcome)
        self.qos.reject(delivery_tag, requeue=False)  # released above: nothing to copy back

    def _restore(self, message: Any) -> None:
        """Unacked at recover or close: release the lease (redelivered at once, never copied)."""
        self.connection.settle_tag(message.delivery_tag, Outcome.release())

    def _restore_at_beginning(self, message: Any) -> None:
        self._restore(message)

    # -- publishing ----------------------------------------------------------------------
    def _message_opts(self, queue: str | None = None) -> dict[str, Any]:
        ttl = self.connection.queue_message_ttl.get(queue) if queue else None
        return {"priority_order": self.priority_order, "queue_ttl_ms": ttl,
                "expires_grace_s": float(self.expires_grace)}  # fmt: skip

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        task, opts = messages.to_job(message, **self._message_opts(queue))
        if not self.connection.confirm_publish:
            self.connection.pipeline.publish(queue, task, opts)
            return
        try:
            self.loam.enqueue(queue, task.name, task.payload, opts=opts, headers=dict(task.headers))
        except AlreadyExists:
            # (id, retries) already published with another body: a duplicate publish of
            # the same message (a re-run task retrying again); the first one stands.
            log.debug("message %s for %s was published before", opts.job_key, queue)

    def basic_publish(self, message: dict[str, Any], exchange: str, routing_key: str, **kwargs: Any) -> Any:
        self._inplace_augment_message(message, exchange, routing_key)
        if not exchange:
            return self._put(routing_key, message)
        kind = self.state.exchanges.get(exchange, {}).get("type", "direct")
        routed = self._publish(exchange, kind, routing_key, message)
        if not routed and self.deadletter_queue:
            self._put(self.deadletter_queue, message)
        return None

    def _put_fanout(self, exchange: str, message: dict[str, Any], routing_key: str, **kwargs: Any) -> None:
        self._publish(exchange, "fanout", routing_key, message)

    def _publish(self, exchange: str, kind: str, routing_key: str, message: dict[str, Any]) -> int:
        task, opts = messages.to_job(message, **self._message_opts())
        routed = self.loam.exchange_publish(exchange, EXCHANGE_TYPES.get(kind, pb.EXCHANGE_TYPE_DIRECT),
                                            routing_key, task, opts)  # fmt: skip
        for queue, result in routed:
            if isinstance(result, JobsError) and not isinstance(result, AlreadyExists):
                log.warning("publish to %s via %s: %s", queue, exchange, result)
        return len(routed)

    # -- declaring -----------------------------------------------------------------------
    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        args = kwargs.get("arguments") or {}
        if args.get("x-message-ttl"):
            self.connection.queue_message_ttl[queue] = int(args["x-message-ttl"])
        if args.get("x-expires"):
            self.connection.queue_expires[queue] = int(args["x-expires"])
        self.connection.declare(queue)

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        try:
            self.loam.queue_counts(queue)
        except NotFound:
            return False
        return True

    def _size(self, queue: str) -> int:
        try:
            c = self.loam.queue_counts(queue)
        except NotFound:
            return 0
        return int(c["waiting"] + c["prioritized"] + c["delayed"])

    def _purge(self, queue: str) -> int:
        try:
            return int(self.loam.drain(queue, delayed=True))
        except NotFound:
            return 0

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        self.connection.bind(exchange, routing_key, queue)

    def queue_unbind(self, queue: str, exchange: str | None = None, routing_key: str = "",
                     arguments: Any = None, **kwargs: Any) -> None:  # fmt: skip
        super().queue_unbind(queue, exchange, routing_key, arguments, **kwargs)
        self.connection.unbind(exchange or "amq.direct", routing_key, queue)

    def queue_delete(
        self, queue: str, if_unused: bool = False, if_empty: bool = False, **kwargs: Any
    ) -> None:
        if if_empty and self._size(queue):
            return
        for exchange, routing_key, _args in self.state.queue_bindings(queue):
            self.connection.unbind(exchange, routing_key, queue)
        self.state.queue_bindings_delete(queue)
        self.connection.forget(queue)
        try:
            self.loam.obliterate(queue, force=True)
        except NotFound:
            pass

    def get_table(self, exchange: str) -> list[tuple[str, str, str]]:
        """The bindings from the store, so every process sees the same table."""
        topic = self.exchange_types["topic"]
        return [(b.routing_key, topic.key_to_pattern(b.routing_key), b.queue)
                for b in self.loam.exchange_bindings(exchange)]  # fmt: skip


class Transport(virtual.Transport):
    Channel = Channel
    driver_type = "loam"
    driver_name = "loam"
    default_port = 7720
    can_parse_url = False
    polling_interval = 1.0  # the longest single long-poll
    # asynchronous: a Celery worker runs its event loop (as on Redis), fed by a fetcher
    # thread through a pipe (register_with_event_loop), so delivering to a busy pool never
    # blocks the loop and remote control stays responsive. Plain kombu callers use
    # `drain_events` (one long-poll at a time), which needs no loop.
    implements = virtual.Transport.implements.extend(
        asynchronous=True, exchange_type=frozenset(["direct", "topic", "fanout"]), heartbeats=False
    )
    connection_errors = (*virtual.Transport.connection_errors, Unavailable, ConnectionError)
    channel_errors = (*virtual.Transport.channel_errors, JobsError)

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        opts = client.transport_options or {}
        self.settings = Settings.from_parts(client.hostname, client.port, client.virtual_host, opts,
                                            userid=client.userid, password=client.password)  # fmt: skip
        self.visibility_timeout = float(opts.get("visibility_timeout") or DEFAULT_VISIBILITY_TIMEOUT)
        self.confirm_publish = bool(opts.get("confirm_publish", False))
        self.ack_linger = float(opts.get("ack_linger", ACK_LINGER_S))
        self.queue_message_ttl: dict[str, int] = {}
        self.queue_expires: dict[str, int] = {}
        self._declared: set[str] = set()
        self._leases: dict[str, jpb.LeaseToken] = {}  # delivery tag -> lease, unacked
        self._bindings: dict[tuple[str, str, str], float] = {}  # renewed (exchange, key, queue) -> ttl s
        self._lock = threading.Lock()
        self._keeper: _LeaseKeeper | None = None
        self._rotation = itertools.count()
        self._fetcher: _Fetcher | None = None

    @cached_property
    def loam(self) -> Any:
        return client_for(self.settings)

    @cached_property
    def worker_id(self) -> str:
        return self.loam.worker

    def driver_version(self) -> str:
        from loam_celery import __version__

        return __version__

    def establish_connection(self) -> Any:
        try:
            self.loam.result_get("loam-celery:ping")  # reachable, and the credential works
        except PermissionDenied:
            pass  # a producer's token need not read results: reachable all the same
        except Unavailable as e:
            raise ConnectionError(f"Loam Jobs at {self.settings.url} is unreachable: {e}") from e
        return super().establish_connection()

    # -- the event loop (Celery's worker) ---------------------------------------------------
    def register_with_event_loop(self, connection: Any, loop: Any) -> None:
        if self._fetcher is None:
            self._fetcher = _Fetcher(self)
            self._fetcher.start()
        loop.add_reader(self._fetcher.read_fd, self._fetcher.on_readable)

    def unregister_from_event_loop(self, connection: Any, loop: Any) -> None:
        if self._fetcher is not None:
            loop.remove_reader(self._fetcher.read_fd)
            self._fetcher.stop()
            self._fetcher = None

    def close_connection(self, connection: Any) -> None:
        if self._fetcher is not None:
            self._fetcher.stop()
            self._fetcher = None
        try:
            if "pipeline" in self.__dict__:
                self.pipeline.wait(10)
            super().close_connection(connection)
        finally:
            if self._keeper is not None:
                self._keeper.stop()
                self._keeper = None

    # -- queues and bindings ---------------------------------------------------------------
    def declare(self, queue: str) -> None:
        """Create a queue with Celery's settings once per connection: stalled jobs are
        redelivered however often (`max_stalled` -1), finished ones are not kept."""
        if queue not in self._declared:
            declare_queue(self.loam, queue, self.visibility_timeout)
            self._declared.add(queue)

    def forget(self, queue: str) -> None:
        self._declared.discard(queue)
        with self._lock:
            for key in [k for k in self._bindings if k[2] == queue]:
                del self._bindings[key]

    def bind(self, exchange: str, routing_key: str, queue: str) -> None:
        expires_ms = self.queue_expires.get(queue)
        ttl = max(expires_ms / 1000.0, 3.0) if expires_ms else None
        self.loam.exchange_bind(exchange, routing_key, queue, ttl=ttl)
        if ttl:
            with self._lock:
                self._bindings[(exchange, routing_key, queue)] = ttl
            self._ensure_keeper()

    def unbind(self, exchange: str, routing_key: str, queue: str) -> None:
        with self._lock:
            self._bindings.pop((exchange, routing_key, queue), None)
        try:
            self.loam.exchange_unbind(exchange, routing_key, queue)
        except NotFound:
            pass

    # -- leases ----------------------------------------------------------------------------
    def hold(self, tag: str, token: jpb.LeaseToken) -> None:
        with self._lock:
            self._leases[tag] = token
        self._ensure_keeper()

    @cached_property
    def pipeline(self) -> Pipeline:
        p = pipeline_for(self.loam)
        p.ack_linger = self.ack_linger
        return p

    def ack_tag(self, tag: str) -> None:
        """Complete(Ok) in the background, batched with the other acks (pipeline.py)."""
        with self._lock:
            token = self._leases.pop(tag, None)
        if token is not None:
            self.pipeline.complete(token, Outcome.ok())

    def settle_tag(self, tag: str, outcome: jpb.Outcome) -> None:
        with self._lock:
            token = self._leases.pop(tag, None)
        if token is None:
            return
        self.pipeline.wait()  # after the acks and publishes handed over before it
        try:
            self.loam.complete(token, outcome)
        except _LOST as e:  # the lease lapsed (a stall): another worker has the job now
            log.warning(
                "%s of %s/%s came too late: %s", outcome.WhichOneof("kind"), token.queue, token.job, e
            )

    def settle(self, tokens: Iterable[jpb.LeaseToken]) -> None:
        items = [(t, Outcome.ok()) for t in tokens]
        if items:
            for r in self.loam.complete_batch(items):
                if isinstance(r, JobsError) and not isinstance(r, _LOST):
                    log.warning("completing a no-ack message: %s", r)

    def unacked(self) -> list[jpb.LeaseToken]:
        with self._lock:
            return list(self._leases.values())

    def still_held(self, token: jpb.LeaseToken) -> bool:
        with self._lock:
            return any(t is token for t in self._leases.values())

    def renewals(self) -> list[tuple[str, str, str, float]]:
        with self._lock:
            return [(*k, ttl) for k, ttl in self._bindings.items()]

    def _ensure_keeper(self) -> None:
        if self._keeper is None or not self._keeper.is_alive():
            self._keeper = _LeaseKeeper(self)
            self._keeper.start()

    # -- fetching --------------------------------------------------------------------------
    def _plan(self, held: int = 0) -> tuple[list[str], int, set[str], bool]:
        """Which queues to lease from now and how many jobs: every consumed queue whose
        channel has free prefetch slots, plus the no-ack queues always. `held`: jobs
        leased and not yet delivered (the fetcher's inbox), taken from the free slots."""
        queues: list[str] = []  # queues with acks, fair: each leads in turn
        noack: set[str] = set()
        free_total, has_ack = 0, False
        for channel in list(self.channels):
            if not channel._consumers:  # noqa: SLF001 - kombu's own attribute
                continue
            free = channel.qos.can_consume_max_estimate()
            for q in list(channel._active_queues):  # noqa: SLF001
                if q in channel._noack_queues:  # noqa: SLF001
                    noack.add(q)
                elif free is None or free > 0:
                    has_ack = True
                    queues.append(q)
            if free is None:
                free_total += UNLIMITED_BATCH
            else:
                free_total += free
        if len(queues) > 1:
            k = next(self._rotation) % len(queues)
            queues = queues[k:] + queues[:k]
        free_total -= held
        if has_ack and free_total <= 0:
            has_ack, queues = False, []
        n = free_total if has_ack else NOACK_BATCH
        # Mailboxes first: a revoke or a control command is seen before the tasks that
        # arrive with it.
        return sorted(noack) + queues, max(1, min(n, 1000)), noack, has_ack

    def drain_events(self, connection: Any, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            queues, n, noack, has_ack = self._plan()
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            wait = self.polling_interval if left is None else min(left, self.polling_interval)
            if not has_ack:
                wait = min(wait, FULL_POLL_S)  # prefetch is full: look again soon
            if not queues:
                time.sleep(wait)
            else:
                leases = self.loam.lease(queues, max=n, wait=wait, worker=self.worker_id)
                if leases:
                    self._deliver_leases(leases, noack)
                    return
            if (deadline is not None and time.monotonic() >= deadline) or _worker_stopping():
                raise TimeoutError()

    def _prepare(
        self, leases: list[Any], noack: set[str]
    ) -> tuple[list[tuple[dict, str]], list[jpb.LeaseToken]]:
        """Messages to deliver, mailboxes first; acked leases held, no-ack ones to settle."""
        done, ready = [], []
        for lease in sorted(leases, key=lambda lease: lease.queue not in noack):
            payload, tag = messages.from_lease(lease)
            if lease.queue in noack:
                done.append(lease.token)
            else:
                self.hold(tag, lease.token)
            ready.append((payload, lease.queue))
        return ready, done

    def _deliver_leases(self, leases: list[Any], noack: set[str]) -> None:
        ready, done = self._prepare(leases, noack)
        try:
            for payload, queue in ready:
                self._deliver(payload, queue)
        finally:
            self.settle(done)


def _flush_after_task(*args: Any, **kwargs: Any) -> None:
    """In a worker's pool process: a task's publishes reach the server before the task
    reports back (and so before its acks_late ack)."""
    wait_all(30)


try:
    from celery.signals import task_postrun

    task_postrun.connect(_flush_after_task, weak=False)
except ImportError:  # kombu without Celery
    pass


def _worker_stopping() -> bool:
    """A Celery worker is shutting down: return from a wait now rather than at its end
    (Celery's loop checks for shutdown between waits)."""
    state = sys.modules.get("celery.worker.state")
    return state is not None and (state.should_stop is not None or state.should_terminate is not None)


class _Fetcher(threading.Thread):
    """Long-polls Lease for the worker's event loop: leased messages wait in an inbox and
    a byte on a pipe wakes the loop, which delivers them (`on_readable`)."""

    def __init__(self, transport: Transport) -> None:
        super().__init__(name="loam-celery-fetcher", daemon=True)
        self.transport = transport
        self.read_fd, self._write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self._write_fd, False)
        self._inbox: collections.deque[tuple[list[tuple[dict, str]], list[jpb.LeaseToken]]] = (
            collections.deque()
        )
        self._held = 0
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=self.transport.polling_interval + 5)
        with self.transport._lock:  # noqa: SLF001 - the transport's own lock
            leftover = [self.transport._leases.pop(messages.from_lease_tag(m), None)  # noqa: SLF001
                        for batch in self._inbox for m, _q in batch[0]]  # fmt: skip
        self._inbox.clear()
        for token in filter(None, leftover):  # leased, never delivered: hand back
            with contextlib.suppress(Exception):
                self.transport.loam.complete(token, Outcome.release())
        for fd in (self.read_fd, self._write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)

    def run(self) -> None:
        t = self.transport
        while not self._stop_event.is_set():
            try:
                queues, n, noack, has_ack = t._plan(self._held)
                wait = t.polling_interval if has_ack else FULL_POLL_S
                if not queues:
                    self._stop_event.wait(wait)
                    continue
                leases = t.loam.lease(queues, max=n, wait=wait, worker=t.worker_id)
                if not leases:
                    continue
                ready, done = t._prepare(leases, noack)
                t.settle(done)
                self._held += sum(1 for _, q in ready if q not in noack)
                self._inbox.append((ready, [q for _, q in ready if q not in noack]))
                with contextlib.suppress(BlockingIOError):
                    os.write(self._write_fd, b"x")
            except Exception:  # noqa: BLE001 - the server is away: try again shortly
                log.warning("fetching from Loam failed", exc_info=True)
                self._stop_event.wait(1.0)

    def on_readable(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self.read_fd, 4096):
                pass
        while self._inbox:
            ready, acked = self._inbox.popleft()
            self._held -= len(acked)
            for payload, queue in ready:
                self.transport._deliver(payload, queue)


class _LeaseKeeper(threading.Thread):
    """Extends every unacked lease each visibility_timeout / 3 and renews the bindings
    that carry a TTL each ttl / 3, until the transport closes."""

    def __init__(self, transport: Transport) -> None:
        super().__init__(name="loam-celery-lease-keeper", daemon=True)
        self.transport = transport
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        t = self.transport
        period = max(t.visibility_timeout / 3.0, 0.2)
        next_extend = time.monotonic() + period
        renewed: dict[tuple[str, str, str], float] = {}
        while not self._stop_event.wait(0.2):
            now = time.monotonic()
            try:
                if now >= next_extend:
                    next_extend = now + period
                    self._extend_all()
                for exchange, key, queue, ttl in t.renewals():
                    due = renewed.get((exchange, key, queue), 0.0)
                    if now >= due:
                        t.loam.exchange_bind(exchange, key, queue, ttl=ttl)
                        renewed[(exchange, key, queue)] = now + ttl / 3.0
            except Exception:  # noqa: BLE001 - a failed round is tried again next period
                log.warning("lease keeper round failed", exc_info=True)

    def _extend_all(self) -> None:
        t = self.transport
        for token in t.unacked():
            try:
                t.loam.extend(token, t.visibility_timeout)
            except _LOST as e:
                if t.still_held(token):
                    log.warning("lease of %s/%s was lost: %s", token.queue, token.job, e)
