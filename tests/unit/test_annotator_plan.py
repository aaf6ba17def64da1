"""Reconcile plans from the cache alone: outcomes, writes, what a document supersedes, stamps."""

from __future__ import annotations

from aibom_core.document import DocLabels
from aibom_core.kinds import CONFIGMAP, NAMESPACE, GroupKind, default_registry, group_kind_of
from aibom_core.objects import Obj, ref_of
from aibom_core.stamp import Keys
from aibom_core.walk import Reason
from annotator.cache import ClusterState
from annotator.configmap import configmap_body, fit
from annotator.keys import RootKey, SweepKey
from annotator.plan import DocRef, Outcome, plan_root, plan_stamp, plan_sweep
from tests.unit.kobj import chain, mk

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
    # A root's own document is not handed back to it: the full resync that queued
    # this sweep queued every root already (each was then reconciled twice).
    st.upsert(CONFIGMAP, doc_for(lws, "aibom-leaderworkerset-l"))
    st.upsert(CONFIGMAP, doc_for(sts, "aibom-statefulset-l", rv="4"))
    assert plan_sweep(st, SweepKey("ns")).requeue == (rk(lws),)
    st2 = state(*objs)
    st2.upsert(CONFIGMAP, doc_for(lws, "aibom-leaderworkerset-l"))
    assert plan_sweep(st2, SweepKey("ns")).requeue == ()


def test_a_configmap_labelled_as_ours_under_another_name_is_never_touched() -> None:
    """Anyone who may update a ConfigMap can give it our labels, naming any object's
    UID: only a ConfigMap named as the contract names that object's document is
    ours. Deleted by no sweep (opted in or out), superseded by no root."""
    lws, sts, leader, *_ = objs = lws_family()

    def victims(st: ClusterState) -> None:
        for name, root in (("app-a", leader), ("app-b", sts), ("app-c", lws)):
            st.upsert(CONFIGMAP, doc_for(root, name))

    for opted in (True, False):
        st = state(*objs, opted=opted)
        victims(st)
        assert st.docs_in("ns") == []
        assert plan_sweep(st, SweepKey("ns")).deletes == ()
        plan = plan_root(st, rk(lws), generator=GEN, tool_version="t")
        assert plan.supersedes == plan.delete_now == ()
    # Ours by the contract's name: handled as before.
    st = state(*objs)
    victims(st)
    st.upsert(CONFIGMAP, doc_for(sts, "aibom-statefulset-l"))
    plan = plan_root(st, rk(lws), generator=GEN, tool_version="t")
    assert [d.name for d in plan.supersedes] == ["aibom-statefulset-l"]


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


# -- the sources hash spares a restart the facts of unchanged roots --

SALT = "salt"


def versioned(objs: list[Obj], rv: str = "7") -> list[Obj]:
    for o in objs:
        o["metadata"]["resourceVersion"] = rv
    return objs


def written(st: ClusterState, root: Obj, name: str, *, salt: str = SALT) -> None:
    """The ConfigMap the controller writes for the current plan (annotations as applied)."""
    plan = plan_root(st, rk(root), generator=GEN, tool_version="t", salt=salt)
    cm = configmap_body(
        ref_of(root),
        api_version=root["apiVersion"],
        name=name,
        payload=fit(b"{}"),
        input_hash=plan.input_hash,
        generator=GEN,
        labels=DocLabels(),
        sources_hash=plan.sources_hash,
    )
    cm["metadata"].update(uid=f"cm-{name}", resourceVersion="3")
    st.upsert(CONFIGMAP, cm)


def test_same_sources_are_current_without_computing_the_facts() -> None:
    lws, *_ = objs = versioned(lws_family())
    st = state(*objs)
    written(st, lws, "aibom-leaderworkerset-l")
    plan = plan_root(st, rk(lws), generator=GEN, tool_version="t", salt=SALT)
    assert plan.sources_hash.startswith("sha256:")
    assert not plan.write and plan.facts is None  # the facts were never computed
    # Without a salt nothing is skipped: the facts say the same.
    full = plan_root(st, rk(lws), generator=GEN, tool_version="t")
    assert not full.write and full.facts is not None and full.input_hash == plan.input_hash


def test_a_new_resource_version_computes_the_facts_and_writes_only_if_they_changed() -> None:
    lws, _sts, leader, _wsts, worker = objs = versioned(lws_family())
    st = state(*objs)
    written(st, lws, "aibom-leaderworkerset-l")
    # Same content, new version (a status heartbeat): facts computed, nothing written.
    st.upsert(
        group_kind_of(worker),
        {**worker, "metadata": {**worker["metadata"], "resourceVersion": "8"}},
    )
    plan = plan_root(st, rk(lws), generator=GEN, tool_version="t", salt=SALT)
    assert plan.facts is not None and not plan.write
    # A new image (and its digest) in the leader: written.
    status = {
        "containerStatuses": [
            {
                "name": "main",
                "image": "registry.example/lws/worker:1",
                "imageID": "registry.example/lws/worker@sha256:" + "a" * 64,
            }
        ]
    }
    st.upsert(
        group_kind_of(leader),
        {
            **leader,
            "spec": {"containers": [{"name": "main", "image": "registry.example/lws/worker:1"}]},
            "status": status,
            "metadata": {**leader["metadata"], "resourceVersion": "9"},
        },
    )
    assert plan_root(st, rk(lws), generator=GEN, tool_version="t", salt=SALT).write


def test_the_sources_hash_covers_settings_verdict_and_every_member() -> None:
    lws, sts, *_ = objs = versioned(lws_family())
    st = state(*objs)
    view_hash = plan_root(st, rk(lws), generator=GEN, tool_version="t", salt=SALT).sources_hash
    other_salt = plan_root(st, rk(lws), generator=GEN, tool_version="t", salt="other")
    assert other_salt.sources_hash != view_hash
    st.upsert(group_kind_of(sts), {**sts, "metadata": {**sts["metadata"], "resourceVersion": "8"}})
    assert (
        plan_root(st, rk(lws), generator=GEN, tool_version="t", salt=SALT).sources_hash != view_hash
    )
    # An object without a resourceVersion: no sources hash, the facts decide.
    del sts["metadata"]["resourceVersion"]
    st2 = state(*objs)
    assert plan_root(st2, rk(lws), generator=GEN, tool_version="t", salt=SALT).sources_hash == ""


def test_a_recorded_sources_hash_is_not_trusted_past_the_other_checks() -> None:
    lws, *_ = objs = versioned(lws_family())
    st = state(*objs)
    written(st, lws, "aibom-leaderworkerset-l")
    # Another generator (an upgrade), or another signer: rewritten although the sources match.
    assert plan_root(st, rk(lws), generator="aibom-rollup/2", tool_version="t", salt=SALT).write
    assert plan_root(st, rk(lws), generator=GEN, tool_version="t", salt=SALT, signed_by="kid").write


def test_sources_salt_is_stable_and_names_every_setting() -> None:
    from annotator.plan import sources_salt

    base = dict(
        tool_version="1", prefix="aibom.dev/", trust_all=False, max_depth=8, provenance_key=None
    )
    salt = sources_salt(REG, **base)  # type: ignore[arg-type]
    assert salt == sources_salt(REG, **base)  # type: ignore[arg-type]
    for change in (
        {"tool_version": "2"},
        {"prefix": "x.dev/"},
        {"trust_all": True},
        {"max_depth": 9},
        {"provenance_key": b"k"},
    ):
        assert sources_salt(REG, **{**base, **change}) != salt  # type: ignore[arg-type]
    from aibom_core.kinds import KindRegistry

    more = REG.merged(
        KindRegistry(tracked=frozenset({GroupKind("example.com", "Widget")}), walk_only=frozenset())
    )
    assert sources_salt(more, **base) != salt  # type: ignore[arg-type]
