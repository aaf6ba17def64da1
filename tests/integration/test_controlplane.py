"""Smoke tests proving the control plane is real: real controllers, RBAC, CRDs,
admission webhooks on loopback, and a clean stop.

There is no scheduler and no kubelet: Pods are created by the controllers and
stay Pending.
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import os
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from aibom_core.objects import Obj
from tests.controlplane import K8S_VERSION, ControlPlane, ControlPlaneError, Kubectl, shared_dir
from tests.controlplane.apiserver import GC_ENV
from tests.integration.support import crd, wait_for

pytestmark = pytest.mark.integration


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


def assert_controlled_by(obj: Obj, owner: Obj, *, block_owner_deletion: bool = True) -> None:
    """``obj`` has a controller ownerReference to ``owner``. Kubernetes' controllers
    also set blockOwnerDeletion; ``kubectl create job --from`` does not."""
    ref = controller_of(obj)
    assert ref is not None, f"{obj['metadata']['name']} has no controller ownerReference"
    assert ref["uid"] == owner["metadata"]["uid"]
    assert ref["kind"] == owner["kind"]
    assert ref["name"] == owner["metadata"]["name"]
    assert ref["apiVersion"] == owner["apiVersion"]
    if block_owner_deletion:
        assert ref.get("blockOwnerDeletion") is True


def delete(cp: ControlPlane, path: str, propagation: str) -> None:
    """DELETE `path` with this propagationPolicy (the garbage collector does the rest)."""
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation}
    resp = cp.request("DELETE", path, body)
    assert resp.status == 200, resp.body


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


def test_the_api_server_runs_with_the_test_garbage_collector(
    control_plane: ControlPlane,
) -> None:
    """tests/controlplane/apiserver.py GC_ENV reaches the running kube-apiserver,
    unless the caller set its own."""
    raw = Path(f"/proc/{control_plane.pids['kube-apiserver']}/environ").read_bytes()
    env = dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)
    for name, value in GC_ENV.items():
        assert env.get(name) == os.environ.get(name, value), name


def test_deployment_gets_replicaset_and_pods_then_gc(
    control_plane: ControlPlane, namespace: str
) -> None:
    cp, ns = control_plane, namespace
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": pod_template("web"),
        },
    }
    resp = cp.request("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", body)
    assert resp.status == 201, resp.body
    deployment = resp.json()

    rs_path = f"/apis/apps/v1/namespaces/{ns}/replicasets"
    rss = wait_for(
        "a ReplicaSet from the deployment controller",
        lambda: owned_by(items(cp, rs_path), deployment),
    )
    assert len(rss) == 1
    rs = rss[0]
    assert_controlled_by(rs, deployment)

    pods_path = f"/api/v1/namespaces/{ns}/pods"
    pods = wait_for(
        "2 Pods from the replicaset controller",
        lambda: found if len(found := owned_by(items(cp, pods_path), rs)) == 2 else None,
    )
    for pod in pods:
        assert_controlled_by(pod, rs)
        assert pod["spec"]["serviceAccountName"] == "default"

    delete(cp, f"/apis/apps/v1/namespaces/{ns}/deployments/web", "Background")
    wait_for("the garbage collector to delete the ReplicaSet", lambda: not items(cp, rs_path))
    wait_for("the garbage collector to delete the Pods", lambda: not items(cp, pods_path))


def cronjob_of(name: str, schedule: str, job: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """A CronJob whose jobTemplate is `job`'s spec, with `spec` fields added."""
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name},
        "spec": {"schedule": schedule, **spec, "jobTemplate": {"spec": job["spec"]}},
    }


def job_body(name: str) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "template": {
                **pod_template(name),
                "spec": {**pod_template(name)["spec"], "restartPolicy": "Never"},
            }
        },
    }


def test_job_gets_pods_and_foreground_delete(control_plane: ControlPlane, namespace: str) -> None:
    cp, ns = control_plane, namespace
    resp = cp.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job_body("once"))
    assert resp.status == 201, resp.body
    job = resp.json()
    pods_path = f"/api/v1/namespaces/{ns}/pods"
    pods = wait_for("a Pod from the job controller", lambda: owned_by(items(cp, pods_path), job))
    assert_controlled_by(pods[0], job)
    assert (
        pods[0]["metadata"]["labels"]["batch.kubernetes.io/controller-uid"]
        == job["metadata"]["uid"]
    )

    delete(cp, f"/apis/batch/v1/namespaces/{ns}/jobs/once", "Foreground")
    wait_for("foreground deletion of the Job and its Pods", lambda: not items(cp, pods_path))
    wait_for(
        "the Job to be gone",
        lambda: cp.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/once").status == 404,
    )


def test_job_from_cronjob_is_owned_and_gets_pods(
    control_plane: ControlPlane, namespace: str, kubectl: Kubectl
) -> None:
    """``kubectl create job --from=cronjob/x``: the Job is owned by the CronJob, and the
    job controller gives it Pods. (The scheduled path is ``test_cronjob_schedules_a_job``.)"""
    cp, ns = control_plane, namespace
    template = job_body("nightly")
    cronjob_body = cronjob_of("nightly", "0 3 * * *", template, suspend=True)
    resp = cp.request("POST", f"/apis/batch/v1/namespaces/{ns}/cronjobs", cronjob_body)
    assert resp.status == 201, resp.body
    cronjob = resp.json()

    kubectl("create", "job", "nightly-manual", "--from=cronjob/nightly", "-n", ns)
    job = get_json(cp, f"/apis/batch/v1/namespaces/{ns}/jobs/nightly-manual")
    assert_controlled_by(job, cronjob, block_owner_deletion=False)
    assert job["metadata"]["annotations"]["cronjob.kubernetes.io/instantiate"] == "manual"

    pods = wait_for(
        "a Pod from the job controller",
        lambda: owned_by(items(cp, f"/api/v1/namespaces/{ns}/pods"), job),
    )
    assert_controlled_by(pods[0], job)


def test_rbac_forbids_until_granted(
    control_plane: ControlPlane, namespace: str, kubectl: Kubectl
) -> None:
    cp, ns = control_plane, namespace
    user = f"alice-{uuid.uuid4().hex[:6]}"
    alice = cp.issue_identity(user, ["aibom-testers"])
    path = f"/api/v1/namespaces/{ns}/configmaps"

    resp = cp.request(
        "POST",
        path,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}},
    )
    assert resp.status == 201, resp.body
    one = cp.request("GET", f"{path}/c", identity=alice)
    assert one.status == 403, one.body
    assert one.json()["reason"] == "Forbidden"
    assert cp.request("GET", f"{path}/c").status == 200  # the admin (system:masters) can

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
    wait_for(
        "RBAC to allow the bound user",
        lambda: cp.request("GET", path, identity=alice).status == 200,
        15,
    )
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
    return lambda: {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": kind.lower()},
        "spec": spec,
    }


CUSTOM_RESOURCES: dict[str, Callable[[], Obj]] = {
    "LeaderWorkerSet": _example(
        "lws/examples/leaderworkerset_v1_leaderworkerset.yaml", "LeaderWorkerSet"
    ),
    "DisaggregatedSet": _example(
        "lws/examples/disaggregatedset_v1_disaggregatedset.yaml", "DisaggregatedSet"
    ),
    "PodCliqueSet": _example("grove/examples/simple1.yaml", "PodCliqueSet"),
    "PodCliqueScalingGroup": _minimal(
        "grove.io/v1alpha1", "PodCliqueScalingGroup", {"cliqueNames": ["pcb", "pcc"], "replicas": 1}
    ),
    "PodClique": _minimal(
        "grove.io/v1alpha1",
        "PodClique",
        {
            "roleName": "worker",
            "replicas": 1,
            "podSpec": {"containers": [{"name": "main", "image": "nginx:1.27"}]},
        },
    ),
    "DynamoGraphDeployment-v1beta1": _example(
        "dynamo/examples/vllm-v1beta1-agg.yaml", "DynamoGraphDeployment"
    ),
    "DynamoGraphDeployment-v1alpha1": _example(
        "dynamo/examples/vllm-v1alpha1-disagg.yaml", "DynamoGraphDeployment"
    ),
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
        {
            "predictor": {
                "model": {
                    "modelFormat": {"name": "huggingface"},
                    "storageUri": "hf://Qwen/Qwen3-0.6B",
                }
            }
        },
    ),
}


def _plural(cp: ControlPlane, api_version: str, kind: str) -> str:
    resources: list[Obj] = get_json(cp, f"/apis/{api_version}")["resources"]
    return next(str(r["name"]) for r in resources if r["kind"] == kind and "/" not in r["name"])


def _contains(sent: Any, got: Any) -> bool:
    """Everything sent is read back (the server may add defaults; it prunes nulls)."""
    if isinstance(sent, dict):
        return isinstance(got, dict) and all(
            v is None or (k in got and _contains(v, got[k])) for k, v in sent.items()
        )
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


# --------------------------------------------------------------------------- CRDs later


def test_install_crd_later_and_delete(control_plane: ControlPlane, tmp_path: Path) -> None:
    """What the annotator tests do: add a kind while running, then remove it."""
    cp = control_plane
    group = f"t{uuid.uuid4().hex[:8]}.aibom-test.example.com"
    widgets = crd(group, "Widget", "widgets")
    path = tmp_path / "widgets.yaml"
    path.write_text(yaml.safe_dump(widgets))
    assert cp.install_crd(path) == [f"widgets.{group}"]
    assert cp.crd_established(f"widgets.{group}")
    base = f"/apis/{group}/v1/namespaces/default/widgets"
    resp = cp.request(
        "POST", base, {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w"}}
    )
    assert resp.status == 201, resp.body
    assert cp.install_crd(path) == [f"widgets.{group}"]  # idempotent (server-side apply)

    cp.delete_crd(f"widgets.{group}")
    assert not cp.crd_established(f"widgets.{group}")
    assert cp.request("GET", f"{base}/w").status == 404
    cp.delete_crd(f"widgets.{group}")  # already gone: no error
    with pytest.raises(ControlPlaneError, match="not Established"):
        cp.wait_established([f"widgets.{group}"], timeout=2)


# --------------------------------------------------------------------------- admission webhook


class _Webhook(http.server.BaseHTTPRequestHandler):
    """A mutating webhook that annotates every object it is sent."""

    calls: list[Obj]

    def do_POST(self) -> None:
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.calls.append(review)
        request = review["request"]
        patch = [{"op": "add", "path": "/metadata/annotations", "value": {"seen-by": "test-hook"}}]
        if request["object"]["metadata"].get("annotations"):
            patch = [{"op": "add", "path": "/metadata/annotations/seen-by", "value": "test-hook"}]
        body = json.dumps(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {
                    "uid": request["uid"],
                    "allowed": True,
                    "patchType": "JSONPatch",
                    "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
                },
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serve_webhook(cp: ControlPlane) -> Iterator[tuple[int, list[Obj]]]:
    cert = cp.issue_serving_cert("test-hook")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert.cert_file), str(cert.key_file))
    calls: list[Obj] = []
    handler = type("Hook", (_Webhook,), {"calls": calls})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], calls
    finally:
        server.shutdown()
        server.server_close()


def test_apiserver_calls_a_webhook_on_loopback(control_plane: ControlPlane, namespace: str) -> None:
    """The API server reaches ``https://127.0.0.1:PORT`` (no proxy, no egress selector)."""
    cp, ns = control_plane, namespace
    name = f"test-hook-{ns}"
    with serve_webhook(cp) as (port, calls):
        config = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": "annotate.aibom-test.example.com",
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{port}/mutate",
                        "caBundle": cp.ca_bundle,
                    },
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["configmaps"],
                        }
                    ],
                    # Only this test's namespace: other tests never see this hook.
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                    "failurePolicy": "Fail",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": 5,
                }
            ],
        }
        path = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
        resp = cp.request("POST", path, config)
        assert resp.status == 201, resp.body
        try:
            # The API server picks new webhook configurations up from a watch: retry.
            def annotated() -> Obj | None:
                n = uuid.uuid4().hex[:8]
                body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"c-{n}"}}
                created = cp.request("POST", f"/api/v1/namespaces/{ns}/configmaps", body)
                assert created.status == 201, created.body  # failurePolicy Fail: errors show
                obj: Obj = created.json()
                return obj if obj["metadata"].get("annotations", {}).get("seen-by") else None

            obj = wait_for("the webhook's patch on a new ConfigMap", annotated, 30)
            assert obj["metadata"]["annotations"]["seen-by"] == "test-hook"
            assert calls
            assert calls[-1]["request"]["userInfo"]["username"] == "aibom-admin"
        finally:
            cp.request("DELETE", f"{path}/{name}")


# --------------------------------------------------------------------------- clean stop


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_stop_leaves_no_process_and_no_port(control_plane: ControlPlane) -> None:
    """A second, independent control plane: start it, stop it, nothing is left."""
    with ControlPlane() as other:
        assert other.server != control_plane.server
        assert get_json(other, "/version")["gitVersion"] == K8S_VERSION
        pids = other.pids
        assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager"}
        assert other.ports is not None
        ports = [
            other.ports.etcd_client,
            other.ports.etcd_peer,
            other.ports.apiserver,
            other.ports.controller_manager,
        ]
        data_dir = other.data_dir
    assert not other.running
    assert not [name for name, pid in pids.items() if _exists(pid)]
    assert all(_port_free(p) for p in ports), ports
    assert data_dir is not None
    assert not data_dir.exists()


# --------------------------------------------------------------------------- CronJob schedule
#
# The cronjob controller creates a Job at the next minute boundary: up to 60 s
# away. The CronJob is created when this module starts (an autouse module
# fixture), so the wait overlaps the tests above and the test below, which
# runs last, usually finds the Job already there.

_CRONJOB_DEADLINE = 75.0


@pytest.fixture(scope="module", autouse=True)
def scheduled_cronjob(control_plane: ControlPlane) -> Iterator[tuple[str, Obj, float]]:
    cp = control_plane
    ns = f"cronjob-schedule-{uuid.uuid4().hex[:6]}"
    resp = cp.request(
        "POST",
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
    )
    assert resp.status == 201, resp.body
    wait_for(
        "the default ServiceAccount",
        lambda: cp.request("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default").ok,
    )
    body = cronjob_of(
        "every-minute", "* * * * *", job_body("every-minute"), concurrencyPolicy="Forbid"
    )
    resp = cp.request("POST", f"/apis/batch/v1/namespaces/{ns}/cronjobs", body)
    assert resp.status == 201, resp.body
    yield ns, resp.json(), time.monotonic()
    cp.request("DELETE", f"/api/v1/namespaces/{ns}")


def test_cronjob_schedules_a_job(
    control_plane: ControlPlane, scheduled_cronjob: tuple[str, Obj, float]
) -> None:
    """The cronjob controller creates the Job on schedule; the job controller its Pod."""
    cp = control_plane
    ns, cronjob, created_at = scheduled_cronjob
    remaining = max(5.0, _CRONJOB_DEADLINE - (time.monotonic() - created_at))
    jobs = wait_for(
        "the cronjob controller to create a Job (schedule: every minute)",
        lambda: owned_by(items(cp, f"/apis/batch/v1/namespaces/{ns}/jobs"), cronjob),
        remaining,
    )
    job = jobs[0]
    assert_controlled_by(job, cronjob)
    assert job["metadata"]["name"].startswith("every-minute-")
    assert "batch.kubernetes.io/cronjob-scheduled-timestamp" in job["metadata"]["annotations"]
    pods = wait_for(
        "a Pod from the job controller",
        lambda: owned_by(items(cp, f"/api/v1/namespaces/{ns}/pods"), job),
    )
    assert_controlled_by(pods[0], job)
