"""Iggy's system commands: PING, GET_STATS (the process, the host and the broker's logs),
GET_CLUSTER_METADATA, and the connected clients (GET_ME, GET_CLIENT, GET_CLIENTS)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import shutil
import socket
import threading
import time

from bayou import __version__
from bayou.protocols.iggy import messages as m
from bayou.server.iggy.context import SERVER_NAME, Context, Session

NO_USER = 0xFFFF_FFFF
TRANSPORT_TCP = 1


class SystemHandlers:
    def __init__(self, ctx: Context, *, host: str, port: int) -> None:
        self.ctx = ctx
        self.broker = ctx.broker
        self.host = host  # what the cluster metadata advertises standalone
        self.port = port
        self._started = time.time()
        self._cpu = (time.monotonic(), sum(os.times()[:2]))

    async def ping(self, s: Session, req: m.Ping) -> None:
        return None

    async def cluster(self, s: Session, req: m.GetClusterMetadata) -> m.ClusterMetadata:
        endpoints = self.broker.listener_endpoints("iggy")
        if endpoints is None:
            node = m.ClusterNode("bayou", self.host, self.port, 0, 0, 0, role=0, status=0)
            return m.ClusterMetadata("single-node", (node,))
        # cluster mode: every live broker with an Iggy listener; the controller is the "leader"
        # (a partition's own leader answers sends; others answer TRANSIENT_NOT_ACCEPTED)
        nodes = tuple(m.ClusterNode(f"bayou-{e.broker_id}", e.host, e.port, 0, 0, 0,
                                    role=0 if e.controller else 1, status=0)
                      for e in endpoints)
        return m.ClusterMetadata("bayou-cluster", nodes)

    async def get_stats(self, s: Session, req: m.GetStats) -> m.Stats:
        self.ctx.permit(s, "read_servers")
        return await asyncio.get_running_loop().run_in_executor(None, self._stats)

    def _stats(self) -> m.Stats:
        now = time.monotonic()
        cpu = sum(os.times()[:2])
        t0, c0 = self._cpu
        self._cpu = (now, cpu)
        usage = 100.0 * (cpu - c0) / (now - t0) if now > t0 else 0.0
        meminfo = _meminfo()
        logs = self.broker.log_totals()
        disk = shutil.disk_usage(self.broker.config.data_dir)
        io = _proc_io()
        load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        catalog = self.ctx.catalog
        groups = sum(len(t.groups) for _s, t in catalog.all_topics())
        major, minor, patch = (int(x) for x in [*__version__.split("."), "0", "0"][:3])
        return m.Stats(
            process_id=os.getpid(), cpu_usage=usage,
            total_cpu_usage=min(100.0, 100.0 * load1 / (os.cpu_count() or 1)),
            memory_usage=_rss(), total_memory=meminfo.get("MemTotal", 0),
            available_memory=meminfo.get("MemAvailable", 0),
            run_time=int((time.time() - self._started) * 1_000_000),
            start_time=int(self._started * 1_000_000),
            read_bytes=io.get("read_bytes", 0), written_bytes=io.get("write_bytes", 0),
            messages_size_bytes=logs.size_bytes,
            streams_count=len(catalog.visible_streams()),
            topics_count=sum(1 for _ in catalog.all_topics()), partitions_count=logs.partitions,
            segments_count=logs.segments, messages_count=logs.messages,
            clients_count=len(self.ctx.sessions), consumer_groups_count=groups,
            hostname=socket.gethostname(), os_name=platform.system(), os_version=platform.release(),
            kernel_version=platform.version(), iggy_server_version=SERVER_NAME,
            iggy_server_semver=major * 1_000_000 + minor * 1_000 + patch, cache_metrics=(),
            threads_count=threading.active_count(), free_disk_space=disk.free, total_disk_space=disk.total)

    # -- clients -------------------------------------------------------------------------------

    @staticmethod
    def _client_details(c: Session) -> m.ClientDetails:
        groups = tuple(m.ClientGroup(*key) for key in sorted(c.groups))
        info = m.ClientInfo(c.client_id, c.user.id if c.user else NO_USER, TRANSPORT_TCP, c.address,
                            len(groups))
        return m.ClientDetails(info, groups)

    async def get_me(self, s: Session, req: m.GetMe) -> m.ClientDetails:
        return self._client_details(s)

    async def get_client(self, s: Session, req: m.GetClient) -> m.ClientDetails | None:
        self.ctx.permit(s, "read_servers")
        c = self.ctx.sessions.get(req.client_id)
        return None if c is None else self._client_details(c)

    async def get_clients(self, s: Session, req: m.GetClients) -> tuple[m.ClientInfo, ...]:
        self.ctx.permit(s, "read_servers")
        return tuple(self._client_details(c).client for c in self.ctx.sessions.values())


def _meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            k, _, rest = line.partition(":")
            parts = rest.split()
            if parts:
                out[k] = int(parts[0]) * 1024
    return out


def _rss() -> int:
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return 0


def _proc_io() -> dict[str, int]:
    out: dict[str, int] = {}
    with contextlib.suppress(OSError), open("/proc/self/io") as f:
        for line in f:
            k, _, v = line.partition(":")
            with contextlib.suppress(ValueError):
                out[k.strip()] = int(v)
    return out


__all__ = ["SystemHandlers"]
