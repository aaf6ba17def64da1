"""The shipped ValidatingAdmissionPolicy agrees with the annotator and its RBAC (static)."""

from __future__ import annotations

from pathlib import Path

import yaml

from aibom_core.document import MANAGED_BY, MANAGED_BY_LABEL
from aibom_core.stamp import DEFAULT_PREFIX

ROOT = Path(__file__).resolve().parents[2] / "manifests" / "annotator"
POLICY = ROOT.parent / "annotator-policy"


def test_policy_names_the_shipped_service_account_prefix_and_label() -> None:
    policy, binding = list(yaml.safe_load_all((POLICY / "writes-policy.yaml").read_text()))
    rbac = list(yaml.safe_load_all((ROOT / "rbac.yaml").read_text()))
    sa = next(d for d in rbac if d and d["kind"] == "ServiceAccount")["metadata"]
    user = f"system:serviceaccount:{sa['namespace']}:{sa['name']}"
    (cond,) = policy["spec"]["matchConditions"]
    assert f"'{user}'" in cond["expression"]
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert variables["prefix"] == repr(DEFAULT_PREFIX)
    assert f"'{MANAGED_BY_LABEL}'" in variables["ours"] and f"'{MANAGED_BY}'" in variables["ours"]
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }
    kustomization = yaml.safe_load((POLICY / "kustomization.yaml").read_text())
    assert "writes-policy.yaml" in kustomization["resources"]
    assert "namespace" not in kustomization  # cluster-scoped: no namespace stamped on it
