"""Smoke tests proving the control plane is real: real controllers, RBAC, CRDs."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.controlplane import K8S_VERSION, ControlPlane, Kubectl, shared_dir

pytestmark = pytest.mark.integration

Obj = dict[str, Any]


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 30.0) -> Any:
    """Poll ``probe`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


def get_json(cp: ControlPlane, path: str) -> Any:
    resp = cp.request("GET", path)
    assert resp.status == 200, (path, resp.status, resp.body[:500])
    return resp.json()


def items(cp: ControlPlane, path: str) -> list[Obj]:
    """The items of a list, each with its apiVersion and kind filled in."""
    listing = get_json(cp, path)
    kind = listing["kind"].removesuffix("List")
    for item in listing["items"]:
        item.setdefault("apiVersion", listing["apiVersion"])
        item.setdefault("kind", kind)
    return list(listing["items"])


def controller_of(obj: Obj) -> Obj | None:
    for ref in obj["metadata"].get("ownerReferences", []):
        if ref.get("controller"):
            return dict(ref)
    return None


def owned_by(objs: list[Obj], owner: Obj) -> list[Obj]:
    uid = owner["metadata"]["uid"]
    return [o for o in objs if (controller_of(o) or {}).get("uid") == uid]


def assert_controlled_by(obj: Obj, owner: Obj) -> None:
    ref = controller_of(obj)
    assert ref is not None, f"{obj['metadata']['name']} has no controller ownerReference"
    assert ref["uid"] == owner["metadata"]["uid"]
    assert ref["kind"] == owner["kind"]
    assert ref["name"] == owner["metadata"]["name"]
    assert ref["apiVersion"] == owner["apiVersion"]
    assert ref.get("blockOwnerDeletion") is True


def pod_template(name: str) -> Obj:
    return {
        "metadata": {"labels": {"app": name}},
        "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
    }


def test_version_is_the_pinned_release(control_plane: ControlPlane, kubectl: Kubectl) -> None:
    assert get_json(control_plane, "/version")["gitVersion"] == K8S_VERSION
    out = kubectl("version", "-o", "json").stdout
    versions = yaml.safe_load(out)
    assert versions["clientVersion"]["gitVersion"] == K8S_VERSION
    assert versions["serverVersion"]["gitVersion"] == K8S_VERSION


def test_deployment_gets_replicaset_and_pods_then_gc(control_plane: ControlPlane, namespace: str) -> None:
    cp, ns = control_plane, namespace
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": pod_template("web")},
    }
    resp = cp.request("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", body)
    assert resp.status == 201, resp.body
    deployment = resp.json()

    rs_path = f"/apis/apps/v1/namespaces/{ns}/replicasets"
    rss = wait_for("a ReplicaSet from the deployment controller", lambda: owned_by(items(cp, rs_path), deployment))
    assert len(rss) == 1
    rs = rss[0]
    assert_controlled_by(rs, deployment)

    pods_path = f"/api/v1/namespaces/{ns}/pods"
    pods = wait_for(
        "2 Pods from the replicaset controller",
        lambda: (found if len(found := owned_by(items(cp, pods_path), rs)) == 2 else None),
    )
    for pod in pods:
        assert_controlled_by(pod, rs)
        assert pod["spec"]["serviceAccountName"] == "default"

    resp = cp.request(
        "DELETE",
        f"/apis/apps/v1/namespaces/{ns}/deployments/web",
        {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"},
    )
    assert resp.status == 200, resp.body
    wait_for("the garbage collector to delete the ReplicaSet", lambda: not items(cp, rs_path))
    wait_for("the garbage collector to delete the Pods", lambda: not items(cp, pods_path))


def job_body(name: str) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": {**pod_template(name), "spec": {**pod_template(name)["spec"], "restartPolicy": "Never"}}},
    }


def test_job_gets_pods_and_foreground_delete(control_plane: ControlPlane, namespace: str) -> None:
    cp, ns = control_plane, namespace
    resp = cp.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job_body("once"))
    assert resp.status == 201, resp.body
    job = resp.json()
    pods_path = f"/api/v1/namespaces/{ns}/pods"
    pods = wait_for("a Pod from the job controller", lambda: owned_by(items(cp, pods_path), job))
    assert_controlled_by(pods[0], job)
    assert pods[0]["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] == job["metadata"]["uid"]

    resp = cp.request(
        "DELETE",
        f"/apis/batch/v1/namespaces/{ns}/jobs/once",
        {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Foreground"},
    )
    assert resp.status == 200, resp.body
    wait_for("foreground deletion of the Job and its Pods", lambda: not items(cp, pods_path))
    wait_for(
        "the Job to be gone",
        lambda: cp.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/once").status == 404,
    )


def test_job_from_cronjob_is_owned_and_gets_pods(
    control_plane: ControlPlane, namespace: str, kubectl: Kubectl
) -> None:
    """Like ``kubectl create job --from=cronjob/x``: fast, unlike waiting a minute for the schedule."""
    cp, ns = control_plane, namespace
    template = job_body("nightly")
    cronjob_body = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly"},
        "spec": {"schedule": "0 3 * * *", "suspend": True, "jobTemplate": {"spec": template["spec"]}},
    }
    resp = cp.request("POST", f"/apis/batch/v1/namespaces/{ns}/cronjobs", cronjob_body)
    assert resp.status == 201, resp.body
    cronjob = resp.json()

    kubectl("create", "job", "nightly-manual", "--from=cronjob/nightly", "-n", ns)
    job = get_json(cp, f"/apis/batch/v1/namespaces/{ns}/jobs/nightly-manual")
    assert_controlled_by(job, cronjob)
    assert job["metadata"]["annotations"]["cronjob.kubernetes.io/instantiate"] == "manual"

    pods = wait_for("a Pod from the job controller", lambda: owned_by(items(cp, f"/api/v1/namespaces/{ns}/pods"), job))
    assert_controlled_by(pods[0], job)


def test_rbac_forbids_until_granted(control_plane: ControlPlane, namespace: str, kubectl: Kubectl) -> None:
    cp, ns = control_plane, namespace
    user = f"alice-{uuid.uuid4().hex[:6]}"
    alice = cp.issue_identity(user, ["aibom-testers"])
    path = f"/api/v1/namespaces/{ns}/configmaps"

    denied = cp.request("GET", path, identity=alice)
    assert denied.status == 403, denied.body
    status = denied.json()
    assert status["reason"] == "Forbidden"
    assert f'User "{user}" cannot list resource "configmaps"' in status["message"]
    assert cp.request("GET", path).status == 200  # the admin (system:masters) can

    result = kubectl("get", "configmaps", "-n", ns, kubeconfig=alice.kubeconfig, check=False)
    assert result.returncode != 0
    assert "Forbidden" in result.stderr

    kubectl("create", "role", "cm-reader", "--verb=get,list", "--resource=configmaps", "-n", ns)
    kubectl("create", "rolebinding", "alice-reads", "--role=cm-reader", f"--user={user}", "-n", ns)
    wait_for("RBAC to allow the bound user", lambda: cp.request("GET", path, identity=alice).status == 200, 15)
    # Still nothing beyond what was granted:
    assert cp.request("GET", f"/api/v1/namespaces/{ns}/secrets", identity=alice).status == 403
    assert cp.request("GET", path.replace(ns, "default"), identity=alice).status == 403

    # restricted_kubeconfig is the same thing as a path for kubectl
    other = cp.restricted_kubeconfig(f"bob-{uuid.uuid4().hex[:6]}", ["aibom-testers"])
    assert kubectl("get", "configmaps", "-n", ns, kubeconfig=other, check=False).returncode != 0


def _example(rel: str, kind: str) -> Callable[[], Obj]:
    def load() -> Obj:
        path: Path = shared_dir() / rel
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        return next(d for d in docs if d["kind"] == kind)

    return load


def _minimal(api_version: str, kind: str, spec: Obj) -> Callable[[], Obj]:
    return lambda: {"apiVersion": api_version, "kind": kind, "metadata": {"name": kind.lower()}, "spec": spec}


CUSTOM_RESOURCES: dict[str, Callable[[], Obj]] = {
    "LeaderWorkerSet": _example("lws/examples/leaderworkerset_v1_leaderworkerset.yaml", "LeaderWorkerSet"),
    "DisaggregatedSet": _example("lws/examples/disaggregatedset_v1_disaggregatedset.yaml", "DisaggregatedSet"),
    "PodCliqueSet": _example("grove/examples/simple1.yaml", "PodCliqueSet"),
    "PodCliqueScalingGroup": _minimal(
        "grove.io/v1alpha1", "PodCliqueScalingGroup", {"cliqueNames": ["pcb", "pcc"], "replicas": 1}
    ),
    "PodClique": _minimal(
        "grove.io/v1alpha1",
        "PodClique",
        {"roleName": "worker", "replicas": 1, "podSpec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}},
    ),
    "DynamoGraphDeployment-v1beta1": _example("dynamo/examples/vllm-v1beta1-agg.yaml", "DynamoGraphDeployment"),
    "DynamoGraphDeployment-v1alpha1": _example("dynamo/examples/vllm-v1alpha1-disagg.yaml", "DynamoGraphDeployment"),
    "DynamoComponentDeployment": _minimal(
        "nvidia.com/v1beta1",
        "DynamoComponentDeployment",
        {"componentType": "worker", "replicas": 1, "podTemplate": pod_template("dcd")},
    ),
    "NIMCache": _example("nim-operator/examples/standalone-basic-llm.yaml", "NIMCache"),
    "NIMService": _example("nim-operator/examples/standalone-basic-llm.yaml", "NIMService"),
    "InferenceService": _minimal(
        "serving.kserve.io/v1beta1",
        "InferenceService",
        {"predictor": {"model": {"modelFormat": {"name": "huggingface"}, "storageUri": "hf://Qwen/Qwen3-0.6B"}}},
    ),
}


def _plural(cp: ControlPlane, api_version: str, kind: str) -> str:
    resources = get_json(cp, f"/apis/{api_version}")["resources"]
    return next(r["name"] for r in resources if r["kind"] == kind and "/" not in r["name"])


def _contains(sent: Any, got: Any) -> bool:
    """Everything sent is read back (the server may add defaults; it prunes nulls)."""
    if isinstance(sent, dict):
        return isinstance(got, dict) and all(v is None or (k in got and _contains(v, got[k])) for k, v in sent.items())
    if isinstance(sent, list):
        return isinstance(got, list) and len(sent) == len(got) and all(map(_contains, sent, got))
    return bool(sent == got)


@pytest.mark.parametrize("case", sorted(CUSTOM_RESOURCES))
def test_custom_resource_roundtrip(control_plane: ControlPlane, namespace: str, case: str) -> None:
    cp, ns = control_plane, namespace
    obj = CUSTOM_RESOURCES[case]()
    obj["metadata"].pop("namespace", None)
    api_version, kind = obj["apiVersion"], obj["kind"]
    plural = _plural(cp, api_version, kind)
    base = f"/apis/{api_version}/namespaces/{ns}/{plural}"
    resp = cp.request("POST", base, obj)
    assert resp.status == 201, resp.body[:2000]
    got = get_json(cp, f"{base}/{obj['metadata']['name']}")
    assert got["apiVersion"] == api_version
    assert got["kind"] == kind
    assert got["metadata"]["namespace"] == ns
    assert _contains(obj["spec"], got["spec"]), (obj["spec"], got["spec"])
    listed = items(cp, base)
    assert [o["metadata"]["name"] for o in listed] == [obj["metadata"]["name"]]
