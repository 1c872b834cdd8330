"""Frames of the three Iggy dialects (iggy.md A.1, B.1, C.1-C.4, D) and the one protocol error.

A connection's dialect is decided once, from its first bytes (``detect_dialect``, D.2). The legacy
framing (u32 length + u32 code + payload) is shared by the design document (D) and apache-iggy
<= 0.8 (L); which of the two a legacy-framed connection speaks follows from what it sends
(``resolve_legacy_dialect``, D.3). apache-iggy 0.9 (V) frames every request with a 256-byte
RequestHeader.

Readers keep one partial frame and refuse an oversized declared length before buffering any of its
body. ``feed`` returns the frames the data completes (an empty list means "need more bytes") or
raises ``IggyError``; nothing else escapes.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

import xxhash

from bayou.protocols.framing import AtBoundary, Buffer, FrameReader
from bayou.protocols.iggy.codes import (
    CHECKSUMMED_REQUESTS,
    COMMAND_OF_OPERATION,
    LOGIN_COMMANDS,
    PRE_LOGIN_COMMANDS,
    RESULT_FRAMED,
    Command,
    EvictionReason,
    Operation,
    Status,
)

HEADER_SIZE = 256
MAX_LEGACY_PAYLOAD = 10 * 1024 * 1024  # the 0.8 server's cap on non-SEND payloads (B.1)
MAX_SEND_PAYLOAD = 128 * 1024 * 1024  # bayou's cap on one SEND_MESSAGES frame (0.8 had none)
MAX_VSR_FRAME = 128 * 1024 * 1024
LOGIN_CAP = 64 * 1024  # the largest payload a connection that has not logged in may send

COMMAND_REQUEST = 5
COMMAND_REPLY = 8
COMMAND_EVICTION = 13

_U32 = struct.Struct("<I")
_LEGACY_HEAD = struct.Struct("<II")  # length, code  /  status, length
_U128_PAIR = struct.Struct("<QQ")


class IggyError(Exception):
    """The one protocol error.

    ``status`` is the Iggy code to answer with (an L reply status, a V header status). ``close``
    means the byte stream can no longer be trusted: the server sends the error (legacy) or nothing
    (VSR, whose header could not be read) and closes. ``eviction``, set only for V logins that
    cannot be parsed, asks for an EvictionHeader with that reason instead of a reply.
    """

    def __init__(self, status: Status, message: str, *, close: bool = False,
                 eviction: EvictionReason | None = None, request: RequestHeader | None = None) -> None:
        super().__init__(f"{status.name} ({int(status)}): {message}")
        self.status = status
        self.message = message
        self.close = close
        self.eviction = eviction
        self.request = request  # V: the header of the refused request, to answer it


class Dialect(enum.Enum):
    SEED = "D"  # design document: legacy framing, 2023 payload layouts (iggy.md A)
    LEGACY = "L"  # apache-iggy <= 0.8: legacy framing, 0.8 layouts (B)
    VSR = "V"  # apache-iggy 0.9: 256-byte headers (C)


# -- dialect detection (iggy.md D.2, D.3) -------------------------------------------------------


def detect_dialect(first: bytes, max_legacy_frame: int = MAX_SEND_PAYLOAD + 4) -> Dialect | None:
    """Decide a new connection's framing from the bytes received so far; None = need more.

    Returns ``Dialect.LEGACY`` for any legacy-framed connection (D or L: see
    ``resolve_legacy_dialect``) and ``Dialect.VSR`` for the 256-byte header framing. Raises
    ``IggyError(close=True)`` when the bytes fit neither (D.2 step 3: close the connection).
    """
    if len(first) < 4:
        return None
    if first[:4] == b"\x00\x00\x00\x00":
        return Dialect.VSR
    if len(first) < 8:
        return None
    length, code = _LEGACY_HEAD.unpack_from(first)
    if 4 <= length <= max_legacy_frame and code < 65536:
        return Dialect.LEGACY
    if len(first) < 61:
        return None
    (size,) = _U32.unpack_from(first, 48)
    if size >= HEADER_SIZE and first[60] == COMMAND_REQUEST:
        return Dialect.VSR
    raise IggyError(Status.INVALID_COMMAND, "first bytes are neither a legacy frame nor a VSR header",
                    close=True)


def resolve_legacy_dialect(code: int, *, authenticated: bool) -> Dialect | None:
    """D.3: what one command says about a legacy-framed connection. None = still undecided.

    A login (38, 44) or any command after a login means L; any other command before a login
    (other than PING and GET_STATS, which both kinds send) means a D client. The server keeps the
    first non-None answer for the rest of the connection and applies its own policy (D support
    enabled or status 40).
    """
    if authenticated or code in LOGIN_COMMANDS:
        return Dialect.LEGACY
    if code in PRE_LOGIN_COMMANDS:
        return None
    return Dialect.SEED


# -- legacy framing (D and L) -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LegacyFrame:
    """One legacy-framed request: ``code`` is the raw u32 (it may not be a known Command)."""

    code: int
    payload: bytes


class LegacyFrameReader(FrameReader[LegacyFrame]):
    """Splits a legacy byte stream into ``LegacyFrame``s (A.1, B.1).

    A declared length below 4, or a payload above the cap (``max_payload``, or ``max_send_payload``
    for SEND_MESSAGES), raises ``IggyError(INVALID_COMMAND, close=True)``: the stream cannot be
    resynchronised. Frames completed before the bad header are returned first; the next call
    raises.

    ``login_cap`` (set by a server while the connection has not logged in) refuses a larger
    payload from its header alone with ``UNAUTHENTICATED``, before any of it is buffered. A frame
    behind a complete one in the same data is not judged until the caller has served that one
    (a pipelined login): ``deferred`` is then set and the caller feeds ``b""`` again.
    """

    error = IggyError
    head = 4

    def __init__(self, max_payload: int = MAX_LEGACY_PAYLOAD, max_send_payload: int = MAX_SEND_PAYLOAD
                 ) -> None:
        super().__init__()
        self.max_payload = max_payload
        self.max_send_payload = max_send_payload
        self.login_cap: int | None = None

    def _measure(self, src: Buffer, pos: int, n: int) -> int:
        (length,) = _U32.unpack_from(src, pos)
        if length < 4:
            raise IggyError(Status.INVALID_COMMAND, f"frame length {length} is below 4", close=True)
        if self.login_cap is not None and length - 4 > self.login_cap:
            raise AtBoundary(IggyError(Status.UNAUTHENTICATED,
                                       f"payload of {length - 4} bytes before a login", close=True))
        if n - pos < 8:
            return 0
        (code,) = _U32.unpack_from(src, pos + 4)
        cap = self.max_send_payload if code == Command.SEND_MESSAGES else self.max_payload
        if length - 4 > cap:
            raise IggyError(Status.INVALID_COMMAND, f"payload of {length - 4} bytes exceeds {cap}",
                            close=True)
        return 4 + int(length)

    def _frame(self, src: Buffer, pos: int, end: int) -> LegacyFrame:
        return LegacyFrame(_U32.unpack_from(src, pos + 4)[0], bytes(src[pos + 8 : end]))

    def _declared(self, buf: bytearray) -> int | None:
        return 4 + int(_U32.unpack_from(buf)[0]) if len(buf) >= 4 else None


def encode_legacy_request(code: int, payload: bytes = b"") -> bytes:
    """A legacy request frame (the client side; used by tests and a future SDK)."""
    return _LEGACY_HEAD.pack(4 + len(payload), code) + payload


def encode_legacy_reply(payload: bytes = b"") -> bytes:
    """An L success reply: status 0, u32 length, payload (B.1).

    A 1-byte payload would be read by the client as empty (B.1), so no encoder here produces one;
    asking for it is a bug in the caller.
    """
    if len(payload) == 1:
        raise ValueError("a legacy OK reply payload of 1 byte is read as empty by Iggy clients")
    return _LEGACY_HEAD.pack(0, len(payload)) + payload


def encode_legacy_error(status: int) -> bytes:
    """An L error reply: the code as status, length 0, no payload."""
    if status == 0:
        raise ValueError("status 0 is success")
    return _LEGACY_HEAD.pack(status, 0)


encode_seed_reply = encode_legacy_reply
"""D replies: the seed defines none; the Iggy source of its time (A.5 item 1) used exactly the L
reply header, so D and L share the encoder."""

encode_seed_error = encode_legacy_error


def decode_legacy_reply(frame: bytes) -> tuple[int, bytes]:
    """(status, payload) of one complete legacy reply; the client side, used by tests."""
    if len(frame) < 8:
        raise IggyError(Status.INVALID_COMMAND, "reply shorter than 8 bytes")
    status, length = _LEGACY_HEAD.unpack_from(frame)
    if len(frame) != 8 + length:
        raise IggyError(Status.INVALID_COMMAND, "reply length does not match its header")
    return status, frame[8:]


# -- VSR framing (V) ----------------------------------------------------------------------------


def _u128(buf: Buffer, at: int) -> int:
    lo, hi = _U128_PAIR.unpack_from(buf, at)
    return int(lo | (hi << 64))


def _put_u128(buf: bytearray, at: int, value: int) -> None:
    _U128_PAIR.pack_into(buf, at, value & 0xFFFF_FFFF_FFFF_FFFF, value >> 64)


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """The fields of a 256-byte V RequestHeader (iggy.md C.2) that carry meaning.

    ``code`` is the u32 at offset 196, which holds the command code for NON_REPLICATED requests.
    ``operation`` stays an int: an unknown byte must reach the codec to be rejected there.
    """

    client: int
    operation: int
    request: int = 0
    session: int = 0
    code: int = 0
    request_checksum: int = 0
    timestamp: int = 0
    user_id: int = 0
    size: int = HEADER_SIZE

    @staticmethod
    def decode(buf: Buffer, at: int = 0) -> RequestHeader:
        (size,) = _U32.unpack_from(buf, at + 48)
        timestamp, request = struct.unpack_from("<QQ", buf, at + 160)
        (session,) = struct.unpack_from("<Q", buf, at + 184)
        user_id, code = struct.unpack_from("<II", buf, at + 192)
        return RequestHeader(client=_u128(buf, at + 128), operation=buf[at + 176], request=request,
                             session=session, code=code, request_checksum=_u128(buf, at + 144),
                             timestamp=timestamp, user_id=user_id, size=size)

    def encode(self, body_length: int) -> bytes:
        out = bytearray(HEADER_SIZE)
        _U32.pack_into(out, 48, HEADER_SIZE + body_length)
        out[60] = COMMAND_REQUEST
        _put_u128(out, 128, self.client)
        _put_u128(out, 144, self.request_checksum)
        struct.pack_into("<QQ", out, 160, self.timestamp, self.request)
        out[176] = self.operation
        struct.pack_into("<QII", out, 184, self.session, self.user_id, self.code)
        return bytes(out)


@dataclass(frozen=True, slots=True)
class VsrFrame:
    header: RequestHeader
    body: bytes

    @property
    def command(self) -> int | None:
        """The command this frame carries, or None when the operation byte is not one a client may
        send. REGISTER carries LOGIN_REGISTER unless the header's code field says
        LOGIN_REGISTER_WITH_PAT (bayou's reading: the 0.9.0 capture of a password login leaves the
        field 0, and no token login was captured)."""
        op = self.header.operation
        if op == Operation.NON_REPLICATED:
            return self.header.code
        if op == Operation.REGISTER:
            if self.header.code == Command.LOGIN_REGISTER_WITH_PAT:
                return int(Command.LOGIN_REGISTER_WITH_PAT)
            return int(Command.LOGIN_REGISTER)
        try:
            return int(COMMAND_OF_OPERATION[Operation(op)])
        except (ValueError, KeyError):
            return None


class VsrFrameReader(FrameReader[VsrFrame]):
    """Splits a V byte stream into ``VsrFrame``s (C.1): a 256-byte header whose ``size`` at offset
    48 covers header and body. A size below 256 or above ``max_frame``, or a command byte other than
    5 (Request), raises ``IggyError(close=True)``: D.2 says close the connection. ``login_cap``
    and ``deferred`` work as in ``LegacyFrameReader`` (the error carries the refused header)."""

    error = IggyError
    head = HEADER_SIZE

    def __init__(self, max_frame: int = MAX_VSR_FRAME) -> None:
        super().__init__()
        self.max_frame = max_frame
        self.login_cap: int | None = None

    def _measure(self, src: Buffer, pos: int, n: int) -> int:
        size: int = _U32.unpack_from(src, pos + 48)[0]
        if src[pos + 60] != COMMAND_REQUEST:
            raise IggyError(Status.INVALID_COMMAND, f"header command {src[pos + 60]} is not Request (5)",
                            close=True)
        if size >= HEADER_SIZE and self.login_cap is not None and size - HEADER_SIZE > self.login_cap:
            raise AtBoundary(IggyError(Status.UNAUTHENTICATED,
                                       f"body of {size - HEADER_SIZE} bytes before a login",
                                       close=True, request=RequestHeader.decode(src, pos)))
        if size < HEADER_SIZE or size > self.max_frame:
            raise IggyError(Status.INVALID_COMMAND,
                            f"frame size {size} outside {HEADER_SIZE}..{self.max_frame}", close=True)
        return size

    def _frame(self, src: Buffer, pos: int, end: int) -> VsrFrame:
        return VsrFrame(RequestHeader.decode(src, pos), bytes(src[pos + HEADER_SIZE : end]))

    def _declared(self, buf: bytearray) -> int | None:
        return max(HEADER_SIZE, int(_U32.unpack_from(buf, 48)[0])) if len(buf) >= 52 else None


def request_checksum(operation: int, body: bytes) -> int:
    """What a V client puts in ``request_checksum`` (C.2): XXH3-64 of the body for Register, Logout
    and metadata operations, 0 for NonReplicated and partition operations."""
    return xxhash.xxh3_64_intdigest(body) if operation in CHECKSUMMED_REQUESTS else 0


def encode_vsr_request(header: RequestHeader, body: bytes = b"") -> bytes:
    """A V request frame (the client side); ``size`` is computed from the body."""
    return header.encode(len(body)) + body


@dataclass(frozen=True, slots=True)
class ReplyHeader:
    """The fields of a 256-byte V ReplyHeader (iggy.md C.3)."""

    client: int
    request: int
    operation: int
    status: int = 0
    request_checksum: int = 0
    op: int = 0
    commit: int = 0
    timestamp: int = 0
    size: int = HEADER_SIZE

    @staticmethod
    def for_request(header: RequestHeader, status: int = 0, *, op: int = 0, commit: int = 0,
                    timestamp: int = 0) -> ReplyHeader:
        """A reply that echoes client, request, request_checksum and operation, as the real server
        does; the client itself only reads size, command, operation and status."""
        return ReplyHeader(client=header.client, request=header.request, operation=header.operation,
                           status=status, request_checksum=header.request_checksum, op=op,
                           commit=commit, timestamp=timestamp)

    def encode(self, body_length: int) -> bytes:
        """The checksum, checksum_body and cluster fields stay zero: client-facing headers are
        sealed on neither side (C.3, D.2 assumption a)."""
        out = bytearray(HEADER_SIZE)
        _U32.pack_into(out, 48, HEADER_SIZE + body_length)
        out[60] = COMMAND_REPLY
        _put_u128(out, 128, self.request_checksum)
        _put_u128(out, 160, self.client)
        struct.pack_into("<QQQQ", out, 176, self.op, self.commit, self.timestamp, self.request)
        out[208] = self.operation
        _U32.pack_into(out, 216, self.status)
        return bytes(out)

    @staticmethod
    def decode(buf: bytes | bytearray, at: int = 0) -> ReplyHeader:
        (size,) = _U32.unpack_from(buf, at + 48)
        op, commit, timestamp, request = struct.unpack_from("<QQQQ", buf, at + 176)
        (status,) = _U32.unpack_from(buf, at + 216)
        return ReplyHeader(client=_u128(buf, at + 160), request=request, operation=buf[at + 208],
                           status=status, request_checksum=_u128(buf, at + 128), op=op,
                           commit=commit, timestamp=timestamp, size=size)


def encode_vsr_reply(reply: ReplyHeader, body: bytes = b"") -> bytes:
    """A V reply frame exactly as given: no result section is added (see ``encode_vsr_ok``)."""
    return reply.encode(len(body)) + body


_RESULT_OK = _U32.pack(0)


def encode_vsr_ok(request: RequestHeader, payload: bytes = b"", *, op: int = 0, commit: int = 0,
                  timestamp: int = 0) -> bytes:
    """A successful V reply: the result section (u32 0) first when the operation is result-framed
    (C.6 rule 2), then the payload."""
    body = _RESULT_OK + payload if request.operation in RESULT_FRAMED else payload
    return encode_vsr_reply(ReplyHeader.for_request(request, op=op, commit=commit, timestamp=timestamp),
                            body)


def encode_vsr_error(request: RequestHeader, status: int, *, committed: bool = False, op: int = 0,
                     commit: int = 0, timestamp: int = 0) -> bytes:
    """A failed V reply. ``committed`` reports a committed rejection in the result section
    ({count 1, index 0, result}) for result-framed operations (C.6 rule 2); otherwise, and always for
    other operations, the code goes in the header status with an empty body (C.6 rule 1)."""
    if status == 0:
        raise ValueError("status 0 is success")
    if committed and request.operation in RESULT_FRAMED:
        body = struct.pack("<III", 1, 0, status)
        return encode_vsr_reply(ReplyHeader.for_request(request, op=op, commit=commit,
                                                        timestamp=timestamp), body)
    return encode_vsr_reply(ReplyHeader.for_request(request, status, op=op, commit=commit,
                                                    timestamp=timestamp))


def encode_eviction(client: int, reason: EvictionReason, *, server_version: int = 0,
                    server_version_min: int = 0) -> bytes:
    """A header-only EvictionHeader (C.4): size 256, command 13, client at 128, the protocol window
    at 144/148 (meaningful for reason 14 only), reason at 255."""
    out = bytearray(HEADER_SIZE)
    _U32.pack_into(out, 48, HEADER_SIZE)
    out[60] = COMMAND_EVICTION
    _put_u128(out, 128, client)
    struct.pack_into("<II", out, 144, server_version, server_version_min)
    out[255] = reason
    return bytes(out)


def split_vsr_reply(frame: bytes) -> tuple[ReplyHeader, bytes]:
    """(header, body) of one complete V reply frame; the client side, used by tests.

    Raises ``IggyError`` for an eviction (status = the reason) or a malformed frame."""
    if len(frame) < HEADER_SIZE:
        raise IggyError(Status.INVALID_COMMAND, "reply shorter than its header")
    if frame[60] == COMMAND_EVICTION:
        raise IggyError(Status.UNAUTHENTICATED, f"evicted, reason {frame[255]}")
    if frame[60] != COMMAND_REPLY:
        raise IggyError(Status.INVALID_COMMAND, f"header command {frame[60]} is not Reply (8)")
    header = ReplyHeader.decode(frame)
    if header.size != len(frame):
        raise IggyError(Status.INVALID_COMMAND, "reply size does not match its header")
    return header, frame[HEADER_SIZE:]


def split_result_section(operation: int, body: bytes) -> tuple[int, bytes]:
    """(result code, payload) of a V reply body: for result-framed operations the code of the first
    result entry (0 = success) and what follows the section; otherwise (0, body). Register with an
    empty body passes through, as the client does (C.6 rule 4)."""
    if operation not in RESULT_FRAMED or (operation == Operation.REGISTER and not body):
        return 0, body
    if len(body) < 4:
        raise IggyError(Status.INVALID_COMMAND, "result section truncated")
    (count,) = _U32.unpack_from(body)
    if count == 0:
        return 0, body[4:]
    if len(body) < 4 + 8 * count:
        raise IggyError(Status.INVALID_COMMAND, "result section shorter than its count")
    (result,) = _U32.unpack_from(body, 8)
    return result, body[4 + 8 * count :]


def reader_for(dialect: Dialect) -> LegacyFrameReader | VsrFrameReader:
    """The frame reader of a dialect with its default limits (D and L share the legacy framing)."""
    return VsrFrameReader() if dialect is Dialect.VSR else LegacyFrameReader()
