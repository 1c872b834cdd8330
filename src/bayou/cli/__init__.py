"""The ``bayou`` command: run a broker, manage topics, groups and the cluster, produce and consume.

``main`` is the entry point; each module adds its commands to it (serve.py: serve and verify;
topics.py; data.py: produce and consume; groups.py; cluster.py). common.py holds what they share.
"""

from bayou.cli import cluster, data, groups, serve, topics
from bayou.cli.root import main

__all__ = ["cluster", "data", "groups", "main", "serve", "topics"]
