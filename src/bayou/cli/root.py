"""The root command group every module adds its commands to."""

from __future__ import annotations

import click

from bayou import __version__
from bayou.cli.common import MainGroup


@click.group(cls=MainGroup,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="bayou")
def main() -> None:
    """bayou: a persistent, partitioned, append-only log broker.

    \b
    Start a broker with `bayou serve`, then use it:
      bayou topic ...     create, list, describe, alter, grow and delete topics (V1, port 9092)
      bayou produce ...   produce values (V1)
      bayou consume ...   read records, alone or in a group (the SDK, Iggy port 8090)
      bayou group ...     consumer groups, lag, offset resets (admin API, port 9080)
      bayou cluster ...   brokers, controller, partition leaders and ISR (admin API)
    `-b HOST` names the broker; the other ports follow from its host unless given.
    """
