"""bayou's compressed SEND_MESSAGES (legacy layout): a producer-side batch compression for Iggy.

Iggy has no batch compression on the wire (a topic's ``compression_algorithm`` is a setting, and
Iggy's own example compresses each payload and names the codec in a user header). Compressing
100-byte payloads one by one gains nothing, so bayou's SDK compresses the whole send instead and
carries it the way Iggy's example does, in a message with a user header:

- the request is an ordinary L SEND_MESSAGES of **one** message (any Iggy framing tool can relay
  it), whose user headers hold ``bayou.compression`` (string key) = the codec name (RAW value:
  ``gzip``, ``snappy``, ``lz4``, ``zstd``: Kafka's codecs, ``records.compression``);
- its payload is the codec's compression of ``u32 count`` followed by the index and messages of
  the real send of ``count`` messages (B.5 layout, exactly what an uncompressed send would carry
  after its metadata).

A bayou broker expands the envelope back into the real send (``expand``) before anything else
looks at it, so every check, de-duplication and storage path is the uncompressed one, and what is
stored is the messages themselves, readable by every protocol. The inflated size is bounded: a send
that inflates past the limit is refused, not an out-of-memory. An Iggy server that knows nothing
of this stores the envelope as one message, header included: nothing is lost, only not expanded.
"""

from __future__ import annotations

import struct

from bayou.errors import BayouError
from bayou.protocols.iggy.batches import L_HEADER, L_HEADER_SIZE, L_INDEX
from bayou.protocols.iggy.codes import Status
from bayou.protocols.iggy.framing import IggyError
from bayou.protocols.iggy.messages import HeaderKind
from bayou.records.compression import DEFAULT_MAX_DECOMPRESSED, Compression, compress, decompress

HEADER = b"bayou.compression"
_TLV = struct.Struct("<BI")
_U32 = struct.Struct("<I")
_INDEX_SIZE = L_INDEX.size
_KIND_STRING = int(HeaderKind.STRING)
_KIND_RAW = int(HeaderKind.RAW)


def codec_name(codec: Compression) -> bytes:
    return codec.name.lower().encode()


def envelope(count: int, body: bytes, codec: Compression) -> bytes:
    """Index and message of the one-message send carrying ``body`` (the index and messages of a
    send of ``count`` messages) compressed with ``codec``; the caller puts the metadata (with a
    messages count of 1) in front."""
    if codec is Compression.NONE:
        raise ValueError("an envelope needs a compression codec")
    data = compress(codec, _U32.pack(count) + body)
    name = codec_name(codec)
    hdr = _TLV.pack(_KIND_STRING, len(HEADER)) + HEADER + _TLV.pack(_KIND_RAW, len(name)) + name
    size = L_HEADER_SIZE + len(data) + len(hdr)
    return (L_INDEX.pack(0, size, 0) + L_HEADER.pack(0, 0, 0, 0, 0, 0, len(hdr), len(data), 0)
            + data + hdr)


def _codec_header(payload: bytes, pos: int, end: int) -> bytes | None:
    """The value of the ``bayou.compression`` header among the user headers at ``pos..end``, or
    None (also for headers that do not parse: the ordinary send path reports those)."""
    while pos + 5 <= end:
        key_kind, klen = _TLV.unpack_from(payload, pos)
        key = payload[pos + 5 : pos + 5 + klen]
        pos += 5 + klen
        if pos + 5 > end:
            return None
        value_kind, vlen = _TLV.unpack_from(payload, pos)
        value = payload[pos + 5 : pos + 5 + vlen]
        pos += 5 + vlen
        if pos > end:
            return None
        if key == HEADER and key_kind == _KIND_STRING and value_kind == _KIND_RAW:
            return value
    return None


def _envelope(payload: bytes, pos: int, count: int) -> tuple[bytes, int, int] | None:
    """(codec name, body position, body length) of a compressed envelope; None for an ordinary
    send. Reads only the one message's header and its header block."""
    if count != 1:
        return None
    area = pos + _INDEX_SIZE
    if len(payload) < area + L_HEADER_SIZE:
        return None
    *_, hlen, plen, _rsv = L_HEADER.unpack_from(payload, area)
    body = area + L_HEADER_SIZE
    if not hlen or body + plen + hlen != len(payload):
        return None
    name = _codec_header(payload, body + plen, body + plen + hlen)
    return None if name is None else (name, body, plen)


def is_envelope(payload: bytes, pos: int, count: int) -> bool:
    """Whether ``expand`` has work to do (cheap: on the event loop, before sending it to a pool)."""
    return _envelope(payload, pos, count) is not None


def expand(payload: bytes, pos: int, count: int, *, max_size: int = DEFAULT_MAX_DECOMPRESSED) -> bytes | None:
    """The real send (its whole L payload) when the L send ``payload`` (metadata ending at ``pos``,
    ``count`` messages) is a compressed envelope; None when it is an ordinary send. Raises
    IggyError(INVALID_FORMAT) for an envelope that names an unknown codec, does not inflate, or
    inflates past ``max_size`` or to no messages."""
    found = _envelope(payload, pos, count)
    if found is None:
        return None
    name, body, plen = found
    try:
        codec = Compression.parse(name.decode("ascii", "replace"))
        if codec is Compression.NONE:
            raise IggyError(Status.INVALID_FORMAT, "compressed send names codec none")
        data = decompress(codec, payload[body : body + plen], max_size)
    except BayouError as exc:
        raise IggyError(Status.INVALID_FORMAT, f"compressed send: {exc}") from None
    if len(data) < _U32.size:
        raise IggyError(Status.INVALID_FORMAT, "compressed send: no messages count")
    inner = _U32.unpack_from(data)[0]
    if inner == 0:
        raise IggyError(Status.INVALID_MESSAGES_COUNT, "compressed send of no messages")
    # the metadata ends with the u32 messages count: the real one replaces the envelope's 1
    return payload[: pos - 4] + data
