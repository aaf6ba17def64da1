"""Structured log lines for both processes: JSON objects, logfmt, or short text.

Fields go in `extra`: `log.info("document written", extra={"root": "ns/Kind/x"})`
prints `{"ts": ..., "level": "info", "logger": ..., "msg": "document written",
"root": "ns/Kind/x"}` (json), `ts=... level=info ... root=ns/Kind/x` (logfmt),
or `12:00:00.123 INFO document written root=ns/Kind/x` (text).
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Any

FORMATS = ("json", "logfmt", "text")

# Attributes every LogRecord has; anything else came in through `extra`.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


# Request data (names, UIDs, reasons) ends up in log fields, and a stranger
# chooses it: a value must never end its line, start a forged field or
# record, or drive the terminal. logfmt (go-logfmt's rule): a value is
# written bare only when it is non-empty and has no space, `=`, `"`, backslash
# or control character; otherwise it is quoted, with `"` and backslash escaped
# and every control character (C0, DEL, C1, the Unicode line and paragraph
# separators) escaped as JSON writes them (`\n`, `\u001b`). The text format
# uses the same rule for its fields and makes its message's controls visible.
_NEEDS_QUOTES = re.compile(r'[\s="\\\x00-\x1f\x7f-\x9f\u2028\u2029]')
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_BAD_KEY = re.compile(r"[^A-Za-z0-9_.\-]")


def _escape_control(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def quote(text: str) -> str:
    """`text` as a quoted logfmt/JSON string: one line, no raw control character."""
    return _CONTROL.sub(_escape_control, json.dumps(text, ensure_ascii=False))


def logfmt_value(value: Any) -> str:
    """A logfmt value: bare when safe, quoted and escaped otherwise."""
    text = value if isinstance(value, str) else str(value)
    if text and not _NEEDS_QUOTES.search(text):
        return text
    return quote(text)


def logfmt_key(key: str) -> str:
    """A logfmt key: `extra` keys are ours, but never let one break the line."""
    return _BAD_KEY.sub("_", key) or "_"


def visible(text: str) -> str:
    """Control characters made visible (as JSON escapes): the text format's message."""
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(lambda m: json.dumps(m.group())[1:-1], text)


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
            f"logger={logfmt_value(record.name)}",
            f"msg={quote(record.getMessage())}",
        ]
        for key, value in _fields(record).items():
            parts.append(f"{logfmt_key(key)}={logfmt_value(value)}")
        if record.exc_info:
            # One record, one line: the traceback is a quoted field.
            parts.append(f"exc={quote(self.formatException(record.exc_info))}")
        return " ".join(parts)


class TextFormatter(logging.Formatter):
    """Short lines for a terminal: local time, level, message, fields."""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%H:%M:%S", time.localtime(record.created))
        parts = [
            f"{ts}.{int(record.msecs):03d}",
            record.levelname[:4],
            visible(record.getMessage()),
        ]
        parts += [f"{logfmt_key(k)}={logfmt_value(v)}" for k, v in _fields(record).items()]
        line = " ".join(parts)
        if record.exc_info:
            # For a terminal: the traceback on the lines below, each indented
            # and made visible, so none of them can pass for a record.
            tb = self.formatException(record.exc_info).splitlines()
            line += "".join(f"\n    {visible(t)}" for t in tb)
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
