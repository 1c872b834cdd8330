"""bayou: a persistent, partitioned, append-only log broker speaking four wire protocols."""

__version__ = "0.1.0"
