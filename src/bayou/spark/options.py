"""Source and sink options, checked once on the driver and frozen into dataclasses.

Names and meanings follow Spark's Kafka connector so a Spark user can switch by changing the format
and the ``kafka.`` prefix. Option keys are matched case-insensitively, as Spark does; values are
strings. Every error names the option it is about (see ``BayouOptionError``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bayou.client.tls import TlsConfig
from bayou.spark.errors import BayouOptionError

EARLIEST = -2  # Kafka's JSON markers inside startingOffsets / endingOffsets
LATEST = -1
DEFAULT_MAX_RECORDS_PER_PARTITION = 1_000_000
DEFAULT_FETCH_MAX_RECORDS = 10_000
DEFAULT_SINK_BATCH = 5_000

TopicPartition = tuple[str, int]

BOOTSTRAP = "bayou.bootstrap.servers"
# Options under the bayou. prefix: a misspelt one is an error, not silently ignored.
BAYOU_OPTIONS = {
    BOOTSTRAP, "bayou.username", "bayou.password", "bayou.timeout", "bayou.fetch.maxrecords",
    "bayou.sink.partitions", "bayou.sink.batchsize", "bayou.compression.type",
    # TLS, named as Kafka clients (librdkafka) name them
    "bayou.security.protocol", "bayou.ssl.ca.location", "bayou.ssl.certificate.location",
    "bayou.ssl.key.location", "bayou.ssl.endpoint.identification.algorithm",
}
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL")
COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")
SUBSCRIPTIONS = ("subscribe", "subscribePattern", "assign")
# Kafka options this connector does not implement: rejected rather than silently ignored.
UNSUPPORTED = {
    "minoffsetspertrigger": "minOffsetsPerTrigger",
    "maxtriggerdelay": "maxTriggerDelay",
    "groupidprefix": "groupIdPrefix",
    "kafka.group.id": "kafka.group.id",
}


@dataclass(frozen=True, slots=True)
class ConnectionSpec:
    """How a process reaches the broker; hashable, so it keys the per-process client cache."""

    bootstrap: str  # host:port[,host:port...]: the first that answers is used
    username: str = "iggy"
    password: str = field(default="iggy", repr=False)
    timeout: float = 30.0
    tls: TlsConfig | None = None  # bayou.security.protocol=SSL


@dataclass(frozen=True, slots=True)
class Subscription:
    kind: str  # one of SUBSCRIPTIONS
    topics: tuple[str, ...] = ()  # subscribe
    pattern: str = ""  # subscribePattern: a regex that must match the whole topic name
    assigned: tuple[TopicPartition, ...] = ()  # assign

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.pattern, topic) is not None


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where ranges start or end, before it is resolved against the broker. Precedence as in
    Kafka: a global timestamp, then per-partition timestamps, then per-partition offsets (which may
    be EARLIEST / LATEST); a partition named by none of them gets ``default``."""

    option: str  # the option this came from, named in errors
    default: int  # EARLIEST or LATEST
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    timestamp: int | None = None
    timestamps: Mapping[TopicPartition, int] = field(default_factory=dict)

    def named(self) -> set[TopicPartition]:
        if self.timestamp is not None:
            return set()
        return set(self.timestamps) | set(self.offsets)


@dataclass(frozen=True, slots=True)
class SourceOptions:
    conn: ConnectionSpec
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec | None  # batch reads only
    timestamp_strategy: str  # startingOffsetsByTimestampStrategy: "error" | "latest"
    fail_on_data_loss: bool
    include_headers: bool
    max_offsets_per_trigger: int | None
    max_records_per_partition: int
    min_partitions: int | None
    fetch_max_records: int


@dataclass(frozen=True, slots=True)
class SinkOptions:
    conn: ConnectionSpec
    topic: str | None  # the `topic` option: overrides a topic column
    new_topic_partitions: int  # partitions of a topic the sink creates
    batch_size: int  # records per send request
    compression: str = "none"  # bayou.compression.type (Kafka's kafka.compression.type)


class Options:
    """Case-insensitive access to Spark's option map (a plain dict copy would lose the case of
    keys such as ``startingOffsets``)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.raw = {str(k).lower(): str(v) for k, v in options.items()}

    def get(self, name: str) -> str | None:
        value = self.raw.get(name.lower())
        return None if value is None else value.strip()

    def has(self, name: str) -> bool:
        return self.get(name) is not None

    def integer(self, name: str, default: int | None = None, minimum: int | None = None) -> int | None:
        text = self.get(name)
        if text is None:
            return default
        try:
            value = int(text)
        except ValueError:
            raise BayouOptionError(name, f"expects an integer, got {text!r}") from None
        if minimum is not None and value < minimum:
            raise BayouOptionError(name, f"must be at least {minimum}, got {value}")
        return value

    def boolean(self, name: str, default: bool) -> bool:
        text = self.get(name)
        if text is None:
            return default
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise BayouOptionError(name, f"expects true or false, got {text!r}")

    def check_prefixed(self) -> None:
        for key in self.raw:
            if key.startswith("bayou.") and key not in BAYOU_OPTIONS:
                raise BayouOptionError(key, "unknown option; known bayou.* options: "
                                       + ", ".join(sorted(BAYOU_OPTIONS)))
            if key in UNSUPPORTED:
                raise BayouOptionError(UNSUPPORTED[key], "is not supported by the bayou source")
            if key.startswith("kafka."):
                raise BayouOptionError(key, "kafka.* options do not apply to bayou; use "
                                       f"{BOOTSTRAP}, bayou.username and bayou.password")


def parse_connection(opts: Options) -> ConnectionSpec:
    servers = opts.get(BOOTSTRAP)
    if not servers:
        raise BayouOptionError(BOOTSTRAP, "is required: host:port of the broker's Iggy listener "
                               "(bayou serve --iggy), several comma-separated")
    addresses = [a.strip() for a in servers.split(",") if a.strip()]
    for addr in addresses:
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise BayouOptionError(BOOTSTRAP, f"expects host:port[,host:port...], got {servers!r}")
    timeout_text = opts.get("bayou.timeout") or "30"
    try:
        timeout = float(timeout_text)
    except ValueError:
        raise BayouOptionError("bayou.timeout", f"expects seconds, got {timeout_text!r}") from None
    if timeout <= 0:
        raise BayouOptionError("bayou.timeout", "must be positive")
    return ConnectionSpec(",".join(addresses), opts.get("bayou.username") or "iggy",
                          opts.get("bayou.password") or "iggy", timeout, parse_tls(opts))


def parse_tls(opts: Options) -> TlsConfig | None:
    """``bayou.security.protocol=SSL`` and the ``bayou.ssl.*`` locations (PEM files, read on each
    executor: the paths must exist there too)."""
    protocol = (opts.get("bayou.security.protocol") or "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise BayouOptionError("bayou.security.protocol", f"expects PLAINTEXT or SSL, got {protocol!r}")
    ssl_keys = [k for k in opts.raw if k.startswith("bayou.ssl.")]
    if protocol == "PLAINTEXT":
        if ssl_keys:
            raise BayouOptionError(ssl_keys[0], "needs bayou.security.protocol=SSL")
        return None
    cert, key = opts.get("bayou.ssl.certificate.location"), opts.get("bayou.ssl.key.location")
    if bool(cert) != bool(key):
        raise BayouOptionError("bayou.ssl.key.location" if cert else "bayou.ssl.certificate.location",
                               "give both bayou.ssl.certificate.location and bayou.ssl.key.location")
    algorithm = (opts.get("bayou.ssl.endpoint.identification.algorithm") or "https").lower()
    if algorithm not in ("https", "none", ""):
        raise BayouOptionError("bayou.ssl.endpoint.identification.algorithm",
                               f"expects https or none, got {algorithm!r}")
    return TlsConfig(ca=opts.get("bayou.ssl.ca.location") or None, cert=cert or None, key=key or None,
                     check_hostname=algorithm == "https")


def parse_subscription(opts: Options) -> Subscription:
    given = [name for name in SUBSCRIPTIONS if opts.has(name)]
    if len(given) != 1:
        what = "none" if not given else ", ".join(given)
        raise BayouOptionError("subscribe", "give exactly one of subscribe, subscribePattern or "
                               f"assign (got {what})")
    kind = given[0]
    text = opts.get(kind) or ""
    if kind == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
        if not topics:
            raise BayouOptionError(kind, "expects a comma-separated list of topics")
        return Subscription(kind, topics=topics)
    if kind == "subscribePattern":
        if not text:
            raise BayouOptionError(kind, "expects a regular expression")
        try:
            re.compile(text)
        except re.error as exc:
            raise BayouOptionError(kind, f"is not a valid regular expression: {exc}") from None
        return Subscription(kind, pattern=text)
    doc = _json(kind, text, 'a JSON object of topic to partition list, e.g. {"t":[0,1]}')
    assigned: list[TopicPartition] = []
    for topic, parts in doc.items():
        if not isinstance(parts, list) or not all(_is_int(p) and p >= 0 for p in parts):
            raise BayouOptionError(kind, f"topic {topic!r}: expects a list of partition numbers")
        assigned.extend((topic, p) for p in parts)
    if not assigned:
        raise BayouOptionError(kind, "assigns no partitions")
    return Subscription(kind, assigned=tuple(sorted(set(assigned))))


def parse_offsets_json(option: str, text: str, allowed: set[int]) -> dict[TopicPartition, int]:
    """Kafka's ``{"topic": {"0": 23, "1": -2}}``; ``allowed`` holds the negative markers this
    option accepts (EARLIEST, LATEST)."""
    doc = _json(option, text, 'a JSON object such as {"topic":{"0":23,"1":-2}}')
    out: dict[TopicPartition, int] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict):
            raise BayouOptionError(option, f"topic {topic!r}: expects an object of partition to offset")
        for part, value in parts.items():
            try:
                p = int(part)
            except ValueError:
                raise BayouOptionError(option, f"topic {topic!r}: partition {part!r} is not a number") \
                    from None
            if p < 0 or not _is_int(value) or (value < 0 and value not in allowed):
                names = {EARLIEST: "-2 (earliest)", LATEST: "-1 (latest)"}
                extra = " or ".join(names[a] for a in sorted(allowed))
                raise BayouOptionError(option, f"{topic}/{part}: expects an offset >= 0"
                                       + (f" or {extra}" if extra else "") + f", got {value!r}")
            out[(topic, p)] = int(value)
    return out


def parse_timestamps_json(option: str, text: str) -> dict[TopicPartition, int]:
    return parse_offsets_json(option, text, set())


def _offset_spec(opts: Options, *, start: bool, streaming: bool) -> OffsetSpec:
    prefix = "starting" if start else "ending"
    offsets_opt, ts_opt, by_ts_opt = f"{prefix}Offsets", f"{prefix}Timestamp", f"{prefix}OffsetsByTimestamp"
    default = LATEST if (streaming or not start) else EARLIEST
    timestamp = opts.integer(ts_opt, minimum=0)
    if timestamp is not None:
        return OffsetSpec(ts_opt, default, timestamp=timestamp)
    by_ts = opts.get(by_ts_opt)
    if by_ts is not None:
        return OffsetSpec(by_ts_opt, default, timestamps=parse_timestamps_json(by_ts_opt, by_ts))
    text = opts.get(offsets_opt)
    if text is None:
        return OffsetSpec(offsets_opt, default)
    # Batch reads cannot start at latest nor end at earliest (an empty read by construction).
    allowed = {EARLIEST, LATEST} if streaming else ({EARLIEST} if start else {LATEST})
    word = text.lower()
    if word in ("earliest", "latest"):
        marker = EARLIEST if word == "earliest" else LATEST
        if marker not in allowed:
            raise BayouOptionError(offsets_opt, f"{word!r} is not allowed in a batch query")
        return OffsetSpec(offsets_opt, marker)
    return OffsetSpec(offsets_opt, default, offsets=parse_offsets_json(offsets_opt, text, allowed))


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    opts = Options(options)
    opts.check_prefixed()
    conn = parse_connection(opts)
    subscription = parse_subscription(opts)
    starting = _offset_spec(opts, start=True, streaming=streaming)
    ending: OffsetSpec | None = None
    if streaming:
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if opts.has(name):
                raise BayouOptionError(name, "is only for batch queries; a stream has no end")
    else:
        ending = _offset_spec(opts, start=False, streaming=False)
    strategy = (opts.get("startingOffsetsByTimestampStrategy") or "error").lower()
    if strategy not in ("error", "latest"):
        raise BayouOptionError("startingOffsetsByTimestampStrategy",
                               f"expects error or latest, got {strategy!r}")
    max_per_trigger = opts.integer("maxOffsetsPerTrigger", minimum=1)
    return SourceOptions(
        conn=conn,
        subscription=subscription,
        starting=starting,
        ending=ending,
        timestamp_strategy=strategy,
        fail_on_data_loss=opts.boolean("failOnDataLoss", True),
        include_headers=opts.boolean("includeHeaders", False),
        max_offsets_per_trigger=max_per_trigger if streaming else None,  # ignored in batch, as Kafka
        max_records_per_partition=_required_int(opts, "maxRecordsPerPartition",
                                                DEFAULT_MAX_RECORDS_PER_PARTITION),
        min_partitions=opts.integer("minPartitions", minimum=1),
        fetch_max_records=_required_int(opts, "bayou.fetch.maxRecords", DEFAULT_FETCH_MAX_RECORDS),
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    opts = Options(options)
    opts.check_prefixed()
    topic = opts.get("topic")
    if topic is not None and not topic:
        raise BayouOptionError("topic", "must not be empty")
    compression = (opts.get("bayou.compression.type") or "none").lower()
    if compression not in COMPRESSION_TYPES:
        raise BayouOptionError("bayou.compression.type", f"expects one of {', '.join(COMPRESSION_TYPES)}, "
                               f"got {compression!r}")
    return SinkOptions(conn=parse_connection(opts), topic=topic,
                       new_topic_partitions=_required_int(opts, "bayou.sink.partitions", 1),
                       batch_size=_required_int(opts, "bayou.sink.batchSize", DEFAULT_SINK_BATCH),
                       compression=compression)


def _required_int(opts: Options, name: str, default: int) -> int:
    value = opts.integer(name, default, minimum=1)
    assert value is not None
    return value


def _json(option: str, text: str, shape: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise BayouOptionError(option, f"is not valid JSON ({exc}); expects {shape}") from None
    if not isinstance(doc, dict):
        raise BayouOptionError(option, f"expects {shape}")
    return doc


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
