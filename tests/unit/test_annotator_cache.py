"""Which keys a watch event makes dirty: the root that covers the change, never the children."""

from __future__ import annotations

import copy

from aibom_core.graph import key_of
from aibom_core.kinds import CONFIGMAP, NAMESPACE, GroupKind, default_registry, group_kind_of
from aibom_core.objects import Obj, ref_of
from aibom_core.walk import Reason
from annotator.cache import ClusterState
from annotator.keys import RootKey, SweepKey
from tests.unit.kobj import chain, dynamo_graph, mk

REG = default_registry()


def ns(name: str, *, opted: bool = True, rv: str = "1") -> Obj:
    labels = {"aibom.dev/enabled": "true"} if opted else {}
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": labels, "resourceVersion": rv},
    }


def rk(obj: Obj) -> RootKey:
    m = obj["metadata"]
    gk = group_kind_of(obj)
    return RootKey(m["namespace"], m["uid"], gk.group, gk.kind, m["name"])


def uid(obj: Obj) -> str:
    return str(obj["metadata"]["uid"])


def state_with(*objs: Obj, opted: bool = True) -> ClusterState:
    st = ClusterState(REG, trust_all=True)  # provenance has its own tests
    st.upsert(NAMESPACE, ns("ns", opted=opted))
    for o in objs:
        assert not st.upsert(group_kind_of(o), o)  # bulk: nothing analysed
    st.bulk = False
    return st


def graph_objects() -> list[Obj]:
    return dynamo_graph("g-w", "1")


def bump(obj: Obj, **status: object) -> Obj:
    new = copy.deepcopy(obj)
    new["metadata"]["resourceVersion"] = str(int(new["metadata"].get("resourceVersion", "1")) + 1)
    if status:
        new["status"] = status
    return new


def test_pod_digest_change_dirties_only_the_root() -> None:
    dgd, _dcd, _dep, _rs, p0, _ = objs = graph_objects()
    st = state_with(*objs)
    new = bump(p0, containerStatuses=[{"name": "main", "imageID": "x@sha256:" + "a" * 64}])
    d = st.upsert(group_kind_of(new), new)
    assert d.roots == {rk(dgd)}
    assert d.stamps == {uid(p0)}
    assert not d.sweeps and not d.full


def test_same_resource_version_is_a_no_op() -> None:
    objs = graph_objects()
    for o in objs:
        o["metadata"]["resourceVersion"] = "5"
    st = state_with(*objs)
    assert not st.upsert(group_kind_of(objs[-1]), copy.deepcopy(objs[-1]))


def test_rolled_up_workload_update_dirties_its_root_not_itself() -> None:
    dgd, _dcd, dep, *_ = objs = graph_objects()
    st = state_with(*objs)
    d = st.upsert(group_kind_of(dep), bump(dep))
    assert d.roots == {rk(dgd)}


def test_pod_create_and_delete_reach_the_root() -> None:
    dgd, _dcd, _dep, rs, *_ = objs = graph_objects()
    st = state_with(*objs)
    pod = mk("Pod", "g-w-1-new", rs)
    assert st.upsert(group_kind_of(pod), pod).roots == {rk(dgd)}
    d = st.delete(group_kind_of(pod), pod)
    assert d.roots == {rk(dgd)}
    assert uid(pod) not in d.stamps


def test_owner_created_after_its_child_moves_the_child_under_it() -> None:
    dgd, dcd, dep, rs, *pods = graph_objects()
    st = state_with(dcd, dep, rs, *pods)  # the graph itself arrives last
    assert st.root_key_of(uid(dep)) == rk(dcd)  # unresolved: its own root
    d = st.upsert(group_kind_of(dgd), dgd)
    assert d.roots == {rk(dgd), rk(dcd)}
    assert d.stamps == {uid(o) for o in (dgd, dcd, dep, rs, *pods)}


def test_deleting_a_middle_owner_makes_the_tracked_child_a_root() -> None:
    dgd, dcd, dep, rs, *pods = objs = graph_objects()
    st = state_with(*objs)
    d = st.delete(group_kind_of(dcd), dcd)
    assert d.roots == {rk(dgd), rk(dep)}
    assert uid(dcd) not in d.stamps
    assert {uid(dep), uid(rs), *(uid(p) for p in pods)} <= d.stamps


def test_owner_recreated_with_a_new_uid_does_not_adopt() -> None:
    old, dep = chain("DynamoGraphDeployment/g", "Deployment/g-f")
    st = state_with(old, dep)
    st.delete(group_kind_of(old), old)
    new = mk("DynamoGraphDeployment", "g", gen=1)
    d = st.upsert(group_kind_of(new), new)
    assert rk(new) in d.roots
    assert st.root_key_of(uid(dep)) == rk(dep)  # still its own root, UIDMismatch


def test_namespace_opt_in_and_out() -> None:
    dgd, *_ = objs = graph_objects()
    st = state_with(*objs, opted=False)
    d = st.upsert(NAMESPACE, ns("ns", opted=True, rv="2"))
    assert d.roots == {rk(dgd), *[]}  # the only root
    d = st.upsert(NAMESPACE, ns("ns", opted=False, rv="3"))
    assert d.sweeps == {SweepKey("ns")} and not d.roots
    assert not st.upsert(NAMESPACE, ns("ns", opted=False, rv="4"))  # no change of opt-in


def cm(name: str, root: Obj, *, rv: str = "1") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"cm-{name}",
            "resourceVersion": rv,
            "labels": {
                "app.kubernetes.io/managed-by": "aibom-rollup",
                "aibom.dev/root-uid": uid(root),
            },
        },
    }


def test_configmap_events_map_to_the_covering_root() -> None:
    dgd, _dcd, dep, *_ = objs = graph_objects()
    st = state_with(*objs)
    # Someone edits the graph's document: its root makes it true again.
    assert st.upsert(CONFIGMAP, cm("aibom-dynamographdeployment-g", dgd)).roots == {rk(dgd)}
    # A stray document of a rolled-up Deployment: the root (which deletes it after writing).
    assert st.upsert(CONFIGMAP, cm("aibom-deployment-g-w", dep)).roots == {rk(dgd)}
    assert [c["metadata"]["name"] for c in st.docs_of(uid(dep))] == ["aibom-deployment-g-w"]
    # Our own write, seen again through the watch: nothing to do.
    st.note_configmap(cm("aibom-deployment-g-w", dep, rv="9"))
    assert not st.upsert(CONFIGMAP, cm("aibom-deployment-g-w", dep, rv="9"))
    # Deleted by someone: the root rewrites its document.
    assert st.delete(CONFIGMAP, cm("aibom-dynamographdeployment-g", dgd)).roots == {rk(dgd)}
    # Deleted by us (already forgotten): nothing.
    st.forget_configmap("ns", "aibom-deployment-g-w")
    assert not st.delete(CONFIGMAP, cm("aibom-deployment-g-w", dep))
    assert st.docs_of(uid(dep)) == []


def test_unmanaged_configmaps_are_ignored() -> None:
    dgd, *_ = objs = graph_objects()
    st = state_with(*objs)
    c = cm("x", dgd)
    del c["metadata"]["labels"]["app.kubernetes.io/managed-by"]
    assert not st.upsert(CONFIGMAP, c)
    assert st.configmaps == {}


def test_configmap_in_an_opted_out_namespace_asks_for_a_sweep() -> None:
    dgd, *_ = objs = graph_objects()
    st = state_with(*objs, opted=False)
    assert st.upsert(CONFIGMAP, cm("aibom-x", dgd)).sweeps == {SweepKey("ns")}


def test_unavailable_kind_asks_for_a_full_resync_once() -> None:
    st = state_with(*graph_objects())
    gk = GroupKind("grove.io", "PodClique")
    assert st.set_unavailable(gk, Reason.FORBIDDEN).full
    assert not st.set_unavailable(gk, Reason.FORBIDDEN)
    assert st.graph.unavailable == {gk: Reason.FORBIDDEN}
    assert st.set_unavailable(gk, None).full
    assert st.graph.unavailable == {}


def test_roots_and_drop_kind() -> None:
    dgd, _dcd, dep, *_ = objs = graph_objects()
    lonely = mk("StatefulSet", "s")
    st = state_with(*objs, lonely)
    assert st.roots() == sorted([rk(dgd), rk(lonely)])
    d = st.drop_kind(GroupKind("nvidia.com", "DynamoComponentDeployment"))
    assert rk(dep) in d.roots
    assert list(st.keys_of_kind(GroupKind("nvidia.com", "DynamoComponentDeployment"))) == []


def test_an_objects_cache_key_is_its_graph_key() -> None:
    pod = GroupKind("", "Pod")
    with_uid = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "uid": "u-1"}}
    without = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}
    odd = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "uid": 7}}
    for obj in (with_uid, without, odd):
        assert ClusterState.key(pod, obj) == key_of(ref_of(obj))
    assert ClusterState.key(pod, with_uid) == "u-1"
