"""Primitive encodings shared by every Iggy payload (iggy.md A.3, B.2, C.8).

``Reader`` walks one complete payload; running off its end, or any value the wire forbids, raises
``IggyError`` (a payload inside a complete frame cannot "need more": it is malformed). The
``enc_*`` functions are the inverses; they raise ValueError (struct.error for an out-of-range
integer) for values that cannot be put on the wire, which is a bug in the caller rather than a
protocol error.
"""

from __future__ import annotations

import struct

from bayou.protocols.framing import ByteCursor
from bayou.protocols.iggy.codes import Status
from bayou.protocols.iggy.framing import IggyError
from bayou.protocols.iggy.messages import (
    MAX_NAME,
    Consumer,
    ConsumerKind,
    HeaderKind,
    Headers,
    Identifier,
    IdKind,
    Partitioning,
    PartitioningKind,
    PollingKind,
    PollingStrategy,
    UserHeader,
)

U8 = struct.Struct("<B")
U16 = struct.Struct("<H")
U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")
F32 = struct.Struct("<f")
U128_PARTS = struct.Struct("<QQ")

MAX_USER_HEADERS = 100_000
MAX_OPTIONS = 1024
MAX_OPTIONS_BYTES = 100_000
MAX_FIELD = 255


class Reader(ByteCursor):
    """A cursor over ``buf[pos:end]``. Truncation raises ``IggyError(status)`` (INVALID_COMMAND
    unless told otherwise)."""

    __slots__ = ("status",)

    def __init__(self, buf: bytes, pos: int = 0, end: int | None = None,
                 status: Status = Status.INVALID_COMMAND) -> None:
        super().__init__(buf, pos, end)
        self.status = status

    def _error(self, message: str) -> IggyError:
        return IggyError(self.status, message)

    def _trailing_error(self, message: str) -> IggyError:
        return IggyError(Status.INVALID_COMMAND, message)

    def u128(self) -> int:
        lo, hi = U128_PARTS.unpack_from(self.buf, self.skip(16))
        return int(lo | (hi << 64))

    def f32(self) -> float:
        v: float = F32.unpack_from(self.buf, self.skip(4))[0]
        return v

    def rest(self) -> bytes:
        at = self.skip(self.end - self.pos)
        return self.buf[at : self.end]

    def text(self, n: int, status: Status = Status.INVALID_FORMAT) -> str:
        raw = self.take(n)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise IggyError(status, "text is not UTF-8") from None

    def name8(self, status: Status = Status.INVALID_FORMAT) -> str:
        """u8 length 1..255 + UTF-8; a zero length or bad UTF-8 raises ``status``."""
        n = self.u8()
        if n == 0:
            raise IggyError(status, "empty name")
        return self.text(n, status)

    def str32(self) -> str:
        return self.text(self.u32())

    def opt_str32(self) -> str | None:
        """str32 where length 0 means absent (B.3 login version/context)."""
        n = self.u32()
        return self.text(n) if n else None

    # -- composite primitives ------------------------------------------------------------------

    def identifier(self) -> Identifier:
        kind = self.u8()
        length = self.u8()
        if kind == IdKind.NUMERIC:
            if length != 4:
                raise IggyError(Status.INVALID_IDENTIFIER, f"numeric identifier of length {length}")
            return Identifier(self.u32())
        if kind == IdKind.STRING:
            if length == 0:
                raise IggyError(Status.INVALID_IDENTIFIER, "empty string identifier")
            return Identifier(self.text(length, Status.INVALID_IDENTIFIER))
        raise IggyError(Status.INVALID_IDENTIFIER, f"identifier kind {kind}")

    def consumer(self) -> Consumer:
        """L/V consumer: kind u8 + Identifier (B.2)."""
        return Consumer(self._consumer_kind(), self.identifier())

    def seed_consumer(self) -> Consumer:
        """D consumer: kind u8 + u32 id (A.3)."""
        return Consumer(self._consumer_kind(), Identifier(self.u32()))

    def _consumer_kind(self) -> ConsumerKind:
        kind = self.u8()
        try:
            return ConsumerKind(kind)
        except ValueError:
            raise IggyError(Status.INVALID_FORMAT, f"consumer kind {kind}") from None

    def partitioning(self) -> Partitioning:
        kind = self.u8()
        length = self.u8()
        value = self.take(length)
        if kind == PartitioningKind.BALANCED:
            if length not in (0, 4):
                raise IggyError(Status.INVALID_FORMAT, f"balanced partitioning of length {length}")
            return Partitioning(PartitioningKind.BALANCED, value)
        if kind == PartitioningKind.PARTITION_ID:
            if length != 4:
                raise IggyError(Status.INVALID_FORMAT, f"partition id of length {length}")
            return Partitioning(PartitioningKind.PARTITION_ID, value)
        if kind == PartitioningKind.MESSAGES_KEY:
            if length == 0:
                raise IggyError(Status.INVALID_FORMAT, "empty messages key")
            return Partitioning(PartitioningKind.MESSAGES_KEY, value)
        raise IggyError(Status.INVALID_FORMAT, f"partitioning kind {kind}")

    def optional_partition(self) -> int | None:
        """u8 flag + u32, always 5 bytes (B.2); flag 0 = absent."""
        flag = self.u8()
        value = self.u32()
        if flag == 1:
            return value
        if flag == 0:
            return None
        raise IggyError(Status.INVALID_FORMAT, f"partition flag {flag}")

    def strategy(self) -> PollingStrategy:
        kind = self.u8()
        value = self.u64()
        try:
            return PollingStrategy(PollingKind(kind), value)
        except ValueError:
            raise IggyError(Status.INVALID_FORMAT, f"polling kind {kind}") from None

    def flag(self) -> bool:
        v = self.u8()
        if v > 1:
            raise IggyError(Status.INVALID_FORMAT, f"boolean byte {v}")
        return v == 1


# -- user headers and options -------------------------------------------------------------------


def decode_user_headers(buf: bytes, pos: int = 0, end: int | None = None) -> Headers:
    """The L/V TLV block (B.2): pairs of {kind u8 (non-zero), length u32 (1..255), bytes}, key half
    first, filling ``buf[pos:end]`` exactly. Unknown kinds are kept (forwardable, as in Iggy)."""
    r = Reader(buf, pos, end, Status.INVALID_FORMAT)
    if r.remaining > MAX_USER_HEADERS:
        raise IggyError(Status.TOO_BIG_USER_HEADERS, f"user headers of {r.remaining} bytes")
    out: list[UserHeader] = []
    while r.remaining:
        key_kind, key = _tlv(r)
        if not r.remaining:
            raise IggyError(Status.INVALID_FORMAT, "user header key without a value")
        value_kind, value = _tlv(r)
        out.append(UserHeader(key, value, key_kind, value_kind))
    return tuple(out)


def _tlv(r: Reader) -> tuple[int, bytes]:
    kind = r.u8()
    if kind == 0:
        raise IggyError(Status.INVALID_HEADER_KIND, "header kind 0")
    length = r.u32()
    if not 1 <= length <= MAX_FIELD:
        raise IggyError(Status.INVALID_FORMAT, f"header field length {length}")
    return kind, r.take(length)


def enc_user_headers(headers: Headers) -> bytes:
    parts: list[bytes] = []
    for h in headers:
        for kind, raw in ((h.key_kind, h.key), (h.value_kind, h.value)):
            if not 1 <= kind <= 255 or not 1 <= len(raw) <= MAX_FIELD:
                raise ValueError(f"header field kind {kind} / length {len(raw)} cannot be encoded")
            parts.append(U8.pack(kind) + U32.pack(len(raw)) + raw)
    return b"".join(parts)


def decode_seed_headers(buf: bytes, pos: int, end: int) -> Headers:
    """The 2023 header block (A.5 item 5): {key_length u32, key UTF-8, value_kind u8, value_length
    u32, value} repeated. The key has no kind byte; it is a string."""
    r = Reader(buf, pos, end, Status.INVALID_FORMAT)
    out: list[UserHeader] = []
    while r.remaining:
        key_len = r.u32()
        if not 1 <= key_len <= MAX_FIELD:
            raise IggyError(Status.INVALID_HEADER_KEY, f"header key length {key_len}")
        key = r.text(key_len, Status.INVALID_HEADER_KEY).encode("utf-8")
        kind = r.u8()
        if kind == 0:
            raise IggyError(Status.INVALID_HEADER_KIND, "header kind 0")
        value = r.take(r.u32())
        out.append(UserHeader(key, value, HeaderKind.STRING, kind))
    return tuple(out)


def enc_seed_headers(headers: Headers) -> bytes:
    """D header block. Non-string keys lose their kind (the 2023 layout has no room for it)."""
    return b"".join(U32.pack(len(h.key)) + h.key + U8.pack(h.value_kind) + U32.pack(len(h.value))
                    + h.value for h in headers)


def decode_options(buf: bytes, pos: int = 0, end: int | None = None) -> Headers:
    """A V options block (C.8): the header TLV restricted to UTF-8 string keys, no duplicates, at
    most 1024 entries and 100,000 bytes."""
    stop = len(buf) if end is None else end
    if stop - pos > MAX_OPTIONS_BYTES:
        raise IggyError(Status.OPTIONS_BLOCK_TOO_LARGE, f"options block of {stop - pos} bytes")
    entries = decode_user_headers(buf, pos, stop)
    if len(entries) > MAX_OPTIONS:
        raise IggyError(Status.OPTIONS_BLOCK_TOO_LARGE, f"{len(entries)} options")
    seen: set[bytes] = set()
    for e in entries:
        if e.name is None:
            raise IggyError(Status.INVALID_FORMAT, "option key is not a UTF-8 string")
        if e.key in seen:
            raise IggyError(Status.INVALID_FORMAT, f"duplicate option {e.name}")
        seen.add(e.key)
    return entries


def option(options: Headers, key: str) -> UserHeader | None:
    raw = key.encode("utf-8")
    for e in options:
        if e.key == raw:
            return e
    return None


# -- encoders -----------------------------------------------------------------------------------


def enc_u128(value: int) -> bytes:
    return U128_PARTS.pack(value & 0xFFFF_FFFF_FFFF_FFFF, value >> 64)


def enc_identifier(ident: Identifier) -> bytes:
    v = ident.value
    if isinstance(v, str):
        raw = v.encode("utf-8")
        if not 1 <= len(raw) <= MAX_NAME:
            raise ValueError(f"identifier of {len(raw)} bytes")
        return bytes((IdKind.STRING, len(raw))) + raw
    return bytes((IdKind.NUMERIC, 4)) + U32.pack(v)


def enc_name8(name: str) -> bytes:
    raw = name.encode("utf-8")
    if not 1 <= len(raw) <= MAX_NAME:
        raise ValueError(f"name of {len(raw)} bytes")
    return U8.pack(len(raw)) + raw


def enc_bytes8(raw: bytes) -> bytes:
    if len(raw) > MAX_NAME:
        raise ValueError(f"field of {len(raw)} bytes")
    return U8.pack(len(raw)) + raw


def enc_str32(text: str | None) -> bytes:
    raw = (text or "").encode("utf-8")
    return U32.pack(len(raw)) + raw


def enc_consumer(consumer: Consumer) -> bytes:
    return U8.pack(consumer.kind) + enc_identifier(consumer.id)


def enc_seed_consumer(consumer: Consumer) -> bytes:
    if not isinstance(consumer.id.value, int):
        raise ValueError("a D consumer id is a u32")
    return U8.pack(consumer.kind) + U32.pack(consumer.id.value)


def enc_partitioning(p: Partitioning) -> bytes:
    return bytes((p.kind, len(p.value))) + p.value


def enc_optional_partition(partition_id: int | None) -> bytes:
    return b"\x00" + U32.pack(0) if partition_id is None else b"\x01" + U32.pack(partition_id)


def enc_strategy(s: PollingStrategy) -> bytes:
    return U8.pack(s.kind) + U64.pack(s.value)
