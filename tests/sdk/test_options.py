"""The SDK's edge, without a server: keyword options → EnqueueOpts, payload codecs."""

from __future__ import annotations

import datetime as dt

import pytest

from loam import payloads
from loam.options import Outcome, enqueue_opts
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb


def test_bullmq_and_celery_style_options() -> None:
    o, headers = enqueue_opts(
        {
            "delay": dt.timedelta(seconds=2),
            "priority": 3,
            "attempts": 5,
            "backoff": {"type": "exponential", "delay": 1, "max": 60, "jitter": 0.5},
            "dedup": {"id": "d1", "ttl": 10, "extend": True},
            "remove_on_complete": True,
            "remove_on_fail": {"age": 3600, "count": 10},
            "visibility": 30,
            "timeout": 60,
            "subject": "user-1",
            "job_key": "k",
            "headers": {"trace": 1},
        }
    )
    assert o.not_before.delay_ns == 2 * 10**9 and o.priority == 3 and o.attempts == 5
    assert (o.backoff.kind, o.backoff.base_ns, o.backoff.max_ns, o.backoff.jitter) == (
        pb.BACKOFF_KIND_EXPONENTIAL, 10**9, 60 * 10**9, 0.5,
    )  # fmt: skip
    assert (o.dedup.mode, o.dedup.ttl_ns, o.dedup.extend) == (pb.DEDUP_MODE_DEBOUNCE, 10 * 10**9, True)
    assert o.retention.HasField("completed_count") and o.retention.completed_count == 0
    assert (o.retention.failed_count, o.retention.failed_age_ns) == (10, 3600 * 10**9)
    assert (o.visibility_ns, o.timeout_ns, o.subject, o.job_key) == (30 * 10**9, 60 * 10**9, "user-1", "k")
    assert headers == {"trace": "1"}
    assert enqueue_opts({"backoff": 5})[0].backoff.kind == pb.BACKOFF_KIND_FIXED
    assert enqueue_opts({"dedup": "x"})[0].dedup.mode == pb.DEDUP_MODE_SIMPLE
    at = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    assert enqueue_opts({"at": at})[0].not_before.at_ns == int(at.timestamp()) * 10**9


def test_bad_options_are_refused() -> None:
    with pytest.raises(TypeError, match="unknown enqueue option"):
        enqueue_opts({"retries": 3})
    with pytest.raises(ValueError, match="delay or at"):
        enqueue_opts({"delay": 1, "at": dt.datetime.now()})
    with pytest.raises(ValueError, match="backoff type"):
        enqueue_opts({"backoff": {"type": "linear"}})


@pytest.mark.parametrize("value", [{"a": [1, None]}, [1, 2], "text ünïcode", b"\x00\x01", 3.5, True, None])
def test_payload_roundtrip(value) -> None:
    assert payloads.decode(payloads.encode(value)) == value


def test_payload_content_types() -> None:
    assert payloads.encode({"a": 1}).content_type == "application/json"
    assert payloads.encode("s").content_type.startswith("text/plain")
    assert payloads.encode(b"b").content_type == "application/octet-stream"
    assert payloads.decode(pb.Payload(data=b"x", content_type="application/x-celery")) == b"x"
    with pytest.raises(TypeError):
        payloads.encode(object())


def test_outcomes() -> None:
    assert Outcome.ok(1).ok.result.data == b"1"
    r = Outcome.retry(ValueError("bad"), after=2)
    assert r.retry.error.message == "ValueError: bad" and r.retry.after_ns == 2 * 10**9
    assert Outcome.fail("x", dead_letter=True).fail.dead_letter
    assert not Outcome.release().release.HasField("after_ns")


def test_the_server_url_comes_from_loam_url_then_its_alias(monkeypatch) -> None:
    """$LOAM_URL is every client's name for the server; $LOAM_JOBS_URL is accepted too."""
    from loam.client import Client
    from loam.durable import durable_url

    monkeypatch.delenv("LOAM_NAMESPACE", raising=False)
    monkeypatch.setenv("LOAM_URL", "http://primary:7720")
    monkeypatch.setenv("LOAM_JOBS_URL", "http://alias:7720")
    assert (Client().url, durable_url()) == ("http://primary:7720", "http://primary:7720/resonate")
    monkeypatch.delenv("LOAM_URL")
    assert (Client().url, durable_url()) == ("http://alias:7720", "http://alias:7720/resonate")
    monkeypatch.delenv("LOAM_JOBS_URL")
    assert Client().url == "http://127.0.0.1:7720"
    assert Client("http://explicit:1").url == "http://explicit:1"
