"""Exchanges (spec §7.1.2): the AMQP-style bindings kombu declares (`queue_bind`), kept in
the store so that every process routes by the same table, and the routing of a publish
to the queues bound to an exchange.

kombu keeps bindings per process unless a transport stores them (Redis keeps a set per
exchange); a producer then routes only by the bindings its own process declared. Here a
binding is one key, `t/<ns>/xb/<exchange><queue>/<routing key>` (keys.py), holding an
ExchangeBinding; `route` reads them in the publish's snapshot.

Types: direct (the routing key equals the binding's), topic (AMQP patterns, `*` one word
and `#` zero or more, words split at `.`), fanout (every bound queue). A binding may have
a TTL: kombu's pidbox and event queues are declared with `x-expires`, and a process that
consumes from one binds it again before it lapses, so a dead worker's queue stops
getting copies of broadcasts once its binding lapses. Lapsed bindings are ignored at
once and deleted by the next bind to the same exchange."""

from __future__ import annotations

from functools import lru_cache

from loam_common import keys, validate
from loam_common.errors import InvalidArgument, JobsError
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs.insert import check_payload_limit, job_insert
from loam_common.jobs.linked import LinkedQueueTx
from loam_common.jobs.new_job import Enqueued, NewJob
from loam_common.store.base import Txn

MAX_NAME_BYTES = 255
MAX_BINDINGS = 10_000  # per exchange, read per publish: a guard, not a target
DIRECT, TOPIC, FANOUT = pb.EXCHANGE_TYPE_DIRECT, pb.EXCHANGE_TYPE_TOPIC, pb.EXCHANGE_TYPE_FANOUT


def check_binding(exchange: str, routing_key: str, queue: str | None = None) -> None:
    validate.text("exchange", exchange, MAX_NAME_BYTES, allow_empty=False)
    validate.text("routing_key", routing_key, MAX_NAME_BYTES)
    if queue is not None:
        validate.name("queue", queue)


def check_type(kind: int) -> int:
    if kind not in (pb.EXCHANGE_TYPE_UNSPECIFIED, DIRECT, TOPIC, FANOUT):
        raise InvalidArgument("type", f"unknown exchange type {kind}")
    return kind or DIRECT


def _live(tx: Txn, ns: str, exchange: str) -> list[pb.ExchangeBinding]:
    prefix = keys.exchange_bindings(ns, exchange)
    now = tx.now_ns()
    out = []
    for _, raw in tx.scan(prefix, keys.prefix_end(prefix), limit=MAX_BINDINGS):
        b = pb.ExchangeBinding.FromString(raw)
        if not b.expires_ns or b.expires_ns > now:
            out.append(b)
    return out


def exchange_bind(tx: Txn, ns: str, exchange: str, routing_key: str, queue: str, ttl_ns: int = 0) -> None:
    """Bind `queue` (again); a TTL makes the binding lapse unless bound again in time."""
    check_binding(exchange, routing_key, queue)
    validate.duration_ns("ttl_ns", ttl_ns)
    now = tx.now_ns()
    prefix = keys.exchange_bindings(ns, exchange)
    for key, raw in tx.scan(prefix, keys.prefix_end(prefix), limit=MAX_BINDINGS):
        b = pb.ExchangeBinding.FromString(raw)
        if b.expires_ns and b.expires_ns <= now:
            tx.delete(key)
    b = pb.ExchangeBinding(exchange=exchange, routing_key=routing_key, queue=queue,
                           expires_ns=now + ttl_ns if ttl_ns else 0)  # fmt: skip
    tx.put(keys.exchange_binding(ns, exchange, queue, routing_key), b.SerializeToString())


def exchange_unbind(tx: Txn, ns: str, exchange: str, routing_key: str, queue: str) -> bool:
    check_binding(exchange, routing_key, queue)
    key = keys.exchange_binding(ns, exchange, queue, routing_key)
    existed = tx.get(key) is not None
    if existed:
        tx.delete(key)
    return existed


def exchange_bindings(tx: Txn, ns: str, exchange: str) -> list[pb.ExchangeBinding]:
    """The live bindings of `exchange`, by routing key, then queue."""
    check_binding(exchange, "")
    return sorted(_live(tx, ns, exchange), key=lambda b: (b.routing_key, b.queue))


def route(tx: Txn, ns: str, exchange: str, kind: int, routing_key: str) -> list[str]:
    """The queues a message published to `exchange` with `routing_key` goes to, each once,
    in name order."""
    check_binding(exchange, routing_key)
    kind = check_type(kind)
    queues = set()
    for b in _live(tx, ns, exchange):
        if (
            kind == FANOUT
            or (kind == DIRECT and b.routing_key == routing_key)
            or (kind == TOPIC and topic_match(b.routing_key, routing_key))
        ):
            queues.add(b.queue)
    return sorted(queues)


def topic_match(pattern: str, routing_key: str) -> bool:
    """AMQP topic matching: words split at `.`; `*` is exactly one word, `#` zero or more."""
    return _match(tuple(pattern.split(".")), tuple(routing_key.split(".")))


@lru_cache(maxsize=4096)
def _match(pat: tuple[str, ...], words: tuple[str, ...]) -> bool:
    if not pat:
        return not words
    head, rest = pat[0], pat[1:]
    if head == "#":
        return any(_match(rest, words[i:]) for i in range(len(words) + 1))
    if not words:
        return False
    return (head == "*" or head == words[0]) and _match(rest, words[1:])


def enqueue_routed(tx: Txn, ns: str, items: list[tuple[str, NewJob]]) -> list[Enqueued | JobsError]:
    """Enqueue each routed copy in its queue, in this one transaction; a copy refused
    (its job key taken by another request) gets its error in its slot."""
    out: list[Enqueued | JobsError] = []
    for queue, nj in items:
        sp = tx.savepoint()
        try:
            with LinkedQueueTx(tx, ns, queue) as qt:
                check_payload_limit(qt, nj)
                out.append(job_insert(qt, nj))
        except JobsError as e:
            tx.rollback_to(sp)
            out.append(e)
    return out
