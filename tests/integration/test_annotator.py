"""The annotator against the real control plane (docs/annotator.md, Tests).

The annotator runs as a real process (`python -m aibom_rollup annotator`)
under an identity bound to the ClusterRole shipped in
manifests/annotator/rbac.yaml (a second identity lacks one rule, for the
Forbidden case), with leader election on a real Lease. Deployments,
StatefulSets and Jobs get their ReplicaSets and Pods from the real
kube-controller-manager, which also garbage-collects; there is no kubelet,
so Pod status (containerStatuses with imageID) is written through the
pods/status subresource the way a kubelet would. Grove, LWS and Dynamo
objects are built parent-first with real controller references.

Each test opts in only its own namespace (a per-test namespace label), so
an annotator never touches another test's objects.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import cast

import pytest
import yaml

from aibom_core.document import MANAGED_BY, MANAGED_BY_LABEL, unpack
from aibom_core.objects import Obj
from tests.controlplane import REPO_ROOT, ControlPlane, Kubectl, bind_rules, child_env
from tests.integration.kubelet import set_digest
from tests.integration.support import (
    LABEL_KEY,
    Annotator,
    Recorder,
    StartAnnotator,
    apply,
    crd,
    cronjob,
    dcd,
    deployment,
    dgd,
    digest,
    docs,
    document,
    get,
    grant_annotator,
    grant_lease,
    grove,
    lws,
    merge_patch,
    meta,
    owned,
    owner_ref,
    pod,
    pod_spec,
    running_webhook,
    settle,
    statefulset,
    wait_doc,
    wait_for,
    wait_registered,
)

pytestmark = pytest.mark.integration

GRAPH_LABEL = "nvidia.com/dynamo-graph-deployment-name"


# -- Grove --


def grove_pod(
    kubectl: Kubectl,
    ns: str,
    graph: Obj,
    image: str,
    *,
    chain: list[tuple[str, str]],
    pod_name: str,
    **labels: str,
) -> None:
    """Grove's objects under `graph`, each owning the next (`chain`: kind, name), and a Pod
    of the last one."""
    owner = graph
    for kind, name in chain:
        owner = apply(kubectl, grove(kind, ns, name, owner, image))
    apply(kubectl, pod(ns, pod_name, owner, image, **labels))


def test_grove_direct_clique_digest_reaches_the_graph_and_label_is_no_authority(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator
) -> None:
    image = "registry.example/dynamo/worker:1"
    graph = apply(kubectl, dgd(ns, "g", image))
    grove_pod(
        kubectl,
        ns,
        graph,
        image,
        chain=[("PodCliqueSet", "g-0"), ("PodClique", "g-0-worker")],
        pod_name="g-0-worker-0",
        **{GRAPH_LABEL: "g"},
    )
    set_digest(control_plane, ns, "g-0-worker-0", image, digest("grove-worker"))
    # A tenant Pod that carries the graph's label, owned by a foreign chain.
    foreign_pcs = apply(
        kubectl, {**grove("PodCliqueSet", ns, "other", graph, image), "metadata": meta(ns, "other")}
    )
    foreign = apply(kubectl, grove("PodClique", ns, "other-worker", foreign_pcs, image))
    apply(kubectl, pod(ns, "sneaky", foreign, image, **{GRAPH_LABEL: "g"}))
    set_digest(control_plane, ns, "sneaky", image, digest("tenant"))

    cm = wait_doc(
        control_plane, ns, "aibom-dynamographdeployment-g", containing=(digest("grove-worker"),)
    )
    text = json.dumps(document(cm))
    assert digest("tenant") not in text
    # The PodCliqueSet is listed (tracked); PodCliques are walk-only: never listed.
    assert owned(document(cm)) == ["PodCliqueSet/g-0"]
    # The foreign PodCliqueSet is a root of its own: the tenant's Pod is its.
    other = wait_doc(control_plane, ns, "aibom-podcliqueset-other", containing=(digest("tenant"),))
    assert set(docs(control_plane, ns)) == {
        "aibom-dynamographdeployment-g",
        other["metadata"]["name"],
    }
    labels = cm["metadata"]["labels"]
    assert labels["aibom.dev/root-kind"] == "DynamoGraphDeployment"
    assert labels["aibom.dev/root-name"] == "g"
    assert labels["aibom.dev/root-uid"] == graph["metadata"]["uid"]
    assert cm["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "nvidia.com/v1beta1",
            "kind": "DynamoGraphDeployment",
            "name": "g",
            "uid": graph["metadata"]["uid"],
        }
    ]
    # The Pod's own stamp, repaired by the annotator (no webhook runs here).
    stamped = wait_for(
        "the worker Pod's stamp",
        lambda: (
            (get(control_plane, f"/api/v1/namespaces/{ns}/pods/g-0-worker-0") or {})
            .get("metadata", {})
            .get("annotations", {})
            .get("aibom.dev/root")
        ),
    )
    assert stamped == "DynamoGraphDeployment/g"


def test_grove_scaling_group_digest_reaches_the_graph(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator
) -> None:
    image = "registry.example/dynamo/prefill:2"
    graph = apply(kubectl, dgd(ns, "sg", image))
    chain = [
        ("PodCliqueSet", "sg-0"),
        ("PodCliqueScalingGroup", "sg-0-group"),
        ("PodClique", "sg-0-group-0-worker"),
    ]
    grove_pod(kubectl, ns, graph, image, chain=chain, pod_name="sg-0-group-0-worker-0")
    set_digest(control_plane, ns, "sg-0-group-0-worker-0", image, digest("scaling-group"))
    wait_doc(
        control_plane, ns, "aibom-dynamographdeployment-sg", containing=(digest("scaling-group"),)
    )
    assert set(docs(control_plane, ns)) == {"aibom-dynamographdeployment-sg"}


def test_owner_recreated_with_a_new_uid_does_not_adopt_the_stale_child(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator
) -> None:
    image = "registry.example/dynamo/worker:1"
    old = apply(kubectl, dgd(ns, "g", image))
    # The finalizer holds the stale child after its owner goes: the garbage
    # collector would otherwise remove it before anyone could be confused.
    pcs_doc = grove("PodCliqueSet", ns, "g-0", old, image)
    pcs_doc["metadata"]["finalizers"] = ["aibom.dev/test-hold"]
    pcs = apply(kubectl, pcs_doc)
    clique = apply(kubectl, grove("PodClique", ns, "g-0-worker", pcs, image))
    apply(kubectl, pod(ns, "g-0-worker-0", clique, image))
    set_digest(control_plane, ns, "g-0-worker-0", image, digest("old-generation"))
    wait_doc(
        control_plane, ns, "aibom-dynamographdeployment-g", containing=(digest("old-generation"),)
    )
    try:
        kubectl("delete", "-n", ns, "dynamographdeployment/g", "--wait=true")
        new = apply(kubectl, dgd(ns, "g", image))
        assert new["metadata"]["uid"] != old["metadata"]["uid"]

        def new_doc() -> Obj | None:
            cm = docs(control_plane, ns).get("aibom-dynamographdeployment-g")
            uid = new["metadata"]["uid"]
            return cm if cm and cm["metadata"]["labels"]["aibom.dev/root-uid"] == uid else None

        wait_for("the re-created graph's document", new_doc)
        # Everything that could make the annotator look at the stale chain again
        # has happened and has been judged: the garbage collector's delete of the
        # stale PodCliqueSet (held by its finalizer), then a change of the stale
        # Pod itself; `settle` witnesses that the annotator has handled both.
        pcs_path = f"/apis/grove.io/v1alpha1/namespaces/{ns}/podcliquesets/g-0"
        wait_for(
            "the garbage collector to delete the stale PodCliqueSet",
            lambda: "deletionTimestamp" in (get(control_plane, pcs_path) or {})["metadata"],
        )
        kubectl("label", "-n", ns, "pod/g-0-worker-0", "aibom-test.dev/touch=1")
        settle(control_plane, kubectl, ns)
        cm = new_doc()
        assert cm is not None
        assert digest("old-generation") not in json.dumps(document(cm))
        assert cm["metadata"]["ownerReferences"][0]["uid"] == new["metadata"]["uid"]
    finally:
        merge_patch(kubectl, ns, "podcliqueset/g-0", {"metadata": {"finalizers": None}})


# -- LeaderWorkerSet --


def wait_pod(cp: ControlPlane, ns: str, name: str) -> Obj:
    found: Obj = wait_for(
        f"pod {ns}/{name} (made by the controller-manager)",
        lambda: get(cp, f"/api/v1/namespaces/{ns}/pods/{name}"),
        60,
    )
    return found


def build_lws(
    cp: ControlPlane,
    kubectl: Kubectl,
    ns: str,
    name: str,
    owner: Obj | None = None,
    *,
    adopt_later: bool = False,
) -> tuple[Obj, str]:
    """LWS -> leader StatefulSet -> leader Pod -> worker StatefulSet -> worker Pod (real KCM)."""
    image = "registry.example/lws/worker:1"
    group = apply(kubectl, lws(ns, name, owner, image))
    leader_sts = apply(kubectl, statefulset(ns, name, None if adopt_later else group, image=image))
    leader = wait_pod(cp, ns, f"{name}-0")
    assert leader["metadata"]["ownerReferences"][0]["uid"] == leader_sts["metadata"]["uid"]
    worker_sts = statefulset(ns, f"{name}-0", image=image)
    worker_sts["metadata"]["ownerReferences"] = [
        owner_ref({**leader, "apiVersion": "v1", "kind": "Pod"})
    ]
    apply(kubectl, worker_sts)
    worker = f"{name}-0-0"
    wait_pod(cp, ns, worker)
    set_digest(cp, ns, f"{name}-0", image, digest(f"{name}-leader"))
    set_digest(cp, ns, worker, image, digest(f"{name}-worker"))
    return group, worker


def test_lws_rolls_up_its_statefulsets_and_deletes_their_prior_document(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator
) -> None:
    with Recorder(control_plane, ns) as rec:
        group, _ = build_lws(control_plane, kubectl, ns, "lws", adopt_later=True)
        # Before adoption the leader StatefulSet is a root with its own document.
        wait_doc(control_plane, ns, "aibom-statefulset-lws")
        merge_patch(
            kubectl, ns, "statefulset/lws", {"metadata": {"ownerReferences": [owner_ref(group)]}}
        )
        cm = wait_doc(
            control_plane,
            ns,
            "aibom-leaderworkerset-lws",
            containing=(digest("lws-worker"), digest("lws-leader")),
        )
        assert owned(document(cm)) == ["StatefulSet/lws", "StatefulSet/lws-0"]
        wait_for(
            "only the LWS document",
            lambda: set(docs(control_plane, ns)) == {"aibom-leaderworkerset-lws"},
        )
        rec.sync()
    rec.assert_superseded_in_order(
        "aibom-statefulset-lws", "aibom-leaderworkerset-lws", "StatefulSet/lws"
    )
    assert annotator.metric("aibom_annotator_documents_deleted_total", {"reason": "rolled_up"}) >= 1


# -- Dynamo --


def test_dynamo_graph_over_component_over_deployment_is_one_document(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator
) -> None:
    image = "registry.example/dynamo/worker:1"
    graph = apply(kubectl, dgd(ns, "g", image))
    comp = apply(kubectl, dcd(ns, "g-worker", graph, image))
    apply(kubectl, deployment(ns, "g-worker", comp, replicas=2, image=image))

    def pods() -> list[Obj]:
        body = get(control_plane, f"/api/v1/namespaces/{ns}/pods?labelSelector=app=g-worker") or {}
        items: list[Obj] = body.get("items", [])
        return items if len(items) == 2 else []

    made = wait_for("the controller-manager's two Pods", pods, 60)
    for p in made:
        set_digest(control_plane, ns, p["metadata"]["name"], image, digest("dynamo-worker"))
    cm = wait_doc(
        control_plane, ns, "aibom-dynamographdeployment-g", containing=(digest("dynamo-worker"),)
    )
    assert owned(document(cm)) == ["Deployment/g-worker", "DynamoComponentDeployment/g-worker"]
    # One document: none for the component or the Deployment, not even one
    # written late (`settle`: the annotator has judged everything before it).
    marker = settle(control_plane, kubectl, ns)["metadata"]["name"]
    assert set(docs(control_plane, ns)) == {
        "aibom-dynamographdeployment-g",
        f"aibom-dynamocomponentdeployment-{marker}",
    }
    assert (
        annotator.metric(
            "aibom_workload_reconcile_outcomes_total",
            {"kind": "DynamoGraphDeployment", "outcome": "matched"},
        )
        >= 1
    )
    assert (
        annotator.metric(
            "aibom_workload_reconcile_outcomes_total",
            {"kind": "Deployment", "outcome": "rolled_up"},
        )
        >= 1
    )


def test_worker_pod_six_hops_under_a_graph_is_attributed(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator
) -> None:
    graph = apply(kubectl, dgd(ns, "deep", "registry.example/lws/worker:1"))
    comp = apply(kubectl, dcd(ns, "deep-worker", graph, "registry.example/lws/worker:1"))
    build_lws(control_plane, kubectl, ns, "deep-lws", comp)
    cm = wait_doc(
        control_plane,
        ns,
        "aibom-dynamographdeployment-deep",
        containing=(digest("deep-lws-worker"),),
    )
    assert owned(document(cm)) == [
        "DynamoComponentDeployment/deep-worker",
        "LeaderWorkerSet/deep-lws",
        "StatefulSet/deep-lws",
        "StatefulSet/deep-lws-0",
    ]
    assert set(docs(control_plane, ns)) == {"aibom-dynamographdeployment-deep"}


def test_standalone_component_is_its_own_root(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator
) -> None:
    comp = apply(kubectl, dcd(ns, "alone"))
    cm = wait_doc(control_plane, ns, "aibom-dynamocomponentdeployment-alone")
    assert cm["metadata"]["labels"]["aibom.dev/root-uid"] == comp["metadata"]["uid"]
    assert owned(document(cm)) == []


# -- CronJob, untracked owners --


def test_cronjob_job_pod(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator
) -> None:
    image = "registry.example/batch/eval:3"
    cron = cronjob(ns, "nightly", image, suspend=True)
    apply(kubectl, cron)
    kubectl("create", "job", "-n", ns, "nightly-manual", "--from=cronjob/nightly")
    job = get(control_plane, f"/apis/batch/v1/namespaces/{ns}/jobs/nightly-manual")
    assert job is not None and job["metadata"]["ownerReferences"][0]["controller"] is True

    def job_pod() -> str | None:
        body = (
            get(
                control_plane, f"/api/v1/namespaces/{ns}/pods?labelSelector=job-name=nightly-manual"
            )
            or {}
        )
        items = body.get("items") or []
        return items[0]["metadata"]["name"] if items else None

    name = wait_for("the Job's Pod", job_pod, 60)
    set_digest(control_plane, ns, name, image, digest("eval"))
    cm = wait_doc(control_plane, ns, "aibom-cronjob-nightly", containing=(digest("eval"),))
    assert owned(document(cm)) == ["Job/nightly-manual"]
    assert set(docs(control_plane, ns)) == {"aibom-cronjob-nightly"}


def test_owner_kind_we_may_not_read_leaves_the_child_reported(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, start: StartAnnotator
) -> None:
    user = "aibom-annotator-nolws"
    kubeconfig = grant_annotator(control_plane, kubectl, user, without=("leaderworkersets",))
    grant_lease(kubectl, ns, user, "aibom-test")
    a = start(kubeconfig=kubeconfig)
    group = apply(kubectl, lws(ns, "hidden"))
    apply(kubectl, statefulset(ns, "hidden", group, replicas=0))
    cm = wait_doc(control_plane, ns, "aibom-statefulset-hidden")
    assert cm["metadata"]["labels"]["aibom.dev/root-kind"] == "StatefulSet"
    wait_for(
        "rollup_unresolved counted",
        lambda: (
            a.metric(
                "aibom_workload_reconcile_outcomes_total",
                {"kind": "StatefulSet", "outcome": "rollup_unresolved"},
            )
            >= 1
        ),
    )
    assert (
        a.metric("aibom_rollup_unresolved_total", {"kind": "StatefulSet", "reason": "Forbidden"})
        >= 1
    )
    forbidden = [r for r in a.records() if r.get("msg", "").startswith("cannot list a kind")]
    assert [r["kind"] for r in forbidden] == ["leaderworkerset.x-k8s.io/LeaderWorkerSet"]
    unresolved = [r for r in a.records() if r.get("msg", "").startswith("owner walk failed")]
    assert len(unresolved) == 1, unresolved  # once per kind
    assert "aibom-leaderworkerset-hidden" not in docs(control_plane, ns)


# -- documents: byte identity, size, opt-out --


def test_roots_without_descendants_match_the_offline_scan_byte_for_byte(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, start: StartAnnotator, tmp_path: Path
) -> None:
    a = start()
    apply(kubectl, dcd(ns, "solo"))
    apply(kubectl, deployment(ns, "idle", replicas=0))
    first = wait_doc(control_plane, ns, "aibom-dynamocomponentdeployment-solo")
    wait_doc(control_plane, ns, "aibom-deployment-idle")
    dump = kubectl("get", "-n", ns, "dynamocomponentdeployments,deployments", "-o", "json").stdout
    (tmp_path / "dump.json").write_text(dump)
    out = tmp_path / "scan"
    subprocess.run(
        [sys.executable, "-m", "aibom_rollup", "scan", str(tmp_path / "dump.json"), "-o", str(out)],
        check=True,
        env={**child_env(), "PYTHONPATH": str(REPO_ROOT)},
        cwd=REPO_ROOT,
    )
    for name in ("aibom-dynamocomponentdeployment-solo", "aibom-deployment-idle"):
        assert unpack(docs(control_plane, ns)[name]) == (out / ns / f"{name}.json").read_bytes()
    # A restart re-reads everything and writes nothing: the input hash is unchanged.
    assert a.stop() == 0
    b = start(ident="annotator-b")
    # Its first full resync has judged both roots (written or, as it must be,
    # unchanged): the witness that a rewrite would have happened by now.
    wait_for(
        "annotator-b to reconcile both roots",
        lambda: (
            b.metric("aibom_annotator_documents_unchanged_total")
            + b.metric("aibom_annotator_documents_written_total")
            >= 2
        ),
    )
    assert b.metric("aibom_annotator_documents_written_total") == 0
    again = docs(control_plane, ns)["aibom-dynamocomponentdeployment-solo"]
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]


def test_large_documents_are_compressed_or_cut_never_dropped(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, start: StartAnnotator
) -> None:
    # A 3,000-byte budget instead of 1 MiB: the same code paths, small objects.
    a = start("--max-document-bytes=3000")

    def wide(name: str, n: int, noise: int) -> Obj:
        d = deployment(ns, name, replicas=0)
        d["spec"]["template"]["spec"]["containers"] = [
            {
                "name": f"c{i}",
                "image": f"registry.example/{name}/{digest(str(i))[7 : 7 + noise]}c{i}:1",
            }
            for i in range(n)
        ]
        return d

    apply(kubectl, wide("narrow", 1, 0))  # ~1.6 KB
    apply(kubectl, wide("medium", 10, 0))  # ~9 KB, ~1 KB gzip-compressed
    apply(kubectl, wide("broad", 60, 40))  # ~72 KB, ~5.5 KB gzip-compressed
    narrow = wait_doc(control_plane, ns, "aibom-deployment-narrow")
    medium = wait_doc(control_plane, ns, "aibom-deployment-medium")
    broad = wait_doc(control_plane, ns, "aibom-deployment-broad")
    assert narrow["metadata"]["annotations"]["aibom.dev/encoding"] == "json"
    assert "aibom.json" in narrow["data"] and "binaryData" not in narrow
    assert medium["metadata"]["annotations"]["aibom.dev/encoding"] == "gzip"
    assert "aibom.json.gz" in medium["binaryData"] and "data" not in medium
    assert len(document(medium)["components"]) == 10  # all of it
    assert broad["metadata"]["annotations"]["aibom.dev/encoding"] == "truncated"
    cut = document(broad)
    props = {p["name"]: p["value"] for p in cut["metadata"]["properties"]}
    assert props["aibom.truncated"] == "true"
    assert int(props["aibom.truncated.omitted-components"]) == 60 - len(cut["components"]) > 0

    def event() -> list[Obj]:
        body = get(control_plane, f"/apis/events.k8s.io/v1/namespaces/{ns}/events") or {}
        return [
            e
            for e in body.get("items", [])
            if e.get("reason") == "AIBOMTruncated" and e["regarding"]["name"] == "broad"
        ]

    events = wait_for("the AIBOMTruncated Event on the root", event)
    assert "truncated" in events[0]["note"] and events[0]["type"] == "Warning"
    assert events[0]["regarding"]["uid"] == broad["metadata"]["labels"]["aibom.dev/root-uid"]
    for encoding in ("json", "gzip", "truncated"):
        assert a.metric("aibom_annotator_documents_written_total", {"encoding": encoding}) >= 1


def test_namespace_that_stops_opting_in_loses_its_documents(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator
) -> None:
    apply(kubectl, dcd(ns, "x"))
    apply(kubectl, deployment(ns, "y", replicas=0))
    wait_for("two documents", lambda: len(docs(control_plane, ns)) == 2)
    kubectl("label", "namespace", ns, f"{LABEL_KEY}-")
    wait_for("no documents", lambda: docs(control_plane, ns) == {})
    assert (
        annotator.metric("aibom_annotator_documents_deleted_total", {"reason": "not_opted_in"}) >= 2
    )
    kubectl("label", "namespace", ns, f"{LABEL_KEY}={ns}")
    wait_for("documents back", lambda: len(docs(control_plane, ns)) == 2)


def test_a_document_someone_edited_or_deleted_is_restored(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, start: StartAnnotator
) -> None:
    # No stamp repair: the root's repaired stamp would be an event of its own that
    # rewrites the document whatever happened to it; here only the document's
    # own events may.
    start("--stamp-repair=off")
    apply(kubectl, dcd(ns, "kept"))
    name = "aibom-dynamocomponentdeployment-kept"
    original = unpack(wait_doc(control_plane, ns, name))
    merge_patch(kubectl, ns, f"configmap/{name}", {"data": {"aibom.json": '{"tampered": true}'}})
    wait_for(
        "the edited document restored",
        lambda: unpack(docs(control_plane, ns).get(name) or {}) == original,
    )
    kubectl("delete", "-n", ns, f"configmap/{name}")
    wait_for(
        "the deleted document restored",
        lambda: unpack(docs(control_plane, ns).get(name) or {}) == original,
    )
    # docs/annotator.md: a document whose managed-by label was removed is written
    # again (the cache watches by that label: to it, the document is gone).
    path = f"/api/v1/namespaces/{ns}/configmaps/{name}"
    before = get(control_plane, path)
    assert before is not None
    kubectl("label", "-n", ns, f"configmap/{name}", f"{MANAGED_BY_LABEL}-")

    def relabelled() -> Obj | None:
        cm = get(control_plane, path)
        labels = (cm or {}).get("metadata", {}).get("labels") or {}
        return cm if labels.get(MANAGED_BY_LABEL) == MANAGED_BY else None

    after = wait_for("the unlabelled document written again", relabelled)
    assert after["data"] == before["data"]  # byte for byte
    assert after["metadata"]["uid"] == before["metadata"]["uid"]


def test_a_document_edited_under_our_own_field_managers_name_is_restored(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, start: StartAnnotator
) -> None:
    """Repair by content, not by who wrote it: an edit that names the annotator's own
    field manager (an Update: `kubectl patch --field-manager`; or a server-side apply
    of our whole document with other data, which leaves no trace in managedFields)
    is restored like any other, whether the annotator ran meanwhile or not."""
    manager = "--field-manager=aibom-rollup-annotator"
    a = start()
    apply(kubectl, dcd(ns, "kept"))
    name = "aibom-dynamocomponentdeployment-kept"
    path = f"/api/v1/namespaces/{ns}/configmaps/{name}"
    original = unpack(wait_doc(control_plane, ns, name))
    settle(control_plane, kubectl, ns)  # the root's stamp repaired, its events judged

    def restored() -> bool:
        return unpack(docs(control_plane, ns).get(name) or {}) == original

    tampered = json.dumps({"data": {"aibom.json": '{"tampered": "update"}'}})
    kubectl("patch", "-n", ns, f"configmap/{name}", "--type=merge", "-p", tampered, manager)
    wait_for("the document patched under our name restored", restored)
    ours = get(control_plane, path)
    assert ours is not None
    forged: Obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            k: ours["metadata"][k]
            for k in ("name", "namespace", "labels", "annotations", "ownerReferences")
        },
        "data": {"aibom.json": '{"tampered": "apply"}'},
    }
    out = kubectl(
        "apply", "--server-side", "--force-conflicts", manager, "-o", "json", "-f", "-",
        input=json.dumps(forged),
    )  # fmt: skip
    assert json.loads(out.stdout)["data"] == forged["data"]  # the forgery took
    wait_for("the document applied under our name restored", restored)
    edited = {"reason": "edited"}
    wait_for("both repairs counted", lambda: a.metric(REPAIRED, edited) >= 2)
    # Nothing more: the annotator's next look at its own document writes nothing
    # (an apply of the same content leaves the resourceVersion as it is).
    settled_at = get(control_plane, path)
    settle(control_plane, kubectl, ns)
    assert get(control_plane, path) == settled_at
    assert a.metric(REPAIRED, edited) == 2
    # Edited under our name while no annotator runs: the next one restores it.
    assert a.stop() == 0
    kubectl("patch", "-n", ns, f"configmap/{name}", "--type=merge", "-p", tampered, manager)
    start(ident="annotator-b")
    wait_for("the document patched while stopped restored", restored)


REPAIRED = "aibom_annotator_documents_repaired_total"


# -- stamps --


def test_forged_and_missing_stamps_are_repaired(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator
) -> None:
    forged = deployment(ns, "forged", replicas=1)
    forged["metadata"]["annotations"] = {
        "aibom.dev/root": "Deployment/elsewhere",
        "aibom.dev/rollup": "uncovered",
    }
    made = apply(kubectl, forged)

    def stamp() -> dict[str, str] | None:
        obj = get(control_plane, f"/apis/apps/v1/namespaces/{ns}/deployments/forged") or {}
        ann = obj.get("metadata", {}).get("annotations") or {}
        got = {k: v for k, v in ann.items() if k.startswith("aibom.dev/")}
        return got if got.get("aibom.dev/rollup") == "root" else None

    assert wait_for("the repaired stamp", stamp) == {
        "aibom.dev/root": "Deployment/forged",
        "aibom.dev/root-uid": made["metadata"]["uid"],
        "aibom.dev/rollup": "root",
    }

    def pod_stamped() -> bool:
        body = get(control_plane, f"/api/v1/namespaces/{ns}/pods?labelSelector=app=forged") or {}
        items = body.get("items") or []
        return bool(items) and all(
            (p["metadata"].get("annotations") or {}).get("aibom.dev/root") == "Deployment/forged"
            for p in items
        )

    wait_for("the controller-manager's Pod stamped", pod_stamped, 60)
    assert annotator.metric("aibom_annotator_stamp_repairs_total", {"kind": "Deployment"}) >= 1
    # No fight with the deployment controller over the ReplicaSet's copied
    # annotations. The witness: the controller copies a new annotation of the
    # Deployment (and our keys, as the Deployment has them) onto the ReplicaSet,
    # and the annotator judges that copy (`settle`). By then it has repaired the
    # ReplicaSet at most once (a check that ran before the controller's first
    # copy of the repaired Deployment) and never had to leave it alone as
    # contested (repaired again and again: a fight).
    kubectl("annotate", "-n", ns, "deployment/forged", "aibom-test.dev/touch=1")
    rs_path = f"/apis/apps/v1/namespaces/{ns}/replicasets?labelSelector=app=forged"
    (rs,) = wait_for(
        "the deployment controller to copy the touch onto the ReplicaSet",
        lambda: [
            r
            for r in (get(control_plane, rs_path) or {}).get("items", [])
            if (r["metadata"].get("annotations") or {}).get("aibom-test.dev/touch") == "1"
        ],
    )
    settle(control_plane, kubectl, ns)
    assert annotator.metric("aibom_annotator_stamp_repairs_total", {"kind": "ReplicaSet"}) <= 1
    contested = {"reason": "contested"}
    assert annotator.metric("aibom_annotator_stamp_checks_skipped_total", contested) == 0
    # The ReplicaSet keeps the Deployment's stamp (the mirror rule).
    rs_now = get(
        control_plane, f"/apis/apps/v1/namespaces/{ns}/replicasets/{rs['metadata']['name']}"
    )
    ann = (rs_now or {})["metadata"].get("annotations") or {}
    assert {k: v for k, v in ann.items() if k.startswith("aibom.dev/")} == {
        "aibom.dev/root": "Deployment/forged",
        "aibom.dev/root-uid": made["metadata"]["uid"],
        "aibom.dev/rollup": "root",
    }


def test_with_the_webhook_running_stamps_are_agreed_not_fought(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, start: StartAnnotator, tmp_path: Path
) -> None:
    """The real webhook stamps at admission; the annotator only fills in what it cannot.

    A root's own UID is not known on CREATE, so the webhook leaves
    `root-uid` out on the roots; the annotator adds it (one patch per root).
    Everything else already agrees, and nothing flips back and forth: not the
    ReplicaSets the deployment controller keeps copying annotations onto.
    """
    with running_webhook(
        control_plane,
        kubectl,
        tmp_path,
        user="aibom-webhook-for-annotator",
        name="aibom-rollup-annotator-test",
        selector={LABEL_KEY: ns},
    ):
        wait_registered(kubectl, ns)
        a = start()
        graph = apply(kubectl, dgd(ns, "g"))
        comp = apply(kubectl, dcd(ns, "g-worker", graph))
        apply(kubectl, deployment(ns, "g-worker", comp, replicas=2))
        web = apply(kubectl, deployment(ns, "web", replicas=1))

        def everything() -> list[Obj] | None:
            body = get(control_plane, f"/api/v1/namespaces/{ns}/pods") or {}
            pods = body.get("items") or []
            return pods if len(pods) == 3 else None

        wait_for("the controller-manager's Pods", everything, 60)
        wait_for(
            "two documents",
            lambda: (
                set(docs(control_plane, ns))
                == {"aibom-dynamographdeployment-g", "aibom-deployment-web"}
            ),
        )

        def stamps() -> dict[str, dict[str, str]]:
            out: dict[str, dict[str, str]] = {}
            for path in (
                "/api/v1/namespaces/{ns}/pods",
                "/apis/apps/v1/namespaces/{ns}/replicasets",
                "/apis/apps/v1/namespaces/{ns}/deployments",
                "/apis/nvidia.com/v1beta1/namespaces/{ns}/dynamocomponentdeployments",
                "/apis/nvidia.com/v1beta1/namespaces/{ns}/dynamographdeployments",
            ):
                for o in (get(control_plane, path.format(ns=ns)) or {}).get("items", []):
                    ann = o["metadata"].get("annotations") or {}
                    out[f"{o.get('kind') or path.rsplit('/', 1)[1]}/{o['metadata']['name']}"] = {
                        k: v for k, v in ann.items() if k.startswith("aibom.dev/")
                    }
            return out

        def settled() -> bool:
            s = stamps()
            return (
                all("aibom.dev/root-uid" in v for v in s.values()) and len(s) == 3 + 2 + 2 + 1 + 1
            )

        # The annotator counts a repair once the API server has answered its patch,
        # which a GET can see first: wait for the count too (two: the roots' root-uid).
        repaired = "aibom_annotator_stamp_repairs_total"
        wait_for("every stamp complete", lambda: settled() and a.metric(repaired) >= 2, 30)
        repairs = a.metric(repaired)
        before = stamps()
        # Nothing flips back and forth. The witness: the deployment controller
        # syncs both ReplicaSets again (it copies a new annotation of each
        # Deployment), and the annotator judges what it saw (`settle`: its
        # marker's root-uid is one more repair).
        for name in ("g-worker", "web"):
            kubectl("annotate", "-n", ns, f"deployment/{name}", "aibom-test.dev/touch=1")

        def copied() -> bool:
            body = get(control_plane, f"/apis/apps/v1/namespaces/{ns}/replicasets") or {}
            touched = [
                (r["metadata"].get("annotations") or {}).get("aibom-test.dev/touch") == "1"
                for r in body.get("items", [])
            ]
            return touched == [True, True]

        wait_for("the deployment controller to copy the touch onto both ReplicaSets", copied)
        marker = settle(control_plane, kubectl, ns)["metadata"]["name"]
        after = {k: v for k, v in stamps().items() if not k.endswith(f"/{marker}")}
        assert after == before
        wait_for("the marker's repair counted", lambda: a.metric(repaired) >= repairs + 1)
        assert a.metric(repaired) == repairs + 1
        contested = {"reason": "contested"}
        assert a.metric("aibom_annotator_stamp_checks_skipped_total", contested) == 0
        # Only the roots' own root-uid needed the annotator.
        assert repairs == 2, (repairs, a.records()[-20:])
        uid = graph["metadata"]["uid"]
        for name, st in before.items():
            if name.startswith("pods/") and "web" not in name:
                assert (
                    st["aibom.dev/root"] == "DynamoGraphDeployment/g"
                    and st["aibom.dev/root-uid"] == uid
                )
        assert web["metadata"]["uid"] in {v["aibom.dev/root-uid"] for v in before.values()}


# -- degradation: CRDs come and go --

WIDGET_CRD = crd("aibom-test.example.com", "Widget", "widgets")


def crd_object(ns: str, kind: str, name: str, *, template: Obj | None = None) -> Obj:
    """An object of one of the CRDs these tests install (group aibom-test.example.com)."""
    spec = {"template": {"spec": template}} if template is not None else {}
    return {
        "apiVersion": "aibom-test.example.com/v1",
        "kind": kind,
        "metadata": meta(ns, name),
        "spec": spec,
    }


def child_document(control_plane: ControlPlane, kubectl: Kubectl, child: Obj) -> Obj:
    """The document of `child`, whose owner's kind was just deleted.

    The garbage collector maps kinds through a discovery cache it resets every
    30 s (kube-controller-manager). Until then it still serves the deleted
    kind, finds the owner absent (404) and deletes the child: that is the
    collector's view, not the annotator's. A child deleted so is applied again;
    once the collector's cache forgets the kind, the child stays.
    """
    ns, name = child["metadata"]["namespace"], child["metadata"]["name"]
    path = f"/apis/apps/v1/namespaces/{ns}/deployments/{name}"
    doc = f"aibom-deployment-{name}"

    def outcome() -> Obj | str | None:
        cm = docs(control_plane, ns).get(doc)
        if cm is not None:
            return cm
        resp = control_plane.request("GET", path)
        if resp.status == 404 or resp.json()["metadata"].get("deletionTimestamp"):
            return "collected"
        return None

    deadline = time.monotonic() + 120
    while True:
        apply(kubectl, child)
        found = wait_for(f"document {ns}/{doc}, or {name} garbage-collected", outcome, 60)
        if not isinstance(found, str):
            return cast(Obj, found)
        if time.monotonic() > deadline:
            pytest.fail(f"{ns}/{name} garbage-collected again and again for 120 s")
        wait_for(f"{name} gone", lambda: control_plane.request("GET", path).status == 404, 30)


def test_a_crd_installed_later_is_watched_without_a_restart(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, start: StartAnnotator, tmp_path: Path
) -> None:
    kinds = tmp_path / "kinds.yaml"
    kinds.write_text("tracked:\n  - {group: aibom-test.example.com, kind: Widget}\n")
    grant_extra(kubectl, "aibom-annotator", "widgets")
    control_plane.delete_crd("widgets.aibom-test.example.com")
    a = start(f"--kinds={kinds}")
    apply(kubectl, dcd(ns, "other"))  # the other kinds work meanwhile
    wait_doc(control_plane, ns, "aibom-dynamocomponentdeployment-other")
    crd_file = tmp_path / "widget-crd.yaml"
    crd_file.write_text(yaml.safe_dump(WIDGET_CRD))
    control_plane.install_crd(crd_file)
    widget_kind = {"group": "aibom-test.example.com", "kind": "Widget"}
    try:
        widget = apply(
            kubectl, crd_object(ns, "Widget", "w", template=pod_spec("registry.example/w:1"))
        )
        wait_doc(control_plane, ns, "aibom-widget-w", timeout=30)
        assert a.metric("aibom_annotator_watch_healthy", widget_kind) == 1
        wait_for(  # the gauge is set every 2 s
            "the Widget cached",
            lambda: a.metric("aibom_annotator_cached_objects", widget_kind) == 1,
        )
    finally:
        control_plane.delete_crd("widgets.aibom-test.example.com")
    # docs/annotator.md, Degradation: a CRD is deleted after sync: its informer
    # ends (no_match), its objects leave the cache, and walks through it end
    # NoMatch (not NotFound: the kind is not served any more). The child is made
    # after the deletion (before, the garbage collector could delete it first).
    wait_for(
        "the Widget informer ended (no_match)",
        lambda: a.metric("aibom_annotator_watch_state", {**widget_kind, "state": "no_match"}) == 1,
        timeout=90,
    )
    wait_for(
        "no Widget cached",
        lambda: a.metric("aibom_annotator_cached_objects", widget_kind) == 0,
    )
    cm = child_document(control_plane, kubectl, deployment(ns, "widget-child", widget, replicas=0))
    props = {p["name"]: p["value"] for p in document(cm)["metadata"]["component"]["properties"]}
    assert props["aibom.rollup.unresolved"] == "NoMatch aibom-test.example.com/Widget/w"
    # The kind went away: the other kinds are unaffected.
    apply(kubectl, dcd(ns, "after"))
    wait_doc(control_plane, ns, "aibom-dynamocomponentdeployment-after")
    assert a.ready()


def test_a_kind_that_cannot_be_listed_does_not_hold_up_the_others(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, start: StartAnnotator, tmp_path: Path
) -> None:
    # A CRD whose preferred version needs a conversion webhook that is down:
    # every LIST at that version fails with 500, as with a broken operator.
    gadgets = crd("aibom-test.example.com", "Gadget", "gadgets")
    schema = gadgets["spec"]["versions"][0]["schema"]
    gadgets["spec"]["versions"].append(
        {"name": "v2", "served": True, "storage": False, "schema": schema}
    )
    gadgets["spec"]["conversion"] = {
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {"url": "https://127.0.0.1:1/convert"},
        },
    }
    crd_file = tmp_path / "gadget-crd.yaml"
    crd_file.write_text(yaml.safe_dump(gadgets))
    kinds = tmp_path / "kinds.yaml"
    kinds.write_text("walkOnly:\n  - {group: aibom-test.example.com, kind: Gadget}\n")
    grant_extra(kubectl, "aibom-annotator", "gadgets")
    control_plane.install_crd(crd_file)
    try:
        gadget = apply(kubectl, crd_object(ns, "Gadget", "g"))
        a = start(f"--kinds={kinds}", "--sync-timeout=3")
        apply(kubectl, dcd(ns, "unaffected"))
        apply(kubectl, deployment(ns, "owned-by-gadget", gadget, replicas=0))
        wait_doc(control_plane, ns, "aibom-dynamocomponentdeployment-unaffected")
        cm = wait_doc(control_plane, ns, "aibom-deployment-owned-by-gadget")
        props = {p["name"]: p["value"] for p in document(cm)["metadata"]["component"]["properties"]}
        assert props["aibom.rollup.unresolved"] == "Timeout aibom-test.example.com/Gadget/g"
        gadget_kind = {"group": "aibom-test.example.com", "kind": "Gadget"}
        assert a.metric("aibom_annotator_watch_healthy", gadget_kind) == 0
        assert (
            a.metric("aibom_annotator_watch_restarts_total", {**gadget_kind, "reason": "error"})
            >= 1
        )
        assert a.ready()
        assert (
            a.metric("aibom_rollup_unresolved_total", {"kind": "Deployment", "reason": "Timeout"})
            >= 1
        )
        assert any(r.get("msg", "").startswith("kind cannot be listed") for r in a.records())
    finally:
        control_plane.delete_crd("gadgets.aibom-test.example.com")


def grant_extra(kubectl: Kubectl, user: str, resource: str) -> None:
    rules = [
        {
            "apiGroups": ["aibom-test.example.com"],
            "resources": [resource],
            "verbs": ["list", "watch", "patch"],
        }
    ]
    bind_rules(kubectl, user, f"{user}-{resource}", rules)


# -- operations: leader election, shutdown, API server restart --


def test_killed_leader_standby_finishes_and_never_deletes_a_child_document_early(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, start: StartAnnotator
) -> None:
    n = 24
    # A slow leader (3 writes/s), so that it dies in the middle of the work.
    leader = start("--write-qps=3", "--write-burst=1", ident="leader")
    standby = start("--write-qps=50", ident="standby", wait=False).wait_ready()
    assert not standby.leading()
    for i in range(n):
        apply(kubectl, statefulset(ns, f"s{i}", replicas=0))
    wait_for(f"{n} StatefulSet documents", lambda: len(docs(control_plane, ns)) == n, 60)
    with Recorder(control_plane, ns) as rec:
        for i in range(n):
            group = apply(kubectl, lws(ns, f"l{i}"))
            merge_patch(
                kubectl,
                ns,
                f"statefulset/s{i}",
                {"metadata": {"ownerReferences": [owner_ref(group)]}},
            )
        wait_for(
            "the leader in the middle of it",
            lambda: (
                sum(1 for k in docs(control_plane, ns) if k.startswith("aibom-leaderworkerset-"))
                >= 3
            ),
            60,
            every=0.05,
        )
        leader.kill()
        killed = time.monotonic()
        standby.wait_leading(timeout=25)
        took_over = time.monotonic() - killed
        want = {f"aibom-leaderworkerset-l{i}" for i in range(n)}
        wait_for(
            "every LWS document and no StatefulSet document",
            lambda: set(docs(control_plane, ns)) == want,
            60,
        )
        rec.sync()
    print(f"standby took over {took_over:.1f} s after the leader was killed")
    assert took_over <= 17.5, f"standby took over after {took_over:.1f} s"
    for i in range(n):
        rec.assert_superseded_in_order(
            f"aibom-statefulset-s{i}", f"aibom-leaderworkerset-l{i}", f"StatefulSet/s{i}"
        )
    # Nothing was lost: every LWS document lists its StatefulSet.
    final = docs(control_plane, ns)
    for i in range(n):
        assert owned(document(final[f"aibom-leaderworkerset-l{i}"])) == [f"StatefulSet/s{i}"]


def test_graceful_shutdown_hands_the_lease_over_at_once(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, start: StartAnnotator
) -> None:
    first = start(ident="first")
    second = start(ident="second", wait=False).wait_ready()
    assert not second.leading()
    stopped = time.monotonic()
    assert first.stop() == 0
    lease = get(control_plane, f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/aibom-test")
    assert lease is not None and lease["spec"]["holderIdentity"] in ("", "second")
    second.wait_leading(timeout=10)
    handed_over = time.monotonic() - stopped
    print(f"standby leading {handed_over:.1f} s after SIGTERM to the leader")
    assert handed_over < 8
    apply(kubectl, dcd(ns, "after-handover"))
    wait_doc(control_plane, ns, "aibom-dynamocomponentdeployment-after-handover")


def test_watches_resume_after_an_api_server_restart(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator
) -> None:
    apply(kubectl, dcd(ns, "before"))
    wait_doc(control_plane, ns, "aibom-dynamocomponentdeployment-before")
    restarts = annotator.metric("aibom_annotator_watch_restarts_total")
    control_plane.restart_apiserver()
    apply(kubectl, dcd(ns, "after"))
    wait_doc(control_plane, ns, "aibom-dynamocomponentdeployment-after", timeout=60)
    assert annotator.metric("aibom_annotator_watch_restarts_total") > restarts
    wait_for("the annotator leading again", annotator.leading, 30)
    assert annotator.ready()


def test_a_start_whose_port_was_taken_picks_new_ports(
    tmp_path: Path, annotator_identity: Path, ns: str
) -> None:
    """The harness's answer to the free-port race between xdist workers: a port
    picked free and taken before the annotator binds it makes the annotator exit
    with its bind error; the test's Annotator starts it again on new ports."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        a = Annotator(
            annotator_identity, tmp_path, ns, args=("--trust-owner-references",), metrics_port=port
        ).start()
        try:
            a.wait_ready().wait_leading()
            assert a.metrics_port != port
            assert a.port_retries == 2
            assert "address already in use" in a.log_path.read_text()
        finally:
            assert a.stop() == 0, a.tail()
