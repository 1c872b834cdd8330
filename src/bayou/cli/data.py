"""``bayou produce`` (V1: each record acknowledged with its partition and offset) and ``bayou
consume`` (the SDK's consumer over the Iggy listener: keys, headers, timestamps, groups, seeks)."""

from __future__ import annotations

import base64
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from bayou.cli.common import (
    Address,
    advance,
    bootstrap_option,
    iggy_address,
    iggy_option,
    parse_time,
    password_option,
    progress,
    target,
    tls,
    tls_options,
    user_option,
    v1_client,
)
from bayou.cli.root import main

if TYPE_CHECKING:
    from bayou.client import ConsumerRecord, TopicPartition

PRINTABLE = ("partition", "offset", "key", "headers", "timestamp")
LARGE = 1000  # a consume (or produce -f) of more records than this draws a progress bar on a terminal
COMMIT_EVERY_S = 5.0


@main.command()
@click.argument("topic_name", metavar="TOPIC")
@click.argument("values", nargs=-1)
@click.option("--file", "-f", "file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Produce one value per line of FILE (a progress bar on a terminal; one summary line).")
@click.option("--key", "-k", default="", help="Key for every value (chooses the partition).")
@click.option("--acks", type=click.Choice(["0", "1", "all"]), default="1", show_default=True)
@bootstrap_option
@tls_options
def produce(topic_name: str, values: tuple[str, ...], file: Path | None, key: str, acks: str,
            bootstrap: Address) -> None:
    """Produce VALUES (or one value per line of FILE or stdin) to TOPIC.

    \b
    Examples:
      bayou produce orders created paid shipped --key user1
      printf 'a\\nb\\n' | bayou produce orders
      bayou produce orders -f events.txt
    """
    from bayou.client.rtes import RtesClient

    if file is not None and values:
        raise click.UsageError("give VALUES or --file, not both")
    if file is not None:
        with file.open(encoding="utf-8", errors="surrogateescape", newline="") as fh:
            items = [ln.rstrip("\r\n") for ln in fh]
    else:
        items = list(values) if values else [ln.rstrip("\r\n") for ln in sys.stdin]
    # every record is checked before the first is sent: nothing is partly produced
    for v in items:
        RtesClient.check_record(topic_name, key, v)
    with v1_client(bootstrap) as c, progress(f"producing to {topic_name}",
                                             len(items) if file is not None else None) as bar:
        for v in items:
            r = c.produce(topic_name, key, v, acks)
            if file is None:
                click.echo(f"partition={r.partition} offset={r.offset}")
            else:
                advance(bar)
    if file is not None:
        click.echo(f"produced {len(items)} records to {topic_name}")


def _fields(text: str | None) -> tuple[str, ...]:
    if text is None:
        return ()
    fields = tuple(f.strip() for f in text.split(",") if f.strip())
    bad = [f for f in fields if f not in PRINTABLE]
    if bad:
        raise click.BadParameter(f"unknown field {bad[0]!r} (choose from {', '.join(PRINTABLE)})",
                                 param_hint="--print")
    return fields


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", "backslashreplace")


def _json_bytes(doc: dict[str, Any], name: str, data: bytes | None) -> None:
    """``name`` as a string when it is UTF-8, else base64 with ``<name>_encoding: base64``."""
    if data is None:
        doc[name] = None
        return
    try:
        doc[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        doc[name] = base64.b64encode(data).decode()
        doc[f"{name}_encoding"] = "base64"


def render(r: ConsumerRecord, fmt: str, fields: tuple[str, ...]) -> str:
    from bayou.cli.common import iso_ms

    if fmt == "json":
        doc: dict[str, Any] = {"topic": r.topic, "partition": r.partition, "offset": r.offset,
                               "timestamp": r.timestamp_ms}
        _json_bytes(doc, "key", r.key)
        _json_bytes(doc, "value", r.value)
        doc["headers"] = [[k, _text(v)] for k, v in r.headers]
        return json.dumps(doc, ensure_ascii=False)
    if not fields:
        return f"{r.partition}:{r.offset}\t{_text(r.value)}"
    cols = {"partition": str(r.partition), "offset": str(r.offset), "key": _text(r.key),
            "timestamp": iso_ms(r.timestamp_ms),
            "headers": ",".join(f"{k}={_text(v)}" for k, v in r.headers) or "NO_HEADERS"}
    return "\t".join([*(cols[f] for f in fields), _text(r.value)])


@main.command()
@click.argument("topic_name", metavar="TOPIC")
@click.option("--partition", "-p", type=click.IntRange(0), default=None,
              help="Only this partition [default: all].")
@click.option("--group", "-g", metavar="GROUP",
              help="Join GROUP: read the partitions the broker deals this member, starting at the group's "
                   "committed offsets, and commit what was printed (every 5 s and at the end).")
@click.option("--from-beginning", is_flag=True, help="Start at the first stored record of each partition.")
@click.option("--offset", "-o", type=click.IntRange(0), default=None,
              help="Start at this offset in each partition.")
@click.option("--from-time", metavar="TIME",
              help="Start at the first record at or after TIME: ms since the epoch, ISO-8601 "
                   "(2026-11-26T10:00:00Z) or -DURATION (-15m, -2h).")
@click.option("--max-messages", "-n", type=click.IntRange(1), default=None, help="Stop after N records.")
@click.option("--follow", "-f", is_flag=True, help="Keep waiting for new records (Ctrl-C stops).")
@click.option("--print", "print_fields", metavar="FIELDS",
              help=f"Text columns before the value, in this order, tab-separated: {','.join(PRINTABLE)}.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one object per line with topic, partition, offset, timestamp (ms), key, value, "
                   "headers.")
@bootstrap_option
@iggy_option
@tls_options
@user_option
@password_option
def consume(topic_name: str, partition: int | None, group: str | None, from_beginning: bool,
            offset: int | None, from_time: str | None, max_messages: int | None, follow: bool,
            print_fields: str | None, fmt: str, bootstrap: Address, iggy_bootstrap: str | None, user: str,
            password: str) -> None:
    """Print the records of TOPIC, by default as PARTITION:OFFSET<TAB>VALUE, from the first stored
    one (or the group's committed offsets) to the end (or on, with --follow).

    \b
    Examples:
      bayou consume orders --from-beginning --max-messages 10
      bayou consume orders --group billing --follow --print key,timestamp
      bayou consume orders --from-time -15m --format json | jq .value
    """
    from bayou.client import Consumer, TopicPartition

    fields = _fields(print_fields)
    starts = [name for name, given in (("--from-beginning", from_beginning), ("--offset", offset is not None),
                                       ("--from-time", from_time is not None)) if given]
    if len(starts) > 1:
        raise click.UsageError(f"{' and '.join(starts)} exclude each other")
    if group is not None and partition is not None:
        raise click.UsageError("--partition and --group exclude each other (the group deals the partitions)")
    since = parse_time(from_time) if from_time is not None else None
    address = iggy_address(bootstrap, iggy_bootstrap)
    target("broker (Iggy)", address)
    consumer = Consumer(str(address), group_id=group, username=user, password=password,
                        auto_offset_reset="earliest", enable_auto_commit=False, tls=tls())
    delivered: dict[TopicPartition, int] = {}
    try:
        count = consumer.client.partition_count(topic_name)
        if partition is not None and partition >= count:
            raise click.ClickException(f"topic {topic_name} has no partition {partition} "
                                       f"({count} partitions)")
        if group is not None:
            consumer.subscribe([topic_name])
        else:
            consumer.assign(TopicPartition(topic_name, p)
                            for p in ([partition] if partition is not None else range(count)))
        started: set[TopicPartition] = set()

        def start(tps: set[TopicPartition]) -> None:
            for tp in sorted(tps - started):
                if from_beginning:
                    consumer.seek_to_beginning(tp)
                elif offset is not None:
                    consumer.seek(tp, offset)
                elif since is not None:
                    consumer.seek_to_timestamp(tp, since)
                started.add(tp)

        owned = consumer.assignment()
        start(owned)
        ends = {tp: consumer.client.latest_offset(tp.topic, tp.partition) for tp in owned}
        total = sum(max(ends[tp] - consumer.position(tp), 0) for tp in owned)
        if max_messages is not None:
            total = min(total, max_messages)
        _consume(consumer, start, ends, delivered, fmt, fields, max_messages, follow,
                 total if not follow and total > LARGE else None, group is not None)
    except KeyboardInterrupt:
        pass
    finally:
        try:
            if group is not None and delivered:
                consumer.commit(delivered)
        finally:
            consumer.close()


def _consume(consumer: Any, start: Any, ends: dict[TopicPartition, int], delivered: dict[TopicPartition, int],
             fmt: str, fields: tuple[str, ...], max_messages: int | None, follow: bool, bar_total: int | None,
             commits: bool) -> None:
    """Poll, print and note what was printed until the end (or ``max_messages``, or for ever)."""
    from bayou.client import TopicPartition

    printed = 0
    next_commit = time.monotonic() + COMMIT_EVERY_S
    out = sys.stdout
    with progress("consuming", bar_total) as bar:
        while max_messages is None or printed < max_messages:
            owned = consumer.assignment()
            start(owned)
            if not follow:
                for tp in owned - ends.keys():
                    ends[tp] = consumer.client.latest_offset(tp.topic, tp.partition)
                if all(consumer.position(tp) >= ends[tp] for tp in owned):
                    break
            limit = 500 if max_messages is None else min(500, max_messages - printed)
            records = consumer.poll(1000, max_records=limit)
            if not records and not follow:
                break  # nothing came within a second: what the log end promised is not readable (yet)
            for r in records:
                out.write(render(r, fmt, fields) + "\n")
            out.flush()  # a closed pipe raises here, before these records count as delivered
            for r in records:
                delivered[TopicPartition(r.topic, r.partition)] = r.offset + 1
            printed += len(records)
            advance(bar, len(records))
            if commits and delivered and time.monotonic() >= next_commit:
                consumer.commit(dict(delivered))
                next_commit = time.monotonic() + COMMIT_EVERY_S
