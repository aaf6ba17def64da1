"""Log injection: hostile request data never forges a record or a field.

The webhook logs what strangers send (UIDs, namespaces, names, owner names in
reasons, the reason a body was refused). Every such field is driven through
the real HTTP edge with hostile values, in all three formats: each record is
exactly one line with no raw control character, and the logfmt fields parse
back (with a strict logfmt reader) to exactly the values logged.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from aibom_edge.logs import formatter
from tests.unit.kobj import mk
from tests.unit.webhook_fakes import MemorySource, admission_app, body, review

MakeClient = Callable[..., Awaitable[TestClient[Any, Any]]]

HOSTILE = [
    "a\nts=2026-01-01T00:00:00.000Z level=error msg=forged",
    'x" injected="1',
    "k=v",
    "\x1b[31mred\x1b[0m",
    "ünïcødé\u2028next\u2029para\x85nel",
    "",
    " lead and trail ",
    "back\\slash\\",
    "tab\there\rcr\x0bvt\x0cff\x1cfs\x00nul\x7fdel",
    "日本語=値",
]
# Python's str.splitlines() breaks on all of these; none may appear raw.
LINE_BREAKS = re.compile(r"[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def parse_logfmt(line: str) -> dict[str, str]:
    """A strict logfmt reader: `key=bare` or `key="json-escaped"`, single spaces."""
    out: dict[str, str] = {}
    pos = 0
    pair = re.compile(r'([A-Za-z0-9_.\-]+)=("(?:[^"\\]|\\.)*"|[^\s="\\]+)')
    while pos < len(line):
        m = pair.match(line, pos)
        assert m, f"not logfmt at {pos}: {line[pos : pos + 40]!r} in {line!r}"
        key, raw = m.group(1), m.group(2)
        assert key not in out, f"duplicate field {key} in {line!r}"
        out[key] = json.loads(raw) if raw.startswith('"') else raw
        pos = m.end()
        if pos < len(line):
            assert line[pos] == " ", line
            pos += 1
    return out


def _fields(record: logging.LogRecord) -> dict[str, str]:
    std = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}
    return {k: str(v) for k, v in vars(record).items() if k not in std and not k.startswith("_")}


@pytest.fixture
async def records(aiohttp_client: MakeClient) -> list[logging.LogRecord]:
    """Every record the webhook logs while answering hostile reviews and bodies."""
    app, _ = admission_app(MemorySource())
    client = await aiohttp_client(app)
    capture = Capture()
    logger = logging.getLogger("webhook")
    old_level = logger.level
    logger.addHandler(capture)
    logger.setLevel(logging.DEBUG)
    try:
        headers = {"Content-Type": "application/json"}
        for evil in HOSTILE:
            owner = mk("Deployment", evil or "x")  # absent: the walk fails NotFound
            pod = mk("ReplicaSet", evil, owner, ns=evil)
            doc = review(pod, uid=evil or "u", namespace=evil)
            resp = await client.post("/mutate", data=body(doc), headers=headers)
            assert resp.status == 200
            # Refused bodies log the reason, with request values in it.
            bad = {"apiVersion": evil, "kind": "AdmissionReview"}
            resp = await client.post("/mutate", data=body(bad), headers=headers)
            assert resp.status == 400
            bad_op = review(pod, uid="u")
            bad_op["request"]["operation"] = evil
            resp = await client.post("/mutate", data=body(bad_op), headers=headers)
            assert resp.status == 400
    finally:
        logger.removeHandler(capture)
        logger.setLevel(old_level)
    carried = [r for r in capture.records if any(e and e in str(vars(r)) for e in HOSTILE)]
    assert len(carried) >= len(HOSTILE), "the hostile values must reach the logs"
    return capture.records


@pytest.mark.parametrize("fmt", ["json", "logfmt", "text"])
def test_one_record_per_line_in_every_format(fmt: str, records: list[logging.LogRecord]) -> None:
    f = formatter(fmt)
    for record in records:
        line = f.format(record)
        assert not LINE_BREAKS.search(line), repr(line)
        assert not RAW_CONTROL.search(line), repr(line)


def test_logfmt_fields_round_trip(records: list[logging.LogRecord]) -> None:
    f = formatter("logfmt")
    for record in records:
        line = f.format(record)
        parsed = parse_logfmt(line)
        assert parsed["msg"] == record.getMessage()
        for key, value in _fields(record).items():
            assert parsed[key] == value, (key, line)
        assert set(parsed) == {"ts", "level", "logger", "msg", *_fields(record)}


def test_json_fields_round_trip(records: list[logging.LogRecord]) -> None:
    f = formatter("json")
    for record in records:
        doc = json.loads(f.format(record))
        assert doc["msg"] == record.getMessage()
        for key, value in _fields(record).items():
            assert str(doc[key]) == value


@pytest.mark.parametrize("value", HOSTILE)
def test_logfmt_value_quotes_exactly_when_needed(value: str) -> None:
    from aibom_edge.logs import logfmt_value, quote

    out = logfmt_value(value)
    assert out.startswith('"') and json.loads(out) == value
    assert logfmt_value("plain-value/with.dots:1") == "plain-value/with.dots:1"
    assert quote("é") == '"é"'  # readable Unicode stays readable


def test_logfmt_traceback_is_one_quoted_field() -> None:
    try:
        raise RuntimeError("boom\nts=forged level=error")
    except RuntimeError:
        import sys

        rec = logging.makeLogRecord(
            {"name": "w", "levelno": 40, "levelname": "ERROR", "msg": "failed"}
        )
        rec.exc_info = sys.exc_info()
    line = formatter("logfmt").format(rec)
    assert "\n" not in line
    assert "RuntimeError: boom\nts=forged" in parse_logfmt(line)["exc"]
    text = formatter("text").format(rec)
    assert all(t.startswith("    ") for t in text.splitlines()[1:])
