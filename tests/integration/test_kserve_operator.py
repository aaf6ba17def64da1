"""The real KServe controller manager in the loop (v0.20.0, Standard mode).

Nothing of the chain is played: KServe's controller (built by
tests/controlplane/components/kserve.py from upstream's module, running as its
ServiceAccount ``kserve/kserve-controller-manager`` with its release's
ClusterRole ``kserve-manager-role``, its six webhook configurations served on
loopback) turns KServe's own sample InferenceService
(``docs/samples/storage/hf/hf_isvc.yaml``, the same blob at v0.15.2, vendored in
tests/upstream/kserve/examples/ and at v0.20.0) into the predictor Deployment,
its Service and HorizontalPodAutoscaler; kube-controller-manager makes the
ReplicaSet and the Pod; KServe's own Pod webhook injects the
``storage-initializer`` init container for the ``hf://`` storageUri. Our webhook
and annotator (shipped ClusterRoles) stamp and document the chain in a guarded
and an unguarded namespace (tests/integration/chains.py), and a Pod-only tenant
cannot forge its way into it. kube-scheduler binds the Pods to kwok's fake
Nodes (a GPU node's resources: the sample asks for an ``nvidia.com/gpu``) and
kwok's Stages report them Running with their digests, init containers included
(tests/controlplane/components/kwok.py).

The real shape, read from ``pkg/controller/v1beta1/inferenceservice``
(``components/predictor.go``, ``reconcilers/deployment``) and seen here:
InferenceService -> Deployment ``<name>-predictor`` (controller-runtime's
``SetControllerReference``: controller and blockOwnerDeletion) -> ReplicaSet
-> Pod; the Service and the HPA ``<name>-predictor`` are controlled by the
InferenceService too (neither is a workload: not in the document).
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from aibom_core.objects import Obj
from tests.controlplane import REPO_ROOT, Component, ControlPlane, Kubectl
from tests.controlplane.components.kserve import NAMESPACE, SERVICE_ACCOUNT, Kserve
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
from tests.integration.support import StartWebhook, Webhook, apply, get

pytestmark = [pytest.mark.integration, pytest.mark.components("kwok", "kserve")]

API = "/apis/serving.kserve.io/v1beta1"
#: KServe's sample (the same blob, f358fbaa, at v0.15.2 and v0.20.0).
SAMPLE = REPO_ROOT / "tests" / "upstream" / "kserve" / "examples" / "hf_isvc.yaml"


def sample(ns: str) -> Obj:
    obj: Obj = yaml.safe_load(SAMPLE.read_text())
    obj["metadata"]["namespace"] = ns
    return obj


@pytest.fixture(scope="module")
def kserve(components: dict[str, Component]) -> Kserve:
    return running(components, Kserve)


@pytest.fixture(scope="module")
def webhook(kserve: Kserve, start_webhook: StartWebhook) -> Webhook:
    """Ours, started after KServe's (the fixtures' order) and stopped before it."""
    return start_webhook(user="aibom-webhook-kserve-op", name="aibom-rollup-kserve-op")


def test_controller_runs_as_its_service_account_with_its_release_rbac(
    kubectl: Kubectl, kserve: Kserve
) -> None:
    assert_release_identity(
        kubectl, kserve, service_account=f"{NAMESPACE}/{SERVICE_ACCOUNT}",
        binding="kserve-manager-rolebinding", role="kserve-manager-role",
    )  # fmt: skip
    # The owner of every reference it sets (Deployments, Services, HPAs).
    assert_may_control(kubectl, kserve, "inferenceservices.serving.kserve.io")
    assert not can_i(kubectl, kserve, "update", "nimservices.apps.nvidia.com")


def test_the_standard_mode_chain_rolls_up_to_the_inference_service(
    control_plane: ControlPlane, kubectl: Kubectl, spaces: Spaces
) -> None:
    name = "huggingface-llama2"
    roots = {}
    for ns in spaces.both():
        # The sample's ServiceAccount (its Pods are refused without it).
        kubectl("create", "serviceaccount", "hfserviceacc", "-n", ns)
        roots[ns] = apply(kubectl, sample(ns))
    for ns, root in roots.items():
        apps = f"/apis/apps/v1/namespaces/{ns}"
        (deploy,) = wait_items(control_plane, f"{apps}/deployments", lambda d: len(d) == 1,
                               f"KServe's predictor Deployment in {ns}")  # fmt: skip
        (rs,) = wait_items(control_plane, f"{apps}/replicasets", lambda r: len(r) == 1,
                           f"its ReplicaSet in {ns}")  # fmt: skip
        (pod,) = wait_items(control_plane, f"/api/v1/namespaces/{ns}/pods",
                            lambda p: len(p) == 1, f"its Pod in {ns}")  # fmt: skip
        uid = root["metadata"]["uid"]
        assert deploy["metadata"]["name"] == f"{name}-predictor"
        assert controller_of(deploy) == ("InferenceService", name, uid, True)
        assert controller_of(rs)[:2] == ("Deployment", f"{name}-predictor")
        assert controller_of(pod)[:2] == ("ReplicaSet", rs["metadata"]["name"])
        for path in (
            f"/api/v1/namespaces/{ns}/services/{name}-predictor",
            f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers/{name}-predictor",
        ):
            other = get(control_plane, path)  # not workloads: no AIBOM of their own
            assert other is not None and controller_of(other)[:3] == ("InferenceService", name, uid)
        # KServe's own Pod webhook ran: the init container is not in the sample.
        init: list[Any] = pod["spec"].get("initContainers", [])
        assert [c["name"] for c in init] == ["storage-initializer"]
        assert init[0]["image"] == "kserve/storage-initializer:v0.20.0"
        assert [c["name"] for c in pod["spec"]["containers"]] == ["kserve-container"]
        wait_rolled_up(
            control_plane, ns, root, tracked=[deploy], pods=[pod], guarded=spaces.is_guarded(ns)
        )
        # (Not the ReplicaSet: its controller releases a Pod its selector does not
        # match, Kubernetes' own answer; the Deployment and the InferenceService
        # manage no Pods, so a forged reference to them would stand.)
        for owner in (deploy, root):
            assert_forgery_fails(spaces, ns, owner, root)
