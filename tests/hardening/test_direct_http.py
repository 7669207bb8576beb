"""The HTTP server's direct routes (loam_common.direct_http): a `POST` to a direct path
with a small declared body is answered by the route's handler without ASGI; everything
else reaches the ASGI app as before, in order, on the same keep-alive connection.
Real uvicorn on a real socket, raw HTTP/1.1 bytes, so keep-alive, `Connection: close`,
HTTP/1.0 and pipelining are what a client sees."""

from __future__ import annotations

import asyncio

import pytest

from loam_common.direct_http import Route
from loam_common.serving import QuietServer, uvicorn_config

MAX_BODY = 64


class App:
    """An ASGI app that answers `asgi:<method> <path> <body>`, with a direct route,
    `/direct`, that answers `direct:<body>` (or fails, for a body `boom`, or waits for
    `release` for a body `slow`), the same at `/json-only` for JSON bodies only, and a
    long-poll, `/poll`, that waits for `release` and is cancelled when its client leaves
    (`polls` keeps what became of each: `answered` or `cancelled`)."""

    def __init__(self) -> None:
        self.direct_seen: list[bytes] = []
        self.headers_seen: list[dict[str, str]] = []  # as each direct request arrived
        self.checked_seen: list = []  # each direct request's `checked`
        self.checks = 0  # calls of /checked's `check`
        self.release = asyncio.Event()
        self.polls: dict[bytes, str] = {}
        self.order: list[str] = []  # polls cancelled and the lifespan's shutdown, in turn

    def direct_routes(self):
        async def handler(headers: dict[str, str], body: bytes, checked):
            self.direct_seen.append(body)
            self.checked_seen.append(checked)
            self.headers_seen.append(dict(headers))
            headers["authorization"] = "Bearer added-by-the-handler"  # as the durable envelope's `head.auth`
            if body == b"boom":
                raise RuntimeError("boom")
            if body == b"slow":
                await self.release.wait()
            return (
                201,
                [(b"content-type", b"text/plain"), (b"x-seen-host", headers["host"].encode())],
                b"direct:" + body,
            )

        def json_only(headers: dict[str, str]) -> bool:
            return headers.get("content-type") == "application/json"

        async def poll(headers: dict[str, str], body: bytes, checked):
            self.polls[body] = "waiting"
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.polls[body] = "cancelled"
                self.order.append(f"poll {body.decode()} cancelled")
                raise
            self.polls[body] = "answered"
            return 200, [(b"content-type", b"text/plain")], b"poll:" + body

        def check(headers: dict[str, str]) -> str:
            self.checks += 1
            return f"checked {headers.get('x-caller', '-')}"

        routes = {"/direct": Route(handler), "/json-only": Route(handler, json_only),
                  "/checked": Route(handler, check=check)}  # fmt: skip
        return routes | {"/poll": Route(poll, cancel_on_close=True)}, MAX_BODY

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.shutdown":
                    self.order.append("lifespan shutdown")
                await send({"type": msg["type"] + ".complete"})
                if msg["type"] == "lifespan.shutdown":
                    return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        out = b"asgi:%s %s %s" % (scope["method"].encode(), scope["path"].encode(), body)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(out))]})  # fmt: skip
        await send({"type": "http.response.body", "body": out})


async def start(app: App, **config) -> tuple[QuietServer, asyncio.Task, int]:
    server = QuietServer(uvicorn_config(app, "127.0.0.1", 0, **config))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    return server, task, server.servers[0].sockets[0].getsockname()[1]


@pytest.fixture
async def served():
    app = App()
    server, task, port = await start(app)
    yield app, port
    app.release.set()
    server.should_exit = True
    await task


def post(path: str, body: bytes, *extra: str, version: str = "1.1") -> bytes:
    head = [f"POST {path} HTTP/{version}", "host: test.local", f"content-length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    status_line = await reader.readline()
    status = int(status_line.split()[1])
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


async def test_a_direct_post_is_answered_by_its_handler_and_the_connection_stays_open(served):
    app, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for body in (b"one", b"two"):
        writer.write(post("/direct", body))
        status, headers, answer = await read_response(reader)
        assert (status, answer) == (201, b"direct:" + body)
        assert headers["x-seen-host"] == "test.local" and "connection" not in headers
    writer.write(post("/other", b"three"))  # the same connection, the ASGI app
    assert (await read_response(reader))[2] == b"asgi:POST /other three"
    assert app.direct_seen == [b"one", b"two"]
    writer.close()


@pytest.mark.parametrize(
    "request_bytes",
    [
        post("/direct?x=1", b"q"),  # a query string
        post("/direct", b"x" * (MAX_BODY + 1)),  # over the direct routes' limit
        b"POST /direct HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n1\r\nc\r\n0\r\n\r\n",
        b"POST /direct HTTP/1.1\r\nhost: t\r\n\r\n",  # no content-length
        b"GET /direct HTTP/1.1\r\nhost: t\r\n\r\n",
        post("/direct", b"e", "expect: 100-continue"),
    ],
    ids=["query", "too-large", "chunked", "no-length", "get", "expect-continue"],
)
async def test_anything_else_goes_to_the_asgi_app(served, request_bytes):
    app, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request_bytes)
    if b"expect: 100" in request_bytes:
        assert (await reader.readline()).startswith(b"HTTP/1.1 100")
        await reader.readline()
    status, _, answer = await read_response(reader)
    assert status == 200 and answer.startswith(b"asgi:"), answer
    assert app.direct_seen == []
    writer.close()


async def test_a_route_takes_only_the_headers_it_serves(served):
    app, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post("/json-only", b"{}", "content-type: application/json"))
    assert (await read_response(reader))[2] == b"direct:{}"
    writer.write(post("/json-only", b"x", "content-type: text/plain"))
    assert (await read_response(reader))[2] == b"asgi:POST /json-only x"
    assert app.direct_seen == [b"{}"]
    writer.close()


async def test_a_head_seen_before_is_read_the_same_and_its_headers_are_each_requests_own(served):
    """Heads are kept parsed (`DirectFront.heads`): the same head again, on the same or
    another connection, is answered the same way, its handler gets a fresh header dict
    (what one request's handler added is not in the next one's), and a head that is not
    a direct route's goes to the ASGI app each time."""
    app, port = served
    for _ in range(2):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for body in (b"a", b"b"):  # the same head: the same length
            writer.write(post("/json-only", body, "content-type: application/json"))
            assert (await read_response(reader))[2] == b"direct:" + body
        writer.write(post("/json-only", b"c", "content-type: text/plain"))
        assert (await read_response(reader))[2] == b"asgi:POST /json-only c"
        writer.close()
    assert app.direct_seen == [b"a", b"b"] * 2
    assert [h.get("authorization") for h in app.headers_seen] == [None] * 4
    assert all(
        h["content-type"] == "application/json" and h["content-length"] == "1" for h in app.headers_seen
    )


async def test_heads_differing_only_in_their_length_share_one_parse_and_one_check(served):
    """A head is kept by what it says but its `Content-Length`: the same headers with
    another length are not parsed or checked again (`Route.check` runs once per head, its
    result each request's `checked`), yet each handler sees its own length, and a length
    over the limit still goes to the ASGI app."""
    app, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for body in (b"a", b"bb", b"c" * 40):
        writer.write(post("/checked", body, "x-caller: one"))
        assert (await read_response(reader))[2] == b"direct:" + body
    writer.write(post("/checked", b"d", "x-caller: two"))  # another head: checked again
    assert (await read_response(reader))[2] == b"direct:d"
    # Another casing and spacing of the length line, written by hand: a head of its own.
    writer.write(
        b"POST /checked HTTP/1.1\r\nContent-Length:  3 \r\nhost: test.local\r\nx-caller: one\r\n\r\nabc"
    )
    assert (await read_response(reader))[2] == b"direct:abc"
    assert app.checks == 3
    assert app.checked_seen == ["checked one"] * 3 + ["checked two", "checked one"]
    assert [h["content-length"] for h in app.headers_seen] == ["1", "2", "40", "1", "3"]
    too_long = b"e" * (MAX_BODY + 1)
    writer.write(post("/checked", too_long, "x-caller: one"))  # a head seen before, too long a body
    assert (await read_response(reader))[2] == b"asgi:POST /checked " + too_long
    writer.write(post("/checked", b"f", "x-caller: three"))  # uvicorn's protocol checks each request
    assert (await read_response(reader))[2] == b"direct:f"
    assert app.checked_seen[-1] == "checked three" and app.checks == 4
    writer.close()


async def test_connection_close_and_http_1_0_close_after_the_answer(served):
    _, port = served
    for request_bytes in (post("/direct", b"a", "connection: close"), post("/direct", b"b", version="1.0")):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request_bytes)
        status, headers, answer = await read_response(reader)
        assert status == 201 and headers["connection"] == "close"
        assert await reader.read() == b""  # the server closed it
        writer.close()


@pytest.mark.parametrize(
    ("behind", "answers"),
    [
        # An ASGI request, then a direct one: the connection goes to uvicorn's protocol at
        # the ASGI one, which queues the third behind it, so the ASGI app answers that too
        # (the gateway's two paths answer an envelope alike).
        ([("/other", b"2"), ("/direct", b"3")], [b"asgi:POST /other 2", b"asgi:POST /direct 3"]),
        ([("/direct", b"b"), ("/direct", b"c")], [b"direct:b", b"direct:c"]),  # answered directly
    ],
    ids=["asgi-behind", "direct-behind"],
)
async def test_pipelined_requests_are_answered_in_order(served, behind, answers):
    app, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    # A slow direct request and two behind it, in one write.
    writer.write(post("/direct", b"slow") + b"".join(post(path, body) for path, body in behind))
    await asyncio.sleep(0.2)
    assert app.direct_seen == [b"slow"]  # nothing behind it has started
    app.release.set()
    assert [(await read_response(reader))[2] for _ in range(3)] == [b"direct:slow", *answers]
    direct = [a.removeprefix(b"direct:") for a in answers if a.startswith(b"direct:")]
    assert app.direct_seen == [b"slow", *direct]
    writer.close()


async def test_a_handler_that_fails_is_a_500_and_the_connection_serves_on(served):
    _, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post("/direct", b"boom"))
    status, _, answer = await read_response(reader)
    assert status == 500 and answer == b"Internal Server Error"
    writer.write(post("/direct", b"after"))
    status, _, answer = await read_response(reader)
    assert (status, answer) == (201, b"direct:after")
    writer.close()


async def test_a_body_in_pieces_is_answered_directly(served):
    app, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    whole = post("/direct", b"piecewise")
    for i in range(0, len(whole), 5):
        writer.write(whole[i : i + 5])
        await writer.drain()
        await asyncio.sleep(0.005)
    assert (await read_response(reader))[2] == b"direct:piecewise"
    assert app.direct_seen == [b"piecewise"]
    writer.close()


async def test_after_another_request_the_direct_routes_are_still_answered_directly(served):
    app, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post("/other", b"1"))
    assert (await read_response(reader))[2] == b"asgi:POST /other 1"
    writer.write(post("/direct", b"2"))  # the connection is uvicorn's now; the route is still direct
    assert (await read_response(reader))[2] == b"direct:2"
    assert app.direct_seen == [b"2"]
    writer.close()


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"POST /direct HTTP/1.1\nhost: t\ncontent-length: 1\n\nx",  # bare line feeds
        b"POST /direct HTTP/1.1\r\nhost: t\r\n folded\r\ncontent-length: 1\r\n\r\nx",
        b"POST /direct HTTP/1.1\r\nhost: t\r\ncontent-length: 1\r\ncontent-length: 1\r\n\r\nx",
        b"POST /direct HTTP/1.1\r\nhost : t\r\ncontent-length: 1\r\n\r\nx",
        b"POST /direct HTTP/1.1\r\nhost: t\x00\r\ncontent-length: 1\r\n\r\nx",
        b"POST /direct HTTP/1.1\r\nhost: t\r\ncontent-length: +1\r\n\r\nx",
    ],
    ids=["bare-lf", "folded", "two-lengths", "space-before-colon", "nul", "signed-length"],
)
async def test_a_malformed_head_gets_uvicorns_400(served, request_bytes):
    app, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request_bytes)
    status, _, answer = await asyncio.wait_for(read_response(reader), 5)
    assert (status, answer) == (400, b"Invalid HTTP request received.")  # uvicorn's parser's
    assert app.direct_seen == []
    writer.close()


async def test_an_idle_connection_closes_after_the_keep_alive_timeout():
    app = App()
    server, task, port = await start(app, timeout_keep_alive=0.3)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for i in range(6):  # busy for longer than the timeout: open throughout
            writer.write(post("/direct", b"%d" % i))
            assert (await read_response(reader))[2] == b"direct:%d" % i
            await asyncio.sleep(0.1)
        assert await asyncio.wait_for(reader.read(), 3) == b""  # then idle: closed
        writer.close()
    finally:
        server.should_exit = True
        await task


async def test_shutdown_answers_the_request_in_flight_and_closes():
    app = App()
    server, task, port = await start(app)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", port)
    idle_writer.write(post("/direct", b"idle"))
    await read_response(idle_reader)
    writer.write(post("/direct", b"slow"))
    while b"slow" not in app.direct_seen:
        await asyncio.sleep(0.01)
    server.should_exit = True
    assert await asyncio.wait_for(idle_reader.read(), 3) == b""  # idle: closed at once
    app.release.set()
    status, headers, answer = await asyncio.wait_for(read_response(reader), 3)
    assert (status, answer, headers["connection"]) == (201, b"direct:slow", "close")
    await task
    writer.close()
    idle_writer.close()


async def test_a_shutdown_ends_a_parked_long_poll_after_its_grace_period_before_the_app_stops():
    app = App()
    server, task, port = await start(app, timeout_graceful_shutdown=0.3)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post("/poll", b"parked"))
    while b"parked" not in app.polls:
        await asyncio.sleep(0.01)
    server.should_exit = True
    await asyncio.wait_for(task, 5)
    assert app.order == ["poll parked cancelled", "lifespan shutdown"]
    assert await asyncio.wait_for(reader.read(), 3) == b""  # closed, with no answer
    writer.close()


async def test_a_client_gone_mid_request_leaves_the_server_serving(served):
    app, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post("/direct", b"slow"))
    while b"slow" not in app.direct_seen:
        await asyncio.sleep(0.01)
    writer.close()
    await asyncio.sleep(0.05)
    app.release.set()
    await asyncio.sleep(0.05)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post("/direct", b"next"))
    assert (await read_response(reader))[2] == b"direct:next"
    writer.close()


async def test_a_long_poll_ends_with_its_client_and_other_requests_do_not(served):
    app, port = served
    polling = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
    for (_, writer), body in zip(polling, (b"left", b"stayed"), strict=True):
        writer.write(post("/poll", body))
    _, slow_writer = await asyncio.open_connection("127.0.0.1", port)
    slow_writer.write(post("/direct", b"slow"))
    while len(app.polls) < 2 or b"slow" not in app.direct_seen:
        await asyncio.sleep(0.01)
    polling[0][1].close()
    slow_writer.close()
    for _ in range(100):
        if app.polls[b"left"] == "cancelled":
            break
        await asyncio.sleep(0.01)
    assert app.polls == {b"left": "cancelled", b"stayed": "waiting"}
    app.release.set()
    reader, writer = polling[1]
    assert (await asyncio.wait_for(read_response(reader), 3))[2] == b"poll:stayed"
    # the request that is not a long-poll ran to its end, its answer dropped
    writer.write(post("/direct", b"after"))
    assert (await read_response(reader))[2] == b"direct:after"
    assert app.direct_seen.count(b"slow") == 1
    writer.close()


async def test_after_the_hand_over_a_long_poll_goes_to_the_asgi_app(served):
    # uvicorn's protocol watches a client through the ASGI app's `http.disconnect`
    app, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /first HTTP/1.1\r\nhost: t\r\n\r\n")
    assert (await read_response(reader))[2] == b"asgi:GET /first "
    writer.write(post("/poll", b"p"))
    assert (await read_response(reader))[2] == b"asgi:POST /poll p"
    assert app.polls == {}
    writer.close()
