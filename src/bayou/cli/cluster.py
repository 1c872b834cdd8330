"""``bayou cluster describe``: the brokers, the controller, and every partition's leader, replicas
and in-sync replicas, under-replicated and offline ones marked (admin API)."""

from __future__ import annotations

from typing import Any

import click

from bayou.cli.admin import AdminClient, admin_api, quote
from bayou.cli.common import format_option, print_json, print_table
from bayou.cli.root import main


@main.group()
def cluster() -> None:
    """The cluster as the broker sees it (admin API; a single broker is a cluster of one)."""


def _status(p: dict[str, Any]) -> str:
    if p["leader"] < 0 or p.get("offline"):
        return "offline"
    return "under-replicated" if p["under_replicated"] else "ok"


@cluster.command("describe")
@click.option("--under-replicated", "problems_only", is_flag=True,
              help="List only partitions that are under-replicated or offline.")
@admin_api
@format_option
def cluster_describe(problems_only: bool, api: AdminClient, fmt: str) -> None:
    """Show the brokers, the controller and each partition's leader, replicas and ISR."""
    info = api.get("/cluster")
    partitions = []
    for t in api.get("/topics")["topics"]:
        for p in api.get(f"/topics/{quote(t['name'])}")["partitions"]:
            row = {"topic": t["name"], "partition": p["partition"], "leader": p["leader"],
                   "replicas": p["replicas"], "isr": p["isr"], "under_replicated": p["under_replicated"],
                   "offline": bool(p.get("offline"))}
            row["status"] = _status(row)
            if not problems_only or row["status"] != "ok":
                partitions.append(row)
    if fmt == "json":
        print_json({"cluster": info, "partitions": partitions})
        return
    controller = "-" if info["controller"] is None else info["controller"]
    click.echo(f"mode: {info['mode']}  controller: {controller}  brokers: {len(info['brokers'])}  "
               f"topics: {info['topics']}  partitions: {info['partitions']}  "
               f"under-replicated: {info['under_replicated_partitions']}  "
               f"offline: {info['offline_partitions']}")

    def roles(b: dict[str, Any]) -> str | None:
        named = (("controller", b["id"] == info["controller"]), ("this broker", b.get("self")),
                 ("leaving", b.get("leaving")))
        return ",".join(r for r, on in named if on) or None

    print_table("brokers", ["id", "host", "endpoints", "role"],
                [[b["id"], b["host"], " ".join(f"{k}={v}" for k, v in sorted(b["endpoints"].items())),
                  roles(b)] for b in info["brokers"]])
    print_table("partitions", ["topic", "partition", "leader", "replicas", "isr", "status"],
                [[p["topic"], p["partition"], p["leader"] if p["leader"] >= 0 else "none",
                  ",".join(map(str, p["replicas"])) or None, ",".join(map(str, p["isr"])) or None,
                  p["status"]] for p in partitions])
