"""The kind registry's configuration: plural resources, and errors that name the bad field."""

from __future__ import annotations

import pytest

from aibom_core.kinds import (
    GroupKind,
    KindRegistry,
    RegistryError,
    default_registry,
    default_resource,
    registry_from_config,
)
from tests.unit.manifest_docs import PLURAL

RAY = GroupKind("ray.io", "RayService")


@pytest.mark.parametrize(
    ("kind", "resource"),
    [
        ("Deployment", "deployments"),
        ("Ingress", "ingresses"),
        ("NetworkPolicy", "networkpolicies"),
        ("NIMService", "nimservices"),
        ("PodCliqueScalingGroup", "podcliquescalinggroups"),
    ],
)
def test_default_resource_guesses_like_kubernetes(kind: str, resource: str) -> None:
    assert default_resource(kind) == resource


def test_every_builtin_kind_has_its_served_plural() -> None:
    # The plurals the API server serves (tests/integration/test_manifests.py
    # checks the generated policy's resources against its discovery).
    reg = default_registry()
    got = {gk.kind: reg.resource_of(gk) for gk in reg.tracked | reg.walk_only}
    # The table the manifest tests check RBAC with (tests/unit/manifest_docs.py),
    # written by hand there; here the registry must agree with it, kind by kind.
    assert got == PLURAL


def test_configured_resource_wins_over_the_guess() -> None:
    reg = registry_from_config(
        "tracked:\n  - {group: ray.io, kind: RayService, resource: rayservicez}\n"
        "walkOnly:\n  - {group: ray.io, kind: RayCluster}\n",
        source="k.yaml",
    )
    assert reg.resource_of(RAY) == "rayservicez"
    assert reg.resource_of(GroupKind("ray.io", "RayCluster")) == "rayclusters"
    # Merged over the built-ins, which keep theirs.
    assert reg.resource_of(GroupKind("apps", "Deployment")) == "deployments"
    assert reg.is_tracked(RAY)


def test_merge_keeps_the_other_registrys_resource() -> None:
    base = KindRegistry(tracked=frozenset({RAY}), walk_only=frozenset(), resources={RAY: "a"})
    other = KindRegistry(tracked=frozenset({RAY}), walk_only=frozenset(), resources={RAY: "b"})
    assert base.merged(other).resource_of(RAY) == "b"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "tracked:\n  - {group: ray.io, kind: RayService, resource: Ray/Services}\n",
            "k.yaml: tracked[0].resource 'Ray/Services' is not a plural resource name",
        ),
        (
            "walkOnly:\n  - {group: ray.io, kind: RayCluster}\n"
            "  - {group: ray.io, kind: RayJob, resource: 7}\n",
            "k.yaml: walkOnly[1].resource 7 is not a plural resource name",
        ),
        (
            "tracked:\n  - {group: ray.io, kind: RayService, resources: rayservices}\n",
            "k.yaml: tracked[0]: unknown key(s) resources (an entry has group, kind, resource)",
        ),
        (
            "tracked:\n  - {group: Ray.IO, kind: RayService}\n",
            "k.yaml: tracked[0].group 'Ray.IO' is not an API group",
        ),
        (
            'tracked:\n  - {group: ray.io, kind: "Ray\'); x"}\n',
            'k.yaml: tracked[0].kind "Ray\'); x" is not a Kind',
        ),
        (
            "tracked:\n  - {group: ray.io, kind: RayService, resource: a}\n"
            "walkOnly:\n  - {group: ray.io, kind: RayService, resource: b}\n",
            "k.yaml: walkOnly[0].resource 'b': ray.io/RayService is also given resource 'a'",
        ),
    ],
)
def test_bad_entries_name_the_field(text: str, message: str) -> None:
    with pytest.raises(RegistryError) as err:
        registry_from_config(text, source="k.yaml")
    assert str(err.value).startswith(message), str(err.value)
