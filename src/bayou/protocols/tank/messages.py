"""TANK 4.0 requests and responses as frozen, slotted dataclasses (STYLE habit 4).

Each class names its ``MSG_ID``. Field order and defaults follow what tank-cli sends, so
``Produce(1, (ProduceTopic("t", (ProduceEntry(0, bundle),)),))`` is exactly a tank-cli produce.

Conventions: topic names, client ids and config text are ``str`` (UTF-8 with surrogateescape, see
``wire``); bundles, chunks, keys and values are ``bytes``; seqs are u64 ints; error bytes are ints
from ``codes`` (the decoders only ever produce members of those enums). Wire order is kept
everywhere (topics, entries, chunks), because the responses are matched to requests by position.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

from bayou.protocols.tank.codes import ConsumeFlag, MsgId

# -- shared parts -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A node address as TANK puts it on the wire: IPv4 as a u32 (host order, LE), port u16."""

    address: int
    port: int


@dataclass(frozen=True, slots=True)
class Ping:
    """Sent once by the broker on accept; a client may send it too and gets no answer."""

    MSG_ID: ClassVar[MsgId] = MsgId.PING


# -- Produce (0x1) and ProduceWithSeqnum (0x5), tank.md 4 ---------------------------------------


@dataclass(frozen=True, slots=True)
class ProduceEntry:
    """One bundle for one partition. ``base_seq`` travels only in 0x5 (between the length and the
    bundle); a sparse bundle's own header overrides it (tank.md 4.2 step 3)."""

    partition: int
    bundle: bytes
    base_seq: int = 0


@dataclass(frozen=True, slots=True)
class ProduceTopic:
    name: str
    entries: tuple[ProduceEntry, ...]


@dataclass(frozen=True, slots=True)
class Produce:
    """Produce (0x1), or ProduceWithSeqnum (0x5) when ``with_seqnum``. Both are answered with a
    ``ProduceResponse`` under msgId 0x1. The same partition may appear several times."""

    request_id: int
    topics: tuple[ProduceTopic, ...]
    client_version: int = 2
    client_id: str = "c++"
    required_acks: int = 0
    ack_timeout: int = 0
    with_seqnum: bool = False

    @property
    def msg_id(self) -> MsgId:
        return MsgId.PRODUCE_WITH_SEQNUM if self.with_seqnum else MsgId.PRODUCE

    def entries(self) -> Iterator[tuple[str, ProduceEntry]]:
        """(topic, entry) in request order: the order of the response's error bytes."""
        for t in self.topics:
            for e in t.entries:
                yield t.name, e


@dataclass(frozen=True, slots=True)
class ProduceTopicResult:
    """One topic's group of error bytes (tank.md 4.3).

    Either ``topic_error`` (0xff unknown topic, 0xfe read-only: one byte for all the topic's
    entries) or one byte per entry in ``errors``. Each 0xfc in ``errors`` takes the next
    ``leaders`` item. A topic with no entries in the request has an empty group: no byte at all.
    """

    errors: tuple[int, ...] = ()
    topic_error: int | None = None
    leaders: tuple[Endpoint, ...] = ()


@dataclass(frozen=True, slots=True)
class ProduceResponse:
    """The answer to both 0x1 and 0x5 (always msgId 0x1): one group per requested topic."""

    MSG_ID: ClassVar[MsgId] = MsgId.PRODUCE

    request_id: int
    topics: tuple[ProduceTopicResult, ...]


# -- Consume (0x2) and ConsumePeer (0x9), tank.md 5 ---------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumePartition:
    """``seq`` 0 = first available, 2^64-1 = tail; ``fetch_size`` is a hint (tank.md 5.4, 5.5)."""

    partition: int
    seq: int
    fetch_size: int


@dataclass(frozen=True, slots=True)
class ConsumeTopic:
    name: str
    partitions: tuple[ConsumePartition, ...]


@dataclass(frozen=True, slots=True)
class Consume:
    """tank.md 5.1. ``op_flags`` is on the wire only for client version >= 3 (tank-cli ``-P``)."""

    MSG_ID: ClassVar[MsgId] = MsgId.CONSUME

    request_id: int
    topics: tuple[ConsumeTopic, ...]
    max_wait: int = 0
    min_bytes: int = 0
    client_version: int = 2
    client_id: str = ""
    op_flags: int = 0


@dataclass(frozen=True, slots=True)
class ConsumePeer:
    """tank.md 5.8: a replica's consume. No client version, request id or client id; u16 counts."""

    MSG_ID: ClassVar[MsgId] = MsgId.CONSUME_PEER

    replica_id: int
    topics: tuple[ConsumeTopic, ...]
    max_wait: int = 0
    min_bytes: int = 0


@dataclass(frozen=True, slots=True)
class ConsumePartitionResult:
    """One partition entry of a consume response header (tank.md 5.3) and its chunk.

    Which fields reach the wire depends on ``flags``: ``base_seq`` for 0x00 and 0x01, ``hwmark``
    and the chunk length for 0x00, 0x01 and 0xfe, ``first_available`` for 0x01 only, ``leader``
    for 0xfc only; 0xff, 0xfb and 0xfd carry nothing. ``chunk`` is the run of ``varint length +
    bundle`` records sent after the header.
    """

    partition: int
    flags: int = ConsumeFlag.OK
    base_seq: int = 0
    hwmark: int = 0
    first_available: int = 0
    leader: Endpoint | None = None
    chunk: bytes = b""


@dataclass(frozen=True, slots=True)
class ConsumeTopicResult:
    name: str
    partitions: tuple[ConsumePartitionResult, ...]


@dataclass(frozen=True, slots=True)
class ConsumeUnknownTopic:
    """An unknown topic: its name, the *requested* partition count echoed, then u16 0xffff."""

    name: str
    partition_count: int


ConsumeTopicAnswer = ConsumeTopicResult | ConsumeUnknownTopic


@dataclass(frozen=True, slots=True)
class ConsumeResponse:
    MSG_ID: ClassVar[MsgId] = MsgId.CONSUME

    request_id: int
    topics: tuple[ConsumeTopicAnswer, ...]


@dataclass(frozen=True, slots=True)
class ConsumePeerResponse:
    """A consume response without the request id and with u16 counts (tank.md 5.8)."""

    MSG_ID: ClassVar[MsgId] = MsgId.CONSUME_PEER

    topics: tuple[ConsumeTopicAnswer, ...]


# -- DiscoverPartitions (0x6), tank.md 6 --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DiscoverPartitions:
    """``partitions`` empty means "all" (what tank-cli sends); otherwise the ids to describe."""

    MSG_ID: ClassVar[MsgId] = MsgId.DISCOVER_PARTITIONS

    request_id: int
    topic: str
    partitions: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class DiscoveredPartition:
    """First available and high water mark (0, 0 when empty). With ``fault`` set (a
    ``PartitionFault``), both go on the wire as 2^64-1 followed by the fault byte (and ``leader``
    for 0xfc)."""

    first_available: int = 0
    hwmark: int = 0
    fault: int | None = None
    leader: Endpoint | None = None


@dataclass(frozen=True, slots=True)
class DiscoverPartitionsResponse:
    """Entries in partition order (or the requested order); none at all means unknown topic."""

    MSG_ID: ClassVar[MsgId] = MsgId.DISCOVER_PARTITIONS

    request_id: int
    topic: str
    partitions: tuple[DiscoveredPartition, ...]


# -- CreateTopic (0x7) and ReloadConf (0x8), tank.md 7 and 8 ------------------------------------


@dataclass(frozen=True, slots=True)
class CreateTopic:
    """``config`` is text, one ``key=value`` per line (tank-cli writes ``"k=v\\n"`` lines)."""

    MSG_ID: ClassVar[MsgId] = MsgId.CREATE_TOPIC

    request_id: int
    topic: str
    partitions: int
    config: str = ""


@dataclass(frozen=True, slots=True)
class CreateTopicResponse:
    """``topic`` must echo the request's: the 4.0 client throws otherwise."""

    MSG_ID: ClassVar[MsgId] = MsgId.CREATE_TOPIC

    request_id: int
    topic: str
    error: int


@dataclass(frozen=True, slots=True)
class ReloadConf:
    MSG_ID: ClassVar[MsgId] = MsgId.RELOAD_CONF

    request_id: int
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class ReloadConfResponse:
    MSG_ID: ClassVar[MsgId] = MsgId.RELOAD_CONF

    request_id: int
    topic: str
    partition: int
    error: int


# -- Status (0xa), DiscoverTopics (0xb), DiscoverTopology (0xc), tank.md 9-11 -------------------


@dataclass(frozen=True, slots=True)
class Status:
    MSG_ID: ClassVar[MsgId] = MsgId.STATUS

    request_id: int


@dataclass(frozen=True, slots=True)
class StatusCluster:
    """Present only when the broker is cluster aware (never in standalone mode)."""

    flags: int
    name: str
    nodes: int


@dataclass(frozen=True, slots=True)
class StatusResponse:
    """tank.md 9. The client treats the tail as optional: ``open_partitions``, ``open_time_ms``
    and ``start_time`` (Unix seconds) come together or not at all, and ``version`` (400 for 4.0)
    only after them."""

    MSG_ID: ClassVar[MsgId] = MsgId.STATUS

    request_id: int
    topics: int
    partitions: int
    open_partitions: int | None = None
    open_time_ms: int | None = None
    start_time: int | None = None
    version: int | None = None
    global_flags: int = 0
    cluster: StatusCluster | None = None


@dataclass(frozen=True, slots=True)
class DiscoverTopics:
    MSG_ID: ClassVar[MsgId] = MsgId.DISCOVER_TOPICS

    request_id: int
    flags: int = 0


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """``replication_factor`` is on the wire only when the response is cluster aware."""

    name: str
    partitions: int
    enabled: int = 1
    replication_factor: int = 1


@dataclass(frozen=True, slots=True)
class DiscoverTopicsResponse:
    MSG_ID: ClassVar[MsgId] = MsgId.DISCOVER_TOPICS

    request_id: int
    topics: tuple[TopicInfo, ...]
    cluster_aware: bool = False


@dataclass(frozen=True, slots=True)
class DiscoverTopology:
    MSG_ID: ClassVar[MsgId] = MsgId.DISCOVER_TOPOLOGY

    request_id: int
    flags: int = 0


@dataclass(frozen=True, slots=True)
class TopologyNode:
    """Flags: bit0 = ``endpoint`` present, bit1 = available, bit2 = blocked."""

    id: int
    flags: int
    partitions: int
    endpoint: Endpoint | None = None


@dataclass(frozen=True, slots=True)
class DiscoverTopologyResponse:
    """``cluster_name`` None is the standalone answer: request id + u16 0xffff (tank.md 11)."""

    MSG_ID: ClassVar[MsgId] = MsgId.DISCOVER_TOPOLOGY

    request_id: int
    cluster_name: str | None = None
    nodes: tuple[TopologyNode, ...] = ()


Request = (Produce | Consume | ConsumePeer | Ping | DiscoverPartitions | CreateTopic | ReloadConf
           | Status | DiscoverTopics | DiscoverTopology)
Response = (ProduceResponse | ConsumeResponse | ConsumePeerResponse | Ping | DiscoverPartitionsResponse
            | CreateTopicResponse | ReloadConfResponse | StatusResponse | DiscoverTopicsResponse
            | DiscoverTopologyResponse)
