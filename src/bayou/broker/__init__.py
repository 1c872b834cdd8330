"""The broker core: one async API (topics, produce, fetch, long-poll, offsets, groups)."""

from bayou.broker.broker import Acks, Broker, FetchResult, ProduceResult, TopicInfo
from bayou.broker.fetch import FETCH_MAX_BYTES, FETCH_YIELD_EVERY
from bayou.broker.settings import BrokerConfig

__all__ = ["FETCH_MAX_BYTES", "FETCH_YIELD_EVERY", "Acks", "Broker", "BrokerConfig", "FetchResult",
           "ProduceResult", "TopicInfo"]
