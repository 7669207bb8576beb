"""What the Spark Connect proxy reads and forwards on the wire, without Spark: the
session id of a request (field 1 of every Spark Connect request), from a message or from
the first bytes of a call's request stream, and which headers go upstream. (What comes
back, trailers and error details included, is the server's own bytes: the frame tests
in spark/test_proxy_frames.py check them byte for byte.)"""

from __future__ import annotations

from loam_engines.spark.proxy import request_session, session_id, upstream_headers, upstream_metadata


def _ld(field: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return bytes([(field << 3) | 2, len(payload)]) + payload


def test_the_session_id_leads_every_request():
    sid = "8c1b6f0e-7d3a-4c9e-9a51-3f2d6b0c1e77"
    assert session_id(_ld(1, sid.encode()) + _ld(2, _ld(1, b"user"))) == sid
    assert session_id(b"") is None
    assert session_id(_ld(2, b"no session")) is None  # field 1 missing: it would come first
    assert session_id(b"\x08\x96\x01" + _ld(1, b"after-a-varint")) == "after-a-varint"
    assert session_id(b"\x0a\xff") is None  # truncated
    assert session_id(_ld(1, b"abc")[:-1]) is None


def test_credentials_never_go_upstream_and_the_namespace_does():
    incoming = [("authorization", "Bearer loam_x"), ("user-agent", "pyspark"), ("x-loam-namespace", "other"),
                ("x-loam-engine", "jvm"), ("grpc-accept-encoding", "gzip"), ("x-custom", "kept")]  # fmt: skip
    assert upstream_metadata(incoming, "acme") == [("x-loam-namespace", "acme"), ("x-custom", "kept")]


def test_the_session_id_is_read_from_the_first_bytes_of_a_call_as_soon_as_it_is_whole():
    sid = "8c1b6f0e-7d3a-4c9e-9a51-3f2d6b0c1e77"
    message = _ld(1, sid.encode()) + _ld(2, _ld(1, b"user"))
    framed = b"\x00" + len(message).to_bytes(4) + message
    assert request_session(framed) == (True, sid)
    assert request_session(framed[:20]) == (False, None)  # field 1 not whole yet: wait for more
    assert request_session(framed[:4]) == (False, None)
    assert request_session(framed[: 2 + 5 + len(sid)]) == (True, sid)  # the rest is not needed
    no_session = _ld(2, b"x")
    assert request_session(b"\x00" + len(no_session).to_bytes(4) + no_session) == (True, None)
    assert request_session(b"\x01" + framed[1:]) == (True, None)  # compressed: not read
    assert request_session(b"\x00\x00\x00\x00\x00") == (True, None)  # an empty message


def test_the_transport_headers_go_upstream_as_they_came_and_credentials_never_do():
    headers = [(":method", "POST"), (":path", "/spark.connect.SparkConnectService/Config"), ("te", "trailers"),
               ("content-type", "application/grpc"), ("grpc-timeout", "5S"), ("authorization", "Bearer loam_x"),
               ("user-agent", "pyspark"), ("x-loam-namespace", "other"), ("x-loam-engine", "jvm"),
               ("x-custom", "kept")]  # fmt: skip
    assert upstream_headers(headers, "acme", None) == [
        (":method", "POST"), (":path", "/spark.connect.SparkConnectService/Config"), ("te", "trailers"),
        ("content-type", "application/grpc"), ("grpc-timeout", "5S"), ("x-loam-namespace", "acme"),
        ("x-custom", "kept"),
    ]  # fmt: skip
    assert upstream_headers(headers, "acme", "Bearer server-secret")[-1] == (
        "authorization",
        "Bearer server-secret",
    )
