"""The record and batch model shared by disk and wire: batches, varints, CRC32C, compression."""

from bayou.records.batch import (
    HEADER_SIZE,
    BatchHeader,
    Record,
    batch_crc,
    decode_header,
    decode_records,
    encode_batch,
    iter_batches,
    set_base_offset,
    verify_batch,
)
from bayou.records.compression import Compression
from bayou.records.model import Headers

__all__ = [
    "HEADER_SIZE",
    "BatchHeader",
    "Compression",
    "Headers",
    "Record",
    "batch_crc",
    "decode_header",
    "decode_records",
    "encode_batch",
    "iter_batches",
    "set_base_offset",
    "verify_batch",
]
