"""The access log (on at debug level) keeps query names but never their values: a token
put in a URL by mistake must not land in the log."""

from __future__ import annotations

import logging

import httpx
from devserver import start_dev_server

from loam_common.serving import RedactQuery, redact_query

SECRET = "loam_0123456789abcdef_" + "f" * 64


def test_redact_query_keeps_names_and_drops_values():
    assert redact_query(f"/v1/queues?token={SECRET}&page_size=5&flag") == (
        "/v1/queues?token=[redacted]&page_size=[redacted]&flag"
    )
    record = logging.LogRecord("uvicorn.access", logging.INFO, "", 0, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5", "GET", f"/x?access_token={SECRET}", "1.1", 200), None)  # fmt: skip
    assert RedactQuery().filter(record) and SECRET not in record.getMessage()


def test_loam_dev_at_debug_level_logs_no_query_values(tmp_path):
    server = start_dev_server(tmp_path / "data", "--log-level", "debug")
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            assert http.get(f"/v1/queues?token={SECRET}").status_code == 200
            assert http.get("/healthz", params={"access_token": SECRET}).status_code == 200
    finally:
        server.stop()
    log = "".join(server.lines)
    assert "/v1/queues?token=[redacted]" in log  # the line is there, its value is not
    assert SECRET not in log
