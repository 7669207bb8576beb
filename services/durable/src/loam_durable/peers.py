"""`Peers`: the other processes serving the push channel over the same store, and the
hand-over of a push to whichever of them holds its connection.

In a split deployment several gateways serve `/resonate` over one store, and a worker's
SSE stream lives on one of them, while the request that makes its work (a `promise.create`,
a settle that resumes a parent, a fulfil that unblocks a listener) may arrive at any
other. Every such process heartbeats a membership of kind `durable-push` (the fenced
membership the sweepers use, `loam_common.ownership`) whose id is the base URL its peers
reach its push channel at. A push the local `Hub` cannot deliver is POSTed, after the
commit and off the request's path, to `<peer base>/internal/push` of each live peer in
random order until one delivers it (as the sweeper's `RemoteWake` hands a ready queue to
the core that owns it); when nobody takes it the local Hub holds it as before, and the
retry timer and the SDKs' listener refresh stay the last resort, as in Resonate.

The peer list is read from the store every `interval` and again whenever a push finds
no taker among the peers known, so a gateway that started a moment ago is found at once.

`OutboxNotice`: the wake-up of the store's outbox. The durable timers of a process
without connections (a sweeper) write their pushes to the outbox in the transaction that
makes them; after that commit they POST `{"ns"}` to `<peer base>/internal/outbox` of every
live member of the same membership, and each one drains the outbox onto its streams at
once (timers.DurableOutbox.wake). SQLite and LMDB have no cross-process notification and
TiKV deployments share no memory, so the wake-up is this POST, as the sweeper's
`RemoteWake` wakes a queue core's parked leases. The outbox's own slow pass only
recovers a notice that was lost (a gateway restarting at that moment).

Internal calls carry LOAM_INTERNAL_TOKEN (`x-loam-internal-token`); without one
configured only loopback peers may call (`internal_allowed`).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import random
from collections.abc import Mapping

from loam_common.api.headers import TOKEN_HEADER
from loam_common.loop import Loop
from loam_common.ownership import member_heartbeat, member_leave, members_live
from loam_common.serving import is_loopback
from loam_common.store.runner import Store

log = logging.getLogger(__name__)

KIND = "durable-push"
PUSH_PATH = "/internal/push"
OUTBOX_PATH = "/internal/outbox"
TTL_NS = 10_000_000_000
FORWARD_TIMEOUT_S = 2.0


def internal_allowed(headers: Mapping[str, str], peer_host: str | None, token: str | None) -> bool:
    """An internal call: the deployment's shared token when one is set, else loopback only."""
    if token:
        return hmac.compare_digest((headers.get(TOKEN_HEADER) or "").encode(), token.encode())
    return is_loopback(peer_host)


class Peers(Loop):
    name = "durable-peers"

    def __init__(
        self, store: Store, self_url: str, internal_token: str | None = None, interval: float = 2.0
    ) -> None:
        super().__init__(interval)
        self.store = store
        self.self_url = self_url.rstrip("/")
        self.internal_token = internal_token or None
        self.live: list[str] = []
        self.forwarded = 0
        self.unclaimed = 0
        self._http = None
        self._tasks: set[asyncio.Task] = set()

    async def run_once(self) -> list[str]:
        await self.store.transact(member_heartbeat, KIND, self.self_url, TTL_NS)
        return await self.refresh()

    async def refresh(self) -> list[str]:
        members = await self.store.snapshot(members_live, KIND)
        self.live = [m for m in members if m != self.self_url]
        return self.live

    async def on_stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        try:
            await self.store.transact(member_leave, KIND, self.self_url)
        except Exception:  # the store may be closing; the membership then expires
            log.exception("durable peers: could not leave")

    def forward_later(self, ns: str, address: str, message: dict, on_unclaimed) -> None:
        """Offer a push to the peers in the background; `on_unclaimed()` if none takes it."""
        task = asyncio.ensure_future(self._forward_or_else(ns, address, message, on_unclaimed))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _forward_or_else(self, ns: str, address: str, message: dict, on_unclaimed) -> None:
        try:
            if await self.forward(ns, address, message):
                return
        except Exception:  # noqa: BLE001 - best effort, like every push
            log.exception("durable peers: forwarding a push failed")
        self.unclaimed += 1
        on_unclaimed()

    async def forward(self, ns: str, address: str, message: dict) -> bool:
        """Whether a peer delivered the push to one of its streams."""
        body = json.dumps({"ns": ns, "address": address, "message": message}, separators=(",", ":")).encode()
        tried: set[str] = set()
        for attempt in range(2):
            if attempt:  # nobody known took it: a peer may have joined since the last read
                await self.refresh()
            peers = [p for p in self.live if p not in tried]
            random.shuffle(peers)
            for peer in peers:
                tried.add(peer)
                if await self._post(peer, body):
                    self.forwarded += 1
                    return True
        return False

    async def _post(self, peer: str, body: bytes) -> bool:
        if self._http is None:
            from pyqwest import Client

            self._http = Client()
        resp = await _post_internal(self._http, peer + PUSH_PATH, body, self.internal_token)
        return resp is not None and bool(json.loads(resp.content).get("delivered"))


async def _post_internal(http, url: str, body: bytes, token: str | None):  # noqa: ANN001 - a pyqwest Client
    """One internal POST; its response when it answered 200, else None (logged)."""
    headers = {"content-type": "application/json"}
    if token:
        headers[TOKEN_HEADER] = token
    try:
        resp = await asyncio.wait_for(http.post(url, headers=headers, content=body), FORWARD_TIMEOUT_S)
    except Exception as e:  # noqa: BLE001 - a peer that is gone or slow: the caller goes on
        log.info("durable peers: %s did not answer: %s", url, e)
        return None
    if resp.status != 200:
        log.warning("durable peers: %s refused: HTTP %s %r", url, resp.status, resp.content[:200])
        return None
    return resp


class OutboxNotice:
    """Tells the processes serving the push channel that the outbox holds pushes of `ns`.

    `notify(ns)` is called after the commit that wrote them and returns at once; the
    POSTs run in the background, one round at a time: notices that arrive while a round
    is in flight make one more round after it, never one each."""

    def __init__(self, store: Store, internal_token: str | None = None) -> None:
        self.store = store
        self.internal_token = internal_token or None
        self.sent = 0
        self._pending: set[str] = set()
        self._task: asyncio.Task | None = None
        self._http = None

    def notify(self, ns: str) -> None:
        self._pending.add(ns)
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._rounds())

    async def _rounds(self) -> None:
        while self._pending:
            namespaces, self._pending = self._pending, set()
            try:
                await self._send(namespaces)
            except Exception:  # noqa: BLE001 - the outbox's slow pass still drains it
                log.exception("durable outbox notice failed")

    async def _send(self, namespaces: set[str]) -> None:
        members = await self.store.snapshot(members_live, KIND)
        if not members:
            return
        if self._http is None:
            from pyqwest import Client

            self._http = Client()
        for ns in sorted(namespaces):
            body = json.dumps({"ns": ns}, separators=(",", ":")).encode()
            answered = await asyncio.gather(
                *(_post_internal(self._http, m + OUTBOX_PATH, body, self.internal_token) for m in members)
            )
            self.sent += sum(r is not None for r in answered)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
