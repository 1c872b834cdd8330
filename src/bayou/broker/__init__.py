"""The broker core: one async API (topics, produce, fetch, long-poll, offsets, groups)."""

from bayou.broker.broker import Acks, Broker, FetchResult, ProduceResult, TopicInfo
from bayou.broker.settings import BrokerConfig

__all__ = ["Acks", "Broker", "BrokerConfig", "FetchResult", "ProduceResult", "TopicInfo"]
