"""Where loam-celery finds the server: the `loam://host:port/<namespace>` URL and the
`token_env` option (default LOAM_TOKEN) name it; one SDK `SyncClient` per process and
server is shared by the transport, the result backend and the beat scheduler.

Credentials never come from the URL: a URL with a user or password is refused. A
process forked from one that already used the client (Celery's prefork children) gets
its own client over `HttpxTransport` (see _http.py)."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from loam import SyncClient

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7720
DEFAULT_TOKEN_ENV = "LOAM_TOKEN"

_clients: dict[Settings, SyncClient] = {}
_lock = threading.Lock()
_forked = False  # forked from a process whose pyqwest runtime was running: avoid pyqwest
_started = False  # this process made a pyqwest-backed client


def _after_fork_in_child() -> None:
    global _forked, _lock
    # A child forked before any client existed (a worker's first pool processes) may use
    # pyqwest: its runtime was never started. One forked later may not.
    _forked = _forked or _started or bool(_clients)
    _clients.clear()  # the parent's clients have no loop thread here
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


class ImproperlyConfigured(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Settings:
    url: str
    namespace: str | None
    token: str | None
    timeout: float = 30.0

    @classmethod
    def from_parts(
        cls,
        hostname: str | None,
        port: int | None,
        virtual_host: str | None,
        options: dict[str, Any] | None,
        *,
        userid: str | None = None,
        password: str | None = None,
    ) -> Settings:
        options = options or {}
        if password or (userid and userid not in ("guest",)):
            raise ImproperlyConfigured(
                "loam:// URLs carry no credentials: put the token in an environment variable "
                "and name it with the transport option token_env (default LOAM_TOKEN)"
            )
        scheme = "https" if options.get("ssl") or options.get("https") else "http"
        host = hostname or DEFAULT_HOST
        ns = (virtual_host or "").strip("/") or None
        token = os.environ.get(str(options.get("token_env") or DEFAULT_TOKEN_ENV)) or None
        return cls(
            f"{scheme}://{host}:{port or DEFAULT_PORT}", ns, token, float(options.get("timeout", 30.0))
        )

    @classmethod
    def from_url(cls, url: str, options: dict[str, Any] | None = None) -> Settings:
        from kombu.utils.url import url_to_parts

        parts = url_to_parts(url)
        return cls.from_parts(parts.hostname, parts.port, parts.path, options,
                              userid=parts.username, password=parts.password)  # fmt: skip


def client_for(settings: Settings) -> SyncClient:
    """This process's client of the server `settings` names."""
    client = _clients.get(settings)
    if client is not None:
        return client
    with _lock:
        client = _clients.get(settings)
        if client is None:
            kwargs: dict[str, Any] = {}
            if _forked:
                from loam_celery._http import HttpxTransport

                kwargs["http_transport"] = HttpxTransport()
            else:
                global _started
                _started = True
            client = SyncClient(settings.url, token=settings.token or "", namespace=settings.namespace,
                                timeout=settings.timeout, idempotent=False, **kwargs)  # fmt: skip
            _clients[settings] = client
        return client


def declare_queue(client: SyncClient, queue: str, visibility_timeout: float) -> None:
    """Create `queue` with Celery's settings: stalled jobs are redelivered however often
    (`max_stalled` -1), finished ones are not kept (the results are in the backend). A
    queue that exists keeps its settings, but is made to redeliver stalled jobs."""
    from loam.errors import AlreadyExists
    from loam_common.gen.loam.jobs.v1 import jobs_pb2 as jpb

    try:
        client.create_queue(queue, visibility=visibility_timeout, max_stalled=-1, remove_on_complete=True)
    except AlreadyExists:
        current = client.queue_admin(queue, jpb.QueueOp(counts=jpb.QueueOp.Counts())).config
        if not current.HasField("max_stalled") or current.max_stalled != -1:
            current.max_stalled = -1
            client.update_queue(queue, config=current)
