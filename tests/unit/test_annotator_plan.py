"""Reconcile plans from the cache alone: outcomes, writes, what a document supersedes, stamps."""

from __future__ import annotations

from aibom_core.kinds import GroupKind, default_registry, group_kind_of
from aibom_core.objects import ref_of
from aibom_core.stamp import Keys
from aibom_core.walk import Reason
from annotator.cache import CONFIGMAP, NAMESPACE, ClusterState
from annotator.configmap import DocLabels, configmap_body, fit
from annotator.keys import RootKey, SweepKey
from annotator.plan import DocRef, Outcome, plan_root, plan_stamp, plan_sweep
from tests.unit.kobj import Obj, chain, mk

REG = default_registry()
GEN = "aibom-rollup/t"
KEYS = Keys()


def rk(obj: Obj) -> RootKey:
    m = obj["metadata"]
    gk = group_kind_of(obj)
    return RootKey(m["namespace"], m["uid"], gk.group, gk.kind, m["name"])


def state(*objs: Obj, opted: bool = True) -> ClusterState:
    st = ClusterState(REG, trust_all=True)  # provenance has its own tests
    labels = {"aibom.dev/enabled": "true"} if opted else {}
    st.upsert(
        NAMESPACE,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns", "labels": labels}},
    )
    for o in objs:
        st.upsert(group_kind_of(o), o)
    st.bulk = False
    return st


def doc_for(obj: Obj, name: str, *, input_hash: str = "old", rv: str = "3") -> Obj:
    cm = configmap_body(
        ref_of(obj),
        api_version=obj["apiVersion"],
        name=name,
        payload=fit(b"{}"),
        input_hash=input_hash,
        generator=GEN,
        labels=DocLabels(),
    )
    cm["metadata"]["uid"] = f"cm-{name}"
    cm["metadata"]["resourceVersion"] = rv
    return cm


def lws_family() -> list[Obj]:
    lws, sts = chain("LeaderWorkerSet/l", "StatefulSet/l")
    leader = mk("Pod", "l-0", sts)
    worker_sts = mk("StatefulSet", "l-0", leader)
    worker = mk("Pod", "l-0-0", worker_sts)
    return [lws, sts, leader, worker_sts, worker]


def test_root_with_prior_child_documents_writes_then_supersedes_them() -> None:
    lws, sts, *_ = objs = lws_family()
    st = state(*objs)
    st.upsert(CONFIGMAP, doc_for(sts, "aibom-statefulset-l"))
    plan = plan_root(st, rk(lws), generator=GEN, tool_version="t")
    assert plan.outcome is Outcome.MATCHED
    assert plan.write and plan.cm_name == "aibom-leaderworkerset-l"
    assert [r.kind_name for r in plan.owned] == ["StatefulSet/l", "StatefulSet/l-0"]
    assert plan.pods == 2
    assert plan.supersedes == (
        DocRef("ns", "aibom-statefulset-l", "cm-aibom-statefulset-l", "3", sts["metadata"]["uid"]),
    )
    assert not plan.delete_now


def test_current_document_is_not_rewritten_but_still_supersedes() -> None:
    lws, sts, *_ = objs = lws_family()
    st = state(*objs)
    first = plan_root(st, rk(lws), generator=GEN, tool_version="t")
    st.upsert(CONFIGMAP, doc_for(lws, "aibom-leaderworkerset-l", input_hash=first.input_hash))
    st.upsert(CONFIGMAP, doc_for(sts, "aibom-statefulset-l"))
    again = plan_root(st, rk(lws), generator=GEN, tool_version="t")
    assert not again.write
    assert [d.name for d in again.supersedes] == ["aibom-statefulset-l"]
    # Another generator (an upgrade) rewrites.
    assert plan_root(st, rk(lws), generator="aibom-rollup/2", tool_version="2").write


def test_rolled_up_key_points_at_its_root() -> None:
    lws, sts, *_ = objs = lws_family()
    plan = plan_root(state(*objs), rk(sts), generator=GEN, tool_version="t")
    assert plan.outcome is Outcome.ROLLED_UP
    assert plan.requeue == rk(lws)
    assert not plan.write and not plan.supersedes and not plan.delete_now


def test_not_opted_in_deletes_the_roots_own_document_at_once() -> None:
    lws, *_ = objs = lws_family()
    st = state(*objs, opted=False)
    st.upsert(CONFIGMAP, doc_for(lws, "aibom-leaderworkerset-l"))
    plan = plan_root(st, rk(lws), generator=GEN, tool_version="t")
    assert plan.outcome is Outcome.NOT_OPTED_IN
    assert [d.name for d in plan.delete_now] == ["aibom-leaderworkerset-l"]
    assert not plan.write


def test_deleted_object_is_unmatched() -> None:
    lws, *_ = lws_family()
    plan = plan_root(state(), rk(lws), generator=GEN, tool_version="t")
    assert plan.outcome is Outcome.UNMATCHED and not plan.write


def test_unreadable_owner_kind_makes_the_child_an_unresolved_root() -> None:
    _lws, sts, *rest = lws_family()
    st = state(sts, *rest)
    st.set_unavailable(GroupKind("leaderworkerset.x-k8s.io", "LeaderWorkerSet"), Reason.FORBIDDEN)
    plan = plan_root(st, rk(sts), generator=GEN, tool_version="t")
    assert plan.outcome is Outcome.ROLLUP_UNRESOLVED
    assert plan.failure is not None and plan.failure.reason is Reason.FORBIDDEN
    assert plan.write and plan.cm_name == "aibom-statefulset-l"


def test_sweep_of_an_opted_out_namespace_deletes_every_document() -> None:
    lws, sts, *_ = objs = lws_family()
    st = state(*objs, opted=False)
    st.upsert(CONFIGMAP, doc_for(lws, "aibom-leaderworkerset-l"))
    st.upsert(CONFIGMAP, doc_for(sts, "aibom-statefulset-l"))
    plan = plan_sweep(st, SweepKey("ns"))
    assert sorted(d.name for d in plan.deletes) == [
        "aibom-leaderworkerset-l",
        "aibom-statefulset-l",
    ]


def test_sweep_of_an_opted_in_namespace_hands_strays_to_their_root() -> None:
    lws, sts, leader, *_ = objs = lws_family()
    st = state(*objs)
    st.upsert(CONFIGMAP, doc_for(sts, "aibom-statefulset-l"))
    st.upsert(CONFIGMAP, doc_for(leader, "aibom-pod-l-0"))  # not a kind we document
    plan = plan_sweep(st, SweepKey("ns"))
    assert [d.name for d in plan.deletes] == ["aibom-pod-l-0"]
    assert plan.requeue == (rk(lws),)


def watched_all(gk: GroupKind) -> bool:
    return True


def test_stamp_plan_patches_with_preconditions() -> None:
    dep = mk(
        "Deployment", "d", annotations={"aibom.dev/rollup": "uncovered", "aibom.dev/root": "X/y"}
    )
    dep["metadata"]["resourceVersion"] = "9"
    st = state(dep)
    plan = plan_stamp(st, dep["metadata"]["uid"], keys=KEYS, watched=watched_all, namespaces=None)
    assert plan is not None and plan.patch == {
        "metadata": {
            "annotations": {
                "aibom.dev/root": "Deployment/d",
                "aibom.dev/root-uid": dep["metadata"]["uid"],
                "aibom.dev/rollup": "root",
            },
            "uid": dep["metadata"]["uid"],
            "resourceVersion": "9",
        }
    }


def test_stamp_plan_leaves_alone_what_the_cache_cannot_know() -> None:
    _, sts, *_ = lws_family()
    st = state(sts)
    st.set_unavailable(GroupKind("leaderworkerset.x-k8s.io", "LeaderWorkerSet"), Reason.FORBIDDEN)
    key = sts["metadata"]["uid"]
    plan = plan_stamp(st, key, keys=KEYS, watched=watched_all, namespaces=None)
    assert plan is not None and plan.skipped == "unknowable" and plan.patch is None
    # A NotFound owner of a kind we do not watch: the webhook may see it.
    st2 = state(sts)
    not_lws = lambda gk: gk.kind != "LeaderWorkerSet"  # noqa: E731
    plan = plan_stamp(st2, key, keys=KEYS, watched=not_lws, namespaces=None)
    assert plan is not None and plan.skipped == "unknowable"
    plan = plan_stamp(st2, key, keys=KEYS, watched=watched_all, namespaces={"elsewhere"})
    assert plan is not None and plan.skipped == "namespace"


def test_replicaset_stamp_mirrors_its_deployment() -> None:
    dep = mk(
        "Deployment",
        "d",
        annotations={"aibom.dev/root": "Deployment/d", "aibom.dev/rollup": "root"},
    )
    dep["metadata"]["annotations"]["aibom.dev/root-uid"] = dep["metadata"]["uid"]
    rs = mk("ReplicaSet", "d-1", dep, annotations=dict(dep["metadata"]["annotations"]))
    st = state(dep, rs)
    plan = plan_stamp(st, rs["metadata"]["uid"], keys=KEYS, watched=watched_all, namespaces=None)
    assert plan is not None and plan.patch is None  # the copy is what it should carry
    rs2 = mk("ReplicaSet", "d-2", dep, annotations={"aibom.dev/rollup": "rolled-up"})
    st.upsert(group_kind_of(rs2), rs2)
    plan = plan_stamp(st, rs2["metadata"]["uid"], keys=KEYS, watched=watched_all, namespaces=None)
    assert plan is not None and plan.patch is not None
    assert plan.patch["metadata"]["annotations"]["aibom.dev/rollup"] == "root"
