"""The server process: one broker, one listener per enabled protocol, graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ipaddress
import logging
import signal
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from bayou.broker import Broker, BrokerConfig
from bayou.broker.authz import ANONYMOUS_ACCESS, AnonymousAccess, Principal
from bayou.errors import InvalidConfig
from bayou.protocols.kafka.framing import Sniffed, sniff
from bayou.protocols.kafka.sessions import FetchSessions
from bayou.protocols.scram import ScramCredential
from bayou.server.base import Admission, Connection, ConnectionLimits, Listener
from bayou.server.cursus import Advertised, CursusService, cursus_handler
from bayou.server.iggy import IggyService, iggy_handler
from bayou.server.iggy.users import AuthFailure
from bayou.server.kafka import Advertised as KafkaAdvertised
from bayou.server.kafka import KafkaService, kafka_handler
from bayou.server.metering import RequestMeter
from bayou.server.rtes import RtesService, rtes_handler
from bayou.server.tank import TankService, tank_handler
from bayou.server.tls import TlsOptions

if TYPE_CHECKING:
    from bayou.broker.cluster.node import ClusterNode
    from bayou.server.http import HttpFrontEnd

log = logging.getLogger("bayou.server")

Handler = Callable[[Connection, Listener], Awaitable[None]]
HandlerFactory = Callable[["BayouServer", str], Handler]


def _cursus(server: BayouServer, name: str) -> Handler:
    listener_addr = server.config.listeners[name]
    assert listener_addr is not None
    port = server.config.advertised_port(name, listener_addr[1])
    advertised = Advertised(server.config.advertised_host, port)
    service = CursusService(server.broker, advertised)
    server.meters[name] = service.meter

    async def serve(conn: Connection, listener: Listener) -> None:
        port = server.config.advertised_port(name, listener.port)
        if service.advertised.port != port:  # bound to an ephemeral port
            service.advertised = Advertised(server.config.advertised_host, port)
        await cursus_handler(service)(conn, listener)

    return serve


def _advertised_ip(host: str) -> str:
    """Iggy's cluster metadata carries an IP address: resolve a host name once at startup."""
    try:
        return socket.gethostbyname(host)
    except OSError:
        return "127.0.0.1"


def _iggy(server: BayouServer, name: str) -> Handler:
    listener_addr = server.config.listeners[name]
    assert listener_addr is not None
    opts = server.config.iggy
    service = IggyService(server.broker, port=server.config.advertised_port(name, listener_addr[1]),
                          host=_advertised_ip(server.config.advertised_host),
                          root_username=opts.root_username, root_password=opts.root_password,
                          seed_dialect=opts.seed_dialect)
    server.meters[name] = service.meter
    server.iggy = service  # its users are the HTTP port's too (server/http/auth.py)
    handler = iggy_handler(service)
    service.serve_authorizer()  # Iggy's users and streams: bayou's principals and scopes (broker/authz.py)

    async def serve(conn: Connection, listener: Listener) -> None:
        service.port = server.config.advertised_port(name, listener.port)  # bound to an ephemeral port
        await handler(conn, listener)

    return serve


def _rtes(server: BayouServer, name: str) -> Handler:
    """V1 and Kafka share port 9092: the first byte tells them apart (protocols/kafka/framing.py,
    ``sniff``: a Kafka request's size starts with 0x00..0x06, a V1 line with "V")."""
    service = RtesService(server.broker)
    server.meters[name] = service.meter
    v1 = rtes_handler(service)
    kafka = kafka_handler(server.kafka_service(), server.kafka_advertised)

    async def serve(conn: Connection, listener: Listener) -> None:
        first = await conn.read()
        if not first:
            return
        if sniff(first) is Sniffed.KAFKA:
            await kafka(conn, listener, first)
        else:
            await v1(conn, listener, first)

    return serve


def _kafka(server: BayouServer, name: str) -> Handler:
    """A Kafka-only listener (``--kafka``), beside the V1 port's."""
    return kafka_handler(server.kafka_service(), server.kafka_advertised)


def _tank(server: BayouServer, name: str) -> Handler:
    service = TankService(server.broker)
    server.meters[name] = service.meter
    return tank_handler(service)


def _http(server: BayouServer, name: str) -> Handler:
    """Probes and /metrics (server/http/): started before crash recovery, so /health answers and
    /ready says what the broker waits for."""
    from bayou.server.http import ROUTE_MODULES, HttpFrontEnd

    server.http = front = HttpFrontEnd(server, ROUTE_MODULES)
    server.meters[name] = front.meter
    return front.serve


# Every implemented protocol: name -> (default port, handler factory). "http" is the broker's own
# HTTP port (probes, Prometheus metrics), Cursus' health port by default.
PROTOCOLS: dict[str, tuple[int, HandlerFactory]] = {
    "rtes": (9092, _rtes),  # V1, and Kafka by the first byte
    "kafka": (9092, _kafka),  # off by default (DEFAULT_OFF): Kafka clients use the V1 port
    "cursus": (9000, _cursus),
    "iggy": (8090, _iggy),
    "tank": (11011, _tank),
    "http": (9080, _http),
}
HTTP = "http"
DEFAULT_OFF = frozenset({"kafka"})  # listeners a configuration must turn on


# Listeners bind loopback unless an address is given: exposing a broker is a decision (and V1,
# Cursus, TANK and the replication listener have no login of their own).
DEFAULT_BIND = "127.0.0.1"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: assume it is reachable from elsewhere


@dataclass(frozen=True, slots=True)
class IggyOptions:
    """The Iggy front end's users: the root user made on first start (the Iggy clients' default
    pair; set your own before exposing the port) and whether design-document (seed) clients, which
    have no login, are served."""

    root_username: str = "iggy"
    root_password: str = "iggy"
    seed_dialect: bool = False


@dataclass(frozen=True, slots=True)
class SecurityOptions:
    """What a connection without a login or client certificate may do (broker/authz.py): ``all``
    (today's seed protocols, which have no login), ``read`` (read and describe topics, fetch,
    commit offsets; no produce, no admin) or ``none``."""

    anonymous: str = "all"

    def __post_init__(self) -> None:
        if self.anonymous not in ANONYMOUS_ACCESS:
            raise InvalidConfig(f"[security] anonymous must be one of {', '.join(ANONYMOUS_ACCESS)}, "
                                f"not {self.anonymous!r}")


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    """Cluster mode: the ZooKeeper ensemble (``zk://HOST:PORT[,HOST:PORT]/path``) and where this
    broker's replication listener (followers' fetches) binds."""

    zookeeper: str
    replication: tuple[str, int] = (DEFAULT_BIND, 9093)
    session_timeout_ms: int = 4000  # ZooKeeper session: how fast a dead broker is noticed
    secret: str | None = None  # replication listeners admit only brokers that know it
    zk_auth: str | None = None  # "user:password": ZooKeeper digest auth, and ACLs on bayou's znodes


@dataclass(frozen=True, slots=True)
class ServerConfig:
    broker: BrokerConfig = field(default_factory=BrokerConfig)
    # protocol -> (host, port), or None when the protocol is off
    listeners: dict[str, tuple[str, int] | None] = field(
        default_factory=lambda: {name: None if name in DEFAULT_OFF else (DEFAULT_BIND, port)
                                 for name, (port, _f) in PROTOCOLS.items()})
    max_connections: int = 10_000
    shutdown_grace_s: float = 10.0
    # Connection limits shared by every listener (server/base.py): a new connection must send a
    # complete request within idle_timeout_s (TANK's 16 s); a request begun must be complete within
    # request_timeout_s (plus 1 s per 500 bytes received); each other listener keeps listener_reserve
    # of max_connections for itself; max_inflight_bytes caps the request bytes held broker-wide.
    idle_timeout_s: float = 16.0
    request_timeout_s: float = 30.0
    max_connections_per_ip: int = 1_000
    listener_reserve: int = 64
    max_inflight_bytes: int = 512 * 1024 * 1024
    # ... and max_answer_bytes the fetch answers held until sent, broker-wide (server/answers.py).
    max_answer_bytes: int = 512 * 1024 * 1024
    # The host clients are told to connect to (Cursus METADATA / FIND_COORDINATOR, Kafka Metadata).
    advertised_host: str = "localhost"
    # A listener's port as clients reach it, where that is not the bound one (NAT, containers):
    # listener name -> port. What Metadata-like answers and the cluster registration name.
    advertised_ports: dict[str, int] = field(default_factory=dict)
    iggy: IggyOptions = field(default_factory=IggyOptions)
    cluster: ClusterOptions | None = None
    security: SecurityOptions = field(default_factory=SecurityOptions)
    tls: TlsOptions | None = None  # [tls]: TLS on every listener not in tls.plain

    def __post_init__(self) -> None:
        self.connection_limits()  # refuse bad limits when the configuration is read

    def advertised_port(self, listener: str, bound: int) -> int:
        """The port clients are told for ``listener`` (bound to ``bound``)."""
        return self.advertised_ports.get(listener, bound)

    def tls_context(self, listener: str) -> ssl.SSLContext | None:
        """The TLS context of ``listener``, or None when it is plain text. The replication
        listener requires a certificate signed by the CA (mTLS) whatever client_auth says."""
        tls = self.tls
        if tls is None or listener in tls.plain:
            return None
        return tls.server_context("required" if listener == "replication" else None)

    def replication_client_context(self) -> ssl.SSLContext | None:
        """How this broker connects to the others' replication listeners (None: plain text)."""
        tls = self.tls
        if tls is None or "replication" in tls.plain:
            return None
        return tls.broker_client_context()

    def connection_limits(self) -> ConnectionLimits:
        return ConnectionLimits(max_connections=self.max_connections, idle_timeout_s=self.idle_timeout_s,
                                request_timeout_s=self.request_timeout_s,
                                max_connections_per_ip=self.max_connections_per_ip,
                                listener_reserve=self.listener_reserve,
                                max_inflight_bytes=self.max_inflight_bytes,
                                max_answer_bytes=self.max_answer_bytes)


class _KafkaLogins:
    """SASL on a Kafka listener (server/kafka_context.py ``Logins``): the broker's users, which
    the Iggy front end keeps, through its login guard (as the HTTP port's Basic login). With the
    Iggy listener off this broker has no users: every login fails."""

    def __init__(self, server: BayouServer) -> None:
        self.server = server

    def _users(self) -> IggyService:
        if self.server.iggy is None:
            raise AuthFailure("invalid_credentials")
        return self.server.iggy

    async def plain(self, peer: str, user: str, password: str) -> Principal:
        return await self._users().credentials_principal(peer, user, password, via="kafka")

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        iggy = self.server.iggy
        return None if iggy is None else iggy.users.scram_credential(user, mechanism)

    async def scram(self, peer: str, user: str, verify: Callable[[], bytes]) -> tuple[Principal, bytes]:
        return await self._users().scram_principal(peer, user, verify)


class BayouServer:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.broker: Broker = Broker(config.broker)
        self.broker.authorizer.configure(anonymous=cast(AnonymousAccess, config.security.anonymous))
        self.listeners: dict[str, Listener] = {}
        self._stopping: asyncio.Event | None = None
        self.admission: Admission | None = None
        self.cluster: ClusterNode | None = None
        self.meters: dict[str, RequestMeter] = {}  # protocol -> its requests (/metrics)
        self.http: HttpFrontEnd | None = None
        self.iggy: IggyService | None = None
        self._kafka: KafkaService | None = None  # one for the V1 port's Kafka and --kafka
        self.serving = False  # every listener up (and the cluster joined): /ready
        self.shutting_down = False

    def kafka_service(self) -> KafkaService:
        if self._kafka is None:
            self._kafka = KafkaService(self.broker, login=_KafkaLogins(self))
            self.meters["kafka"] = self._kafka.meter
        return self._kafka

    def kafka_fetch_sessions(self) -> FetchSessions | None:
        """The Kafka front end's fetch session cache; None while no listener serves Kafka."""
        return None if self._kafka is None else self._kafka.fetch_sessions

    def kafka_advertised(self, listener: Listener) -> KafkaAdvertised:
        """What Metadata tells a client of ``listener``: the advertised host, the listener's port
        (in cluster mode every broker's listener of that name, as each registered it)."""
        return KafkaAdvertised(self.broker.config.broker_id, self.config.advertised_host,
                               self.config.advertised_port(listener.name, listener.port), listener.name)

    async def _listen(self, name: str, addr: tuple[str, int], limits: ConnectionLimits,
                      admission: Admission) -> None:
        _port, factory = PROTOCOLS[name]
        listener = Listener(name, addr[0], addr[1], factory(self, name), limits, admission,
                            tls=self.config.tls_context(name))
        await listener.start()
        self.listeners[name] = listener

    async def start(self) -> None:
        limits = self.config.connection_limits()
        self.admission = admission = Admission(limits)
        http = self.config.listeners.get(HTTP)
        if http is not None:  # first: the probes answer while the logs are recovered
            await self._listen(HTTP, http, limits, admission)
        try:
            await self.broker.start()
        except BaseException:
            await self.stop()
            raise
        if self.config.cluster is not None:
            # cluster mode from the first request on: lead nothing until ZooKeeper says so
            from bayou.broker.cluster.node import ClusterNode
            from bayou.broker.cluster.state import BrokerRegistration
            from bayou.server.replica_client import ReplicaClient

            dialer = ReplicaClient(self.broker.config.broker_id, self.config.cluster.secret,
                                   self.config.replication_client_context())
            self.cluster = ClusterNode(self.broker, self.config.cluster.zookeeper, BrokerRegistration(0, ""),
                                       dialer, secret=self.config.cluster.secret,
                                       session_timeout_s=self.config.cluster.session_timeout_ms / 1000,
                                       zk_auth=self.config.cluster.zk_auth)
        try:
            for name, addr in self.config.listeners.items():
                if addr is not None and name not in self.listeners:
                    await self._listen(name, addr, limits, admission)
            if self.cluster is not None and self.config.cluster is not None:
                await self._join_cluster(self.cluster, self.config.cluster, limits, admission)
        except BaseException:
            await self.stop()
            raise
        await self._start_iggy()
        self._warn_exposed()
        log.info("anonymous access: %s", self.config.security.anonymous,
                 extra={"anonymous": self.config.security.anonymous})
        self.serving = True
        log.info("bayou ready", extra={
            "data_dir": str(self.config.broker.data_dir),
            "listeners": {n: f"{li.host}:{li.port}" for n, li in self.listeners.items()},
            "fsync": str(self.config.broker.log.fsync),
        })

    async def _join_cluster(self, node: ClusterNode, opts: ClusterOptions, limits: ConnectionLimits,
                            admission: Admission) -> None:
        """Bind the replication listener, then register with every bound port in ZooKeeper and
        follow the cluster's state (broker/cluster/node.py)."""
        from bayou.broker.cluster.node import REPLICATION
        from bayou.broker.cluster.state import BrokerRegistration
        from bayou.server.replica import replica_handler

        listener = Listener(REPLICATION, opts.replication[0], opts.replication[1], replica_handler(node),
                            limits, admission, tls=self.config.tls_context(REPLICATION))
        await listener.start()
        self.listeners[REPLICATION] = listener
        endpoints = {name: self.config.advertised_port(name, li.port) for name, li in self.listeners.items()}
        host = self.config.advertised_host
        ip = _advertised_ip(host)
        node.registration = BrokerRegistration(self.broker.config.broker_id, ip, endpoints,
                                               name="" if host == ip else host)
        node.zk.registration = node.registration
        await node.start()

    async def _start_iggy(self) -> None:
        """Load the Iggy catalog and users (in cluster mode: take the cluster's copies, under the
        cluster-wide lock) before the broker says it is ready, not on the first Iggy connection:
        start-up work that holds a cluster lock belongs to start-up, where /ready waits for it.
        A failure (ZooKeeper slow, a full disk) does not stop the broker: the first Iggy
        connection tries again (IggyService.start), as it did before."""
        if self.iggy is None:
            return
        try:
            await self.iggy.start()
        except Exception as exc:  # retried by the first connection
            log.warning("the Iggy service did not start yet; the first Iggy connection retries",
                        extra={"error": str(exc)})

    def _warn_exposed(self) -> None:
        """A listener other hosts can reach that lets anyone in: say so at start."""
        for name, li in self.listeners.items():
            if is_loopback(li.host) or (name == "iggy" and not self.config.iggy.seed_dialect):
                continue  # Iggy clients log in (unless the login-less seed dialect is on)
            if self.config.security.anonymous != "all" and name != "replication":
                continue  # anonymous clients may read at most ([security] anonymous)
            if name == "replication" and ((self.config.cluster is not None and self.config.cluster.secret)
                                          or li.tls is not None):
                continue  # brokers prove they know the cluster's secret, or hold a certificate of its CA
            if name == HTTP:
                log.warning("HTTP listener reachable from other hosts without authentication: anyone who "
                            "reaches it can read /metrics (topic and group names, offsets)",
                            extra={"protocol": name, "host": li.host, "port": li.port})
                continue
            log.warning("listener reachable from other hosts without authentication: anyone who reaches "
                        "it can produce, consume, change and delete topics (bind 127.0.0.1, or keep the "
                        "port behind a firewall)", extra={"protocol": name, "host": li.host, "port": li.port})

    async def stop(self) -> None:
        """Stop accepting, let in-flight requests finish, then fsync and mark the data clean. In
        cluster mode the leadership of this broker's partitions is handed to in-sync followers
        first, while it still serves (controlled shutdown), so no partition is left leaderless."""
        self.serving = False
        self.shutting_down = True  # /ready answers 503 from now on
        if self.cluster is not None:
            try:
                await self.cluster.controlled_shutdown(self.config.shutdown_grace_s)
            except Exception:
                log.exception("controlled shutdown failed; stopping anyway")
        for listener in self.listeners.values():
            listener.stop_accepting()
        await asyncio.gather(*(li.drain(self.config.shutdown_grace_s) for li in self.listeners.values()))
        for listener in self.listeners.values():
            if listener.server is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(listener.server.wait_closed(), 2)
        if self.http is not None:
            await self.http.stop()
        if self.cluster is not None:
            await self.cluster.stop()
        await self.broker.stop()

    async def run(self) -> None:
        """Start, serve until SIGINT/SIGTERM, then shut down gracefully."""
        self._stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stopping.set)
        await self.start()
        # what start-up built (modules, kio's message schemas, the recovered logs' indexes) lives
        # as long as the process: out of the cyclic collector's way, a full collection scans only
        # what serving made since (tens of ms to well under one: a latency tail under load)
        gc.freeze()
        try:
            await self._stopping.wait()
            log.info("shutting down")
        finally:
            await self.stop()


def run_server(server: BayouServer) -> None:
    """Serve until SIGINT/SIGTERM on uvloop (asyncio's own loop where uvloop is missing). The
    caller builds the server, so it may watch it (the CLI's recovery bar reads its broker)."""
    try:
        import uvloop
    except ImportError:  # uvloop is optional (not on Windows)
        asyncio.run(server.run())
    else:
        uvloop.run(server.run())
