"""Raw HTTP/2 peers for the Spark Connect proxy's frame-level tests.

- `RawClient`: a client that writes frames by hand, its header blocks HPACK-encoded with
  indexing (so the dynamic table is in use both ways), and reads every frame the proxy
  sends, decoding header blocks in order with one decoder, as a real client must.
- `ScriptedUpstream`: an HTTP/2 server on a free loopback port standing in for Sail,
  which records every frame and header block it gets and answers each request once the
  client has sent all of it: response headers, one gRPC message, trailers (`answer`).
- `StaticPool`: the pool in front of it, recording acquire and release as SailPool gets them.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import NamedTuple

import hpack

from loam_engines.spark import h2

SERVICE = "/spark.connect.SparkConnectService/"
TIMEOUT_S = 20  # a loaded machine; tests wait on events, never on this unless something is wrong


class Frame(NamedTuple):
    kind: int
    flags: int
    sid: int
    payload: bytes


async def read_frame(reader: asyncio.StreamReader) -> Frame:
    head = await reader.readexactly(9)
    length = int.from_bytes(head[:3])
    payload = await reader.readexactly(length) if length else b""
    return Frame(head[3], head[4], int.from_bytes(head[5:9]) & 0x7FFFFFFF, payload)


def grpc_message(body: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", len(body)) + body


def ld(field_no: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (payloads under 128 bytes)."""
    assert len(payload) < 128
    return bytes([(field_no << 3) | 2, len(payload)]) + payload


def request(session: str, extra: bytes = b"") -> bytes:
    """A Spark Connect request message: session id (field 1), user context (field 2)."""
    return ld(1, session.encode()) + ld(2, ld(1, b"tester")) + extra


@dataclass
class Stream:
    headers: list[list[tuple[str, str]]] = field(default_factory=list)  # each header block, in order
    data: bytearray = field(default_factory=bytearray)
    rst: int | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def trailers(self) -> dict[str, str]:
        return dict(self.headers[-1]) if self.headers else {}

    @property
    def status(self) -> int | None:
        value = self.trailers.get("grpc-status")
        return int(value) if value is not None else None


class RawClient:
    def __init__(self) -> None:
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()
        self.next_id = 1
        self.streams: dict[int, Stream] = {}
        self.connection: list[Frame] = []  # frames on stream 0, in order
        self.window_credit = 0  # the connection WINDOW_UPDATE increments received
        self.closed = asyncio.Event()
        self.got_settings = asyncio.Event()
        self.changed = asyncio.Event()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task | None = None

    async def connect(self, port: int, *, preface: bytes = h2.PREFACE + h2.settings()) -> RawClient:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", port)
        self.writer.write(preface)
        self._task = asyncio.create_task(self._read())
        return self

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self._task is not None:
            self._task.cancel()

    def send(self, *frames: bytes) -> None:
        self.writer.write(b"".join(frames))

    def open(
        self, method: str, token: str | None, *, metadata: tuple = (), end: bool = False
    ) -> tuple[int, bytes]:
        """A new stream id and its HEADERS frame (not sent). `method`: a Spark Connect
        method's name, or a whole path (starting with /)."""
        sid = self.next_id
        self.next_id += 2
        self.streams[sid] = Stream()
        headers = [(":method", "POST"), (":scheme", "http"), (":path", method if method[0] == "/" else SERVICE + method),
                   (":authority", "localhost"), ("te", "trailers"), ("content-type", "application/grpc")]  # fmt: skip
        if token is not None:
            headers.append(("authorization", f"Bearer {token}"))
        headers += list(metadata)
        block = self.encoder.encode(headers, huffman=False)
        return sid, h2.frame(h2.HEADERS, h2.END_HEADERS | (h2.END_STREAM if end else 0), sid, block)

    def call(self, method: str, token: str | None, body: bytes, *, metadata: tuple = ()) -> int:
        """Send a whole unary call (HEADERS + one DATA with END_STREAM); its stream id."""
        sid, headers = self.open(method, token, metadata=metadata)
        self.send(headers, h2.frame(h2.DATA, h2.END_STREAM, sid, grpc_message(body)))
        return sid

    async def ended(self, sid: int) -> Stream:
        s = self.streams[sid]
        await asyncio.wait_for(s.ended.wait(), TIMEOUT_S)
        return s

    async def until(self, check: Callable[[], bool]) -> None:
        """Wait until `check()` holds, woken by each frame the proxy sends."""
        async with asyncio.timeout(TIMEOUT_S):
            while not check():
                self.changed.clear()
                await self.changed.wait()

    async def _read(self) -> None:
        try:
            while True:
                f = await read_frame(self.reader)
                self._on_frame(f)
                self.changed.set()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.closed.set()
            self.changed.set()

    def _on_frame(self, f: Frame) -> None:
        if f.sid == 0:
            self.connection.append(f)
            if f.kind == h2.SETTINGS and not f.flags & h2.ACK:
                self.got_settings.set()
                self.send(h2.SETTINGS_ACK)
            elif f.kind == h2.WINDOW_UPDATE:
                self.window_credit += int.from_bytes(f.payload)
            elif f.kind == h2.PING and not f.flags & h2.ACK:
                self.send(h2.frame(h2.PING, h2.ACK, 0, f.payload))
            return
        s = self.streams.setdefault(f.sid, Stream())
        if f.kind == h2.HEADERS:
            s.headers.append(self.decoder.decode(h2.header_fragment(f.flags, f.payload)))
        elif f.kind == h2.DATA:
            s.data += h2.unpad(f.flags, f.payload)
        elif f.kind == h2.RST_STREAM:
            s.rst = int.from_bytes(f.payload)
            s.ended.set()
        if f.flags & h2.END_STREAM and f.kind in (h2.HEADERS, h2.DATA):
            s.ended.set()


@dataclass
class Received:
    headers: list[tuple[str, str]]
    data: bytearray = field(default_factory=bytearray)
    ended: bool = False


def echo_answer(headers: dict[str, str], body: bytes) -> tuple[list, bytes, list]:
    """The default answer: 200, the request's `x-call` echoed (an indexed response header,
    so the upstream's HPACK table is in use), the request body back, status 0."""
    response = [(":status", "200"), ("content-type", "application/grpc")]
    if "x-call" in headers:
        response.append(("x-echo", headers["x-call"]))
    return response, body, [("grpc-status", "0")]


class ScriptedUpstream:
    def __init__(self, settings: dict[int, int] | None = None) -> None:
        self.settings = settings or {}
        self.answer: Callable[[dict[str, str], bytes], tuple | None] | None = echo_answer
        self.connections = 0
        self.frames: list[Frame] = []  # every frame received, in order (the preface left out)
        self.requests: dict[int, Received] = {}  # stream id -> what arrived on it
        self.changed = asyncio.Event()
        self.writer: asyncio.StreamWriter | None = None
        self._server: asyncio.Server | None = None
        self._encoder = hpack.Encoder()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self._server.close()

    def send(self, *frames: bytes) -> None:
        self.writer.write(b"".join(frames))

    def respond(self, sid: int, headers: list, body: bytes | None, trailers: list | None) -> None:
        out = [h2.frame(h2.HEADERS, h2.END_HEADERS, sid, self._encoder.encode(headers))]
        if body is not None:
            out.append(h2.frame(h2.DATA, 0, sid, grpc_message(body)))
        if trailers is not None:
            out.append(
                h2.frame(h2.HEADERS, h2.END_HEADERS | h2.END_STREAM, sid, self._encoder.encode(trailers))
            )
        self.send(*out)

    def kinds_on(self, sid: int) -> list[int]:
        return [f.kind for f in self.frames if f.sid == sid]

    async def until(self, check: Callable[[], bool]) -> None:
        async with asyncio.timeout(TIMEOUT_S):
            while not check():
                self.changed.clear()
                await self.changed.wait()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writer = writer
        decoder = hpack.Decoder()
        try:
            assert await reader.readexactly(len(h2.PREFACE)) == h2.PREFACE
            writer.write(h2.settings(self.settings))
            while True:
                f = await read_frame(reader)
                self.frames.append(f)
                if f.kind == h2.SETTINGS and not f.flags & h2.ACK:
                    writer.write(h2.SETTINGS_ACK)
                elif f.kind == h2.HEADERS:
                    block = decoder.decode(h2.header_fragment(f.flags, f.payload))
                    if f.sid in self.requests:
                        self.requests[f.sid].headers += block
                    else:
                        self.requests[f.sid] = Received(block)
                elif f.kind == h2.DATA:
                    self.requests[f.sid].data += f.payload
                if f.kind in (h2.HEADERS, h2.DATA) and f.flags & h2.END_STREAM:
                    got = self.requests[f.sid]
                    got.ended = True
                    reply = self.answer(dict(got.headers), bytes(got.data[5:])) if self.answer else None
                    if reply is not None:
                        self.respond(f.sid, *reply)
                self.changed.set()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.changed.set()
            writer.close()


class StaticPool:
    """The proxy's pool over one scripted server: what SailPool's acquire and release get."""

    def __init__(self, port: int, authorization: str | None = None) -> None:
        self.backend = SimpleNamespace(port=port, authorization=authorization)
        self.acquired: list[tuple[str, str | None]] = []
        self.released: list[tuple[str | None, bool]] = []

    async def acquire(self, ns: str, session: str | None) -> SimpleNamespace:
        self.acquired.append((ns, session))
        return self.backend

    def release(self, backend: SimpleNamespace, session: str | None, closed: bool = False) -> None:
        self.released.append((session, closed))
