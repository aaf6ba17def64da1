"""The Grafana dashboard and the alert rules name only metrics the code exports.

Every PromQL expression of `charts/aibom-rollup/dashboards/aibom-rollup.json`
and `charts/aibom-rollup/rules/aibom-rollup.rules.yaml` is reduced to the
series names it selects, and each must be a sample name that the webhook's or
the annotator's registry exposes (a counter `x` exposes `x_total`, a histogram
`x_bucket`, `x_sum`, `x_count`). Renaming a metric in `webhook/metrics.py` or
`annotator/metrics.py` breaks this test. Every alert has a runbook section in
docs/runbooks.md. The serving certificate's expiry gauge follows rotations.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from annotator.export import ExportMetrics
from annotator.metrics import Metrics as AnnotatorMetrics
from certs.pki import issue_serving, new_ca
from tests.unit.webhook_fakes import MemorySource
from webhook.flags import Settings
from webhook.metrics import Metrics as WebhookMetrics
from webhook.server import Server
from webhook.tls import CertReloader

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "aibom-rollup"
DASHBOARD = CHART / "dashboards" / "aibom-rollup.json"
RULES = CHART / "rules" / "aibom-rollup.rules.yaml"
RUNBOOKS = REPO / "docs" / "runbooks.md"

# PromQL words that look like identifiers but are not series names.
_KEYWORDS = {
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "inf",
    "nan",
}
_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "gauge": ("",),
}


def _exported(registry: CollectorRegistry) -> set[str]:
    names: set[str] = set()
    for family in registry.collect():
        for suffix in _SUFFIXES.get(family.type, ("",)):
            names.add(family.name + suffix)
    return names


def exported_series() -> set[str]:
    """Every sample name the two processes can expose (labelled or not)."""
    annotator = AnnotatorMetrics()
    annotator.watch_requests(lambda: {"GET": 1})
    ExportMetrics(annotator.registry)  # registered when --export-registry is given
    return _exported(WebhookMetrics().registry) | _exported(annotator.registry)


def series_in(expr: str) -> set[str]:
    """The series names a PromQL expression selects (functions, labels, durations dropped)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges, subqueries
    # label lists (and the keywords that take them), so `sum by (x) (...)` reads as `sum (...)`
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*(\([^)]*\))?", " ", text)
    out: set[str] = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word = m.group(0)
        rest = text[m.end() :].lstrip()
        if rest.startswith("(") or word.lower() in _KEYWORDS:
            continue  # a function or aggregation, or a keyword
        if text[m.start() - 1 : m.start()] == "$":
            continue  # a Grafana variable
        out.add(word)
    return out


def dashboard_exprs() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    out: list[tuple[str, str]] = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            out.append((panel["title"], target["expr"]))
    return out


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_the_series_parser_finds_names_and_only_names() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, queue) (rate(a_b_bucket{x="y", le!="z"}[5m])))'
        " / on (pod) group_left max_over_time(c_d[$__range]) - time() > 14 * 86400"
        " unless absent(e_f == 1)"
    )
    assert series_in(expr) == {"a_b_bucket", "c_d", "e_f"}


@pytest.mark.parametrize(("title", "expr"), dashboard_exprs())
def test_every_dashboard_query_names_exported_metrics(title: str, expr: str) -> None:
    names = series_in(expr)
    assert names, f"panel {title!r}: no series in {expr!r}"
    unknown = names - exported_series()
    assert not unknown, f"panel {title!r} queries {sorted(unknown)}, which no process exports"


@pytest.mark.parametrize("rule", rules(), ids=lambda r: str(r.get("alert")))
def test_every_alert_names_exported_metrics_and_has_a_runbook(rule: dict[str, Any]) -> None:
    names = series_in(rule["expr"])
    assert names
    unknown = names - exported_series()
    assert not unknown, f"alert {rule['alert']} queries {sorted(unknown)}, which no process exports"
    anchor = rule["annotations"]["runbook"].split("#", 1)[1]
    headings = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in RUNBOOKS.read_text().splitlines()
        if line.startswith("## ")
    }
    assert anchor in headings, f"docs/runbooks.md has no section for {rule['alert']}"
    assert rule["labels"]["severity"] in {"warning", "critical"}


def test_the_check_fails_on_a_renamed_metric() -> None:
    # What a rename looks like to the tests above: the old name is unknown.
    assert "aibom_webhook_admissions_total" in exported_series()
    assert series_in("rate(aibom_webhook_admission_total[5m])") - exported_series()


def test_the_dashboard_has_the_panels_the_issue_lists() -> None:
    titles = {title for title, _ in dashboard_exprs()}
    for wanted in (
        "Admissions by outcome",
        "Webhook latency p50 / p99",
        "Walk GETs per admission",
        "Owner-cache hit ratio",
        "Unresolved by reason",
        "Documents by state",
        "Reconcile lag",
        "Leader and leader changes",
        "API requests by verb",
    ):
        assert wanted in titles


def test_the_alerts_the_issue_lists_exist() -> None:
    names = {r["alert"] for r in rules()}
    assert {
        "AibomWebhookErrors",
        "AibomWebhookSlow",
        "AibomUnresolvedRatioHigh",
        "AibomAnnotatorNotLeading",
        "AibomDocumentsStale",
        "AibomWebhookCertificateExpiresSoon",
    } <= names


def _write_pair(tmp_path: Path, days: int) -> float:
    now = dt.datetime.now(dt.UTC)
    ca = new_ca(common_name="t", now=now, days=30)
    pair = issue_serving(ca, dns_names=["localhost"], ips=["127.0.0.1"], now=now, days=days)
    (tmp_path / "tls.key").write_bytes(pair.key_pem)
    (tmp_path / "tls.crt").write_bytes(pair.cert_pem)
    return pair.cert.not_valid_after_utc.timestamp()


def test_cert_expiry_gauge_follows_the_served_certificate(tmp_path: Path) -> None:
    first = _write_pair(tmp_path, days=3)
    reloader = CertReloader(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    server = Server(
        Settings(host="127.0.0.1", port=0, owner_cache_ttl=0),
        source=MemorySource([]),
        reloader=reloader,
    )
    gauge = "aibom_webhook_serving_cert_expiry_timestamp_seconds"
    assert server.metrics.registry.get_sample_value(gauge) == first
    assert gauge in generate_latest(server.metrics.registry).decode()
    second = _write_pair(tmp_path, days=9)
    assert second > first
    assert reloader.reload()
    assert server.metrics.registry.get_sample_value(gauge) == second
