"""Reading dumps: every accepted shape, and one clear placed error for bad input."""

from __future__ import annotations

import json

import pytest

from aibom_core.dump import DumpError, load
from tests.unit.kobj import chain, mk

DEP, RS = chain("Deployment/d", "ReplicaSet/rs")


def _list(*items: object) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(items)})


YAML_DOCS = """\
apiVersion: v1
kind: Namespace
metadata: {name: ns, labels: {aibom.dev/enabled: "true"}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
---
# an empty document is fine
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
"""


@pytest.mark.parametrize(
    ("text", "names"),
    [
        (_list(DEP, RS), ["d", "rs"]),
        (json.dumps(DEP), ["d"]),
        (json.dumps([DEP, RS]), ["d", "rs"]),
        (_list({"apiVersion": "v1", "kind": "List", "items": [DEP]}, RS), ["d", "rs"]),
        (json.dumps({"apiVersion": "apps/v1", "kind": "DeploymentList", "items": [DEP]}), ["d"]),
        (YAML_DOCS, ["web"]),
        ("", []),
        ("   \n", []),
    ],
    ids=[
        "List",
        "object",
        "array",
        "nested List",
        "typed list",
        "multi-doc YAML",
        "empty",
        "blank",
    ],
)
def test_accepted_shapes(text: str, names: list[str]) -> None:
    dump = load([(text, "in.json")])
    assert [o["metadata"]["name"] for o in dump.objects] == names


def test_namespaces_and_defaults() -> None:
    dump = load([(YAML_DOCS, "m.yaml")])
    assert dump.namespaces == {"ns": {"aibom.dev/enabled": "true"}}
    (web,) = dump.objects
    assert web["metadata"]["namespace"] == "default"  # as `kubectl apply` would
    assert dump.place(web) == "m.yaml: document 2"


def test_several_inputs() -> None:
    dump = load([(json.dumps(DEP), "a.json"), (json.dumps(RS), "b.json")])
    assert len(dump.objects) == 2


DUP = mk("Deployment", "other", uid=DEP["metadata"]["uid"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"kind": ', "in.json: not valid JSON at line 1 column"),
        ("key: [unclosed", "in.json: neither JSON nor YAML at line"),
        ("just a string", "in.json: document 1: expected a Kubernetes object, got str"),
        ("[1]", "in.json: [0]: expected a Kubernetes object, got int"),
        (json.dumps({"metadata": {"name": "x"}}), "in.json: not a Kubernetes object (no `kind`)"),
        (json.dumps({"kind": "Pod", "metadata": {"name": "x"}}), "Pod has no `apiVersion`"),
        (json.dumps({"kind": "Pod", "apiVersion": "v1"}), "in.json: Pod has no `metadata`"),
        (json.dumps({"kind": "Pod", "apiVersion": "v1", "metadata": {}}), "no `metadata.name`"),
        (_list(DEP, DUP), "in.json: items[1]: duplicate uid"),
        (json.dumps({"kind": "List", "apiVersion": "v1", "items": 3}), "needs an `items` list"),
        (
            json.dumps(
                {
                    "kind": "Pod",
                    "apiVersion": "v1",
                    "metadata": {"name": "p", "ownerReferences": {}},
                }
            ),
            "ownerReferences must be a list",
        ),
        (
            json.dumps({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p", "uid": 7}}),
            "metadata.uid must be a string",
        ),
    ],
    ids=[
        "broken JSON",
        "broken YAML",
        "scalar",
        "array of scalars",
        "no kind",
        "no apiVersion",
        "no metadata",
        "no name",
        "duplicate uid",
        "List items not a list",
        "ownerReferences not a list",
        "uid not a string",
    ],
)
def test_bad_input_is_one_placed_error(text: str, message: str) -> None:
    with pytest.raises(DumpError) as err:
        load([(text, "in.json")])
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_not_utf8() -> None:
    with pytest.raises(DumpError, match=r"in.bin: not UTF-8 text \(byte 0\)"):
        load([(b"\xff\xfe", "in.bin")])


def test_duplicate_uid_across_files_names_both_places() -> None:
    with pytest.raises(DumpError, match=r"b.json: duplicate uid .* \(also at a.json\)"):
        load([(json.dumps(DEP), "a.json"), (json.dumps(DUP), "b.json")])


def test_cluster_scoped_owners_are_never_found_offline_as_live() -> None:
    """One rule for the live walk and the offline scan. Owners are looked
    up in the child's namespace; a cluster-scoped owner (a built-in kind, or any
    object an API server returned without a namespace) is NotFound on both paths."""
    from aibom_core.graph import build_graph
    from aibom_core.kinds import registry_from_config

    # Only registry kinds are edges (docs/provenance-guard.md): a user who walks
    # through these kinds must add them.
    registry = registry_from_config(
        "walkOnly:\n  - {group: example.com, kind: Widget}\n"
        "  - {group: '', kind: Node}\n  - {group: '', kind: Namespace}\n",
        source="kinds.yaml",
    )

    widget = mk("Widget", "cluster-wide", ns="")  # a cluster-scoped custom object
    del widget["metadata"]["namespace"]
    ns_obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "uid": "n1"}}
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "uid": "node-1"}}
    pods = [
        mk("Pod", "p1", widget, ns="default"),
        mk("Pod", "p2", node, ns="default"),
        mk("Pod", "p3", ns_obj, ns="default"),
    ]
    dump = load([(json.dumps([widget, ns_obj, node, *pods]), "dump.json")])
    assert [o["metadata"]["name"] for o in dump.objects] == ["p1", "p2", "p3"]
    graph = build_graph(dump.objects, registry)
    reasons = [str(graph.resolve(p).failure) for p in dump.objects]
    assert reasons == [
        "NotFound example.com/Widget/cluster-wide",
        "NotFound core/Node/n",
        "NotFound core/Namespace/default",
    ]
    # A manifest without a UID is still put in `default`, as `kubectl apply` would.
    manifest = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}
    assert load([(json.dumps(manifest), "m.json")]).objects[0]["metadata"]["namespace"] == (
        "default"
    )
