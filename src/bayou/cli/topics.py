"""``bayou topic``: create, list, describe and delete over the V1 protocol; alter config and add
partitions through the admin API (V1 has no request for either)."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import click

from bayou.cli.admin import AdminClient, admin_api, quote
from bayou.cli.common import (
    Address,
    bootstrap_option,
    format_option,
    print_json,
    print_table,
    stdout_is_terminal,
    tls_options,
    v1_client,
)
from bayou.cli.root import main


def key_values(items: tuple[str, ...], option: str) -> dict[str, str]:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint=option)
        out[k] = v
    return out


@main.group()
def topic() -> None:
    """Create, list, describe, alter, grow and delete topics on a running broker."""


@topic.command("create")
@click.argument("name")
@click.option("--partitions", "-p", default=3, show_default=True, type=click.IntRange(1))
@click.option("--replication-factor", "-r", type=click.IntRange(1),
              help="Replicas per partition. [default: the broker's replication_factor]")
@click.option("--config", "-c", "configs", multiple=True, metavar="KEY=VALUE",
              help="Topic config, e.g. retention.ms=3600000, segment.bytes=1048576, fsync=never.")
@click.option("--if-not-exists", is_flag=True, help="Succeed (and change nothing) if NAME exists.")
@bootstrap_option
@tls_options
def topic_create(name: str, partitions: int, replication_factor: int | None, configs: tuple[str, ...],
                 if_not_exists: bool, bootstrap: Address) -> None:
    """Create topic NAME."""
    cfg = key_values(configs, "--config")
    with v1_client(bootstrap) as c:
        # V1's create is idempotent for the same partition count: look first, as Kafka's tool fails
        if name in c.list_topics():
            if if_not_exists:
                click.echo(f"topic {name} exists; nothing changed")
                return
            raise click.ClickException(f"topic already exists: {name} (--if-not-exists accepts that)")
        c.create_topic(name, partitions, replication_factor, cfg)
    click.echo(f"created topic {name} ({partitions} partitions)")


@topic.command("list")
@bootstrap_option
@format_option
@tls_options
def topic_list(bootstrap: Address, fmt: str) -> None:
    """List topics."""
    with v1_client(bootstrap) as c:
        names = c.list_topics()
    if fmt == "json":
        print_json(names)
        return
    for n in names:
        click.echo(n)


def _describe_doc(d: dict[str, str]) -> dict[str, Any]:
    from bayou.client.rtes import int_list

    starts, ends, hws = int_list(d["log_start"]), int_list(d["log_end"]), int_list(d["hw"])
    sizes = int_list(d["size_bytes"])
    roles = d["roles"][1:-1].split()
    status = d["status"][1:-1].split() or ["ok"] * len(roles)
    parts = []
    for i, (s, e, h, b) in enumerate(zip(starts, ends, hws, sizes, strict=True)):
        state, _sep, reason = status[i].partition(":")
        parts.append({"partition": i, "role": roles[i], "log_start": s, "log_end": e, "hw": h,
                      "size_bytes": b, "status": state, **({"reason": unquote(reason)} if reason else {})})
    config = dict(item.partition("=")[::2] for item in d["config"].split(",")) if d["config"] else {}
    return {"topic": d["topic"], "partition_count": int(d["partitions"]),
            "replication_factor": int(d["replication_factor"]), "config": config, "partitions": parts}


@topic.command("describe")
@click.argument("name")
@bootstrap_option
@format_option
@tls_options
def topic_describe(name: str, bootstrap: Address, fmt: str) -> None:
    """Show partitions, offsets and config of topic NAME."""
    with v1_client(bootstrap) as c:
        d = c.describe_topic(name)
    doc = _describe_doc(d)
    if fmt == "json":
        print_json(doc)
        return
    parts = doc["partitions"]
    if stdout_is_terminal():
        print_table(f"topic {doc['topic']}: {doc['partition_count']} partitions, replication factor "
                    f"{doc['replication_factor']}, config: {d['config'] or '(defaults)'}",
                    ["partition", "role", "log start", "log end", "hw", "bytes", "status"],
                    [[p["partition"], p["role"], p["log_start"], p["log_end"], p["hw"], p["size_bytes"],
                      p["status"] + (f": {p['reason']}" if "reason" in p else "")] for p in parts])
        return
    click.echo(f"topic: {d['topic']}  partitions: {d['partitions']}  "
               f"replication factor: {d['replication_factor']}")
    click.echo(f"config: {d['config'] or '(defaults)'}")
    click.echo(f"{'partition':>9} {'role':>8} {'log start':>10} {'log end':>10} {'hw':>10} {'bytes':>12}"
               f" {'status':>8}")
    for p in parts:
        click.echo(f"{p['partition']:>9} {p['role']:>8} {p['log_start']:>10} {p['log_end']:>10} "
                   f"{p['hw']:>10} {p['size_bytes']:>12} {p['status']:>8}")
        if "reason" in p:
            click.echo(f"          offline: {p['reason']}")


@topic.command("delete")
@click.argument("name")
@bootstrap_option
@tls_options
def topic_delete(name: str, bootstrap: Address) -> None:
    """Delete topic NAME and all its data."""
    with v1_client(bootstrap) as c:
        c.delete_topic(name)
    click.echo(f"deleted topic {name}")


@topic.command("alter")
@click.argument("name")
@click.option("--config", "-c", "configs", multiple=True, metavar="KEY=VALUE",
              help="Set a topic config key (repeatable).")
@click.option("--delete-config", "-d", "removed", multiple=True, metavar="KEY",
              help="Return a key to the broker's default (repeatable).")
@admin_api
def topic_alter(name: str, configs: tuple[str, ...], removed: tuple[str, ...], api: AdminClient) -> None:
    """Change the config of topic NAME (admin API).

    \b
    Examples:
      bayou topic alter orders -c retention.ms=86400000 -c segment.bytes=1048576
      bayou topic alter orders -d retention.ms
    """
    changes: dict[str, str | None] = dict(key_values(configs, "--config"))
    changes.update(dict.fromkeys(removed))
    if not changes:
        raise click.UsageError("give at least one --config KEY=VALUE or --delete-config KEY")
    reply = api.request("PATCH", f"/topics/{quote(name)}/config", changes)
    config = reply.get("config") if isinstance(reply, dict) else None
    shown = " ".join(f"{k}={v}" for k, v in sorted(config.items())) if isinstance(config, dict) else ""
    click.echo(f"altered topic {name}" + (f"; config: {shown or '(defaults)'}" if config is not None else ""))


@topic.command("add-partitions")
@click.argument("name")
@click.option("--count", required=True, type=click.IntRange(1), help="How many partitions to add.")
@admin_api
def topic_add_partitions(name: str, count: int, api: AdminClient) -> None:
    """Add --count partitions to topic NAME (admin API; partitions are never removed). Keys
    hash over the new count from then on."""
    doc = api.request("POST", f"/topics/{quote(name)}/partitions", {"count": count})
    click.echo(f"topic {name} now has {len(doc['partitions'])} partitions ({count} added)")
