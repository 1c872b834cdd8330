"""Cursus's produce paths: a binary batch frame and PUBLISH. Batches are stored in their own
format (records/cursus.py), the messages' bytes as sent, so CONSUME and STREAM serve the stored
bytes; on an idempotent topic the broker's producer rules decide which messages are kept."""

from __future__ import annotations

import time
from collections.abc import Callable

from bayou.broker import Acks
from bayou.errors import OutOfOrderSequence, ProducerFenced
from bayou.protocols.cursus import batch as cb
from bayou.protocols.cursus import replies
from bayou.protocols.cursus import requests as rq
from bayou.records.batch import HEADER_SIZE, assemble_batch
from bayou.records.cursus import FORMAT_CURSUS, decode_message, encode_plain_message, stamp_offsets
from bayou.records.hashing import fnv1a_32
from bayou.server.base import Connection
from bayou.server.cursus.context import ConnState, Context, err, refuse
from bayou.server.workers import parsed


def _producers(body: bytes | bytearray, starts: list[int]) -> list[tuple[bytes, int, int]]:
    """(producer id, epoch, sequence) of each message ``starts`` points at."""
    out = []
    for s in starts[:-1]:
        m, _ = decode_message(body, s)
        out.append((m.producer_id, m.epoch, m.seq_num))
    return out


class ProduceHandlers:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.broker = ctx.broker

    def _acks(self, level: rq.AckLevel) -> Acks:
        # A standalone Cursus broker treats -1/all exactly like 1 (vector 04): on a single node the
        # V1 protocol's follower reports are the only "replicas", and they are not Cursus's. In
        # cluster mode -1/all waits for the in-sync replicas (or answers the timeout error).
        if level is rq.AckLevel.NONE:
            return Acks.NONE
        if level is rq.AckLevel.ALL and self.broker.clustered:
            return Acks.ALL
        return Acks.LEADER

    async def _append_messages(self, topic: str, partition: int, body: bytes | bytearray,
                               starts: list[int], acks: Acks) -> int:
        """Store message records ``body[starts[0]:starts[-1]]``; returns the last offset stored.
        On an idempotent topic only the messages the producer rules keep are stored (the broker's
        idempotence, broker/idempotence.py)."""
        if self.broker.topic_flag(topic, "idempotent"):
            # a message decoded each: up to 100,000 (0.45 s), off the loop past OFF_LOOP_BYTES
            producers = await parsed(len(body), _producers, body, starts)

            def build(keep: list[bool]) -> tuple[bytes, Callable[[bytearray, int], None]]:
                if all(keep):
                    return _message_batch(body, starts)
                kept = [(starts[i], starts[i + 1]) for i, k in enumerate(keep) if k]
                rel = [0]
                for a, b in kept:
                    rel.append(rel[-1] + (b - a))
                return _message_batch(b"".join(bytes(body[a:b]) for a, b in kept), rel)

            result = await self.broker.produce_idempotent(topic, partition, producers, build, acks)
        else:
            batch, stamp = _message_batch(body, starts)
            result = await self.broker.produce(topic, partition, batch, acks, stamp=stamp, create=False)
        # its own last offset: the log end may already hold later appends (other connections',
        # or this one's pipelined requests)
        return result.last_offset

    async def produce_batch(self, body: bytes, head: cb.BatchHead) -> bytes:
        level = rq.parse_acks(head.acks)
        if level is None:
            raise err("invalid_acks", ("value", head.acks))
        acks = self._acks(level)
        starts = cb.message_starts(body, head)
        if head.count == 0:
            raise err("broker_error", ("reason", "empty batch messages"))
        await self.ctx.topic_exists(head.topic)
        n = self.broker.partition_count(head.topic)
        if not 0 <= head.partition < n:
            raise err("partition_not_found", ("partition", head.partition))
        first, _ = decode_message(body, starts[0])
        last, _ = decode_message(body, starts[-2]) if head.count > 1 else (first, 0)
        try:
            last_offset = await self._append_messages(head.topic, head.partition, body, starts, acks)
        except (ProducerFenced, OutOfOrderSequence) as exc:
            return replies.json_ack(0, last.epoch, last.producer_id.decode(errors="replace"),
                                    first.seq_num, last.seq_num, error=exc.message)
        # acks=0 gets the JSON ack too (cursus.md decision 1): clients parse every reply as JSON.
        return replies.json_ack(max(last_offset, 0), last.epoch, last.producer_id.decode(errors="replace"),
                                first.seq_num, last.seq_num)

    async def publish(self, req: rq.Publish, state: ConnState, conn: Connection | None) -> bytes:
        topic = req.topic
        acks = self._acks(req.acks)
        await self.ctx.topic_exists(topic)
        n = self.broker.partition_count(topic)
        refuse(req.invalid)
        if req.partition is not None:
            p = req.partition
            if not 0 <= p < n:
                raise err("partition_not_found", ("partition", p))
        elif req.key and self.broker.topic_config(topic).get("cursus.partitioner") != "round_robin":
            p = fnv1a_32(req.key.encode()) % n
        else:
            p = self.broker.next_round_robin(topic, n)
        out = encode_plain_message(req.message.encode(), req.seq_num, req.producer_id.encode(),
                                   req.key.encode(), req.epoch)
        last = await self._append_messages(topic, p, out, [0, len(out)], acks)
        return replies.json_ack(last, req.epoch, req.producer_id, req.seq_num, req.seq_num)


def _message_batch(body: bytes | bytearray, starts: list[int]
                   ) -> tuple[bytes, Callable[[bytearray, int], None]]:
    """The stored batch of message records ``body[starts[0]:starts[-1]]`` and the stamp that
    writes their offsets once the broker assigns them."""
    now = int(time.time() * 1000)
    batch = assemble_batch(bytes(body[starts[0]:starts[-1]]), record_count=len(starts) - 1, base_offset=0,
                           attributes=FORMAT_CURSUS << 8, base_timestamp=now, max_timestamp=now,
                           producer_id=starts[-2] - starts[0])  # LAST_MESSAGE_AT, records/cursus.py
    shift = HEADER_SIZE - starts[0]
    positions = [s + shift for s in starts]

    def stamp(buf: bytearray, base: int) -> None:
        stamp_offsets(buf, positions, base)

    return batch, stamp
