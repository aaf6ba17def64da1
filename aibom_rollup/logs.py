"""Structured log lines for both processes: JSON objects, logfmt, or short text.

Fields go in `extra`: `log.info("document written", extra={"root": "ns/Kind/x"})`
prints `{"ts": ..., "level": "info", "logger": ..., "msg": "document written",
"root": "ns/Kind/x"}` (json), `ts=... level=info ... root=ns/Kind/x` (logfmt),
or `12:00:00.123 INFO document written root=ns/Kind/x` (text).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

FORMATS = ("json", "logfmt", "text")

# Attributes every LogRecord has; anything else came in through `extra`.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


def _ts(record: logging.LogRecord) -> str:
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        + f".{int(record.msecs):03d}Z"
    )


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, and every `extra` field."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": _ts(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update(_fields(record))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, separators=(",", ":"))


class LogfmtFormatter(logging.Formatter):
    """`ts=... level=... logger=... msg="..." key=value ...`."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [
            f"ts={_ts(record)}",
            f"level={record.levelname.lower()}",
            f"logger={record.name}",
            f"msg={json.dumps(record.getMessage())}",
        ]
        for key, value in _fields(record).items():
            text = str(value)
            parts.append(f"{key}={json.dumps(text) if ' ' in text or not text else text}")
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class TextFormatter(logging.Formatter):
    """Short lines for a terminal: local time, level, message, fields."""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%H:%M:%S", time.localtime(record.created))
        parts = [f"{ts}.{int(record.msecs):03d}", record.levelname[:4], record.getMessage()]
        parts += [f"{k}={v}" for k, v in _fields(record).items()]
        line = " ".join(str(p) for p in parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def formatter(fmt: str) -> logging.Formatter:
    if fmt == "json":
        return JsonFormatter()
    if fmt == "logfmt":
        return LogfmtFormatter()
    return TextFormatter()


def configure(*, level: str = "info", fmt: str = "json") -> None:
    """Log to stderr in `fmt` at `level`; aiohttp's per-request access log off."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(fmt))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The access log would print every review, probe and scrape.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
