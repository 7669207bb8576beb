"""Helpers of the durable tests (imported by name: `conftest` is ambiguous across test
directories): Resonate worker processes (durable_worker.py, the stock Python SDK), side
file counts, a wait for what only another process can make true, and a raw envelope
client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

WORKER = Path(__file__).resolve().parent / "durable_worker.py"
VERSION = "2026-04-01"
RETRY_MS = 3000


class Worker:
    """One worker process; its output is kept (read by a thread so the pipe never fills)."""

    def __init__(self, url: str, group: str, counts: Path, *extra: str) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), "--url", url, "--group", group, "--counts", str(counts), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={k: v for k, v in os.environ.items() if not k.startswith(("LOAM_", "RESONATE_"))},
        )  # fmt: skip
        ready = threading.Event()

        def pump() -> None:
            for line in self.proc.stdout:  # type: ignore[union-attr]
                self.lines.append(line)
                if "worker ready" in line:
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(30) or self.proc.poll() is not None:
            raise RuntimeError("worker did not start:\n" + "".join(self.lines))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def counts_of(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            out[line] = out.get(line, 0) + 1
    return out


def wait_for(predicate, timeout: float = 20, what: str = "condition"):
    """For conditions only another process can make true (a worker's side file)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def envelope(url: str, kind: str, data, *, version: str = VERSION, token: str | None = None,
             raw: bytes | None = None) -> tuple[int, dict]:  # fmt: skip
    """One raw `POST {base}/`: (HTTP status, response envelope)."""
    body = (
        raw
        if raw is not None
        else json.dumps(
            {"kind": kind, "head": {"corrId": uuid.uuid4().hex, "version": version}, "data": data}
        ).encode()
    )
    headers = {"content-type": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url.rstrip("/") + "/", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
