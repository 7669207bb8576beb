"""The transport through kombu's own API against `loam dev`: queue admin, ack / reject /
recover, bindings shared across connections (separate processes see one table), topic
routing and fanout "from latest"."""

from __future__ import annotations

import uuid

import pytest
from kombu import Connection, Exchange, Queue

import loam_celery  # noqa: F401 - the alias


@pytest.fixture
def url(loam_server) -> str:
    return f"loam://127.0.0.1:{loam_server.port}/kombu-{uuid.uuid4().hex[:8]}"


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_alias_and_explicit_transport_setting(url):
    from loam_celery.transport import Transport

    explicit = Connection(url.replace("loam://", "amqp://"), transport="loam_celery.transport:Transport")
    with Connection(url) as a, explicit as b:
        assert a.transport_cls == "loam" and isinstance(a.transport, Transport)
        assert isinstance(b.transport, Transport) and b.transport.driver_type == "loam"
        assert a.supports_exchange_type("fanout") and a.supports_exchange_type("topic")


def test_queue_admin_ack_reject_recover(url, loam_server):
    qname = _name("q")
    with Connection(url) as conn:
        q = conn.SimpleQueue(qname)
        for i in range(4):
            q.put({"n": i})
        assert q.qsize() == 4
        m = q.get(timeout=5)
        assert m.payload == {"n": 0} and not m.delivery_info.get("redelivered")
        m.reject(requeue=True)  # released: delivered again, marked redelivered
        seen = {}
        while len(seen) < 4:
            got = q.get(timeout=5)
            seen[got.payload["n"]] = got
        assert seen[0].delivery_info.get("redelivered")
        seen[0].ack()
        seen[1].reject(requeue=False)  # failed: not delivered again
        seen[2].ack()
        conn.default_channel.basic_recover(requeue=True)  # unacked n=3 released
        last = q.get(timeout=5)
        assert last.payload == {"n": 3}
        last.ack()
        q.put({"n": 4})
        assert q.channel.queue_purge(qname) >= 1
        q.close()
    with loam_server.sync_client(namespace=url.rsplit("/", 1)[1]) as client:
        counts = client.queue_counts(qname)
        assert counts["failed"] == 1 and counts["waiting"] == 0


def test_topic_bindings_hold_across_connections_and_fanout_is_from_latest(url):
    tx, fx = Exchange(_name("tx"), "topic"), Exchange(_name("fx"), "fanout")
    tq, f1, f2 = _name("tq"), _name("f1"), _name("f2")
    with Connection(url) as consumer_side, Connection(url) as producer_side:
        cch = consumer_side.channel()
        Queue(tq, tx, routing_key="task.*", channel=cch).declare()
        Queue(f1, fx, channel=cch).declare()
        producer = producer_side.Producer()  # another connection: its own kombu state
        producer.publish({"k": 1}, exchange=tx, routing_key="task.sent", declare=[tx])
        producer.publish({"k": 2}, exchange=tx, routing_key="other.sent", declare=[tx])
        producer.publish({"b": 1}, exchange=fx, routing_key="", declare=[fx])
        Queue(f2, fx, channel=cch).declare()  # bound after the first broadcast
        producer.publish({"b": 2}, exchange=fx, routing_key="", declare=[fx])

        def drain(qname):
            out = []
            sq = consumer_side.SimpleQueue(qname)
            while True:
                try:
                    m = sq.get(timeout=0.3)
                except sq.Empty:
                    return out
                out.append(m.payload)
                m.ack()

        assert drain(tq) == [{"k": 1}]
        assert drain(f1) == [{"b": 1}, {"b": 2}]
        assert drain(f2) == [{"b": 2}]
