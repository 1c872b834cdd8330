"""Between Iggy messages and bayou's shared record model (``bayou.records.Record``).

Stored form of one Iggy message (so any front end can serve it, and Iggy gets it back intact):

- ``Record.value`` = the payload; ``Record.message_id`` = the u128 id (0, "server chooses", becomes
  None so the server can mint one); ``Record.key`` = the message's ``bayou.key`` user header (a
  string key ``bayou.key`` with a RAW value: the Iggy form of a bayou record key, not kept among
  the headers), else the SEND's messages key (partitioning kind 3), else None.
- ``Record.timestamp`` (milliseconds, like every record) = origin timestamp // 1000; the exact
  origin timestamp in microseconds is kept in the header ``iggy.origin_ts`` (u64 little-endian).
- each user header becomes one record header. Name: ``iggy.h.<key>`` for a string key (kind 2,
  UTF-8), ``iggy.hk.<key kind>.<key as hex>`` for any other key kind. Value: one byte holding the
  value kind, then the raw value bytes. Order is kept.

Serving a record back (``record_to_polled``): a record key of 1..255 bytes (the Iggy limits)
becomes the first user header, ``bayou.key`` (string key, RAW value), so an Iggy consumer sees the
key a V1, Cursus or TANK producer (or an Iggy messages-key send) gave the record; no other
``bayou.key`` header is served then, so the key is never there twice. The ``iggy.*`` headers above
are turned back into the user headers and origin timestamp; headers a record got from another
protocol become string-keyed RAW headers. A record Iggy cannot carry as itself (a key over 255
bytes, a header name or value of 0 or over 255 bytes) is served as bayou's record envelope
(``bayou.records.iggy``: the one user header ``bayou.record``, the record as the payload), which
the SDK opens; an empty key is served as no key (V1, Cursus and TANK have no null key: a keyless
produce there stores an empty one). (Messages sent through Iggy without a messages key are stored
as frames and served as stored, their ``bayou.key`` header where the producer put it: they never
pass through here.)
"""

from __future__ import annotations

import struct

from bayou.protocols.iggy.messages import (
    HeaderKind,
    Message,
    PartitioningKind,
    PolledMessage,
    SendMessages,
    UserHeader,
)
from bayou.records.iggy import ENVELOPE_HEADER, ENVELOPE_VERSION, decode_envelope, encode_envelope
from bayou.records.model import Headers as RecordHeaders
from bayou.records.model import Record

PREFIX = "iggy."
STRING_KEY_PREFIX = "iggy.h."
TYPED_KEY_PREFIX = "iggy.hk."
ORIGIN_TIMESTAMP = "iggy.origin_ts"
KEY_HEADER = b"bayou.key"
_U64 = struct.Struct("<Q")
U64_MAX = (1 << 64) - 1
_MAX_FIELD = 255


def header_to_record(h: UserHeader) -> tuple[str, bytes]:
    name = h.name
    if name is not None:
        record_name = STRING_KEY_PREFIX + name
    else:
        record_name = f"{TYPED_KEY_PREFIX}{h.key_kind}.{h.key.hex()}"
    return record_name, bytes((h.value_kind,)) + h.value


def header_from_record(name: str, value: bytes) -> UserHeader | None:
    """The user header a record header stands for; None when it cannot be one."""
    if name.startswith(STRING_KEY_PREFIX) and value:
        key = name[len(STRING_KEY_PREFIX):].encode("utf-8")
        return _checked(UserHeader(key, value[1:], HeaderKind.STRING, value[0]))
    if name.startswith(TYPED_KEY_PREFIX) and value:
        kind, _, hexkey = name[len(TYPED_KEY_PREFIX):].partition(".")
        try:
            key_kind, key = int(kind), bytes.fromhex(hexkey)
        except ValueError:
            return None
        return _checked(UserHeader(key, value[1:], key_kind, value[0]))
    if name.startswith(PREFIX):
        return None
    return _checked(UserHeader(name.encode("utf-8"), value, HeaderKind.STRING, HeaderKind.RAW))


def _checked(h: UserHeader) -> UserHeader | None:
    ok = (1 <= len(h.key) <= _MAX_FIELD and 1 <= len(h.value) <= _MAX_FIELD and 1 <= h.key_kind <= 255
          and h.value_kind >= 1)
    return h if ok else None


def is_key_header(h: UserHeader) -> bool:
    """Whether ``h`` is the Iggy form of a record key (string key ``bayou.key``, RAW value)."""
    return h.key == KEY_HEADER and h.key_kind == HeaderKind.STRING and h.value_kind == HeaderKind.RAW


ENVELOPE = UserHeader(ENVELOPE_HEADER, ENVELOPE_VERSION, HeaderKind.STRING, HeaderKind.RAW)


def is_envelope(headers: tuple[UserHeader, ...]) -> bool:
    """Whether a message with these user headers carries bayou's record envelope."""
    return len(headers) == 1 and headers[0] == ENVELOPE


def key_header(key: bytes) -> UserHeader | None:
    """The ``bayou.key`` user header for a record key; None when Iggy cannot carry it (1..255 bytes)."""
    if not 1 <= len(key) <= _MAX_FIELD:
        return None
    return UserHeader(KEY_HEADER, key, HeaderKind.STRING, HeaderKind.RAW)


def message_to_record(message: Message, key: bytes | None = None) -> Record:
    """The record for one message; its first ``bayou.key`` header, if any, is the key instead of
    ``key`` (the send's messages key); an envelope (``is_envelope``) is the record it holds."""
    user = message.headers
    if is_envelope(user):
        env_key, value, inner = decode_envelope(message.payload)
        return Record(value=value or b"", key=env_key, timestamp=message.origin_timestamp // 1000,
                      headers=((ORIGIN_TIMESTAMP, _U64.pack(message.origin_timestamp)),
                               *((name, hv or b"") for name, hv in inner)),
                      message_id=message.id or None)
    for i, h in enumerate(user):
        if is_key_header(h):
            key = h.value
            user = user[:i] + user[i + 1 :]
            break
    headers: RecordHeaders = (
        (ORIGIN_TIMESTAMP, _U64.pack(message.origin_timestamp)),
        *(header_to_record(h) for h in user),
    )
    return Record(value=message.payload, key=key, timestamp=message.origin_timestamp // 1000,
                  headers=headers, message_id=message.id or None)


def send_to_records(send: SendMessages) -> list[Record]:
    """The records a SEND_MESSAGES stores, in order; a messages-key send keys every record."""
    key = send.partitioning.value if send.partitioning.kind == PartitioningKind.MESSAGES_KEY else None
    return [message_to_record(msg, key) for msg in send.messages]


def micros(ms: int) -> int:
    """A record timestamp (ms) as Iggy's u64 microseconds: a TANK message may carry any u64 of
    milliseconds, past what a u64 of microseconds holds; such a time saturates (and one below 0
    reads as 0) rather than making the message unreadable to Iggy clients."""
    return min(max(ms, 0) * 1000, U64_MAX)


# The login version string bayou's SDK sends: only such sessions are served record envelopes.
ENVELOPE_CLIENT = "bayou-sdk"


def record_to_polled(record: Record, *, timestamp: int, offset: int | None = None,
                     envelope: bool = False) -> PolledMessage:
    """A stored record as a polled Iggy message. ``timestamp`` is the server append time in
    microseconds (Iggy reports one per batch); ``offset`` defaults to ``record.offset``. What Iggy
    cannot carry (a key over 255 bytes, a header it cannot hold) is left out for a plain Iggy
    client, whose payload stays the value; with ``envelope`` (a session of bayou's SDK) the whole
    record travels, exactly, in bayou's envelope instead."""
    origin = micros(record.timestamp)
    headers: list[UserHeader] = []
    kh = None if not record.key else key_header(record.key)
    fits = kh is not None or not record.key
    if kh is not None:
        headers.append(kh)
    for name, value in record.headers:
        if name == ORIGIN_TIMESTAMP:
            if len(value) == _U64.size:
                origin = _U64.unpack(value)[0]
            continue
        h = header_from_record(name, value)
        if h is None and not name.startswith(PREFIX):
            fits = False  # a header of another protocol that Iggy cannot carry
        if h is not None and not (kh is not None and h.key == KEY_HEADER and h.key_kind == HeaderKind.STRING):
            headers.append(h)
    payload = record.value
    if not fits and envelope:  # the whole record, exactly, in bayou's envelope
        payload = encode_envelope(record.key, record.value,
                                  [(n, v) for n, v in record.headers if not n.startswith(PREFIX)])
        headers = [ENVELOPE]
    return PolledMessage(offset=record.offset if offset is None else offset, timestamp=timestamp,
                         origin_timestamp=origin, id=record.message_id or 0, payload=payload,
                         headers=tuple(headers))

