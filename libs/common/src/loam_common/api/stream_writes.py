"""A server stream's messages written together (`coalesce_streams`).

Connect's ASGI app sends each message of a server stream as its own `http.response.body`:
one pass through every ASGI layer below it and one socket write a message. A Watch stream
woken by a commit of 50 completions has ~100 events to send at once, each a few hundred
bytes, and a BullMQ `QueueEvents` reader on the other end reads each write apart. Here
the body chunks sent in one turn of the event loop go out as one, in order, after that
turn (the stream reads its next page, or waits, before they leave); the stream's other
messages (its head, its end) go as they come, after what is buffered. Connect's framing
is a length prefix a message, so the reader sees the same messages.

A chunk buffered is not yet written: a send returns before the bytes leave, as an ASGI
send of a body may anyway (the server's buffer). Past `MAX_BUFFERED` bytes a send waits
for the writes in flight, so a client that reads slowly slows the stream down, as each
write's own wait did.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection
from typing import Any

Send = Callable[[dict], Awaitable[None]]
ASGIApp = Callable[[dict, Any, Send], Awaitable[None]]

MAX_BUFFERED = 256 * 1024


class _CoalescingSend:
    __slots__ = ("send", "chunks", "size", "writer", "failed")

    def __init__(self, send: Send) -> None:
        self.send = send
        self.chunks: list[bytes] = []
        self.size = 0
        self.writer: asyncio.Task[None] | None = None
        self.failed: BaseException | None = None

    async def __call__(self, message: dict) -> None:
        if self.failed is not None:
            raise self.failed
        if message["type"] == "http.response.body" and message.get("more_body"):
            body = message.get("body", b"")
            if not body:
                return
            self.chunks.append(body)
            self.size += len(body)
            if self.writer is None:
                self.writer = asyncio.get_running_loop().create_task(self._write())
            if self.size >= MAX_BUFFERED:
                await self._written()
            return
        await self._written()
        await self.send(message)

    async def _write(self) -> None:
        """After the turn that buffered them: the chunks, as one body, until none is left."""
        try:
            while self.chunks:
                chunks, self.chunks, self.size = self.chunks, [], 0
                body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                await self.send({"type": "http.response.body", "body": body, "more_body": True})
        except BaseException as e:  # the next send raises it: the stream ends there
            self.failed = e
        finally:
            self.writer = None

    async def _written(self) -> None:
        """Every chunk buffered so far handed to the layer below (or its failure raised)."""
        while self.writer is not None:
            await asyncio.shield(self.writer)
        if self.failed is not None:
            raise self.failed


def coalesce_streams(app: ASGIApp, paths: Collection[str]) -> ASGIApp:
    """`app`, with the responses of the HTTP requests to `paths` (server streams) written
    a loop turn's messages at a time (see the module docstring)."""

    async def serve(scope: dict, receive: Any, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in paths:
            await app(scope, receive, send)
            return
        coalescing = _CoalescingSend(send)
        try:
            await app(scope, receive, coalescing)
        except BaseException:
            if coalescing.writer is not None:  # leave nothing running behind a failed stream
                coalescing.writer.cancel()
            raise
        await coalescing._written()  # a stream that ended without a last message

    return serve


__all__ = ["MAX_BUFFERED", "coalesce_streams"]
