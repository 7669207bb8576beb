"""Helpers the hardening tests share (fixtures are in conftest.py): the Connect path
prefix, a JSON content type, an httpx client on an app in process, a bearer header."""

from __future__ import annotations

import httpx

SVC = "/loam.jobs.v1.JobsService/"
JSON = {"content-type": "application/json"}


def client_for(app, host: str = "localhost") -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=f"http://{host}", timeout=30)


def bearer(t: str) -> dict[str, str]:
    return {"authorization": f"Bearer {t}"}
