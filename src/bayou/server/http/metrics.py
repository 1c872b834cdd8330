"""``/metrics``: the broker's state in Prometheus' text format, read at scrape time.

Every value comes from a plain number the serving code already keeps (bayou/stats.py, the
request meters, the partitions' logs, the group coordinator, the cluster node) and is turned into
metric families only inside ``collect``; nothing on a request's path touches prometheus-client.
Each server has its own ``CollectorRegistry``, so brokers in one process (tests) never mix, and
the process collector adds ``process_open_fds`` / ``process_max_fds`` and the rest.

Names and labels follow Kafka's exporters where Kafka has the metric (``topic``, ``partition``,
``group``, ``request``); the README lists them all.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry, ProcessCollector
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


def _histogram(name: str, doc: str, labels: list[str]) -> HistogramMetricFamily:
    return HistogramMetricFamily(name, doc, labels=labels)


def _add_histogram(family: HistogramMetricFamily, values: list[str], hist: Histogram) -> None:
    buckets, total = hist.snapshot()
    family.add_metric(values, [(floatToGoString(le), n) for le, n in buckets], total)  # type: ignore[no-untyped-call]


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


class BrokerCollector(Collector):
    def __init__(self, server: BayouServer) -> None:
        self.server = server

    def collect(self) -> Iterator[Metric]:
        yield from self._server()
        yield from self._requests()
        yield from self._topics()
        yield from self._groups()
        yield from self._storage()
        if self.server.cluster is not None:
            yield from _cluster(self.server.cluster)

    def _server(self) -> Iterator[Metric]:
        server = self.server
        info = GaugeMetricFamily("bayou_build_info", "The running bayou's version (always 1).",
                                 labels=["version", "broker_id"])
        info.add_metric([__version__, str(server.broker.config.broker_id)], 1)
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
        conns = GaugeMetricFamily("bayou_connections", "Open client connections.", labels=["protocol"])
        refused = CounterMetricFamily("bayou_connections_refused", "Connections refused at admission "
                                      "(limits, draining).", labels=["protocol"])
        for name, listener in list(server.listeners.items()):
            conns.add_metric([name], len(listener.connections))
            refused.add_metric([name], listener.refused)
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
        handles = server.broker.store.handles
        yield _gauge("bayou_log_open_files", "Segment and index files open in the handle cache.",
                     handles.open_count)
        yield _gauge("bayou_log_open_files_max", "The handle cache's bound (max_open_files).",
                     handles.capacity)

    def _requests(self) -> Iterator[Metric]:
        requests = CounterMetricFamily("bayou_requests", "Requests answered, per protocol and command.",
                                       labels=["protocol", "request"])
        errors = CounterMetricFamily("bayou_request_errors", "Requests answered with an error.",
                                     labels=["protocol", "request"])
        latency = _histogram("bayou_request_duration_seconds",
                             "Time from a request's dispatch to its reply, per protocol.", ["protocol"])
        for protocol, meter in sorted(self.server.meters.items()):
            for command, (n, failed) in sorted(meter.commands.items()):
                requests.add_metric([protocol, command], n)
                errors.add_metric([protocol, command], failed)
            _add_histogram(latency, [protocol], meter.latency)
        yield requests
        yield errors
        yield latency

    def _topics(self) -> Iterator[Metric]:
        per_topic = {name: CounterMetricFamily(f"bayou_topic_{name}", doc, labels=["topic"])
                     for name, doc in (("bytes_in", "Bytes produced by clients (stored batch bytes)."),
                                       ("records_in", "Records produced by clients."),
                                       ("bytes_out", "Bytes fetched by consumers (not replica fetches)."),
                                       ("records_out", "Records fetched by consumers."))}
        partitions = GaugeMetricFamily("bayou_topic_partitions", "Partitions of the topic.", labels=["topic"])
        labels = ["topic", "partition"]
        part = {name: GaugeMetricFamily(f"bayou_partition_{name}", doc, labels=labels) for name, doc in (
            ("log_start_offset", "The first offset still in the log."),
            ("log_end_offset", "The offset the next record gets."),
            ("high_watermark", "Consumers see offsets below it."),
            ("size_bytes", "Bytes of the partition's segments."),
            ("segments", "Segment files of the partition."),
            ("offline", "1 when the partition is quarantined (damaged data)."))}
        for name, topic in sorted(self.server.broker.topics.items()):
            sums = dict.fromkeys(per_topic, 0)
            partitions.add_metric([name], len(topic.partitions))
            for p in list(topic.partitions):
                sums["bytes_in"] += p.bytes_in
                sums["records_in"] += p.records_in
                sums["bytes_out"] += p.bytes_out
                sums["records_out"] += p.records_out
                plog = p.log
                values = [name, str(p.index)]
                part["log_start_offset"].add_metric(values, plog.log_start_offset)
                part["log_end_offset"].add_metric(values, plog.next_offset)
                part["high_watermark"].add_metric(values, p.high_watermark)
                part["size_bytes"].add_metric(values, plog.size_bytes)
                part["segments"].add_metric(values, len(plog.segments))
                part["offline"].add_metric(values, 0 if plog.damage is None else 1)
            for key, family in per_topic.items():
                family.add_metric([name], sums[key])
        yield from per_topic.values()
        yield partitions
        yield from part.values()

    def _groups(self) -> Iterator[Metric]:
        broker = self.server.broker
        labels = ["group", "topic", "partition"]
        committed = GaugeMetricFamily("bayou_consumer_group_committed_offset",
                                      "The group's committed offset (the next to read).", labels=labels)
        lag = GaugeMetricFamily("bayou_consumer_group_lag",
                                "Records between the committed offset and the high watermark.", labels=labels)
        total_lag: dict[tuple[str, str], int] = defaultdict(int)
        for (group, topic, index), offset in sorted(broker.groups.offsets.items()):
            values = [group, topic, str(index)]
            committed.add_metric(values, offset)
            t = broker.topics.get(topic)
            if t is None or index >= len(t.partitions):
                continue
            p = t.partitions[index]
            behind = max(0, p.high_watermark - max(offset, p.log.log_start_offset))
            lag.add_metric(values, behind)
            total_lag[(group, topic)] += behind
        yield committed
        yield lag
        lag_sum = GaugeMetricFamily("bayou_consumer_group_lag_sum", "The group's lag over the topic's "
                                    "partitions with a committed offset.", labels=["group", "topic"])
        for (group, topic), behind in sorted(total_lag.items()):
            lag_sum.add_metric([group, topic], behind)
        yield lag_sum
        members = GaugeMetricFamily("bayou_consumer_group_members", "Members of the group.",
                                    labels=["group", "topic", "state"])
        for name, g in sorted(broker.groups.groups.items()):
            members.add_metric([name, g.topic, str(g.state.value)], len(g.members))
        yield members

    def _storage(self) -> Iterator[Metric]:
        fsync = _histogram("bayou_log_fsync_duration_seconds", "fsyncs of partition logs "
                           "(one per group commit).", [])
        _add_histogram(fsync, [], STORAGE.fsync_seconds)
        yield fsync
        batch = _histogram("bayou_log_group_commit_records", "Records made durable by one fsync.", [])
        _add_histogram(batch, [], STORAGE.group_commit_records)
        yield batch
        yield CounterMetricFamily("bayou_log_fsync_failures", "fsyncs that failed.",
                                  value=STORAGE.fsync_failures)


def _cluster(node: ClusterNode) -> Iterator[Metric]:
    me = node.me
    roles = {"leader": 0, "follower": 0}
    under = 0
    isr = GaugeMetricFamily("bayou_cluster_partition_isr_size", "In-sync replicas of a partition "
                            "this broker holds.", labels=["topic", "partition"])
    replicas = GaugeMetricFamily("bayou_cluster_partition_replicas", "Assigned replicas of a partition "
                                 "this broker holds.", labels=["topic", "partition"])
    for name, topic in sorted(node.broker.topics.items()):
        for part in list(topic.partitions):
            rs = part.cluster
            if rs is None or (me not in rs.replicas and not rs.is_leader):
                continue
            roles["leader" if rs.is_leader else "follower"] += 1
            isr.add_metric([name, str(part.index)], len(rs.isr))
            replicas.add_metric([name, str(part.index)], len(rs.replicas))
            if rs.is_leader and len(rs.isr) < len(rs.replicas):
                under += 1
    counts = GaugeMetricFamily("bayou_cluster_partitions", "Partitions this broker leads or follows.",
                               labels=["role"])
    for role, n in roles.items():
        counts.add_metric([role], n)
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
    session = GaugeMetricFamily("bayou_zookeeper_session_state", "1 for the ZooKeeper session's state.",
                                labels=["state"])
    for s in ZK_STATES:
        session.add_metric([s.lower()], 1 if s == state else 0)
    yield session
    yield _gauge("bayou_cluster_joined", "1 once registered and the first reconcile is done.",
                 1 if node.started.is_set() else 0)


def registry_for(server: BayouServer) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(server))
    ProcessCollector(registry=registry)
    return registry


def routes(server: BayouServer) -> Iterable[web.RouteDef]:
    registry = registry_for(server)

    async def metrics(request: web.Request) -> web.Response:
        # Prometheus' text format, or OpenMetrics when the scraper asks for it
        encode, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encode(registry), headers={"Content-Type": content_type})

    return [web.get("/metrics", metrics)]


__all__ = ["BrokerCollector", "registry_for", "routes"]
