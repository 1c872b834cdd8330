"""The payload-format table (records/formats.py): one row per format, each read the same way by
decode_records, message_ids and producer_sequences."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bayou.errors import CorruptRecord
from bayou.protocols.iggy.messages import Message
from bayou.protocols.iggy.stored import frames_from_messages
from bayou.protocols.tank.bundles import TankMessage, encode_bundle, encode_chunk_record
from bayou.records.batch import (
    assemble_batch,
    decode_header,
    decode_records,
    encode_batch,
    message_ids,
    producer_sequences,
)
from bayou.records.compression import Compression
from bayou.records.cursus import FORMAT_CURSUS, CursusMessage, encode_message, encode_plain_message
from bayou.records.formats import FORMAT_RECORDS, FORMATS, payload_format
from bayou.records.iggy import FORMAT_IGGY
from bayou.records.model import Record
from bayou.records.tank import FORMAT_TANK


def cursus_batch(msgs: list[CursusMessage], base_offset: int = 0) -> bytes:
    body = bytearray()
    for m in msgs:
        encode_message(m, body)
    return assemble_batch(bytes(body), record_count=len(msgs), base_offset=base_offset,
                          attributes=FORMAT_CURSUS << 8, base_timestamp=5, max_timestamp=5)


def iggy_batch(ids: list[int], base_offset: int = 0) -> bytes:
    frames, origin, _stride = frames_from_messages([Message(b"v%d" % i, i) for i in ids], now_us=1)
    return assemble_batch(frames, record_count=len(ids), base_offset=base_offset,
                          attributes=FORMAT_IGGY << 8, base_timestamp=1, max_timestamp=1, producer_id=origin)


def tank_batch(values: list[bytes], base_offset: int = 0) -> bytes:
    bundle = encode_bundle([TankMessage(base_offset + 1 + i, 7, None, v) for i, v in enumerate(values)],
                           compress=False)
    return assemble_batch(encode_chunk_record(bundle), record_count=len(values), base_offset=base_offset,
                          attributes=FORMAT_TANK << 8, base_timestamp=7, max_timestamp=7)


def test_one_row_per_format_bayou_stores() -> None:
    assert sorted(FORMATS) == [FORMAT_RECORDS, FORMAT_CURSUS, FORMAT_IGGY, FORMAT_TANK]
    assert all(f.code == code for code, f in FORMATS.items())
    assert len({f.name for f in FORMATS.values()}) == len(FORMATS)
    with pytest.raises(CorruptRecord, match="unknown payload format 9"):
        payload_format(9)


def test_an_unknown_format_is_damage_to_decode_and_holds_no_ids() -> None:
    batch = assemble_batch(b"xx", record_count=1, base_offset=0, attributes=9 << 8, base_timestamp=0,
                           max_timestamp=0)
    with pytest.raises(CorruptRecord, match="unknown payload format 9"):
        decode_records(batch)
    assert message_ids(batch) == [] and producer_sequences(batch) == []


def test_every_format_decodes_to_records_at_their_offsets() -> None:
    batches = {
        FORMAT_RECORDS: encode_batch([Record(b"a", timestamp=3), Record(b"b", timestamp=3)], base_offset=10),
        FORMAT_CURSUS: cursus_batch([CursusMessage(b"a"), CursusMessage(b"b")], base_offset=10),
        FORMAT_IGGY: iggy_batch([1, 2], base_offset=10),
        FORMAT_TANK: tank_batch([b"a", b"b"], base_offset=10),
    }
    for code, batch in batches.items():
        assert decode_header(batch).payload_format == code
        records = decode_records(batch)
        assert [r.offset for r in records] == [10, 11], code


def test_ids_and_producer_sequences_come_from_the_formats_that_carry_them() -> None:
    cursus = cursus_batch([CursusMessage(b"a", seq_num=1, producer_id=b"p", epoch=2), CursusMessage(b"b"),
                           CursusMessage(b"c", seq_num=2, producer_id=b"p", epoch=2)], base_offset=4)
    assert producer_sequences(cursus) == [(4, (b"p", 2, 1)), (6, (b"p", 2, 2))]
    assert message_ids(cursus) == []
    iggy = iggy_batch([7, 9])
    assert message_ids(iggy) == [(0, 7), (1, 9)] and producer_sequences(iggy) == []
    records = encode_batch([Record(b"a", message_id=5), Record(b"b")], compression=Compression.GZIP)
    assert message_ids(records) == [(0, 5)]
    assert message_ids(tank_batch([b"a"])) == [] and producer_sequences(tank_batch([b"a"])) == []


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.integers(0, (1 << 64) - 1), st.binary(max_size=70), st.binary(max_size=70),
       st.integers(-(1 << 63), (1 << 63) - 1))
def test_a_plain_cursus_message_encodes_as_encode_message_does(payload: bytes, seq: int, producer: bytes,
                                                                key: bytes, epoch: int) -> None:
    """PUBLISH's one-join encoder is encode_message of the same message (offset 0, no event fields)."""
    out = bytearray()
    encode_message(CursusMessage(payload, 0, seq, producer, key, epoch), out)
    assert encode_plain_message(payload, seq, producer, key, epoch) == bytes(out)
