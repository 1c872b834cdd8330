"""The broker core: one async API (topics, produce, fetch, long-poll, offsets, groups)."""

from bayou.broker.broker import Acks, Broker, FetchResult, ProduceResult, TopicInfo
from bayou.broker.fetch import FETCH_MAX_BYTES
from bayou.broker.pace import YIELD_EVERY, Pace
from bayou.broker.settings import BrokerConfig

__all__ = ["FETCH_MAX_BYTES", "YIELD_EVERY", "Acks", "Broker", "BrokerConfig", "FetchResult", "Pace",
           "ProduceResult", "TopicInfo"]
