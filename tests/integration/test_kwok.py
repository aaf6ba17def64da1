"""kwok and kube-scheduler: Pods bound to fake Nodes, their status written by kwok's Stages.

The ``kwok`` component (tests/controlplane/components/kwok.py) runs the kwok
controller v0.8.0 as its ServiceAccount ``kube-system/kwok-controller`` with its
release's ClusterRole, and ``kube-scheduler`` (which it requires) as
``system:kube-scheduler`` with the API server's bootstrap RBAC. A Deployment made
by kube-controller-manager's controllers gets its Pods bound to the fake Nodes by
the scheduler, and kwok's release Stages report them Running and Ready, each
container status with the ``imageID`` our addition to the Stages computes
(``kwok.image_id``: one digest per image and Pod). Our annotator's document for
the Deployment lists those digests, each Pod's own.
"""

from __future__ import annotations

import json

import pytest

from aibom_core.objects import Obj
from tests.controlplane import Component, ControlPlane, Kubectl
from tests.controlplane.components.kwok import NAMESPACE as KWOK_NAMESPACE
from tests.controlplane.components.kwok import (
    NODE_ANNOTATION,
    NODES,
    SERVICE_ACCOUNT,
    VERSION,
    Kwok,
    image_id,
    pod_digests,
)
from tests.controlplane.components.scheduler import USER as SCHEDULER_USER
from tests.controlplane.components.scheduler import KubeScheduler
from tests.integration.chains import assert_release_identity, can_i, running
from tests.integration.support import (
    Annotator,
    apply,
    docs,
    document,
    get,
    items,
    reported_pods,
    template,
    wait_doc,
    wait_for,
    workload,
)

pytestmark = [pytest.mark.integration, pytest.mark.components("kwok")]

#: Scheduling, the Stages and the annotator: generous bounds, the machine is shared.
TIMEOUT = 120.0


@pytest.fixture(scope="module")
def kwok(components: dict[str, Component]) -> Kwok:
    return running(components, Kwok)


@pytest.fixture(scope="module")
def scheduler(control_plane: ControlPlane, kwok: Kwok) -> KubeScheduler:
    found = control_plane.component(KubeScheduler.name)
    assert isinstance(found, KubeScheduler), "kwok requires kube-scheduler"
    return found


def whoami(kubectl: Kubectl, component: Component) -> Obj:
    info: Obj = json.loads(
        kubectl("auth", "whoami", "-o", "json", kubeconfig=component.kubeconfig).stdout
    )["status"]["userInfo"]
    return info


def test_kwok_runs_as_its_service_account_with_its_release_rbac(
    kubectl: Kubectl, kwok: Kwok
) -> None:
    """Not admin: the release's ServiceAccount, bound to the release's ClusterRole, which
    lets it write Pod and Node status and delete Pods, and nothing of the rest."""
    assert_release_identity(
        kubectl, kwok, service_account=f"{KWOK_NAMESPACE}/{SERVICE_ACCOUNT}",
        binding="kwok-controller", role="kwok-controller",
    )  # fmt: skip
    assert "system:masters" not in whoami(kubectl, kwok).get("groups", [])
    assert can_i(kubectl, kwok, "patch", "pods", "--subresource=status")
    assert can_i(kubectl, kwok, "patch", "nodes", "--subresource=status")
    assert can_i(kubectl, kwok, "delete", "pods")
    assert can_i(kubectl, kwok, "update", "stages.kwok.x-k8s.io")
    for verb, resource in [("create", "pods"), ("create", "nodes"), ("delete", "nodes"),
                           ("get", "secrets"), ("create", "clusterrolebindings"),
                           ("delete", "namespaces"), ("update", "deployments.apps")]:  # fmt: skip
        assert not can_i(kubectl, kwok, verb, resource), (verb, resource)


def test_kube_scheduler_runs_as_system_kube_scheduler(
    kubectl: Kubectl, scheduler: KubeScheduler
) -> None:
    """Its client certificate's user, bound by the bootstrap policy alone."""
    info = whoami(kubectl, scheduler)
    assert info["username"] == SCHEDULER_USER == scheduler.user
    assert "system:masters" not in info.get("groups", [])
    assert can_i(kubectl, scheduler, "create", "pods", "--subresource=binding")
    assert not can_i(kubectl, scheduler, "create", "pods")
    assert not can_i(kubectl, scheduler, "create", "clusterrolebindings")


def test_the_fake_nodes_are_ready_and_kwok_renews_their_leases(
    control_plane: ControlPlane, kwok: Kwok
) -> None:
    nodes = kwok.nodes()
    assert len(nodes) == NODES
    for node in nodes:
        name = node["metadata"]["name"]
        assert node["metadata"]["annotations"][NODE_ANNOTATION[0]] == NODE_ANNOTATION[1]
        assert not node["spec"].get("taints"), node["spec"]
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", node["status"]["conditions"]
        # Written by the build's kwok (its release ldflags: consts.Version).
        assert node["status"]["nodeInfo"]["kubeletVersion"] == f"kwok-{VERSION}"
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        lease = get(control_plane, f"{leases}/{name}")
        assert lease is not None, f"no Lease for {name}"
        # Held and renewed by kwok (its process's identity), as a kubelet holds its own.
        assert lease["spec"].get("holderIdentity") and lease["spec"].get("renewTime"), lease
    # What a start that timed out prints about the Nodes, on Nodes that are fine.
    state = kwok.nodes_state().split("; ")
    assert len(state) == NODES
    assert all("Ready=True" in line and "taints=[]" in line for line in state), state


def test_a_deployments_pods_run_on_fake_nodes_with_their_image_digests(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator, kwok: Kwok
) -> None:
    """kube-controller-manager makes the Pods, kube-scheduler binds them, kwok's Stages
    report them Running and Ready with an imageID per container (init ones too), and
    the annotator's document lists every Pod's digests."""
    images = {"init": "registry.example/kwok/setup:1", "main": "registry.example/kwok/app:2",
              "sidecar": "registry.example:5000/kwok/proxy:3"}  # fmt: skip
    pods_of = template({"app": "web"}, images["main"])
    pods_of["spec"]["initContainers"] = [{"name": "init", "image": images["init"]}]
    pods_of["spec"]["containers"].append({"name": "sidecar", "image": images["sidecar"]})
    apply(kubectl, workload("Deployment", ns, "web", replicas=3, template=pods_of))
    node_names = {n["metadata"]["name"] for n in kwok.nodes()}

    def running() -> list[Obj] | None:
        found = items(control_plane, f"/api/v1/namespaces/{ns}/pods?labelSelector=app%3Dweb")
        ok = len(found) == 3 and all(
            p["status"].get("phase") == "Running"
            and {"PodScheduled", "Initialized", "ContainersReady", "Ready"}
            <= {c["type"] for c in p["status"].get("conditions", []) if c["status"] == "True"}
            for p in found
        )
        return found if ok else None

    pods = wait_for("3 Pods Running and Ready on the fake Nodes", running, TIMEOUT, 0.5)
    for pod in pods:
        name, status = pod["metadata"]["name"], pod["status"]
        assert pod["spec"]["nodeName"] in node_names, pod["spec"].get("nodeName")
        assert status["podIP"].startswith("10.244."), status.get("podIP")
        reported = {
            s["name"]: s["imageID"]
            for key in ("initContainerStatuses", "containerStatuses")
            for s in status[key]
        }
        assert reported == {c: image_id(image, name) for c, image in images.items()}, name
        assert status["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
        assert all(s["ready"] and "running" in s["state"] for s in status["containerStatuses"])
        # Written by kwok (its client's field manager), not by this test.
        managers = {(f["manager"], f.get("subresource")) for f in pod["metadata"]["managedFields"]}
        assert ("kwok", "status") in managers, managers
    # One digest per image and Pod: 9 in all.
    digests = set().union(*(pod_digests(p) for p in pods))
    assert len(digests) == 9
    cm = wait_doc(control_plane, ns, "aibom-deployment-web", containing=tuple(sorted(digests)),
                  timeout=TIMEOUT)  # fmt: skip
    assert reported_pods(document(cm)) == {p["metadata"]["name"] for p in pods}
    assert set(docs(control_plane, ns)) == {"aibom-deployment-web"}


def test_a_jobs_pod_completes_and_keeps_its_image_digest(
    control_plane: ControlPlane, kubectl: Kubectl, namespace: str, kwok: Kwok
) -> None:
    """kwok's ``pod-complete`` Stage (a Job's Pod once Running) ends it Succeeded; its
    container status keeps the imageID (our addition covers that Stage too), and the
    Job controller completes the Job."""
    image = "registry.example/kwok/batch:1"
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "once", "namespace": namespace},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
                                       "containers": [{"name": "main", "image": image}]}}},
    }  # fmt: skip
    apply(kubectl, job)

    def complete() -> Obj | None:
        found = get(control_plane, f"/apis/batch/v1/namespaces/{namespace}/jobs/once") or {}
        done = any(
            c["type"] == "Complete" and c["status"] == "True"
            for c in found.get("status", {}).get("conditions", [])
        )
        return found if done else None

    wait_for("the Job Complete", complete, TIMEOUT, 0.5)
    (pod,) = items(
        control_plane, f"/api/v1/namespaces/{namespace}/pods?labelSelector=job-name%3Donce"
    )
    assert pod["status"]["phase"] == "Succeeded"
    (status,) = pod["status"]["containerStatuses"]
    assert status["state"]["terminated"]["reason"] == "Completed"
    assert status["imageID"] == image_id(image, pod["metadata"]["name"])
