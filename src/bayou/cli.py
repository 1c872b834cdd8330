"""The ``bayou`` command: run a broker, manage topics, produce and consume."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from bayou import __version__
from bayou.errors import BayouError

if TYPE_CHECKING:
    from bayou.client.tls import TlsConfig

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def _client(bootstrap: str):  # type: ignore[no-untyped-def]
    from bayou.client.rtes import RtesClient

    host, _sep, port = bootstrap.rpartition(":")
    return RtesClient(host or "127.0.0.1", int(port), tls=_tls())


_TLS_META = "bayou.tls"


def _remember_tls(ctx: click.Context, param: click.Parameter, value: object) -> None:
    if value:
        ctx.meta.setdefault(_TLS_META, {})[param.name] = value


def _tls() -> TlsConfig | None:
    """The client commands' --tls* options (or BAYOU_TLS* variables), None when none is given."""
    from bayou.client.tls import TlsConfig

    given = click.get_current_context().meta.get(_TLS_META, {})
    if not given:
        return None
    return TlsConfig(ca=given.get("tls_ca"), cert=given.get("tls_cert"), key=given.get("tls_key"))


def tls_options(f: Callable[..., None]) -> Callable[..., None]:
    """--tls, --tls-ca, --tls-cert, --tls-key on a client command (not passed to the function)."""
    options = [
        click.option("--tls", is_flag=True, envvar="BAYOU_TLS", expose_value=False, callback=_remember_tls,
                     help="Connect with TLS, verifying the broker against the system's CAs."),
        click.option("--tls-ca", metavar="FILE", envvar="BAYOU_TLS_CA", expose_value=False,
                     callback=_remember_tls, help="Connect with TLS; the broker's CA (PEM)."),
        click.option("--tls-cert", metavar="FILE", envvar="BAYOU_TLS_CERT", expose_value=False,
                     callback=_remember_tls, help="Client certificate (PEM) for mTLS."),
        click.option("--tls-key", metavar="FILE", envvar="BAYOU_TLS_KEY", expose_value=False,
                     callback=_remember_tls, help="Private key of --tls-cert."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _fail(exc: Exception) -> None:
    raise click.ClickException(str(exc))


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="bayou")
def main() -> None:
    """bayou: a persistent, partitioned, append-only log broker.

    Start a broker with `bayou serve`, then use `bayou topic`, `bayou produce` and
    `bayou consume` against it (they speak the V1 line protocol, port 9092 by default).
    """


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
@click.option("--http", metavar="HOST:PORT|off",
              help="HTTP listener: /metrics (Prometheus), /health, /ready. [default: 127.0.0.1:9080]")
@click.option("--advertised-host", metavar="HOST",
              help="Host name Cursus clients are told to connect to (METADATA, FIND_COORDINATOR). "
                   "[default: localhost]")
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
          iggy: str | None, tank: str | None, http: str | None, advertised_host: str | None,
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
    from bayou.config import load_config
    from bayou.server.app import run_server
    from bayou.server.logs import setup_logging

    setup_logging(log_level, log_format)
    try:
        cfg = load_config(config_file, data_dir=data_dir, fsync=fsync,
                          listeners={"rtes": rtes, "cursus": cursus, "iggy": iggy, "tank": tank,
                                     "http": http},
                          advertised_host=advertised_host, cluster=cluster, broker_id=broker_id,
                          replication=replication,
                          tls={"cert": tls_cert, "key": tls_key, "ca": tls_ca, "client_auth": tls_client_auth,
                               "plain": tls_plain})
    except BayouError as exc:
        raise click.BadParameter(exc.message) from None
    try:
        run_server(cfg)
    except BayouError as exc:
        _fail(exc)
    except OSError as exc:
        raise click.ClickException(f"cannot start: {exc}") from None


bootstrap_option = click.option("--bootstrap", "-b", default=DEFAULT_BOOTSTRAP, show_default=True,
                                help="Broker address (V1 protocol).")


@main.group()
def topic() -> None:
    """Create, list, describe and delete topics on a running broker."""


@topic.command("create")
@click.argument("name")
@click.option("--partitions", "-p", default=3, show_default=True, type=click.IntRange(1))
@click.option("--replication-factor", "-r", type=click.IntRange(1),
              help="Replicas per partition. [default: the broker's replication_factor]")
@click.option("--config", "-c", "configs", multiple=True, metavar="KEY=VALUE",
              help="Topic config, e.g. retention.ms=3600000, segment.bytes=1048576, fsync=never.")
@bootstrap_option
@tls_options
def topic_create(name: str, partitions: int, replication_factor: int | None, configs: tuple[str, ...],
                 bootstrap: str) -> None:
    """Create topic NAME."""
    cfg = {}
    for item in configs:
        k, sep, v = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--config")
        cfg[k] = v
    try:
        with _client(bootstrap) as c:
            c.create_topic(name, partitions, replication_factor, cfg)
    except (OSError, Exception) as exc:
        _fail(exc)
    click.echo(f"created topic {name} ({partitions} partitions)")


@topic.command("list")
@bootstrap_option
@tls_options
def topic_list(bootstrap: str) -> None:
    """List topics."""
    try:
        with _client(bootstrap) as c:
            names = c.list_topics()
    except (OSError, Exception) as exc:
        _fail(exc)
        return
    for n in names:
        click.echo(n)


@topic.command("describe")
@click.argument("name")
@bootstrap_option
@tls_options
def topic_describe(name: str, bootstrap: str) -> None:
    """Show partitions, offsets and config of topic NAME."""
    from bayou.client.rtes import int_list

    try:
        with _client(bootstrap) as c:
            d = c.describe_topic(name)
    except (OSError, Exception) as exc:
        _fail(exc)
        return
    click.echo(f"topic: {d['topic']}  partitions: {d['partitions']}  "
               f"replication factor: {d['replication_factor']}")
    click.echo(f"config: {d['config'] or '(defaults)'}")
    starts, ends, hws = int_list(d["log_start"]), int_list(d["log_end"]), int_list(d["hw"])
    sizes = int_list(d["size_bytes"])
    roles = d["roles"][1:-1].split()
    status = d["status"][1:-1].split() or ["ok"] * len(roles)
    click.echo(f"{'partition':>9} {'role':>8} {'log start':>10} {'log end':>10} {'hw':>10} {'bytes':>12}"
               f" {'status':>8}")
    for i, (s, e, h, b) in enumerate(zip(starts, ends, hws, sizes, strict=True)):
        state, _sep, reason = status[i].partition(":")
        click.echo(f"{i:>9} {roles[i]:>8} {s:>10} {e:>10} {h:>10} {b:>12} {state:>8}")
        if reason:
            from urllib.parse import unquote

            click.echo(f"          offline: {unquote(reason)}")


@topic.command("delete")
@click.argument("name")
@bootstrap_option
@tls_options
def topic_delete(name: str, bootstrap: str) -> None:
    """Delete topic NAME and all its data."""
    try:
        with _client(bootstrap) as c:
            c.delete_topic(name)
    except (OSError, Exception) as exc:
        _fail(exc)
    click.echo(f"deleted topic {name}")


@main.command()
@click.argument("topic_name", metavar="TOPIC")
@click.argument("values", nargs=-1)
@click.option("--key", "-k", default="", help="Key for every value (chooses the partition).")
@click.option("--acks", type=click.Choice(["0", "1", "all"]), default="1", show_default=True)
@bootstrap_option
@tls_options
def produce(topic_name: str, values: tuple[str, ...], key: str, acks: str, bootstrap: str) -> None:
    """Produce VALUES (or one value per stdin line) to TOPIC.

    \b
    Examples:
      bayou produce orders created paid shipped --key user1
      printf 'a\\nb\\n' | bayou produce orders
    """
    from bayou.client.rtes import RtesClient, UnsafeField

    items = list(values) if values else [ln.rstrip("\r\n") for ln in sys.stdin]
    try:  # every record is checked before the first is sent: nothing is partly produced
        for v in items:
            RtesClient.check_record(topic_name, key, v)
    except UnsafeField as exc:
        _fail(exc)
    try:
        with _client(bootstrap) as c:
            for v in items:
                r = c.produce(topic_name, key, v, acks)
                click.echo(f"partition={r.partition} offset={r.offset}")
    except (OSError, Exception) as exc:
        _fail(exc)


@main.command()
@click.argument("topic_name", metavar="TOPIC")
@click.option("--partition", "-p", type=int, default=None, help="Only this partition [default: all].")
@click.option("--offset", "-o", type=click.IntRange(0), default=0, show_default=True,
              help="Start offset in each partition.")
@click.option("--follow", "-f", is_flag=True, help="Keep polling for new records (Ctrl-C stops).")
@bootstrap_option
@tls_options
def consume(topic_name: str, partition: int | None, offset: int, follow: bool, bootstrap: str) -> None:
    """Print records of TOPIC as PARTITION:OFFSET<TAB>VALUE."""
    try:
        with _client(bootstrap) as c:
            count = int(c.describe_topic(topic_name)["partitions"])
            parts = [partition] if partition is not None else list(range(count))
            positions = dict.fromkeys(parts, offset)
            while True:
                got = 0
                for p in parts:
                    records, _hw = c.consume(topic_name, p, positions[p])
                    for off, value in records:
                        click.echo(f"{p}:{off}\t{value}")
                        positions[p] = off + 1
                    got += len(records)
                if not follow:
                    if got == 0:
                        break
                    continue
                if got == 0:
                    time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    except (OSError, Exception) as exc:
        _fail(exc)


iggy_option = click.option(
    "--iggy-bootstrap", "iggy_bootstrap", default="127.0.0.1:8090", show_default=True, metavar="HOST:PORT",
    envvar="BAYOU_IGGY_BOOTSTRAP", help="The broker's Iggy listener, which the Python SDK speaks.")
user_option = click.option("--user", default="iggy", show_default=True, envvar="BAYOU_USER",
                           help="Iggy user name.")
password_option = click.option("--password", default="iggy", show_default=True, envvar="BAYOU_PASSWORD",
                               help="Iggy password.")


@main.group()
def group() -> None:
    """Consumer groups, committed offsets and lag (through the Python SDK, bayou.client)."""


@group.command("list")
@click.argument("topic_name", metavar="TOPIC")
@iggy_option
@tls_options
@user_option
@password_option
def group_list(topic_name: str, iggy_bootstrap: str, user: str, password: str) -> None:
    """List the consumer groups of TOPIC."""
    from bayou.client import Client

    try:
        with Client(iggy_bootstrap, username=user, password=password, tls=_tls()) as c:
            names = c.list_groups(topic_name)
    except (OSError, Exception) as exc:
        _fail(exc)
        return
    for n in names:
        click.echo(n)


@group.command("describe")
@click.argument("group_name", metavar="GROUP")
@click.argument("topic_name", metavar="TOPIC")
@iggy_option
@tls_options
@user_option
@password_option
def group_describe(group_name: str, topic_name: str, iggy_bootstrap: str, user: str, password: str) -> None:
    """Show GROUP's members, committed offsets and lag on TOPIC."""
    from bayou.client import Client

    try:
        with Client(iggy_bootstrap, username=user, password=password, tls=_tls()) as c:
            desc = c.describe_group(group_name, topic_name)
            topic_desc = c.describe_topic(topic_name)
            done = c.committed(group_name, topic_name)
    except (OSError, Exception) as exc:
        _fail(exc)
        return
    owner = {p: member for member, parts in desc.members for p in parts}
    click.echo(f"group: {group_name}  topic: {topic_name}  members: {len(desc.members)}")
    click.echo(f"{'partition':>9} {'member':>8} {'committed':>10} {'log end':>10} {'lag':>10}")
    for p in topic_desc.partitions:
        c_off = done.get(p.partition)
        lag = p.latest - max(c_off if c_off is not None else p.earliest, p.earliest)
        click.echo(f"{p.partition:>9} {owner.get(p.partition, '-')!s:>8} "
                   f"{'-' if c_off is None else c_off!s:>10} {p.latest:>10} {lag:>10}")


@main.command()
@click.option("--data-dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="The data directory of a stopped broker.")
@click.option("--repair", is_flag=True,
              help="Cut each damaged segment at its first bad batch and rebuild its indexes, as "
                   "crash recovery does (the records from there to the next segment are lost).")
def verify(data_dir: Path, repair: bool) -> None:
    """Check every segment and index of a stopped broker's data directory.

    \b
    Reports each damaged file with the position of its first bad batch. Exit code (as fsck):
      0  no damage
      1  damage found and all of it repaired (--repair)
      4  damage left: found without --repair, or not repairable
      8  the check could not run (not a data directory, broker running)
    """
    from bayou.storage.verify import EXIT_ERROR, verify_data_dir

    try:
        report = verify_data_dir(data_dir, repair=repair)
    except (BayouError, OSError) as exc:
        click.echo(f"bayou verify: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    for finding in report.findings:
        for line in finding.lines(report.root):
            click.echo(line)
    click.echo(report.summary())
    sys.exit(report.exit_code)
