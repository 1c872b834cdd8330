"""bayou's extensions of the Iggy codec and conversions, without sockets:

- the record key as the user header ``bayou.key`` (string key, RAW value): read from stored frames
  (``records.iggy.decode_frames``) and from sent messages (``convert.message_to_record``), written
  for polled records (``convert.record_to_polled``), never twice;
- an options block after the name of an L CREATE_TOPIC / UPDATE_TOPIC (absent in what 0.8 sends);
- ``stored.select_frames``: the frames de-duplication keeps, renumbered.
"""

from __future__ import annotations

import dataclasses
import struct

import pytest

from bayou.protocols.iggy import codec
from bayou.protocols.iggy import messages as m
from bayou.protocols.iggy.codes import Command, Status
from bayou.protocols.iggy.convert import message_to_record, record_to_polled
from bayou.protocols.iggy.framing import Dialect, IggyError
from bayou.protocols.iggy.stored import frames_from_messages, select_frames
from bayou.records.batch import assemble_batch, decode_records
from bayou.records.iggy import FORMAT_IGGY, frame_ids, frame_positions, split_append_time
from bayou.records.model import Record

STR, RAW = m.HeaderKind.STRING, m.HeaderKind.RAW
KEY = m.UserHeader(b"bayou.key", b"user-7", STR, RAW)
OTHER = m.UserHeader.of("trace", STR, "t1")
S, T = m.Identifier("s"), m.Identifier("t")


def stored_batch(messages: list[m.Message]) -> bytes:
    frames, origin, stride = frames_from_messages(messages, now_us=1_000_000)
    ms, sub = split_append_time(2_000_000, stride)
    return assemble_batch(frames, record_count=len(messages), base_offset=0, attributes=FORMAT_IGGY << 8,
                          base_timestamp=ms, max_timestamp=ms, producer_id=origin, base_sequence=sub)


# -- the key header -------------------------------------------------------------------------------


def test_stored_frames_read_the_key_header_as_the_record_key() -> None:
    not_raw = m.UserHeader(b"bayou.key", b"s", STR, STR)
    typed_key = m.UserHeader(b"bayou.key", b"x", m.HeaderKind.INT8, RAW)
    second = m.UserHeader(b"bayou.key", b"again", STR, RAW)
    recs = decode_records(stored_batch([
        m.Message(b"a", 1, (OTHER, KEY)), m.Message(b"b", 2, (not_raw, typed_key)), m.Message(b"c", 3),
        m.Message(b"d", 4, (KEY, second)),
    ]))
    assert [r.key for r in recs] == [b"user-7", None, None, b"user-7"]
    names = [[n for n, _v in r.headers] for r in recs]
    typed = f"iggy.hk.{int(m.HeaderKind.INT8)}.{KEY.key.hex()}"
    assert names == [["iggy.origin_ts", "iggy.h.trace"], ["iggy.origin_ts", "iggy.h.bayou.key", typed],
                     ["iggy.origin_ts"], ["iggy.origin_ts", "iggy.h.bayou.key"]]  # only the first is the key


def test_a_sent_key_header_is_the_record_key_over_the_messages_key() -> None:
    assert message_to_record(m.Message(b"a", 1, (OTHER, KEY)), b"route").key == b"user-7"
    rec = message_to_record(m.Message(b"a", 1, (OTHER, KEY)))
    assert rec.key == b"user-7" and [n for n, _v in rec.headers] == ["iggy.origin_ts", "iggy.h.trace"]
    assert message_to_record(m.Message(b"a", 1, (OTHER,)), b"route").key == b"route"


def test_a_record_key_is_polled_as_the_first_header_once() -> None:
    rec = Record(b"v", b"k1", 5, (("h", b"x"), ("bayou.key", b"dup"), ("iggy.h.bayou.key", b"\x01dup2")))
    polled = record_to_polled(rec, timestamp=1)
    assert polled.headers == (m.UserHeader(b"bayou.key", b"k1", STR, RAW), m.UserHeader(b"h", b"x", STR, RAW))
    # Iggy's limits: 1..255 bytes; an empty key is no key (V1, Cursus and TANK have no null key,
    # so theirs is empty) and a record header of that name stays; a longer key goes in an envelope
    polled = record_to_polled(Record(b"v", b"", 5, (("bayou.key", b"h"),)), timestamp=1)
    assert polled.headers == (m.UserHeader(b"bayou.key", b"h", STR, RAW),)
    polled = record_to_polled(Record(b"v", b"k" * 256, 5, (("bayou.key", b"h"),)), timestamp=1)
    assert polled.headers == (m.UserHeader(b"bayou.key", b"h", STR, RAW),)  # a plain Iggy client
    assert polled.payload == b"v"
    polled = record_to_polled(Record(b"v", b"k" * 256, 5, (("bayou.key", b"h"),)), timestamp=1,
                              envelope=True)  # bayou's SDK
    assert polled.headers == (m.UserHeader(b"bayou.record", b"\x01", STR, RAW),)
    assert record_to_polled(Record(b"v", b"k" * 255, 5), timestamp=1).headers == (
        m.UserHeader(b"bayou.key", b"k" * 255, STR, RAW),)
    assert record_to_polled(Record(b"v", None, 5), timestamp=1).headers == ()


def test_stored_frames_polled_as_records_keep_one_key_header() -> None:
    (rec,) = decode_records(stored_batch([m.Message(b"a", 1, (OTHER, KEY))]))
    assert record_to_polled(rec, timestamp=1).headers == (KEY, OTHER)  # the key comes first


# -- L options ------------------------------------------------------------------------------------

OPTIONS = (m.UserHeader.of("segment.bytes", STR, "1048576"),
           m.UserHeader.of("message.deduplication", STR, "true"))


@pytest.mark.parametrize("req", [
    m.CreateTopic(S, "t", 2, 1, 0, 0, 0, options=OPTIONS),
    m.UpdateTopic(S, T, 1, 0, 0, "t", 0, options=OPTIONS[:1]),
], ids=lambda r: type(r).__name__)
def test_legacy_topic_commands_carry_options_after_the_name(req: m.Request) -> None:
    payload = codec.encode_request(req, Dialect.LEGACY)
    without = codec.encode_request(dataclasses.replace(req, options=()), Dialect.LEGACY)
    block = b"".join(bytes((h.key_kind,)) + struct.pack("<I", len(h.key)) + h.key + bytes((h.value_kind,))
                     + struct.pack("<I", len(h.value)) + h.value for h in req.options)
    assert payload == without + block  # the 0.8 layout, then the V options block
    assert codec.decode_request(Dialect.LEGACY, req.command, payload) == req
    assert codec.decode_request(Dialect.LEGACY, req.command, without).options == ()


def test_legacy_options_follow_the_options_rules() -> None:
    head = codec.encode_request(m.CreateTopic(S, "t", 1, 1, 0, 0, 0), Dialect.LEGACY)
    with pytest.raises(IggyError) as err:
        codec.decode_request(Dialect.LEGACY, Command.CREATE_TOPIC, head + b"\x00")
    assert err.value.status == Status.INVALID_HEADER_KIND  # a stray byte is a bad options block
    with pytest.raises(IggyError) as err:
        codec.decode_request(Dialect.LEGACY, Command.CREATE_TOPIC, head + b"\x02\x05")
    assert err.value.status == Status.INVALID_FORMAT  # a truncated one
    dup = bytes((STR,)) + struct.pack("<I", 1) + b"k" + bytes((STR,)) + struct.pack("<I", 1) + b"v"
    with pytest.raises(IggyError) as err:
        codec.decode_request(Dialect.LEGACY, Command.CREATE_TOPIC, head + dup + dup)
    assert err.value.status == Status.INVALID_FORMAT


def test_the_08_captured_create_topic_still_decodes_without_options() -> None:
    frame = bytes.fromhex("230000002e010000010400000000010000000200a493d600000000809698000000000001027432")
    req = codec.decode_request(Dialect.LEGACY, Command.CREATE_TOPIC, frame[8:])
    assert isinstance(req, m.CreateTopic) and req.name == "t2" and req.options == ()
    assert codec.encode_request(req, Dialect.LEGACY) == frame[8:]


# -- select_frames --------------------------------------------------------------------------------


@pytest.mark.parametrize("payloads", [[b"aa", b"bb", b"cc", b"dd"], [b"a", b"bbb", b"cc", b"d"]])
def test_select_frames_renumbers_what_is_kept(payloads: list[bytes]) -> None:
    msgs = [m.Message(p, 10 + i, (OTHER,) if i == 2 else ()) for i, p in enumerate(payloads)]
    frames, origin, stride = frames_from_messages(msgs, now_us=1)
    positions = frame_positions(frames, 0, len(frames), len(msgs), stride)
    kept, size = select_frames(frames, positions, [False, True, True, False])
    want, _origin, want_stride = frames_from_messages(msgs[1:3], now_us=1)
    assert kept == want and size == want_stride  # the same frames a send of just those would store
    assert frame_ids(kept, frame_positions(kept, 0, len(kept), 2, size)) == [11, 12]
    ms, sub = split_append_time(5_000_000, size)
    batch = assemble_batch(kept, record_count=2, base_offset=7, attributes=FORMAT_IGGY << 8,
                           base_timestamp=ms, max_timestamp=ms, producer_id=origin, base_sequence=sub)
    assert [(r.offset, r.value, r.message_id) for r in decode_records(batch)] == [
        (7, payloads[1], 11), (8, payloads[2], 12)]
