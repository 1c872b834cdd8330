"""Cursus text commands decoded into typed requests (cursus.md 3, 4, 6, 7)."""

from __future__ import annotations

import json

import pytest

from bayou.protocols.cursus import requests as rq
from bayou.protocols.cursus.commands import KEYWORDS, Command, classify


def _cmd(text: str) -> Command:
    c = classify(text.encode())
    assert isinstance(c, Command)
    return c


def decode(text: str) -> rq.Request:
    cmd = _cmd(text)
    assert rq.served(cmd), text
    return rq.decode(cmd)


def refused(text: str) -> bytes | list[bytes]:
    with pytest.raises(rq.ErrorReply) as ei:
        decode(text)
    return ei.value.reply


def test_served_keywords_and_unknown() -> None:
    assert set(rq.DECODERS) < KEYWORDS
    for kw in ("AUTH", "LIST_CLUSTER", "INIT_PRODUCER_ID", "RAFT_APPLY"):
        assert not rq.served(_cmd(kw + " x=1"))
    assert not rq.served(_cmd("LIST extra"))  # LIST takes no arguments: H matches it exactly
    assert not rq.served(_cmd("PUBLISH"))  # the rest need "<KEYWORD> "
    assert rq.served(_cmd("LIST_OFFSETS")) and rq.served(_cmd("LIST_OFFSETS topic=t"))
    assert rq.unknown(_cmd("AUTH  a b")) == b'ERROR: unknown_command command="AUTH  a b"'


def test_argumentless_commands() -> None:
    assert decode("LIST") == rq.ListTopics()
    assert decode("HELP") == rq.Help()
    assert decode("LIST_GROUPS") == rq.ListGroups()


def test_positional_and_named_forms_agree() -> None:
    assert decode("CREATE t 3") == decode("CREATE topic=t partitions=3")
    assert decode("DELETE t") == decode("DELETE topic=t") == rq.DeleteTopic("t")
    assert decode("DESCRIBE t") == decode("DESCRIBE topic=t") == rq.Describe("t")
    assert decode("COMMIT t g 2 9") == decode("COMMIT_OFFSET topic=t group=g partition=2 offset=9") == \
        rq.CommitOffset("t", "g", 2, 9)
    assert decode("CONSUME t 1 5") == rq.Consume("t", 1, 5, rq.DEFAULT_GROUP, rq.DEFAULT_BATCH, 0)
    assert decode("STREAM t 1 5") == rq.Stream("t", 1, rq.DEFAULT_GROUP, 5)
    assert decode("JOIN_GROUP t g m") == decode("JOIN_GROUP topic=t group=g member=m")
    # HEARTBEAT's positional form names a consumer before the member
    assert decode("HEARTBEAT t g c m 4") == rq.Heartbeat("t", "g", "m", 4)
    assert decode("SUBSCRIBE t") == rq.Subscribe("t", rq.DEFAULT_GROUP)
    assert decode("SUBSCRIBE t g") == rq.Subscribe("t", "g")


def test_create_options() -> None:
    req = decode("CREATE topic=t partitions=2 idempotent=TRUE event_sourcing=true partitioner=round_robin "
                 "retention_hours=2 retention_bytes=0")
    assert isinstance(req, rq.CreateTopic)
    assert req.partitions == 2 and req.invalid is None
    assert dict(req.config) == {"idempotent": "true", "event.sourcing": "true",
                                "cursus.partitioner": "round_robin", "retention.ms": "7200000"}
    assert decode("CREATE topic=t") == rq.CreateTopic("t")
    assert refused("CREATE partitions=2") == (
        b'ERROR: missing_topic expected="CREATE topic=<name> [partitions=<N>]"')


@pytest.mark.parametrize(("text", "reply"), [
    ("CREATE topic=t partitions=0", b'ERROR: invalid_partitions reason="must be a positive integer"'),
    ("CREATE topic=t replication_factor=x",
     b'ERROR: invalid_replication_factor reason="must be a positive integer"'),
    ("CREATE topic=t cleanup_policy=compact",
     b'ERROR: invalid_topic_policy reason="cleanup_policy compact is not supported"'),
    ("CREATE topic=t partitioner=sticky", b'ERROR: invalid_topic_policy reason="unknown partitioner sticky"'),
    ("CREATE topic=t auth_policy=acl",
     b'ERROR: invalid_topic_policy reason="only auth_policy=open is supported"'),
    ("CREATE topic=t retention_hours=-1",
     b'ERROR: invalid_topic_policy reason="retention_hours must be a non-negative integer"'),
])
def test_create_option_errors_wait_for_the_topic_name_check(text: str, reply: bytes) -> None:
    # H checks the topic name first (a server-side rule), so the decoder carries the error
    req = decode(text)
    assert isinstance(req, rq.CreateTopic) and req.invalid == reply


def test_publish() -> None:
    req = decode("PUBLISH topic=t acks=-1 producerId=p seqNum=3 epoch=2 key=k partition=1 message=a b")
    assert req == rq.Publish("t", "a b", "p", rq.AckLevel.ALL, 3, 2, "k", 1)
    # seed 002: the rest of the text is the message
    assert decode("PUBLISH t hello  world") == rq.Publish("t", "hello  world", "bayou-text")
    bad = decode("PUBLISH topic=t producerId=p partition=x message=m")
    assert isinstance(bad, rq.Publish) and bad.partition is None
    assert bad.invalid == b'ERROR: invalid_partition reason="invalid partition x"'


@pytest.mark.parametrize(("text", "reply"), [
    ("PUBLISH producerId=p message=m", b"ERROR: missing_topic command=PUBLISH"),
    ("PUBLISH topic=t producerId=p", b"ERROR: missing_message command=PUBLISH"),
    ("PUBLISH topic=t message=m", b"ERROR: missing_producer_id command=PUBLISH"),
    ("PUBLISH topic=t producerId=p isIdempotent=yes message=m", b"ERROR: invalid_is_idempotent value=yes"),
    ("PUBLISH topic=t producerId=p acks=2 message=m", b"ERROR: invalid_acks value=2"),
    ("PUBLISH topic=t producerId=p seqNum=-1 message=m",
     b'ERROR: invalid_seq_num reason="invalid seqNum -1"'),
    ("PUBLISH topic=t producerId=p epoch=e message=m", b'ERROR: invalid_epoch reason="invalid epoch e"'),
])
def test_publish_errors(text: str, reply: bytes) -> None:
    assert refused(text) == reply


def test_acks() -> None:
    assert [rq.parse_acks(t) for t in ("0", "1", "", "-1", "ALL", "2")] == [
        rq.AckLevel.NONE, rq.AckLevel.LEADER, rq.AckLevel.LEADER, rq.AckLevel.ALL, rq.AckLevel.ALL, None]


def test_group_requests() -> None:
    assert decode("JOIN_GROUP topic=t group=g member=m generation=3") == rq.JoinGroup("t", "g", "m", 3)
    late = decode("JOIN_GROUP topic=t group=g member=m generation=x")
    assert isinstance(late, rq.JoinGroup)
    assert late.invalid == b"ERROR: invalid_generation command=JOIN_GROUP"
    assert refused("JOIN_GROUP topic=t member=m") == b"ERROR: missing_group command=JOIN_GROUP"
    assert refused("SYNC_GROUP topic=t group=g member=m") == b"ERROR: missing_generation command=SYNC_GROUP"
    assert decode("LEAVE_GROUP topic=t group=g member=m") == rq.LeaveGroup("t", "g", "m", None)
    assert decode("FETCH_OFFSET topic=t group=g partition=0") == rq.FetchOffset("t", "g", 0)
    assert refused("FETCH_OFFSET topic=t group=g") == b"ERROR: missing_partition command=FETCH_OFFSET"
    assert decode("REGISTER_GROUP topic=t group=g") == rq.RegisterGroup("t", "g")
    assert decode("GROUP_STATUS group=g") == rq.GroupStatus("g")


@pytest.mark.parametrize(("text", "reply"), [
    ("COMMIT_OFFSET topic=t group=g partition=0", b"ERROR: missing_offset command=COMMIT_OFFSET"),
    ("COMMIT_OFFSET topic=t group=g partition=-1 offset=1", b"ERROR: invalid_partition"),
    ("COMMIT_OFFSET topic=t group=g partition=0 offset=x", b"ERROR: invalid_offset"),
    ("COMMIT_OFFSET topic=t group=g partition=0 offset=1 member=m",
     b"ERROR: missing_generation command=COMMIT_OFFSET"),
    ("COMMIT_OFFSET topic=t group=g partition=0 offset=1 generation=1",
     b"ERROR: missing_member command=COMMIT_OFFSET"),
    ("BATCH_COMMIT topic=t group=g member=m generation=1 P0:1,P0:2",
     b"ERROR: duplicate_partition partition=0 group=g topic=t"),
    ("BATCH_COMMIT topic=t group=g member=m generation=1 P0-1",
     b'ERROR: invalid_batch_commit_entry entry="P0-1"'),
])
def test_commit_errors(text: str, reply: bytes) -> None:
    assert refused(text) == reply


def test_batch_commit_offsets_keep_their_order() -> None:
    req = decode("BATCH_COMMIT topic=t group=g member=m generation=2 P3:10,p1:4,0:7")
    assert isinstance(req, rq.BatchCommit)
    assert list(req.offsets.items()) == [(3, 10), (1, 4), (0, 7)]
    assert (req.member, req.generation) == ("m", 2)


def test_reading_requests() -> None:
    assert decode("CONSUME topic=t partition=0 offset=3 member=m group=- batch=-5 wait_ms=999999") == \
        rq.Consume("t", 0, 3, rq.DEFAULT_GROUP, rq.DEFAULT_BATCH, rq.MAX_WAIT_MS)
    assert refused("CONSUME t 0") == b"ERROR: invalid_consume_syntax"
    assert refused("CONSUME topic=t partition=0 offset=1") == b"ERROR: invalid_consume_syntax"
    assert refused("CONSUME topic=t partition=z offset=1 member=m") == (
        b'ERROR: command_failed reason="invalid partition value: z"')
    assert refused("CONSUME topic=t partition=0 offset=-1 member=m") == (
        b'ERROR: command_failed reason="invalid offset value: -1"')
    assert decode("STREAM topic=t partition=0 group=g autoOffsetReset=latest member=m batch=5") == \
        rq.Stream("t", 0, "g", None, "latest", 5, member=True)
    assert refused("STREAM topic=t partition=0") == b"ERROR: invalid_stream_syntax"


def test_event_sourcing_requests() -> None:
    req = decode("APPEND_STREAM topic=t key=k version=2 event_type=e schema_version=3 metadata=x "
                 "producerId=p message=hello")
    assert req == rq.AppendStream("t", b"k", 2, "hello", "e", 3, "x", "p")
    assert refused("APPEND_STREAM key=k version=1 message=m") == b"ERROR: missing_topic"
    assert refused("APPEND_STREAM topic=t version=1 message=m") == b"ERROR: missing_key"
    # the version and message errors come after the broker's topic checks
    for text, reply in (("APPEND_STREAM topic=t key=k message=m", b"ERROR: missing_version"),
                        ("APPEND_STREAM topic=t key=k version=-2 message=m", b"ERROR: invalid_version"),
                        ("APPEND_STREAM topic=t key=k version=1", b"ERROR: missing_message"),
                        ("APPEND_STREAM topic=t key=k version=1 schema_version=4294967296 message=m",
                         b"ERROR: invalid_schema_version"),
                        ("SAVE_SNAPSHOT topic=t key=k version=1", b"ERROR: missing_message")):
        late = decode(text)
        assert isinstance(late, rq.AppendStream | rq.SaveSnapshot) and late.invalid == reply
    assert decode("SAVE_SNAPSHOT topic=t key=k version=1 message=") == rq.SaveSnapshot("t", b"k", 1, "")
    assert decode("STREAM_VERSION topic=t key=k") == rq.StreamVersion("t", b"k")
    assert decode("READ_SNAPSHOT topic=t key=k") == rq.ReadSnapshot("t", b"k")


def test_read_stream_errors_are_json() -> None:
    assert decode("READ_STREAM topic=t key=k from_version=0") == rq.ReadStream("t", b"k", 1)
    assert refused("READ_STREAM key=k") == [b'{"status":"ERROR","error":"missing_topic"}']
    late = decode("READ_STREAM topic=t key=k from_version=x")
    assert isinstance(late, rq.ReadStream)
    assert json.loads(late.invalid or b"") == {"status": "ERROR", "error": "invalid_from_version"}


def test_other_requests() -> None:
    assert decode("METADATA topic=t") == rq.Metadata("t")
    assert refused("METADATA x=1") == b"ERROR: missing_topic command=METADATA"
    assert decode("FIND_COORDINATOR group=g") == rq.FindCoordinator("group", "g")
    assert decode("FIND_COORDINATOR transactional_id=x") == rq.FindCoordinator("transaction", "x")
    assert refused("FIND_COORDINATOR x=1") == b"ERROR: missing_coordinator_key command=FIND_COORDINATOR"
    assert decode("LIST_OFFSETS topic=t partition=2") == rq.ListOffsets("t", 2)
    assert decode("LIST_OFFSETS topic=t partition=x") == rq.ListOffsets("t", None,
                                                                         b"ERROR: invalid_partition")
