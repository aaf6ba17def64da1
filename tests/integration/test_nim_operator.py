"""The real NIM operator in the loop, on a Deployment, a LeaderWorkerSet and KServe.

Nothing of the chains is played: the NIM operator (built by
tests/controlplane/components/nim.py from its source tree and vendor/ with one
small patch, running as its ServiceAccount
``k8s-nim-operator-system/k8s-nim-operator-controller-manager`` with its
release's ClusterRole ``k8s-nim-operator-manager-role``) turns NVIDIA's own
samples (``config/samples/nim/serving/``) into a Deployment, a
LeaderWorkerSet or a KServe InferenceService; the real LeaderWorkerSet
controller and KServe controller manager (their components, as their own
ServiceAccounts) and kube-controller-manager make the rest. Our webhook and
annotator (shipped ClusterRoles) stamp and document the chains in a guarded
and an unguarded namespace (tests/integration/chains.py), and a Pod-only
tenant cannot forge its way into them. kube-scheduler binds the Pods to kwok's
fake Nodes and kwok's Stages write their statuses and digests
(tests/controlplane/components/kwok.py); no container runs, so a Pod's log
stays out of reach (below).

Changes to the samples, each for a reason this control plane imposes:

- storage: the multi-node and KServe samples cache the model with a NIMCache,
  which becomes Ready only after the operator reads the model manifest from a
  Pod's log (``internal/k8sutil.GetPodLogs``, through ``rest.InClusterConfig``,
  and ``pods/log`` needs a kubelet) and pulls from nvcr.io; they use
  ``storage.emptyDir`` instead, the storage of NVIDIA's
  ``standalone/no-precaching/llm-emptydir.yaml`` sample (applied as shipped);
- ``spec.replicas`` is dropped from the KServe sample: its own CRD refuses the
  sample as shipped (``spec.replicas cannot be set when spec.scale.enabled is
  true``); ``scale.hpa.minReplicas: 1`` keeps the one replica.

The real shapes, from ``internal/controller/platform/standalone`` and
``platform/kserve`` (``SetControllerReference`` on every object, so controller
and blockOwnerDeletion) and seen here:

- NIMService ``<name>`` -> Deployment ``<name>`` -> ReplicaSet -> Pod;
- NIMService -> LeaderWorkerSet ``<name>-lws`` -> leader StatefulSet
  ``<name>-lws`` -> leader Pod ``<name>-lws-0`` -> worker StatefulSet
  ``<name>-lws-0`` -> worker Pod ``<name>-lws-0-1`` (five hops);
- NIMService -> InferenceService ``<name>`` -> Deployment ``<name>-predictor``
  -> ReplicaSet -> Pod (KServe's, in Standard mode: the sample's annotation).

Besides, the NIMService controls its Service, ServiceAccount, Role and
RoleBinding (and, multi-node, its MPI ConfigMaps): not workloads.
"""

from __future__ import annotations

import pytest

from aibom_core.objects import Obj
from tests.controlplane import Component, ControlPlane, Kubectl
from tests.controlplane.components.nim import NAMESPACE, SERVICE_ACCOUNT, Nim, sample
from tests.integration.chains import (
    Spaces,
    assert_forgery_fails,
    assert_may_control,
    assert_release_identity,
    controller_of,
    running,
    wait_items,
    wait_rolled_up,
)
from tests.integration.support import StartWebhook, Webhook, apply, get

# KServe first: the NIM operator watches InferenceServices only if their CRD is
# there when it starts, and then uses KServe's own (nim requires lws).
pytestmark = [pytest.mark.integration, pytest.mark.components("kwok", "kserve", "nim")]

EMPTY_DIR = {"emptyDir": {"sizeLimit": "10Gi"}}


@pytest.fixture(scope="module")
def nim(components: dict[str, Component]) -> Nim:
    return running(components, Nim)


@pytest.fixture(scope="module")
def webhook(nim: Nim, start_webhook: StartWebhook) -> Webhook:
    return start_webhook(user="aibom-webhook-nim-op", name="aibom-rollup-nim-op")


def nimservice(name: str) -> Obj:
    """The sample's NIMService, storage on emptyDir (see the module docstring)."""
    (svc,) = [d for d in sample(name) if d["kind"] == "NIMService"]
    svc["spec"]["storage"] = EMPTY_DIR
    if svc["spec"].get("scale", {}).get("enabled"):
        del svc["spec"]["replicas"]
    return svc


def applied(kubectl: Kubectl, ns: str, svc: Obj) -> Obj:
    """``svc`` applied in ``ns``, with the Secrets NVIDIA's samples expect there."""
    kubectl("create", "secret", "generic", "ngc-api-secret", "--from-literal=NGC_API_KEY=x",
            "-n", ns)  # fmt: skip
    kubectl("create", "secret", "docker-registry", "ngc-secret", "--docker-server=nvcr.io",
            "--docker-username=$oauthtoken", "--docker-password=x", "-n", ns)  # fmt: skip
    return apply(kubectl, {**svc, "metadata": {**svc["metadata"], "namespace": ns}})


def one(cp: ControlPlane, path: str, what: str) -> Obj:
    (found,) = wait_items(cp, path, lambda o: len(o) == 1, what)
    return found


def test_operator_runs_as_its_service_account_with_its_release_rbac(
    kubectl: Kubectl, nim: Nim
) -> None:
    assert_release_identity(
        kubectl, nim, service_account=f"{NAMESPACE}/{SERVICE_ACCOUNT}",
        binding="k8s-nim-operator-manager-rolebinding", role="k8s-nim-operator-manager-role",
    )  # fmt: skip
    # Every owner the NIM operator sets in these chains is a NIMService.
    assert_may_control(kubectl, nim, "nimservices.apps.nvidia.com")


def test_a_nimservice_on_a_deployment(
    control_plane: ControlPlane, kubectl: Kubectl, spaces: Spaces
) -> None:
    (svc,) = sample("standalone/no-precaching/llm-emptydir.yaml")  # as shipped
    name = svc["metadata"]["name"]
    roots = {ns: applied(kubectl, ns, svc) for ns in spaces.both()}
    for ns, root in roots.items():
        apps = f"/apis/apps/v1/namespaces/{ns}"
        deploy = one(control_plane, f"{apps}/deployments", f"the NIM operator's Deployment in {ns}")
        rs = one(control_plane, f"{apps}/replicasets", f"its ReplicaSet in {ns}")
        pod = one(control_plane, f"/api/v1/namespaces/{ns}/pods", f"its Pod in {ns}")
        assert deploy["metadata"]["name"] == name
        assert controller_of(deploy) == ("NIMService", name, root["metadata"]["uid"], True)
        # Labelled for the operator's filtered cache, or it would never see it.
        assert deploy["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "k8s-nim-operator"
        assert controller_of(pod)[:2] == ("ReplicaSet", rs["metadata"]["name"])
        assert [c["image"] for c in pod["spec"]["containers"]] == [
            "nvcr.io/nim/meta/llama-3.2-1b-instruct:1.12.0"
        ]
        wait_rolled_up(
            control_plane, ns, root, tracked=[deploy], pods=[pod], guarded=spaces.is_guarded(ns)
        )
        for owner in (deploy, root):
            assert_forgery_fails(spaces, ns, owner, root)


def test_a_multi_node_nimservice_on_a_leaderworkerset(
    control_plane: ControlPlane, kubectl: Kubectl, spaces: Spaces
) -> None:
    svc = nimservice("advanced/multi-node/multi-node-nimservice.yaml")
    name = svc["metadata"]["name"]
    roots = {ns: applied(kubectl, ns, svc) for ns in spaces.both()}
    for ns, root in roots.items():
        lws_path = f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets"
        lws = one(control_plane, lws_path, f"the NIM operator's LeaderWorkerSet in {ns}")
        assert lws["metadata"]["name"] == f"{name}-lws"
        assert controller_of(lws) == ("NIMService", name, root["metadata"]["uid"], True)
        sts = {
            s["metadata"]["name"]: s
            for s in wait_items(control_plane, f"/apis/apps/v1/namespaces/{ns}/statefulsets",
                                lambda s: len(s) == 2, f"the two StatefulSets in {ns}")
        }  # fmt: skip
        pods = {
            p["metadata"]["name"]: p
            for p in wait_items(control_plane, f"/api/v1/namespaces/{ns}/pods",
                                lambda p: len(p) == 2, f"the leader and worker Pods in {ns}")
        }  # fmt: skip
        leader, worker = f"{name}-lws-0", f"{name}-lws-0-1"
        assert set(sts) == {f"{name}-lws", leader} and set(pods) == {leader, worker}
        assert controller_of(sts[f"{name}-lws"])[:2] == ("LeaderWorkerSet", f"{name}-lws")
        assert controller_of(pods[leader])[:2] == ("StatefulSet", f"{name}-lws")
        assert controller_of(sts[leader])[:3] == ("Pod", leader, pods[leader]["metadata"]["uid"])
        assert controller_of(pods[worker])[:2] == ("StatefulSet", leader)
        tracked = [lws, *sts.values()]
        wait_rolled_up(
            control_plane,
            ns,
            root,
            tracked=tracked,
            pods=list(pods.values()),
            guarded=spaces.is_guarded(ns),
        )
        # The leader Pod owns the worker StatefulSet: a Pod is an owner here.
        for owner in (pods[leader], root):
            assert_forgery_fails(spaces, ns, owner, root)


def test_a_nimservice_on_kserve(
    control_plane: ControlPlane, kubectl: Kubectl, spaces: Spaces
) -> None:
    svc = nimservice("kserve/standard/llm.yaml")
    name = svc["metadata"]["name"]
    roots = {ns: applied(kubectl, ns, svc) for ns in spaces.both()}
    for ns, root in roots.items():
        isvc_path = f"/apis/serving.kserve.io/v1beta1/namespaces/{ns}/inferenceservices"
        isvc = one(control_plane, isvc_path, f"the NIM operator's InferenceService in {ns}")
        assert isvc["metadata"]["name"] == name
        assert controller_of(isvc) == ("NIMService", name, root["metadata"]["uid"], True)
        apps = f"/apis/apps/v1/namespaces/{ns}"
        deploy = one(control_plane, f"{apps}/deployments", f"KServe's Deployment in {ns}")
        pod = one(control_plane, f"/api/v1/namespaces/{ns}/pods", f"its Pod in {ns}")
        assert deploy["metadata"]["name"] == f"{name}-predictor"
        assert controller_of(deploy)[:3] == ("InferenceService", name, isvc["metadata"]["uid"])
        assert [c["name"] for c in pod["spec"]["containers"]] == ["kserve-container"]
        wait_rolled_up(
            control_plane,
            ns,
            root,
            tracked=[isvc, deploy],
            pods=[pod],
            guarded=spaces.is_guarded(ns),
        )
        assert get(control_plane, f"{apps}/deployments/{name}") is None  # not the standalone shape
        for owner in (isvc, root):
            assert_forgery_fails(spaces, ns, owner, root)
