"""Structured log lines: one JSON object per line (or `key=value` text).

Fields go in `extra`: `log.info("document written", extra={"root": "ns/Kind/x"})`
prints `{"ts": ..., "level": "info", "logger": ..., "msg": "document written",
"root": "ns/Kind/x"}`.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

# Attributes every LogRecord has; anything else came in through `extra`.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update(_fields(record))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%H:%M:%S", time.localtime(record.created))
        parts = [f"{ts}.{int(record.msecs):03d}", record.levelname[:4], record.getMessage()]
        parts += [f"{k}={v}" for k, v in _fields(record).items()]
        line = " ".join(str(p) for p in parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure(*, level: str = "info", fmt: str = "json") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's access log would print every probe and scrape.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
