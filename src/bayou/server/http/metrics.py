"""``/metrics``: the broker's state in Prometheus' text format, read at scrape time.

Every value comes from a plain number the serving code already keeps (bayou/stats.py, the
request meters, the partitions' logs, the group coordinator, the cluster node) and is turned into
metric families only inside ``collect``; nothing on a request's path touches prometheus-client.
Each server has its own ``CollectorRegistry``, so brokers in one process (tests) never mix, and
the process collector adds ``process_open_fds`` / ``process_max_fds`` and the rest.

Names and labels follow Kafka's exporters where Kafka has the metric (``topic``, ``partition``,
``group``, ``request``); the README lists them all.

Rendering: prometheus-client 0.26 spends 20-60 us per sample in ``generate_latest`` (it validates
and escapes every label name of every sample), 0.2 s per scrape of a broker with 500 partitions,
all of it on the event loop. So the broker's families are built as ``Family`` lists (label values
rendered once per partition) and written by ``render`` (names and label names are fixed here:
only label values need escaping); prometheus-client renders the process collector, and the whole
registry (through ``BrokerCollector.collect``) when a scraper asks for OpenMetrics.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4, CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from bayou import __version__
from bayou.server.http.probes import readiness
from bayou.stats import STORAGE, Histogram

if TYPE_CHECKING:
    from bayou.broker.cluster.node import ClusterNode
    from bayou.server.app import BayouServer

ZK_STATES = ("CONNECTED", "SUSPENDED", "LOST")


def _escape(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def labels(names: tuple[str, ...], values: tuple[object, ...]) -> str:
    """``a="x",b="y"``: a sample's rendered labels."""
    return ",".join(f'{n}="{_escape(str(v))}"' for n, v in zip(names, values, strict=True))


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


_LE: dict[float, str] = {}


def _le(bound: float) -> str:
    text = _LE.get(bound)
    if text is None:
        text = _LE[bound] = floatToGoString(bound)  # type: ignore[no-untyped-call]
    return text


@dataclass(slots=True)
class Family:
    """One metric family: its samples as (rendered labels, value), or for a histogram as
    (rendered labels, Histogram)."""

    name: str  # without the _total of a counter
    kind: str  # counter | gauge | histogram
    doc: str
    label_names: tuple[str, ...] = ()
    samples: list[tuple[str, float]] = field(default_factory=list)
    histograms: list[tuple[str, Histogram]] = field(default_factory=list)

    def add(self, values: tuple[object, ...], value: float) -> None:
        self.samples.append((labels(self.label_names, values), value))

    def add_rendered(self, rendered: str, value: float) -> None:
        """A sample whose labels (``label_names``, in order) are rendered already."""
        self.samples.append((rendered, value))

    def add_histogram(self, values: tuple[object, ...], hist: Histogram) -> None:
        self.histograms.append((labels(self.label_names, values), hist))

    @property
    def sample_name(self) -> str:
        return self.name + "_total" if self.kind == "counter" else self.name

    def render(self, out: list[str]) -> None:
        name = self.sample_name
        doc = self.doc.replace("\\", "\\\\").replace("\n", "\\n")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {self.kind}\n")
        # values are ints, or finite floats (seconds): str() is Prometheus' number syntax for both
        out.extend([f"{name}{{{rendered}}} {value}\n" for rendered, value in self.samples] if self.label_names
                   else [f"{name} {value}\n" for _r, value in self.samples])
        for rendered, hist in self.histograms:
            buckets, total = hist.snapshot()
            sep = "," if rendered else ""
            for bound, n in buckets:
                out.append(f'{name}_bucket{{{rendered}{sep}le="{_le(bound)}"}} {n}\n')
            tail = f"{{{rendered}}}" if rendered else ""
            out.append(f"{name}_count{tail} {buckets[-1][1]}\n{name}_sum{tail} {_number(total)}\n")

    def metric(self) -> Metric:
        """The same family as prometheus-client's object (for ``collect``)."""
        names = list(self.label_names)
        if self.kind == "histogram":
            hist = HistogramMetricFamily(self.name, self.doc, labels=names)
            for rendered, h in self.histograms:
                buckets, total = h.snapshot()
                hist.add_metric(_values(rendered, names), [(_le(b), n) for b, n in buckets], total)
            return hist
        cls = CounterMetricFamily if self.kind == "counter" else GaugeMetricFamily
        family: Metric = cls(self.name, self.doc, labels=names)
        for rendered, value in self.samples:
            family.add_metric(_values(rendered, names), value)  # type: ignore[attr-defined]
        return family


def _values(rendered: str, names: list[str]) -> list[str]:
    """The label values back from ``labels``' rendering (values hold no ``="`` + ``",``)."""
    if not names:
        return []
    out: list[str] = []
    rest = rendered
    for i, n in enumerate(names):
        rest = rest[len(n) + 2:]
        end = rest.find('",', 0) if i < len(names) - 1 else len(rest) - 1
        raw = rest[:end]
        out.append(raw.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\"))
        rest = rest[end + 2:]
    return out


def _gauge(name: str, doc: str, value: float) -> Family:
    f = Family(name, "gauge", doc)
    f.add_rendered("", value)
    return f


def _counter(name: str, doc: str, value: float) -> Family:
    f = Family(name, "counter", doc)
    f.add_rendered("", value)
    return f


class BrokerCollector(Collector):
    def __init__(self, server: BayouServer) -> None:
        self.server = server

    def collect(self) -> Iterator[Metric]:
        for family in self.families():
            yield family.metric()

    def families(self) -> Iterator[Family]:
        yield from self._server()
        yield from self._requests()
        yield from self._topics()
        yield from self._groups()
        yield from self._storage()
        if self.server.cluster is not None:
            yield from _cluster(self.server.cluster)

    def _server(self) -> Iterator[Family]:
        server = self.server
        info = Family("bayou_build_info", "gauge", "The running bayou's version (always 1).",
                      ("version", "broker_id"))
        info.add((__version__, server.broker.config.broker_id), 1)
        yield info
        yield _gauge("bayou_ready", "1 when /ready answers 200 (recovered, listening, in sync).",
                     1 if readiness(server)["ready"] else 0)
        rec = server.broker.recovery
        yield _gauge("bayou_recovery_partitions", "Partitions the start-up load has to open.",
                     rec.partitions_total)
        yield _gauge("bayou_recovery_partitions_done", "Partitions the start-up load has opened so far.",
                     rec.partitions_done)
        yield _gauge("bayou_recovery_done", "1 once the start-up load (crash recovery) is over.",
                     1 if rec.done else 0)
        yield _gauge("bayou_recovery_seconds", "How long the start-up load took.", rec.seconds)
        yield _gauge("bayou_recovery_validated_bytes",
                     "Bytes of active segments CRC-checked after an unclean stop.", rec.validated_bytes)
        yield _gauge("bayou_recovery_truncated_bytes", "Bytes of torn or corrupt tails cut at start-up.",
                     rec.truncated_bytes)
        conns = Family("bayou_connections", "gauge", "Open client connections.", ("protocol",))
        refused = Family("bayou_connections_refused", "counter",
                         "Connections refused at admission (limits, draining).", ("protocol",))
        for name, listener in list(server.listeners.items()):
            conns.add((name,), len(listener.connections))
            refused.add((name,), listener.refused)
        yield conns
        yield refused
        limits = server.config.connection_limits()
        yield _gauge("bayou_connections_max", "The broker-wide connection limit (max_connections).",
                     limits.max_connections)
        admission = server.admission
        budget = admission.budget if admission is not None else None
        yield _gauge("bayou_inflight_request_bytes", "Request bytes held by connections (the byte budget).",
                     budget.used if budget is not None else 0)
        yield _gauge("bayou_inflight_request_bytes_max", "The byte budget (max_inflight_bytes).",
                     limits.max_inflight_bytes)
        yield _gauge("bayou_inflight_request_waiters", "Connections waiting for the byte budget.",
                     budget.waiting if budget is not None else 0)
        answers = admission.answers if admission is not None else None
        yield _gauge("bayou_inflight_answer_bytes",
                     "Bytes fetch answers hold or have reserved until sent (the answer budget).",
                     answers.used if answers is not None else 0)
        yield _gauge("bayou_inflight_answer_bytes_max", "The answer budget (max_answer_bytes).",
                     limits.max_answer_bytes)
        yield _gauge("bayou_inflight_answer_waiters", "Requests waiting for the answer budget.",
                     answers.waiting if answers is not None else 0)
        handles = server.broker.store.handles
        yield _gauge("bayou_log_open_files", "Segment and index files open in the handle cache.",
                     handles.open_count)
        yield _gauge("bayou_log_open_files_max", "The handle cache's bound (max_open_files).",
                     handles.capacity)
        sessions = server.kafka_fetch_sessions()
        yield _gauge("bayou_kafka_fetch_sessions", "Kafka incremental fetch sessions held (KIP-227).",
                     len(sessions) if sessions is not None else 0)
        yield _gauge("bayou_kafka_fetch_session_partitions", "Partitions held by those sessions.",
                     sessions.partitions if sessions is not None else 0)
        yield _counter("bayou_kafka_fetch_sessions_evicted",
                       "Idle fetch sessions evicted to make room for new ones.",
                       sessions.evicted if sessions is not None else 0)

    def _requests(self) -> Iterator[Family]:
        names = ("protocol", "request")
        requests = Family("bayou_requests", "counter", "Requests answered, per protocol and command.", names)
        errors = Family("bayou_request_errors", "counter", "Requests answered with an error.", names)
        latency = Family("bayou_request_duration_seconds", "histogram",
                         "Time from a request's dispatch to its reply, per protocol.", ("protocol",))
        for protocol, meter in sorted(self.server.meters.items()):
            for command, (n, failed) in sorted(meter.commands.items()):
                rendered = labels(names, (protocol, command))
                requests.add_rendered(rendered, n)
                errors.add_rendered(rendered, failed)
            latency.add_histogram((protocol,), meter.latency)
        yield requests
        yield errors
        yield latency

    def _topics(self) -> Iterator[Family]:
        topic_label = ("topic",)
        per_topic = {key: Family(f"bayou_topic_{key}", "counter", doc, topic_label) for key, doc in (
            ("bytes_in", "Bytes produced by clients (stored batch bytes)."),
            ("records_in", "Records produced by clients."),
            ("bytes_out", "Bytes fetched by consumers (not replica fetches)."),
            ("records_out", "Records fetched by consumers."))}
        partitions = Family("bayou_topic_partitions", "gauge", "Partitions of the topic.", topic_label)
        names = ("topic", "partition")
        start = Family("bayou_partition_log_start_offset", "gauge", "The first offset still in the log.",
                       names)
        end = Family("bayou_partition_log_end_offset", "gauge", "The offset the next record gets.", names)
        hw = Family("bayou_partition_high_watermark", "gauge", "Consumers see offsets below it.",
                    names)
        size = Family("bayou_partition_size_bytes", "gauge", "Bytes of the partition's segments.", names)
        segments = Family("bayou_partition_segments", "gauge", "Segment files of the partition.", names)
        offline = Family("bayou_partition_offline", "gauge",
                         "1 when the partition is offline: quarantined (damaged data) or an fsync failed.",
                         names)
        # the hot loop of a scrape (one pass per partition): bound appends, no method calls
        add_start, add_end, add_hw = start.samples.append, end.samples.append, hw.samples.append
        add_size, add_segments = size.samples.append, segments.samples.append
        add_offline = offline.samples.append
        for name, topic in sorted(self.server.broker.topics.items()):
            bytes_in = records_in = bytes_out = records_out = 0
            topic_rendered = labels(topic_label, (name,))
            partitions.add_rendered(topic_rendered, len(topic.partitions))
            for p in list(topic.partitions):
                bytes_in += p.bytes_in
                records_in += p.records_in
                bytes_out += p.bytes_out
                records_out += p.records_out
                plog = p.log
                rendered = f'{topic_rendered},partition="{p.index}"'
                add_start((rendered, plog.log_start_offset))
                add_end((rendered, plog.next_offset))
                add_hw((rendered, p.high_watermark))
                add_size((rendered, plog.size_bytes))
                add_segments((rendered, len(plog.segments)))
                add_offline((rendered, 0 if plog.offline_reason is None else 1))
            for key, value in (("bytes_in", bytes_in), ("records_in", records_in), ("bytes_out", bytes_out),
                               ("records_out", records_out)):
                per_topic[key].add_rendered(topic_rendered, value)
        yield from per_topic.values()
        yield from (partitions, start, end, hw, size, segments, offline)

    def _groups(self) -> Iterator[Family]:
        broker = self.server.broker
        names = ("group", "topic", "partition")
        committed = Family("bayou_consumer_group_committed_offset", "gauge",
                           "The group's committed offset (the next to read).", names)
        lag = Family("bayou_consumer_group_lag", "gauge",
                     "Records between the committed offset and the high watermark.", names)
        total_lag: dict[tuple[str, str], int] = defaultdict(int)
        for (group, topic, index), offset in sorted(broker.groups.offsets.items()):
            rendered = labels(names, (group, topic, index))
            committed.add_rendered(rendered, offset)
            t = broker.topics.get(topic)
            if t is None or index >= len(t.partitions):
                continue
            p = t.partitions[index]
            behind = max(0, p.high_watermark - max(offset, p.log.log_start_offset))
            lag.add_rendered(rendered, behind)
            total_lag[(group, topic)] += behind
        yield committed
        yield lag
        lag_sum = Family("bayou_consumer_group_lag_sum", "gauge",
                         "The group's lag over the topic's partitions with a committed offset.",
                         ("group", "topic"))
        for key, behind in sorted(total_lag.items()):
            lag_sum.add(key, behind)
        yield lag_sum
        members = Family("bayou_consumer_group_members", "gauge", "Members of the group.",
                         ("group", "topic", "state"))
        for name, g in sorted(broker.groups.groups.items()):
            members.add((name, g.topic, g.state.value), len(g.members))
        yield members

    def _storage(self) -> Iterator[Family]:
        fsync = Family("bayou_log_fsync_duration_seconds", "histogram",
                       "fsyncs of partition logs (one per group commit).")
        fsync.add_histogram((), STORAGE.fsync_seconds)
        yield fsync
        batch = Family("bayou_log_group_commit_records", "histogram", "Records made durable by one fsync.")
        batch.add_histogram((), STORAGE.group_commit_records)
        yield batch
        yield _counter("bayou_log_fsync_failures", "fsyncs that failed.", STORAGE.fsync_failures)
        yield _counter("bayou_log_dropped_appends",
                       "Records of unacknowledged appends undone after their write failed.",
                       STORAGE.dropped_appends)


def _cluster(node: ClusterNode) -> Iterator[Family]:
    me = node.me
    roles = {"leader": 0, "follower": 0}
    under = 0
    names = ("topic", "partition")
    isr = Family("bayou_cluster_partition_isr_size", "gauge",
                 "In-sync replicas of a partition this broker holds.", names)
    replicas = Family("bayou_cluster_partition_replicas", "gauge",
                      "Assigned replicas of a partition this broker holds.", names)
    for name, topic in sorted(node.broker.topics.items()):
        for part in list(topic.partitions):
            rs = part.cluster
            if rs is None or (me not in rs.replicas and not rs.is_leader):
                continue
            roles["leader" if rs.is_leader else "follower"] += 1
            rendered = labels(names, (name, part.index))
            isr.add_rendered(rendered, len(rs.isr))
            replicas.add_rendered(rendered, len(rs.replicas))
            if rs.is_leader and len(rs.isr) < len(rs.replicas):
                under += 1
    counts = Family("bayou_cluster_partitions", "gauge", "Partitions this broker leads or follows.",
                    ("role",))
    for role, n in roles.items():
        counts.add((role,), n)
    yield counts
    yield isr
    yield replicas
    yield _gauge("bayou_cluster_under_replicated_partitions",
                 "Partitions led here whose ISR is smaller than their replica set.", under)
    snap = node.snapshot
    offline = sum(1 for state, _v in snap.states.values() if state.leader < 0) if snap is not None else 0
    yield _gauge("bayou_cluster_offline_partitions", "Partitions of the cluster without a leader.", offline)
    yield _gauge("bayou_cluster_brokers", "Brokers registered in ZooKeeper.",
                 len(snap.brokers) if snap is not None else 0)
    controller = snap.controller if snap is not None else None
    yield _gauge("bayou_cluster_controller", "1 when this broker is the controller.",
                 1 if controller == me else 0)
    yield _gauge("bayou_cluster_controller_id", "The controller's broker id (-1: none).",
                 -1 if controller is None else controller)
    state = str(node.zk.zk.state)
    session = Family("bayou_zookeeper_session_state", "gauge", "1 for the ZooKeeper session's state.",
                     ("state",))
    for s in ZK_STATES:
        session.add((s.lower(),), 1 if s == state else 0)
    yield session
    yield _gauge("bayou_cluster_joined", "1 once registered and the first reconcile is done.",
                 1 if node.started.is_set() else 0)


def render(families: Iterable[Family]) -> str:
    out: list[str] = []
    for family in families:
        family.render(out)
    return "".join(out)


class Exposition:
    """A server's /metrics: its own registry (the broker's collector and the process collector)."""

    def __init__(self, server: BayouServer) -> None:
        self.collector = BrokerCollector(server)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        self.process = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.process)
        ProcessCollector(registry=self.registry)

    def text(self) -> bytes:
        """Prometheus' text format 0.0.4."""
        process: bytes = generate_latest(self.process)
        return render(self.collector.families()).encode() + process


def routes(server: BayouServer) -> Iterable[web.RouteDef]:
    exposition = Exposition(server)

    async def metrics(request: web.Request) -> web.Response:
        accept = request.headers.get("Accept", "")
        if "application/openmetrics-text" in accept:  # prometheus-client writes that format
            encode, content_type = choose_encoder(accept)
            return web.Response(body=encode(exposition.registry), headers={"Content-Type": content_type})
        return web.Response(body=exposition.text(), headers={"Content-Type": CONTENT_TYPE_PLAIN_0_0_4})

    return [web.get("/metrics", metrics)]


__all__ = ["BrokerCollector", "Exposition", "Family", "render", "routes"]
