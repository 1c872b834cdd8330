"""``bayou group``: list, describe, reset offsets, delete, through the broker's admin API (which
sees every group, whichever protocol it came through, with its lag)."""

from __future__ import annotations

from typing import Any

import click

from bayou.cli.admin import AdminClient, AdminError, admin_api, quote
from bayou.cli.common import format_option, parse_time, print_json, print_table
from bayou.cli.root import main


@main.group()
def group() -> None:
    """Consumer groups: members, committed offsets and lag; reset offsets; delete (admin API).

    A group an SDK consumer joined (`bayou consume --group G`, bayou.client.Consumer) is an Iggy
    consumer group: the broker names it iggy.<topic>.<G>, as `bayou group list` shows.
    """


def _describe(api: AdminClient, name: str) -> Any:
    """GET the group; a 404 names the SDK's iggy.<topic>.<name> groups the operator may mean."""
    try:
        return api.get(f"/groups/{quote(name)}")
    except AdminError as exc:
        if exc.status != 404:
            raise
        similar = [g["name"] for g in api.get("/groups").get("groups", [])
                   if str(g["name"]).endswith("." + name) and str(g["name"]).startswith("iggy.")]
        if similar:
            names = ", ".join(similar)
            hint = f"{exc.format_message()}; an SDK consumer's group is named by its topic: {names}"
            raise AdminError(exc.status, "", hint) from None
        raise


@group.command("list")
@click.option("--topic", "-t", "topic_name", metavar="TOPIC", help="Only groups with offsets on TOPIC.")
@admin_api
@format_option
def group_list(topic_name: str | None, api: AdminClient, fmt: str) -> None:
    """List consumer groups with their state, members, topics and total lag."""
    groups = api.get("/groups")["groups"]
    if topic_name is not None:
        groups = [g for g in groups if topic_name in g["topics"] or g["topic"] == topic_name]
    if fmt == "json":
        print_json(groups)
        return
    print_table(None, ["group", "state", "protocol", "members", "topics", "lag"],
                [[g["name"], g["state"], g["protocol"], g["members"], ",".join(g["topics"]) or None, g["lag"]]
                 for g in groups])


@group.command("describe")
@click.argument("group_name", metavar="GROUP")
@admin_api
@format_option
def group_describe(group_name: str, api: AdminClient, fmt: str) -> None:
    """Show GROUP's members and, per partition, its committed offset, the high watermark and lag."""
    doc = _describe(api, group_name)
    if fmt == "json":
        print_json(doc)
        return
    click.echo(f"group: {doc['name']}  state: {doc['state']}  protocol: {doc['protocol'] or '-'}  "
               f"members: {len(doc['members'])}  lag: {doc['lag']}")
    for m in doc["members"]:
        click.echo(f"member {m['id']}: partitions {','.join(map(str, m['partitions'])) or '-'}")
    print_table(None, ["topic", "partition", "member", "committed", "log start", "high watermark", "lag"],
                [[p["topic"], p["partition"], p["member"], p["committed_offset"], p["log_start_offset"],
                  p["high_watermark"], p["lag"]] for p in doc["partitions"]])


@group.command("reset-offsets")
@click.argument("group_name", metavar="GROUP")
@click.option("--topic", "-t", "topic_name", required=True, metavar="TOPIC")
@click.option("--partition", "-p", "partitions", type=click.IntRange(0), multiple=True,
              help="Only this partition (repeatable). [default: every partition]")
@click.option("--to-earliest", is_flag=True, help="To the first stored offset.")
@click.option("--to-latest", is_flag=True, help="To the high watermark (skip everything).")
@click.option("--to-offset", type=click.IntRange(0), metavar="N", help="To offset N (clamped into the log).")
@click.option("--to-time", metavar="TIME",
              help="To the first record at or after TIME (ms, ISO-8601 or -DURATION such as -1h).")
@click.option("--dry-run", is_flag=True, help="Show what would change and change nothing.")
@admin_api
@format_option
def group_reset_offsets(group_name: str, topic_name: str, partitions: tuple[int, ...], to_earliest: bool,
                        to_latest: bool, to_offset: int | None, to_time: str | None, dry_run: bool,
                        api: AdminClient, fmt: str) -> None:
    """Move GROUP's committed offsets on TOPIC (refused while the group has members).

    \b
    Examples:
      bayou group reset-offsets billing --topic orders --to-earliest --dry-run
      bayou group reset-offsets billing --topic orders --to-time 2026-11-26T09:00:00Z
    """
    targets = (("earliest", to_earliest or None), ("latest", to_latest or None), ("offset", to_offset),
               ("timestamp", to_time))
    chosen = [(name, value) for name, value in targets if value is not None]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-offset, --to-time")
    to, given = chosen[0]
    body: dict[str, Any] = {"topic": topic_name, "to": to, "dry_run": dry_run}
    if to == "offset":
        body["value"] = given
    elif to == "timestamp":
        body["value"] = parse_time(str(given))
    if partitions:
        body["partitions"] = sorted(set(partitions))
    reply = api.request("POST", f"/groups/{quote(group_name)}/reset-offsets", body)
    if fmt == "json":
        print_json(reply)
        return
    verb = "would move (dry run, nothing changed)" if reply["dry_run"] else "moved"
    click.echo(f"group {group_name} on {topic_name}: {verb}")
    print_table(None, ["partition", "before", "after"],
                [[c["partition"], c["before"], c["after"]] for c in reply["partitions"]])


@group.command("delete")
@click.argument("group_name", metavar="GROUP")
@admin_api
def group_delete(group_name: str, api: AdminClient) -> None:
    """Delete GROUP and its committed offsets (refused while it has members)."""
    api.request("DELETE", f"/groups/{quote(group_name)}")
    click.echo(f"deleted group {group_name}")
