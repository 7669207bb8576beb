"""One client connection of the Spark Connect proxy, relayed frame by frame to its
namespace's server over one upstream connection of its own.

The relay reads frame headers and nothing of the frames it does not have to: DATA,
WINDOW_UPDATE, RST_STREAM, PING, GOAWAY and the upstream's header blocks (its answers,
trailers with Spark's `grpc-status-details-bin`) pass through as bytes, in order, in
one write per read. What it does read:

- *The client's header blocks*, HPACK-decoded with the connection's decoder (whose
  dynamic table must follow every block), checked by the proxy (`SparkConnectProxy.admit`:
  token, engine, session) and written again for upstream without the client's
  credentials and with the namespace (`h2.literal_block`: no HPACK table on either
  side changes, so no encoder state is kept).
- *A new stream's first request bytes*: the session id leads every Spark Connect
  request (field 1), and the pool needs it before the call may reach a server (a
  session its stopped server held is refused, not re-created empty). So a stream is
  held, HEADERS and all, until its first DATA names the session (gRPC clients send
  both in one write, so this costs no round trip). Streams reach upstream in the order
  the client opened them (HTTP/2 closes any lower stream id a peer has not seen yet),
  so a held stream holds back the HEADERS of later new streams, never frames of
  streams already open.
- *Stream ends both ways* (END_STREAM, RST_STREAM, the connection's loss), for the
  pool's bookkeeping: `SailPool.release` once per admitted call, as the call ends.

A connection is bound to the namespace and engine of its first admitted stream and
to that server's upstream connection, which is opened then, not before: the relay
answers SETTINGS and PING itself until there is one, and sends the client its own
empty SETTINGS at once so a client that waits for the server's before it sends a
request does not wait forever. The upstream's SETTINGS then follow as a second SETTINGS
frame (legal), the client's ACK of the relay's is kept back, and the client's SETTINGS
go upstream with their ACKs from upstream kept back for those the relay already
acknowledged. A stream the proxy refuses is answered here (gRPC trailers-only, no
HPACK table touched), never reaches upstream (gaps in stream ids are legal), and the
bytes of its DATA frames, which the client counted against the connection's window,
go back to it as connection WINDOW_UPDATEs.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import deque
from typing import TYPE_CHECKING, Any

import hpack

from loam_engines.spark import h2
from loam_engines.spark.h2 import ErrorCode, ProtocolError, Status

if TYPE_CHECKING:
    from loam_engines.spark.proxy import Admitted, SparkConnectProxy

log = logging.getLogger("loam.engines.spark.proxy")

# stream states, in the order a stream goes through them
HELD = 0  # headers decoded; waiting for the bytes that name its session
ADMITTING = 1  # the proxy is checking it (token, engine, server, session)
READY = 2  # admitted; waiting for lower streams to go upstream first
OPEN = 3  # upstream has it
GONE = 4  # refused or reset before it went upstream

_HEAD_LIMIT = 64 * 1024  # the most of a stream's first bytes kept to find its session id
_CACHE_LIMIT = 256
_BLOCK_LIMIT = 256 * 1024  # a header block past this is not a gRPC call's


class _Stream:
    __slots__ = ("id", "state", "headers", "path", "end_on_headers", "held", "head", "session", "admitted",
                 "client_done", "server_done", "released")  # fmt: skip

    def __init__(self, sid: int, headers: list[tuple[str, str]], end_on_headers: bool) -> None:
        self.id = sid
        self.state = HELD
        self.headers = headers
        self.path = next((v for k, v in headers if k == ":path"), "")
        self.end_on_headers = end_on_headers
        self.held: list[Any] = []  # frames (bytes) or client trailers (a header list, end flag)
        self.head = bytearray()
        self.session: str | None = None
        self.admitted: Admitted | None = None
        self.client_done = end_on_headers
        self.server_done = False
        self.released = False


def _integer_end(block: bytes, i: int, prefix_mask: int) -> int:
    """Where an HPACK integer starting at `i` with a `prefix_mask` prefix ends."""
    b = block[i]
    i += 1
    if b & prefix_mask == prefix_mask:
        while block[i] & 0x80:
            i += 1
        i += 1
    return i


def _string_end(block: bytes, i: int) -> int:
    """Where an HPACK string literal starting at `i` ends."""
    b = block[i]
    length, i = b & 0x7F, i + 1
    if length == 0x7F:
        shift = 0
        length = 0x7F
        while True:
            b = block[i]
            i += 1
            length += (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
    return i + length


def table_neutral(block: bytes) -> bool:
    """Whether a header block leaves the HPACK table as it is: only indexed fields and
    literals without indexing or never indexed (RFC 7541 §6.1, §6.2.2, §6.2.3), no
    insertion and no size update. Decoded against the same table, such a block gives the
    same headers every time."""
    i, n = 0, len(block)
    try:
        while i < n:
            b = block[i]
            if b & 0x80:  # indexed
                i = _integer_end(block, i, 0x7F)
            elif b & 0xE0 == 0:  # literal without indexing / never indexed
                named = b & 0x0F
                i = _integer_end(block, i, 0x0F)
                if not named:
                    i = _string_end(block, i)
                i = _string_end(block, i)
            else:  # an insertion or a table size update
                return False
    except IndexError:
        return False
    return i == n


class ClientConnection(asyncio.Protocol):
    def __init__(self, proxy: SparkConnectProxy) -> None:
        self.proxy = proxy
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.upstream: _Upstream | None = None
        self.admitted: Admitted | None = None  # the first admitted stream's: namespace, engine, server
        self.closed = False
        self._rest = b""  # the client's bytes not yet a whole frame
        self._preface = False
        self._decoder = hpack.Decoder()
        # a header block that leaves the HPACK table as it is -> its headers
        self._neutral: dict[bytes, list[tuple[str, str]]] = {}
        self._encoded: dict[tuple, bytes] = {}  # (client headers, ns, upstream auth) -> upstream block
        self._block: tuple[int, int, bytearray] | None = None  # a header block across CONTINUATION frames
        self.last_stream = 0  # the highest stream id the client opened
        self.streams: dict[int, _Stream] = {}
        self._order: deque[_Stream] = deque()  # streams not yet upstream, lowest id first
        self._admitting = asyncio.Lock()  # admissions in stream order: the first binds the connection
        self._tasks: set[asyncio.Task] = set()
        self._up: list[bytes] = []  # bytes for upstream, written at the end of each step
        self._down: list[bytes] = []  # bytes for the client, likewise
        self._early_settings: list[bytes] = []  # client SETTINGS before upstream (acknowledged here)
        self._early_window = 0  # client connection WINDOW_UPDATE increments before upstream
        self._own_settings_acked = False  # the client's first SETTINGS ACK is for the relay's
        self._max_frame_in = h2.DEFAULT_MAX_FRAME_SIZE
        self._max_frame_up = h2.DEFAULT_MAX_FRAME_SIZE
        self._upstream_last: int | None = None  # the upstream's GOAWAY: no stream above goes up
        self._draining = False  # the proxy is stopping: no new stream is admitted
        self._reading = False  # inside data_received: it writes what the read produced at its end
        self._table_size_update: int | None = None  # to announce in the relay's next header block
        self.idle = asyncio.Event()
        self.idle.set()

    # -- the client's side -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        _nodelay(transport)
        transport.write(h2.settings())  # type: ignore[attr-defined]
        self.proxy.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._close()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        if self._rest:
            data = self._rest + data
            self._rest = b""
        self._reading = True
        try:
            if not self._preface:
                start = data[: len(h2.PREFACE)]
                if start != h2.PREFACE[: len(start)] or (len(data) >= len(h2.PREFACE) + 4
                                                         and data[len(h2.PREFACE) + 3] != h2.SETTINGS):  # fmt: skip
                    log.info("closing a connection that did not start with HTTP/2's preface")
                    self._close()
                    return
                if len(data) < len(h2.PREFACE) + 9:
                    self._rest = data
                    return
                self._preface = True
                data = data[len(h2.PREFACE) :]
            self._client_frames(data)
        except ProtocolError as e:
            log.info("closing a Spark Connect connection: %s", e)
            self._fail(e.code)
            return
        except hpack.HPACKError as e:
            log.info("closing a Spark Connect connection: a header block does not decode (%s)", e)
            self._fail(ErrorCode.COMPRESSION_ERROR)
            return
        finally:
            self._reading = False
        self._flush()

    def _step_done(self) -> None:
        """An admission is through: write what it produced now, unless it ran inside a read
        of the client's bytes (started eagerly, it did not wait), which writes once at its end."""
        if not self._reading:
            self._flush()

    def _client_frames(self, data: bytes) -> None:
        n, pos, passed = len(data), 0, 0  # data[passed:pos] goes upstream as it is
        while n - pos >= 9:
            length = int.from_bytes(data[pos : pos + 3])
            end = pos + 9 + length
            if length > self._max_frame_in:
                raise ProtocolError(f"a {length}-byte frame", ErrorCode.FRAME_SIZE_ERROR)
            if end > n:
                break
            kind, flags = data[pos + 3], data[pos + 4]
            sid = int.from_bytes(data[pos + 5 : pos + 9]) & 0x7FFFFFFF
            if self._block is not None and kind != h2.CONTINUATION:
                raise ProtocolError("a frame inside a header block")
            # The frames that go upstream untouched extend the run of bytes to pass.
            if kind == h2.DATA:
                s = self.streams.get(sid)
                if s is not None and s.state == OPEN:
                    if flags & h2.END_STREAM:
                        self._client_end(s)
                    pos = end
                    continue
            elif kind == h2.WINDOW_UPDATE:
                if length != 4:
                    raise ProtocolError("a WINDOW_UPDATE frame not 4 bytes long", ErrorCode.FRAME_SIZE_ERROR)
                if (self.upstream is not None and sid == 0) or (
                    sid in self.streams and self.streams[sid].state == OPEN
                ):
                    pos = end
                    continue
            if passed < pos:
                self._up.append(data[passed:pos])
            self._client_frame(kind, flags, sid, data, pos, end)
            pos = passed = end
        if passed < pos:
            self._up.append(data[passed:pos])
        self._rest = data[pos:]

    def _client_frame(self, kind: int, flags: int, sid: int, data: bytes, pos: int, end: int) -> None:
        payload = data[pos + 9 : end]
        if kind == h2.DATA:
            if sid == 0 or sid > self.last_stream or not sid & 1:
                raise ProtocolError(f"DATA on stream {sid}, which is not open")
            s = self.streams.get(sid)
            if s is None:  # refused, reset or over: its bytes go back to the client's window
                if len(payload):
                    self._down.append(h2.window_update(0, len(payload)))
                return
            s.held.append(data[pos:end])
            if flags & h2.END_STREAM:
                s.client_done = True
            if s.state == HELD:
                if len(s.head) < _HEAD_LIMIT:
                    s.head += h2.unpad(flags, payload)
                self._maybe_admit(s)
        elif kind == h2.HEADERS:
            if sid == 0:
                raise ProtocolError("HEADERS on stream 0")
            fragment = h2.header_fragment(flags, payload)
            if flags & h2.END_HEADERS:
                self._header_block(sid, flags, fragment)
            else:
                self._block = (sid, flags, bytearray(fragment))
        elif kind == h2.CONTINUATION:
            if self._block is None or self._block[0] != sid:
                raise ProtocolError("CONTINUATION outside a header block")
            self._block[2].extend(payload)
            if len(self._block[2]) > _BLOCK_LIMIT:
                raise ProtocolError("a header block over 256 KiB")
            if flags & h2.END_HEADERS:
                first_sid, first_flags, block = self._block
                self._block = None
                self._header_block(first_sid, first_flags, bytes(block))
        elif kind == h2.SETTINGS:
            if sid != 0:
                raise ProtocolError("SETTINGS on a stream")
            if flags & h2.ACK:
                if not self._own_settings_acked:
                    self._own_settings_acked = True  # it acknowledges the relay's empty SETTINGS
                elif self.upstream is not None:
                    self._up.append(data[pos:end])
                return
            params = h2.parse_settings(payload)
            if self.upstream is not None:
                self._up.append(data[pos:end])
            else:
                self._early_settings.append(data[pos:end])
                self._down.append(h2.SETTINGS_ACK)
                # Acknowledged here, so the relay is the encoder whose table must fit it: a
                # smaller table is announced in the relay's next header block (RFC 7541 §4.2).
                size = params.get(h2.HEADER_TABLE_SIZE)
                if size is not None and size < h2.DEFAULT_HEADER_TABLE_SIZE:
                    self._table_size_update = size
        elif kind == h2.PING:
            if length_of(data, pos) != 8 or sid != 0:
                raise ProtocolError("a malformed PING", ErrorCode.FRAME_SIZE_ERROR)
            if self.upstream is not None:
                self._up.append(data[pos:end])
            elif not flags & h2.ACK:
                self._down.append(h2.frame(h2.PING, h2.ACK, 0, payload))
        elif kind == h2.WINDOW_UPDATE:
            increment = int.from_bytes(payload) & 0x7FFFFFFF
            if increment == 0:
                raise ProtocolError("a WINDOW_UPDATE of 0")
            if sid == 0:
                self._early_window += increment
            elif (s := self.streams.get(sid)) is not None:
                s.held.append(data[pos:end])
        elif kind == h2.RST_STREAM:
            if length_of(data, pos) != 4:
                raise ProtocolError("an RST_STREAM frame not 4 bytes long", ErrorCode.FRAME_SIZE_ERROR)
            if sid == 0 or sid > self.last_stream:
                raise ProtocolError(f"RST_STREAM on stream {sid}, which is not open")
            s = self.streams.get(sid)
            if s is None:
                return
            if s.state == OPEN:
                self._up.append(data[pos:end])
            self._stream_over(s)
        elif kind == h2.GOAWAY:
            if self.upstream is not None:
                self._up.append(data[pos:end])
        elif kind == h2.PUSH_PROMISE:
            raise ProtocolError("PUSH_PROMISE from a client")
        elif kind == h2.PRIORITY:
            if length_of(data, pos) != 5:
                raise ProtocolError("a PRIORITY frame not 5 bytes long", ErrorCode.FRAME_SIZE_ERROR)
        # any other type is ignored (RFC 9113 §4.1)

    def _header_block(self, sid: int, flags: int, block: bytes) -> None:
        headers = self._decode(block)
        end_stream = bool(flags & h2.END_STREAM)
        s = self.streams.get(sid)
        if s is not None:  # the client's trailers on a stream it opened
            s.client_done = s.client_done or end_stream
            if s.state == OPEN:
                self._up.append(self._upstream_headers(sid, s, headers, end_stream))
                if end_stream:
                    self._client_end(s)
            else:
                s.held.append((headers, end_stream))
                if s.state == HELD and end_stream:
                    self._maybe_admit(s)
            return
        if sid <= self.last_stream:
            return  # a stream already over: decoded for the table's sake, nothing else
        if not sid & 1:
            raise ProtocolError(f"a client opened the even stream {sid}")
        self.last_stream = sid
        s = _Stream(sid, headers, end_stream)
        if self._draining or self._upstream_last is not None or self.closed:
            # no new stream goes up now: the client may send it again elsewhere
            self._down.append(h2.rst_stream(sid, ErrorCode.REFUSED_STREAM))
            return
        self.streams[sid] = s
        self._order.append(s)
        self.idle.clear()
        path = s.path
        if not path.startswith(self.proxy.service_prefix):
            self._refuse(s, Status.UNIMPLEMENTED, f"unknown method {path}")
            return
        self._maybe_admit(s)

    def _decode(self, block: bytes) -> list[tuple[str, str]]:
        # A block that leaves the table as it is decodes to the same headers each time until
        # a block that changes the table: a client's repeated calls decode once (gRPC
        # clients send the token as a literal without indexing, the rest indexed).
        if table_neutral(block):
            headers = self._neutral.get(block)
            if headers is None:
                headers = self._decoder.decode(block)
                if len(self._neutral) >= _CACHE_LIMIT:
                    self._neutral.clear()
                self._neutral[block] = headers
            return headers
        self._neutral.clear()
        return self._decoder.decode(block)

    def _maybe_admit(self, s: _Stream) -> None:
        """Admit `s` once its first bytes name its session (or the client sent all it will)."""
        if s.client_done:
            found, session = True, self.proxy.request_session(bytes(s.head))[1]
        else:
            found, session = self.proxy.request_session(bytes(s.head))
            found = found or len(s.head) >= _HEAD_LIMIT
        if not found:
            return
        s.session = session
        s.state = ADMITTING
        # Started eagerly: with the token cached and the server up nothing in it waits, so
        # the call goes upstream within this read, without a trip through the loop.
        task = asyncio.Task(self._admit(s), loop=self.loop, eager_start=True)
        if not task.done():
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _admit(self, s: _Stream) -> None:
        async with self._admitting:
            if s.state != ADMITTING or self.closed:
                return
            try:
                outcome = await self.proxy.admit(dict_of(s.headers), s.session, self.admitted)
            except Exception:  # noqa: BLE001 - one stream's failure answers that stream
                log.exception("admitting a Spark Connect call failed")
                outcome = (Status.INTERNAL, "the Spark Connect proxy failed to route this call")
            if isinstance(outcome, tuple):
                if s.state == ADMITTING:
                    self._refuse(s, *outcome)
                self._step_done()
                return
            s.admitted = outcome
            if s.state != ADMITTING or self.closed or self._upstream_last is not None:
                self._release(s, closed=False)  # reset or cut off while it was admitted
                if s.state == ADMITTING:
                    self._down.append(h2.rst_stream(s.id, ErrorCode.REFUSED_STREAM))
                    self._stream_over(s)
                self._step_done()
                return
            if self.admitted is None:
                self.admitted = outcome
                try:
                    await self._connect(outcome)
                except OSError as e:
                    self.admitted = None
                    self._release(s, closed=False)
                    if s.state == ADMITTING:
                        self._refuse(s, Status.FAILED_PRECONDITION,
                                     f"the {outcome.engine} server of namespace {outcome.ns!r} cannot be reached: {e}")  # fmt: skip
                    self._step_done()
                    return
            elif outcome.backend is not self.admitted.backend:
                # The server this connection relays to has stopped and another has started:
                # the client is told to open a new connection and send the call there.
                self._draining = True
                self._release(s, closed=False)
                self._down.append(h2.rst_stream(s.id, ErrorCode.REFUSED_STREAM))
                self._stream_over(s)
                self._down.append(h2.goaway(self.last_stream, ErrorCode.NO_ERROR))
                self._step_done()
                return
            if s.state != ADMITTING or self.closed:  # reset or cut off while connecting
                self._release(s, closed=False)
                self._step_done()
                return
            s.state = READY
            self._forward_ready()
            self._step_done()

    async def _connect(self, admitted: Admitted) -> None:
        _, upstream = await self.loop.create_connection(
            lambda: _Upstream(self), "127.0.0.1", admitted.backend.port
        )
        if self.closed:  # the client went while it connected
            upstream.transport.close()
            return
        self.upstream = upstream
        out = [h2.PREFACE, *self._early_settings]
        upstream.swallow_acks = len(self._early_settings)  # the relay has acknowledged them
        if not self._early_settings:
            out.append(h2.settings())  # the preface must carry a SETTINGS frame
            upstream.swallow_acks = 1
        self._early_settings = []
        if self._early_window:
            out.append(h2.window_update(0, self._early_window))
            self._early_window = 0
        self._up[:0] = out

    def _forward_ready(self) -> None:
        """Send upstream every admitted stream whose lower streams have gone up or away."""
        order = self._order
        while order and order[0].state in (READY, GONE):
            s = order.popleft()
            if s.state == GONE:
                continue
            s.state = OPEN
            self._up.append(self._upstream_headers(s.id, s, s.headers, s.end_on_headers))
            for item in s.held:
                if isinstance(item, tuple):
                    self._up.append(self._upstream_headers(s.id, s, *item))
                else:
                    self._up.append(item)
            s.held = []

    def _upstream_headers(self, sid: int, s: _Stream, headers: list, end_stream: bool) -> bytes:
        admitted = s.admitted
        auth = admitted.backend.authorization
        key = (tuple(headers), admitted.ns, auth)
        block = self._encoded.get(key)
        if block is None:
            block = h2.literal_block(self.proxy.upstream_headers(headers, admitted.ns, auth))
            if len(self._encoded) >= _CACHE_LIMIT:
                self._encoded.clear()
            self._encoded[key] = block
        return h2.header_frames(sid, block, end_stream, self._max_frame_up)

    def _refuse(self, s: _Stream, status: int, message: str) -> None:
        """Answer `s` here (trailers-only); it never goes upstream."""
        self._down.append(h2.trailers_only(s.id, status, message, self._table_size_update))
        self._table_size_update = None
        if not s.client_done:  # the answer is complete: the client may stop sending (RFC 9113 §8.1)
            self._down.append(h2.rst_stream(s.id, ErrorCode.NO_ERROR))
        self._stream_over(s)

    def _stream_over(self, s: _Stream) -> None:
        """`s` is over before its end (refused, reset either way, cut off): release its call
        (a session is not closed by a call that did not end), forget it."""
        self._release(s, closed=False)
        if s.state != OPEN:
            credit = sum(len(f) - 9 for f in s.held if isinstance(f, bytes) and f[3] == h2.DATA)
            if credit:  # held DATA the client counted against the window and upstream never saw
                self._down.append(h2.window_update(0, credit))
            s.held = []
            was_head = bool(self._order) and self._order[0] is s
            s.state = GONE
            if was_head:
                self._forward_ready()
        self.streams.pop(s.id, None)
        if not self.streams:
            self.idle.set()

    def _client_end(self, s: _Stream) -> None:
        s.client_done = True
        if s.server_done:
            self.streams.pop(s.id, None)
            if not self.streams:
                self.idle.set()

    def _release(self, s: _Stream, *, closed: bool) -> None:
        if s.admitted is not None and not s.released:
            s.released = True
            s.admitted.pool.release(s.admitted.backend, s.session, closed)

    # -- the upstream's side -----------------------------------------------------------------
    def upstream_frames(self, data: bytes, upstream: _Upstream) -> None:
        n, pos, passed = len(data), 0, 0
        down = self._down
        while n - pos >= 9:
            end = pos + 9 + int.from_bytes(data[pos : pos + 3])
            if end > n:
                break
            kind, flags = data[pos + 3], data[pos + 4]
            if kind == h2.DATA or kind == h2.HEADERS:
                if flags & h2.END_STREAM:
                    self._server_end(int.from_bytes(data[pos + 5 : pos + 9]) & 0x7FFFFFFF)
            elif kind == h2.RST_STREAM:
                s = self.streams.get(int.from_bytes(data[pos + 5 : pos + 9]) & 0x7FFFFFFF)
                if s is not None:
                    self._stream_over(s)
            elif kind == h2.SETTINGS:
                if flags & h2.ACK:
                    if upstream.swallow_acks:  # for client SETTINGS the relay acknowledged
                        upstream.swallow_acks -= 1
                        if passed < pos:
                            down.append(data[passed:pos])
                        pos = passed = end
                        continue
                else:
                    self._upstream_settings(h2.parse_settings(data[pos + 9 : end]))
            elif kind == h2.GOAWAY:
                last = int.from_bytes(data[pos + 9 : pos + 13]) & 0x7FFFFFFF
                down.append(data[passed:end])  # the GOAWAY goes first, then what it refuses
                pos = passed = end
                self._upstream_goaway(last)
                continue
            pos = end
        if passed < pos:
            down.append(data[passed:pos] if passed or pos < n else data)
        upstream.rest = data[pos:]

    def _server_end(self, sid: int) -> None:
        s = self.streams.get(sid)
        if s is None:
            return
        s.server_done = True
        self._release(s, closed=s.path == self.proxy.release_session)
        if s.client_done:
            self.streams.pop(sid, None)
            if not self.streams:
                self.idle.set()

    def _upstream_settings(self, params: dict[int, int]) -> None:
        # What the upstream allows is what the client now believes the relay allows.
        if h2.HEADER_TABLE_SIZE in params:
            self._decoder.max_allowed_table_size = max(
                h2.DEFAULT_HEADER_TABLE_SIZE, params[h2.HEADER_TABLE_SIZE]
            )
        if h2.MAX_FRAME_SIZE in params:
            self._max_frame_up = params[h2.MAX_FRAME_SIZE]
            self._max_frame_in = max(h2.DEFAULT_MAX_FRAME_SIZE, params[h2.MAX_FRAME_SIZE])

    def _upstream_goaway(self, last: int) -> None:
        """Upstream takes no stream above `last`: those held here are refused (REFUSED_STREAM:
        the client sends them again on a new connection), those above it it had are over."""
        self._upstream_last = last
        for s in list(self.streams.values()):
            if s.id > last:
                if s.state != OPEN:
                    self._down.append(h2.rst_stream(s.id, ErrorCode.REFUSED_STREAM))
                self._stream_over(s)

    def upstream_lost(self) -> None:
        if not self.closed:
            self._flush()
            self._close()

    # -- both ----------------------------------------------------------------------------------
    def _flush(self) -> None:
        if self._up and self.upstream is not None and not self.closed:
            self.upstream.transport.write(b"".join(self._up) if len(self._up) > 1 else self._up[0])
            self._up.clear()
        if self._down and self.transport is not None and not self.closed:
            self.transport.write(b"".join(self._down) if len(self._down) > 1 else self._down[0])
        self._down.clear()

    def _fail(self, code: ErrorCode) -> None:
        """A connection error: GOAWAY to the client, both connections closed."""
        self._up.clear()
        self._down.clear()
        if self.transport is not None and not self.closed:
            self.transport.write(h2.goaway(self.last_stream, code))
        self._close()

    def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for s in list(self.streams.values()):
            self._release(s, closed=False)
        self.streams.clear()
        self._order.clear()
        self.idle.set()
        if self.transport is not None:
            self.transport.close()
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()
        self.proxy.connections.discard(self)

    def drain(self) -> None:
        """The proxy is stopping: no new streams; the open ones may finish."""
        self._draining = True
        if self.transport is not None and not self.closed:
            self.transport.write(h2.goaway(self.last_stream, ErrorCode.NO_ERROR))

    def abort(self) -> None:
        """Drop both connections now, unsent bytes and all (the proxy's grace is over)."""
        self._close()
        for transport in (self.transport, self.upstream.transport if self.upstream else None):
            if transport is not None:
                transport.abort()


class _Upstream(asyncio.Protocol):
    """The connection to the server: its bytes go to `ClientConnection.upstream_frames`."""

    def __init__(self, client: ClientConnection) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.rest = b""
        self.swallow_acks = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        _nodelay(transport)

    def data_received(self, data: bytes) -> None:
        client = self.client
        if client.closed:
            return
        if self.rest:
            data = self.rest + data
        try:
            client.upstream_frames(data, self)
        except ProtocolError as e:
            log.warning("closing a Spark Connect connection: its server broke HTTP/2 (%s)", e)
            client._fail(ErrorCode.INTERNAL_ERROR)  # noqa: SLF001
            return
        client._flush()  # noqa: SLF001

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.upstream_lost()


def _nodelay(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass


def length_of(data: bytes, pos: int) -> int:
    return int.from_bytes(data[pos : pos + 3])


def dict_of(headers: list[tuple[str, str]]) -> dict[str, str]:
    """A call's text metadata by name, for the authenticator (no pseudo or `-bin` headers)."""
    return {k: v for k, v in headers if not k.startswith(":") and not k.endswith("-bin")}
