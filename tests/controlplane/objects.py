"""Small builders of the objects tests, the demo and the benches write: a controller
ownerReference, an RBAC grant."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tests.controlplane.plane import Kubectl


def owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    """The controller ownerReference a controller writes on a child of ``owner``
    (controller-runtime's ``SetControllerReference``: controller and
    blockOwnerDeletion true)."""
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def copy_json(obj: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a JSON-like document."""
    result: dict[str, Any] = json.loads(json.dumps(obj))
    return result


def bind_rules(
    kubectl: Kubectl,
    user: str,
    name: str,
    rules: Sequence[dict[str, Any]],
    *,
    namespace: str | None = None,
) -> None:
    """Grant `user` exactly `rules`: a ClusterRole and binding named `name`, or a Role and
    RoleBinding in `namespace`. Applied with `kubectl` (the admin's, normally)."""
    kind = "Role" if namespace else "ClusterRole"
    meta: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {})}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "rules": list(rules),
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": f"{kind}Binding",
        "metadata": dict(meta),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    docs = {"apiVersion": "v1", "kind": "List", "items": [role, binding]}
    kubectl("apply", "-f", "-", input=json.dumps(docs))
