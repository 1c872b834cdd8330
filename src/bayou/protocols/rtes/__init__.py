"""The V1 line protocol (``V1|<correlation_id>|<command>|<args>``) of the RTES/flux broker."""

from bayou.protocols.rtes.codec import (
    MAX_LINE,
    LineReader,
    LineTooLong,
    ParsedLine,
    RtesError,
    decode_request,
    encode_error,
    encode_ok,
    fnv1a_32,
    parse_envelope,
)

__all__ = [
    "MAX_LINE",
    "LineReader",
    "LineTooLong",
    "ParsedLine",
    "RtesError",
    "decode_request",
    "encode_error",
    "encode_ok",
    "fnv1a_32",
    "parse_envelope",
]
