"""OPA Gatekeeper in the loop: the real engine decides on our stamp, with the shipped policies.

Gatekeeper v3.23.1 (its controller manager twice, as the release's webhook and
audit Deployments, as its ServiceAccount gatekeeper-admin,
tests/controlplane/components/gatekeeper.py) runs the ConstraintTemplate and
constraints of manifests/policies/gatekeeper/ behind our real webhook (its
shipped ClusterRole; its configuration for namespaces labelled
aibom.dev/enabled=true). The tests are tests/integration/engines.py's, the same
for Kyverno (test_kyverno.py); here: how Gatekeeper refuses, and where
its audit lists a Pod (the dryrun constraint's status).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.controlplane import Component, ControlPlane, Kubectl
from tests.integration.engines import OPTED_IN, EngineTests
from tests.integration.support import MANIFESTS, StartWebhook, Webhook, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.components("gatekeeper")]

POLICIES = MANIFESTS / "policies" / "gatekeeper"
CONSTRAINTS = ("require-aibom-coverage.yaml", "audit-aibom-coverage.yaml")
KIND_CRD = "aibomcoveredpods.constraints.gatekeeper.sh"


class GatekeeperPolicies:
    """The shipped template and constraints, installed; their refusal and their audit."""

    refusal = "[aibom-require-coverage] "

    def __init__(self, kubectl: Kubectl) -> None:
        self.kubectl = kubectl

    def audited(self, ns: str, pod: str) -> str | None:
        """From the dryrun constraint's status, once an audit started after the Pod was
        created (Gatekeeper lists violations, never what passed)."""
        out = self.kubectl("get", "aibomcoveredpods", "aibom-audit-coverage", "-o", "json")
        status = json.loads(out.stdout).get("status") or {}
        for violation in status.get("violations") or []:
            if (violation["namespace"], violation["name"]) == (ns, pod):
                return str(violation["message"])
        made = self.kubectl(
            "get", "-n", ns, f"pod/{pod}", "-o", "jsonpath={.metadata.creationTimestamp}"
        ).stdout  # fmt: skip
        # RFC 3339, UTC, whole seconds: compared as text; the same second proves nothing.
        return "" if status.get("auditTimestamp", "") > made else None


@pytest.fixture(scope="module")
def webhook(start_webhook: StartWebhook, components: dict[str, Component]) -> Webhook:
    return start_webhook(
        user="aibom-webhook-gatekeeper", name="aibom-rollup-gatekeeper", selector=OPTED_IN
    )


@pytest.fixture(scope="module")
def engine(
    control_plane: ControlPlane, kubectl: Kubectl, webhook: Webhook
) -> Iterator[GatekeeperPolicies]:
    """As docs/policy-engines.md installs them: the template, its kind, the constraints."""
    kubectl("apply", "-f", str(POLICIES / "template.yaml"))
    try:
        wait_for(f"Gatekeeper to serve {KIND_CRD}", lambda: control_plane.crd_established(KIND_CRD))
        for name in CONSTRAINTS:
            kubectl("apply", "-f", str(POLICIES / name))
        yield GatekeeperPolicies(kubectl)
    finally:
        for name in (*CONSTRAINTS, "template.yaml"):
            kubectl("delete", "-f", str(POLICIES / name), "--ignore-not-found", check=False)


class TestGatekeeper(EngineTests):
    """The shared tests (tests/integration/engines.py), against Gatekeeper."""
