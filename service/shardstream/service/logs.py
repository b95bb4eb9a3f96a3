"""The service's log lines: text for a person, or one JSON object per line for a log pipeline.

``shardstream --log-format json`` (or ``SHARDSTREAM_LOG_FORMAT=json``) makes
every record of the process one line of JSON with ``time`` (UTC, ISO 8601),
``level``, ``logger`` and ``message``, plus ``exception`` (the formatted
traceback) when the record carries one, so Loki, Cloud Logging or
Elasticsearch index the fields without a parsing rule, and a traceback
stays one record instead of many lines.
"""

from __future__ import annotations

import datetime
import json
import logging
import os

LOG_FORMATS = ("text", "json")
LOG_FORMAT_ENV = "SHARDSTREAM_LOG_FORMAT"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc)
            .isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def log_format(flag: str | None) -> str:
    """The format asked for: the flag when given, else SHARDSTREAM_LOG_FORMAT, else text.
    Raises ValueError for a value that is neither."""
    value = (flag if flag is not None else os.environ.get(LOG_FORMAT_ENV, "text")).strip().lower() or "text"
    if value not in LOG_FORMATS:
        source = "--log-format" if flag is not None else LOG_FORMAT_ENV
        raise ValueError(f"{source} must be one of {', '.join(LOG_FORMATS)}, got {value!r}")
    return value


def configure_logging(level: str, json_format: bool) -> None:
    """Send the process's log records to stderr at `level` (a name: INFO, debug...), as text or JSON
    lines. As logging.basicConfig, it leaves a root logger that already has handlers alone."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if json_format else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler])


__all__ = ["LOG_FORMATS", "LOG_FORMAT_ENV", "JsonFormatter", "configure_logging", "log_format"]
