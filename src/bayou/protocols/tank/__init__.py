"""The TANK 4.0 binary protocol (tank.md), sans-IO.

Server loop per connection:

1. send ``PING_FRAME`` once on accept;
2. ``FrameReader.feed(data)`` -> ``Frame``s (empty list = need more bytes);
3. ``decode_request(frame.msg_id, frame.payload)`` -> a request from ``messages`` (ignore ``Ping``);
4. for each produce entry, ``decode_bundle_header(entry.bundle)`` gives the count and a sparse
   bundle's seqs; a ``BundleError`` is answered with its ``produce_error`` (10);
5. answer with ``encode_response(response)`` wrapped by ``encode_frame``, or, for consume answers
   served from files, ``encode_consume_header(..., framed=True)`` followed by the chunk bytes.

Any ``TankError`` with ``close`` set means: close the connection without a reply (tank.md 1).
Clients use ``encode_request`` / ``decode_response`` and ``iter_chunk`` / ``decode_bundle``.
"""

from bayou.protocols.tank.bundles import (
    DEFAULT_MAX_UNCOMPRESSED,
    BundleHeader,
    ChunkBundle,
    Codec,
    TankMessage,
    client_would_compress,
    decode_bundle,
    decode_bundle_header,
    decode_chunk,
    encode_bundle,
    encode_chunk_record,
    iter_chunk,
)
from bayou.protocols.tank.codec import (
    REQUEST_DECODERS,
    REQUEST_ENCODERS,
    RESPONSE_DECODERS,
    RESPONSE_ENCODERS,
    decode_request,
    decode_response,
    encode_consume_header,
    encode_consume_peer_header,
    encode_request,
    encode_request_frame,
    encode_response,
    encode_response_frame,
)
from bayou.protocols.tank.codes import (
    BundleError,
    ConsumeFlag,
    CreateTopicError,
    MsgId,
    PartitionFault,
    ProduceError,
    ReloadConfError,
    TankError,
    create_topic_error_for,
    produce_error_for,
    reload_conf_error_for,
)
from bayou.protocols.tank.framing import (
    MAX_PAYLOAD,
    PING_FRAME,
    Frame,
    FrameReader,
    encode_frame,
    frame_header,
)
from bayou.protocols.tank.wire import decode_str8, decode_varint, encode_str8, encode_varint

__all__ = [
    "DEFAULT_MAX_UNCOMPRESSED",
    "MAX_PAYLOAD",
    "PING_FRAME",
    "REQUEST_DECODERS",
    "REQUEST_ENCODERS",
    "RESPONSE_DECODERS",
    "RESPONSE_ENCODERS",
    "BundleError",
    "BundleHeader",
    "ChunkBundle",
    "Codec",
    "ConsumeFlag",
    "CreateTopicError",
    "Frame",
    "FrameReader",
    "MsgId",
    "PartitionFault",
    "ProduceError",
    "ReloadConfError",
    "TankError",
    "TankMessage",
    "client_would_compress",
    "create_topic_error_for",
    "decode_bundle",
    "decode_bundle_header",
    "decode_chunk",
    "decode_request",
    "decode_response",
    "decode_str8",
    "decode_varint",
    "encode_bundle",
    "encode_chunk_record",
    "encode_consume_header",
    "encode_consume_peer_header",
    "encode_frame",
    "encode_request",
    "encode_request_frame",
    "encode_response",
    "encode_response_frame",
    "encode_str8",
    "encode_varint",
    "frame_header",
    "iter_chunk",
    "produce_error_for",
    "reload_conf_error_for",
]
