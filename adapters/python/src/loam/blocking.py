"""JobsService's unary calls made in the caller's thread: `BlockingJobsClient`, what a
`SyncClient` uses for every unary call.

The async client runs on pyqwest inside an event loop; a blocking call through it
crosses to a loop thread and back. Measured against `loam dev` on the development
machine (one `ResultSet` after another): 0.33 ms of client CPU per call that way, and
1.08 ms through the pure-Python transport a forked process needs (Celery's pool
processes store every task's result this way); 0.10 ms over a kept-alive
`http.client` connection in the caller's thread. So a SyncClient's unary calls go here.

Connect's unary protocol, binary codec, no compression: a POST of the serialized
request; 200 with the serialized response, or a JSON error body read by connectrpc's
own wire format. One connection per thread and process (a connection made before a
`fork()` is never used after it). A kept-alive connection the server closed as the
request went out is dialled again once: the server closes only idle connections, so
the request was not read, and every write carries what makes a repeat harmless anyway
(an idempotency or job key, a fencing token)."""

from __future__ import annotations

import functools
import http.client
import json
import os
import ssl
import threading
from typing import Any
from urllib.parse import urlsplit

from connectrpc._protocol import ConnectWireError
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from loam_common.api.methods import UNARY as UNARY_METHODS

#: snake_case method name -> (URL path, response class), for the unary methods
UNARY: dict[str, tuple[str, Any]] = {name: (m.path, m.response) for name, m in UNARY_METHODS.items()}

_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


class BlockingJobsClient:
    """`client.result_set(request, headers=..., timeout_ms=...)` and the like, as the
    generated async client names them, but blocking and returning the response."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._local = threading.local()

    def __getattr__(self, name: str) -> Any:
        try:
            path, response = UNARY[name]
        except KeyError:
            raise AttributeError(name) from None
        call = functools.partial(self._unary, self._prefix + path, response)
        call.__name__ = name  # type: ignore[attr-defined]
        setattr(self, name, call)  # found directly next time
        return call

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection in this process, and whether it served a call before."""
        local = self._local
        conn = getattr(local, "conn", None)
        if conn is not None and local.pid == os.getpid():
            return conn, True
        if self._https:
            conn = http.client.HTTPSConnection(self._host, self._port, context=ssl.create_default_context())
        else:
            conn = http.client.HTTPConnection(self._host, self._port)
        local.conn, local.pid = conn, os.getpid()
        return conn, False

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def _unary(self, path: str, response: Any, request: Any, *, headers: dict[str, str],
               timeout_ms: int | None = None) -> Any:  # fmt: skip
        body = request.SerializeToString()
        send = {"content-type": "application/proto", "connect-protocol-version": "1", **headers}
        if timeout_ms:
            send["connect-timeout-ms"] = str(timeout_ms)
        timeout = timeout_ms / 1000 if timeout_ms else None
        while True:
            conn, reused = self._connection()
            try:
                conn.timeout = timeout
                if conn.sock is not None:
                    conn.sock.settimeout(timeout)
                conn.request("POST", path, body=body, headers=send)
                resp = conn.getresponse()
                data = resp.read()
                break
            except _STALE as e:
                self._drop()
                if not reused:
                    raise ConnectError(Code.UNAVAILABLE, f"{type(e).__name__}: {e}") from e
            except TimeoutError as e:
                self._drop()  # the answer may still come: this connection is out of step
                raise ConnectError(Code.DEADLINE_EXCEEDED, "Request timed out") from e
            except OSError as e:
                self._drop()
                raise ConnectError(Code.UNAVAILABLE, f"{type(e).__name__}: {e}") from e
            except http.client.HTTPException as e:  # not an HTTP answer (another server on that port?)
                self._drop()
                raise ConnectError(Code.UNAVAILABLE, f"not an HTTP answer: {type(e).__name__}: {e}") from e
            except BaseException:
                # Interrupted mid-call (a signal handler's exception, a test timeout, a
                # KeyboardInterrupt): the answer was not read, and a connection left
                # waiting for it refuses every later request of this thread.
                self._drop()
                raise
        if resp.will_close:
            self._drop()
        if resp.status == 200:
            return response.FromString(data)
        raise _error(resp.status, data)

    def close(self) -> None:
        self._drop()  # this thread's; the others' go with their threads


def _error(status: int, data: bytes) -> ConnectError:
    try:
        parsed = json.loads(data)
        if not isinstance(parsed, dict):
            raise ValueError("not an error object")
    except ValueError:
        return ConnectWireError.from_http_status(status).to_exception()
    return ConnectWireError.from_dict(parsed, status, Code.UNKNOWN).to_exception()
