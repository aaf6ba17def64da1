"""What the cache keeps: documents and stamps from slimmed objects equal those from full ones."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from aibom_core.bom import RootView, build_document
from aibom_core.graph import build_graph
from aibom_core.kinds import GroupKind, default_registry, group_kind_of
from aibom_core.objects import Obj
from aibom_core.stamp import stamp_of
from annotator.configmap import FIELD_MANAGER, FOREIGN_DATA
from annotator.slim import (
    CONFIGMAP_SCHEMA,
    METADATA_SCHEMA,
    POD_SCHEMA,
    Kept,
    TemplateSharer,
    keeps_metadata_only,
    schema_of,
    slimmer,
)
from tests.unit.kobj import mk

REG = default_registry()
IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.4.1"


def container(name: str = "main", *, token: str = "kube-api-access-abcde") -> Obj:
    return {
        "name": name,
        "image": IMAGE,
        "command": ["python3", "-m", "dynamo.vllm"],
        "args": ["--model", "Qwen/Qwen3-0.6B"],
        "env": [
            {"name": "HF_HOME", "value": "/models"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
        ],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
        "readinessProbe": {"httpGet": {"path": "/health", "port": 9090}},
        "volumeMounts": [
            {"name": "models", "mountPath": "/models"},
            {"name": "host", "mountPath": "/host"},
            {"name": token, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
        ],
        "terminationMessagePath": "/dev/termination-log",
        "imagePullPolicy": "IfNotPresent",
    }


def api_pod(
    name: str, owner: Obj, *, token: str, digest: str, annotations: dict[str, str] | None = None
) -> Obj:
    """A Pod the way the API server returns it (managedFields, defaults, token volume)."""
    pod = mk(
        "Pod",
        name,
        owner,
        labels={"app": "x", "pod-template-hash": "5f7b"},
        annotations={
            "kubectl.kubernetes.io/last-applied-configuration": "{...}",
            "aibom.dev/rollup": "rolled-up",
            **(annotations or {}),
        },
        spec={
            "initContainers": [
                {
                    "name": "init",
                    "image": "busybox:1",
                    "volumeMounts": [{"name": token, "mountPath": "/t"}],
                }
            ],
            "containers": [container(token=token)],
            "volumes": [
                {
                    "name": token,
                    "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]},
                },
                {"name": "models", "persistentVolumeClaim": {"claimName": "model-cache"}},
                {"name": "shm", "emptyDir": {"medium": "Memory"}},
                {"name": "host", "hostPath": {"path": "/data/models"}},
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "nodeName": "n1",
        },
        status={
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "initContainerStatuses": [
                {
                    "name": "init",
                    "image": "busybox:1",
                    "imageID": "docker.io/library/busybox@" + "sha256:" + "b" * 64,
                    "ready": True,
                }
            ],
            "containerStatuses": [
                {
                    "name": "main",
                    "image": IMAGE,
                    "imageID": f"nvcr.io/nvidia/ai-dynamo/vllm-runtime@{digest}",
                    "ready": True,
                    "restartCount": 0,
                }
            ],
        },
    )
    pod["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
    pod["metadata"]["creationTimestamp"] = "2026-10-05T12:00:00Z"
    return pod


def family() -> list[Obj]:
    spec = {
        "components": [
            {
                "name": "worker",
                "type": "worker",
                "podTemplate": {"spec": {"containers": [container()]}},
            }
        ]
    }
    dgd = mk(
        "DynamoGraphDeployment",
        "g",
        spec=spec,
        annotations={"kubectl.kubernetes.io/last-applied-configuration": "{}"},
    )
    dgd["metadata"]["creationTimestamp"] = "2026-10-05T11:00:00Z"
    dgd["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    dcd = mk(
        "DynamoComponentDeployment",
        "g-worker",
        dgd,
        spec={"type": "worker", "podTemplate": {"spec": {"containers": [container()]}}},
    )
    dep = mk(
        "Deployment", "g-worker", dcd, spec={"template": {"spec": {"containers": [container()]}}}
    )
    rs = mk(
        "ReplicaSet",
        "g-worker-5f7b",
        dep,
        spec={"template": {"spec": {"containers": [container()]}}},
    )
    pods = [
        api_pod("g-worker-5f7b-a", rs, token="kube-api-access-aaaaa", digest="sha256:" + "1" * 64),
        api_pod("g-worker-5f7b-b", rs, token="kube-api-access-bbbbb", digest="sha256:" + "1" * 64),
        api_pod(
            "g-worker-5f7b-c",
            rs,
            token="kube-api-access-ccccc",
            digest="sha256:" + "2" * 64,
            annotations={
                "model.aibom.dev/name": "Qwen/Qwen3-0.6B",
                "model.aibom.dev/revision": "abc",
            },
        ),
    ]
    return [dgd, dcd, dep, rs, *pods]


def documents(objs: list[Obj]) -> tuple[bytes, dict[str, Any]]:
    graph = build_graph(objs, REG)
    root_key = objs[0]["metadata"]["uid"]
    owned, pods = graph.members(root_key)
    view = RootView(
        root=graph.get(root_key) or {},
        status="root",
        reason=None,
        owned=tuple(graph.get(k) or {} for k in owned),
        pods=tuple(graph.get(k) or {} for k in pods),
    )
    doc = build_document(view, REG, tool_version="t")
    stamps = {k: stamp_of(graph.resolve(graph.get(k) or {})) for k in graph}
    return doc.json_bytes, stamps


@pytest.mark.parametrize("stamp_prefix", ["aibom.dev/", "example.org/"])
def test_documents_and_stamps_from_slim_objects_are_identical(stamp_prefix: str) -> None:
    full = family()
    slim = slimmer(REG, stamp_prefix=stamp_prefix)
    slimmed = [slim(copy.deepcopy(o)) for o in full]
    assert documents(slimmed) == documents(full)
    doc = documents(full)[0]
    assert b"2" * 64 in doc and b"1" * 64 in doc  # both digests seen in pod status


def test_what_is_dropped_and_what_is_kept() -> None:
    slim = slimmer(REG)
    dgd, _dcd, _dep, rs, pod, *_ = [slim(copy.deepcopy(o)) for o in family()]
    assert "managedFields" not in dgd["metadata"]
    assert "kubectl.kubernetes.io/last-applied-configuration" not in dgd["metadata"]["annotations"]
    assert dgd["spec"]  # tracked: the spec is the document
    assert set(rs) == {"apiVersion", "kind", "metadata"}  # walk-only: ownership only
    # creationTimestamp: a proof written at a Pod's CREATE binds it (aibom_core.provenance).
    assert set(pod["metadata"]) == {
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "annotations",
        "ownerReferences",
    }
    assert pod["metadata"]["annotations"] == {"aibom.dev/rollup": "rolled-up"}
    assert [v for v in pod["spec"]["volumes"]] == [
        {},
        {"name": "models", "persistentVolumeClaim": {"claimName": "model-cache"}},
        {},
        {"name": "host", "hostPath": {"path": "/data/models"}},
    ]
    main = pod["spec"]["containers"][0]
    assert set(main) == {"name", "image", "command", "args", "env", "volumeMounts"}
    assert [m["name"] for m in main["volumeMounts"]] == ["models", "host"]
    assert "volumeMounts" not in pod["spec"]["initContainers"][0]
    assert pod["status"]["containerStatuses"] == [
        {
            "name": "main",
            "image": IMAGE,
            "imageID": "nvcr.io/nvidia/ai-dynamo/vllm-runtime@sha256:" + "1" * 64,
        }
    ]


def test_siblings_share_equal_parts_only() -> None:
    slim = slimmer(REG)
    *_, a, b, c = [slim(copy.deepcopy(o)) for o in family()]
    assert a["spec"]["containers"] is b["spec"]["containers"]  # per-pod token mount gone
    assert a["spec"]["volumes"] is b["spec"]["volumes"]
    assert a["metadata"]["ownerReferences"] is b["metadata"]["ownerReferences"]
    assert a["status"]["containerStatuses"] is b["status"]["containerStatuses"]
    # c reports another digest: equal parts shared, the different one not.
    assert c["status"]["containerStatuses"] is not b["status"]["containerStatuses"]
    assert c["status"]["containerStatuses"] != b["status"]["containerStatuses"]
    assert c["spec"]["containers"] is b["spec"]["containers"]
    # Whole equal dicts too (the spec, the stamps, an equal status).
    assert a["spec"] is b["spec"] is c["spec"]
    assert a["status"] is b["status"] and c["status"] is not b["status"]
    assert a["metadata"]["annotations"] is b["metadata"]["annotations"]


def managed_cm(*entries: tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], str]) -> Obj:
    """A document whose managedFields hold (manager, fields[, operation]) entries; the
    operation is Apply for our field manager (as the annotator writes), else Update."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "aibom-deployment-d",
            "namespace": "ns",
            "managedFields": [
                {
                    "manager": e[0],
                    "operation": e[2]
                    if len(e) == 3
                    else "Apply"
                    if e[0] == FIELD_MANAGER
                    else "Update",
                    "fieldsV1": e[1],
                }
                for e in entries
            ],
        },
        "data": {"aibom.json": "{}"},
    }


def test_a_document_someone_else_edited_is_marked_stale() -> None:
    slim = slimmer(REG)
    ours: dict[str, Any] = {"f:data": {".": {}, "f:aibom.json": {}}}
    assert FOREIGN_DATA not in slim(managed_cm((FIELD_MANAGER, ours)))
    edited = slim(managed_cm((FIELD_MANAGER, {}), ("kubectl-edit", ours)))
    assert edited[FOREIGN_DATA] is True
    assert "data" not in edited and "managedFields" not in edited["metadata"]
    # A key someone added beside ours stays theirs after our apply: not stale.
    extra: dict[str, Any] = {"f:data": {"f:notes": {}}}
    assert FOREIGN_DATA not in slim(managed_cm((FIELD_MANAGER, ours), ("kubectl-edit", extra)))


def test_an_edit_that_borrowed_our_field_managers_name_is_marked_stale() -> None:
    """`kubectl edit --field-manager=aibom-rollup-annotator` is an Update under our
    name; we only ever apply, so it is someone else's write of the data."""
    slim = slimmer(REG)
    ours: dict[str, Any] = {"f:data": {".": {}, "f:aibom.json": {}}}
    borrowed = slim(managed_cm((FIELD_MANAGER, {}), (FIELD_MANAGER, ours, "Update")))
    assert borrowed[FOREIGN_DATA] is True


def test_tracked_objects_share_pod_templates_that_serialize_the_same() -> None:
    slim = slimmer(REG)
    dgd, dcd, dep, *_ = full = family()
    before = copy.deepcopy(full)
    s_dgd, s_dcd, s_dep = slim(dgd), slim(dcd), slim(dep)
    assert full == before  # the objects given are not mutated
    one = s_dep["spec"]["template"]["spec"]
    assert s_dcd["spec"]["podTemplate"]["spec"] is one
    assert s_dgd["spec"]["components"][0]["podTemplate"]["spec"] is one
    # Equal by ==, but another key order (other bytes): not shared.
    other = copy.deepcopy(dep)
    other["metadata"]["uid"] = "other"
    c = other["spec"]["template"]["spec"]["containers"][0]
    other["spec"]["template"]["spec"]["containers"][0] = dict(reversed(list(c.items())))
    s_other = slim(other)
    assert s_other["spec"]["template"]["spec"] == one
    assert s_other["spec"]["template"]["spec"] is not one
    # Another image: not shared.
    third = copy.deepcopy(dep)
    third["spec"]["template"]["spec"]["containers"][0]["image"] = "other:1"
    assert slim(third)["spec"]["template"]["spec"] is not one


def test_template_sharing_stops_at_a_bounded_depth() -> None:
    deep: Any = {"containers": [container()]}
    for _ in range(5000):
        deep = {"x": [deep]}
    obj = mk("Deployment", "deep", spec=deep)
    assert slimmer(REG)(obj)["spec"] is deep  # not walked down to the template, no recursion error


def test_templates_no_object_holds_are_forgotten() -> None:
    share = TemplateSharer(floor=8)

    def deployment(i: int) -> Obj:
        c = {**container(), "image": f"img:{i}"}
        return mk("Deployment", f"d{i}", spec={"template": {"spec": {"containers": [c]}}})

    kept = [share(deployment(i)) for i in range(4)]  # cached: their templates stay
    for i in range(4, 100):
        share(deployment(i))  # dropped at once, as after a rollout
    assert len(share._known) < 16
    again = share(deployment(0))
    assert again["spec"]["template"]["spec"] is kept[0]["spec"]["template"]["spec"]


def pod_variants() -> list[Obj]:
    """Pods with every field the slimmer reads: the family's, one being deleted with a
    generateName and a non-controller owner, one with no spec or status."""
    *_, a, b, c = family()
    d = copy.deepcopy(a)
    d["metadata"].update(
        name="g-worker-5f7b-d",
        uid="uid-d",
        generateName="g-worker-5f7b-",
        resourceVersion="42",
        deletionTimestamp="2026-10-05T13:00:00Z",
    )
    d["metadata"]["ownerReferences"].insert(
        0, {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "u-cm"}
    )
    d["metadata"]["ownerReferences"][1]["blockOwnerDeletion"] = True
    d["spec"]["containers"][0]["env"].append({"name": "EMPTY"})
    bare = {"metadata": {"name": "bare", "namespace": "ns", "uid": "uid-bare"}}
    return [a, b, c, d, bare]


def as_listed(pod: Obj) -> Obj:
    """A Pod as a list page carries it: no apiVersion and kind (the informer adds them)."""
    return {k: v for k, v in pod.items() if k not in ("apiVersion", "kind")}


def with_kind(pod: Obj) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", **pod}


def test_a_pod_decoded_through_the_schema_slims_to_the_same_bytes() -> None:
    pods = pod_variants()
    page = orjson.dumps({"metadata": {"continue": "t"}, "items": [as_listed(p) for p in pods]})
    decoded = POD_SCHEMA.page(page)
    assert decoded["metadata"] == {"continue": "t"}
    whole, trimmed = slimmer(REG), slimmer(REG)  # separate sibling memos
    for pod, item in zip(pods, decoded["items"], strict=True):
        assert "managedFields" not in item.get("metadata", {})  # skipped by the decoder
        expected = orjson.dumps(whole(with_kind(as_listed(copy.deepcopy(pod)))))
        assert orjson.dumps(trimmed(with_kind(item))) == expected
    # Watch events carry apiVersion and kind; DELETED objects are trimmed too.
    events = slimmer(REG)
    for pod, kind in zip(pods, ("ADDED", "MODIFIED", "DELETED", "ADDED", "ADDED"), strict=True):
        event = POD_SCHEMA.event(orjson.dumps({"type": kind, "object": pod}))
        assert event["type"] == kind and "managedFields" not in event["object"]["metadata"]
        assert orjson.dumps(events(event["object"])) == orjson.dumps(
            slimmer(REG)(copy.deepcopy(pod))
        )


def test_documents_from_schema_decoded_pods_are_identical() -> None:
    full = family()
    *owners, a, b, c = full
    items = POD_SCHEMA.page(orjson.dumps({"items": [as_listed(p) for p in (a, b, c)]}))["items"]
    slim = slimmer(REG)
    slimmed = [slim(copy.deepcopy(o)) for o in owners] + [slim(with_kind(i)) for i in items]
    assert documents(slimmed) == documents(full)


def test_metadata_only_kinds_and_configmaps_decoded_through_their_schemas_slim_the_same() -> None:
    *_, rs, _a, _b, _c = family()
    rs["metadata"].update(
        generateName="g-worker-",
        resourceVersion="7",
        labels={"pod-template-hash": "5f7b"},
        annotations={"kubectl.kubernetes.io/last-applied-configuration": "{}", "a": "b"},
        deletionTimestamp="2026-10-05T13:00:00Z",
        creationTimestamp="2026-10-05T12:00:00Z",
        managedFields=[{"manager": "kube-controller-manager", "fieldsV1": {"f:spec": {}}}],
    )
    rs["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] = True
    edited = managed_cm(
        (FIELD_MANAGER, {"f:data": {"f:aibom.json": {}}}),
        ("kubectl-edit", {"f:data": {"f:aibom.json": {}}}),
    )
    ours = managed_cm((FIELD_MANAGER, {"f:data": {"f:aibom.json": {}}}))
    for obj, schema in (
        (rs, METADATA_SCHEMA),
        (edited, CONFIGMAP_SCHEMA),
        (ours, CONFIGMAP_SCHEMA),
    ):
        assert schema_of(REG, group_kind_of(obj)) is schema
        partial = {**obj, "spec": {"replicas": 3}, "data": {"aibom.json": "{}"}}
        [item] = schema.page(orjson.dumps({"items": [partial]}))["items"]
        assert "spec" not in item and "data" not in item
        expected = orjson.dumps(slimmer(REG)(copy.deepcopy(obj)))
        assert orjson.dumps(slimmer(REG)(item)) == expected
    assert FOREIGN_DATA in slimmer(REG)(
        CONFIGMAP_SCHEMA.page(orjson.dumps({"items": [edited]}))["items"][0]
    )
    assert schema_of(REG, group_kind_of(family()[0])) is None  # tracked: kept whole


def test_slimming_listing_and_decoding_follow_one_rule_per_kind() -> None:
    # What the slimmer keeps of a kind is what its informer asks the server for
    # (metadata only or not) and what its schema decodes: one rule (Kept.of).
    kinds = REG.tracked | REG.walk_only | {GroupKind("", "Namespace"), GroupKind("", "ConfigMap")}
    for gk in sorted(kinds):
        api_version = f"{gk.group}/v1" if gk.group else "v1"
        obj = {
            "apiVersion": api_version,
            "kind": gk.kind,
            "metadata": {"name": "x", "namespace": "ns", "uid": "u"},
            "spec": {"replicas": 1},
        }
        slimmed = slimmer(REG)(obj)
        kept = Kept.of(REG, gk)
        assert ("spec" in slimmed) == (kept in (Kept.WHOLE, Kept.POD)), gk
        assert keeps_metadata_only(REG, gk) == ("spec" not in slimmed), gk
        schema = schema_of(REG, gk)
        assert (schema is None) == (kept is Kept.WHOLE), gk
        assert (schema is POD_SCHEMA) == (gk.kind == "Pod" and not gk.group), gk
        if keeps_metadata_only(REG, gk) and gk.kind != "ConfigMap":
            assert schema is METADATA_SCHEMA, gk
