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
from aibom_core.opt_in import OPT_IN_LABEL, OPT_IN_VALUE, OPT_OUT_LABEL, OPT_OUT_VALUE

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


def binding() -> Doc:
    """The binding: every opted-in namespace that did not opt out.

    Exactly the contract's selector: the webhook and the annotator call a
    namespace guarded on these two labels (and the binding existing), so any
    further exclusion here would make them trust references nobody checked.
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
            "matchResources": {
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": OPT_IN_LABEL, "operator": "In", "values": [OPT_IN_VALUE]},
                        {"key": OPT_OUT_LABEL, "operator": "NotIn", "values": [OPT_OUT_VALUE]},
                    ]
                }
            },
        },
    }


def documents(registry: KindRegistry) -> list[Doc]:
    return [policy(registry), binding()]


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
# - Bound to namespaces labelled {OPT_IN_LABEL}={OPT_IN_VALUE}, unless labelled
#   {OPT_OUT_LABEL}={OPT_OUT_VALUE} (for a third-party controller that
#   lacks the permission).
"""


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (CEL) as literal blocks: the same text for every YAML reader."""


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


def render(registry: KindRegistry) -> str:
    """The policy and its binding as YAML, after a header saying how it was made."""
    body = yaml.dump_all(
        documents(registry), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100
    )
    return _HEADER + body
