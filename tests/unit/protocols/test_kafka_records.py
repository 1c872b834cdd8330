"""What a Kafka produce may store and what a Kafka fetch sends (protocols/kafka/records.py), and
the response builder every handler uses (protocols/kafka/build.py)."""

from __future__ import annotations

import datetime
import struct

import pytest
from kio.schema.errors import ErrorCode

from bayou.errors import CorruptRecord, InvalidRecord
from bayou.protocols.kafka import codec
from bayou.protocols.kafka.build import build
from bayou.protocols.kafka.codes import ApiKey
from bayou.protocols.kafka.records import PlainBatches, check_produced, converted, for_kafka, plain_headers
from bayou.records.batch import (
    ATTR_FORMAT_SHIFT,
    assemble_batch,
    decode_header,
    decode_records,
    encode_batch,
    iter_batches,
    refresh_crc,
    set_base_offset,
)
from bayou.records.compression import Compression
from bayou.records.cursus import FORMAT_CURSUS, CursusMessage, encode_message
from bayou.records.model import Record


def recs(*values: bytes) -> list[Record]:
    return [Record(value=v, key=b"k", timestamp=100 + i, headers=(("h", v),)) for i, v in enumerate(values)]


@pytest.mark.parametrize("codec_", list(Compression))
def test_a_kafka_batch_is_accepted_in_every_codec(codec_: Compression) -> None:
    batch = encode_batch(recs(b"a", b"b"), compression=codec_)
    assert check_produced(batch).record_count == 2


def test_what_kafka_refuses() -> None:
    one = encode_batch(recs(b"a"))
    with pytest.raises(InvalidRecord, match="exactly one"):
        check_produced(one + one)
    transactional = bytearray(one)
    transactional[22] |= 0x10  # attributes' low byte: Kafka's isTransactional
    with pytest.raises(InvalidRecord, match="transactional"):
        check_produced(bytes(transactional))
    with pytest.raises(InvalidRecord, match="bits 8-11"):
        check_produced(encode_batch(recs(b"a"), payload_format=1))
    with_id = encode_batch([Record(value=b"x", timestamp=1, message_id=7)])
    with pytest.raises(InvalidRecord, match="attributes"):
        check_produced(with_id)
    with pytest.raises(CorruptRecord):
        check_produced(one[:-3])


def test_a_stored_kafka_batch_is_sent_as_stored() -> None:
    batch = bytearray(encode_batch(recs(b"a", b"b"), compression=Compression.ZSTD))
    set_base_offset(batch, 40)
    assert b"".join(for_kafka(bytes(batch), 40)) == bytes(batch)
    # the client skips what is before its offset
    assert b"".join(for_kafka(bytes(batch), 41)) == bytes(batch)


def test_stored_batches_are_views_of_the_read_bytes_a_run_one_piece() -> None:
    a = bytearray(encode_batch(recs(b"a", b"b")))
    set_base_offset(a, 0)
    b = bytearray(encode_batch(recs(b"c")))
    set_base_offset(b, 2)
    ids = encode_batch([Record(value=b"with-id", timestamp=9, message_id=42)], base_offset=3)
    c = bytearray(encode_batch(recs(b"d")))
    set_base_offset(c, 4)
    data = bytes(a + b) + ids + bytes(c)
    out = for_kafka(data, 0)
    assert [type(piece) for piece in out] == [memoryview, bytes, memoryview]
    assert bytes(out[0]) == bytes(a + b) and bytes(out[2]) == bytes(c)
    assert [r.offset for r in decode_records(out[1])] == [3]


def test_plain_batches_spare_the_walk_of_a_known_batch_and_only_that_batch() -> None:
    plain = PlainBatches()
    batch = bytearray(encode_batch(recs(b"a", b"b")))
    set_base_offset(batch, 7)
    for_kafka(bytes(batch), 7, *plain.of("t", 0))  # walked once, found plain: learned
    assert plain.knows("t", 0, decode_header(batch)) and len(plain) == 1
    assert not plain.knows("t", 1, decode_header(batch)) and not plain.knows("u", 0, decode_header(batch))
    # another batch at that offset later (the log truncated, the topic made again) has another
    # CRC: it is walked, and converted for its message id
    other = encode_batch([Record(value=b"with-id", timestamp=9, message_id=42)], base_offset=7)
    assert not plain.knows("t", 0, decode_header(other))
    out = b"".join(for_kafka(other, 7, *plain.of("t", 0)))
    assert [(r.offset, r.message_id) for r in decode_records(out)] == [(7, None)]
    assert out != other


def test_plain_batches_are_bounded_the_oldest_goes_first() -> None:
    plain = PlainBatches(capacity=3)
    for offset in range(5):
        plain.add("t", 0, offset, 100 + offset)
    plain.add("t", 0, 4, 104)  # known again: nothing goes
    assert len(plain) == 3
    known = [o for o in range(5) if plain.knows("t", 0, decode_header(_at(o, 100 + o)))]
    assert known == [2, 3, 4]


def _at(offset: int, crc: int) -> bytes:
    """A batch header claiming ``offset`` and ``crc`` (only the header is read)."""
    b = bytearray(encode_batch(recs(b"x")))
    set_base_offset(b, offset)
    struct.pack_into(">I", b, 17, crc)
    return bytes(b)


def test_other_formats_are_converted_with_their_offsets() -> None:
    body = bytearray()
    for i, payload in enumerate((b"one", b"two", b"three")):
        encode_message(CursusMessage(payload, offset=10 + i, key=b"ck"), body)
    cursus = assemble_batch(bytes(body), record_count=3, base_offset=10,
                            attributes=FORMAT_CURSUS << ATTR_FORMAT_SHIFT, base_timestamp=5, max_timestamp=5)
    ids = encode_batch([Record(value=b"with-id", timestamp=9, message_id=42)], base_offset=13)
    out = b"".join(for_kafka(cursus + ids, 11))
    got = [r for pos, _h in iter_batches(out) for r in decode_records(out, pos)]
    assert [(r.offset, r.value, r.key, r.message_id) for r in got] == [
        (11, b"two", b"ck", None), (12, b"three", b"ck", None), (13, b"with-id", None, None)]
    for pos, h in iter_batches(out):
        assert h.payload_format == 0 and h.compression == 0
        assert check_produced(out[pos:pos + h.size])  # what a Kafka client reads is a Kafka batch


def test_a_converted_batch_keeps_gaps_in_offsets() -> None:
    sparse = [Record(value=b"a", timestamp=1, offset=100), Record(value=b"b", timestamp=2, offset=105)]
    h = decode_header(encode_batch(sparse, base_offset=100))
    out = converted(sparse, h)
    assert [r.offset for r in decode_records(out)] == [100, 105]
    assert decode_header(out).last_offset_delta == 5


def test_iggy_headers_keep_their_names() -> None:
    assert plain_headers((("iggy.origin_ts", b"\0" * 8), ("iggy.h.trace", b"\x01abc"),
                          ("iggy.h.n", b"\x05\x01"), ("plain", b"v"))) == (
        ("trace", b"abc"), ("iggy.h.n", b"\x05\x01"), ("plain", b"v"))


def test_build_answers_every_version() -> None:
    for version in range(3, 13):
        schema = codec.response_schema(ApiKey.PRODUCE, version)
        body = build(schema, responses=[{"name": "t", "partition_responses": [
            {"index": 0, "error_code": ErrorCode.corrupt_message, "base_offset": -1}]}], throttle_time=5)
        assert body.throttle_time == datetime.timedelta(milliseconds=5)
        frame = codec.encode_response(codec.RequestHeader(0, version, 9, None, False, 0), body)
        _cid, back = codec.decode_response(frame[4:], ApiKey.PRODUCE, version)
        assert back.responses[0].partition_responses[0].error_code == ErrorCode.corrupt_message


def test_a_control_batch_from_a_client_is_refused_and_a_transactional_one_needs_its_producer() -> None:
    marker = bytearray(encode_batch(recs(b"a"), producer_id=7, producer_epoch=0, base_sequence=0))
    marker[22] |= 0x30  # isTransactional | isControl
    refresh_crc(marker)
    with pytest.raises(InvalidRecord, match="control"):
        check_produced(bytes(marker))
    txn = bytearray(encode_batch(recs(b"a"), producer_id=7, producer_epoch=0, base_sequence=0))
    txn[22] |= 0x10
    refresh_crc(txn)
    h = check_produced(bytes(txn))
    assert h.transactional and not h.sparse and not h.control
