"""The replication listener's frame reader (protocols/framing.py's feed loop): a frame is a u32
length (of what follows, at least the kind byte) and the body; a declared length above the
listener's cap, or below 1, is refused from the header before any of its body is buffered."""

from __future__ import annotations

import struct

from bayou.protocols import framing
from bayou.protocols.replica.codec import MAX_FRAME, Message, ReplicaProtocolError, decode

_U32 = struct.Struct(">I")


class FrameReader(framing.FrameReader[Message]):
    error = ReplicaProtocolError
    head = 4

    def __init__(self, cap: int = MAX_FRAME) -> None:
        super().__init__()
        self.cap = cap

    def _measure(self, src: framing.Buffer, pos: int, n: int) -> int:
        length: int = _U32.unpack_from(src, pos)[0]
        if length > self.cap:
            raise ReplicaProtocolError(f"a frame of {length} bytes (at most {self.cap})")
        if length < 1:
            raise ReplicaProtocolError(f"frame length {length} out of range")
        return 4 + length

    def _frame(self, src: framing.Buffer, pos: int, end: int) -> Message:
        decoded = decode(bytes(memoryview(src)[pos:end]))
        assert decoded is not None  # the frame is complete
        return decoded[0]

    def _declared(self, buf: bytearray) -> int | None:
        return 4 + int(_U32.unpack_from(buf)[0]) if len(buf) >= 4 else None
