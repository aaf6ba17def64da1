"""The provenance guard generator (`aibom-rollup policy`) and its shipped copy.

What the policy does on a real API server (refusals, the controllers that
still work, the CEL cost) is tests/integration/test_guard.py; here: the
generated document covers the registry, the shipped file is the generator's
output, and the command's edges.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from aibom_core.guard import (
    BINDING_NAME,
    POLICY_NAME,
    SHIPPED_PATH,
    binding,
    documents,
    in_force,
    owner_resources,
    policy,
    render,
)
from aibom_core.kinds import GroupKind, KindRegistry, default_registry, registry_from_config
from aibom_rollup.cli import main
from tests.unit.manifest_docs import MANIFESTS, REPO, components, only

REG = default_registry()
RAY_KINDS = (
    "tracked:\n  - {group: ray.io, kind: RayService}\n"
    "walkOnly:\n  - {group: ray.io, kind: RayCluster, resource: rayclustersets}\n"
)


def _matched(doc: dict[str, object]) -> set[tuple[str, str]]:
    spec = doc["spec"]
    assert isinstance(spec, dict)
    out: set[tuple[str, str]] = set()
    for rule in spec["matchConstraints"]["resourceRules"]:
        assert rule["operations"] == ["CREATE", "UPDATE"]
        assert rule["apiVersions"] == ["*"]
        out |= {(g, r) for g in rule["apiGroups"] for r in rule["resources"]}
    return out


def test_shipped_policy_is_the_generators_output() -> None:
    """Regenerate with `aibom-rollup policy -o manifests/provenance/policy.yaml`."""
    shipped = (REPO / SHIPPED_PATH).read_text(encoding="utf-8")
    assert shipped == render(REG), f"{SHIPPED_PATH} is stale: regenerate it"


def test_shipped_policy_is_composed_into_the_manifests() -> None:
    docs = components()
    assert only(docs, "ValidatingAdmissionPolicy", POLICY_NAME) == policy(REG)
    assert only(docs, "ValidatingAdmissionPolicyBinding", BINDING_NAME) == binding()
    for kust in (
        MANIFESTS / "kustomization.yaml",
        MANIFESTS / "overlays/cert-manager/kustomization.yaml",
    ):
        resources = yaml.safe_load(kust.read_text())["resources"]
        assert any(r.rstrip("/").endswith("provenance") for r in resources), kust


def test_every_kind_that_can_be_a_child_is_matched_with_its_status() -> None:
    matched = _matched(policy(REG))
    for gk in REG.tracked | REG.walk_only:
        resource = REG.resource_of(gk)
        assert (gk.group, resource) in matched, gk
        assert (gk.group, f"{resource}/status") in matched, gk
    assert len(matched) == 2 * len(REG.tracked | REG.walk_only)


def test_every_kind_is_a_checked_owner_with_its_resource() -> None:
    owners = owner_resources(REG)
    assert owners["apps/Deployment"] == "deployments"
    assert owners["/Pod"] == "pods"
    assert owners["nvidia.com/DynamoGraphDeployment"] == "dynamographdeployments"
    assert len(owners) == len(REG.tracked | REG.walk_only)
    # Written into the CEL map the validation reads.
    expression = next(v for v in policy(REG)["spec"]["variables"] if v["name"] == "owners")
    for key, resource in owners.items():
        assert f"'{key}': '{resource}'," in expression["expression"]


def test_configured_kinds_are_matched_and_checked() -> None:
    reg = registry_from_config(RAY_KINDS, source="ray.yaml")
    owners = owner_resources(reg)
    assert owners["ray.io/RayService"] == "rayservices"
    assert owners["ray.io/RayCluster"] == "rayclustersets"
    assert {("ray.io", "rayservices"), ("ray.io", "rayclustersets/status")} <= _matched(policy(reg))


def test_binding_selects_opted_in_not_opted_out() -> None:
    doc = binding()
    assert doc["spec"]["policyName"] == POLICY_NAME
    assert doc["spec"]["validationActions"] == ["Deny"]
    assert doc["spec"]["matchResources"]["namespaceSelector"] == {
        "matchExpressions": [
            {"key": "aibom.dev/enabled", "operator": "In", "values": ["true"]},
            {"key": "aibom.dev/provenance-guard", "operator": "NotIn", "values": ["disabled"]},
        ]
    }
    assert policy(REG)["spec"]["failurePolicy"] == "Fail"


def test_the_binding_selects_the_annotators_opt_in_label() -> None:
    """`--namespace-label` on the annotator and on `aibom-rollup policy`: the same label,
    or the guard binds namespaces the annotator does not serve and misses those it does."""
    doc = binding(("team.example/aibom", "on"))
    first = doc["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]
    assert first == {"key": "team.example/aibom", "operator": "In", "values": ["on"]}
    assert documents(REG, ("team.example/aibom", "on"))[1] == doc
    text = render(REG, ("team.example/aibom", "on"))
    assert "labelled team.example/aibom=on" in text
    assert list(yaml.safe_load_all(text))[1] == doc


@pytest.mark.parametrize(
    ("label", "message"),
    [(("bad key", "x"), "is not a label key"), (("team", "no way"), "is not a label value")],
)
def test_a_label_kubernetes_would_refuse_is_one_line(
    label: tuple[str, str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValueError, match=message):
        binding(label)
    assert main(["policy", "--namespace-label", "=".join(label)]) == 2
    assert message in capsys.readouterr().err


def _live(doc: dict[str, Any], **spec: object) -> dict[str, Any]:
    """A generated document as the API server returns it: defaults filled in."""
    out: dict[str, Any] = yaml.safe_load(yaml.safe_dump(doc))
    out["metadata"]["uid"] = "u"
    out["spec"].update(spec)
    if out["kind"] == "ValidatingAdmissionPolicy":
        out["spec"]["matchConstraints"].update(namespaceSelector={}, objectSelector={})
    else:
        out["spec"]["matchResources"].update(objectSelector={}, matchPolicy="Equivalent")
    return out


LABEL = ("team.example/aibom", "on")


def _weakened(change: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    pol: dict[str, Any] | None = _live(policy(REG))
    bind: dict[str, Any] | None = _live(binding(LABEL))
    assert pol is not None and bind is not None
    spec_b, spec_p = bind["spec"], pol["spec"]
    if change == "audit-only":
        spec_b["validationActions"] = ["Audit"]
    elif change == "default-label":
        spec_b["matchResources"] = binding()["spec"]["matchResources"]
    elif change == "object-selector":
        spec_b["matchResources"]["objectSelector"] = {"matchLabels": {"x": "y"}}
    elif change == "other-policy":
        spec_b["policyName"] = "something-else"
    elif change == "policy-condition":
        spec_p["matchConditions"] = [{"name": "never", "expression": "false"}]
    elif change == "policy-warn-only":
        spec_p["failurePolicy"] = "Ignore"
    elif change == "no-policy":
        pol = None
    elif change == "no-binding":
        bind = None
    return pol, bind


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ("audit-only", "does not deny"),
        ("default-label", "does not select exactly the namespaces labelled team.example/aibom=on"),
        ("object-selector", "does not select exactly"),
        ("other-policy", "does not select exactly"),
        ("policy-condition", "is not the one generated from this kind registry"),
        ("policy-warn-only", "is not the one generated"),
        ("no-policy", "ValidatingAdmissionPolicy aibom-rollup-provenance does not exist"),
        ("no-binding", "Binding aibom-rollup-provenance does not exist"),
    ],
)
def test_a_guard_that_is_not_ours_is_not_in_force(change: str, why: str) -> None:
    """ "Guarded" is what the API server enforces: a binding of the right name that
    only audits, selects other namespaces or points elsewhere, or a policy someone
    weakened, guards nothing the documents may claim."""
    pol, bind = _weakened(change)
    got = in_force(pol, bind, REG, LABEL)
    assert got is not None and why in got, got


def test_the_guard_as_generated_and_defaulted_is_in_force() -> None:
    assert in_force(_live(policy(REG)), _live(binding(LABEL)), REG, LABEL) is None
    # Deny and Audit: still denies.
    both = _live(binding(LABEL), validationActions=["Deny", "Audit"])
    assert in_force(_live(policy(REG)), both, REG, LABEL) is None
    # Generated from another registry: not ours.
    ray = registry_from_config(RAY_KINDS, source="ray.yaml")
    assert in_force(_live(policy(ray)), _live(binding(LABEL)), REG, LABEL) is not None


def test_render_is_deterministic_yaml_of_the_documents() -> None:
    text = render(REG)
    assert text == render(default_registry())
    assert [d for d in yaml.safe_load_all(text)] == documents(REG)
    assert text.startswith("# GENERATED by `aibom-rollup policy`")
    # CEL as literal blocks (the same text for Go's YAML and PyYAML).
    assert "expression: |-" in text


def test_a_kind_that_would_break_the_cel_is_refused() -> None:
    # The registry's parser refuses such names; a registry built in code is checked again.
    reg = KindRegistry(
        tracked=frozenset({GroupKind("x.io", "A' || true || '")}), walk_only=frozenset()
    )
    with pytest.raises(ValueError, match="cannot be written into the policy's CEL"):
        render(reg)


# -- the command --------------------------------------------------------------


def test_cli_prints_the_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy"]) == 0
    assert capsys.readouterr().out == render(REG)


def test_cli_writes_the_policy_with_kinds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kinds = tmp_path / "kinds.yaml"
    kinds.write_text(RAY_KINDS)
    out = tmp_path / "policy.yaml"
    assert main(["policy", "--kinds", str(kinds), "-o", str(out)]) == 0
    assert out.read_text() == render(registry_from_config(RAY_KINDS, source="x"))
    assert f"wrote ValidatingAdmissionPolicy {POLICY_NAME}" in capsys.readouterr().err


def test_cli_bad_kinds_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kinds = tmp_path / "kinds.yaml"
    kinds.write_text("tracked:\n  - {group: ray.io, kind: RayService, resource: Ray_Services}\n")
    assert main(["policy", "--kinds", str(kinds)]) == 2
    err = capsys.readouterr().err
    assert "tracked[0].resource 'Ray_Services' is not a plural resource name" in err
    assert "Traceback" not in err


def test_cli_unwritable_output_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["policy", "-o", str(blocker / "policy.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("aibom-rollup: error: ") and len(err.splitlines()) == 1


def test_help_lists_the_policy_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "policy" in capsys.readouterr().out


def test_kinds_shows_configured_resources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kinds = tmp_path / "kinds.yaml"
    kinds.write_text(RAY_KINDS)
    assert main(["kinds", "--kinds", str(kinds)]) == 0
    out = capsys.readouterr().out
    assert "{group: 'ray.io', kind: RayCluster, resource: rayclustersets}" in out
    assert "{group: 'ray.io', kind: RayService}" in out
