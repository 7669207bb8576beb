"""A server stream's messages written a loop turn's at a time
(loam_common.api.stream_writes): what reaches the layer below, and when."""

from __future__ import annotations

import asyncio

import pytest

from loam_common.api.stream_writes import MAX_BUFFERED, coalesce_streams

STREAM = "/svc/Watch"
HEAD = {"type": "http.response.start", "status": 200, "headers": []}
END = {"type": "http.response.body", "body": b"end", "more_body": False}


def body(data: bytes) -> dict:
    return {"type": "http.response.body", "body": data, "more_body": True}


class Below:
    """The layer below: what it was sent, in order; `gate`, when closed, holds each body
    write until opened (a client that does not read)."""

    def __init__(self) -> None:
        self.sent: list[dict] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail_with: BaseException | None = None

    async def __call__(self, message: dict) -> None:
        if message["type"] == "http.response.body" and message.get("more_body"):
            await self.gate.wait()
            if self.fail_with is not None:
                raise self.fail_with
        self.sent.append(message)

    def bodies(self) -> list[bytes]:
        return [m["body"] for m in self.sent if m["type"] == "http.response.body"]


def scope(path: str = STREAM) -> dict:
    return {"type": "http", "path": path}


async def test_one_turns_messages_go_out_as_one_write_in_order_between_the_head_and_the_end():
    async def app(scope, receive, send):
        await send(HEAD)
        for part in (b"a", b"b", b"c"):  # one turn: nothing awaited between them
            await send(body(part))
        await asyncio.sleep(0)  # the stream reads its next page
        await send(body(b"d"))
        await send(END)

    below = Below()
    await coalesce_streams(app, {STREAM})(scope(), None, below)
    assert below.sent[0] is HEAD
    assert below.bodies() == [b"abc", b"d", b"end"]


async def test_a_message_leaves_while_the_stream_waits_for_the_next():
    """An event is not held back until the next one: it is written when the stream
    parks (here, for longer than the test would wait)."""
    parked = asyncio.Event()

    async def app(scope, receive, send):
        await send(HEAD)
        await send(body(b"event"))
        parked.set()
        await asyncio.Event().wait()  # no more events for now

    below = Below()
    task = asyncio.create_task(coalesce_streams(app, {STREAM})(scope(), None, below))
    await parked.wait()
    await asyncio.sleep(0.01)
    assert below.bodies() == [b"event"]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_other_paths_are_sent_message_by_message():
    async def app(scope, receive, send):
        await send(HEAD)
        await send(body(b"a"))
        await send(body(b"b"))
        await send(END)

    below = Below()
    await coalesce_streams(app, {STREAM})(scope("/svc/Enqueue"), None, below)
    assert below.bodies() == [b"a", b"b", b"end"]


async def test_a_failed_write_ends_the_stream_at_its_next_send():
    """The client went away: the write that failed raises at the stream's next send, and
    nothing is written after it."""
    raised: list[BaseException] = []

    async def app(scope, receive, send):
        await send(HEAD)
        await send(body(b"a"))
        await asyncio.sleep(0)  # the write of `a` runs, and fails
        try:
            await send(body(b"b"))
        except OSError as e:
            raised.append(e)
            raise

    below = Below()
    below.fail_with = OSError("gone")
    with pytest.raises(OSError):
        await coalesce_streams(app, {STREAM})(scope(), None, below)
    assert [str(e) for e in raised] == ["gone"]
    assert below.bodies() == []


async def test_past_the_buffer_limit_a_send_waits_for_the_client():
    big = b"x" * (MAX_BUFFERED // 2)
    sent_all = asyncio.Event()

    async def app(scope, receive, send):
        await send(HEAD)
        for _ in range(4):
            await send(body(big))
        sent_all.set()
        await send(END)

    below = Below()
    below.gate.clear()  # the client does not read
    task = asyncio.create_task(coalesce_streams(app, {STREAM})(scope(), None, below))
    await asyncio.sleep(0.05)
    assert not sent_all.is_set()  # held at the limit, not buffering without end
    below.gate.set()
    await task
    assert b"".join(below.bodies()) == big * 4 + b"end"
