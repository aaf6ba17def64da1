"""The shipped manifests agree with the kind registry and with what the webhook needs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from aibom_core.kinds import GroupKind, default_registry
from aibom_core.stamp import Keys
from tests.unit.manifest_docs import PLURAL
from webhook.ownerwatch import owner_kinds

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"


def _covered(rules: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}


def _want(kinds: frozenset[GroupKind]) -> set[tuple[str, str]]:
    return {(gk.group, PLURAL[gk.kind]) for gk in kinds}


def test_rules_cover_exactly_the_registry() -> None:
    config = yaml.safe_load((MANIFESTS / "webhook/mutatingwebhook.yaml").read_text())
    hooks = {h["name"]: h for h in config["webhooks"]}
    reg = default_registry()
    assert _covered(hooks["tracked.stamp.aibom.dev"]["rules"]) == _want(reg.tracked)
    assert _covered(hooks["intermediates.stamp.aibom.dev"]["rules"]) == _want(reg.walk_only)
    for hook in hooks.values():
        assert hook["failurePolicy"] == "Ignore" and hook["sideEffects"] == "None"
        assert hook["timeoutSeconds"] <= 5 and hook["reinvocationPolicy"] == "IfNeeded"
        assert hook["admissionReviewVersions"] == ["v1"]
        exprs = hook["namespaceSelector"]["matchExpressions"]
        assert {"key": "aibom.dev/enabled", "operator": "In", "values": ["true"]} in exprs
        assert all(op in ("CREATE", "UPDATE") for r in hook["rules"] for op in r["operations"])
        assert hook["matchConditions"][0]["expression"].startswith("request.operation != 'UPDATE'")


def test_match_conditions_send_an_update_that_changes_any_of_our_keys() -> None:
    """docs/webhook.md: an UPDATE changing any of our keys, either proof key
    included, is sent to the webhook (so a user's edit of a proof is undone at
    once): each hook's condition compares exactly the keys of `Keys()` between
    object and oldObject. (The integration test in test_provenance.py shows it on
    the API server.)"""
    keys = Keys()
    want = {*keys.all(), keys.edge_proof, keys.replicaset_edge_proof}
    config = yaml.safe_load((MANIFESTS / "webhook/mutatingwebhook.yaml").read_text())
    for hook in config["webhooks"]:
        (condition,) = hook["matchConditions"]
        compared = re.findall(r"\[([^\]]*)\]\.exists\(k,", condition["expression"])
        assert len(compared) == 1, hook["name"]
        listed = re.findall(r"'([^']*)'", compared[0])
        assert len(listed) == len(set(listed)) and set(listed) == want, hook["name"]


def test_rbac_grants_get_on_every_walked_kind_and_nothing_else() -> None:
    docs = list(yaml.safe_load_all((MANIFESTS / "webhook/rbac.yaml").read_text()))
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    walk = [r for r in role["rules"] if r not in PROVENANCE_RULES]
    granted = _covered(walk)
    reg = default_registry()
    assert granted == _want(reg.tracked | reg.walk_only)
    # get on every walked kind; list/watch (the owner index) on exactly
    # the kinds it watches: all but Pods.
    indexed = _covered([r for r in walk if set(r["verbs"]) == {"get", "list", "watch"}])
    assert indexed == _want(frozenset(owner_kinds(reg)))
    assert ("", "pods") not in indexed
    assert {v for rule in walk for v in rule["verbs"]} == {"get", "list", "watch"}
    # Provenance: exactly this rule besides the walk's (no namespace or binding read:
    # whether a namespace is guarded proves no edge).
    assert [r for r in role["rules"] if r in PROVENANCE_RULES] == PROVENANCE_RULES


PROVENANCE_RULES = [
    {
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["subjectaccessreviews"],
        "verbs": ["create"],
    },
]
