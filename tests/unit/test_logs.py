"""The shared log formats: extra fields land in every format, nothing else does."""

from __future__ import annotations

import json
import logging

import pytest

from aibom_edge.logs import formatter


def _record() -> logging.LogRecord:
    rec = logging.makeLogRecord(
        {"name": "annotator", "levelno": 20, "levelname": "INFO", "msg": "document %s"}
    )
    rec.args = ("written",)
    rec.root = "ns/DynamoGraphDeployment/g"
    rec.reason = "NotFound apps/Deployment/x"
    return rec


def test_json() -> None:
    doc = json.loads(formatter("json").format(_record()))
    assert doc["msg"] == "document written" and doc["level"] == "info"
    assert doc["root"] == "ns/DynamoGraphDeployment/g"
    assert set(doc) == {"ts", "level", "logger", "msg", "root", "reason"}


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ("logfmt", 'msg="document written" root=ns/DynamoGraphDeployment/g reason="NotFound apps'),
        ("text", 'INFO document written root=ns/DynamoGraphDeployment/g reason="NotFound apps'),
    ],
)
def test_line_formats(fmt: str, expected: str) -> None:
    assert expected in formatter(fmt).format(_record())
