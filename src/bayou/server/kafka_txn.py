"""Kafka's transaction APIs on the broker's transaction coordinator (broker/transactions.py;
server/kafka.py dispatches here): AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn.
InitProducerId with a transactional id, transactional Produce and read_committed Fetch are in
server/kafka.py with their non-transactional forms.

In cluster mode each transactional id has a coordinator, named by FindCoordinator (key type 1)
as a group of that name would be: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn
anywhere else get NOT_COORDINATOR (COORDINATOR_NOT_AVAILABLE while no broker is known), and the
client asks again; TxnOffsetCommit goes to the group's coordinator, as Kafka's does. The state
they change is shared through ZooKeeper (broker/transactions.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from bayou.broker import Pace
from bayou.broker.groups.coordinator import RTES_POLICY
from bayou.errors import BayouError, StorageError
from bayou.protocols.kafka.codes import ApiKey
from bayou.server.kafka_context import Fields, Handler, Request, code_of, not_coordinator

if TYPE_CHECKING:
    from bayou.server.kafka import KafkaService


def txn_code(exc: BayouError) -> ErrorCode:
    """A transaction API's error code for ``exc``: Kafka's, but COORDINATOR_NOT_AVAILABLE for a
    state that could not be read or written now (ZooKeeper unreachable in cluster mode), which
    clients retry (after looking the coordinator up again); KAFKA_STORAGE_ERROR would end an
    EndTxn for good."""
    if isinstance(exc, StorageError):
        return ErrorCode.coordinator_not_available
    return code_of(exc)


async def add_partitions_to_txn(svc: KafkaService, req: Request, body: Any) -> Fields:
    """v0-v3: one transaction. Every partition gets the one outcome (Kafka adds all or none);
    a partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION and the others
    OPERATION_NOT_ATTEMPTED."""
    topics = body.v3_and_below_topics
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    code = not_coordinator(svc.broker, req, body.v3_and_below_transactional_id)
    failed: set[tuple[str, int]] = set()
    if code is None:
        missing = []
        pace = Pace()
        for name, p in wanted:
            await pace()
            if not await svc.broker.has_topic(name) or not 0 <= p < svc.broker.partition_count(name):
                missing.append((name, p))
        if missing:
            failed, code = set(missing), ErrorCode.unknown_topic_or_partition
        else:
            try:
                await svc.broker.txn_add_partitions(body.v3_and_below_transactional_id,
                                                    body.v3_and_below_producer_id,
                                                    body.v3_and_below_producer_epoch, wanted)
                code = ErrorCode.none
            except BayouError as exc:
                code = txn_code(exc)

    def outcome(name: str, p: int) -> ErrorCode:
        if failed and (name, p) not in failed:
            return ErrorCode.operation_not_attempted
        return code if code is not None else ErrorCode.none

    return {"results_by_topic_v3_and_below": [
        {"name": t.name, "results_by_partition": [
            {"partition_index": p, "partition_error_code": outcome(t.name, p)} for p in t.partitions]}
        for t in topics]}


async def add_offsets_to_txn(svc: KafkaService, req: Request, body: Any) -> Fields:
    code = not_coordinator(svc.broker, req, body.transactional_id)
    if code is None:
        try:
            await svc.broker.txn_add_offsets(body.transactional_id, body.producer_id,
                                             body.producer_epoch, body.group_id)
            code = ErrorCode.none
        except BayouError as exc:
            code = txn_code(exc)
    return {"error_code": code}


async def txn_offset_commit(svc: KafkaService, req: Request, body: Any) -> Fields:
    """Offsets committed for the group when the transaction commits (the group becomes a bayou
    group of the topic, as a plain OffsetCommit makes it)."""
    code = not_coordinator(svc.broker, req, body.group_id)
    if code is None:
        try:
            offsets: dict[str, dict[int, int]] = {}
            pace = Pace()
            for t in body.topics:
                await pace(1 + len(t.partitions))
                if not await svc.broker.has_topic(t.name):
                    code = ErrorCode.unknown_topic_or_partition
                    break
                for p in t.partitions:
                    if p.committed_offset < 0:
                        code = ErrorCode.invalid_commit_offset_size
                    offsets.setdefault(t.name, {})[p.partition_index] = p.committed_offset
            if code is None:
                for name in offsets:
                    if svc.broker.group_topic(body.group_id) is None:
                        await svc.broker.register_group(body.group_id, name, RTES_POLICY)
                await svc.broker.txn_stage_offsets(body.transactional_id, body.producer_id,
                                                   body.producer_epoch, body.group_id, offsets)
                code = ErrorCode.none
        except BayouError as exc:
            code = txn_code(exc)
    return {"topics": [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index, "error_code": code} for p in t.partitions]}
        for t in body.topics]}


async def end_txn(svc: KafkaService, req: Request, body: Any) -> Fields:
    code = not_coordinator(svc.broker, req, body.transactional_id)
    if code is None:
        try:
            await svc.broker.txn_end(body.transactional_id, body.producer_id, body.producer_epoch,
                                     body.committed)
            code = ErrorCode.none
        except BayouError as exc:
            code = txn_code(exc)
    return {"error_code": code, "producer_id": -1, "producer_epoch": -1}


HANDLERS: dict[ApiKey, Handler] = {
    ApiKey.ADD_PARTITIONS_TO_TXN: add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: add_offsets_to_txn,
    ApiKey.TXN_OFFSET_COMMIT: txn_offset_commit,
    ApiKey.END_TXN: end_txn,
}
