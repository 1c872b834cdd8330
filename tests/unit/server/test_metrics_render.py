"""/metrics' own text writer (server/http/metrics.py ``render``) gives exactly the samples
prometheus-client's writer gives for the same families, label values with quotes, backslashes
and newlines included, and its TYPE and HELP lines parse."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bayou.server.http.metrics import Exposition, Family, render
from bayou.stats import LATENCY_BUCKETS, Histogram
from support.brokers import start_inprocess


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for f in text_string_to_metric_families(text) for s in f.samples
            if not s.name.startswith("process_")}


async def test_render_matches_prometheus_client(tmp_path: Path) -> None:
    server = await start_inprocess(tmp_path / "data")
    try:
        await server.broker.create_topic("orders", 3)
        await server.broker.create_topic("a.b-c_d", 1)
        server.broker.groups.offsets[('we"ird\\group\nname', "orders", 1)] = 0
        server.broker.groups.offsets[("plain", "orders", 0)] = 0
        exposition = Exposition(server)
        ours = exposition.text().decode()
        theirs = generate_latest(exposition.registry).decode()
        assert _samples(ours) == _samples(theirs)
        assert ('bayou_consumer_group_lag{group="we\\"ird\\\\group\\nname",topic="orders",partition="1"} 0\n'
                in ours)
        assert "# TYPE bayou_requests_total counter\n" in ours
        families = {f.name: f.type for f in text_string_to_metric_families(ours)}
        assert families["bayou_requests"] == "counter"
        assert families["bayou_request_duration_seconds"] == "histogram"
        assert families["bayou_partition_log_end_offset"] == "gauge"
    finally:
        await server.stop()


def test_histogram_rendering() -> None:
    h = Histogram(LATENCY_BUCKETS)
    for v in (0.00005, 0.003, 0.003, 20.0):
        h.observe(v)
    f = Family("x_seconds", "histogram", "doc", ("protocol",))
    f.add_histogram(("rtes",), h)
    text = render([f])
    assert 'x_seconds_bucket{protocol="rtes",le="0.0001"} 1\n' in text
    assert 'x_seconds_bucket{protocol="rtes",le="0.005"} 3\n' in text
    assert 'x_seconds_bucket{protocol="rtes",le="+Inf"} 4\n' in text
    assert 'x_seconds_count{protocol="rtes"} 4\n' in text
    assert _samples(text) == _samples(generate_latest_of(f))


def generate_latest_of(family: Family) -> str:
    from prometheus_client import CollectorRegistry

    class One:
        def collect(self):  # type: ignore[no-untyped-def]
            yield family.metric()

    reg = CollectorRegistry(auto_describe=False)
    reg.register(One())  # type: ignore[arg-type]
    return generate_latest(reg).decode()
