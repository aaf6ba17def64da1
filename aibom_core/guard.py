"""The provenance guard: a ValidatingAdmissionPolicy generated from the kind registry.

The rule: a controller ownerReference is an edge of the roll-up only if
whoever set it may control the owner: `update` on the owner's `finalizers`
subresource (the check Kubernetes' OwnerReferencesPermissionEnforcement
applies to `blockOwnerDeletion`, held by Kubernetes' own controllers and by
operators whose RBAC comes from kubebuilder markers), or `update` on the owner
object itself (what an operator needs to manage what it owns; Grove's release
ClusterRole grants that and no `*/finalizers`). Whoever may update the owner
can already make it produce any child (its template is theirs to write), so
admitting their edge gains a forger nothing; a tenant who may only create Pods
(and read workloads) holds neither and stays out. The guard
enforces it inside the API server (CEL, `authorizer`), so it holds while the
webhook is down. It needs, for every owner kind, the plural resource to ask the
authorizer about: that mapping is generated here from the registry (never kept
by hand), and so is the list of resources the policy matches (every kind that
can be a child in a chain).

Owner kinds the registry does not know are not checked: the walk never follows
a reference to them (`aibom_core.walk`), so they are never edges of the roll-up
and a forged one gains nothing. Pure: documents in, YAML text out.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from aibom_core.kinds import GroupKind, KindRegistry
from aibom_core.opt_in import DEFAULT_OPT_IN, OPT_OUT_LABEL, OPT_OUT_VALUE

POLICY_NAME = "aibom-rollup-provenance"
BINDING_NAME = "aibom-rollup-provenance"
SHIPPED_PATH = "manifests/provenance/policy.yaml"

# What may go into a CEL string literal unescaped (the registry validates
# these shapes too; checked again here because the text becomes code).
_SAFE = re.compile(r"^[A-Za-z0-9./-]*$")

Doc = dict[str, Any]


def owner_key(gk: GroupKind) -> str:
    """The key of a kind in the policy's map: `<group>/<Kind>` (`/Pod` for core)."""
    return f"{gk.group}/{gk.kind}"


def owner_resources(registry: KindRegistry) -> dict[str, str]:
    """`<group>/<Kind>` -> plural resource, for every kind of the registry, sorted."""
    kinds = sorted(registry.tracked | registry.walk_only)
    return {owner_key(gk): registry.resource_of(gk) for gk in kinds}


def _cel_string(text: str) -> str:
    if not _SAFE.match(text):
        raise ValueError(f"{text!r} cannot be written into the policy's CEL")
    return f"'{text}'"


def _owners_expression(registry: KindRegistry) -> str:
    entries = [
        f"  {_cel_string(k)}: {_cel_string(v)}," for k, v in owner_resources(registry).items()
    ]
    return "{\n" + "\n".join(entries) + "\n}"


def match_rules(registry: KindRegistry) -> list[Doc]:
    """One rule per API group: every kind that can be a child in a chain, and its status.

    `<resource>/status` is matched too: for some kinds (Deployments, CRDs
    without a status strategy that resets metadata) a write through it may
    change metadata.ownerReferences.
    """
    by_group: dict[str, set[str]] = {}
    for gk in registry.tracked | registry.walk_only:
        resource = registry.resource_of(gk)
        by_group.setdefault(gk.group, set()).update({resource, f"{resource}/status"})
    return [
        {
            "apiGroups": [group],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"],
            "resources": sorted(resources),
            "scope": "Namespaced",
        }
        for group, resources in sorted(by_group.items())
    ]


# A controller reference as {group, kind, name, uid}: the group from the
# apiVersion (`apps/v1` -> `apps`, `v1` -> ``), as the walk matches kinds.
_AS_EDGE = (
    ".map(r, {'group': r.apiVersion.contains('/') ? r.apiVersion.split('/')[0] : '',\n"
    "         'kind': string(r.kind), 'name': string(r.name), 'uid': string(r.uid)})"
)

_CONTROLLERS = (
    "(has(object.metadata.ownerReferences) ? object.metadata.ownerReferences : [])\n"
    "  .filter(r, has(r.controller) && r.controller)\n  " + _AS_EDGE
)

_PREVIOUS = (
    "request.operation == 'UPDATE' && oldObject != null\n"
    "    && has(oldObject.metadata.ownerReferences)\n"
    "  ? oldObject.metadata.ownerReferences\n"
    "      .filter(r, has(r.controller) && r.controller)\n      "
    + _AS_EDGE.replace("\n", "\n    ")
    + "\n  : []"
)

_ADDED = "variables.controllers.filter(c, !(c in variables.previous))"

_CHECKED = "variables.added.filter(c, (c.group + '/' + c.kind) in variables.owners)"

# Finalizers first: what Kubernetes' own controllers hold (the StatefulSet
# controller may update statefulsets/finalizers but not statefulsets); the
# owner itself second. At most two authorizer checks (one controller reference).
_VALIDATION = (
    "variables.checked.all(c,\n"
    "  authorizer.group(c.group)\n"
    "    .resource(variables.owners[c.group + '/' + c.kind])\n"
    "    .subresource('finalizers')\n"
    "    .namespace(request.namespace)\n"
    "    .name(c.name)\n"
    "    .check('update')\n"
    "    .allowed()\n"
    "  || authorizer.group(c.group)\n"
    "    .resource(variables.owners[c.group + '/' + c.kind])\n"
    "    .namespace(request.namespace)\n"
    "    .name(c.name)\n"
    "    .check('update')\n"
    "    .allowed())"
)

# Only evaluated when the validation failed, so `checked` is not empty (and
# has one element: the API server allows one controller reference).
_MESSAGE = (
    "object.kind + ' ' + (has(object.metadata.name) ? object.metadata.name : '')\n"
    "+ ': ' + request.userInfo.username + ' may not set a controller ownerReference to '\n"
    "+ (variables.checked[0].group == '' ? 'core' : variables.checked[0].group)\n"
    "+ '/' + variables.checked[0].kind + '/' + variables.checked[0].name\n"
    "+ ' (uid ' + variables.checked[0].uid + '): that needs update on '\n"
    "+ variables.owners[variables.checked[0].group + '/' + variables.checked[0].kind]\n"
    "+ '/finalizers or on '\n"
    "+ variables.owners[variables.checked[0].group + '/' + variables.checked[0].kind]\n"
    "+ ' itself (API group \"' + variables.checked[0].group + '\") of that object in '\n"
    "+ 'namespace ' + request.namespace + ', which its real controller holds. Refused by '\n"
    f"+ 'ValidatingAdmissionPolicy {POLICY_NAME}: forged ownership must not enter an AIBOM.'"
)


def policy(registry: KindRegistry) -> Doc:
    """The ValidatingAdmissionPolicy `aibom-rollup-provenance`."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {
            "name": POLICY_NAME,
            "labels": {
                "app.kubernetes.io/name": "aibom-rollup",
                "app.kubernetes.io/component": "provenance",
            },
        },
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "matchPolicy": "Equivalent",
                "resourceRules": match_rules(registry),
            },
            "variables": [
                {"name": "owners", "expression": _owners_expression(registry)},
                {"name": "controllers", "expression": _CONTROLLERS},
                {"name": "previous", "expression": _PREVIOUS},
                {"name": "added", "expression": _ADDED},
                {"name": "checked", "expression": _CHECKED},
            ],
            "validations": [
                {
                    "expression": _VALIDATION,
                    "messageExpression": _MESSAGE,
                    "reason": "Forbidden",
                }
            ],
        },
    }


# Kubernetes' syntax of a label key (an optional DNS subdomain prefix and `/`, then a
# name of at most 63 characters) and of a label value: checked here so that a bad
# --namespace-label is one clear line, not an API server refusal of the binding.
_LABEL_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]"
_LABEL_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_LABEL_NAME}$")
_LABEL_VALUE = re.compile(rf"^({_LABEL_NAME})?$")


def namespace_selector(opt_in: tuple[str, str] = DEFAULT_OPT_IN) -> Doc:
    """The namespaces the guard binds: opted in with `opt_in` (the annotator's
    --namespace-label), and not labelled out of the guard. ValueError for a label
    Kubernetes would refuse."""
    key, value = opt_in
    if not _LABEL_KEY.match(key) or len(key.rpartition("/")[0]) > 253:
        raise ValueError(f"{key!r} is not a label key (like example.com/aibom)")
    if not _LABEL_VALUE.match(value):
        raise ValueError(f"{value!r} is not a label value (at most 63 of [A-Za-z0-9._-])")
    return {
        "matchExpressions": [
            {"key": key, "operator": "In", "values": [value]},
            {"key": OPT_OUT_LABEL, "operator": "NotIn", "values": [OPT_OUT_VALUE]},
        ]
    }


def binding(opt_in: tuple[str, str] = DEFAULT_OPT_IN) -> Doc:
    """The binding: every opted-in namespace that did not opt out.

    Exactly the contract's selector, with the opt-in label the annotator is
    given (--namespace-label): it reports a namespace guarded on these two
    labels, and only when the live binding selects exactly them
    (`in_force`).
    """
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {
            "name": BINDING_NAME,
            "labels": {
                "app.kubernetes.io/name": "aibom-rollup",
                "app.kubernetes.io/component": "provenance",
            },
        },
        "spec": {
            "policyName": POLICY_NAME,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": namespace_selector(opt_in)},
        },
    }


def documents(registry: KindRegistry, opt_in: tuple[str, str] = DEFAULT_OPT_IN) -> list[Doc]:
    return [policy(registry), binding(opt_in)]


# -- is the live guard ours? ----------------------------------------------------------------


def _normal(value: Any) -> Any:
    """A spec without what the API server fills in: empty maps and lists (absent
    selectors), and `matchPolicy: Equivalent` (the default)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            n = _normal(v)
            if n in ({}, [], None) or (k == "matchPolicy" and n == "Equivalent"):
                continue
            out[k] = n
        return out
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


def in_force(
    live_policy: Doc | None,
    live_binding: Doc | None,
    registry: KindRegistry,
    opt_in: tuple[str, str] = DEFAULT_OPT_IN,
) -> str | None:
    """Why the guard the API server has is not the one that makes a namespace guarded
    (None: it is). "Guarded" must be what the API server enforces, not that an
    object of the binding's name exists: the binding exists and denies
    (`validationActions` holds Deny), selects exactly the namespaces opted in
    with `opt_in` and not opted out, and points at our policy; the policy
    exists and is what `aibom-rollup policy` generates from this registry
    (no validation, match rule or condition added, removed or changed)."""
    if live_binding is None:
        return f"the ValidatingAdmissionPolicyBinding {BINDING_NAME} does not exist"
    if live_policy is None:
        return f"the ValidatingAdmissionPolicy {POLICY_NAME} does not exist"
    spec = live_binding.get("spec")
    spec = dict(spec) if isinstance(spec, dict) else {}
    actions = spec.pop("validationActions", None)
    if not isinstance(actions, list) or "Deny" not in actions:
        return f"binding {BINDING_NAME} does not deny (validationActions {actions})"
    want = binding(opt_in)["spec"]
    if _normal(spec) != _normal({k: v for k, v in want.items() if k != "validationActions"}):
        key, value = opt_in
        return (
            f"binding {BINDING_NAME} does not select exactly the namespaces labelled "
            f"{key}={value} and not {OPT_OUT_LABEL}={OPT_OUT_VALUE} (regenerate it: "
            f"aibom-rollup policy --namespace-label {key}={value})"
        )
    if _normal(live_policy.get("spec")) != _normal(policy(registry)["spec"]):
        return (
            f"the ValidatingAdmissionPolicy {POLICY_NAME} is not the one generated from this "
            "kind registry (regenerate it: aibom-rollup policy --kinds FILE, the same FILE)"
        )
    return None


_HEADER = f"""\
# GENERATED by `aibom-rollup policy` from the kind registry: do not edit.
# Regenerate after changing the kinds (use the same --kinds FILE you give the
# webhook and the annotator):
#   aibom-rollup policy --kinds FILE -o {SHIPPED_PATH}
#
# The provenance guard (docs/provenance-guard.md). A CREATE or UPDATE that
# adds or changes a controller ownerReference to a kind of the registry is
# refused unless the requester may `update` the owner's `finalizers`
# subresource or the owner itself (API group of the reference's apiVersion,
# the kind's plural resource below, the request's namespace, the reference's
# name): the first is the check OwnerReferencesPermissionEnforcement applies
# to blockOwnerDeletion, the second what an operator that manages the owner
# holds (Grove grants no */finalizers). A tenant who may only create Pods has
# neither.
# - In the API server (CEL): it holds while the webhook is down.
# - failurePolicy Fail: an evaluation error refuses. The expressions are
#   linear in the number of ownerReferences and make at most two authorizer
#   checks (one controller reference per object), far below the CEL cost limit.
# - An UPDATE that keeps its controller reference (same group, kind, name,
#   uid) is not re-checked; removing one (orphaning, garbage collection) never is.
# - Owner kinds not in the registry are not checked: the roll-up never follows
#   a reference to them, so it can prove nothing there.
# - Bound to namespaces labelled {{label}} (the annotator's --namespace-label:
#   aibom-rollup policy --namespace-label KEY=VALUE), unless labelled
#   {OPT_OUT_LABEL}={OPT_OUT_VALUE} (for a third-party controller that
#   lacks the permission).
"""


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (CEL) as literal blocks: the same text for every YAML reader."""


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


def render(registry: KindRegistry, opt_in: tuple[str, str] = DEFAULT_OPT_IN) -> str:
    """The policy and its binding as YAML, after a header saying how it was made."""
    body = yaml.dump_all(
        documents(registry, opt_in),
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        width=100,
    )
    return _HEADER.replace("{label}", f"{opt_in[0]}={opt_in[1]}") + body
