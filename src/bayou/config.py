"""Configuration: embedded defaults, then a TOML file, then command-line flags.

The file is checked against a schema before anything starts: an unknown key, or a value whose TOML
type is not the key's (``default_partitions = "three"``, ``auto_create_topics = "false"``), is an
``InvalidConfig`` naming the key and the expected type, and so is a file that is not UTF-8 or not
TOML; ``bayou serve`` prints it and exits with status 2.

Example ``bayou.toml``::

    data_dir = "./data"
    fsync = "always"                 # always | never | interval:<ms>
    max_connections = 10000

    advertised_host = "localhost"    # what Cursus METADATA / FIND_COORDINATOR tell clients

    [advertised_ports]               # a listener's port as clients reach it (NAT, containers),
    # kafka = 19092                  # when it is not the bound one (--advertised-port kafka=19092)

    [listeners]
    rtes = "127.0.0.1:9092"          # V1 line protocol, or "off" ("0.0.0.0:9092" for every interface)
    cursus = "127.0.0.1:9000"        # Cursus, or "off"
    iggy = "127.0.0.1:8090"          # Apache Iggy binary transport, or "off"
    tank = "127.0.0.1:11011"         # TANK, or "off"
    kafka = "off"                    # a Kafka-only listener (Kafka is also served on rtes' port)
    http = "127.0.0.1:9080"          # /metrics, /health, /ready, or "off"

    [iggy]
    root_username = "iggy"           # the root user made on first start (env IGGY_ROOT_USERNAME)
    root_password = "iggy"           # (env IGGY_ROOT_PASSWORD); stored argon2-hashed and as SCRAM credentials
    seed_dialect = false             # serve design-document clients, which have no login

    [security]
    anonymous = "all"                # all | read | none: what a client without login or certificate may do

    [broker]
    default_partitions = 3
    auto_create_topics = true
    replication_factor = 3
    min_insync_replicas = 2
    ack_all_timeout_ms = 2000
    group_session_timeout_ms = 10000

    [tls]                            # TLS on every listener (omit the table for plain text)
    cert = "broker.pem"              # PEM certificate chain (--tls-cert)
    key = "broker.key"               # PEM private key (--tls-key)
    ca = "ca.pem"                    # CA of client certificates, and of the other brokers (--tls-ca)
    client_auth = "none"             # none | optional | required (--tls-client-auth)
    plain = ["tank"]                 # listeners left in plain text (--tls-plain tank)

    [log]
    segment_bytes = 67108864
    segment_ms = 604800000
    retention_ms = 604800000         # -1 keeps forever
    retention_bytes = -1
    index_interval_bytes = 4096
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import typing
from pathlib import Path
from typing import Any

from bayou.broker.settings import BrokerConfig
from bayou.errors import InvalidConfig
from bayou.server.app import (
    DEFAULT_BIND,
    DEFAULT_OFF,
    PROTOCOLS,
    ClusterOptions,
    IggyOptions,
    SecurityOptions,
    ServerConfig,
)
from bayou.server.iggy.users import UserStoreError, check_root_credentials
from bayou.server.tls import TlsOptions
from bayou.storage.config import FsyncPolicy, LogConfig

# -- the schema ------------------------------------------------------------------------------------
# Every key of the file has one expected type, taken from the dataclass field it fills (so a field
# added to BrokerConfig, LogConfig, IggyOptions or ServerConfig is checked without an edit here).
# TOML already types its values, so the check is strict: "three" is not an integer and "false" is
# a string, not a boolean; an integer is accepted where a float is expected, as TOML readers do.

_KIND_NAMES = {int: "an integer", float: "a number", bool: "a boolean (true or false)", str: "a string"}


Kind = type | tuple[type, ...]


def _scalar_fields(cls: type, exclude: frozenset[str] = frozenset()) -> dict[str, Kind]:
    """Field name -> int, float, bool or str for every scalar field of dataclass ``cls``."""
    hints = typing.get_type_hints(cls)
    out: dict[str, Kind] = {}
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if f.name not in exclude and kind in _KIND_NAMES:
            out[f.name] = kind
    return out


_TABLES = ("listeners", "advertised_ports", "broker", "log", "iggy", "cluster", "security", "tls")
TOP_KEYS: dict[str, Kind] = {"data_dir": str, "fsync": str,
                             **_scalar_fields(ServerConfig, exclude=frozenset(_TABLES))}
BROKER_KEYS = _scalar_fields(BrokerConfig)
LOG_KEYS = _scalar_fields(LogConfig)
IGGY_KEYS = _scalar_fields(IggyOptions)
SECURITY_KEYS = _scalar_fields(SecurityOptions)
CLUSTER_KEYS: dict[str, Kind] = {"zookeeper": str, "replication": (str, int), "session_timeout_ms": int,
                                  "secret": str, "zk_auth": str}
TLS_KEYS: dict[str, Kind] = {**_scalar_fields(TlsOptions), "ca": str}
TLS_PLAIN = "plain"  # [tls] plain: an array of listener names


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return f"a {type(value).__name__}"


def _check(value: Any, kind: Kind, where: str) -> None:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    for k in kinds:
        if k is bool and isinstance(value, bool):
            return
        if k in (int, float) and isinstance(value, int) and not isinstance(value, bool):
            return
        if k is float and isinstance(value, float):
            return
        if k is str and isinstance(value, str):
            return
    expected = " or ".join(_KIND_NAMES[k] for k in kinds)
    raise InvalidConfig(f"{where} must be {expected}, not {_describe(value)}")


def _table(raw: dict[str, Any], name: str) -> dict[str, Any]:
    value = raw.get(name, {})
    if not isinstance(value, dict):
        raise InvalidConfig(f"[{name}] must be a table (a [{name}] section), not {_describe(value)}")
    return dict(value)


def _section(raw: dict[str, Any], name: str, schema: dict[str, Kind]) -> dict[str, Any]:
    """The keys of table ``name``, each checked against ``schema``; unknown keys are refused."""
    table = _table(raw, name)
    bad = sorted(set(table) - set(schema))
    if bad:
        raise InvalidConfig(f"unknown [{name}] keys: {', '.join(bad)} (known: {', '.join(sorted(schema))})")
    for key, value in table.items():
        _check(value, schema[key], f"[{name}] {key}")
    return table


def validate(raw: dict[str, Any]) -> None:
    """Check a parsed config file against the schema: every key known, every value of its type."""
    known = set(TOP_KEYS) | set(_TABLES)
    bad = sorted(set(raw) - known)
    if bad:
        raise InvalidConfig(f"unknown config keys: {', '.join(bad)} (known: {', '.join(sorted(known))})")
    for key, kind in TOP_KEYS.items():
        if key in raw:
            _check(raw[key], kind, key)
    _section(raw, "broker", BROKER_KEYS)
    _section(raw, "log", LOG_KEYS)
    _section(raw, "iggy", IGGY_KEYS)
    _section(raw, "cluster", CLUSTER_KEYS)
    SecurityOptions(**_section(raw, "security", SECURITY_KEYS))  # its value too: all, read or none
    tls = _table(raw, "tls")
    plain = tls.pop(TLS_PLAIN, [])
    _section({"tls": tls}, "tls", TLS_KEYS | {TLS_PLAIN: str})
    if not isinstance(plain, list) or not all(isinstance(v, str) for v in plain):
        raise InvalidConfig(f"[tls] plain must be an array of listener names, not {_describe(plain)}")
    listeners = _table(raw, "listeners")
    for name, value in listeners.items():
        if name not in PROTOCOLS:
            raise InvalidConfig(f"unknown listener {name!r}; known: {', '.join(PROTOCOLS)}")
        _check(value, (str, int), f"[listeners] {name}")
    _advertised_ports(_table(raw, "advertised_ports"), "[advertised_ports] ")


def _advertised_ports(table: dict[str, Any], where: str) -> dict[str, int]:
    """``[advertised_ports]`` (or the --advertised-port flags): listener name -> port 1..65535."""
    known = (*PROTOCOLS, "replication")
    out: dict[str, int] = {}
    for name, value in table.items():
        if name not in known:
            raise InvalidConfig(f"{where}unknown listener {name!r}; known: {', '.join(known)}")
        _check(value, int, f"{where}{name}")
        if not 1 <= value <= 65535:
            raise InvalidConfig(f"{where}{name}: port {value} out of range 1..65535")
        out[name] = int(value)
    return out


def parse_advertised_ports(items: tuple[str, ...] | list[str]) -> dict[str, int]:
    """--advertised-port NAME=PORT flags."""
    table: dict[str, Any] = {}
    for item in items:
        name, sep, port = item.partition("=")
        if not sep or not port.strip().isdigit():
            raise InvalidConfig(f"--advertised-port expects LISTENER=PORT (kafka=19092), not {item!r}")
        table[name.strip()] = int(port)
    return _advertised_ports(table, "--advertised-port ")


def read_config_file(path: Path) -> dict[str, Any]:
    """The TOML file at ``path``, parsed and validated (``validate``)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InvalidConfig(f"cannot read config {path}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidConfig(f"cannot read config {path}: not UTF-8 text (byte {exc.start}); TOML is UTF-8") \
            from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidConfig(f"cannot read config {path}: not valid TOML: {exc}") from None
    try:
        validate(raw)
    except InvalidConfig as exc:
        raise InvalidConfig(f"config {path}: {exc.message}") from None
    return raw


def parse_listen(text: str, protocol: str) -> tuple[str, int] | None:
    """``HOST:PORT``, ``:PORT``, ``PORT`` or ``off``."""
    t = text.strip()
    if t.lower() == "off":
        return None
    host, sep, port = t.rpartition(":")
    if not sep:
        host, port = DEFAULT_BIND, t
    host = host.strip("[]") or DEFAULT_BIND
    try:
        p = int(port)
    except ValueError:
        raise InvalidConfig(f"--{protocol} expects HOST:PORT or off, not {text!r}") from None
    if not 0 <= p <= 65535:
        raise InvalidConfig(f"--{protocol}: port {p} out of range")
    return host, p


def load_config(path: Path | None = None, *, data_dir: str | None = None, fsync: str | None = None,
                listeners: dict[str, str | None] | None = None,
                advertised_host: str | None = None, cluster: str | None = None,
                broker_id: int | None = None, replication: str | None = None,
                tls: dict[str, Any] | None = None,
                advertised_ports: dict[str, int] | None = None) -> ServerConfig:
    """``tls`` holds the --tls-* flags given (cert, key, ca, client_auth, plain): each replaces
    the file's ``[tls]`` key."""
    raw: dict[str, Any] = read_config_file(path) if path is not None else {}
    try:
        return _build(raw, data_dir=data_dir, fsync=fsync, listeners=listeners,
                      advertised_host=advertised_host, cluster=cluster, broker_id=broker_id,
                      replication=replication, tls=tls, advertised_ports=advertised_ports)
    except InvalidConfig as exc:
        if path is None:
            raise
        raise InvalidConfig(f"config {path}: {exc.message}") from None


def _build(raw: dict[str, Any], *, data_dir: str | None, fsync: str | None,
           listeners: dict[str, str | None] | None, advertised_host: str | None, cluster: str | None,
           broker_id: int | None, replication: str | None, tls: dict[str, Any] | None,
           advertised_ports: dict[str, int] | None = None) -> ServerConfig:
    fsync_text = fsync if fsync is not None else raw.get("fsync", "always")
    log_cfg = LogConfig(fsync=FsyncPolicy.parse(str(fsync_text)), **_table(raw, "log"))

    broker_raw = _table(raw, "broker")
    ddir = Path(data_dir if data_dir is not None else raw.get("data_dir", "data"))
    if broker_id is not None:
        broker_raw["broker_id"] = broker_id
    broker = BrokerConfig(data_dir=ddir, log=log_cfg, **broker_raw)
    cluster_raw = _table(raw, "cluster")
    zk_url = cluster if cluster is not None else cluster_raw.get("zookeeper")
    cluster_opts: ClusterOptions | None = None
    if zk_url:
        if not str(zk_url).startswith("zk://"):
            raise InvalidConfig(f"cluster expects zk://HOST:PORT[,HOST:PORT]/path, got {zk_url!r}")
        repl = (replication if replication is not None
                else cluster_raw.get("replication", f"{DEFAULT_BIND}:9093"))
        bind = parse_listen(str(repl), "replication") or (DEFAULT_BIND, 9093)
        secret = cluster_raw.get("secret") or os.environ.get("BAYOU_CLUSTER_SECRET") or None
        zk_auth = cluster_raw.get("zk_auth") or os.environ.get("BAYOU_ZK_AUTH") or None
        if zk_auth is not None and ":" not in zk_auth:
            raise InvalidConfig("[cluster] zk_auth must be USER:PASSWORD (ZooKeeper digest auth)")
        cluster_opts = ClusterOptions(str(zk_url), bind, int(cluster_raw.get("session_timeout_ms", 4000)),
                                      secret, zk_auth)

    addrs: dict[str, tuple[str, int] | None] = {
        name: None if name in DEFAULT_OFF else (DEFAULT_BIND, port) for name, (port, _f) in PROTOCOLS.items()}
    for name, value in _table(raw, "listeners").items():
        if name not in PROTOCOLS:
            raise InvalidConfig(f"unknown listener {name!r}; known: {', '.join(PROTOCOLS)}")
        addrs[name] = parse_listen(str(value), name)
    for name, value in (listeners or {}).items():
        if value is not None:
            addrs[name] = parse_listen(value, name)
    iggy_raw = _table(raw, "iggy")
    iggy = IggyOptions(**{
        **iggy_raw,
        "root_username": os.environ.get("IGGY_ROOT_USERNAME", str(iggy_raw.get("root_username", "iggy"))),
        "root_password": os.environ.get("IGGY_ROOT_PASSWORD", str(iggy_raw.get("root_password", "iggy"))),
    })
    if addrs.get("iggy") is not None:
        try:  # Iggy's rules for the root user, refused here rather than at the first login
            check_root_credentials(iggy.root_username, iggy.root_password)
        except UserStoreError as exc:
            raise InvalidConfig(f"Iggy root user {iggy.root_username!r}: {exc} (IGGY_ROOT_USERNAME, "
                                "IGGY_ROOT_PASSWORD, [iggy] root_username, root_password)") from None
    top = {k: raw[k] for k in TOP_KEYS if k in raw and k not in ("data_dir", "fsync")}
    if advertised_host:
        top["advertised_host"] = advertised_host
    security = SecurityOptions(**_table(raw, "security"))
    tls_opts = _tls(raw, tls)
    if cluster_opts is not None and tls_opts is not None and "replication" not in tls_opts.plain:
        tls_opts.server_context("required")  # replication over TLS is mTLS: it needs the CA
    ports = {**_advertised_ports(_table(raw, "advertised_ports"), "[advertised_ports] "),
             **(advertised_ports or {})}
    return ServerConfig(broker=broker, listeners=addrs, iggy=iggy, cluster=cluster_opts, security=security,
                        tls=tls_opts, advertised_ports=ports, **top)


def _tls(raw: dict[str, Any], flags: dict[str, Any] | None) -> TlsOptions | None:
    """``[tls]`` with the --tls-* flags over it; its contexts are built once here, so a missing
    or unreadable certificate, key or CA stops the start with a message naming it."""
    table = {**_table(raw, "tls"), **{k: v for k, v in (flags or {}).items() if v not in (None, ())}}
    if not table:
        return None
    if not table.get("cert") or not table.get("key"):
        raise InvalidConfig("TLS needs both a certificate and its key ([tls] cert and key, or --tls-cert "
                            "and --tls-key)")
    plain = tuple(table.pop(TLS_PLAIN, ()))
    known = (*PROTOCOLS, "replication")
    for name in plain:
        if name not in known:
            raise InvalidConfig(f"[tls] plain: unknown listener {name!r}; known: {', '.join(known)}")
    opts = TlsOptions(**table, plain=plain)
    opts.server_context()
    return opts
