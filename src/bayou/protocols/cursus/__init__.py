"""The Cursus wire protocol (u32-length frames carrying text commands or binary batches), sans-IO.

Server loop per connection: ``FrameReader.feed`` -> ``maybe_decompress`` -> ``classify`` ->
``BatchHead`` (then ``message_starts``) or ``Command`` (then ``decode``: a typed request from
``requests``, or ``ErrorReply``); any ``CursusError`` carries the reply to send (or None) and whether
to close. Replies are built with ``ok``/``error``/``json_ack``/``json_body`` and ``encode_batch``,
framed with ``encode_frame``; registry errors become replies through ``error_reply`` (``codes``).
"""

from bayou.protocols.cursus.batch import (
    MAGIC,
    MAX_MESSAGES,
    BatchHead,
    decode_head,
    decode_messages,
    encode_batch,
    encode_messages,
    is_batch,
    message_starts,
)
from bayou.protocols.cursus.codes import Scope, error_reply
from bayou.protocols.cursus.commands import (
    KEYWORDS,
    NO_ARGS,
    OPTIONAL_ARGS,
    Command,
    Keyword,
    classify,
    parse_bool,
    parse_int,
    split_args,
)
from bayou.protocols.cursus.compression import (
    compress_gzip,
    compress_lz4,
    compress_snappy_xerial,
    maybe_decompress,
)
from bayou.protocols.cursus.framing import KEEPALIVE, MAX_FRAME, CursusError, FrameReader, encode_frame
from bayou.protocols.cursus.replies import ErrorCode, Quoted, Raw, error, go_quote, json_ack, json_body, ok
from bayou.protocols.cursus.requests import AckLevel, ErrorReply, Request, decode, served

__all__ = [
    "KEEPALIVE",
    "KEYWORDS",
    "MAGIC",
    "MAX_FRAME",
    "MAX_MESSAGES",
    "NO_ARGS",
    "OPTIONAL_ARGS",
    "AckLevel",
    "BatchHead",
    "Command",
    "CursusError",
    "ErrorCode",
    "ErrorReply",
    "FrameReader",
    "Keyword",
    "Quoted",
    "Raw",
    "Request",
    "Scope",
    "classify",
    "compress_gzip",
    "compress_lz4",
    "compress_snappy_xerial",
    "decode",
    "decode_head",
    "decode_messages",
    "encode_batch",
    "encode_frame",
    "encode_messages",
    "error",
    "error_reply",
    "go_quote",
    "is_batch",
    "json_ack",
    "json_body",
    "maybe_decompress",
    "message_starts",
    "ok",
    "parse_bool",
    "parse_int",
    "served",
    "split_args",
]
