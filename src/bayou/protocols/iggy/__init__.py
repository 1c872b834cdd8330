"""The Apache Iggy binary TCP protocol (iggy.md), sans-IO: three dialects on one port.

Server loop per connection:

1. ``detect_dialect(first_bytes)`` until it returns a ``Dialect`` (None = need more bytes);
2. ``reader_for(dialect).feed(data)`` -> frames (empty list = need more);
3. ``decode_frame(dialect, frame)`` -> a request message from ``messages``; on a legacy-framed
   connection, ``resolve_legacy_dialect`` tells D from L (D.3) before decoding;
4. reply with ``encode_reply(reply, dialect)`` wrapped by ``encode_legacy_reply`` (D and L) or
   ``encode_vsr_ok`` (V); errors with ``encode_legacy_error`` / ``encode_vsr_error`` /
   ``encode_eviction``, the code from ``status_for(bayou_error)``.

Any malformed input raises ``IggyError`` (status, close, eviction) and nothing else.
``convert`` maps messages to and from ``bayou.records.Record``.
"""

from bayou.protocols.iggy.codec import (
    DECODERS,
    ENCODERS,
    decode_frame,
    decode_reply,
    decode_request,
    decode_vsr_request,
    encode_reply,
    encode_request,
    encode_request_frame,
)
from bayou.protocols.iggy.codes import (
    ERROR_STATUS,
    OPERATION_OF,
    Command,
    EvictionReason,
    Operation,
    Status,
    not_found_status,
    status_for,
)
from bayou.protocols.iggy.convert import message_to_record, record_to_polled, send_to_records
from bayou.protocols.iggy.framing import (
    Dialect,
    IggyError,
    LegacyFrame,
    LegacyFrameReader,
    ReplyHeader,
    RequestHeader,
    VsrFrame,
    VsrFrameReader,
    detect_dialect,
    encode_eviction,
    encode_legacy_error,
    encode_legacy_reply,
    encode_seed_error,
    encode_seed_reply,
    encode_vsr_error,
    encode_vsr_ok,
    reader_for,
    resolve_legacy_dialect,
)

__all__ = [
    "DECODERS",
    "ENCODERS",
    "ERROR_STATUS",
    "OPERATION_OF",
    "Command",
    "Dialect",
    "EvictionReason",
    "IggyError",
    "LegacyFrame",
    "LegacyFrameReader",
    "Operation",
    "ReplyHeader",
    "RequestHeader",
    "Status",
    "VsrFrame",
    "VsrFrameReader",
    "decode_frame",
    "decode_reply",
    "decode_request",
    "decode_vsr_request",
    "detect_dialect",
    "encode_eviction",
    "encode_legacy_error",
    "encode_legacy_reply",
    "encode_reply",
    "encode_request",
    "encode_request_frame",
    "encode_seed_error",
    "encode_seed_reply",
    "encode_vsr_error",
    "encode_vsr_ok",
    "message_to_record",
    "not_found_status",
    "reader_for",
    "record_to_polled",
    "resolve_legacy_dialect",
    "send_to_records",
    "status_for",
]
