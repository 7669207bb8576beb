"""What the Spark Connect proxy reads and forwards on the wire, without Spark: the
session id of a request (field 1 of every Spark Connect request), and which metadata
goes upstream or back."""

from __future__ import annotations

from loam_engines.spark.proxy import downstream_trailers, session_id, upstream_metadata


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


def test_error_details_come_back_and_grpc_reserved_keys_do_not():
    trailers = [("grpc-status-details-bin", b"\x08\x03"), ("grpc-message", "x"), ("x-spark", "1")]
    assert downstream_trailers(trailers) == (("grpc-status-details-bin", b"\x08\x03"), ("x-spark", "1"))
