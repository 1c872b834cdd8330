"""What every ``bayou`` client command shares: broker addresses (a bare host means the default
port), the TLS and login options, one-line errors that name the address, quiet exits on a closed
pipe, and output that is a table on a terminal and plain text or JSON otherwise."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rich.progress import Progress

    from bayou.client.tls import TlsConfig

DEFAULT_HOST = "127.0.0.1"
V1_PORT = 9092
IGGY_PORT = 8090
HTTP_PORT = 9080


@dataclass(frozen=True, slots=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_address(text: str, default_port: int) -> Address:
    """``HOST:PORT``, ``HOST`` (the default port), ``:PORT`` (the local host) or ``[V6]:PORT``."""
    text = text.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"{text!r} is not HOST[:PORT]")
    elif text.count(":") > 1:  # a bare IPv6 address
        host, port = text, ""
    else:
        host, _sep, port = text.partition(":")
    if not port:
        return Address(host or DEFAULT_HOST, default_port)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r}: the port must be a number from 1 to 65535")
    return Address(host or DEFAULT_HOST, int(port))


def _bootstrap(ctx: click.Context, param: click.Parameter, value: str) -> Address:
    try:
        return parse_address(value, V1_PORT)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


bootstrap_option = click.option(
    "--bootstrap", "-b", default=f"{DEFAULT_HOST}:{V1_PORT}", show_default=True, envvar="BAYOU_BOOTSTRAP",
    metavar="HOST[:PORT]", callback=_bootstrap,
    help=f"Broker address (its V1 listener; a bare host means port {V1_PORT}).")


def iggy_address(bootstrap: Address, iggy: str | None) -> Address:
    """The Iggy listener the SDK commands use: ``--iggy-bootstrap``, else -b's host on 8090."""
    if iggy is None:
        return Address(bootstrap.host, IGGY_PORT)
    try:
        return parse_address(iggy, IGGY_PORT)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--iggy-bootstrap") from None


iggy_option = click.option(
    "--iggy-bootstrap", "iggy_bootstrap", metavar="HOST[:PORT]", envvar="BAYOU_IGGY_BOOTSTRAP",
    help=f"The broker's Iggy listener, which the Python SDK speaks. [default: -b's host, port {IGGY_PORT}]")
user_option = click.option("--user", default="iggy", show_default=True, envvar="BAYOU_USER",
                           help="Iggy user name.")
password_option = click.option("--password", default="iggy", show_default=True, envvar="BAYOU_PASSWORD",
                               help="Iggy password.")


# -- TLS -----------------------------------------------------------------------------------------

_TLS_META = "bayou.tls"


def _remember_tls(ctx: click.Context, param: click.Parameter, value: object) -> None:
    if value:
        ctx.meta.setdefault(_TLS_META, {})[param.name] = value


def tls() -> TlsConfig | None:
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


# -- clients and their errors --------------------------------------------------------------------

_TARGET_META = "bayou.target"


def target(what: str, where: object) -> None:
    """Name the address the command talks to now: a connection error names it."""
    click.get_current_context().meta[_TARGET_META] = f"{what} at {where}"


def v1_client(bootstrap: Address):  # type: ignore[no-untyped-def]
    from bayou.client.rtes import RtesClient

    target("broker (V1)", bootstrap)
    return RtesClient(bootstrap.host, bootstrap.port, tls=tls())


def sdk_client(address: Address, user: str, password: str):  # type: ignore[no-untyped-def]
    from bayou.client import Client

    target("broker (Iggy)", address)
    return Client(str(address), username=user, password=password, tls=tls())


def _reason(exc: BaseException) -> str:
    text = (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)) or type(exc).__name__
    return text[:1].lower() + text[1:]


def error_line(exc: BaseException) -> str:
    """One line for a failure: connection problems name where the command was connecting to."""
    from bayou.client.errors import BrokerConnectionError

    where = click.get_current_context().meta.get(_TARGET_META)
    if isinstance(exc, BrokerConnectionError):
        # "cannot connect to [('h', p)]: [Errno 111] Connection refused" -> its reason
        reason = str(exc).rsplit("] ", 1)[-1] if "Errno" in str(exc) else str(exc)
        reason = reason[:1].lower() + reason[1:]
        return f"cannot reach the {where}: {reason}" if where else reason
    if isinstance(exc, (ConnectionError, TimeoutError, OSError)) and not isinstance(exc, FileNotFoundError):
        return f"cannot reach the {where}: {_reason(exc)}" if where else _reason(exc)
    return str(exc)


class MainGroup(click.Group):
    """The root command: a failing client command exits 1 with one line on stderr (never a
    traceback), and a reader that goes away (``bayou consume t | head``) ends it quietly."""

    def invoke(self, ctx: click.Context) -> Any:
        from bayou.client.errors import BayouClientError
        from bayou.client.rtes import RtesClientError, UnsafeField
        from bayou.errors import BayouError

        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            quiet_broken_pipe()
            ctx.exit(0)
        except (OSError, BayouClientError, RtesClientError, UnsafeField, BayouError) as exc:
            raise click.ClickException(error_line(exc)) from None


def quiet_broken_pipe() -> None:
    """stdout's reader is gone: send what is left (and Python's flush at exit) to /dev/null."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


# -- output --------------------------------------------------------------------------------------

def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def format_option(f: Callable[..., None]) -> Callable[..., None]:
    return click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
                        show_default=True,
                        help="text: a table on a terminal, plain columns otherwise; json: one document.")(f)


def print_json(doc: object) -> None:
    click.echo(json.dumps(doc, indent=2, sort_keys=False))


def print_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """A rich table on a terminal; otherwise whitespace-aligned columns with a header line."""
    cells = [["-" if v is None else str(v) for v in row] for row in rows]
    if stdout_is_terminal():
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title, title_justify="left")
        for col in columns:
            table.add_column(col, justify="right" if _numeric(col, cells, columns) else "left")
        for row in cells:
            table.add_row(*row)
        Console().print(table)
        return
    if title:
        click.echo(title)
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    click.echo("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def _numeric(col: str, cells: list[list[str]], columns: Sequence[str]) -> bool:
    i = list(columns).index(col)
    values = [row[i] for row in cells if row[i] != "-"]
    return bool(values) and all(v.lstrip("-").isdigit() for v in values)


@contextlib.contextmanager
def progress(description: str, total: int | None) -> Iterator[Progress | None]:
    """A progress bar on stderr when stderr is a terminal (None otherwise: nothing is drawn)."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = ([TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()]
               if total is not None else
               [SpinnerColumn(), TextColumn("{task.description}"), TextColumn("{task.completed}"),
                TimeElapsedColumn()])
    with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
        bar.add_task(description, total=total)
        yield bar


def advance(bar: Progress | None, n: int = 1, description: str | None = None) -> None:
    if bar is not None:
        task = bar.task_ids[0]
        bar.update(task, advance=n, description=description) if description else bar.advance(task, n)


# -- times ---------------------------------------------------------------------------------------

def parse_time(text: str) -> int:
    """Milliseconds since the epoch from ``1700000000000`` (ms), an ISO-8601 time
    (``2026-11-26T10:00:00Z``; no zone means UTC) or ``-DURATION`` before now (``-15m``, ``-2h``)."""
    text = text.strip()
    if text.lstrip("-").isdigit() and not text.startswith("-"):
        return int(text)
    units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    if text.startswith("-") and text[-1:] in units and text[1:-1].isdigit():
        now = int(datetime.now(UTC).timestamp() * 1000)
        return now - int(text[1:-1]) * units[text[-1]]
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a time: give milliseconds since the epoch, an ISO-8601 "
                                 "time (2026-11-26T10:00:00Z) or -DURATION (-15m, -2h, -1d)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def iso_ms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
