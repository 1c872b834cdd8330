"""bayou's Python SDK.

It speaks the Apache Iggy binary transport (legacy, apache-iggy 0.8 framing) to a broker's Iggy
listener (port 8090): of bayou's four protocols it is the one with users, typed headers, explicit
partitions, timestamp seeks, consumer groups with server-side assignment and stored offsets, so
every SDK feature maps onto a request a real Iggy server understands. Two bayou conventions ride on
Iggy's own extension points: a record key is the user header ``bayou.key``, and a topic created
with ``message.deduplication=true`` drops resent messages by id (the idempotent producer).

- ``Client`` / ``AsyncClient``: topics, partitions, offsets, groups, lag, raw sends and fetches.
- ``Producer`` / ``AsyncProducer``: batching by size and linger, keyed partitioning, idempotence.
- ``Consumer``: assign or subscribe (groups), poll records or Arrow batches, commit, seek.

``RtesClient`` is the small V1 line-protocol client the CLI's data commands use. Every client takes
``tls=TlsConfig(ca=..., cert=..., key=...)`` for a broker whose listeners speak TLS.
"""

from bayou.client.client import AsyncClient, Client
from bayou.client.consumer import Consumer, ConsumerRecord, TopicPartition, records_of
from bayou.client.errors import (
    BayouClientError,
    BrokerConnectionError,
    OffsetOutOfRangeError,
    TopicExistsError,
    UnknownPartitionError,
    UnknownTopicError,
)
from bayou.client.ops import GroupDescription, PartitionOffsets, TopicDescription
from bayou.client.producer import AsyncProducer, Producer, RecordMetadata, partition_for_key
from bayou.client.rtes import RtesClient, RtesClientError
from bayou.client.tls import TlsConfig
from bayou.client.wire import KAFKA_SCHEMA

__all__ = [
    "KAFKA_SCHEMA",
    "AsyncClient",
    "AsyncProducer",
    "BayouClientError",
    "BrokerConnectionError",
    "Client",
    "Consumer",
    "ConsumerRecord",
    "GroupDescription",
    "OffsetOutOfRangeError",
    "PartitionOffsets",
    "Producer",
    "RecordMetadata",
    "RtesClient",
    "RtesClientError",
    "TlsConfig",
    "TopicDescription",
    "TopicExistsError",
    "TopicPartition",
    "UnknownPartitionError",
    "UnknownTopicError",
    "partition_for_key",
    "records_of",
]
