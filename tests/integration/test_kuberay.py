"""The real KubeRay operator in the loop (github.com/ray-project/kuberay/ray-operator v1.5.0).

Nothing of the chains is played: the operator (built by
tests/controlplane/components/kuberay.py from the Go module proxy, running as
its ServiceAccount ``default/kuberay-operator`` with its release's ClusterRole
``kuberay-operator``; its release registers no webhooks) turns KubeRay's own
samples, ``config/samples/ray-service.sample.yaml`` and
``ray-job.sample.yaml`` of the same module, into RayClusters, Pods and the
RayJob's submitter Job; kube-controller-manager makes the submitter's Pod. Our
webhook and annotator (shipped ClusterRoles) stamp and document the chains in a
guarded and an unguarded namespace (tests/integration/chains.py), and a
Pod-only tenant cannot forge its way into them. kube-scheduler binds the Pods
to kwok's fake Nodes and kwok's Stages report them Running and Ready with their
digests (tests/controlplane/components/kwok.py; the submitter's Pod, a Job's,
then Succeeded): the RayJob's operator waits for its RayCluster's ``ready``
state, which KubeRay derives from those statuses, before it makes the submitter
Job.

The real shapes, read from ``controllers/ray`` (``rayservice_controller.go``
``constructRayClusterForRayService``, ``rayjob_controller.go``
``constructRayClusterForRayJob`` and ``createNewK8sJob``,
``raycluster_controller.go`` ``createHeadPod``/``createWorkerPod``, every one
``SetControllerReference``: controller and blockOwnerDeletion) and seen here:

- RayService ``<name>`` -> RayCluster ``<name>-<5 random>`` -> head Pod
  ``<cluster>-head-<5>`` and worker Pods ``<cluster>-<group>-worker-<5>``
  (with KubeRay's ``wait-gcs-ready`` init container);
- RayJob ``<name>`` -> RayCluster ``<name>-<5>`` -> Pods, and RayJob ->
  submitter Job ``<name>`` -> Pod (the Job controller's).

Services (the head Service, the RayJob's) are controlled by the RayCluster or
the RayJob: not workloads, not in the documents.
"""

from __future__ import annotations

import pytest

from aibom_core.objects import Obj
from tests.controlplane import Component, ControlPlane, Kubectl
from tests.controlplane.components.kuberay import NAMESPACE, SERVICE_ACCOUNT, Kuberay, sample
from tests.integration.chains import (
    Spaces,
    assert_forgery_fails,
    assert_may_control,
    assert_release_identity,
    can_i,
    controller_of,
    running,
    wait_items,
    wait_rolled_up,
)
from tests.integration.support import StartWebhook, Webhook, apply

pytestmark = [pytest.mark.integration, pytest.mark.components("kwok", "kuberay")]


@pytest.fixture(scope="module")
def kuberay(components: dict[str, Component]) -> Kuberay:
    return running(components, Kuberay)


@pytest.fixture(scope="module")
def webhook(kuberay: Kuberay, start_webhook: StartWebhook) -> Webhook:
    return start_webhook(user="aibom-webhook-kuberay", name="aibom-rollup-kuberay")


def applied(kubectl: Kubectl, name: str, ns: str) -> Obj:
    """KubeRay's sample ``name`` applied in ``ns``, as shipped; returns its Ray object."""
    out = {}
    for doc in sample(name):
        doc["metadata"]["namespace"] = ns
        out[doc["kind"]] = apply(kubectl, doc)
    return next(v for k, v in out.items() if k.startswith("Ray"))


def cluster_of(cp: ControlPlane, ns: str, owner: Obj) -> tuple[Obj, list[Obj]]:
    """The one RayCluster ``owner`` made in ``ns``, and its head and one worker Pod."""
    (cluster,) = wait_items(cp, f"/apis/ray.io/v1/namespaces/{ns}/rayclusters",
                            lambda c: len(c) == 1, f"the RayCluster of {ns}")  # fmt: skip
    name = cluster["metadata"]["name"]
    selector = f"ray.io/cluster%3D{name}"
    pods = wait_items(cp, f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}",
                      lambda p: len(p) == 2, f"the head and worker Pods of {name}")  # fmt: skip
    uid = owner["metadata"]["uid"]
    assert controller_of(cluster) == (owner["kind"], owner["metadata"]["name"], uid, True)
    assert name.startswith(f"{owner['metadata']['name']}-")
    head = [p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "head"]
    worker = [p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "worker"]
    assert len(head) == len(worker) == 1
    assert head[0]["metadata"]["name"].startswith(f"{name}-head-")
    assert worker[0]["metadata"]["name"].startswith(f"{name}-small-group-worker-")
    # KubeRay injects the worker's wait for the head's GCS (not in the sample).
    assert [c["name"] for c in worker[0]["spec"]["initContainers"]] == ["wait-gcs-ready"]
    for pod in pods:
        assert controller_of(pod) == ("RayCluster", name, cluster["metadata"]["uid"], True)
    return cluster, pods


def test_operator_runs_as_its_service_account_with_its_release_rbac(
    kubectl: Kubectl, kuberay: Kuberay
) -> None:
    assert_release_identity(
        kubectl, kuberay, service_account=f"{NAMESPACE}/{SERVICE_ACCOUNT}",
        binding="kuberay-operator", role="kuberay-operator",
    )  # fmt: skip
    # The owners of the references it sets: RayService and RayJob (RayClusters,
    # Services, the submitter Job), RayCluster (Pods, Services).
    assert_may_control(
        kubectl, kuberay, "rayservices.ray.io", "rayjobs.ray.io", "rayclusters.ray.io"
    )
    assert not can_i(kubectl, kuberay, "update", "deployments.apps", "--subresource=finalizers")


def test_a_ray_service_rolls_up_its_cluster_and_pods(
    control_plane: ControlPlane, kubectl: Kubectl, spaces: Spaces
) -> None:
    roots = {ns: applied(kubectl, "ray-service.sample.yaml", ns) for ns in spaces.both()}
    for ns, root in roots.items():
        cluster, pods = cluster_of(control_plane, ns, root)
        wait_rolled_up(
            control_plane, ns, root, tracked=[cluster], pods=pods, guarded=spaces.is_guarded(ns)
        )
        # The RayCluster selects its Pods by the ray.io/cluster label: an unlabelled
        # forged Pod keeps its reference, and would count if nothing stopped it.
        for owner in (cluster, root):
            assert_forgery_fails(spaces, ns, owner, root)


def test_a_ray_job_rolls_up_its_cluster_submitter_job_and_pods(
    control_plane: ControlPlane, kubectl: Kubectl, spaces: Spaces
) -> None:
    roots = {ns: applied(kubectl, "ray-job.sample.yaml", ns) for ns in spaces.both()}
    for ns, root in roots.items():
        name, uid = root["metadata"]["name"], root["metadata"]["uid"]
        cluster, cluster_pods = cluster_of(control_plane, ns, root)
        # Made once the RayCluster is ready (its Pods Running and Ready).
        (job,) = wait_items(control_plane, f"/apis/batch/v1/namespaces/{ns}/jobs",
                            lambda j: len(j) == 1, f"the submitter Job in {ns}")  # fmt: skip
        assert job["metadata"]["name"] == name
        assert controller_of(job) == ("RayJob", name, uid, True)
        (submitter,) = wait_items(
            control_plane, f"/api/v1/namespaces/{ns}/pods?labelSelector=job-name%3D{name}",
            lambda p: len(p) == 1, f"the submitter's Pod in {ns}",
        )  # fmt: skip
        assert controller_of(submitter)[:3] == ("Job", name, job["metadata"]["uid"])
        assert [c["name"] for c in submitter["spec"]["containers"]] == ["ray-job-submitter"]
        pods = [*cluster_pods, submitter]
        wait_rolled_up(
            control_plane,
            ns,
            root,
            tracked=[cluster, job],
            pods=pods,
            guarded=spaces.is_guarded(ns),
        )
        for owner in (cluster, root):
            assert_forgery_fails(spaces, ns, owner, root)
