"""``/health`` and ``/ready``: Kubernetes' liveness and readiness probes.

``/health`` is 200 whenever the process answers: the HTTP listener starts before crash recovery,
so a long recovery is alive, not dead. ``/ready`` is 200 only when clients can be served: recovery
done, every configured listener bound, not shutting down, and in cluster mode joined (registered,
first reconcile done), the ZooKeeper session connected and every partition this broker replicates
in its ISR (caught up). Otherwise 503 with a JSON body saying what it waits for.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from bayou.broker.cluster.node import ClusterNode
    from bayou.server.app import BayouServer

MAX_NAMED = 10  # partitions named in a not-caught-up reason (the count is always given)


def readiness(server: BayouServer) -> dict[str, Any]:
    """``{"ready": bool, "status": ..., "reason": ...}`` plus details for the state."""
    broker = server.broker
    rec = broker.recovery
    if server.shutting_down:
        return {"ready": False, "status": "stopping", "reason": "shutting down"}
    if not broker.started:
        progress = {"partitions_done": rec.partitions_done, "partitions_total": rec.partitions_total}
        what = "validating logs after an unclean stop" if rec.validated else "opening logs"
        return {"ready": False, "status": "recovering",
                "reason": f"{what}: {rec.partitions_done} of {rec.partitions_total} partitions", **progress}
    missing = sorted(name for name, addr in server.config.listeners.items()
                     if addr is not None and name not in server.listeners)
    if missing:
        return {"ready": False, "status": "starting", "reason": "listeners not up yet: " + ", ".join(missing)}
    if server.cluster is not None:
        waiting = _cluster_wait(server.cluster)
        if waiting is not None:
            return waiting
    if not server.serving:
        return {"ready": False, "status": "starting", "reason": "start-up not finished"}
    return {"ready": True, "status": "ready"}


def _cluster_wait(node: ClusterNode) -> dict[str, Any] | None:
    if not node.started.is_set():
        return {"ready": False, "status": "joining", "reason": "not joined the cluster yet"}
    state = str(node.zk.zk.state)
    if state != "CONNECTED":
        return {"ready": False, "status": "zookeeper", "reason": f"ZooKeeper session {state.lower()}"}
    live = set(node.live_brokers())
    behind = [f"{part.topic}/{part.index}" for t in list(node.broker.topics.values())
              for part in list(t.partitions)
              if (rs := part.cluster) is not None and node.me in rs.replicas and node.me not in rs.isr
              and rs.leader in live]
    if behind:
        return {"ready": False, "status": "catching_up",
                "reason": f"{len(behind)} partitions not in sync yet: " + ", ".join(behind[:MAX_NAMED])
                + (" ..." if len(behind) > MAX_NAMED else ""), "partitions": len(behind)}
    return None


def routes(server: BayouServer) -> Iterable[web.RouteDef]:
    async def health(_request: web.Request) -> web.Response:
        return web.json_response({"status": "alive"})

    async def ready(_request: web.Request) -> web.Response:
        state = readiness(server)
        return web.json_response(state, status=200 if state["ready"] else 503)

    return [web.get("/health", health), web.get("/ready", ready)]


__all__ = ["readiness", "routes"]
