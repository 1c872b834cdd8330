"""``bayou group``: consumer groups, committed offsets and lag."""

from __future__ import annotations

import click

from bayou.cli.common import (
    Address,
    bootstrap_option,
    iggy_address,
    iggy_option,
    password_option,
    sdk_client,
    tls_options,
    user_option,
)
from bayou.cli.root import main


@main.group()
def group() -> None:
    """Consumer groups, committed offsets and lag (through the Python SDK, bayou.client)."""


@group.command("list")
@click.argument("topic_name", metavar="TOPIC")
@bootstrap_option
@iggy_option
@tls_options
@user_option
@password_option
def group_list(topic_name: str, iggy_bootstrap: str | None, bootstrap: Address, user: str,
               password: str) -> None:
    """List the consumer groups of TOPIC."""
    with sdk_client(iggy_address(bootstrap, iggy_bootstrap), user, password) as c:
        names = c.list_groups(topic_name)
    for n in names:
        click.echo(n)


@group.command("describe")
@click.argument("group_name", metavar="GROUP")
@click.argument("topic_name", metavar="TOPIC")
@bootstrap_option
@iggy_option
@tls_options
@user_option
@password_option
def group_describe(group_name: str, topic_name: str, iggy_bootstrap: str | None, bootstrap: Address,
                   user: str, password: str) -> None:
    """Show GROUP's members, committed offsets and lag on TOPIC."""
    with sdk_client(iggy_address(bootstrap, iggy_bootstrap), user, password) as c:
        desc = c.describe_group(group_name, topic_name)
        topic_desc = c.describe_topic(topic_name)
        done = c.committed(group_name, topic_name)
    owner = {p: member for member, parts in desc.members for p in parts}
    click.echo(f"group: {group_name}  topic: {topic_name}  members: {len(desc.members)}")
    click.echo(f"{'partition':>9} {'member':>8} {'committed':>10} {'log end':>10} {'lag':>10}")
    for p in topic_desc.partitions:
        c_off = done.get(p.partition)
        lag = p.latest - max(c_off if c_off is not None else p.earliest, p.earliest)
        click.echo(f"{p.partition:>9} {owner.get(p.partition, '-')!s:>8} "
                   f"{'-' if c_off is None else c_off!s:>10} {p.latest:>10} {lag:>10}")
