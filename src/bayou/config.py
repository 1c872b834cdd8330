"""Configuration: embedded defaults, then a TOML file, then command-line flags.

Example ``bayou.toml``::

    data_dir = "./data"
    fsync = "always"                 # always | never | interval:<ms>
    max_connections = 10000

    advertised_host = "localhost"    # what Cursus METADATA / FIND_COORDINATOR tell clients

    [listeners]
    rtes = "0.0.0.0:9092"            # V1 line protocol, or "off"
    cursus = "0.0.0.0:9000"          # Cursus, or "off"
    iggy = "0.0.0.0:8090"            # Apache Iggy binary transport, or "off"
    tank = "0.0.0.0:11011"           # TANK, or "off"

    [iggy]
    root_username = "iggy"           # the root user made on first start (env IGGY_ROOT_USERNAME)
    root_password = "iggy"           # (env IGGY_ROOT_PASSWORD); stored argon2-hashed
    seed_dialect = false             # serve design-document clients, which have no login

    [broker]
    default_partitions = 3
    auto_create_topics = true
    replication_factor = 3
    min_insync_replicas = 2
    ack_all_timeout_ms = 2000
    group_session_timeout_ms = 10000

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
from pathlib import Path
from typing import Any

from bayou.broker.settings import BrokerConfig
from bayou.errors import InvalidConfig
from bayou.server.app import PROTOCOLS, ClusterOptions, IggyOptions, ServerConfig
from bayou.storage.config import FsyncPolicy, LogConfig

BROKER_KEYS = {f.name for f in dataclasses.fields(BrokerConfig)} - {"data_dir", "log"}
LOG_KEYS = {f.name for f in dataclasses.fields(LogConfig)} - {"fsync"}


def parse_listen(text: str, protocol: str) -> tuple[str, int] | None:
    """``HOST:PORT``, ``:PORT``, ``PORT`` or ``off``."""
    t = text.strip()
    if t.lower() == "off":
        return None
    host, sep, port = t.rpartition(":")
    if not sep:
        host, port = "0.0.0.0", t
    host = host.strip("[]") or "0.0.0.0"
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
                broker_id: int | None = None, replication: str | None = None) -> ServerConfig:
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise InvalidConfig(f"cannot read config {path}: {exc}") from None
    unknown = set(raw) - {"data_dir", "fsync", "listeners", "broker", "log", "max_connections",
                          "shutdown_grace_s", "advertised_host", "iggy", "cluster"}
    if unknown:
        raise InvalidConfig(f"unknown config keys: {', '.join(sorted(unknown))}")

    log_raw = dict(raw.get("log", {}))
    bad = set(log_raw) - LOG_KEYS
    if bad:
        raise InvalidConfig(f"unknown [log] keys: {', '.join(sorted(bad))}")
    fsync_text = fsync if fsync is not None else raw.get("fsync", "always")
    log_cfg = LogConfig(fsync=FsyncPolicy.parse(str(fsync_text)), **log_raw)

    broker_raw = dict(raw.get("broker", {}))
    bad = set(broker_raw) - BROKER_KEYS
    if bad:
        raise InvalidConfig(f"unknown [broker] keys: {', '.join(sorted(bad))}")
    ddir = Path(data_dir if data_dir is not None else raw.get("data_dir", "data"))
    if broker_id is not None:
        broker_raw["broker_id"] = broker_id
    broker = BrokerConfig(data_dir=ddir, log=log_cfg, **broker_raw)
    cluster_raw = dict(raw.get("cluster", {}))
    bad = set(cluster_raw) - {"zookeeper", "replication", "session_timeout_ms"}
    if bad:
        raise InvalidConfig(f"unknown [cluster] keys: {', '.join(sorted(bad))}")
    zk_url = cluster if cluster is not None else cluster_raw.get("zookeeper")
    cluster_opts: ClusterOptions | None = None
    if zk_url:
        if not str(zk_url).startswith("zk://"):
            raise InvalidConfig(f"cluster expects zk://HOST:PORT[,HOST:PORT]/path, got {zk_url!r}")
        repl = replication if replication is not None else cluster_raw.get("replication", "0.0.0.0:9093")
        bind = parse_listen(str(repl), "replication") or ("0.0.0.0", 9093)
        cluster_opts = ClusterOptions(str(zk_url), bind, int(cluster_raw.get("session_timeout_ms", 4000)))

    addrs: dict[str, tuple[str, int] | None] = {
        name: ("0.0.0.0", port) for name, (port, _f) in PROTOCOLS.items()}
    for name, value in dict(raw.get("listeners", {})).items():
        if name not in PROTOCOLS:
            raise InvalidConfig(f"unknown listener {name!r}; known: {', '.join(PROTOCOLS)}")
        addrs[name] = parse_listen(str(value), name)
    for name, value in (listeners or {}).items():
        if value is not None:
            addrs[name] = parse_listen(value, name)
    iggy_raw = dict(raw.get("iggy", {}))
    bad = set(iggy_raw) - {f.name for f in dataclasses.fields(IggyOptions)}
    if bad:
        raise InvalidConfig(f"unknown [iggy] keys: {', '.join(sorted(bad))}")
    iggy = IggyOptions(
        root_username=os.environ.get("IGGY_ROOT_USERNAME", str(iggy_raw.get("root_username", "iggy"))),
        root_password=os.environ.get("IGGY_ROOT_PASSWORD", str(iggy_raw.get("root_password", "iggy"))),
        seed_dialect=bool(iggy_raw.get("seed_dialect", False)))
    return ServerConfig(broker=broker, listeners=addrs, iggy=iggy, cluster=cluster_opts,
                        max_connections=int(raw.get("max_connections", 10_000)),
                        shutdown_grace_s=float(raw.get("shutdown_grace_s", 10.0)),
                        advertised_host=str(advertised_host or raw.get("advertised_host", "localhost")))
