"""`Hub`: the live SSE connections of this process (`GET {base}/poll/{group}/{pid}`) and
the delivery of pushes to them by address.

- unicast `poll://uni@group/pid`: that connection, if it is open; else the push is
  dropped (the SDK's listener refresh recovers an `unblock`).
- anycast `poll://any@group[/pid]`: the preferred pid if it is connected, else one open
  member picked at random. Closed connections are never picked: an `execute` written
  to a dead worker's socket would wait for the 30 s retry timer.
- an anycast push to a group with no live member waits here (bounded, for
  `HOLD_S`) and goes to the first member that connects, so a worker that starts right
  after a lease expired gets its `execute` at once instead of after the retry timer.

A pid may hold several streams at once (a reconnect can overlap a stream whose close
the server has not seen yet): a push for a pid goes to each of its open streams; the
SDK ignores what it does not need (a second `execute` of one version fails acquire).

Groups are URL hosts, so they compare in lower case. Connections are per namespace:
a worker of namespace A never receives a push of namespace B.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque

from loam_durable.records import DurableError, dumps, parse_address

log = logging.getLogger(__name__)

HOLD_S = 60.0
HOLD_MAX = 1000
QUEUE_MAX = 10_000


class Connection:
    """One SSE stream: pushes wait in `frames` until the response writes them (at most
    QUEUE_MAX: a stream that is not read drops the rest). The stream's writer waits in
    `wait` for a push or a `wake` (a keep-alive tick, its client gone): one future a
    wait, set by the first push, however many follow before the writer runs."""

    def __init__(self, ns: str, group: str, pid: str) -> None:
        self.ns = ns
        self.group = group
        self.pid = pid
        self.frames: list[str] = []
        self.open = True
        self._waiter: asyncio.Future[None] | None = None

    def push(self, frame: str) -> bool:
        if not self.open:
            return False
        if len(self.frames) >= QUEUE_MAX:
            log.warning("durable: dropping a push to %s/%s: its stream is not reading", self.group, self.pid)
            return False
        self.frames.append(frame)
        self.wake()
        return True

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> str:
        """The pushes waiting, as one chunk, once there are any or `wake` is called
        ("" then, if none came); at once once the stream is closed."""
        if not self.frames and self.open:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        chunk, self.frames = "".join(self.frames), []
        return chunk


class Hub:
    def __init__(self) -> None:
        self._groups: dict[tuple[str, str], dict[str, list[Connection]]] = {}
        self._held: dict[tuple[str, str], deque[tuple[float, str]]] = {}
        self.delivered = 0
        self.dropped = 0

    def connect(self, ns: str, group: str, pid: str) -> Connection:
        """Register a stream of `pid` in `group`."""
        conn = Connection(ns, group.lower(), pid)
        self._groups.setdefault((ns, conn.group), {}).setdefault(pid, []).append(conn)
        log.debug("durable: stream of %s/%s opened (namespace %s)", conn.group, pid, ns)
        held = self._held.pop((ns, conn.group), None)
        if held:
            cutoff = time.monotonic() - HOLD_S
            for at, frame in held:
                if at >= cutoff:
                    conn.push(frame)
        return conn

    def disconnect(self, conn: Connection) -> None:
        conn.open = False
        log.debug("durable: stream of %s/%s closed", conn.group, conn.pid)
        members = self._groups.get((conn.ns, conn.group))
        streams = members.get(conn.pid) if members is not None else None
        if streams is not None and conn in streams:
            streams.remove(conn)
            if not streams:
                del members[conn.pid]  # type: ignore[union-attr]
            if not members:
                del self._groups[(conn.ns, conn.group)]

    def connections(self, ns: str, group: str) -> list[Connection]:
        return [
            c for streams in self._groups.get((ns, group.lower()), {}).values() for c in streams if c.open
        ]

    @staticmethod
    def _push_pid(streams: list[Connection] | None, frame: str) -> bool:
        sent = False
        for c in streams or ():  # every stream of the pid gets it
            sent = c.push(frame) or sent
        return sent

    def send(self, ns: str, address: str, message: dict, *, hold: bool = True) -> bool:
        """Deliver one push to this process's streams; False when none could take it (an
        anycast one is then held here, unless `hold` is False: a peer may have a taker)."""
        try:
            addr = parse_address(address)
        except DurableError:
            self.dropped += 1
            return False
        frame = _frame(message)
        members = self._groups.get((ns, addr.group), {})
        if addr.unicast:
            ok = self._push_pid(members.get(addr.pid or ""), frame)
        else:
            ok = bool(addr.pid) and self._push_pid(members.get(addr.pid or ""), frame)
            if not ok:
                live = [streams for streams in members.values() if any(c.open for c in streams)]
                start = random.randrange(len(live)) if live else 0  # a random member, then the next
                ok = any(self._push_pid(streams, frame) for streams in live[start:] + live[:start])
            if not ok and hold:
                self._hold(ns, addr.group, frame)
        log.debug("durable: push %s to %s: %s", message["kind"], address, "sent" if ok else "nobody there")
        if ok:
            self.delivered += 1
        elif hold:
            self.dropped += 1
        return ok

    def hold(self, ns: str, address: str, message: dict) -> None:
        """Keep an anycast push nobody took (here or at a peer) for the group's next member."""
        try:
            addr = parse_address(address)
        except DurableError:
            return
        self.dropped += 1
        if not addr.unicast:
            self._hold(ns, addr.group, _frame(message))

    def _hold(self, ns: str, group: str, frame: str) -> None:
        self._held.setdefault((ns, group), deque(maxlen=HOLD_MAX)).append((time.monotonic(), frame))


def _frame(message: dict) -> str:
    return "data: " + dumps(message).decode() + "\n\n"
