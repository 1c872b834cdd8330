"""Kafka request frames and request headers, and the one protocol error.

A Kafka request is ``i32 size | header | body`` (big-endian). The header is

    api_key i16 | api_version i16 | correlation_id i32 | client_id nullable string (i16 length)
    [tagged fields]                  (header v2 only: the request's version is a flexible one)

Header v0 (no client_id) was only ever used by ControlledShutdown v0, which no client sends and
Kafka 4 removed; bayou reads v1 and v2. ``client_id`` keeps the legacy i16-length string even in
header v2 (``RequestHeader.json``), so the fixed part can be read before knowing which header
version the API and version imply.

The size is checked as soon as its four bytes arrive, before any of the body is buffered. A size
below the smallest header or above the cap cannot be a request: the stream can no longer be
trusted, and the connection closes.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from bayou.protocols import framing

MAX_REQUEST_SIZE = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default (104857600)
MIN_REQUEST_SIZE = 10  # api_key, api_version, correlation_id, client_id length
SIZE_PREFIX = 4

_SIZE = struct.Struct(">i")
_FIXED_HEADER = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_KEY_VERSION_ID = struct.Struct(">hhi")

KAFKA_MAX_FIRST_BYTE = MAX_REQUEST_SIZE >> 24  # the first byte of the largest size accepted (0x06)


class KafkaError(Exception):
    """The one protocol error of the Kafka codec.

    ``close`` means the connection must close: the frame could not be trusted (bad size, unreadable
    header, unknown API or version, undecodable body). ``reply`` is a complete response frame to
    send first, when Kafka answers one (ApiVersions at a version bayou does not know: the
    UNSUPPORTED_VERSION fallback, after which the connection stays open). ``header`` is the
    request's header when it could be read, for logs and for answering.
    """

    def __init__(self, message: str, *, close: bool = True, reply: bytes | None = None,
                 header: RequestHeader | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.close = close
        self.reply = reply
        self.header = header


class Sniffed(enum.Enum):
    KAFKA = "kafka"
    V1 = "v1"


def sniff(first: bytes | bytearray | memoryview) -> Sniffed | None:
    """Which protocol a connection on the shared port speaks, from its first byte; None = no byte yet.

    A Kafka request starts with its big-endian i32 size, at most ``MAX_REQUEST_SIZE`` (100 MiB), so
    its first byte is at most 0x06; a V1 line starts with ``V1|`` (0x56). Every other first byte
    goes to V1 as well, which answers a line that is no V1 request with its own error
    (``BAD_REQUEST expected format ...``) instead of a Kafka connection closing on a size that
    cannot be one.
    """
    if len(first) == 0:
        return None
    return Sniffed.KAFKA if first[0] <= KAFKA_MAX_FIRST_BYTE else Sniffed.V1


def _frame_size(buf: bytes | bytearray | memoryview, pos: int, max_size: int) -> int:
    """The whole size (prefix included) of the frame whose size prefix is at ``pos``; KafkaError
    for a size that cannot be a request."""
    (size,) = _SIZE.unpack_from(buf, pos)
    if size < MIN_REQUEST_SIZE or size > max_size:
        raise KafkaError(f"request size {size} outside {MIN_REQUEST_SIZE}..{max_size}")
    return SIZE_PREFIX + int(size)


def split_frame(buf: bytes | bytearray | memoryview, pos: int = 0,
                max_size: int = MAX_REQUEST_SIZE) -> tuple[memoryview, int] | None:
    """The request frame (header and body, without the size) starting at ``pos`` and the position
    after it; None when more bytes are needed. Raises ``KafkaError`` for a size that cannot be a
    request, as soon as the four size bytes are there."""
    if len(buf) - pos < SIZE_PREFIX:
        return None
    end = pos + _frame_size(buf, pos, max_size)
    if len(buf) < end:
        return None
    return memoryview(buf)[pos + SIZE_PREFIX:end], end


class FrameReader(framing.FrameReader[bytes]):
    """Splits one connection's byte stream into request frames (header and body, without the size
    prefix), on the shared framing kit (protocols/framing.py): ``feed`` returns the frames the data
    completes (an empty list means "need more bytes"); a size that cannot be a request raises
    ``KafkaError`` as soon as its four bytes are in, after the frames completed before it are
    returned (the next call raises). Frames are ``bytes`` the caller owns.
    """

    error = KafkaError
    head = SIZE_PREFIX

    def __init__(self, max_size: int = MAX_REQUEST_SIZE) -> None:
        super().__init__()
        self.max_size = max_size

    def _measure(self, src: framing.Buffer, pos: int, n: int) -> int:
        return _frame_size(src, pos, self.max_size)

    def _frame(self, src: framing.Buffer, pos: int, end: int) -> bytes:
        return bytes(src[pos + SIZE_PREFIX:end])

    def _declared(self, buf: bytearray) -> int | None:
        return SIZE_PREFIX + int(_SIZE.unpack_from(buf, 0)[0]) if len(buf) >= SIZE_PREFIX else None


@dataclass(slots=True)  # not frozen: built per request, and a frozen one costs 4x to build
class RequestHeader:
    """A request header. ``size`` is how many bytes of the frame it occupies (the body follows);
    ``tagged_fields`` holds header tags (none are defined today) as (tag, raw bytes), kept so a
    proxy or a log can see them."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    flexible: bool
    size: int
    tagged_fields: tuple[tuple[int, bytes], ...] = ()


def read_fixed_header(frame: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id): the part every header version shares."""
    if len(frame) < 8:
        raise KafkaError(f"request of {len(frame)} bytes has no header")
    api_key, api_version, correlation_id = _KEY_VERSION_ID.unpack_from(frame, 0)
    return api_key, api_version, correlation_id


def decode_header(frame: bytes | bytearray | memoryview, *, flexible: bool) -> RequestHeader:
    """Decode the request header at the start of ``frame``; ``flexible`` selects header v2.

    Which header version a request uses follows from its API and version (``codec`` knows); a
    caller that does not know it reads the fixed part with ``read_fixed_header`` first.
    """
    if len(frame) < MIN_REQUEST_SIZE:
        raise KafkaError(f"request of {len(frame)} bytes has no header")
    api_key, api_version, correlation_id, id_len = _FIXED_HEADER.unpack_from(frame, 0)
    pos = MIN_REQUEST_SIZE
    client_id: str | None = None
    if id_len >= 0:
        end = pos + id_len
        if end > len(frame):
            raise KafkaError(f"client_id of {id_len} bytes overruns the request")
        try:
            client_id = bytes(frame[pos:end]).decode()
        except UnicodeDecodeError as exc:
            raise KafkaError(f"client_id is not UTF-8: {exc}") from None
        pos = end
    elif id_len != -1:
        raise KafkaError(f"client_id length {id_len}")
    tags: tuple[tuple[int, bytes], ...] = ()
    if flexible:
        tags, pos = read_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, flexible, pos, tags)


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint (at most 5 bytes: Kafka's are 32-bit) and the position after it."""
    if pos < len(buf) and buf[pos] < 0x80:  # the usual one-byte count, length or tag
        return buf[pos], pos + 1
    value = 0
    for shift in range(0, 35, 7):
        if pos >= len(buf):
            raise KafkaError("varint runs past the end of the request")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if value > 0xFFFFFFFF:
                raise KafkaError("varint above 32 bits")
            return value, pos
    raise KafkaError("varint longer than 5 bytes")


def read_tagged_fields(buf: bytes | bytearray | memoryview, pos: int, end: int | None = None
                       ) -> tuple[tuple[tuple[int, bytes], ...], int]:
    """A tagged-field section ending by ``end``: count, then (tag, size, bytes) each, tags
    strictly increasing."""
    stop = len(buf) if end is None else end
    count, pos = read_uvarint(buf, pos)
    if count > stop - pos:
        raise KafkaError(f"{count} tagged fields in {stop - pos} bytes")
    fields: list[tuple[int, bytes]] = []
    last = -1
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        if tag <= last:
            raise KafkaError(f"tagged field {tag} after {last}")
        size, pos = read_uvarint(buf, pos)
        after = pos + size
        if after > stop:
            raise KafkaError(f"tagged field {tag} of {size} bytes overruns its bounds")
        fields.append((tag, bytes(buf[pos:after])))
        last, pos = tag, after
    return tuple(fields), pos


def write_uvarint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def encode_header(header: RequestHeader) -> bytes:
    """The bytes of a request header (v2 when ``header.flexible``): what a client sends."""
    out = bytearray(_KEY_VERSION_ID.pack(header.api_key, header.api_version, header.correlation_id))
    if header.client_id is None:
        out += b"\xff\xff"
    else:
        raw = header.client_id.encode()
        out += struct.pack(">h", len(raw)) + raw
    if header.flexible:
        write_uvarint(out, len(header.tagged_fields))
        for tag, value in header.tagged_fields:
            write_uvarint(out, tag)
            write_uvarint(out, len(value))
            out += value
    return bytes(out)
