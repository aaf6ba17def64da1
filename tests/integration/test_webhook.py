"""The webhook against the real control plane: a real process, a real API server calling it.

The webhook runs as `python -m aibom_rollup webhook` on 127.0.0.1 with a
certificate from `aibom-rollup certs --ip 127.0.0.1 --url ...`, under an
identity bound to the ClusterRole shipped in manifests/webhook/rbac.yaml, and
is registered with the MutatingWebhookConfiguration that `certs` filled in
from manifests/webhook/mutatingwebhook.yaml. Objects go in through the real
kubectl; ReplicaSets and Pods are made by the real kube-controller-manager.
"""

from __future__ import annotations

import json
import socket
import time
import uuid

import pytest
import yaml

from aibom_core.objects import Obj
from tests.controlplane import ControlPlane, Kubectl
from tests.integration.support import (
    MANIFESTS,
    StartWebhook,
    Webhook,
    bare_pod,
    deployment,
    enabled_namespace,
    grant_webhook,
    kubectl_apply,
    kubectl_get,
    meta,
    shipped_role,
    stamp,
    wait_for,
    wait_registered,
)

pytestmark = pytest.mark.integration


def dgd(ns: str, name: str) -> Obj:
    return {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "DynamoGraphDeployment",
        "metadata": meta(ns, name),
        "spec": {"services": {"worker": {"replicas": 1}}},
    }


def dcd(ns: str, name: str, owner: Obj | None = None) -> Obj:
    return {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "DynamoComponentDeployment",
        "metadata": meta(ns, name, owner),
        "spec": {"serviceName": "worker"},
    }


@pytest.fixture(scope="module")
def webhook(start_webhook: StartWebhook) -> Webhook:
    """The webhook as shipped: its ClusterRole, its configuration (url clientConfig)."""
    return start_webhook(
        user="aibom-webhook", name="aibom-rollup-test", args=("--owner-cache-ttl", "1")
    )


@pytest.fixture
def ns(webhook: Webhook, kubectl: Kubectl, namespace: str) -> str:
    enabled_namespace(kubectl, namespace)
    wait_registered(kubectl, namespace)
    return namespace


# -- the stamps ------------------------------------------------------------------------


def test_dynamo_chain_is_rolled_up_down_to_the_pods(kubectl: Kubectl, ns: str) -> None:
    graph = kubectl_apply(kubectl, dgd(ns, "graph"))
    assert stamp(graph) == {
        "aibom.dev/root": "DynamoGraphDeployment/graph",
        "aibom.dev/rollup": "root",
    }
    comp = kubectl_apply(kubectl, dcd(ns, "graph-worker", graph))
    rolled = {
        "aibom.dev/root": "DynamoGraphDeployment/graph",
        "aibom.dev/root-uid": graph["metadata"]["uid"],
        "aibom.dev/rollup": "rolled-up",
    }
    assert stamp(comp) == rolled
    # `kubectl apply -o yaml` shows it, as the issue asks.
    out = kubectl(
        "apply",
        "-f",
        "-",
        "-o",
        "yaml",
        input=json.dumps(deployment(ns, "graph-worker", comp, replicas=2)),
    ).stdout
    dep = yaml.safe_load(out)
    assert stamp(dep) == rolled
    assert "aibom.dev/root: DynamoGraphDeployment/graph" in out
    # The real kube-controller-manager makes the ReplicaSet and Pods; each carries the stamp.
    rs = wait_for(
        "the ReplicaSet",
        lambda: kubectl_get(kubectl, ns, "replicasets")["items"],
    )
    assert [stamp(r) for r in rs] == [rolled]
    pods = wait_for(
        "two Pods", lambda: (p := kubectl_get(kubectl, ns, "pods")["items"]) and len(p) == 2 and p
    )
    assert [stamp(p) for p in pods] == [rolled, rolled]


def test_bare_pod_is_uncovered_and_plain_deployment_is_root(
    kubectl: Kubectl, ns: str, webhook: Webhook
) -> None:
    pod = kubectl_apply(kubectl, bare_pod(ns, "lonely"))
    assert stamp(pod) == {"aibom.dev/rollup": "uncovered"}
    dep = kubectl_apply(kubectl, deployment(ns, "plain"))
    # On CREATE the root is the object itself, whose UID is not assigned yet.
    assert stamp(dep) == {"aibom.dev/root": "Deployment/plain", "aibom.dev/rollup": "root"}
    pods = wait_for("the Pod", lambda: kubectl_get(kubectl, ns, "pods", "-l", "app=plain")["items"])
    dep = kubectl_get(kubectl, ns, "deployment/plain")
    assert stamp(pods[0]) == {
        "aibom.dev/root": "Deployment/plain",
        "aibom.dev/root-uid": dep["metadata"]["uid"],
        "aibom.dev/rollup": "rolled-up",
    }
    # The deployment controller copies the Deployment's annotations onto its
    # ReplicaSet on every sync; the ReplicaSet mirrors them instead of fighting
    # (an endless UPDATE loop otherwise): same root, the Deployment's rollup.
    rs = kubectl_get(kubectl, ns, "replicasets", "-l", "app=plain")["items"][0]
    assert stamp(rs) == {
        "aibom.dev/root": "Deployment/plain",
        "aibom.dev/root-uid": dep["metadata"]["uid"],
        "aibom.dev/rollup": "root",
    }
    # No loop. The witness that the deployment controller has synced the
    # ReplicaSet since (any fight would have gone through the webhook by then):
    # it copies a new annotation of the Deployment onto it; the UPDATE that
    # carries the copy is the controller's, after the stamp above.
    updates = {"kind": "ReplicaSet", "operation": "UPDATE"}
    flipped = {**updates, "result": "rolled-up"}
    before = webhook.metric("aibom_webhook_admissions_total", flipped)
    kubectl("annotate", "-n", ns, "deployment/plain", "aibom-test.dev/touch=1")
    synced = wait_for(
        "the deployment controller to copy the touch onto the ReplicaSet",
        lambda: next(
            (
                r
                for r in kubectl_get(kubectl, ns, "replicasets", "-l", "app=plain")["items"]
                if (r["metadata"].get("annotations") or {}).get("aibom-test.dev/touch") == "1"
            ),
            None,
        ),
    )
    assert stamp(synced) == stamp(rs)
    assert webhook.metric("aibom_webhook_admissions_total", flipped) == before
    # The first UPDATE of the Deployment adds its root-uid (the stamp of an
    # ownerless root is incomplete without it, so the matchCondition sends it).
    # (The deployment controller's own revision UPDATE may get there first.)
    kubectl("label", "-n", ns, "deployment/plain", "touch=1")
    touched = kubectl_get(kubectl, ns, "deployment/plain")
    assert stamp(touched)["aibom.dev/root-uid"] == dep["metadata"]["uid"]


def test_recreated_owner_does_not_adopt_a_stale_child(
    kubectl: Kubectl, ns: str, webhook: Webhook
) -> None:
    old = kubectl_apply(kubectl, dcd(ns, "comp"))
    # A child admitted while the old owner lives: the owner is now in the cache.
    assert (
        stamp(kubectl_apply(kubectl, deployment(ns, "first", old)))["aibom.dev/rollup"]
        == "rolled-up"
    )
    kubectl("delete", "-n", ns, "dynamocomponentdeployment/comp", "--wait=true")
    new = kubectl_apply(kubectl, dcd(ns, "comp"))
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    # Past --owner-cache-ttl 1 the deleted owner is no longer cached: a dry run of
    # the stale child says so (the real one is then applied as before).
    dropped = time.monotonic()

    def uid_checked() -> bool:
        dry = kubectl(
            "create",
            "--dry-run=server",
            "-f",
            "-",
            "-o",
            "json",
            input=json.dumps(deployment(ns, "stale", old)),
        )
        return stamp(json.loads(dry.stdout)).get("aibom.dev/rollup") == "unresolved"

    wait_for("the cached owner to expire (TTL 1 s)", uid_checked, timeout=30, every=0.1)
    assert time.monotonic() - dropped < 10, "the owner cache outlived its TTL by far"
    stale = kubectl_apply(kubectl, deployment(ns, "stale", old))
    assert stamp(stale) == {
        "aibom.dev/root": "Deployment/stale",
        "aibom.dev/rollup": "unresolved",
        "aibom.dev/rollup-reason": "UIDMismatch nvidia.com/DynamoComponentDeployment/comp",
    }
    fresh = kubectl_apply(kubectl, deployment(ns, "fresh", new))
    assert stamp(fresh)["aibom.dev/root"] == "DynamoComponentDeployment/comp"
    assert stamp(fresh)["aibom.dev/root-uid"] == new["metadata"]["uid"]
    labels = {"kind": "Deployment", "reason": "UIDMismatch"}
    assert webhook.metric("aibom_rollup_unresolved_total", labels) >= 1


def test_restricted_identity_stamps_forbidden_and_admits(
    control_plane: ControlPlane,
    kubectl: Kubectl,
    namespace: str,
    webhook: Webhook,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # The shipped role minus the DynamoComponentDeployment (an intermediate here).
    role = shipped_role()
    for rule in role["rules"]:
        if rule["apiGroups"] == ["nvidia.com"]:
            rule["resources"] = ["dynamographdeployments"]
    kubeconfig = grant_webhook(control_plane, kubectl, "aibom-webhook-restricted", role)
    label = f"restricted-{uuid.uuid4().hex[:6]}"
    hook = Webhook(
        control_plane,
        tmp_path_factory.mktemp("restricted"),
        name="aibom-rollup-restricted",
        kubeconfig=kubeconfig,
        selector={"aibom-test.dev/webhook": label},
    )
    hook.start()
    hook.register(kubectl)
    try:
        kubectl("label", "namespace", namespace, f"aibom-test.dev/webhook={label}")
        graph = kubectl_apply(kubectl, dgd(namespace, "g"))
        comp = kubectl_apply(kubectl, dcd(namespace, "g-worker", graph))
        assert stamp(comp)["aibom.dev/rollup"] == "rolled-up"  # the graph is readable

        def forbidden() -> Obj | None:
            dep = kubectl_apply(kubectl, deployment(namespace, f"w-{uuid.uuid4().hex[:4]}", comp))
            return dep if stamp(dep).get("aibom.dev/rollup") == "unresolved" else None

        dep = wait_for("a Forbidden stamp", forbidden)
        assert stamp(dep) == {
            "aibom.dev/root": f"Deployment/{dep['metadata']['name']}",
            "aibom.dev/rollup": "unresolved",
            "aibom.dev/rollup-reason": "Forbidden nvidia.com/DynamoComponentDeployment/g-worker",
        }
        assert (
            hook.metric(
                "aibom_rollup_unresolved_total", {"kind": "Deployment", "reason": "Forbidden"}
            )
            >= 1
        )
        log = hook.log.read_text()
        records = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
        infos = [r for r in records if r.get("reason") == "Forbidden" and r["level"] == "info"]
        assert len(infos) == 1, log[-3000:]  # once per (kind, reason)
    finally:
        hook.unregister(kubectl)
        assert hook.stop() == 0


def test_webhook_down_admits_and_forged_stamps_are_corrected_after(
    kubectl: Kubectl, ns: str, webhook: Webhook
) -> None:
    dep = kubectl_apply(kubectl, deployment(ns, "plain", replicas=0))
    uid = dep["metadata"]["uid"]
    kubectl("label", "-n", ns, "deployment/plain", "touch=1")  # gets root-uid
    good = {
        "aibom.dev/root": "Deployment/plain",
        "aibom.dev/root-uid": uid,
        "aibom.dev/rollup": "root",
    }
    wait_for(
        "the full root stamp", lambda: stamp(kubectl_get(kubectl, ns, "deployment/plain")) == good
    )
    assert webhook.stop() == 0  # SIGTERM: a clean exit
    try:
        # failurePolicy Ignore: still admitted, unstamped.
        pod = kubectl_apply(kubectl, bare_pod(ns, "while-down"))
        assert stamp(pod) == {}
        forged = kubectl(
            "annotate",
            "-n",
            ns,
            "deployment/plain",
            "aibom.dev/rollup=rolled-up",
            "aibom.dev/root=DynamoGraphDeployment/evil",
            "--overwrite",
            "-o",
            "json",
        )
        assert stamp(json.loads(forged.stdout))["aibom.dev/root"] == "DynamoGraphDeployment/evil"
    finally:
        webhook.start()
    wait_registered(kubectl, ns)
    # The next UPDATE, touching neither ownerReferences nor our keys, is sent
    # (the stamp is provably wrong) and corrected.
    # (`kubectl label -o json` prints its own object, not the server's: get it.)
    kubectl("label", "-n", ns, "deployment/plain", "touch=2", "--overwrite")
    assert stamp(kubectl_get(kubectl, ns, "deployment/plain")) == good
    kubectl("label", "-n", ns, "pod/while-down", "touch=1")
    assert stamp(kubectl_get(kubectl, ns, "pod/while-down")) == {"aibom.dev/rollup": "uncovered"}
    # And an UPDATE that cannot change a correct stamp is not sent at all.
    labels = {"kind": "Deployment", "operation": "UPDATE", "result": "root"}
    before = webhook.metric("aibom_webhook_admissions_total", labels)
    kubectl("label", "-n", ns, "deployment/plain", "touch=3", "--overwrite")
    assert webhook.metric("aibom_webhook_admissions_total", labels) == before


def test_policy_refuses_uncovered_pods(kubectl: Kubectl, ns: str) -> None:
    kubectl("label", "namespace", ns, "aibom.dev/require-aibom=true")
    policy = MANIFESTS / "examples/policy-uncovered-pods.yaml"
    kubectl("apply", "-f", str(policy))
    try:

        def refused() -> str | None:
            res = kubectl("apply", "-f", "-", input=json.dumps(bare_pod(ns, "bare")), check=False)
            return res.stderr if res.returncode != 0 else None

        # The policy's informer is asynchronous too; until it refuses, clean up.
        def attempt() -> str | None:
            err = refused()
            if err is None:
                kubectl("delete", "-n", ns, "pod/bare", "--wait=false")
            return err

        err = wait_for("the policy to refuse a bare Pod", attempt)
        assert "not covered by any AIBOM" in err and "aibom.dev/rollup=uncovered" in err
        # Pods the controllers make under a Deployment are covered: admitted.
        kubectl_apply(kubectl, deployment(ns, "covered"))
        pods = wait_for(
            "the covered Pod",
            lambda: kubectl_get(kubectl, ns, "pods", "-l", "app=covered")["items"],
        )
        assert stamp(pods[0])["aibom.dev/rollup"] == "rolled-up"
    finally:
        kubectl("delete", "-f", str(policy), "--ignore-not-found")


# -- the HTTP edge of the real process -----------------------------------------------------


@pytest.mark.parametrize(
    ("body", "ctype", "status"),
    [
        (b"", "application/json", 400),
        (b"nope", "application/json", 400),
        (
            b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}',
            "application/json",
            400,
        ),
        (b"{}", "text/plain", 415),
        # Over the limit (37 MiB, webhook/body.py) with no review in its first bytes.
        (b"{" + b" " * (38 << 20) + b"}", "application/json", 413),
    ],
)
def test_http_errors_of_the_real_process(
    webhook: Webhook, body: bytes, ctype: str, status: int
) -> None:
    try:
        got, text = webhook.request("POST", "/mutate", body, ctype)
    except (ConnectionResetError, BrokenPipeError):
        assert status == 413  # the server may close before reading 38 MiB
        return
    assert got == status, text


def test_rotated_certificate_is_served_without_restart(
    kubectl: Kubectl, ns: str, webhook: Webhook
) -> None:
    def serial() -> int:
        with (
            socket.create_connection(("127.0.0.1", webhook.port)) as raw,
            webhook.ssl_context().wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            der = tls.getpeercert(binary_form=True)
        assert der is not None
        from cryptography import x509

        return x509.load_der_x509_certificate(der).serial_number

    # A connection opened before the rotation keeps working after it.
    conn = webhook.connection()
    conn.request("GET", "/healthz")
    assert conn.getresponse().read() == b"ok\n"
    pid = webhook.proc.pid if webhook.proc else None
    before = serial()
    bundle = webhook.certs()  # same CA (reused), new serving certificate
    wait_for("the new certificate", lambda: serial() != before, timeout=10)
    conn.request("GET", "/healthz")
    assert conn.getresponse().read() == b"ok\n"
    conn.close()
    assert webhook.proc is not None and webhook.proc.pid == pid  # no restart
    assert bundle == webhook.config[0]["webhooks"][0]["clientConfig"]["caBundle"]
    # The API server, trusting the same caBundle, still gets stamps.
    assert (
        stamp(kubectl_apply(kubectl, bare_pod(ns, "after-rotation")))["aibom.dev/rollup"]
        == "uncovered"
    )
    assert webhook.metric("aibom_webhook_cert_reloads_total", {"result": "ok"}) >= 2


# -- owners of kinds the registry does not know (provenance) ---------------------------------


def test_owner_of_an_unknown_kind_is_not_an_edge(
    kubectl: Kubectl, ns: str, webhook: Webhook
) -> None:
    """A chain through a kind outside the registry is never followed, so a forged one
    (a ConfigMap "controlled" by a graph) carries nothing into that graph's
    AIBOM: the Pod is `uncovered`, the stamp the uncovered-Pod policy refuses (it was
    `unresolved Forbidden`, which that policy lets through). The provenance guard
    checks only registry owners: docs/provenance-guard.md."""
    graph = kubectl_apply(
        kubectl, dgd(ns, "target")
    )  # no controller acts on it: no other admissions
    relay = kubectl_apply(
        kubectl, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(ns, "relay", graph)}
    )
    lookups = webhook.metric("aibom_webhook_owner_lookups_total", {"source": "get"})
    via = {**bare_pod(ns, "via-relay"), "metadata": meta(ns, "via-relay", relay)}
    assert stamp(kubectl_apply(kubectl, via)) == {"aibom.dev/rollup": "uncovered"}
    # Not even fetched.
    assert webhook.metric("aibom_webhook_owner_lookups_total", {"source": "get"}) == lookups
