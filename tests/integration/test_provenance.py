"""Ownership provenance on the real control plane, with real identities.

The namespace is UNGUARDED: opted in for the webhook and the annotator, but
labelled `aibom.dev/provenance-guard=disabled` (and this branch installs no
ValidatingAdmissionPolicyBinding), so the webhook's SubjectAccessReview and its
edge-proof are the only proof an edge has. Identities are ServiceAccounts with
their own tokens (TokenRequest), bound by RBAC:

- `tenant` may only create and read Pods: it forges controller references to a
  DynamoGraphDeployment (a CRD root), a Deployment, a ReplicaSet and a Pod made
  by the StatefulSet controller (an untracked intermediate whose parent is
  tracked), and copies a legitimate Pod's stamp and edge-proof;
- `operator` may create Pods and `update` dynamographdeployments/finalizers,
  the permission a controller-runtime operator holds.

Everything else is made by kube-controller-manager (which runs with
--use-service-account-credentials: each controller is its own ServiceAccount)
or the admin. The webhook and the annotator are the real processes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from aibom_core.objects import Obj, controller_ref, ref_of
from aibom_core.provenance import ProofTrust, parse_key
from aibom_core.stamp import Keys
from tests.controlplane import ControlPlane, Kubectl, bind_rules
from tests.integration import support
from tests.integration.kubelet import set_digest
from tests.integration.support import (
    LABEL_KEY,
    Annotator,
    StartWebhook,
    Webhook,
    cronjob,
    deployment,
    digest,
    docs,
    document,
    grant_annotator,
    grant_lease,
    kubectl_apply,
    kubectl_get,
    stamp,
    template,
    token_kubeconfig,
    wait_for,
    wait_registered,
    workload,
)

pytestmark = pytest.mark.integration

PROOF = "aibom.dev/edge-proof"
RS_PROOF = "aibom.dev/replicaset-edge-proof"
UNGUARDED = "aibom.dev/provenance-guard=disabled"


TENANT_RULES = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get"]}]


def service_account_kubeconfig(
    cp: ControlPlane, kubectl: Kubectl, ns: str, name: str, *, rules: list[Obj], workdir: Path
) -> Path:
    """A ServiceAccount bound to exactly `rules` in `ns`, and a kubeconfig with its own
    token (TokenRequest): the identity the API server puts in userInfo."""
    kubectl("create", "serviceaccount", "-n", ns, name)
    bind_rules(kubectl, f"system:serviceaccount:{ns}:{name}", f"{name}-rules", rules, namespace=ns)
    resp = cp.request(
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    assert resp.status == 201, resp.body
    token = resp.json()["status"]["token"]
    return token_kubeconfig(cp, workdir / f"{name}.kubeconfig", name, token, namespace=ns)


def pod(ns: str, name: str, image: str, owner: Obj | None, **annotations: str) -> Obj:
    made = support.pod(ns, name, owner, image)
    if annotations:
        made["metadata"]["annotations"] = annotations
    return made


def labels_pod(kubectl: Kubectl, ns: str, selector: str) -> Obj:
    items: list[Obj] = wait_for(
        f"a Pod {selector}",
        lambda: kubectl_get(kubectl, ns, "pods", "-l", selector)["items"],
        timeout=150,
    )
    return items[0]


def all_docs_text(cp: ControlPlane, ns: str) -> dict[str, str]:
    return {name: json.dumps(document(cm)) for name, cm in docs(cp, ns).items()}


def component_props(cm: Obj) -> dict[str, str]:
    comp = document(cm)["metadata"]["component"]
    return {p["name"]: p["value"] for p in comp.get("properties", [])}


def unproven_listed(cm: Obj) -> list[str]:
    props = component_props(cm)
    return [v for k, v in sorted(props.items()) if k.startswith("aibom.rollup.unproven.")]


@pytest.fixture(scope="module")
def webhook(start_webhook: StartWebhook) -> Webhook:
    return start_webhook(
        user="aibom-webhook-prov",
        name="aibom-rollup-provenance-test",
        selector={"aibom-provenance-test": "true"},
        args=("--owner-cache-ttl", "1"),
    )


@pytest.fixture
def ns(webhook: Webhook, kubectl: Kubectl, namespace: str) -> str:
    kubectl(
        "label",
        "namespace",
        namespace,
        "aibom-provenance-test=true",
        "aibom.dev/enabled=true",
        UNGUARDED,
        f"{LABEL_KEY}={namespace}",
    )
    wait_registered(kubectl, namespace)
    return namespace


@pytest.fixture
def annotator(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, webhook: Webhook, tmp_path: Path
) -> Iterator[Annotator]:
    kubeconfig = grant_annotator(control_plane, kubectl, "aibom-annotator-prov")
    grant_lease(kubectl, ns, "aibom-annotator-prov", "aibom-test")
    a = Annotator(
        kubeconfig,
        tmp_path,
        ns,
        args=("--provenance-key", str(webhook.dir / "provenance.key")),
    ).start()
    a.wait_ready().wait_leading()
    try:
        yield a
    finally:
        assert a.stop() == 0, a.tail()


@dataclass
class Env:
    cp: ControlPlane
    kubectl: Kubectl
    ns: str
    webhook: Webhook
    annotator: Annotator
    tmp_path: Path


@pytest.fixture
def env(
    control_plane: ControlPlane,
    kubectl: Kubectl,
    ns: str,
    webhook: Webhook,
    annotator: Annotator,
) -> Env:
    """Everything a test here needs; the annotator is running (and leading)."""
    return Env(control_plane, kubectl, ns, webhook, annotator, annotator.workdir)


def test_forged_controller_references_are_unproven_and_absorbed_nowhere(env: Env) -> None:
    cp, kubectl, ns, webhook, annotator = env.cp, env.kubectl, env.ns, env.webhook, env.annotator
    tmp_path = env.tmp_path
    tenant = service_account_kubeconfig(
        cp, kubectl, ns, "tenant", rules=TENANT_RULES, workdir=tmp_path
    )
    operator = service_account_kubeconfig(
        cp,
        kubectl,
        ns,
        "operator",
        rules=[
            *TENANT_RULES,
            {
                "apiGroups": ["nvidia.com"],
                "resources": ["dynamographdeployments/finalizers"],
                "verbs": ["update"],
            },
        ],
        workdir=tmp_path,
    )
    # -- legitimate objects (admin, kube-controller-manager, the operator) --
    graph = kubectl_apply(
        kubectl,
        {
            "apiVersion": "nvidia.com/v1alpha1",
            "kind": "DynamoGraphDeployment",
            "metadata": {"name": "graph", "namespace": ns},
            "spec": {"services": {"worker": {"replicas": 1}}},
        },
    )
    kubectl_apply(
        kubectl,
        deployment(ns, "web", image="registry.example/web:1"),
    )
    kubectl_apply(
        kubectl,
        workload(
            "StatefulSet",
            ns,
            "db",
            replicas=1,
            template=template({"app": "db"}, "registry.example/db:1"),
            serviceName="db",
        ),
    )
    kubectl_apply(
        kubectl,
        cronjob(
            ns, "tick", "registry.example/tick:1", schedule="* * * * *", labels={"app": "tick"}
        ),
    )
    op_pod = kubectl_apply(
        kubectl,
        pod(ns, "op-worker", "registry.example/operator-worker:1", graph),
        kubeconfig=operator,
    )
    web_pod = labels_pod(kubectl, ns, "app=web")
    rs = kubectl_get(kubectl, ns, "replicasets", "-l", "app=web")["items"][0]
    dep = kubectl_get(kubectl, ns, "deployment/web")
    db_pod = labels_pod(kubectl, ns, "app=db")
    tick_pod = labels_pod(kubectl, ns, "app=tick")  # the cronjob controller's Job's Pod

    # -- non-regression: what the controllers and the operator made rolls up as before --
    assert stamp(op_pod)["aibom.dev/rollup"] == "rolled-up"
    assert stamp(op_pod)["aibom.dev/root"] == "DynamoGraphDeployment/graph"
    assert PROOF in op_pod["metadata"]["annotations"]
    for p, root in (
        (web_pod, "Deployment/web"),
        (db_pod, "StatefulSet/db"),
        (tick_pod, "CronJob/tick"),
    ):
        s = stamp(p)
        assert (s["aibom.dev/rollup"], s["aibom.dev/root"]) == ("rolled-up", root), p["metadata"]
        assert PROOF in p["metadata"]["annotations"], p["metadata"]["name"]
    # The ReplicaSet's own proof sits beside the Deployment's stamp it mirrors.
    assert RS_PROOF in rs["metadata"]["annotations"]
    assert stamp(rs)["aibom.dev/root"] == "Deployment/web"

    # -- the tenant forges controller references (no blockOwnerDeletion: admitted) --
    forged_owners = {"crd": graph, "deployment": dep, "replicaset": rs, "intermediate": db_pod}
    forged = {}
    for what, owner in forged_owners.items():
        forged[what] = kubectl_apply(
            kubectl, pod(ns, f"forged-{what}", f"evil.example/{what}:1", owner), kubeconfig=tenant
        )
    copied = dict(web_pod["metadata"]["annotations"])
    forged["copy"] = kubectl_apply(
        kubectl, pod(ns, "forged-copy", "evil.example/copy:1", rs, **copied), kubeconfig=tenant
    )
    hops = {
        "crd": "nvidia.com/DynamoGraphDeployment/graph",
        "deployment": "apps/Deployment/web",
        "replicaset": f"apps/ReplicaSet/{rs['metadata']['name']}",
        "intermediate": f"core/Pod/{db_pod['metadata']['name']}",
        "copy": f"apps/ReplicaSet/{rs['metadata']['name']}",
    }
    for what, obj in forged.items():
        assert stamp(obj) == {
            "aibom.dev/rollup": "unproven",
            "aibom.dev/rollup-reason": f"Unproven {hops[what]}",
        }, what
        assert PROOF not in obj["metadata"]["annotations"], what  # a copied proof is removed
    assert webhook.metric("aibom_webhook_provenance_checks_total", {"result": "denied"}) >= 5
    assert webhook.metric("aibom_webhook_provenance_checks_total", {"result": "allowed"}) >= 5

    # -- the annotator: no forged image in any document; the forgeries are listed --
    for p in (web_pod, op_pod, db_pod, tick_pod):
        set_digest(
            cp,
            ns,
            p["metadata"]["name"],
            p["spec"]["containers"][0]["image"],
            digest(p["metadata"]["name"]),
        )
    for what, obj in forged.items():
        set_digest(cp, ns, obj["metadata"]["name"], f"evil.example/{what}:1", digest(what))

    def attached() -> set[str]:
        """Forged Pods still carrying their controller reference. (The ReplicaSet
        controller releases a Pod its selector does not match: Kubernetes' own
        answer to a forgery against it; the webhook stamped it unproven first.)"""
        out = set()
        for obj in forged.values():
            now = kubectl_get(kubectl, ns, f"pod/{obj['metadata']['name']}")
            if any(r.get("controller") for r in now["metadata"].get("ownerReferences") or []):
                out.add(f"Pod/{obj['metadata']['name']}")
        return out

    def settled() -> dict[str, Obj] | None:
        found = docs(cp, ns)
        web, g = found.get("aibom-deployment-web"), found.get("aibom-dynamographdeployment-graph")
        db = found.get("aibom-statefulset-db")
        if web is None or g is None or db is None:
            return None
        if digest(web_pod["metadata"]["name"]) not in json.dumps(document(web)):
            return None
        if digest(op_pod["metadata"]["name"]) not in json.dumps(document(g)):
            return None
        if digest(db_pod["metadata"]["name"]) not in json.dumps(document(db)):
            return None
        listed = {*unproven_listed(web), *unproven_listed(g), *unproven_listed(db)}
        return found if listed == attached() else None

    found = wait_for("the documents with the unproven members", settled, timeout=90)
    for name, text in all_docs_text(cp, ns).items():
        assert "evil.example" not in text, name
        for what in forged:
            assert digest(what) not in text, (name, what)
    # The Deployment and the graph run no Pods themselves and the Pod db-0
    # manages nothing: those forgeries keep their reference, and are listed.
    assert "Pod/forged-deployment" in unproven_listed(found["aibom-deployment-web"])
    assert unproven_listed(found["aibom-dynamographdeployment-graph"]) == ["Pod/forged-crd"]
    assert unproven_listed(found["aibom-statefulset-db"]) == ["Pod/forged-intermediate"]
    assert component_props(found["aibom-deployment-web"])["aibom.provenance.guarded"] == "false"
    wait_for(
        "the unproven-edges gauge",
        lambda: annotator.metric("aibom_annotator_unproven_edges", {"namespace": ns}) >= 3,
    )
    assert annotator.metric("aibom_annotator_guard_disabled_namespaces") >= 1
    # Stamp repair agrees with the webhook: no forgery is ever rolled up.
    for what, obj in forged.items():
        now = stamp(kubectl_get(kubectl, ns, f"pod/{obj['metadata']['name']}"))
        assert now["aibom.dev/rollup"] in ("unproven", "uncovered"), (what, now)
        assert "aibom.dev/root" not in now, (what, now)


def test_webhook_down_forged_pod_is_listed_unproven_not_absorbed(env: Env) -> None:
    cp, kubectl, ns, webhook = env.cp, env.kubectl, env.ns, env.webhook
    tmp_path = env.tmp_path
    tenant = service_account_kubeconfig(
        cp, kubectl, ns, "tenant", rules=TENANT_RULES, workdir=tmp_path
    )
    kubectl_apply(
        kubectl,
        deployment(ns, "web", image="registry.example/web:1"),
    )
    web_pod = labels_pod(kubectl, ns, "app=web")
    dep = kubectl_get(kubectl, ns, "deployment/web")
    assert webhook.stop() == 0
    try:
        # failurePolicy Ignore: admitted as written, copied stamp and proof included.
        copied = dict(web_pod["metadata"]["annotations"])
        forged = kubectl_apply(
            kubectl, pod(ns, "forged-down", "evil.example/down:1", dep, **copied), kubeconfig=tenant
        )
        assert stamp(forged)["aibom.dev/rollup"] == "rolled-up"  # the copy, unchecked
        set_digest(cp, ns, "forged-down", "evil.example/down:1", digest("down"))

        def listed() -> Obj | None:
            cm = docs(cp, ns).get("aibom-deployment-web")
            return cm if cm is not None and "Pod/forged-down" in unproven_listed(cm) else None

        cm = wait_for("the forged Pod listed as unproven", listed, timeout=90)
        assert "evil.example" not in json.dumps(document(cm))
        assert digest("down") not in json.dumps(document(cm))

        # Stamp repair never keeps (or makes) a `rolled-up` verdict without proof.
        def repaired() -> bool:
            return (
                stamp(kubectl_get(kubectl, ns, "pod/forged-down")).get("aibom.dev/rollup")
                == "unproven"
            )

        wait_for("the copied stamp repaired to unproven", repaired, timeout=60)
        # The legitimate Pod, with its proof, still rolls up.
        assert "Pod/" + web_pod["metadata"]["name"] not in unproven_listed(cm)
    finally:
        webhook.start()


def test_a_tenant_edit_of_a_proof_is_undone_at_admission(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, webhook: Webhook, tmp_path: Path
) -> None:
    """docs/webhook.md: the matchConditions send UPDATEs that change either proof
    key, so a user's edit of a proof is undone at once: the object the API server
    stores after a tenant's `kubectl annotate` (a forged value, then the key
    removed) carries the original proof, which verifies. No annotator runs: the
    webhook alone answers."""
    tenant = service_account_kubeconfig(
        control_plane,
        kubectl,
        ns,
        "tenant",
        rules=[
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "patch"]},
            {"apiGroups": ["apps"], "resources": ["replicasets"], "verbs": ["get", "patch"]},
        ],
        workdir=tmp_path,
    )
    kubectl_apply(kubectl, deployment(ns, "web", image="registry.example/web:1"))
    web_pod = labels_pod(kubectl, ns, "app=web")
    rs = kubectl_get(kubectl, ns, "replicasets", "-l", "app=web")["items"][0]
    key = parse_key((webhook.dir / "provenance.key").read_bytes())
    trust = ProofTrust(key=key, keys=Keys())

    def proven(obj: Obj) -> bool:
        owner = controller_ref(obj)
        return owner is not None and trust.proven(obj, ref_of(obj), owner)

    for what, proof_key, obj in (
        (f"pod/{web_pod['metadata']['name']}", PROOF, web_pod),
        (f"replicaset/{rs['metadata']['name']}", RS_PROOF, rs),
    ):
        original = obj["metadata"]["annotations"][proof_key]
        assert proven(obj), what
        for edit in (f"{proof_key}=v1:forged", f"{proof_key}-"):
            out = kubectl(
                "annotate", "-n", ns, what, edit, "--overwrite", "-o", "json", kubeconfig=tenant
            )
            stored = json.loads(out.stdout)  # what the API server stored after admission
            assert stored["metadata"]["annotations"].get(proof_key) == original, (what, edit)
            now = kubectl_get(kubectl, ns, what)
            assert now["metadata"]["annotations"].get(proof_key) == original, (what, edit)
            assert proven(now), (what, edit)
    # A proof written onto an unproven object (the tenant's own forged controller
    # reference to the Deployment, which manages no Pods and so never releases
    # it) is removed: the webhook writes no proof the edge does not have.
    dep = kubectl_get(kubectl, ns, "deployment/web")
    forged = kubectl_apply(kubectl, pod(ns, "forged", "evil.example/x:1", dep), kubeconfig=tenant)
    assert stamp(forged)["aibom.dev/rollup"] == "unproven"
    assert PROOF not in forged["metadata"]["annotations"]
    copied = web_pod["metadata"]["annotations"][PROOF]
    out = kubectl(
        "annotate", "-n", ns, "pod/forged", f"{PROOF}={copied}", "-o", "json", kubeconfig=tenant
    )
    stored = json.loads(out.stdout)
    assert PROOF not in stored["metadata"]["annotations"]
    assert stamp(stored)["aibom.dev/rollup"] == "unproven"
