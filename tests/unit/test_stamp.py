"""The stamp and its JSONPatch: add, replace, remove, escape, and nothing when right."""

from __future__ import annotations

from typing import Any

import pytest

from aibom_core.objects import ref_of
from aibom_core.stamp import (
    Keys,
    Stamp,
    escape_pointer,
    mirror_deployment,
    read_stamp,
    stamp_merge_patch,
    stamp_patch,
)
from tests.unit.kobj import mk

K = Keys()
ROOT = Stamp(root="Deployment/d", root_uid="u1", rollup="root", reason=None)
UNRES = Stamp(root=None, root_uid=None, rollup="unresolved", reason="NotFound apps/ReplicaSet/rs")
P = "/metadata/annotations/aibom.dev~1"


def apply_patch(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """A small RFC 6902 applier for the ops we emit (add/replace/remove under metadata)."""
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = obj
        for part in parts[:-1]:
            parent = parent[part]
        last = parts[-1]
        if op["op"] == "add":
            parent[last] = op["value"]
        elif op["op"] == "replace":
            assert last in parent, op
            parent[last] = op["value"]
        else:
            assert op["op"] == "remove" and last in parent, op
            del parent[last]
    return obj


@pytest.mark.parametrize(
    ("annotations", "stamp", "expected_ops"),
    [
        (
            None,
            ROOT,
            [
                {"op": "add", "path": "/metadata/annotations", "value": {}},
                {"op": "add", "path": P + "root", "value": "Deployment/d"},
                {"op": "add", "path": P + "root-uid", "value": "u1"},
                {"op": "add", "path": P + "rollup", "value": "root"},
            ],
        ),
        (
            {"aibom.dev/root": "Forged/x", "aibom.dev/rollup": "root", "keep": "me"},
            ROOT,
            [
                {"op": "replace", "path": P + "root", "value": "Deployment/d"},
                {"op": "add", "path": P + "root-uid", "value": "u1"},
            ],
        ),
        (
            {
                "aibom.dev/root": "Deployment/d",
                "aibom.dev/root-uid": "u1",
                "aibom.dev/rollup": "root",
            },
            ROOT,
            [],
        ),
        (
            {
                "aibom.dev/root": "Deployment/d",
                "aibom.dev/root-uid": "u1",
                "aibom.dev/rollup": "unresolved",
                "aibom.dev/rollup-reason": "stale",
            },
            ROOT,
            [
                {"op": "replace", "path": P + "rollup", "value": "root"},
                {"op": "remove", "path": P + "rollup-reason"},
            ],
        ),
        (
            {"aibom.dev/root": "Deployment/d", "aibom.dev/root-uid": "u1"},
            UNRES,
            [
                {"op": "remove", "path": P + "root"},
                {"op": "remove", "path": P + "root-uid"},
                {"op": "add", "path": P + "rollup", "value": "unresolved"},
                {"op": "add", "path": P + "rollup-reason", "value": "NotFound apps/ReplicaSet/rs"},
            ],
        ),
    ],
    ids=[
        "no annotations",
        "forged value overwritten",
        "already right",
        "reason dropped",
        "to unresolved",
    ],
)
def test_stamp_patch(
    annotations: dict[str, str] | None, stamp: Stamp, expected_ops: list[dict[str, Any]]
) -> None:
    obj = mk("Deployment", "d", annotations=annotations)
    ops = stamp_patch(obj, stamp, keys=K)
    assert ops == expected_ops
    patched = apply_patch(obj, ops)
    assert read_stamp(patched, keys=K) == stamp
    if annotations and "keep" in annotations:
        assert patched["metadata"]["annotations"]["keep"] == "me"
    # The merge-patch form (the annotator's repair) agrees.
    assert (stamp_merge_patch(patched, stamp, keys=K)) is None


def test_escape_pointer() -> None:
    assert escape_pointer("a/b~c") == "a~1b~0c"


def test_custom_prefix() -> None:
    keys = Keys("example.com/")
    ops = stamp_patch(mk("Pod", "p"), ROOT, keys=keys)
    assert {
        "op": "add",
        "path": "/metadata/annotations/example.com~1rollup",
        "value": "root",
    } in ops


@pytest.mark.parametrize("prefix", ["aibom.dev", "a/b/", ""])
def test_bad_prefix(prefix: str) -> None:
    with pytest.raises(ValueError, match="annotation prefix"):
        Keys(prefix)


def test_replicaset_mirrors_its_deployment() -> None:
    from aibom_core.kinds import GroupKind

    dep = mk(
        "Deployment",
        "d",
        annotations={"aibom.dev/root": "Deployment/d", "aibom.dev/rollup": "root"},
    )
    walked = Stamp(root="Deployment/d", root_uid="u1", rollup="rolled-up", reason=None)
    rs = GroupKind("apps", "ReplicaSet")
    hop = ref_of(dep)
    got = mirror_deployment(walked, subject=rs, owner=dep, keys=K, first_hop=hop)
    assert got == Stamp(root="Deployment/d", root_uid="u1", rollup="root", reason=None)
    # Pods, other owners (stamped or not), and unstamped Deployments keep their
    # own walk's stamp.
    assert (
        mirror_deployment(walked, subject=GroupKind("", "Pod"), owner=dep, keys=K, first_hop=hop)
        == walked
    )
    assert (
        mirror_deployment(walked, subject=rs, owner=mk("Widget", "w"), keys=K, first_hop=hop)
        == walked
    )
    sts = mk("StatefulSet", "s", annotations={"aibom.dev/rollup": "root"})
    assert mirror_deployment(walked, subject=rs, owner=sts, keys=K, first_hop=hop) == walked
    assert (
        mirror_deployment(walked, subject=rs, owner=mk("Deployment", "x"), keys=K, first_hop=hop)
        == walked
    )


def test_replicaset_mirrors_only_a_deployment_that_passed_the_uid_check() -> None:
    """A Deployment re-created under the same name is not the RS's controller."""
    from aibom_core.kinds import GroupKind

    stamped = {"aibom.dev/root": "Deployment/d", "aibom.dev/rollup": "root"}
    new = mk("Deployment", "d", gen=1, annotations={**stamped, "aibom.dev/root-uid": "new"})
    old = mk("Deployment", "d")
    rs = GroupKind("apps", "ReplicaSet")
    walked = Stamp(
        root=None, root_uid=None, rollup="unresolved", reason="UIDMismatch apps/Deployment/d"
    )
    # The walk failed at the first hop (UIDMismatch): no hop passed, nothing mirrored.
    assert mirror_deployment(walked, subject=rs, owner=new, keys=K, first_hop=None) == walked
    # A first hop that is another object than the owner offered: nothing mirrored.
    assert mirror_deployment(walked, subject=rs, owner=new, keys=K, first_hop=ref_of(old)) == walked


def test_mirror_agrees_only_when_the_replicaset_carries_the_owners_values() -> None:
    from aibom_core.stamp import mirror_agrees

    dep = mk("Deployment", "d", annotations={"aibom.dev/rollup": "root", "other": "x"})
    same = mk("ReplicaSet", "d-1", dep, annotations={"aibom.dev/rollup": "root"})
    newer = mk("ReplicaSet", "d-1", dep, annotations={"aibom.dev/rollup": "rolled-up"})
    assert mirror_agrees(same, dep, keys=K)
    assert not mirror_agrees(newer, dep, keys=K)
    # Keys the Deployment lacks are never compared (the controller only copies).
    extra = mk("ReplicaSet", "d-1", dep, annotations={"aibom.dev/rollup": "root", K.root: "x"})
    assert mirror_agrees(extra, dep, keys=K)
    # Nothing is mirrored for other pairs: always fine.
    assert mirror_agrees(mk("Pod", "p", same), same, keys=K)
