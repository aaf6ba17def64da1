"""The kind configuration's schema (pydantic, strict): what the hand-written checks let through."""

from __future__ import annotations

import pytest

from aibom_core.kinds import GroupKind, RegistryError, registry_from_config


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # `replace: "no"` was truthy: the user's file replaced the built-in kinds.
        ('replace: "no"\ntracked: []\n', "k.yaml: `replace` must be true or false, got 'no'"),
        ("replace: 0\n", "k.yaml: `replace` must be true or false, got 0"),
        ("tracked: {group: ray.io, kind: RayService}\n", "k.yaml: `tracked` must be a list"),
        ("walkOnly:\n  - RayCluster\n", "k.yaml: walkOnly[0] needs a string `kind`"),
        ("tracked:\n  - {group: ray.io}\n", "k.yaml: tracked[0] needs a string `kind`"),
        (
            "tracked:\n  - {group: 7, kind: RayService}\n",
            "k.yaml: tracked[0].group must be a string",
        ),
        (
            "tracked:\n  - {group: ray.io/v1, kind: RayService}\n",
            "k.yaml: tracked[0].group 'ray.io/v1' looks like an apiVersion",
        ),
        (
            "tracked:\n  - {group: ray.io, kind: RayService, zz: 1, resources: x}\n",
            "k.yaml: tracked[0]: unknown key(s) resources, zz",
        ),
        ("trackd: []\nwalkonly: []\n", "k.yaml: unknown keys ['trackd', 'walkonly']"),
        ("- tracked\n", "k.yaml: expected a mapping with `tracked` and `walkOnly`"),
    ],
)
def test_errors_name_the_field(text: str, message: str) -> None:
    with pytest.raises(RegistryError) as err:
        registry_from_config(text, source="k.yaml")
    assert str(err.value).startswith(message), str(err.value)


def test_replace_and_absent_lists() -> None:
    only = registry_from_config(
        "replace: true\ntracked:\n  - {group: ray.io, kind: RayService}\nwalkOnly:\n",
        source="k.yaml",
    )
    assert only.tracked == frozenset({GroupKind("ray.io", "RayService")})
    assert only.walk_only == frozenset()
    merged = registry_from_config("replace: false\n", source="k.yaml")
    assert merged.is_tracked(GroupKind("apps", "Deployment"))
