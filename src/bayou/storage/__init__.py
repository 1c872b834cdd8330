"""The segmented log engine: plain synchronous code, no asyncio."""

from bayou.storage.config import FsyncPolicy, LogConfig, apply_overrides
from bayou.storage.log import AppendInfo, FileSpan, PartitionLog, ReadResult
from bayou.storage.store import Store, TopicMeta, validate_topic_name

__all__ = [
    "AppendInfo",
    "FileSpan",
    "FsyncPolicy",
    "LogConfig",
    "PartitionLog",
    "ReadResult",
    "Store",
    "TopicMeta",
    "apply_overrides",
    "validate_topic_name",
]
