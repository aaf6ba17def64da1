"""Kyverno in the loop: the real engine decides on our stamp, with the shipped policies.

Kyverno v1.19.1 (its admission controller and reports controller, each as its
release's ServiceAccount, tests/controlplane/components/kyverno.py) runs the
ValidatingPolicies of manifests/policies/kyverno/ behind our real webhook (its
shipped ClusterRole; its configuration for namespaces labelled
aibom.dev/enabled=true). The tests are tests/integration/engines.py's, the same
for Gatekeeper (test_gatekeeper.py); here: how Kyverno refuses, and where
its audit (PolicyReports written by the reports controller's background scan)
lists a Pod.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.controlplane import Component, Kubectl
from tests.integration.engines import OPTED_IN, EngineTests
from tests.integration.support import MANIFESTS, StartWebhook, Webhook

pytestmark = [pytest.mark.integration, pytest.mark.components("kyverno")]

POLICIES = MANIFESTS / "policies" / "kyverno"
AUDIT_POLICY = "aibom-audit-coverage"


class KyvernoPolicies:
    """The shipped Kyverno policies, installed; their refusal and their reports."""

    refusal = "Refused by the Kyverno policy aibom-require-coverage"

    def __init__(self, kubectl: Kubectl) -> None:
        self.kubectl = kubectl

    def audited(self, ns: str, pod: str) -> str | None:
        """From the PolicyReport of Pod ``ns/pod`` (one per resource)."""
        out = self.kubectl("get", "policyreports.wgpolicyk8s.io", "-n", ns, "-o", "json")
        for report in json.loads(out.stdout)["items"]:
            if report.get("scope", {}).get("name") != pod:
                continue
            results = [r for r in report.get("results") or [] if r["policy"] == AUDIT_POLICY]
            failed = [r.get("message", "") for r in results if r["result"] == "fail"]
            if failed:
                return str(failed[0])
            if results:
                return ""
        return None


@pytest.fixture(scope="module")
def webhook(start_webhook: StartWebhook, components: dict[str, Component]) -> Webhook:
    return start_webhook(
        user="aibom-webhook-kyverno", name="aibom-rollup-kyverno", selector=OPTED_IN
    )


@pytest.fixture(scope="module")
def engine(kubectl: Kubectl, webhook: Webhook) -> Iterator[KyvernoPolicies]:
    kubectl("apply", "-k", str(POLICIES))
    try:
        yield KyvernoPolicies(kubectl)
    finally:
        kubectl("delete", "-k", str(POLICIES), "--ignore-not-found")


class TestKyverno(EngineTests):
    """The shared tests (tests/integration/engines.py), against Kyverno."""
