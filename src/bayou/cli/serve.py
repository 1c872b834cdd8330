"""``bayou serve`` (run a broker) and ``bayou verify`` (check a stopped broker's data)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from bayou.cli.common import advance, progress
from bayou.cli.root import main
from bayou.errors import BayouError


@main.command()
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="TOML configuration file (flags given here override it).")
@click.option("--data-dir", help="Where logs, offsets and group state live. [default: ./data]")
@click.option("--rtes", metavar="HOST:PORT|off",
              help="V1 line protocol listener. [default: 127.0.0.1:9092; 0.0.0.0:9092 for every interface]")
@click.option("--cursus", metavar="HOST:PORT|off",
              help="Cursus listener (text commands + binary batches). [default: 127.0.0.1:9000]")
@click.option("--iggy", metavar="HOST:PORT|off",
              help="Apache Iggy binary transport listener (0.8 and 0.9 clients). [default: 127.0.0.1:8090]")
@click.option("--tank", metavar="HOST:PORT|off",
              help="TANK listener (tank-cli and TANK 4.0 clients). [default: 127.0.0.1:11011]")
@click.option("--kafka", metavar="HOST:PORT|off",
              help="A Kafka-only listener. Kafka clients are also served on the --rtes port (the first "
                   "byte tells V1 from Kafka). [default: off]")
@click.option("--http", metavar="HOST:PORT|off",
              help="HTTP listener: /metrics (Prometheus), /health, /ready. [default: 127.0.0.1:9080]")
@click.option("--advertised-host", metavar="HOST",
              help="Host name Cursus and Kafka clients are told to connect to (METADATA, FIND_COORDINATOR). "
                   "[default: localhost]")
@click.option("--advertised-port", "advertised_ports", metavar="LISTENER=PORT", multiple=True,
              help="The port clients are told for a listener when it is not the bound one (NAT, "
                   "containers): kafka=19092; repeatable.")
@click.option("--fsync", metavar="always|interval:MS|never",
              help="When appends reach the disk: 'always' acknowledges after fsync (group commit). "
                   "[default: always]")
@click.option("--cluster", metavar="zk://HOST:PORT[,HOST:PORT]/PATH",
              help="Join the cluster coordinated by this ZooKeeper ensemble (cluster mode).")
@click.option("--broker-id", type=click.IntRange(0), help="This broker's id in the cluster. [default: 0]")
@click.option("--replication", metavar="HOST:PORT",
              help="Cluster mode: the listener followers fetch from. [default: 127.0.0.1:9093]")
@click.option("--tls-cert", metavar="FILE", help="PEM certificate (chain): turns TLS on for every listener.")
@click.option("--tls-key", metavar="FILE", help="PEM private key of --tls-cert.")
@click.option("--tls-ca", metavar="FILE",
              help="PEM CA certificates that sign client certificates (and the other brokers' in a cluster).")
@click.option("--tls-client-auth", type=click.Choice(["none", "optional", "required"]),
              help="Whether clients must present a certificate signed by --tls-ca. [default: none]")
@click.option("--tls-plain", metavar="LISTENER", multiple=True,
              help="Leave this listener (rtes, cursus, iggy, tank, replication) in plain text; repeatable.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
@click.option("--log-format", default="json", show_default=True, type=click.Choice(["json", "text"]))
def serve(config_file: Path | None, data_dir: str | None, rtes: str | None, cursus: str | None,
          iggy: str | None, tank: str | None, kafka: str | None, http: str | None,
          advertised_host: str | None, advertised_ports: tuple[str, ...],
          fsync: str | None, cluster: str | None, broker_id: int | None, replication: str | None,
          tls_cert: str | None, tls_key: str | None, tls_ca: str | None, tls_client_auth: str | None,
          tls_plain: tuple[str, ...],
          log_level: str, log_format: str) -> None:
    """Run one broker with every implemented protocol on its port.

    \b
    Examples:
      bayou serve                                  # defaults, data in ./data
      bayou serve --data-dir /var/lib/bayou --fsync interval:100
      bayou serve --rtes 127.0.0.1:19092 --cursus off --iggy off --tank off --config bayou.toml
      bayou serve --cluster zk://127.0.0.1:2181/bayou --broker-id 1 --data-dir data1
      bayou serve --tls-cert broker.pem --tls-key broker.key --tls-ca ca.pem --tls-client-auth required
    """
    from bayou.cli.recovery import recovery_bar
    from bayou.config import load_config, parse_advertised_ports
    from bayou.server.app import BayouServer, run_server
    from bayou.server.logs import setup_logging

    setup_logging(log_level, log_format)
    try:
        cfg = load_config(config_file, data_dir=data_dir, fsync=fsync,
                          listeners={"rtes": rtes, "cursus": cursus, "iggy": iggy, "tank": tank,
                                     "kafka": kafka, "http": http},
                          advertised_host=advertised_host, cluster=cluster, broker_id=broker_id,
                          replication=replication,
                          tls={"cert": tls_cert, "key": tls_key, "ca": tls_ca, "client_auth": tls_client_auth,
                               "plain": tls_plain},
                          advertised_ports=parse_advertised_ports(advertised_ports))
    except BayouError as exc:
        raise click.BadParameter(exc.message) from None
    try:
        server = BayouServer(cfg)
        with recovery_bar(server.broker.recovery):  # on a terminal: a bar while recovery runs
            run_server(server)
    except BayouError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot start: {exc}") from None


@main.command()
@click.option("--data-dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="The data directory of a stopped broker.")
@click.option("--repair", is_flag=True,
              help="Cut each damaged segment at its first bad batch and rebuild its indexes, as "
                   "crash recovery does (the records from there to the next segment are lost).")
def verify(data_dir: Path, repair: bool) -> None:
    """Check every segment and index of a stopped broker's data directory.

    A progress line (partitions checked) is drawn on stderr when it is a terminal.

    \b
    Reports each damaged file with the position of its first bad batch. Exit code (as fsck):
      0  no damage
      1  damage found and all of it repaired (--repair)
      4  damage left: found without --repair, or not repairable
      8  the check could not run (not a data directory, broker running)
    """
    from bayou.storage.verify import EXIT_ERROR, verify_data_dir

    try:
        with progress("checking", None) as bar:
            report = verify_data_dir(data_dir, repair=repair,
                                     progress=lambda part: advance(bar, 1, f"checking {part}"))
    except (BayouError, OSError) as exc:
        click.echo(f"bayou verify: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    for finding in report.findings:
        for line in finding.lines(report.root):
            click.echo(line)
    click.echo(report.summary())
    sys.exit(report.exit_code)
