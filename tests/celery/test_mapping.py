"""The transport's mapping of kombu messages to Loam jobs and back, and AMQP topic
matching of stored bindings: no server needed."""

from __future__ import annotations

import datetime as dt
import json

from loam_celery import messages
from loam_celery.connection import ImproperlyConfigured, Settings
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as jpb
from loam_common.jobs.exchanges import topic_match

SEC = 1_000_000_000
NOW = 1_800_000_000 * SEC


def _msg(**headers):
    return {"body": "e30=", "content-type": "application/json", "content-encoding": "utf-8",
            "headers": {"task": "proj.add", "id": "t1", "retries": 0, **headers},
            "properties": {"priority": 0, "delivery_info": {"exchange": "", "routing_key": "celery"},
                           "delivery_tag": "x", "body_encoding": "base64"}}  # fmt: skip


def test_task_id_and_retries_make_the_job_key():
    _, opts = messages.to_job(_msg(retries=2), now_ns=NOW)
    assert opts.job_key == "t1:2"
    task, opts = messages.to_job({"headers": {}, "properties": {}}, now_ns=NOW)
    assert task.name == "kombu.message" and not opts.job_key


def test_a_replacement_under_the_same_id_gets_a_job_key_of_its_own():
    _, opts = messages.to_job(_msg(replaced_task_nesting=0), now_ns=NOW)
    assert opts.job_key == "t1:0"
    _, opts = messages.to_job(_msg(replaced_task_nesting=2), now_ns=NOW)
    assert opts.job_key == "t1:0:r2"


def test_eta_and_expires():
    eta = dt.datetime.fromtimestamp(NOW / SEC + 30, dt.UTC).isoformat()
    exp = dt.datetime.fromtimestamp(NOW / SEC + 60, dt.UTC).isoformat()
    _, opts = messages.to_job(_msg(eta=eta, expires=exp), now_ns=NOW, expires_grace_s=10)
    assert opts.not_before.at_ns == NOW + 30 * SEC
    assert opts.expires_ns == NOW + 70 * SEC  # a Celery task gets the grace: it is marked REVOKED
    pidbox = {"headers": {"clock": 1, "expires": NOW / SEC + 1.0}, "properties": {}}
    _, opts = messages.to_job(pidbox, now_ns=NOW, expires_grace_s=10)
    assert opts.expires_ns == NOW + SEC  # kombu's Unix-time expires, no grace
    _, opts = messages.to_job({"headers": {}, "properties": {}}, now_ns=NOW, queue_ttl_ms=300_000)
    assert opts.expires_ns == NOW + 300 * SEC


def test_priorities_redis_and_amqp_order():
    assert [messages.loam_priority(p) for p in (None, 0, 1, 5, 9, 12)] == [0, 0, 1, 5, 9, 9]
    assert [messages.loam_priority(p, "amqp") for p in (0, 1, 9)] == [10, 9, 1]


class _Lease:
    def __init__(self, message, attempt=1, headers=None):
        self.raw = jpb.Lease(token=jpb.LeaseToken(queue="celery", job="J1", epoch=1), attempt=attempt)
        self.raw.task.payload.data = json.dumps(message).encode()
        self.raw.task.headers.update(headers or {})
        self.id, self.epoch, self.queue, self.attempt, self.stalled = "J1", 1, "celery", attempt, 0


def test_delivery_tag_redelivery_and_schedule_ticks():
    message, tag = messages.from_lease(_Lease(_msg(), attempt=2))
    assert tag == "J1.1" and message["properties"]["delivery_tag"] == tag
    assert message["properties"]["delivery_info"]["redelivered"] is True
    tick = {messages.HEADER_SCHEDULE: "every-2s", messages.HEADER_TICK: str(NOW)}
    m1, _ = messages.from_lease(_Lease(_msg(**{messages.HEADER_EXPIRES_IN: 5}), headers=tick))
    m2, _ = messages.from_lease(_Lease(_msg(), headers=tick))
    assert m1["headers"]["id"] == m2["headers"]["id"] != "t1"  # one id per tick, stable
    assert m1["headers"]["expires"] == dt.datetime.fromtimestamp(NOW / SEC + 5, dt.UTC).isoformat()


def test_topic_matching_is_amqp():
    assert topic_match("#", "a.b") and topic_match("#", "")
    assert topic_match("task.*", "task.sent") and not topic_match("task.*", "task.a.b")
    assert topic_match("a.#", "a") and topic_match("a.#.z", "a.b.c.z") and not topic_match("a.*", "b.c")


def test_settings_refuse_credentials_in_the_url(monkeypatch):
    monkeypatch.setenv("MY_TOKEN", "loam_x_y")
    s = Settings.from_url("loam://10.0.0.1:7000/acme", {"token_env": "MY_TOKEN"})
    assert (s.url, s.namespace, s.token) == ("http://10.0.0.1:7000", "acme", "loam_x_y")
    try:
        Settings.from_url("loam://user:secret@10.0.0.1:7000/acme")
    except ImproperlyConfigured as e:
        assert "token_env" in str(e)
    else:
        raise AssertionError("a password in the URL was accepted")


def test_the_loam_subject_header_is_the_jobs_subject():
    _, opts = messages.to_job(_msg(loam_subject="acct-1"), now_ns=NOW)
    assert opts.subject == "acct-1"
    _, opts = messages.to_job(_msg(), now_ns=NOW)
    assert not opts.subject
