"""The kind registry's configuration: plural resources, and errors that name the bad field."""

from __future__ import annotations

import pytest

from aibom_core.kindnames import offline_kinds, resolve_kind, with_registry
from aibom_core.kinds import (
    BUILTIN_KINDS,
    CONFIGMAP,
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
            "k.yaml: tracked[0]: unknown key(s) resources "
            "(an entry has group, kind, resource, shortNames)",
        ),
        (
            "tracked:\n  - {group: ray.io, kind: RayService, shortNames: [Rs/1]}\n",
            "k.yaml: tracked[0].shortNames 'Rs/1' is not a list of short names",
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


# -- one catalogue, one plural rule (#36) --


def test_the_catalogue_is_the_builtin_registry_and_configmaps() -> None:
    # BUILTIN_KINDS (offline names) was a second list of the kinds, and lacked
    # the Knative kinds KServe walks through: it is derived from the registry.
    reg = default_registry()
    named = {k.group_kind for k in BUILTIN_KINDS}
    assert named == reg.tracked | reg.walk_only | {CONFIGMAP}
    assert {k.kind: k.short_names for k in BUILTIN_KINDS}["Revision"] == ("rev",)
    assert all(
        k.plural == reg.resource_of(k.group_kind) for k in BUILTIN_KINDS if k.group_kind in named
    )


def test_short_names_come_from_the_configuration() -> None:
    reg = registry_from_config(
        "tracked: [{group: x.io, kind: Gizmo, shortNames: [gz, gzm]}]", source="t"
    )
    kinds = offline_kinds(reg)
    assert resolve_kind("gz", kinds, reg).group_kind == GroupKind("x.io", "Gizmo")
    assert resolve_kind("deploy", kinds, reg).group_kind == GroupKind("apps", "Deployment")


def test_a_registry_kind_without_a_name_gets_the_kubernetes_plural() -> None:
    # kinds.default_resource and kindnames.with_registry used to guess apart:
    # `raypolicies` (as Kubernetes does) against `raypolicys`.
    reg = registry_from_config(
        "tracked: [{group: ray.io, kind: RayPolicy}, {group: x.io, kind: Gizmo, resource: gz}]",
        source="t",
    )
    names = {k.group_kind: k for k in with_registry([], reg)}
    assert names[GroupKind("ray.io", "RayPolicy")].plural == "raypolicies"
    assert names[GroupKind("x.io", "Gizmo")].plural == "gz"  # configured wins
    assert resolve_kind("raypolicies", with_registry([], reg), reg).kind == "RayPolicy"


def test_a_dump_kind_gets_the_kubernetes_plural() -> None:
    obj = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {}}
    kinds = {k.group_kind: k for k in offline_kinds(default_registry(), [obj])}
    assert kinds[GroupKind("networking.k8s.io", "NetworkPolicy")].plural == "networkpolicies"
