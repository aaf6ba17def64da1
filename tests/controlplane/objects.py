"""Small builders of the objects tests, the demo and the benches write: a controller
ownerReference, an RBAC grant."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from tests.controlplane.plane import Kubectl

#: How the harness applies what it builds itself from the shipped manifests (grants,
#: webhook configurations): server-side, as one field manager, taking over fields
#: another manager set, and with ``--validate=false``. Any other ``kubectl apply``
#: or ``create`` first downloads the API server's OpenAPI document to learn that
#: it can validate fields, and the API server rebuilds that document after every
#: CRD change: with the operators' CRDs installed, seconds of its CPU each time
#: (BENCHMARKS.md, "`make test`": "OpenAPI downloads"). These objects' fields are
#: checked where they are shipped (tests/integration/test_manifests.py: a strict
#: server-side dry run of every manifest).
HARNESS_APPLY: Final = (
    "apply", "--server-side", "--force-conflicts", "--field-manager=aibom-test",
    "--validate=false", "-f", "-",
)  # fmt: skip


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
    RoleBinding in `namespace`. Applied with `kubectl` (the admin's, normally).

    Applied as :data:`HARNESS_APPLY` says (no OpenAPI download): grants made with a
    plain ``kubectl apply`` took 1.5 s on average and up to 9.9 s in the
    integration tests."""
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
    kubectl(*HARNESS_APPLY, input=json.dumps(docs))
