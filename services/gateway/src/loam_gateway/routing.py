"""`Router`: which queue core serves a call, and the call itself.

A call is routed by its method's routing key, from the method table
(loam_common.api.methods: `Method.route`). A queue is owned by one queue core, chosen
by rendezvous hashing over the core URLs (loam_common.rendezvous, which the sweeper
uses too to wake the right core), so adding or removing a core moves only the queues
it wins or held. Every core shares the store, so any core can answer any call
correctly; ownership matters for the long-poll wake-ups, which are in-process events
of the core that ran the write. Calls therefore go to the owner of their queue:

- a request with a queue (`queue`, `token.queue`, `queues[0]`) -> that queue's owner;
- CompleteBatch is split by owner and its answers put back in request order;
- requests without a queue (the result store, schedules) -> the owner of their key.

Limitation: a Lease naming several queues goes to the owner of the first one, so with
several cores a job enqueued on another of its queues (owned elsewhere) does not wake
it: it is found when the lease's wait ends (at most 30 s) or on the worker's next
poll. Workers that need instant wake-ups on several queues lease each one separately.

With `local=` an in-process core (`loam dev`, tests: the queue core's CoreRpc, which
only the composition root loam_gateway.dev builds) calls run in process; otherwise
each core is reached with one cached `JobsServiceClient` (Connect binary, no request
compression) carrying the namespace, the internal token and the actor the call is made
for (loam_common.audit: the core records its audited actions with it). A forwarded ConnectError passes through
unchanged; a core that cannot be reached is `unavailable`. `Router.call` raises
ConnectError only.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

from connectrpc.code import Code
from connectrpc.errors import ConnectError
from pyqwest import Client as HTTPClient

from loam_common import metrics, rendezvous
from loam_common.api.headers import ACTOR_HEADER, NAMESPACE_HEADER, TOKEN_HEADER
from loam_common.api.methods import STREAMING, UNARY
from loam_common.audit import current_actor
from loam_common.connect_client import jobs_client
from loam_common.connect_errors import to_connect
from loam_common.event_export import export_bytes
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as J
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.gen.loam.jobs.v1.jobs_connect import JobsServiceClient
from loam_common.store.runner import Store


class LocalCore(Protocol):
    """What the Router needs of an in-process queue core (`loam dev`, tests: the queue
    core's CoreRpc, built by the composition root): each JobsService method as
    `(ns, request)`, the queue listing, and its store (metrics, readiness, export)."""

    store: Store

    async def queue_list(self, ns: str) -> list[str]: ...

    async def queue_list_counts(self, ns: str) -> list[tuple[str, pb.QueueCounts]]: ...


class Router:
    def __init__(
        self,
        *,
        local: LocalCore | None = None,
        cores: Sequence[str] = (),
        internal_token: str | None = None,
        timeout_ms: int | None = None,
    ) -> None:
        if (local is None) == (not cores):
            raise ValueError("Router: give either a local core or queue-core URLs, not both or neither")
        self.local = local
        self.cores = [c.rstrip("/") for c in cores]
        if len(set(self.cores)) != len(self.cores):
            raise ValueError(f"Router: duplicate queue-core URLs in {self.cores}")
        self.internal_token = internal_token or None
        self.timeout_ms = timeout_ms
        self._clients: dict[str, JobsServiceClient] = {}
        self._http: HTTPClient | None = None

    # -- choosing a core ---------------------------------------------------------------------
    def owner(self, ns: str, key: str) -> str:
        """The core that owns `key` (a queue name; other keys contain a `/`, which queue
        names cannot, so they never collide with a queue)."""
        return rendezvous.queue_owner(ns, key, self.cores)

    def _client(self, url: str) -> JobsServiceClient:
        client = self._clients.get(url)
        if client is None:
            client = jobs_client(url, timeout_ms=self.timeout_ms)
            self._clients[url] = client
        return client

    def _headers(self, ns: str) -> dict[str, str]:
        h = {NAMESPACE_HEADER: ns}
        if self.internal_token:
            h[TOKEN_HEADER] = self.internal_token
        actor = current_actor()
        if actor is not None:  # who the call acts for: the core audits its actions with it
            h[ACTOR_HEADER] = actor.header()
        return h

    # -- calling -------------------------------------------------------------------------------
    async def call(self, ns: str, method: str, request: Any, *, timeout_ms: float | None = None) -> Any:
        """Run JobsService `method` (snake_case) for namespace `ns`. Raises ConnectError."""
        m = UNARY.get(method)
        if m is None:
            raise ConnectError(Code.UNIMPLEMENTED, f"{method} is not a unary JobsService method")
        try:
            if self.local is not None:
                return await getattr(self.local, method)(ns, request)
            if method == "complete_batch" and len(self.cores) > 1:
                return await self._complete_batch(ns, request, timeout_ms)
            return await self._forward(self.owner(ns, m.route(request)), ns, method, request, timeout_ms)
        except Exception as e:  # noqa: BLE001 - JobsErrors, store failures, transport failures
            raise _as_connect(e, self.local is None) from e

    async def _forward(self, url: str, ns: str, method: str, request: Any, timeout_ms: float | None) -> Any:
        fn = getattr(self._client(url), method)
        t = int(timeout_ms) if timeout_ms is not None and timeout_ms > 0 else None
        return await fn(request, headers=self._headers(ns), timeout_ms=t)

    async def _complete_batch(self, ns: str, req: J.CompleteBatchRequest, timeout_ms: float | None) -> Any:
        groups: dict[str, list[int]] = {}
        for i, item in enumerate(req.items):
            groups.setdefault(self.owner(ns, item.token.queue), []).append(i)
        if len(groups) <= 1:
            url = next(iter(groups), self.cores[0])
            return await self._forward(url, ns, "complete_batch", req, timeout_ms)
        order = list(groups.items())
        # The lease rides with the part its queue's owner serves (any core answers it
        # correctly; the store is shared), or with the first part.
        lease_url = self.owner(ns, req.lease.queues[0]) if req.lease.queues else ""
        with_lease = next((n for n, (url, _idx) in enumerate(order) if url == lease_url), 0)

        def part(n: int, idx: list[int]) -> J.CompleteBatchRequest:
            p = J.CompleteBatchRequest(items=[req.items[i] for i in idx])
            if n == with_lease and req.HasField("lease"):
                p.lease.CopyFrom(req.lease)
            return p

        answers = await asyncio.gather(
            *(
                self._forward(url, ns, "complete_batch", part(n, idx), timeout_ms)
                for n, (url, idx) in enumerate(order)
            )
        )
        out = J.CompleteBatchResponse()
        out.leases.extend(answers[with_lease].leases)
        slots: list[Any] = [None] * len(req.items)
        for (_url, idx), ans in zip(order, answers, strict=True):
            for i, r in zip(idx, ans.results, strict=True):
                slots[i] = r
        out.results.extend(slots)
        return out

    def stream(self, ns: str, method: str, request: Any) -> AsyncIterator[Any]:
        """Run a server-streaming method (Watch)."""
        m = STREAMING.get(method)
        if m is None:
            raise ConnectError(Code.UNIMPLEMENTED, f"{method} is not a streaming JobsService method")
        return self._stream(ns, m.name, m.route, request)

    async def _stream(self, ns: str, method: str, route: Any, request: Any) -> AsyncIterator[Any]:
        try:
            if self.local is not None:
                it = getattr(self.local, method)(ns, request)
            else:
                url = self.owner(ns, route(request))
                it = getattr(self._client(url), method)(request, headers=self._headers(ns))
            async for item in it:
                yield item
        except Exception as e:  # noqa: BLE001
            raise _as_connect(e, self.local is None) from e

    async def queue_list(self, ns: str) -> list[str]:
        """The namespace's queue names (not a JobsService method: the REST listing).
        Any core can answer: the queue registry is in the shared store."""
        try:
            if self.local is not None:
                return await self.local.queue_list(ns)
            return await self._list_remote(ns)
        except Exception as e:  # noqa: BLE001
            raise _as_connect(e, self.local is None) from e

    async def queue_list_with_counts(self, ns: str) -> list[tuple[str, pb.QueueCounts]]:
        """Every queue of the namespace with its counts (the REST queue list): one store
        snapshot when the core is in process; one counts call per queue to the cores
        otherwise (a queue obliterated meanwhile is left out)."""
        if self.local is not None:
            try:
                return await self.local.queue_list_counts(ns)
            except Exception as e:  # noqa: BLE001
                raise _as_connect(e, False) from e

        async def one(name: str) -> tuple[str, pb.QueueCounts] | None:
            try:
                r = await self.call(
                    ns, "queue_admin", J.QueueAdminRequest(queue=name, op=J.QueueOp(counts={}))
                )
            except ConnectError as e:
                if e.code.value == "not_found":
                    return None
                raise
            return name, r.counts

        found = await asyncio.gather(*(one(n) for n in await self.queue_list(ns)))
        return [x for x in found if x is not None]

    async def _list_remote(self, ns: str) -> list[str]:
        if self._http is None:
            self._http = HTTPClient()
        url = self.owner(ns, "queues/") + "/internal/v1/queues"
        headers = {"content-type": "application/json", **self._headers(ns)}
        resp = await self._http.post(url, headers=headers, content=json.dumps({"ns": ns}).encode())
        body = resp.json()
        if resp.status != 200:
            code = body.get("code", "unavailable") if isinstance(body, dict) else "unavailable"
            message = body.get("message", "") if isinstance(body, dict) else ""
            try:
                raise ConnectError(Code(code), message)
            except ValueError:
                raise ConnectError(Code.UNAVAILABLE, f"queue core answered {resp.status}") from None
        return list(body["queues"])

    async def export_events(
        self, ns: str, queue: str, since_ns: int, until_ns: int | None, fmt: str
    ) -> tuple[bytes, str]:
        """A queue's events as Parquet / Arrow bytes (not a JobsService method: REST),
        built by the core that owns the queue (any core could: the store is shared)."""
        try:
            if self.local is not None:
                return await export_bytes(self.local.store, ns, queue, since_ns, until_ns, fmt)
            body = {"ns": ns, "queue": queue, "since_ns": since_ns, "until_ns": until_ns, "format": fmt}
            return await self._post_internal(self.owner(ns, queue), "/internal/v1/events/export", ns, body)
        except Exception as e:  # noqa: BLE001
            raise _as_connect(e, self.local is None) from e

    async def metrics_text(self, ns: str | None = None) -> str:
        """The store-derived metrics (and, in process, this process's histograms):
        from the local store, or from one core (every core reads the same store)."""
        try:
            if self.local is not None:
                return await metrics.render_store(self.local.store, [ns] if ns else None)
            if self._http is None:
                self._http = HTTPClient()
            headers = {TOKEN_HEADER: self.internal_token} if self.internal_token else {}
            # Only the store-derived part: each core serves its own histograms.
            query = "?scope=store" + (f"&ns={ns}" if ns else "")  # names are URL-safe (validate.name)
            resp = await self._http.get(self.cores[0] + "/metrics" + query, headers=headers)
            if resp.status != 200:
                raise ConnectError(Code.UNAVAILABLE, f"queue core answered {resp.status} on /metrics")
            return resp.text()
        except Exception as e:  # noqa: BLE001
            raise _as_connect(e, self.local is None) from e

    async def _post_internal(self, url: str, path: str, ns: str, body: dict) -> tuple[bytes, str]:
        if self._http is None:
            self._http = HTTPClient()
        headers = {"content-type": "application/json", **self._headers(ns)}
        resp = await self._http.post(url + path, headers=headers, content=json.dumps(body).encode())
        if resp.status != 200:
            try:
                err = resp.json()
                raise ConnectError(Code(err.get("code", "unavailable")), err.get("message", ""))
            except ValueError:
                raise ConnectError(Code.UNAVAILABLE, f"queue core answered {resp.status}") from None
        return resp.content, resp.headers.get("content-type", "application/octet-stream")

    async def ready(self) -> bool:
        """Ready when the local store answers, or (remote) always: each call reports a
        core that is down as unavailable."""
        if self.local is None:
            return True
        try:
            await self.local.store.snapshot(lambda tx: tx.get(b"\x00readyz"))
        except Exception:  # noqa: BLE001
            return False
        return True

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()


def _as_connect(e: Exception, remote: bool) -> ConnectError:
    if isinstance(e, ConnectError):
        return e
    if remote:  # the HTTP client failed: connection refused, reset, a bad answer
        return ConnectError(Code.UNAVAILABLE, f"queue core unreachable: {type(e).__name__}: {e}")
    return to_connect(e)
