"""The TANK code tables (tank.md 1.1, 4.3, 5.3, 6, 7, 8) and the registry mapping."""

from __future__ import annotations

from bayou import errors
from bayou.protocols.tank.codes import (
    PRODUCE_ERROR_FOR,
    BundleError,
    ConsumeFlag,
    CreateTopicError,
    MsgId,
    PartitionFault,
    ProduceError,
    ReloadConfError,
    TankError,
    consume_flag_for,
    create_topic_error_for,
    produce_error_for,
    reload_conf_error_for,
)


def test_message_ids() -> None:
    assert [int(x) for x in MsgId] == list(range(1, 13))
    assert MsgId.PRODUCE_WITH_SEQNUM == 5 and MsgId.REG_REPLICA == 4 and MsgId.DISCOVER_TOPOLOGY == 0x0C


def test_error_tables_hold_only_what_the_client_understands() -> None:
    assert {int(x) for x in ProduceError} == {0, 1, 2, 3, 4, 10, 0xFC, 0xFD, 0xFE, 0xFF}
    assert {int(x) for x in ConsumeFlag} == {0, 1, 0xFB, 0xFC, 0xFD, 0xFE, 0xFF}
    assert {int(x) for x in PartitionFault} == {0xFB, 0xFC, 0xFD}
    assert {int(x) for x in CreateTopicError} == {0, 1, 2, 4, 5, 10, 11}
    assert {int(x) for x in ReloadConfError} == {0, 1, 2, 3, 10, 11, 12}


def test_tank_error() -> None:
    err = TankError("bad")
    assert err.close and err.message == "bad" and "close=True" in repr(err)
    assert not TankError("x", close=False).close
    bundle = BundleError("count 0")
    assert isinstance(bundle, TankError) and not bundle.close
    assert bundle.produce_error == ProduceError.INVALID_SEQ_NUMS == 10


def test_registry_mapping() -> None:
    assert produce_error_for(errors.UnknownTopic()) == ProduceError.UNKNOWN_TOPIC
    assert produce_error_for(errors.UnknownPartition()) == ProduceError.UNKNOWN_PARTITION
    assert produce_error_for(errors.CorruptRecord()) == ProduceError.INVALID_SEQ_NUMS
    assert produce_error_for(errors.BrokerShuttingDown()) == ProduceError.SYSTEM_ERROR
    assert create_topic_error_for(errors.TopicAlreadyExists()) == CreateTopicError.ALREADY_EXISTS
    assert create_topic_error_for(errors.InvalidTopicName()) == CreateTopicError.INVALID_REQUEST
    assert create_topic_error_for(errors.InvalidPartitions()) == CreateTopicError.INVALID_REQUEST
    assert create_topic_error_for(errors.InvalidConfig()) == CreateTopicError.INVALID_CONFIG
    assert create_topic_error_for(errors.GroupNotFound()) == CreateTopicError.SYSTEM_ERROR
    assert reload_conf_error_for(errors.UnknownTopic()) == ReloadConfError.INVALID_REQUEST
    assert reload_conf_error_for(errors.UnknownPartition()) == ReloadConfError.UNKNOWN_PARTITION

    class Sub(errors.UnknownPartition):
        pass

    assert produce_error_for(Sub()) == ProduceError.UNKNOWN_PARTITION
    assert all(code in ProduceError for code in PRODUCE_ERROR_FOR.values())


def test_registry_mapping_the_handlers_use() -> None:
    """The TANK handlers answer registry errors only through these tables."""
    assert create_topic_error_for(errors.Unauthorized()) == CreateTopicError.READ_ONLY
    assert create_topic_error_for(errors.PartitionLimitReached()) == CreateTopicError.INVALID_REQUEST
    assert reload_conf_error_for(errors.Unauthorized()) == ReloadConfError.SYSTEM_ERROR
    assert reload_conf_error_for(errors.InvalidConfig()) == ReloadConfError.PARSE_FAILURE
    assert consume_flag_for(errors.NotLeader()) == ConsumeFlag.NO_LEADER
    assert consume_flag_for(errors.CorruptStorage()) == ConsumeFlag.SYSTEM_ERROR
    assert consume_flag_for(errors.GroupNotFound()) == ConsumeFlag.SYSTEM_ERROR
