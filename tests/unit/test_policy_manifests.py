"""The shipped policy-engine policies (manifests/policies/) agree with each other and with
the webhook: the same opt-in label, the same default prefix, the same refused values.

Their behaviour is tested by the engines themselves (tests/integration/
test_policy_suites.py: ``kyverno test``, ``gator verify``; test_kyverno.py,
test_gatekeeper.py: the real engines behind our webhook). What is checked here
is what those would only show as a silent miss: a policy that selects another
namespace label, or reads another prefix, than the webhook writes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from aibom_core.opt_in import OPT_IN_LABEL, OPT_IN_VALUE
from aibom_core.stamp import DEFAULT_PREFIX

POLICIES = Path(__file__).resolve().parents[2] / "manifests" / "policies"
KYVERNO = ("require-aibom-coverage.yaml", "audit-aibom-coverage.yaml")
GATEKEEPER = ("require-aibom-coverage.yaml", "audit-aibom-coverage.yaml")
REFUSED = ("uncovered", "unproven")


def load(*parts: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((POLICIES.joinpath(*parts)).read_text())
    return doc


def variables(policy: dict[str, Any]) -> dict[str, str]:
    return {v["name"]: v["expression"] for v in policy["spec"]["variables"]}


@pytest.mark.parametrize("name", KYVERNO)
def test_kyverno_policy_reads_the_webhooks_stamp(name: str) -> None:
    policy = load("kyverno", name)
    spec = policy["spec"]
    assert spec["matchConstraints"]["namespaceSelector"] == {
        "matchLabels": {OPT_IN_LABEL: OPT_IN_VALUE}
    }
    assert variables(policy)["prefix"] == f"'{DEFAULT_PREFIX}'"
    # The prefix variable first: the documented patch replaces /spec/variables/0.
    assert spec["variables"][0]["name"] == "prefix"
    # The stamp is on Pods, never on pod templates: no rules for pod controllers.
    assert spec["autogen"] == {"podControllers": {"controllers": []}}
    (validation,) = spec["validations"]
    assert f"{list(REFUSED)}".replace('"', "'") in validation["expression"]


def test_kyverno_policies_read_the_stamp_alike() -> None:
    """The audit policy is the enforcing one's rule: the same stamp variables."""
    enforce, audit = (variables(load("kyverno", n)) for n in KYVERNO)
    for name in ("prefix", "rollup", "reason"):
        assert enforce[name] == audit[name], name
    assert load("kyverno", KYVERNO[0])["spec"]["validationActions"] == ["Deny"]
    assert load("kyverno", KYVERNO[1])["spec"]["validationActions"] == ["Audit"]


@pytest.mark.parametrize("name", GATEKEEPER)
def test_gatekeeper_constraint_selects_the_opted_in_namespaces(name: str) -> None:
    spec = load("gatekeeper", name)["spec"]
    assert spec["match"]["namespaceSelector"] == {"matchLabels": {OPT_IN_LABEL: OPT_IN_VALUE}}
    assert spec["match"]["kinds"] == [{"apiGroups": [""], "kinds": ["Pod"]}]
    assert spec["parameters"] == {"annotationPrefix": DEFAULT_PREFIX}


def test_gatekeeper_template_refuses_the_same_values_with_the_same_default() -> None:
    rego = load("gatekeeper", "template.yaml")["spec"]["targets"][0]["rego"]
    assert re.search(r"refused := \{" + ", ".join(f'"{v}"' for v in REFUSED) + r"\}", rego)
    assert f'}} else = "{DEFAULT_PREFIX}"' in rego
