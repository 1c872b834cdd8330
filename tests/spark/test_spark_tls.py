"""The Spark source and sink over TLS (issue 14.6): Kafka-style options bayou.security.protocol=SSL,
bayou.ssl.ca.location and a client certificate (bayou.ssl.certificate.location,
bayou.ssl.key.location) against a broker that requires one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sparkutil import wait_port

from bayou.client import Client, TlsConfig
from bayou.spark.errors import BayouOptionError
from bayou.spark.options import Options, parse_tls
from support.brokers import BrokerProcess
from support.tls import Certs, make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_broker(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("tls-broker") / "data", *certs.serve_args("required"),
                         fsync="never").start()
    wait_port(proc.iggy_port)
    try:
        yield proc
    finally:
        proc.stop()


def ssl_options(broker: BrokerProcess, certs: Certs) -> dict[str, str]:
    return {"bayou.bootstrap.servers": f"localhost:{broker.iggy_port}", "bayou.security.protocol": "SSL",
            "bayou.ssl.ca.location": certs.ca, "bayou.ssl.certificate.location": certs.alice_cert,
            "bayou.ssl.key.location": certs.alice_key}


def test_spark_reads_and_writes_over_tls(spark: Any, tls_broker: BrokerProcess, certs: Certs) -> None:
    tls = TlsConfig(ca=certs.ca, cert=certs.alice_cert, key=certs.alice_key)
    with Client(f"localhost:{tls_broker.iggy_port}", tls=tls) as c:
        c.create_topic("spark-in", 2)
        c.send("spark-in", 0, [b"a%d" % i for i in range(50)])
        c.send("spark-in", 1, [b"b%d" % i for i in range(20)])
        opts = ssl_options(tls_broker, certs)
        df = spark.read.format("bayou").options(subscribe="spark-in", **opts).load()
        assert df.count() == 70
        df.select("value").write.format("bayou").options(topic="spark-out", **opts).mode("append").save()
        got = sorted(bytes(v) for p in c.describe_topic("spark-out").partitions
                     for v in c.fetch_arrow("spark-out", p.partition, 0, 1000).column("value").to_pylist())
        assert got == sorted([b"a%d" % i for i in range(50)] + [b"b%d" % i for i in range(20)])
    plain = {k: v for k, v in opts.items() if not k.startswith(("bayou.security", "bayou.ssl"))}
    with pytest.raises(Exception, match="broker closed the connection"):  # no SSL options
        spark.read.format("bayou").options(subscribe="spark-in", **plain).load().count()


def test_ssl_options_are_checked() -> None:
    assert parse_tls(Options({})) is None
    tls = parse_tls(Options({"bayou.security.protocol": "ssl", "bayou.ssl.ca.location": "/ca.pem",
                             "bayou.ssl.endpoint.identification.algorithm": "none"}))
    assert tls == TlsConfig(ca="/ca.pem", check_hostname=False)
    for bad, name in (({"bayou.security.protocol": "SASL_SSL"}, "bayou.security.protocol"),
                      ({"bayou.ssl.ca.location": "/ca.pem"}, "bayou.ssl.ca.location"),
                      ({"bayou.security.protocol": "SSL", "bayou.ssl.certificate.location": "/c.pem"},
                       "bayou.ssl.key.location")):
        with pytest.raises(BayouOptionError, match=name):
            parse_tls(Options(bad))
