"""The Spark Connect proxy at the level of HTTP/2 frames: a raw client on one side, a
scripted HTTP/2 server standing in for Sail on the other (h2peer.py), the gateway's
token check over a real store in between. What a gRPC client never shows: which
frames reach upstream, the flow-control credit for what the proxy drops, HPACK tables
kept in step on both sides across refusals, and connection errors."""

from __future__ import annotations

import asyncio
import struct
from types import SimpleNamespace

import pytest
from h2peer import RawClient, ScriptedUpstream, StaticPool, grpc_message, ld, request

from loam_common.auth import ADMIN, ENGINE, token_create
from loam_common.store import LmdbBackend, Store
from loam_engines.spark import h2
from loam_engines.spark.proxy import SparkConnectProxy
from loam_gateway.auth import StoreAuthenticator

SESSION = "5e0b5c4e-8f0a-4e5c-9d7e-2b1f3c4d5e6f"
UNAUTHENTICATED, PERMISSION_DENIED, INVALID_ARGUMENT, UNIMPLEMENTED = 16, 7, 3, 12


@pytest.fixture
async def rig(tmp_path):
    store = Store(LmdbBackend(tmp_path / "auth.lmdb"))
    tokens = {}
    for ns in ("alpha", "beta"):
        tokens[ns], _ = await store.transact(token_create, ns, [ENGINE], "frames")
    tokens["no-engine"], _ = await store.transact(token_create, "alpha", [ADMIN], "frames")
    upstream = ScriptedUpstream()
    upstream_port = await upstream.start()
    pool, jvm = StaticPool(upstream_port), StaticPool(upstream_port, authorization="Bearer jvm-secret")
    proxy = SparkConnectProxy(StoreAuthenticator(store), {"sail": pool, "jvm": jvm}, port=0)
    port = await proxy.start()
    clients: list[RawClient] = []

    async def client(**kw) -> RawClient:
        c = await RawClient().connect(port, **kw)
        clients.append(c)
        return c

    try:
        yield SimpleNamespace(upstream=upstream, pool=pool, jvm=jvm, proxy=proxy, port=port, tokens=tokens,
                              client=client)  # fmt: skip
    finally:
        for c in clients:
            await c.close()
        await proxy.stop(0)
        await upstream.stop()
        await store.close()


async def test_a_call_goes_up_without_the_clients_credentials_and_with_its_namespace(rig):
    c = await rig.client()
    sid = c.call("Config", rig.tokens["alpha"], request(SESSION), metadata=(("x-custom", "kept"),))
    s = await c.ended(sid)
    assert s.status == 0
    assert bytes(s.data[5:]) == request(SESSION)  # the scripted server echoes the body
    seen = dict(rig.upstream.requests[sid].headers)
    assert seen[":path"] == "/spark.connect.SparkConnectService/Config"
    assert seen["x-loam-namespace"] == "alpha"
    assert seen["x-custom"] == "kept"
    assert seen["te"] == "trailers" and seen["content-type"] == "application/grpc"
    assert "authorization" not in seen
    assert rig.pool.acquired == [("alpha", SESSION)]
    assert rig.pool.released == [(SESSION, False)]


async def test_a_client_that_waits_for_the_servers_settings_gets_them_before_any_upstream(rig):
    c = await rig.client()
    await asyncio.wait_for(c.got_settings.wait(), 20)  # sent nothing but its preface so far
    assert rig.upstream.connections == 0  # the upstream is connected at the first call, not before
    c.send(h2.frame(h2.PING, 0, 0, b"12345678"))
    await c.until(lambda: any(f.kind == h2.PING and f.flags & h2.ACK for f in c.connection))
    sid = c.call("Config", rig.tokens["alpha"], request(SESSION))
    assert (await c.ended(sid)).status == 0
    assert rig.upstream.connections == 1
    # The upstream's own SETTINGS reached the client as a second SETTINGS frame, and the
    # client's SETTINGS reached upstream; each side got one ACK per SETTINGS it sent.
    await c.until(lambda: sum(f.kind == h2.SETTINGS and not f.flags & h2.ACK for f in c.connection) == 2)
    await rig.upstream.until(lambda: sum(f.kind == h2.SETTINGS for f in rig.upstream.frames) == 2)
    settings_up = [f for f in rig.upstream.frames if f.kind == h2.SETTINGS]
    assert [f.flags & h2.ACK for f in settings_up] == [0, 1]  # the client's, then its ACK of upstream's
    assert sum(f.kind == h2.SETTINGS and f.flags & h2.ACK for f in c.connection) == 1


async def test_a_refused_stream_never_goes_up_its_data_comes_back_and_the_connection_goes_on(rig):
    c = await rig.client()
    first = c.call("Config", rig.tokens["alpha"], request(SESSION))
    assert (await c.ended(first)).status == 0
    # A wrong token, with a request of 60,000 bytes in four DATA frames (one padded): the
    # proxy answers it and drops its bytes, and they must come back to the connection's
    # window, which the client counted them against.
    sid, headers = c.open("Config", "loam_" + "0" * 16 + "_" + "1" * 64)
    body = grpc_message(request(SESSION, ld(3, b"x" * 100)) + b"\x00" * (60_000 - 5 - 146))
    chunks = [body[i : i + 15_000] for i in range(0, len(body), 15_000)]
    frames = [h2.frame(h2.DATA, 0, sid, chunk) for chunk in chunks[:-1]]
    padded = bytes([10]) + chunks[-1] + b"\x00" * 10
    frames.append(h2.frame(h2.DATA, h2.END_STREAM | h2.PADDED, sid, padded))
    sent = sum(len(f) - 9 for f in frames)
    c.send(headers, *frames)
    refused = await c.ended(sid)
    assert refused.status == UNAUTHENTICATED
    await c.until(lambda: c.window_credit == sent)
    # The connection is still good, and upstream never heard of the refused stream (a gap
    # in the ids it sees is legal).
    after = c.call("Config", rig.tokens["alpha"], request(SESSION))
    assert (await c.ended(after)).status == 0
    assert sorted(rig.upstream.requests) == [first, after]
    assert rig.upstream.kinds_on(sid) == []
    assert rig.upstream.connections == 1
    assert c.window_credit == sent


@pytest.mark.parametrize(
    ("who", "metadata", "status"),
    [
        ("beta", (), PERMISSION_DENIED),  # another namespace's token on alpha's connection
        ("alpha", (("x-loam-engine", "jvm"),), INVALID_ARGUMENT),  # another engine on it
        ("alpha", (("x-loam-engine", "nope"),), INVALID_ARGUMENT),
        ("no-engine", (), PERMISSION_DENIED),
        (None, (), UNAUTHENTICATED),
    ],
)
async def test_a_later_call_of_another_namespace_or_engine_is_refused_not_rerouted(
    rig, who, metadata, status
):
    c = await rig.client()
    first = c.call("Config", rig.tokens["alpha"], request(SESSION))
    assert (await c.ended(first)).status == 0
    token = rig.tokens[who] if who else None
    refused = c.call("Config", token, request(SESSION), metadata=metadata)
    s = await c.ended(refused)
    assert s.status == status
    assert s.trailers["content-type"] == "application/grpc"
    again = c.call("Config", rig.tokens["alpha"], request(SESSION))
    assert (await c.ended(again)).status == 0
    assert sorted(rig.upstream.requests) == [first, again]
    assert rig.jvm.acquired == []
    assert rig.pool.acquired == [("alpha", SESSION)] * 2
    assert rig.pool.released == [(SESSION, False)] * 2


async def test_hpack_tables_stay_in_step_through_many_calls_and_refusals(rig):
    # Every call carries a new value that the client's encoder inserts in its table and the
    # scripted server's encoder inserts in its own (the echo), so both tables fill and evict;
    # every third call is refused with the proxy's own answer in between.
    c = await rig.client()
    sids = {}
    for i in range(300):
        token = rig.tokens["alpha"] if i % 3 else "loam_bad"
        value = f"call-{i}-" + "v" * (i % 50)
        sids[i] = (
            c.call("Config", token, request(SESSION), metadata=(("x-call", value),)),
            value,
            bool(i % 3),
        )
        if i % 25 == 0:
            await c.ended(sids[i][0])  # now and then let the answers catch up
    for sid, value, admitted in sids.values():
        s = await c.ended(sid)
        if admitted:
            assert s.status == 0
            assert dict(s.headers[0])["x-echo"] == value  # the client decoded the server's table
            assert dict(rig.upstream.requests[sid].headers)["x-call"] == value  # and upstream ours
        else:
            assert s.status == UNAUTHENTICATED
            assert sid not in rig.upstream.requests
    assert len(rig.pool.released) == 200


async def test_error_trailers_and_their_details_come_back_byte_for_byte(rig):
    details = b"\x08\x03\x12\x05oops!" + bytes(range(256))  # binary, as Spark's ErrorInfo
    import base64

    rig.upstream.answer = lambda headers, body: (
        [(":status", "200"), ("content-type", "application/grpc")], None,
        [("grpc-status", "13"), ("grpc-message", "boom"),
         ("grpc-status-details-bin", base64.b64encode(details).decode().rstrip("="))],
    )  # fmt: skip
    c = await rig.client()
    sid = c.call("ExecutePlan", rig.tokens["alpha"], request(SESSION))
    s = await c.ended(sid)
    assert s.status == 13
    assert s.trailers["grpc-message"] == "boom"
    assert base64.b64decode(s.trailers["grpc-status-details-bin"] + "==") == details


async def test_rst_stream_either_way_reaches_the_other_side_and_ends_the_call(rig):
    rig.upstream.answer = None  # the server answers nothing by itself: a long ExecutePlan
    c = await rig.client()
    sid = c.call("ExecutePlan", rig.tokens["alpha"], request(SESSION))
    await rig.upstream.until(lambda: sid in rig.upstream.requests and rig.upstream.requests[sid].ended)
    rig.upstream.send(h2.frame(h2.HEADERS, h2.END_HEADERS, sid, b"\x88"),
                      h2.frame(h2.DATA, 0, sid, grpc_message(b"first batch")))  # fmt: skip
    await c.until(lambda: len(c.streams[sid].data) > 0)
    assert rig.pool.released == []  # the call is still running
    c.send(h2.rst_stream(sid, h2.ErrorCode.CANCEL))  # the client cancels mid-stream
    await rig.upstream.until(lambda: h2.RST_STREAM in rig.upstream.kinds_on(sid))
    rst = next(f for f in rig.upstream.frames if f.sid == sid and f.kind == h2.RST_STREAM)
    assert int.from_bytes(rst.payload) == h2.ErrorCode.CANCEL
    assert rig.pool.released == [(SESSION, False)]

    other = c.call("ExecutePlan", rig.tokens["alpha"], request(SESSION))
    await rig.upstream.until(lambda: other in rig.upstream.requests and rig.upstream.requests[other].ended)
    rig.upstream.send(h2.rst_stream(other, h2.ErrorCode.INTERNAL_ERROR))  # the server resets one
    assert (await c.ended(other)).rst == h2.ErrorCode.INTERNAL_ERROR
    assert rig.pool.released == [(SESSION, False)] * 2


async def test_release_session_closes_the_session_in_the_pool(rig):
    c = await rig.client()
    sid = c.call("ReleaseSession", rig.tokens["alpha"], request(SESSION))
    assert (await c.ended(sid)).status == 0
    assert rig.pool.released == [(SESSION, True)]


async def test_an_upstream_goaway_reaches_the_client_and_ends_what_it_cut_off(rig):
    rig.upstream.answer = None
    c = await rig.client()
    first = c.call("ExecutePlan", rig.tokens["alpha"], request(SESSION))
    second = c.call("ExecutePlan", rig.tokens["alpha"], request(SESSION))
    await rig.upstream.until(lambda: second in rig.upstream.requests)
    rig.upstream.send(h2.goaway(first, h2.ErrorCode.NO_ERROR))  # takes `first`, not `second`
    await c.until(lambda: any(f.kind == h2.GOAWAY for f in c.connection))
    goaway = next(f for f in c.connection if f.kind == h2.GOAWAY)
    assert struct.unpack(">II", goaway.payload[:8]) == (first, h2.ErrorCode.NO_ERROR)
    assert rig.pool.released == [(SESSION, False)]  # `second` is over; `first` goes on
    late = c.call("Config", rig.tokens["alpha"], request(SESSION))
    assert (await c.ended(late)).rst == h2.ErrorCode.REFUSED_STREAM  # sent again elsewhere by a client
    assert late not in rig.upstream.requests
    rig.upstream.respond(first, [(":status", "200")], b"done", [("grpc-status", "0")])
    assert (await c.ended(first)).status == 0
    assert rig.pool.released == [(SESSION, False)] * 2
    await rig.upstream.stop()  # the server goes: so does the client's connection
    await asyncio.wait_for(c.closed.wait(), 20)


async def test_an_unknown_method_is_unimplemented_and_starts_nothing(rig):
    c = await rig.client()
    sid = c.call("/other.Service/Method", rig.tokens["alpha"], request(SESSION))
    s = await c.ended(sid)
    assert s.status == UNIMPLEMENTED
    assert rig.pool.acquired == [] and rig.upstream.connections == 0


@pytest.mark.parametrize(
    ("name", "preface", "frames", "code"),
    [
        ("HTTP/1.1", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", [], None),
        ("no SETTINGS first", h2.PREFACE + h2.frame(h2.PING, 0, 0, b"12345678"), [], None),
        ("a 7-byte PING", None, [h2.frame(h2.PING, 0, 0, b"1234567")], h2.ErrorCode.FRAME_SIZE_ERROR),
        ("DATA on stream 0", None, [h2.frame(h2.DATA, 0, 0, b"x")], h2.ErrorCode.PROTOCOL_ERROR),
        ("DATA on an idle stream", None, [h2.frame(h2.DATA, 0, 7, b"x")], h2.ErrorCode.PROTOCOL_ERROR),
        ("a header block that does not decode", None, [h2.frame(h2.HEADERS, h2.END_HEADERS, 1, b"\xff\xff\xff\xff")],
         h2.ErrorCode.COMPRESSION_ERROR),
        ("a frame inside a header block", None, [h2.frame(h2.HEADERS, 0, 1, b"\x83"), h2.frame(h2.PING, 0, 0, b"1" * 8)],
         h2.ErrorCode.PROTOCOL_ERROR),
        ("a frame over the size limit", None, [h2.frame(h2.DATA, 0, 1, b"x" * 16_385)], h2.ErrorCode.FRAME_SIZE_ERROR),
        ("a header block without end", None, [h2.frame(h2.HEADERS, 0, 1, b"\x83")]
         + [h2.frame(h2.CONTINUATION, 0, 1, b"\x00" * 16_000)] * 17, h2.ErrorCode.PROTOCOL_ERROR),
    ],
)  # fmt: skip
async def test_a_malformed_preface_or_frame_closes_the_connection_with_nothing_upstream(rig, name, preface, frames,
                                                                                         code):  # fmt: skip
    c = await rig.client(preface=preface or h2.PREFACE + h2.settings())
    if frames:
        await asyncio.wait_for(c.got_settings.wait(), 20)
        c.send(*frames)
    await asyncio.wait_for(c.closed.wait(), 20)
    goaways = [f for f in c.connection if f.kind == h2.GOAWAY]
    if code is None:
        assert goaways == []  # not HTTP/2: just closed
    else:
        assert [int.from_bytes(f.payload[4:8]) for f in goaways] == [code]
    assert rig.upstream.connections == 0
    assert rig.pool.acquired == []


async def test_a_stream_waiting_for_its_session_keeps_later_streams_behind_it_in_order(rig):
    c = await rig.client()
    warm = c.call("Config", rig.tokens["alpha"], request(SESSION))  # the connection is bound and up
    assert (await c.ended(warm)).status == 0
    held, headers = c.open("AddArtifacts", rig.tokens["alpha"])
    c.send(headers)  # a client stream whose first message has not come yet
    later = c.call("Config", rig.tokens["alpha"], request(SESSION))
    # `later` is admitted (its token is cached: within the read that brought it), but
    # upstream would take its id as closing `held`'s, so it waits. A PING sent after it
    # passes through: once upstream has it, the proxy has dealt with `later`.
    c.send(h2.frame(h2.PING, 0, 0, b"in-order"))
    await rig.upstream.until(lambda: h2.PING in rig.upstream.kinds_on(0))
    assert held not in rig.upstream.requests and later not in rig.upstream.requests
    c.send(h2.frame(h2.DATA, h2.END_STREAM, held, grpc_message(request("other-session"))))
    assert (await c.ended(held)).status == 0
    assert (await c.ended(later)).status == 0
    opened = [f.sid for f in rig.upstream.frames if f.kind == h2.HEADERS and f.sid in (held, later)]
    assert opened[:2] == [held, later]
    assert ("alpha", "other-session") in rig.pool.acquired


async def test_a_client_that_goes_away_mid_call_releases_it_and_closes_upstream(rig):
    rig.upstream.answer = None
    c = await rig.client()
    sid = c.call("ExecutePlan", rig.tokens["alpha"], request(SESSION))
    await rig.upstream.until(lambda: sid in rig.upstream.requests and rig.upstream.requests[sid].ended)
    assert rig.pool.released == []
    await c.close()
    await rig.upstream.until(lambda: rig.pool.released == [(SESSION, False)])
    # the upstream connection went with the client's: the scripted server's read loop ended
    assert rig.proxy.connections == set()


async def test_window_updates_and_settings_sent_before_upstream_reach_it_when_it_connects(rig):
    c = await rig.client()
    await asyncio.wait_for(c.got_settings.wait(), 20)
    c.send(h2.window_update(0, 1_000_000), h2.window_update(0, 48_576), h2.settings({0x4: 1_048_576}))
    sid = c.call("Config", rig.tokens["alpha"], request(SESSION))
    assert (await c.ended(sid)).status == 0
    first = [f for f in rig.upstream.frames if f.sid == 0][:3]
    assert [f.kind for f in first] == [h2.SETTINGS, h2.SETTINGS, h2.WINDOW_UPDATE]
    assert h2.parse_settings(first[1].payload) == {0x4: 1_048_576}
    assert int.from_bytes(first[2].payload) == 1_048_576
    # the proxy acknowledged both of the client's SETTINGS itself; upstream's ACKs of them
    # were kept back, so the client saw one ACK per SETTINGS it sent
    await c.until(lambda: sum(f.kind == h2.SETTINGS and not f.flags & h2.ACK for f in c.connection) == 2)
    await rig.upstream.until(
        lambda: sum(f.kind == h2.SETTINGS and f.flags & h2.ACK for f in rig.upstream.frames) == 1
    )
    assert sum(f.kind == h2.SETTINGS and f.flags & h2.ACK for f in c.connection) == 2


async def test_stopping_the_proxy_lets_a_call_in_flight_finish_and_refuses_new_ones(rig):
    rig.upstream.answer = None
    c = await rig.client()
    sid = c.call("ExecutePlan", rig.tokens["alpha"], request(SESSION))
    await rig.upstream.until(lambda: sid in rig.upstream.requests and rig.upstream.requests[sid].ended)
    stopping = asyncio.create_task(rig.proxy.stop(grace_s=20))
    await c.until(lambda: any(f.kind == h2.GOAWAY for f in c.connection))
    late = c.call("Config", rig.tokens["alpha"], request(SESSION))
    assert (await c.ended(late)).rst == h2.ErrorCode.REFUSED_STREAM
    rig.upstream.respond(sid, [(":status", "200")], b"last", [("grpc-status", "0")])
    assert (await c.ended(sid)).status == 0
    await asyncio.wait_for(stopping, 20)
    await asyncio.wait_for(c.closed.wait(), 20)
    assert rig.pool.released == [(SESSION, False)]


async def test_a_stream_reset_while_it_waits_for_its_session_never_goes_up_and_its_bytes_come_back(rig):
    c = await rig.client()
    warm = c.call("Config", rig.tokens["alpha"], request(SESSION))
    assert (await c.ended(warm)).status == 0
    sid, headers = c.open("AddArtifacts", rig.tokens["alpha"])
    c.send(headers, h2.frame(h2.DATA, 0, sid, b"\x00\x00\x00"))  # not yet the 5-byte message prefix
    c.send(h2.rst_stream(sid, h2.ErrorCode.CANCEL))
    await c.until(lambda: c.window_credit == 3)
    after = c.call("Config", rig.tokens["alpha"], request(SESSION))
    assert (await c.ended(after)).status == 0
    assert rig.upstream.kinds_on(sid) == []
    assert rig.pool.acquired == [("alpha", SESSION)] * 2  # the reset stream was never admitted
