"""The annotator's trust rule: only the webhook's edge-proof proves a controller
reference, guarded namespace or not (a guarded namespace is reported, and proves
nothing it did not check). Nothing unproven is absorbed."""

from __future__ import annotations

import json

from aibom_core.bom import render
from aibom_core.kinds import NAMESPACE, default_registry, group_kind_of
from aibom_core.objects import Obj, controller_ref, ref_of
from aibom_core.provenance import Origin, proof_for
from aibom_core.stamp import Keys
from annotator.cache import ClusterState
from annotator.keys import RootKey
from annotator.plan import Outcome, plan_root, plan_stamp
from tests.unit.kobj import mk

REG = default_registry()
KEY = b"p" * 32
KEYS = Keys()


def proved(obj: Obj) -> Obj:
    owner = controller_ref(obj)
    assert owner is not None
    ann = obj["metadata"].setdefault("annotations", {})
    ann[KEYS.proof_key(ref_of(obj).group_kind, owner.group_kind)] = proof_for(KEY, obj, owner)
    return obj


def ns_obj(labels: dict[str, str]) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns", "labels": labels}}


def with_image(obj: Obj, image: str) -> Obj:
    obj["spec"] = {"containers": [{"name": "main", "image": image}]}
    return obj


def world() -> tuple[ClusterState, Obj, Obj, Obj]:
    dep = mk("Deployment", "d")
    rs = proved(mk("ReplicaSet", "d-1", dep))
    legit = proved(with_image(mk("Pod", "legit", rs), "registry.example/app:1"))
    # The tenant's Pod: a forged controller reference plus the legit Pod's
    # stamp and proof, copied.
    forged = with_image(mk("Pod", "forged", rs), "evil.example/miner:1")
    forged["metadata"]["annotations"] = {
        **legit["metadata"]["annotations"],
        "aibom.dev/rollup": "rolled-up",
        "aibom.dev/root": "Deployment/d",
        "aibom.dev/root-uid": dep["metadata"]["uid"],
    }
    st = ClusterState(REG, provenance_key=KEY)
    st.upsert(NAMESPACE, ns_obj({"aibom.dev/enabled": "true"}))
    for o in (dep, rs, legit, forged):
        st.upsert(group_kind_of(o), o)
    st.bulk = False
    return st, dep, legit, forged


def repaired(st: ClusterState, obj: Obj) -> dict[str, str | None]:
    """The stamp keys the annotator's repair of `obj` writes (it must write some)."""
    plan = plan_stamp(
        st, obj["metadata"]["uid"], keys=KEYS, watched=lambda gk: True, namespaces=None
    )
    assert plan is not None and plan.patch is not None
    ann: dict[str, str | None] = plan.patch["metadata"]["annotations"]
    return ann


def root_key(obj: Obj) -> RootKey:
    return RootKey.of(ref_of(obj))


def doc_of(st: ClusterState, root: Obj) -> dict[str, object]:
    plan = plan_root(st, root_key(root), generator="g", tool_version="t")
    assert plan.facts is not None
    doc: dict[str, object] = json.loads(render(plan.facts, tool_version="t"))
    return doc


def props(doc: dict[str, object]) -> dict[str, str]:
    component = doc["metadata"]["component"]  # type: ignore[index]
    return {p["name"]: p["value"] for p in component["properties"]}


def test_unguarded_namespace_absorbs_only_proven_edges() -> None:
    st, dep, _legit, _forged = world()
    doc = doc_of(st, dep)
    text = json.dumps(doc)
    assert "registry.example/app:1" in text
    assert "evil.example/miner:1" not in text
    p = props(doc)
    assert p["aibom.rollup.unproven.0"] == "Pod/forged"
    assert p["aibom.provenance.guarded"] == "false"
    assert st.unproven_edges() == ({"ns": 1}, {})


def test_stamp_repair_never_turns_unproven_into_rolled_up() -> None:
    st, _dep, legit, forged = world()
    ann = repaired(st, forged)
    assert ann["aibom.dev/rollup"] == "unproven"
    assert ann["aibom.dev/rollup-reason"] == "Unproven apps/ReplicaSet/d-1"
    assert ann["aibom.dev/root"] is None and ann["aibom.dev/root-uid"] is None
    ok = plan_stamp(
        st, legit["metadata"]["uid"], keys=KEYS, watched=lambda gk: True, namespaces=None
    )
    assert ok is not None and ok.patch is not None
    assert ok.patch["metadata"]["annotations"]["aibom.dev/rollup"] == "rolled-up"


def test_no_key_no_guard_proves_nothing() -> None:
    dep = mk("Deployment", "d")
    rs = proved(mk("ReplicaSet", "d-1", dep))
    st = ClusterState(REG)  # no key
    st.upsert(NAMESPACE, ns_obj({"aibom.dev/enabled": "true"}))
    for o in (dep, rs):
        st.upsert(group_kind_of(o), o)
    st.bulk = False
    assert st.resolve(rs["metadata"]["uid"]).status.value == "unproven"  # type: ignore[union-attr]


def test_a_guarded_namespace_is_reported_and_proves_nothing_it_did_not_check() -> None:
    """The forgery was admitted before the guard (or while the namespace was opted
    out): the guard never checked it, and it leaves no record of what it did check.
    Becoming guarded changes what the documents say, not which edges count."""
    st, dep, _legit, forged = world()
    assert not st.guarded("ns")
    dirty = st.set_binding(True)
    assert dirty.full  # every document says whether its namespace is guarded
    assert st.guarded("ns")
    doc = doc_of(st, dep)
    p = props(doc)
    assert p["aibom.provenance.guarded"] == "true"
    assert p["aibom.rollup.unproven.0"] == "Pod/forged"
    assert "evil.example/miner:1" not in json.dumps(doc)
    # Opting the namespace out of the guard and in again: the same.
    for labels in (
        {"aibom.dev/enabled": "true", "aibom.dev/provenance-guard": "disabled"},
        {"aibom.dev/enabled": "true"},
    ):
        dirty = st.upsert(NAMESPACE, ns_obj(labels))
        assert root_key(dep) in dirty.roots
        assert forged["metadata"]["uid"] not in dirty.stamps  # no verdict changed
        p = props(doc_of(st, dep))
        assert p["aibom.provenance.guarded"] == str(st.guarded("ns")).lower()
        assert p["aibom.rollup.unproven.0"] == "Pod/forged"
    assert st.guarded("ns")


def test_tracked_object_with_unproven_edge_is_its_own_root() -> None:
    dgd = mk("DynamoGraphDeployment", "g")
    dcd = mk("DynamoComponentDeployment", "c", dgd)  # forged: no proof
    st = ClusterState(REG, provenance_key=KEY)
    st.upsert(NAMESPACE, ns_obj({"aibom.dev/enabled": "true"}))
    for o in (dgd, dcd):
        st.upsert(group_kind_of(o), o)
    st.bulk = False
    assert root_key(dcd) in st.roots()
    plan = plan_root(st, root_key(dcd), generator="g", tool_version="t")
    assert plan.outcome is Outcome.ROLLUP_UNPROVEN
    assert props(doc_of(st, dgd))["aibom.rollup.unproven.0"] == "DynamoComponentDeployment/c"


def test_forged_replicaset_does_not_mirror_its_deployment() -> None:
    dep = mk(
        "Deployment",
        "d",
        annotations={"aibom.dev/rollup": "root", "aibom.dev/root": "Deployment/d"},
    )
    rs = mk("ReplicaSet", "forged", dep, annotations={"aibom.dev/rollup": "root"})
    st = ClusterState(REG, provenance_key=KEY)
    st.upsert(NAMESPACE, ns_obj({"aibom.dev/enabled": "true"}))
    for o in (dep, rs):
        st.upsert(group_kind_of(o), o)
    st.bulk = False
    plan = plan_stamp(
        st, rs["metadata"]["uid"], keys=KEYS, watched=lambda gk: True, namespaces=None
    )
    assert plan is not None and plan.patch is not None
    assert plan.patch["metadata"]["annotations"]["aibom.dev/rollup"] == "unproven"


def test_a_new_or_deleted_unproven_object_dirties_the_document_listing_it() -> None:
    st, dep, _legit, _forged = world()
    late = mk(
        "Pod", "late", st.graph.get(st.graph.parent_of(_legit["metadata"]["uid"]) or "") or {}
    )
    dirty = st.upsert(group_kind_of(late), late)
    assert root_key(dep) in dirty.roots
    dirty = st.delete(group_kind_of(late), late)
    assert root_key(dep) in dirty.roots


def test_trusting_every_reference_absorbs_the_forgery_and_claims_nothing() -> None:
    dep = mk("Deployment", "d")
    rs = mk("ReplicaSet", "d-1", dep)
    forged = with_image(mk("Pod", "forged", rs), "evil.example/miner:1")
    st = ClusterState(REG, trust_all=True)
    st.upsert(NAMESPACE, ns_obj({"aibom.dev/enabled": "true"}))
    for o in (dep, rs, forged):
        st.upsert(group_kind_of(o), o)
    st.bulk = False
    doc = doc_of(st, dep)
    assert "evil.example/miner:1" in json.dumps(doc)  # the old rule, on purpose
    assert "aibom.provenance.guarded" not in props(doc)


def test_an_adopted_pod_that_is_not_the_template_is_listed_apart_and_stamped_so() -> None:
    """The webhook proved the adoption and recorded that the Pod does not run the
    ReplicaSet's template (the proof's origin): listed apart, its image out, its
    stamp says so, counted; a twin that runs the template rolls up."""
    dep = mk("Deployment", "d")
    rs = proved(mk("ReplicaSet", "d-1", dep))
    twin = with_image(mk("Pod", "twin", rs), "registry.example/app:1")
    visitor = with_image(mk("Pod", "visitor", rs), "evil.example/visitor:1")
    for pod, origin in ((twin, Origin.ADOPTED), (visitor, Origin.MISMATCH)):
        owner = controller_ref(pod)
        assert owner is not None
        pod["metadata"]["annotations"] = {
            KEYS.edge_proof: proof_for(KEY, pod, owner, origin=origin)
        }
    st = ClusterState(REG, provenance_key=KEY)
    st.upsert(NAMESPACE, ns_obj({"aibom.dev/enabled": "true"}))
    for o in (dep, rs, twin, visitor):
        st.upsert(group_kind_of(o), o)
    st.bulk = False
    doc = doc_of(st, dep)
    text = json.dumps(doc)
    assert "registry.example/app:1" in text and "evil.example/visitor:1" not in text
    p = props(doc)
    assert p["aibom.rollup.adopted-mismatch.0"] == "Pod/visitor"
    assert not any(k.startswith("aibom.rollup.unproven.") for k in p)
    assert st.unproven_edges() == ({}, {"ns": 1})
    ann = repaired(st, visitor)
    assert ann["aibom.dev/rollup"] == "unproven"
    assert ann["aibom.dev/rollup-reason"] == "AdoptedMismatch apps/ReplicaSet/d-1"
