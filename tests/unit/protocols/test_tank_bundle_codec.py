"""TANK bundles, messages and chunks (tank.md 3): header parsing for every flag byte, sparse seq
rules, UseLastSpecifiedTS, Snappy, the client's compression rule and chunk iteration."""

from __future__ import annotations

import itertools
import struct

import cramjam
import pytest

from bayou.protocols.tank.bundles import (
    COMPRESS_OVER_BYTES,
    COMPRESS_OVER_COUNT,
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
from bayou.protocols.tank.codes import BundleError, ProduceError, TankError
from bayou.protocols.tank.wire import encode_varint

U64 = struct.Struct("<Q")
FIRST, DELTA, BIG_COUNT = 1000, 5, 20


def _msg(value: bytes = b"v", ts: int = 7, key: bytes | None = None, seq: int = 0) -> TankMessage:
    return TankMessage(seq, ts, key, value)


def _numbered(msgs: list[TankMessage], base: int) -> list[TankMessage]:
    return [TankMessage(base + i, x.timestamp, x.key, x.value) for i, x in enumerate(msgs)]


def _bundle_for_flags(flags: int) -> tuple[bytes, int]:
    """A bundle whose header starts with ``flags`` and whose message set is big enough; its count."""
    count = (flags >> 2) & 0x0F
    out = bytearray([flags])
    if count == 0:
        count = BIG_COUNT
        out += encode_varint(count)
    if flags & 0x40:
        out += U64.pack(FIRST)
        if count != 1:
            out += encode_varint(DELTA)
    if flags & 0x03 == 1:
        out += encode_varint(2 * count) + b"\x00" * 4
    else:
        out += b"\x00" * (2 * count)
    return bytes(out), count


# -- the header ---------------------------------------------------------------------------------


@pytest.mark.parametrize("flags", range(256))
def test_header_for_every_flag_byte(flags: int) -> None:
    bundle, count = _bundle_for_flags(flags)
    codec = flags & 0x03
    if flags & 0x80 or codec > 1:
        with pytest.raises(BundleError) as err:
            decode_bundle_header(bundle)
        assert not err.value.close
        assert err.value.produce_error == ProduceError.INVALID_SEQ_NUMS
        return
    h = decode_bundle_header(bundle)
    sparse = bool(flags & 0x40)
    header_size = 1 + (0 if (flags >> 2) & 0x0F else 1) + (8 + (count != 1) if sparse else 0)
    assert h == BundleHeader(codec, count, sparse, FIRST if sparse else None,
                             (FIRST + (DELTA + 1 if count != 1 else 0)) if sparse else None, header_size)
    assert h.seqs(50) == ((h.first_seq, h.last_seq) if sparse else (50, 50 + count - 1))
    # every proper prefix of the header is refused, never read past
    for cut in range(header_size):
        with pytest.raises(BundleError):
            decode_bundle_header(bundle[:cut])
    # the same header parsed in place, inside a larger buffer
    assert decode_bundle_header(b"junk" + bundle + b"more", 4, 4 + len(bundle)) == h


def test_count_zero_is_refused() -> None:
    with pytest.raises(BundleError, match="count 0"):
        decode_bundle_header(b"\x00\x00" + b"\x00" * 10)


def test_message_set_too_small_for_its_count() -> None:
    decode_bundle_header(b"\x0c" + b"\x00" * 6)
    with pytest.raises(BundleError, match="cannot hold"):
        decode_bundle_header(b"\x0c" + b"\x00" * 5)
    with pytest.raises(BundleError):
        decode_bundle_header(b"\x00\xff\xff\xff\xff\x0f" + b"\x00" * 64)  # four billion messages
    with pytest.raises(BundleError):
        decode_bundle_header(b"\x05" + encode_varint(1))  # Snappy preamble says 1 byte
    with pytest.raises(BundleError):
        decode_bundle_header(b"\x05")
    with pytest.raises(BundleError):
        decode_bundle_header(b"\x05\xff\xff\xff\xff\xff")  # bad Snappy preamble


def test_sparse_range_past_u64() -> None:
    ok = b"\x48" + U64.pack(2**64 - 3) + encode_varint(0) + b"\x00" * 4
    assert decode_bundle_header(ok).last_seq == 2**64 - 2
    last = b"\x48" + U64.pack(2**64 - 2) + encode_varint(0) + b"\x00" * 4
    assert decode_bundle_header(last).last_seq == 2**64 - 1
    with pytest.raises(BundleError, match="past 2"):
        decode_bundle_header(b"\x48" + U64.pack(2**64 - 1) + encode_varint(0) + b"\x00" * 4)


def test_sparse_varint_longer_than_five_bytes() -> None:
    with pytest.raises(BundleError):
        decode_bundle_header(b"\x48" + U64.pack(1) + b"\xff" * 5 + b"\x00" * 4)


def test_bundle_error_is_the_protocol_error() -> None:
    assert issubclass(BundleError, TankError)


# -- messages -----------------------------------------------------------------------------------


def test_three_messages_use_last_timestamp() -> None:
    msgs = [_msg(b"one", 1795316756750), _msg(b"two", 1795316756750), _msg(b"three", 1795316756750)]
    bundle = encode_bundle(msgs)
    assert bundle.hex() == "0c000eb13701a2010000036f6e65020374776f02057468726565"
    assert decode_bundle(bundle, 2) == _numbered(msgs, 2)


def test_changing_timestamps_are_written_again() -> None:
    msgs = [_msg(ts=1), _msg(ts=1), _msg(ts=2), _msg(ts=1)]
    bundle = encode_bundle(msgs)
    assert [b for b in bundle[1:] if b in (0, 2)][:1] == [0]
    decoded = decode_bundle(bundle, 10)
    assert [m.timestamp for m in decoded] == [1, 1, 2, 1]
    assert [m.seq for m in decoded] == [10, 11, 12, 13]


def test_first_message_reusing_a_timestamp_gets_zero() -> None:
    bundle = b"\x04" + b"\x02" + encode_varint(2) + b"hi"
    assert decode_bundle(bundle, 1) == [TankMessage(1, 0, None, b"hi")]


def test_keys() -> None:
    msgs = [_msg(b"v1", 5, b"k1"), _msg(b"v2", 5, b"k2"), _msg(b"v3", 5, b""), _msg(b"v4", 5, None)]
    bundle = encode_bundle(msgs)
    assert bundle[:1] == b"\x10"
    assert bundle[1] == 0x01 and bundle[1 + 1 + 8] == 2  # HaveKey, ts, key str8
    decoded = decode_bundle(bundle, 1)
    assert [m.key for m in decoded] == [b"k1", b"k2", b"", None]
    with pytest.raises(ValueError):
        encode_bundle([_msg(key=b"k" * 256)])
    assert decode_bundle(encode_bundle([_msg(key=b"k" * 255)]), 0)[0].key == b"k" * 255


def test_unknown_message_flag_bits_are_ignored() -> None:
    bundle = b"\x04" + b"\xf8" + U64.pack(3) + encode_varint(1) + b"x"
    assert decode_bundle(bundle, 9) == [TankMessage(9, 3, None, b"x")]


def test_varint_count_of_16_messages() -> None:
    msgs = [_msg(bytes([97 + i]), 1795317039726) for i in range(16)]
    bundle = encode_bundle(msgs)
    assert bundle[:2] == b"\x00\x10"
    assert [m.value for m in decode_bundle(bundle, 35)] == [m.value for m in msgs]
    assert encode_bundle(msgs[:15])[0] == 15 << 2


@pytest.mark.parametrize("bad", [
    b"\x08" + b"\x00" + U64.pack(1) + b"\x01x",  # second message missing
    b"\x04" + b"\x00" + U64.pack(1) + b"\x01x" + b"\x00",  # trailing byte
    b"\x04" + b"\x00" + U64.pack(1)[:5] + b"\x01x",  # timestamp cut
    b"\x04" + b"\x01" + U64.pack(1) + b"\x05ab" + b"\x01x",  # key past the end
    b"\x04" + b"\x00" + U64.pack(1) + b"\x05xy",  # content past the end
    b"\x04" + b"\x00" + U64.pack(1) + b"\xff\xff\xff\xff\xff",  # over-long content length
])
def test_malformed_message_sets(bad: bytes) -> None:
    with pytest.raises(BundleError):
        decode_bundle(bad, 1)


def test_non_sparse_seq_past_u64() -> None:
    bundle = encode_bundle([_msg(), _msg()])
    assert decode_bundle(bundle, 2**64 - 2)[-1].seq == 2**64 - 1
    with pytest.raises(BundleError):
        decode_bundle(bundle, 2**64 - 1)


# -- sparse bundles (tank.md 3.4) ---------------------------------------------------------------


def _sparse(seqs: list[int], ts: int = 1795316792215) -> list[TankMessage]:
    return [TankMessage(s, ts, None, b"s%d" % s) for s in seqs]


def test_sparse_consecutive_is_tank_cli_bytes() -> None:
    bundle = encode_bundle(_sparse([100, 101, 102, 103]), sparse=True)
    assert bundle[:10] == b"\x50" + U64.pack(100) + b"\x02"
    assert [m.seq for m in decode_bundle(bundle, 0)] == [100, 101, 102, 103]
    # message flags: the first carries its timestamp (0); the middle ones SeqNumPrevPlusOne |
    # UseLastSpecifiedTS (6); the last only 2, its seq comes from the header
    assert [bundle[10], bundle[24], bundle[30], bundle[36]] == [0, 6, 6, 2]
    assert len(bundle) == 42


def test_sparse_gaps_and_single() -> None:
    gaps = encode_bundle(_sparse([200, 203, 206, 209]), sparse=True)
    assert gaps[:10] == b"\x50" + U64.pack(200) + b"\x08"
    assert [m.seq for m in decode_bundle(gaps, 0)] == [200, 203, 206, 209]
    single = encode_bundle(_sparse([300]), sparse=True)
    assert single[:9] == b"\x44" + U64.pack(300) and decode_bundle_header(single).header_size == 9
    assert [m.seq for m in decode_bundle(single, 12345)] == [300]


def test_sparse_mixed_deltas_and_big_counts() -> None:
    seqs = [10, 11, 20, 21, 22, 1000, 1001, 5000]
    for s in (seqs, [7, 8], [7, 9], list(range(50, 90, 2))):
        bundle = encode_bundle(_sparse(s), sparse=True)
        assert [m.seq for m in decode_bundle(bundle, 0)] == s
        assert decode_bundle_header(bundle).seqs(0) == (s[0], s[-1])
    compressed = encode_bundle(_sparse(seqs), sparse=True, compress=True)
    assert compressed[0] == 0x41 | 8 << 2
    assert [m.seq for m in decode_bundle(compressed, 0)] == seqs


def test_sparse_rules_in_order() -> None:
    """Rule 1 (SeqNumPrevPlusOne) wins over "first" and "last" (tank.md 3.4)."""
    header = b"\x4c" + U64.pack(100) + encode_varint(9)  # 3 messages, 100..110
    msg = lambda flags, extra=b"": bytes([flags]) + extra + U64.pack(1) + b"\x01x"  # noqa: E731
    plain = header + msg(0) + msg(0, encode_varint(4)) + msg(0)
    assert [m.seq for m in decode_bundle(plain, 0)] == [100, 105, 110]
    prev_plus_one_everywhere = header + msg(4) + msg(4) + msg(4)
    assert [m.seq for m in decode_bundle(prev_plus_one_everywhere, 0)] == [100, 101, 102]


def test_non_sparse_bundles_ignore_bit2() -> None:
    bundle = b"\x08" + bytes([4]) + U64.pack(1) + b"\x01a" + bytes([4]) + U64.pack(1) + b"\x01b"
    assert [m.seq for m in decode_bundle(bundle, 40)] == [40, 41]


def test_sparse_encode_errors() -> None:
    with pytest.raises(ValueError):
        encode_bundle(_sparse([5, 5]), sparse=True)
    with pytest.raises(ValueError):
        encode_bundle(_sparse([5, 4]), sparse=True)
    with pytest.raises(ValueError):
        encode_bundle(_sparse([0, 2**33]), sparse=True)
    with pytest.raises(ValueError):
        encode_bundle([])


# -- Snappy (tank.md 3.3) -----------------------------------------------------------------------


def test_compression_rule() -> None:
    assert not client_would_compress([_msg(b"x")] * COMPRESS_OVER_COUNT)
    assert client_would_compress([_msg(b"")] * (COMPRESS_OVER_COUNT + 1))
    assert not client_would_compress([_msg(b"x" * 512), _msg(b"y" * 512)])
    assert client_would_compress([_msg(b"x" * 512), _msg(b"y" * 513)])
    assert client_would_compress([_msg(b"x" * 512, key=b"k"), _msg(b"y" * 512)])
    assert not client_would_compress([_msg(b"x" * COMPRESS_OVER_BYTES)])
    big = [_msg(b"m%02d-" % i + b"abcdefghij" * 10, 1795316757669) for i in range(20)]
    bundle = encode_bundle(big)
    assert bundle[:2] == b"\x01\x14"
    assert bytes(cramjam.snappy.decompress_raw(bundle[2:])) == encode_bundle(big, compress=False)[2:]
    assert decode_bundle(bundle, 7) == _numbered(big, 7)


def test_forced_compression_either_way() -> None:
    small = [_msg(b"tiny")]
    assert encode_bundle(small, compress=True)[0] == 0x05
    assert decode_bundle(encode_bundle(small, compress=True), 3) == [TankMessage(3, 7, None, b"tiny")]
    big = [_msg(b"x" * 2000)]
    assert encode_bundle(big, compress=False)[0] == 0x04


def test_snappy_is_bounded_and_checked() -> None:
    big = encode_bundle([_msg(b"z" * 100_000)], compress=True)
    assert len(big) < 10_000
    assert decode_bundle(big, 1, max_uncompressed=100_020)[0].value == b"z" * 100_000
    with pytest.raises(BundleError, match="inflates"):
        decode_bundle(big, 1, max_uncompressed=50_000)
    corrupt = big[:1] + big[1:6] + b"\xff" * (len(big) - 6)
    with pytest.raises(BundleError):
        decode_bundle(corrupt, 1)
    with pytest.raises(BundleError):
        decode_bundle(big[:-3], 1)


# -- chunks (tank.md 3.6) -----------------------------------------------------------------------


def _chunk() -> tuple[bytes, list[bytes]]:
    bundles = [
        encode_bundle([_msg(b"a"), _msg(b"b")]),  # base .. base+1
        encode_bundle(_sparse([100, 103]), sparse=True),
        encode_bundle([_msg(b"c")]),  # 104
        encode_bundle([_msg(b"x" * 300)] * 3, compress=True),  # 105..107
        encode_bundle(_sparse([300]), sparse=True),
        encode_bundle([_msg(b"d" * 200)]),  # 301, a 2-byte record length
    ]
    return b"".join(encode_chunk_record(b) for b in bundles), bundles


def test_chunk_record() -> None:
    assert encode_chunk_record(b"\x04abc") == b"\x04\x04abc"
    assert encode_chunk_record(b"x" * 200)[:2] == b"\xc8\x01"


def test_iter_chunk_seqs() -> None:
    chunk, bundles = _chunk()
    got = list(iter_chunk(chunk, 1, sparse_first=False))
    assert [(b.first_seq, b.last_seq) for b in got] == [(1, 2), (100, 103), (104, 104), (105, 107),
                                                        (300, 300), (301, 301)]
    assert [b.bundle for b in got] == bundles
    assert got[0].offset == 0 and got[-1].end == len(chunk)
    assert all(a.end == b.offset for a, b in itertools.pairwise(got))
    assert [m.seq for m in decode_chunk(chunk, 1, sparse_first=False)] == [1, 2, 100, 103, 104, 105, 106, 107,
                                                                          300, 301]


def test_iter_chunk_sparse_first() -> None:
    chunk, bundles = _chunk()
    tail = chunk[len(encode_chunk_record(bundles[0])) :]
    assert [b.first_seq for b in iter_chunk(tail, 0, sparse_first=True)] == [100, 104, 105, 300, 301]
    with pytest.raises(BundleError, match="0xfe"):
        list(iter_chunk(chunk, 1, sparse_first=True))


def test_truncated_last_record_is_tolerated_at_every_cut() -> None:
    chunk, _ = _chunk()
    whole = list(iter_chunk(chunk, 1, sparse_first=False))
    for cut in range(len(chunk) + 1):
        got = list(iter_chunk(chunk[:cut], 1, sparse_first=False))
        assert got == [b for b in whole if b.end <= cut]


def test_empty_chunk_and_bad_records() -> None:
    assert list(iter_chunk(b"", 5, sparse_first=False)) == []
    with pytest.raises(BundleError):
        list(iter_chunk(b"\x00", 1, sparse_first=False))  # a zero-length bundle
    with pytest.raises(BundleError):
        list(iter_chunk(b"\xff" * 5 + b"\x00" * 10, 1, sparse_first=False))  # over-long record length
    with pytest.raises(BundleError):
        list(iter_chunk(encode_chunk_record(b"\x84" + b"\x00" * 4), 1, sparse_first=False))  # bit 7


def test_chunk_bundle_is_a_value() -> None:
    chunk, _ = _chunk()
    first = next(iter_chunk(chunk, 1, sparse_first=False))
    assert isinstance(first, ChunkBundle) and first.header.codec == Codec.NONE and first.header.count == 2
