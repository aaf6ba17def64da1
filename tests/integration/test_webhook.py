"""The webhook against the real control plane: a real process, a real API server calling it.

The webhook runs as `python -m aibom_rollup webhook` on 127.0.0.1 with a
certificate from `aibom-rollup certs --ip 127.0.0.1 --url ...`, under an
identity bound to the ClusterRole shipped in manifests/webhook/rbac.yaml, and
is registered with the MutatingWebhookConfiguration that `certs` filled in
from manifests/webhook/mutatingwebhook.yaml. Objects go in through the real
kubectl; ReplicaSets and Pods are made by the real kube-controller-manager.
"""

from __future__ import annotations

import http.client
import json
import signal
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.controlplane import REPO_ROOT, ControlPlane, Kubectl, bind_rules, child_env

pytestmark = pytest.mark.integration

Obj = dict[str, Any]
MANIFESTS = REPO_ROOT / "manifests"
KEYS = ("aibom.dev/root", "aibom.dev/root-uid", "aibom.dev/rollup", "aibom.dev/rollup-reason")


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def stamp(obj: Obj) -> dict[str, str]:
    ann = obj.get("metadata", {}).get("annotations") or {}
    return {k: v for k, v in ann.items() if k in KEYS}


def apply(kubectl: Kubectl, doc: Obj, *, kubeconfig: Path | None = None) -> Obj:
    """`kubectl apply -f - -o json`: the object as the API server stored it."""
    out = kubectl("apply", "-f", "-", "-o", "json", input=json.dumps(doc), kubeconfig=kubeconfig)
    result: Obj = json.loads(out.stdout)
    return result


def get(kubectl: Kubectl, ns: str, *what: str) -> Obj:
    result: Obj = json.loads(kubectl("get", "-n", ns, *what, "-o", "json").stdout)
    return result


def owner_ref(obj: Obj) -> Obj:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": False,
    }


def meta(ns: str, name: str, owner: Obj | None = None, **extra: Any) -> Obj:
    m: Obj = {"name": name, "namespace": ns, **extra}
    if owner is not None:
        m["ownerReferences"] = [owner_ref(owner)]
    return m


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


def deployment(ns: str, name: str, owner: Obj | None = None, replicas: int = 1) -> Obj:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(ns, name, owner),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}]},
            },
        },
    }


def bare_pod(ns: str, name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta(ns, name),
        "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}]},
    }


class Webhook:
    """One `aibom-rollup webhook` process and its MutatingWebhookConfiguration."""

    def __init__(
        self,
        cp: ControlPlane,
        workdir: Path,
        *,
        name: str,
        kubeconfig: Path,
        selector: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
    ) -> None:
        self.cp, self.name, self.kubeconfig = cp, name, kubeconfig
        self.dir = workdir / name
        self.port = free_port()
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.dir / "webhook.log"
        self.dir.mkdir(parents=True)
        self.certs()
        config = yaml.safe_load_all((self.dir / "mutatingwebhook.yaml").read_text())
        docs = [d for d in config if d]
        for doc in docs:
            doc["metadata"]["name"] = name
            for hook in doc["webhooks"]:
                if selector is not None:
                    hook["namespaceSelector"] = {"matchLabels": selector}
        self.config = docs

    def certs(self, *extra: str) -> str:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "aibom_rollup",
                "certs",
                "--out-dir",
                str(self.dir),
                "--ip",
                "127.0.0.1",
                "--url",
                f"https://127.0.0.1:{self.port}/mutate",
                *extra,
            ],
            cwd=REPO_ROOT,
            env=child_env(),
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()

    def start(self) -> None:
        log = open(self.log, "ab")  # noqa: SIM115 - the child owns it
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "aibom_rollup",
                "webhook",
                "--cert-file",
                str(self.dir / "tls.crt"),
                "--key-file",
                str(self.dir / "tls.key"),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--kubeconfig",
                str(self.kubeconfig),
                "--log-level",
                "debug",
                "--cert-check-interval",
                "0.5",
                # The edge-proof key `certs` wrote next to the certificate (issue 12).
                "--provenance-key",
                str(self.dir / "provenance.key"),
                *self.args,
            ],
            cwd=REPO_ROOT,
            env=child_env(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        wait_for(f"{self.name} /readyz", self._ready, timeout=30)

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            pytest.fail(f"webhook exited {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
        try:
            return self.request("GET", "/readyz")[0] == 200
        except OSError:
            return False

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=30)
        self.proc = None
        return code

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.dir / "ca.crt"))

    def connection(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            "127.0.0.1", self.port, timeout=10, context=self.ssl_context()
        )

    def request(
        self, method: str, path: str, body: bytes | None = None, ctype: str = "application/json"
    ) -> tuple[int, bytes]:
        conn = self.connection()
        try:
            conn.request(method, path, body=body, headers={"Content-Type": ctype})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def metric(self, name: str, labels: dict[str, str]) -> float:
        _, text = self.request("GET", "/metrics")
        want = name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
        for line in text.decode().splitlines():
            if line.startswith(want + " "):
                return float(line.split()[-1])
        return 0.0

    def register(self, kubectl: Kubectl) -> None:
        kubectl("apply", "-f", "-", input=yaml.safe_dump_all(self.config))

    def unregister(self, kubectl: Kubectl) -> None:
        kubectl("delete", "mutatingwebhookconfiguration", self.name, "--ignore-not-found")


def grant(cp: ControlPlane, kubectl: Kubectl, user: str, role: Obj) -> Path:
    """A kubeconfig for `user`, bound to `role` (a ClusterRole document) and nothing else."""
    ident = cp.issue_identity(user)
    bind_rules(kubectl, user, f"{user}-role", role["rules"])
    return ident.kubeconfig


def shipped_role() -> Obj:
    docs = yaml.safe_load_all((MANIFESTS / "webhook/rbac.yaml").read_text())
    role: Obj = next(d for d in docs if d and d["kind"] == "ClusterRole")
    return role


def enabled_namespace(kubectl: Kubectl, namespace: str, *labels: str) -> str:
    kubectl("label", "namespace", namespace, "aibom.dev/enabled=true", *labels, "--overwrite")
    return namespace


def wait_registered(kubectl: Kubectl, ns: str) -> None:
    """The API server's webhook informer is asynchronous: wait until it calls us."""

    def stamped() -> bool:
        pod = bare_pod(ns, f"probe-{uuid.uuid4().hex[:6]}")
        out = kubectl("create", "--dry-run=server", "-f", "-", "-o", "json", input=json.dumps(pod))
        return stamp(json.loads(out.stdout)).get("aibom.dev/rollup") == "uncovered"

    wait_for("the webhook configuration to take effect", stamped, timeout=30)


@pytest.fixture(scope="module")
def webhook(
    control_plane: ControlPlane, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Webhook]:
    """The webhook as shipped: its ClusterRole, its configuration (url clientConfig)."""
    kubeconfig = grant(control_plane, kubectl, "aibom-webhook", shipped_role())
    hook = Webhook(
        control_plane,
        tmp_path_factory.mktemp("webhook"),
        name="aibom-rollup-test",
        kubeconfig=kubeconfig,
        args=("--owner-cache-ttl", "1"),
    )
    hook.start()
    hook.register(kubectl)
    try:
        yield hook
    finally:
        hook.unregister(kubectl)
        if hook.proc is not None:
            hook.stop()


@pytest.fixture
def ns(webhook: Webhook, kubectl: Kubectl, namespace: str) -> str:
    enabled_namespace(kubectl, namespace)
    wait_registered(kubectl, namespace)
    return namespace


# -- the stamps ------------------------------------------------------------------------


def test_dynamo_chain_is_rolled_up_down_to_the_pods(kubectl: Kubectl, ns: str) -> None:
    graph = apply(kubectl, dgd(ns, "graph"))
    assert stamp(graph) == {
        "aibom.dev/root": "DynamoGraphDeployment/graph",
        "aibom.dev/rollup": "root",
    }
    comp = apply(kubectl, dcd(ns, "graph-worker", graph))
    rolled = {
        "aibom.dev/root": "DynamoGraphDeployment/graph",
        "aibom.dev/root-uid": graph["metadata"]["uid"],
        "aibom.dev/rollup": "rolled-up",
    }
    assert stamp(comp) == rolled
    # `kubectl apply -o yaml` shows it, as the issue asks.
    out = kubectl(
        "apply", "-f", "-", "-o", "yaml", input=json.dumps(deployment(ns, "graph-worker", comp, 2))
    ).stdout
    dep = yaml.safe_load(out)
    assert stamp(dep) == rolled
    assert "aibom.dev/root: DynamoGraphDeployment/graph" in out
    # The real kube-controller-manager makes the ReplicaSet and Pods; each carries the stamp.
    rs = wait_for(
        "the ReplicaSet",
        lambda: get(kubectl, ns, "replicasets")["items"],
    )
    assert [stamp(r) for r in rs] == [rolled]
    pods = wait_for(
        "two Pods", lambda: (p := get(kubectl, ns, "pods")["items"]) and len(p) == 2 and p
    )
    assert [stamp(p) for p in pods] == [rolled, rolled]


def test_bare_pod_is_uncovered_and_plain_deployment_is_root(
    kubectl: Kubectl, ns: str, webhook: Webhook
) -> None:
    pod = apply(kubectl, bare_pod(ns, "lonely"))
    assert stamp(pod) == {"aibom.dev/rollup": "uncovered"}
    dep = apply(kubectl, deployment(ns, "plain"))
    # On CREATE the root is the object itself, whose UID is not assigned yet.
    assert stamp(dep) == {"aibom.dev/root": "Deployment/plain", "aibom.dev/rollup": "root"}
    pods = wait_for("the Pod", lambda: get(kubectl, ns, "pods", "-l", "app=plain")["items"])
    dep = get(kubectl, ns, "deployment/plain")
    assert stamp(pods[0]) == {
        "aibom.dev/root": "Deployment/plain",
        "aibom.dev/root-uid": dep["metadata"]["uid"],
        "aibom.dev/rollup": "rolled-up",
    }
    # The deployment controller copies the Deployment's annotations onto its
    # ReplicaSet on every sync; the ReplicaSet mirrors them instead of fighting
    # (an endless UPDATE loop otherwise): same root, the Deployment's rollup.
    rs = get(kubectl, ns, "replicasets", "-l", "app=plain")["items"][0]
    assert stamp(rs) == {
        "aibom.dev/root": "Deployment/plain",
        "aibom.dev/root-uid": dep["metadata"]["uid"],
        "aibom.dev/rollup": "root",
    }
    updates = {"kind": "ReplicaSet", "operation": "UPDATE", "result": "rolled-up"}
    before = webhook.metric("aibom_webhook_admissions_total", updates)
    time.sleep(2)
    assert webhook.metric("aibom_webhook_admissions_total", updates) == before  # no loop
    # The first UPDATE of the Deployment adds its root-uid (the stamp of an
    # ownerless root is incomplete without it, so the matchCondition sends it).
    # (The deployment controller's own revision UPDATE may get there first.)
    kubectl("label", "-n", ns, "deployment/plain", "touch=1")
    touched = get(kubectl, ns, "deployment/plain")
    assert stamp(touched)["aibom.dev/root-uid"] == dep["metadata"]["uid"]


def test_recreated_owner_does_not_adopt_a_stale_child(
    kubectl: Kubectl, ns: str, webhook: Webhook
) -> None:
    old = apply(kubectl, dcd(ns, "comp"))
    # A child admitted while the old owner lives: the owner is now in the cache.
    assert stamp(apply(kubectl, deployment(ns, "first", old)))["aibom.dev/rollup"] == "rolled-up"
    kubectl("delete", "-n", ns, "dynamocomponentdeployment/comp", "--wait=true")
    new = apply(kubectl, dcd(ns, "comp"))
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    time.sleep(1.5)  # past --owner-cache-ttl 1: the deleted owner is no longer cached
    stale = apply(kubectl, deployment(ns, "stale", old))
    assert stamp(stale) == {
        "aibom.dev/root": "Deployment/stale",
        "aibom.dev/rollup": "unresolved",
        "aibom.dev/rollup-reason": "UIDMismatch nvidia.com/DynamoComponentDeployment/comp",
    }
    fresh = apply(kubectl, deployment(ns, "fresh", new))
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
    kubeconfig = grant(control_plane, kubectl, "aibom-webhook-restricted", role)
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
        graph = apply(kubectl, dgd(namespace, "g"))
        comp = apply(kubectl, dcd(namespace, "g-worker", graph))
        assert stamp(comp)["aibom.dev/rollup"] == "rolled-up"  # the graph is readable

        def forbidden() -> Obj | None:
            dep = apply(kubectl, deployment(namespace, f"w-{uuid.uuid4().hex[:4]}", comp))
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
    dep = apply(kubectl, deployment(ns, "plain", replicas=0))
    uid = dep["metadata"]["uid"]
    kubectl("label", "-n", ns, "deployment/plain", "touch=1")  # gets root-uid
    good = {
        "aibom.dev/root": "Deployment/plain",
        "aibom.dev/root-uid": uid,
        "aibom.dev/rollup": "root",
    }
    wait_for("the full root stamp", lambda: stamp(get(kubectl, ns, "deployment/plain")) == good)
    assert webhook.stop() == 0  # SIGTERM: a clean exit
    try:
        # failurePolicy Ignore: still admitted, unstamped.
        pod = apply(kubectl, bare_pod(ns, "while-down"))
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
    assert stamp(get(kubectl, ns, "deployment/plain")) == good
    kubectl("label", "-n", ns, "pod/while-down", "touch=1")
    assert stamp(get(kubectl, ns, "pod/while-down")) == {"aibom.dev/rollup": "uncovered"}
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
        apply(kubectl, deployment(ns, "covered"))
        pods = wait_for(
            "the covered Pod", lambda: get(kubectl, ns, "pods", "-l", "app=covered")["items"]
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
        (b"{" + b" " * (8 << 20) + b"}", "application/json", 413),
    ],
)
def test_http_errors_of_the_real_process(
    webhook: Webhook, body: bytes, ctype: str, status: int
) -> None:
    try:
        got, text = webhook.request("POST", "/mutate", body, ctype)
    except (ConnectionResetError, BrokenPipeError):
        assert status == 413  # the server may close before reading 8 MiB
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
    assert stamp(apply(kubectl, bare_pod(ns, "after-rotation")))["aibom.dev/rollup"] == "uncovered"
    assert webhook.metric("aibom_webhook_cert_reloads_total", {"result": "ok"}) >= 2


# -- owners of kinds the registry does not know (issue 12) -----------------------------------


def test_owner_of_an_unknown_kind_is_not_an_edge(
    kubectl: Kubectl, ns: str, webhook: Webhook
) -> None:
    """A chain through a kind outside the registry is never followed, so a forged one
    (a ConfigMap "controlled" by a graph) carries nothing into that graph's
    AIBOM: the Pod is `uncovered`, the stamp the uncovered-Pod policy refuses (it was
    `unresolved Forbidden`, which that policy lets through). The provenance guard
    checks only registry owners: docs/provenance-guard.md."""
    graph = apply(kubectl, dgd(ns, "target"))  # no controller acts on it: no other admissions
    relay = apply(
        kubectl, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(ns, "relay", graph)}
    )
    lookups = webhook.metric("aibom_webhook_owner_lookups_total", {"source": "get"})
    via = {**bare_pod(ns, "via-relay"), "metadata": meta(ns, "via-relay", relay)}
    assert stamp(apply(kubectl, via)) == {"aibom.dev/rollup": "uncovered"}
    # Not even fetched.
    assert webhook.metric("aibom_webhook_owner_lookups_total", {"source": "get"}) == lookups
