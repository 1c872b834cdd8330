"""The payload formats a batch's records section may hold, in one table (attribute bits 8-11).

bayou stores what a producer sent in its own protocol's layout and converts once when another
protocol reads it (shared/STYLE.md). Each format here says how to read its records section
(already decompressed): ``decode`` to the common ``Record`` model (the conversion every other
protocol starts from), ``message_ids`` (what message de-duplication rebuilds from) and
``producer_sequences`` (the idempotent producer state rebuilt from the log). A format without
one of them stores no such thing. A new format is one module and one row of ``FORMATS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bayou.errors import CorruptRecord
from bayou.records.cursus import (
    FORMAT_CURSUS,
    decode_message,
    decode_messages,
    message_starts,
    message_to_record,
)
from bayou.records.iggy import FORMAT_IGGY, decode_frames, frame_ids, frame_positions, frame_stride
from bayou.records.model import Record
from bayou.records.tank import FORMAT_TANK, decode_bundle_records
from bayou.records.v2 import decode_v2, v2_message_ids

if TYPE_CHECKING:
    from bayou.records.batch import BatchHeader, Buffer

FORMAT_RECORDS = 0  # records/v2.py: Kafka's v2 records (what the V1 protocol and the SDK store)

ProducerSequence = tuple[bytes, int, int]  # (producer id, epoch, sequence) of an idempotent producer

Decode = Callable[[bytes, "BatchHeader"], list[Record]]
MessageIds = Callable[["Buffer", "BatchHeader"], list[tuple[int, int]]]
ProducerSequences = Callable[["Buffer", "BatchHeader"], list[tuple[int, ProducerSequence]]]


@dataclass(frozen=True, slots=True)
class PayloadFormat:
    """One payload format: each reader takes a decompressed records section and its header."""

    code: int
    name: str
    decode: Decode
    message_ids: MessageIds | None = None  # (offset, u128 id) of the records that carry one
    producer_sequences: ProducerSequences | None = None  # (offset, sequence) of idempotent sends


def _cursus_records(data: bytes, h: BatchHeader) -> list[Record]:
    msgs = decode_messages(data, 0, h.record_count)
    return [message_to_record(m, h.base_offset + i, h.base_timestamp) for i, m in enumerate(msgs)]


def _cursus_sequences(data: Buffer, h: BatchHeader) -> list[tuple[int, ProducerSequence]]:
    out: list[tuple[int, ProducerSequence]] = []
    for i, s in enumerate(message_starts(data, 0, h.record_count, len(data))[:-1]):
        m, _ = decode_message(data, s)
        if m.producer_id and m.seq_num:
            out.append((h.base_offset + i, (m.producer_id, m.epoch, m.seq_num)))
    return out


def kafka_producer(producer_id: int) -> bytes:
    """The producer key of a Kafka idempotent producer in the producer table (Cursus keys are
    the client's own string ids; a Kafka id is a number, kept apart by the prefix)."""
    return b"kafka:%d" % producer_id


def _v2_sequences(data: Buffer, h: BatchHeader) -> list[tuple[int, ProducerSequence]]:
    """A Kafka idempotent producer's batch: its producer id, epoch and base sequence are in the
    header. Sequences are stored 1-based as the table counts them (Kafka's start at 0)."""
    if h.producer_id < 0 or h.base_sequence < 0:
        return []
    pid = kafka_producer(h.producer_id)
    return [(h.base_offset + i, (pid, h.producer_epoch, h.base_sequence + i + 1))
            for i in range(h.record_count)]


def _iggy_records(data: bytes, h: BatchHeader) -> list[Record]:
    return decode_frames(data, 0, len(data), h.record_count, base_offset=h.base_offset,
                         append_ms=h.base_timestamp, origin_base_us=h.producer_id)


def _iggy_ids(data: Buffer, h: BatchHeader) -> list[tuple[int, int]]:
    stride = frame_stride(h.base_sequence) if not h.compression else 0
    ids = frame_ids(data, frame_positions(data, 0, len(data), h.record_count, stride))
    return [(h.base_offset + i, mid) for i, mid in enumerate(ids) if mid]


def _tank_records(data: bytes, h: BatchHeader) -> list[Record]:
    return decode_bundle_records(data, h.base_offset)


FORMATS: dict[int, PayloadFormat] = {f.code: f for f in (
    PayloadFormat(FORMAT_RECORDS, "records", decode_v2, message_ids=v2_message_ids,
                  producer_sequences=_v2_sequences),
    PayloadFormat(FORMAT_CURSUS, "cursus", _cursus_records, producer_sequences=_cursus_sequences),
    PayloadFormat(FORMAT_IGGY, "iggy", _iggy_records, message_ids=_iggy_ids),
    PayloadFormat(FORMAT_TANK, "tank", _tank_records),
)}


def payload_format(code: int) -> PayloadFormat:
    """The format of ``code``; CorruptRecord for one bayou does not know."""
    fmt = FORMATS.get(code)
    if fmt is None:
        raise CorruptRecord(f"unknown payload format {code}")
    return fmt
