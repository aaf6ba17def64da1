"""The graph's compact bookkeeping (siblings share their owner reference, one scope per
namespace and kind) keeps every edge exactly as the UID-checked walk decides it."""

from __future__ import annotations

from aibom_core.graph import OwnershipGraph
from aibom_core.kinds import default_registry
from aibom_core.objects import Obj, OwnerRef, ref_of
from tests.unit.kobj import mk

REG = default_registry()


def replicaset_with_pods(n: int) -> tuple[Obj, list[Obj], OwnershipGraph]:
    rs = mk("ReplicaSet", "rs")
    pods = [mk("Pod", f"p{i}", rs) for i in range(n)]
    graph = OwnershipGraph(REG)
    for obj in (rs, *pods):
        graph.upsert(obj)
    return rs, pods, graph


def test_sibling_pods_share_one_owner_reference_and_scope() -> None:
    rs, pods, graph = replicaset_with_pods(3)
    nodes = [graph._nodes[ref_of(p).uid] for p in pods]
    assert nodes[0].owner is nodes[1].owner is nodes[2].owner
    assert nodes[0].owner_at is nodes[1].owner_at is nodes[2].owner_at
    assert ref_of(pods[0]).group_kind is ref_of(pods[1]).group_kind
    assert {graph.parent_of(ref_of(p).uid) for p in pods} == {ref_of(rs).uid}


def test_a_claim_of_the_same_uid_under_another_name_or_namespace_is_not_shared() -> None:
    rs = mk("ReplicaSet", "rs")
    rs_uid = ref_of(rs).uid
    good = mk("Pod", "good", rs)
    # Same owner UID, another name: the reference names an object that does not exist.
    renamed = mk("Pod", "renamed", mk("ReplicaSet", "other"), owner_uid=rs_uid)
    # Same owner UID and name, another namespace: a GET there finds nothing.
    elsewhere = mk("Pod", "elsewhere", rs, ns="ns2")
    graph = OwnershipGraph(REG)
    for obj in (rs, good, renamed, elsewhere):
        graph.upsert(obj)
    owner = graph._nodes[ref_of(renamed).uid].owner
    assert isinstance(owner, OwnerRef) and owner.name == "other"
    assert graph._nodes[ref_of(elsewhere).uid].owner_at == ("ns2", "apps", "ReplicaSet")
    assert graph.parent_of(ref_of(good).uid) == rs_uid
    assert graph.parent_of(ref_of(renamed).uid) is None
    assert graph.parent_of(ref_of(elsewhere).uid) is None
    assert graph.children_of(rs_uid) == [ref_of(good).uid]


def test_removing_every_object_of_a_scope_forgets_the_scope() -> None:
    rs, pods, graph = replicaset_with_pods(2)
    assert graph.find("ns", ref_of(pods[0]).group_kind, "p0") is pods[0]
    for obj in (rs, *pods):
        graph.remove(ref_of(obj).uid)
    assert graph._by_name == {} and graph._claims == {} and len(graph) == 0
    assert graph.find("ns", ref_of(pods[0]).group_kind, "p0") is None
