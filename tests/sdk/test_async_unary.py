"""The async Client's calls on its own event loop (loam.async_unary), against a real
`loam dev`: answers and typed errors, many calls at once on pooled connections, an
abandoned long poll that takes no job, a deadline, a kept-alive connection the server
closed; and, against a bare HTTP server, a chunked answer and a non-Connect error."""

from __future__ import annotations

import asyncio

import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError

from loam import Client, errors
from loam.async_unary import AsyncUnaryClient
from loam_common.gen.loam.jobs.v1 import jobs_pb2 as jpb


async def test_calls_answer_and_errors_are_typed(client: Client) -> None:
    job = await client.enqueue("q", "t", {"n": 1})
    (leased,) = await client.lease("q", max=1)
    assert leased.id == job.id and leased.payload == {"n": 1}
    await client.complete(leased)
    with pytest.raises(errors.InvalidState):
        await client.complete(leased)
    with pytest.raises(errors.InvalidArgument) as bad:
        await client.enqueue("not a queue name!", "t")
    assert bad.value.field == "queue"


async def test_concurrent_calls_each_get_their_own_answer_and_connections_are_reused(
    client: Client, monkeypatch
) -> None:
    made = await asyncio.gather(*(client.enqueue("q", "t", {"i": i}) for i in range(60)))
    got = await asyncio.gather(*(client.get_job("q", e.id) for e in made))
    assert [j.payload["i"] for j in got] == list(range(60))
    opened = []
    real = asyncio.open_connection

    async def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        opened.append(args)
        return await real(*args, **kwargs)

    monkeypatch.setattr(asyncio, "open_connection", counted)
    for i in range(20):  # one call at a time: the pooled connections serve them all
        await client.enqueue("q", "t", {"i": i})
    assert opened == []


async def test_a_cancelled_long_poll_takes_no_job(url: str, ns: str) -> None:
    async with Client(url, namespace=ns) as waiting, Client(url, namespace=ns) as other:
        poll = asyncio.create_task(waiting.lease("q", max=1, wait=20))
        await asyncio.sleep(0.5)  # parked on the server
        poll.cancel()
        with pytest.raises(asyncio.CancelledError):
            await poll
        await asyncio.sleep(2)  # the server notices the closed connection (generous: a loaded machine)
        job = await other.enqueue("q", "t")
        (leased,) = await other.lease("q", max=1, wait=5)
        assert leased.id == job.id


async def test_a_deadline_answers_deadline_exceeded(url: str, ns: str) -> None:
    async with Client(url, namespace=ns) as c:  # the call below sets its own deadline
        with pytest.raises(errors.JobsError) as e:
            # The long poll's own wait is 5 s; the call's deadline is 0.3 s.
            await c._call(c._rpc.lease, jpb.LeaseRequest(queues=["q"], worker="w", max=1, wait_ns=5 * 10**9),
                          timeout=0.3)  # fmt: skip
        assert e.value.code == "deadline_exceeded"
        assert await c.enqueue("q", "t")  # the client works on


async def _bare_server(handler) -> tuple[asyncio.Server, str]:  # type: ignore[no-untyped-def]
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                await reader.readexactly(length)
                if not await handler(writer):
                    break
        except asyncio.IncompleteReadError:
            pass
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def test_chunked_answers_closed_idle_connections_and_foreign_errors() -> None:
    answer = jpb.ResultIncrResponse(size=3, added=True).SerializeToString()
    calls = 0

    async def handler(writer: asyncio.StreamWriter) -> bool:
        nonlocal calls
        calls += 1
        if calls == 1:  # a chunked answer in two chunks, then the server closes the connection
            half = len(answer) // 2
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/proto\r\ntransfer-encoding: chunked\r\n\r\n"
            )
            for part in (answer[:half], answer[half:]):
                writer.write(b"%x\r\n" % len(part) + part + b"\r\n")
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return False
        if calls == 2:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(answer) + answer)
            return True
        body = b"<html>bad gateway</html>"
        writer.write(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
        return True

    server, url = await _bare_server(handler)
    async with server:
        rpc = AsyncUnaryClient(url)
        req = jpb.ResultIncrRequest(key="k", member="m")
        assert (await rpc.result_incr(req, headers={})).size == 3
        await asyncio.sleep(0.1)  # the server has closed that connection by now
        assert (await rpc.result_incr(req, headers={})).size == 3  # dialled again
        with pytest.raises(ConnectError) as e:
            await rpc.result_incr(req, headers={})
        assert e.value.code is Code.UNAVAILABLE
        assert calls == 3
        await rpc.close()


async def test_answers_in_pieces_to_the_end_of_the_connection_and_unreadable() -> None:
    """An answer whose head and body arrive a few bytes at a time is read whole; one
    without a length runs to the connection's end; one that is not HTTP is Unavailable,
    and the next call dials again."""
    answer = jpb.ResultIncrResponse(size=7, added=True).SerializeToString()
    calls = 0

    async def handler(writer: asyncio.StreamWriter) -> bool:
        nonlocal calls
        calls += 1
        if calls == 1:
            whole = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(answer) + answer
            for i in range(0, len(whole), 5):
                writer.write(whole[i : i + 5])
                await writer.drain()
                await asyncio.sleep(0.002)
            return True
        if calls == 2:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/proto\r\n\r\n" + answer)
            await writer.drain()
            return False  # the body ends where the connection does
        if calls == 3:
            writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
            await writer.drain()
            return False
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(answer) + answer)
        return True

    server, url = await _bare_server(handler)
    async with server:
        rpc = AsyncUnaryClient(url)
        req = jpb.ResultIncrRequest(key="k", member="m")
        assert (await rpc.result_incr(req, headers={})).size == 7
        assert (await rpc.result_incr(req, headers={})).size == 7
        with pytest.raises(ConnectError) as e:
            await rpc.result_incr(req, headers={})
        assert e.value.code is Code.UNAVAILABLE
        assert (await rpc.result_incr(req, headers={})).size == 7
        assert calls == 4
        await rpc.close()


async def test_a_large_answer_arrives_whole(client: Client) -> None:
    """A lease whose jobs' payloads make an answer of megabytes, read in many pieces."""
    blob = "x" * 200_000
    made = [await client.enqueue("big", "t", {"blob": blob, "i": i}) for i in range(10)]
    leased = await client.lease("big", max=10)
    assert [j.id for j in leased] == [m.id for m in made]
    assert all(j.payload == {"blob": blob, "i": i} for i, j in enumerate(leased))
