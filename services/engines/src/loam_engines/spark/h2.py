"""The HTTP/2 the Spark Connect relay needs (RFC 9113, RFC 7541), and no more: frame
headers, the few frames the relay writes itself, SETTINGS parameters, a gRPC
trailers-only answer, and header blocks written without touching any HPACK table.

What the relay writes into a stream of header blocks that another encoder owns (its own
answers to the client, between blocks of the upstream's encoder) must leave the
receiver's HPACK table as it was: so every field is either a static-table entry or a
literal *without indexing*, never a dynamic-table reference or insertion. The header
blocks it sends upstream are written the same way, so the relay keeps no encoder state
at all; on loopback the few hundred bytes a call costs that way are nothing next to
the CPU an indexing encoder in Python would.
"""

from __future__ import annotations

import struct
from enum import IntEnum

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# frame types
DATA = 0x0
HEADERS = 0x1
PRIORITY = 0x2
RST_STREAM = 0x3
SETTINGS = 0x4
PUSH_PROMISE = 0x5
PING = 0x6
GOAWAY = 0x7
WINDOW_UPDATE = 0x8
CONTINUATION = 0x9

# flags
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20

# SETTINGS parameters
HEADER_TABLE_SIZE = 0x1
MAX_FRAME_SIZE = 0x5

DEFAULT_MAX_FRAME_SIZE = 16_384
DEFAULT_HEADER_TABLE_SIZE = 4_096


class ErrorCode(IntEnum):
    """HTTP/2 error codes (RST_STREAM, GOAWAY)."""

    NO_ERROR = 0x0
    PROTOCOL_ERROR = 0x1
    INTERNAL_ERROR = 0x2
    FLOW_CONTROL_ERROR = 0x3
    STREAM_CLOSED = 0x5
    FRAME_SIZE_ERROR = 0x6
    REFUSED_STREAM = 0x7
    CANCEL = 0x8
    COMPRESSION_ERROR = 0x9


class Status(IntEnum):
    """The gRPC status codes the relay answers with itself."""

    INVALID_ARGUMENT = 3
    NOT_FOUND = 5
    PERMISSION_DENIED = 7
    FAILED_PRECONDITION = 9
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAUTHENTICATED = 16


class ProtocolError(Exception):
    """A connection error: the peer broke HTTP/2 (the connection is closed with GOAWAY)."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.PROTOCOL_ERROR) -> None:
        super().__init__(message)
        self.code = code


_HEADER = struct.Struct(">I")  # a frame header is 24-bit length, type, flags, stream id


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    n = len(payload)
    return bytes((n >> 16, (n >> 8) & 0xFF, n & 0xFF, kind, flags)) + _HEADER.pack(stream) + payload


def settings(params: dict[int, int] | None = None) -> bytes:
    payload = b"".join(struct.pack(">HI", k, v) for k, v in (params or {}).items())
    return frame(SETTINGS, 0, 0, payload)


SETTINGS_ACK = frame(SETTINGS, ACK, 0)


def parse_settings(payload: bytes) -> dict[int, int]:
    if len(payload) % 6:
        raise ProtocolError("a SETTINGS frame's length is not a multiple of 6", ErrorCode.FRAME_SIZE_ERROR)
    return {k: v for k, v in struct.iter_unpack(">HI", payload)}


def window_update(stream: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream, _HEADER.pack(increment))


def rst_stream(stream: int, code: ErrorCode) -> bytes:
    return frame(RST_STREAM, 0, stream, _HEADER.pack(code))


def goaway(last_stream: int, code: ErrorCode, debug: bytes = b"") -> bytes:
    return frame(GOAWAY, 0, 0, struct.pack(">II", last_stream, code) + debug)


def unpad(flags: int, payload: bytes) -> bytes:
    """A DATA or HEADERS payload without its padding (HEADERS: and without priority)."""
    if flags & PADDED:
        if not payload or payload[0] >= len(payload):
            raise ProtocolError("padding longer than the frame")
        payload = payload[1 : len(payload) - payload[0]]
    return payload


def header_fragment(flags: int, payload: bytes) -> bytes:
    """The header block fragment of a HEADERS frame's payload."""
    payload = unpad(flags, payload)
    if flags & PRIORITY_FLAG:
        if len(payload) < 5:
            raise ProtocolError(
                "a HEADERS frame too short for its priority fields", ErrorCode.FRAME_SIZE_ERROR
            )
        payload = payload[5:]
    return payload


# -- header blocks that leave every HPACK table alone -----------------------------------------


def _integer(value: int, prefix_bits: int, first: int = 0) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string(raw: bytes) -> bytes:
    return _integer(len(raw), 7) + raw  # no Huffman coding: the H bit stays 0


def literal(name: str, value: str) -> bytes:
    """One field as a literal without indexing, new name (RFC 7541 §6.2.2)."""
    return b"\x00" + _string(name.encode()) + _string(value.encode())


def literal_block(headers: list[tuple[str, str]]) -> bytes:
    return b"".join(literal(k, v) for k, v in headers)


def header_frames(stream: int, block: bytes, end_stream: bool, max_frame: int) -> bytes:
    """HEADERS (+ CONTINUATION) frames carrying `block`, each within `max_frame`."""
    first, rest = block[:max_frame], block[max_frame:]
    flags = (END_STREAM if end_stream else 0) | (0 if rest else END_HEADERS)
    out = [frame(HEADERS, flags, stream, first)]
    while rest:
        part, rest = rest[:max_frame], rest[max_frame:]
        out.append(frame(CONTINUATION, 0 if rest else END_HEADERS, stream, part))
    return b"".join(out)


_STATUS_200 = b"\x88"  # static table entry 8, `:status: 200`
_CONTENT_TYPE = b"\x0f\x10" + _string(b"application/grpc")  # literal, static name 31, without indexing


def grpc_message(text: str) -> str:
    """`grpc-message`'s percent-encoding (gRPC's HTTP/2 protocol: outside 0x20-0x7E, and %)."""
    return "".join(chr(b) if 0x20 <= b <= 0x7E and b != 0x25 else f"%{b:02X}" for b in text.encode())


def trailers_only(stream: int, status: int, message: str, table_size: int | None = None) -> bytes:
    """A gRPC call answered and ended in one HEADERS frame (gRPC's "Trailers-Only"),
    starting with a dynamic table size update to `table_size` if one is due."""
    block = b"" if table_size is None else _integer(table_size, 5, 0x20)
    block += _STATUS_200 + _CONTENT_TYPE + literal("grpc-status", str(int(status)))
    block += literal("grpc-message", grpc_message(message))
    return header_frames(stream, block, end_stream=True, max_frame=DEFAULT_MAX_FRAME_SIZE)
