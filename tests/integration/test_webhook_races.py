"""The webhook on the real control plane: exact stamps when owners are re-created or race.

- A ReplicaSet whose Deployment was deleted and re-created under the same
  name is `unresolved` (UIDMismatch), never mirrored from the new Deployment,
  and the core the annotator and `tree` share agrees with the webhook.
- The real deployment controller copies a Deployment's new stamp onto its
  ReplicaSet while the webhook still caches the Deployment's previous
  resourceVersion: the copy is never reverted (no flip-flop).
- Late adoption (the re-walk rule): an owner gets its controller reference on UPDATE
  while the webhook caches it ownerless; the annotator's repair of a child's
  stamp (an UPDATE carrying the new root) is not reverted from the cache.

The webhook runs as in tests/integration/test_webhook.py (a real process,
the shipped ClusterRole, the shipped webhook configuration), but with a long
owner cache TTL so the stale entry is certain to be there.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aibom_core.objects import Obj
from tests.controlplane import REPO_ROOT, ControlPlane, Kubectl, child_env
from tests.integration.support import (
    IMAGE,
    StartWebhook,
    Webhook,
    bare_pod,
    dcd,
    deployment,
    dgd,
    enabled_namespace,
    kubectl_apply,
    kubectl_get,
    merge_patch,
    owner_ref,
    stamp,
    template,
    wait_for,
    wait_registered,
    workload,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def long_cache_webhook(start_webhook: StartWebhook) -> Webhook:
    return start_webhook(
        user="aibom-webhook-races",
        name="aibom-rollup-races",
        selector={"aibom-test.dev/races": "on"},
        # The TTL cache alone (no owner index): its entries are certain to be
        # stale for the whole test.
        args=("--owner-cache-ttl", "600", "--no-owner-watch"),
    )


@pytest.fixture
def ns(long_cache_webhook: Webhook, kubectl: Kubectl, namespace: str) -> str:
    enabled_namespace(kubectl, namespace, "aibom-test.dev/races=on")
    wait_registered(kubectl, namespace)
    return namespace


def _rs(cp: ControlPlane, ns: str, name: str) -> Obj:
    resp = cp.request("GET", f"/apis/apps/v1/namespaces/{ns}/replicasets/{name}")
    assert resp.status == 200, resp.body
    obj: Obj = resp.json()
    return obj


def adopt(kubectl: Kubectl, ns: str, what: str, owner: Obj) -> dict[str, str]:
    """Give `what` (`kind/name`) a controller reference to `owner`; the stamp it
    and what it controls then should carry."""
    patch = {"metadata": {"ownerReferences": [owner_ref(owner)]}}
    kubectl("patch", "-n", ns, what, "--type=merge", "-p", json.dumps(patch))
    return {
        "aibom.dev/root": f"{owner['kind']}/{owner['metadata']['name']}",
        "aibom.dev/root-uid": owner["metadata"]["uid"],
        "aibom.dev/rollup": "rolled-up",
    }


def _tree(kubectl: Kubectl, ns: str) -> list[Obj]:
    """`aibom-rollup tree -o json` over a dump of the namespace (the annotator's core)."""
    dump = kubectl("get", "-n", ns, "deploy,rs,sts", "-o", "json").stdout
    out = subprocess.run(
        [sys.executable, "-m", "aibom_rollup", "tree", "-", "-o", "json"],
        input=dump,
        cwd=REPO_ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    records: list[Obj] = json.loads(out.stdout)
    return records


def test_replicaset_of_a_recreated_deployment_is_unresolved_and_stable(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str
) -> None:
    # Paused: the deployment controller makes no ReplicaSet for it, so no walk
    # ever puts it in the owner cache (a cached owner would answer for its own
    # UID after its deletion, for the TTL: the documented bounded staleness).
    old_doc = deployment(ns, "web", replicas=0)
    old_doc["spec"]["paused"] = True
    old = kubectl_apply(kubectl, old_doc)
    kubectl("delete", "-n", ns, "deployment/web", "--wait=true")
    new = kubectl_apply(kubectl, deployment(ns, "web", replicas=0))
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    # The new Deployment is stamped and cached (its ReplicaSet's walk GETs it).
    wait_for(
        "the new Deployment's ReplicaSet",
        lambda: kubectl_get(kubectl, ns, "replicasets", "-l", "app=web")["items"],
    )
    assert stamp(kubectl_get(kubectl, ns, "deployment/web"))["aibom.dev/rollup"] == "root"
    # A ReplicaSet still naming the deleted Deployment (a lingering child).
    # The finalizer keeps it while the garbage collector deletes it (its owner
    # is gone by UID), so its stamp can be watched.
    ref = owner_ref(old)
    rs_doc: Obj = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": "web-stale",
            "namespace": ns,
            "labels": {"app": "web-stale"},
            "ownerReferences": [ref],
            "finalizers": ["aibom-test.dev/hold"],
            # What the deployment controller copied while the old one lived.
            "annotations": {"aibom.dev/root": "Deployment/web", "aibom.dev/rollup": "root"},
        },
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "web-stale"}},
            "template": {
                "metadata": {"labels": {"app": "web-stale"}},
                "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}]},
            },
        },
    }
    try:
        created = kubectl_apply(kubectl, rs_doc)
        unresolved = {
            "aibom.dev/rollup": "unresolved",
            "aibom.dev/rollup-reason": "UIDMismatch apps/Deployment/web",
        }
        assert stamp(created) == unresolved
        # An UPDATE that touches our keys (a forged copy of the new owner's
        # stamp) is judged the same way: never the new Deployment's root-uid.
        kubectl(
            "annotate",
            "-n",
            ns,
            "replicaset/web-stale",
            "--overwrite",
            "aibom.dev/rollup=root",
            f"aibom.dev/root-uid={new['metadata']['uid']}",
        )
        assert stamp(_rs(control_plane, ns, "web-stale")) == unresolved
        # The shared core (annotator graph, offline tree) says the same: no fight.
        record = next(
            r for r in _tree(kubectl, ns) if r["kind"] == "ReplicaSet" and r["name"] == "web-stale"
        )
        assert record["annotations"] == unresolved

        # Stable: whatever updates happen meanwhile, the stamp never changes, up
        # to the garbage collector's delete (its owner is gone by UID: it sets
        # deletionTimestamp; the finalizer holds it).
        def deleted() -> bool:
            cur = _rs(control_plane, ns, "web-stale")
            assert stamp(cur) == unresolved
            return "deletionTimestamp" in cur["metadata"]

        wait_for("the garbage collector to delete the stale ReplicaSet", deleted, every=0.1)
        assert stamp(_rs(control_plane, ns, "web-stale")) == unresolved
    finally:
        merge_patch(
            kubectl, ns, "replicaset/web-stale", {"metadata": {"finalizers": None}}, check=False
        )


def test_deployment_controller_copy_is_never_reverted_by_the_cache(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, long_cache_webhook: Webhook
) -> None:
    owner = kubectl_apply(
        kubectl,
        workload(
            "StatefulSet",
            ns,
            "owner",
            replicas=0,
            template=template({"app": "owner"}, IMAGE),
            serviceName="owner",
        ),
    )
    kubectl_apply(kubectl, deployment(ns, "web", replicas=0))
    # The deployment controller makes the ReplicaSet; the webhook's walk of it
    # GETs the Deployment, which now sits in the owner cache (TTL 600 s).
    rs = wait_for(
        "the ReplicaSet stamped with the Deployment's stamp",
        lambda: next(
            (
                r
                for r in kubectl_get(kubectl, ns, "replicasets", "-l", "app=web")["items"]
                if stamp(r).get("aibom.dev/rollup") == "root"
            ),
            None,
        ),
    )
    name = rs["metadata"]["name"]
    # Adoption: the Deployment gets a controller reference to the StatefulSet;
    # the webhook stamps it rolled-up, and the deployment controller copies that
    # onto the ReplicaSet, whose walk would find the Deployment in the cache as
    # it was before (ownerless, `root`).
    want = adopt(kubectl, ns, "deployment/web", owner)
    assert stamp(kubectl_get(kubectl, ns, "deployment/web")) == want
    wait_for(
        "the ReplicaSet to carry the Deployment's new stamp",
        lambda: stamp(_rs(control_plane, ns, name)) == want,
    )
    # From here on never reverted, and no update loop (the revert and the
    # controller's copy would chase each other until the TTL expired), up to
    # the witness that the controller has synced the ReplicaSet again: it
    # copies a new annotation of the Deployment onto it.
    versions = {_rs(control_plane, ns, name)["metadata"]["resourceVersion"]}
    seen = []
    kubectl("annotate", "-n", ns, "deployment/web", "aibom-test.dev/touch=1")

    def synced() -> bool:
        cur = _rs(control_plane, ns, name)
        versions.add(cur["metadata"]["resourceVersion"])
        seen.append(stamp(cur))
        return (cur["metadata"].get("annotations") or {}).get("aibom-test.dev/touch") == "1"

    wait_for("the deployment controller to copy the touch", synced, every=0.05)
    reverted = [s for s in seen if s != want]
    assert not reverted, f"reverted {len(reverted)} of {len(seen)} times, e.g. {reverted[0]}"
    # At most one more copy of the new stamp, then the copy of the touch.
    assert len(versions) <= 3, f"ReplicaSet updated {len(versions) - 1} times meanwhile"
    refreshed = long_cache_webhook.metric(
        "aibom_webhook_owner_lookups_total", {"source": "refreshed"}
    )
    assert refreshed >= 1


def test_late_adoption_repair_is_not_reverted_by_the_cache(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, long_cache_webhook: Webhook
) -> None:
    comp = kubectl_apply(kubectl, dcd(ns, "comp"))
    pod_doc = bare_pod(ns, "worker")
    pod_doc["metadata"]["ownerReferences"] = [owner_ref(comp)]
    # The Pod's walk GETs the component, which now sits in the cache (600 s), ownerless.
    pod = kubectl_apply(kubectl, pod_doc)
    assert stamp(pod)["aibom.dev/root"] == "DynamoComponentDeployment/comp"
    # Late adoption: the component gets its controller reference on UPDATE (the
    # webhook stamps it and writes its edge-proof; the Pod's stamp is now stale).
    graph = kubectl_apply(kubectl, dgd(ns, "graph"))
    repaired = adopt(kubectl, ns, "dynamocomponentdeployment/comp", graph)
    assert stamp(kubectl_get(kubectl, ns, "dynamocomponentdeployment/comp")) == repaired
    # The annotator's repair of the Pod (what its walk computes; written the way
    # it writes, an UPDATE of our keys). Before the re-walk rule the webhook answered it
    # from the cached, ownerless component and reverted it to the component.
    kubectl(
        "annotate",
        "-n",
        ns,
        "pod/worker",
        "--overwrite",
        *(f"{k}={v}" for k, v in repaired.items()),
    )
    assert stamp(kubectl_get(kubectl, ns, "pod/worker")) == repaired
    # Walked again live because the carried stamp disagreed with the cached walk.
    assert long_cache_webhook.metric("aibom_webhook_owner_lookups_total", {"source": "refreshed"})


def test_cluster_scoped_owner_is_notfound_live_and_offline(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, long_cache_webhook: Webhook
) -> None:
    """One rule for both paths (live and `tree` over `kubectl get -o json`): a
    controller reference to a kind outside the registry (here the Namespace
    itself, a legal owner for the garbage collector) is no edge of the roll-up
    (docs/provenance-guard.md), so no GET is made (the shipped role could not
    read it and said Forbidden before) and the Pod is the top of its chain. A
    registry kind that is cluster-scoped is NotFound on both paths (the next
    test; tests/unit/test_dump.py)."""
    namespace_obj = json.loads(kubectl("get", "namespace", ns, "-o", "json").stdout)
    ref = owner_ref(namespace_obj)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "owned-by-ns", "namespace": ns, "ownerReferences": [ref]},
        "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}]},
    }
    live = stamp(kubectl_apply(kubectl, pod))
    want = {"aibom.dev/rollup": "uncovered"}
    assert live == want
    assert offline_stamp(kubectl, ns, "owned-by-ns") == want


def offline_stamp(kubectl: Kubectl, ns: str, pod: str, *args: str) -> dict[str, str]:
    """The stamp `tree ARGS` gives `pod` offline, from a dump holding the namespace's
    Pods and the Namespace itself (their cluster-scoped owner)."""
    dump = kubectl("get", "namespace", ns, "-o", "json").stdout
    pods = kubectl("get", "-n", ns, "pods", "-o", "json").stdout
    out = subprocess.run(
        [sys.executable, "-m", "aibom_rollup", "tree", "-", "-o", "json", *args],
        input=json.dumps([json.loads(dump), *json.loads(pods)["items"]]),
        cwd=REPO_ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    record = next(r for r in json.loads(out.stdout) if r["name"] == pod)
    annotations: dict[str, str] = record["annotations"]
    return annotations


@pytest.fixture(scope="module")
def namespace_kind_webhook(
    start_webhook: StartWebhook, tmp_path_factory: pytest.TempPathFactory
) -> Webhook:
    """A webhook whose registry (`--kinds`) makes the Namespace, a cluster-scoped
    kind, a walk-only kind: a registry owner that is cluster-scoped."""
    kinds = tmp_path_factory.mktemp("namespace-kind") / "kinds.yaml"
    kinds.write_text(NAMESPACE_KIND)
    return start_webhook(
        user="aibom-webhook-ns-kind",
        name="aibom-rollup-ns-kind",
        selector={"aibom-test.dev/ns-kind": "on"},
        args=("--kinds", str(kinds), "--no-owner-watch"),
    )


NAMESPACE_KIND = 'walkOnly:\n  - {group: "", kind: Namespace}\n'


def test_cluster_scoped_registry_owner_is_notfound_without_a_get(
    kubectl: Kubectl, namespace: str, namespace_kind_webhook: Webhook, tmp_path: Path
) -> None:
    """docs/webhook.md, Cluster-scoped owners: a controller reference to a registry
    kind that is cluster-scoped ends the walk `NotFound` from discovery, without a
    GET, although the shipped role may get namespaces (a GET would find it, and
    the walk would go on: `uncovered`); `tree` over a dump of the same objects
    agrees. The same Pod and dump as the test above, under a registry holding the
    Namespace."""
    hook = namespace_kind_webhook
    enabled_namespace(kubectl, namespace, "aibom-test.dev/ns-kind=on")
    wait_registered(kubectl, namespace)
    namespace_obj = json.loads(kubectl("get", "namespace", namespace, "-o", "json").stdout)
    pod = bare_pod(namespace, "owned-by-ns")
    pod["metadata"]["ownerReferences"] = [owner_ref(namespace_obj)]
    before = hook.metric("aibom_rollup_unresolved_total", {"reason": "NotFound"})
    live = stamp(kubectl_apply(kubectl, pod))
    want = {
        "aibom.dev/rollup": "unresolved",
        "aibom.dev/rollup-reason": f"NotFound core/Namespace/{namespace}",
    }
    assert live == want
    assert hook.metric("aibom_rollup_unresolved_total", {"reason": "NotFound"}) == before + 1
    kinds = tmp_path / "kinds.yaml"
    kinds.write_text(NAMESPACE_KIND)
    assert offline_stamp(kubectl, namespace, "owned-by-ns", "--kinds", str(kinds)) == want
