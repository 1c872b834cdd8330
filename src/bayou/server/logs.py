"""Structured logs: one JSON object per line (or plain text for a terminal)."""

from __future__ import annotations

import json
import logging
import sys
import time

_STANDARD = set(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update(_extra(record))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def _extra(record: logging.LogRecord) -> dict[str, object]:
    """The structured fields a call passed with ``extra=``."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


class TextFormatter(logging.Formatter):
    """One line for a person: the message, then the structured fields as ``key=value`` (a value
    with spaces or quotes is JSON-quoted), so ``listening protocol=rtes host=127.0.0.1 port=9092``
    keeps what the JSON format carries."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = _extra(record)
        if not fields:
            return line
        head, sep, tail = line.partition("\n")  # a traceback stays below the fields
        pairs = " ".join(f"{k}={_text_value(v)}" for k, v in fields.items())
        return f"{head} {pairs}{sep}{tail}"


def _text_value(value: object) -> str:
    if not isinstance(value, str):  # numbers, booleans, lists and tables as compact JSON
        text = json.dumps(value, default=str, separators=(",", ":"))
        return json.dumps(text) if any(c in text for c in " \n\t") else text
    if value == "" or any(c in value for c in ' "=\n\t'):
        return json.dumps(value)
    return value


def setup_logging(level: str = "info", fmt: str = "json") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
