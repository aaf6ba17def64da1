"""Attacks on the roll-up's provenance, mounted on the real control plane.

Each test plays one row of the threat table in docs/provenance-guard.md: a
tenant (a client certificate bound by RBAC to exactly the rules the row names,
never the admin) tries to get its own image into another workload's AIBOM, or
to make a stamp say what is not true, or to turn the annotator against
objects that are not ours. The webhook and the annotator are the real
processes; ReplicaSets, Pods and adoption are kube-controller-manager's.

The webhook is registered for the namespaces labelled `aibom-attacks-test=true`;
the annotator serves the test's namespace (`support.LABEL_KEY`). Nothing here
installs the provenance guard except the tests about it, which remove it.
"""

from __future__ import annotations

import base64
import calendar
import contextlib
import json
import subprocess
import sys
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from aibom_core import provenance
from aibom_core.objects import Obj
from tests.controlplane import REPO_ROOT, ClientIdentity, ControlPlane, Kubectl, bind_rules
from tests.controlplane import child_env as control_plane_env
from tests.integration import support
from tests.integration.kubelet import set_digest
from tests.integration.support import (
    LABEL_KEY,
    Annotator,
    StartWebhook,
    Webhook,
    deployment,
    dgd,
    digest,
    docs,
    document,
    get,
    grant_annotator,
    grant_lease,
    kubectl_get,
    metric_sum,
    stamp,
    wait_for,
    wait_registered,
)

pytestmark = pytest.mark.integration

SELECTOR = "aibom-attacks-test"
PROOF = "aibom.dev/edge-proof"
OPT_OUT = "aibom.dev/provenance-guard"
POLICY_FILE = REPO_ROOT / "manifests" / "provenance" / "policy.yaml"
GUARD = "aibom-rollup-provenance"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


# -- identities --------------------------------------------------------------------------


def tenant(
    cp: ControlPlane, kubectl: Kubectl, ns: str, user: str, rules: list[Obj]
) -> ClientIdentity:
    """A client certificate for `user`, bound to exactly `rules` in `ns`; returned once
    RBAC (read from an informer) lets it do the first rule's first verb."""
    ident = cp.issue_identity(user)
    bind_rules(kubectl, user, f"{user}-rules", rules, namespace=ns)
    first = rules[0]
    resource, _, sub = first["resources"][0].partition("/")
    group = first["apiGroups"][0]
    what = f"{resource}.{group}" if group else resource
    can_i = ["auth", "can-i", first["verbs"][0], what, "-n", ns]
    can_i += [f"--subresource={sub}"] if sub else []
    wait_for(
        f"RBAC for {user}",
        lambda: kubectl(*can_i, kubeconfig=ident.kubeconfig, check=False).stdout.strip() == "yes",
    )
    return ident


def pods(*verbs: str) -> Obj:
    return {"apiGroups": [""], "resources": ["pods"], "verbs": list(verbs)}


def create_as(cp: ControlPlane, who: ClientIdentity, obj: Obj) -> tuple[int, Obj]:
    """POST `obj` as `who`: (HTTP status, the object as stored, or the Status)."""
    ns = obj["metadata"]["namespace"]
    group_version = obj["apiVersion"]
    base = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
    plural = {"Pod": "pods", "ReplicaSet": "replicasets", "ConfigMap": "configmaps"}[obj["kind"]]
    resp = cp.request("POST", f"{base}/namespaces/{ns}/{plural}", obj, identity=who)
    body: Obj = resp.json()
    return resp.status, body


def patch_as(
    cp: ControlPlane, who: ClientIdentity, path: str, patch: Obj, *, kind: str = "merge"
) -> tuple[int, Obj]:
    resp = cp.request(
        "PATCH", path, patch, identity=who, content_type=f"application/{kind}-patch+json"
    )
    body: Obj = resp.json()
    return resp.status, body


# -- the processes -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def webhook(start_webhook: StartWebhook) -> Webhook:
    return start_webhook(
        user="aibom-webhook-attacks",
        name="aibom-rollup-attacks-test",
        selector={SELECTOR: "true"},
        args=("--owner-cache-ttl", "1"),
    )


@pytest.fixture
def ns(webhook: Webhook, kubectl: Kubectl, namespace: str) -> str:
    """Served by the webhook and the annotator; `aibom.dev/enabled` too, the label the
    shipped guard and the webhook's own guard lookups read."""
    labels = (f"{SELECTOR}=true", f"{LABEL_KEY}={namespace}", "aibom.dev/enabled=true")
    kubectl("label", "namespace", namespace, *labels)
    wait_registered(kubectl, namespace)
    return namespace


@dataclass
class Env:
    cp: ControlPlane
    kubectl: Kubectl
    ns: str
    webhook: Webhook
    # `annotator(*args)`: the annotator for `ns` with the webhook's key, started and
    # leading (stopped by the fixture).
    annotator: Callable[..., Annotator]


@pytest.fixture
def env(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, webhook: Webhook, tmp_path: Path
) -> Iterator[Env]:
    started: list[Annotator] = []
    kubeconfig = grant_annotator(control_plane, kubectl, "aibom-annotator-attacks")
    grant_lease(kubectl, ns, "aibom-annotator-attacks", "aibom-test")

    def annotator(*args: str) -> Annotator:
        key = ("--provenance-key", str(webhook.dir / "provenance.key"))
        a = Annotator(kubeconfig, tmp_path, ns, args=(*key, *args)).start()
        started.append(a)
        return a.wait_ready().wait_leading()

    try:
        yield Env(control_plane, kubectl, ns, webhook, annotator)
    finally:
        for a in started:
            assert a.stop() == 0, a.tail()


# -- reading documents -----------------------------------------------------------------


def props(cm: Obj) -> dict[str, str]:
    comp = document(cm)["metadata"]["component"]
    return {p["name"]: p["value"] for p in comp.get("properties", [])}


def listed(cm: Obj, prefix: str) -> list[str]:
    return [v for k, v in sorted(props(cm).items()) if k.startswith(prefix)]


def doc_where(
    cp: ControlPlane, ns: str, name: str, *, what: str, check: Any, timeout: float = 90
) -> Obj:
    """Wait until document `name` exists and `check(cm)` holds; return it."""

    def probe() -> Obj | None:
        cm = docs(cp, ns).get(name)
        return cm if cm is not None and check(cm) else None

    found: Obj = wait_for(f"{name}: {what}", probe, timeout)
    return found


def pod_path(ns: str, name: str) -> str:
    return f"/api/v1/namespaces/{ns}/pods/{name}"


# -- the oversized review ------------------------------------------------------------------


def fail_opens(cp: ControlPlane, webhook: Webhook) -> float:
    """Admissions the API server let through because `webhook` did not answer."""
    text = cp.request("GET", "/metrics").body.decode()
    names = {w["name"] for doc in webhook.config if doc for w in doc.get("webhooks", [])}
    name = "apiserver_admission_webhook_fail_open_count"
    return sum(metric_sum(text, name, {"name": n, "type": "admit"}) for n in names)


PADDING = 1_350_000  # `<` characters: a 1.35 MB request, each sent on as `\u003c` (6 bytes)


def test_an_oversized_review_does_not_keep_the_tenants_stamp(env: Env) -> None:
    """A bare Pod padded with `<` so that the AdmissionReview, JSON-escaped by the API
    server, is many times the request: the webhook reads it and overwrites the
    tenant's own stamp (it used to answer 413, and failurePolicy Ignore stored the
    tenant's `rolled-up`)."""
    cp, kubectl, ns, webhook = env.cp, env.kubectl, env.ns, env.webhook
    web = support.apply(kubectl, deployment(ns, "web"))
    who = tenant(cp, kubectl, ns, "padder", [pods("create", "get")])
    forged = {
        "aibom.dev/rollup": "rolled-up",
        "aibom.dev/root": "Deployment/web",
        "aibom.dev/root-uid": web["metadata"]["uid"],
    }
    padded = support.pod(ns, "padded", None, "evil.example/padded:1")
    padded["metadata"]["annotations"] = forged
    padded["spec"]["containers"][0]["lifecycle"] = {
        "postStart": {"exec": {"command": ["<" * PADDING]}}
    }
    path = pod_path(ns, "padded")
    for _ in range(3):
        before = webhook.metric("aibom_webhook_request_body_bytes_sum")
        opened = fail_opens(cp, webhook)
        status, stored = create_as(cp, who, padded)
        assert status == 201, stored.get("message")
        if fail_opens(cp, webhook) == opened:
            break
        # The webhook did not answer within its timeoutSeconds (2 s, as shipped):
        # the API server failed open. That is the overload row of the threat table
        # (the annotator's repair), not this one: on a loaded machine, try again.
        assert cp.request("DELETE", f"{path}?gracePeriodSeconds=0").ok
        wait_for("the padded Pod gone", lambda: cp.request("GET", path).status == 404)
    else:
        pytest.fail("the API server failed open on every try: the webhook never answered")
    assert stamp(stored) == {"aibom.dev/rollup": "uncovered"}, stamp(stored)
    received = webhook.metric("aibom_webhook_request_body_bytes_sum") - before
    # The review really was the escaped, oversized one (more than 6x the padding).
    assert received > 6 * PADDING, received
    assert webhook.metric("aibom_webhook_bad_requests_total", {"status": "413"}) == 0


# -- adoption ---------------------------------------------------------------------------------


DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


def test_an_adopted_pod_that_is_not_the_template_is_listed_apart(env: Env) -> None:
    """The tenant's bare Pod carries the labels of `web`'s Pods (readable on any of
    them): the real ReplicaSet controller adopts it, with a permission it holds,
    and deletes one of `web`'s own Pods to keep its count. Its image is not the
    template's: listed apart, kept out of the document, stamped so, counted."""
    cp, kubectl, ns, webhook = env.cp, env.kubectl, env.ns, env.webhook
    annotator = env.annotator()
    support.apply(kubectl, deployment(ns, "web", replicas=3, image="registry.example/web:1"))
    (rs,) = wait_for("web's ReplicaSet", lambda: kubectl_get(kubectl, ns, "rs")["items"])
    rs_name = rs["metadata"]["name"]
    hash_ = rs["metadata"]["labels"]["pod-template-hash"]
    wait_for("3 Pods of web", lambda: len(kubectl_get(kubectl, ns, "pods")["items"]) == 3)
    who = tenant(cp, kubectl, ns, "adopter", [pods("create", "get")])
    labels = {"app": "web", "pod-template-hash": hash_}
    # A deletion cost above the real Pods' 0: the ReplicaSet deletes theirs instead.
    visitor = support.pod(ns, "visitor", None, "evil.example/visitor:1", **labels)
    twin = support.pod(ns, "twin", None, "registry.example/web:1", **labels)
    for made in (visitor, twin):
        made["metadata"]["annotations"] = {DELETION_COST: "1000"}
        status, body = create_as(cp, who, made)
        assert status == 201, body

    def adopted(name: str) -> Obj | None:
        now = get(cp, pod_path(ns, name)) or {}
        refs = now.get("metadata", {}).get("ownerReferences") or []
        return now if any(r.get("uid") == rs["metadata"]["uid"] for r in refs) else None

    visitor = wait_for("the ReplicaSet to adopt the visitor", lambda: adopted("visitor"))
    twin = wait_for("the ReplicaSet to adopt the twin", lambda: adopted("twin"))
    assert stamp(visitor) == {
        "aibom.dev/rollup": "unproven",
        "aibom.dev/rollup-reason": f"AdoptedMismatch apps/ReplicaSet/{rs_name}",
    }, stamp(visitor)
    # Adoption as such is Kubernetes' business: a Pod that is the template rolls up.
    assert stamp(twin)["aibom.dev/rollup"] == "rolled-up", stamp(twin)
    assert webhook.metric("aibom_webhook_adoptions_total", {"result": "mismatch"}) >= 1
    assert webhook.metric("aibom_webhook_adoptions_total", {"result": "matching"}) >= 1
    set_digest(cp, ns, "visitor", "evil.example/visitor:1", digest("visitor"))
    set_digest(cp, ns, "twin", "registry.example/web:1", digest("twin"))
    cm = doc_where(
        cp,
        ns,
        "aibom-deployment-web",
        what="the visitor listed apart, the twin's digest in",
        check=lambda cm: (
            listed(cm, "aibom.rollup.adopted-mismatch.") == ["Pod/visitor"]
            and digest("twin") in json.dumps(document(cm))
        ),
    )
    text = json.dumps(document(cm))
    assert "evil.example" not in text and digest("visitor") not in text
    wait_for(
        "the adopted-mismatch gauge",
        lambda: annotator.metric("aibom_annotator_adopted_mismatch", {"namespace": ns}) >= 1,
    )
    # The stamp repair agrees with the webhook: nothing flips it back.
    support.settle(cp, kubectl, ns)
    assert stamp(get(cp, pod_path(ns, "visitor")) or {})["aibom.dev/rollup"] == "unproven"


def test_a_tenants_image_change_of_a_controlled_pod_is_not_absorbed(env: Env) -> None:
    """A Pod's container image may be changed in place: the tenant (pods patch) swaps
    the image of a Pod the ReplicaSet controller made. The edge is still the
    controller's, the content is the tenant's: not absorbed."""
    cp, kubectl, ns = env.cp, env.kubectl, env.ns
    env.annotator()
    support.apply(kubectl, deployment(ns, "web", replicas=1, image="registry.example/web:1"))
    (mine,) = wait_for("web's Pod", lambda: kubectl_get(kubectl, ns, "pods")["items"])
    name = mine["metadata"]["name"]
    assert PROOF in mine["metadata"]["annotations"]
    who = tenant(cp, kubectl, ns, "swapper", [pods("patch", "get")])
    ops = [{"op": "replace", "path": "/spec/containers/0/image", "value": "evil.example/swap:1"}]
    status, body = patch_as(cp, who, pod_path(ns, name), ops, kind="json")  # type: ignore[arg-type]
    assert status == 200, body
    set_digest(cp, ns, name, "evil.example/swap:1", digest("swap"))
    cm = doc_where(
        cp,
        ns,
        "aibom-deployment-web",
        what="the swapped Pod listed as unproven",
        check=lambda cm: listed(cm, "aibom.rollup.unproven.") == [f"Pod/{name}"],
    )
    assert "evil.example" not in json.dumps(document(cm))
    wait_for(
        "the swapped Pod's stamp repaired to unproven",
        lambda: stamp(get(cp, pod_path(ns, name)) or {}).get("aibom.dev/rollup") == "unproven",
    )


# -- a proof outlives its object ------------------------------------------------------------


def test_a_proof_copied_onto_a_namesake_proves_nothing(env: Env) -> None:
    """An operator's Pod is proven; it is deleted; with the webhook down, the tenant
    creates a Pod under the same name and owner, carrying the old Pod's stamp and
    proof (it could read them while the Pod existed). The proof is bound to the
    old Pod's creation, so it does not prove the namesake."""
    cp, kubectl, ns, webhook = env.cp, env.kubectl, env.ns, env.webhook
    env.annotator()
    graph = support.apply(kubectl, dgd(ns, "graph"))
    operator = tenant(
        cp,
        kubectl,
        ns,
        "operator",
        [
            pods("create", "get", "delete"),
            {
                "apiGroups": ["nvidia.com"],
                "resources": ["dynamographdeployments/finalizers"],
                "verbs": ["update"],
            },
        ],
    )
    who = tenant(cp, kubectl, ns, "namesake", [pods("create", "get")])
    worker = support.pod(ns, "worker", graph, "registry.example/worker:1")
    status, original = create_as(cp, operator, worker)
    assert status == 201, original
    assert stamp(original)["aibom.dev/rollup"] == "rolled-up"
    copied = dict(original["metadata"]["annotations"])
    assert PROOF in copied
    created = calendar.timegm(
        time.strptime(original["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
    )
    resp = cp.request("DELETE", pod_path(ns, "worker"), identity=operator)
    assert resp.ok, resp.body
    wait_for("the operator's Pod gone", lambda: get(cp, pod_path(ns, "worker")) is None)
    # Past the window in which a proof written at a CREATE binds a Pod's creation
    # (the API server assigns creationTimestamp after the webhook answered).
    after = created + provenance.CREATED_WITHIN[1] + 2
    wait_for("the proof's creation window to pass", lambda: time.time() > after, timeout=60)
    assert webhook.stop() == 0
    try:
        forged = support.pod(ns, "worker", graph, "evil.example/namesake:1")
        forged["metadata"]["annotations"] = copied
        status, body = create_as(cp, who, forged)
        assert status == 201, body
        assert body["metadata"]["annotations"][PROOF] == copied[PROOF]  # unchecked
        set_digest(cp, ns, "worker", "evil.example/namesake:1", digest("namesake"))
        cm = doc_where(
            cp,
            ns,
            "aibom-dynamographdeployment-graph",
            what="the namesake listed as unproven",
            check=lambda cm: listed(cm, "aibom.rollup.unproven.") == ["Pod/worker"],
        )
        text = json.dumps(document(cm))
        assert "evil.example" not in text and digest("namesake") not in text
    finally:
        webhook.start()


# -- status subresources -------------------------------------------------------------------


def test_a_status_write_cannot_forge_a_stamp(env: Env) -> None:
    """pods/status writes may change a Pod's annotations (not its spec, not its
    ownerReferences): the webhook is called for them too, and overwrites our keys."""
    cp, kubectl, ns = env.cp, env.kubectl, env.ns
    who = tenant(cp, kubectl, ns, "statuser", [pods("create", "get"), _status("patch")])
    status, made = create_as(cp, who, support.pod(ns, "plain", None, "registry.example/x:1"))
    assert status == 201, made
    assert stamp(made) == {"aibom.dev/rollup": "uncovered"}
    forged = {
        "metadata": {
            "annotations": {"aibom.dev/rollup": "rolled-up", "aibom.dev/root": "Deployment/web"}
        }
    }
    status, stored = patch_as(cp, who, pod_path(ns, "plain") + "/status", forged)
    assert status == 200, stored
    assert stamp(stored) == {"aibom.dev/rollup": "uncovered"}, stamp(stored)


def _status(*verbs: str) -> Obj:
    return {"apiGroups": [""], "resources": ["pods/status"], "verbs": list(verbs)}


# -- trust in a guarded namespace is not retroactive ----------------------------------------


def guard_binding(ns: str) -> Obj:
    """The guard's binding for the annotator's opt-in label of this namespace (what
    `aibom-rollup policy --namespace-label` generates for it)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": GUARD},
        "spec": {
            "policyName": GUARD,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": LABEL_KEY, "operator": "In", "values": [ns]},
                        {"key": OPT_OUT, "operator": "NotIn", "values": ["disabled"]},
                    ]
                }
            },
        },
    }


def shipped_policy() -> Obj:
    docs_ = [d for d in yaml.safe_load_all(POLICY_FILE.read_text()) if d]
    policy: Obj = next(d for d in docs_ if d["kind"] == "ValidatingAdmissionPolicy")
    return policy


@contextlib.contextmanager
def guard_installed(kubectl: Kubectl, *documents: Obj) -> Iterator[None]:
    """The guard's policy and binding (cluster-scoped) for the test; removed after it."""
    kubectl(
        "apply",
        "--server-side",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(documents)}),
    )
    try:
        yield
    finally:
        for d in documents:
            kubectl("delete", d["kind"].lower(), d["metadata"]["name"], "--ignore-not-found")


def refused_now(cp: ControlPlane, who: ClientIdentity, ns: str, owner: Obj) -> bool:
    """Whether the guard refuses a forged controller reference in `ns` right now."""
    probe = support.pod(ns, f"probe-{uuid.uuid4().hex[:6]}", owner, "registry.example/x:1")
    resp = cp.request("POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All", probe, identity=who)
    return resp.status == 403


def forged_pod(cp: ControlPlane, who: ClientIdentity, ns: str, name: str, owner: Obj) -> Obj:
    status, made = create_as(cp, who, support.pod(ns, name, owner, f"evil.example/{name}:1"))
    assert status == 201, made
    assert stamp(made)["aibom.dev/rollup"] == "unproven", stamp(made)
    set_digest(cp, ns, name, f"evil.example/{name}:1", digest(name))
    return made


GRAPH_DOC = "aibom-dynamographdeployment-graph"


def test_installing_the_guard_does_not_prove_what_it_never_checked(env: Env) -> None:
    """Forgeries made while the namespace had no guard (a Pod, and a ReplicaSet scaled
    up only once the guard is in place) stay out of the AIBOM after it is installed."""
    cp, kubectl, ns = env.cp, env.kubectl, env.ns
    env.annotator()
    graph = support.apply(kubectl, dgd(ns, "graph"))
    rs_rules = {
        "apiGroups": ["apps"],
        "resources": ["replicasets"],
        "verbs": ["create", "get", "patch"],
    }
    who = tenant(cp, kubectl, ns, "early", [pods("create", "get"), rs_rules])
    forged_pod(cp, who, ns, "early-pod", graph)
    rs = support.workload(
        "ReplicaSet",
        ns,
        "early-rs",
        graph,
        replicas=0,
        template=support.template({"app": "early"}, "evil.example/early-rs:1"),
    )
    status, made = create_as(cp, who, rs)
    assert status == 201, made
    assert stamp(made)["aibom.dev/rollup"] == "unproven"
    doc_where(
        cp,
        ns,
        GRAPH_DOC,
        what="the forgeries listed, unguarded",
        check=lambda cm: (
            props(cm).get("aibom.provenance.guarded") == "false"
            and listed(cm, "aibom.rollup.unproven.") == ["Pod/early-pod", "ReplicaSet/early-rs"]
        ),
    )
    with guard_installed(kubectl, shipped_policy(), guard_binding(ns)):
        wait_for("the guard in effect", lambda: refused_now(cp, who, ns, graph), timeout=60)
        doc_where(
            cp,
            ns,
            GRAPH_DOC,
            what="the namespace guarded",
            check=lambda cm: props(cm).get("aibom.provenance.guarded") == "true",
        )
        # Scaling keeps the ReplicaSet's reference: the guard does not look again.
        path = f"/apis/apps/v1/namespaces/{ns}/replicasets/early-rs"
        status, body = patch_as(cp, who, path, {"spec": {"replicas": 1}})
        assert status == 200, body
        (child,) = wait_for(
            "the ReplicaSet's Pod",
            lambda: kubectl_get(kubectl, ns, "pods", "-l", "app=early")["items"],
        )
        assert stamp(child) == {
            "aibom.dev/rollup": "unproven",
            "aibom.dev/rollup-reason": "Unproven nvidia.com/DynamoGraphDeployment/graph",
        }, stamp(child)
        child_name = child["metadata"]["name"]
        set_digest(cp, ns, child_name, "evil.example/early-rs:1", digest(child_name))
        # A positive witness that the annotator has seen the child and its digest:
        # the count of unproven edges includes it.
        support.settle(cp, kubectl, ns)
        cm = docs(cp, ns)[GRAPH_DOC]
        assert props(cm)["aibom.provenance.guarded"] == "true"
        text = json.dumps(document(cm))
        assert "evil.example" not in text, listed(cm, "aibom.rollup.")
        assert listed(cm, "aibom.rollup.unproven.") == ["Pod/early-pod", "ReplicaSet/early-rs"]


def test_opting_out_and_in_again_does_not_prove_what_came_in_between(env: Env) -> None:
    """`aibom.dev/provenance-guard=disabled` (the docs' advice for a controller that lacks
    the permission), a forgery, then the label removed: the forgery stays out."""
    cp, kubectl, ns = env.cp, env.kubectl, env.ns
    env.annotator()
    graph = support.apply(kubectl, dgd(ns, "graph"))
    who = tenant(cp, kubectl, ns, "between", [pods("create", "get")])
    with guard_installed(kubectl, shipped_policy(), guard_binding(ns)):
        wait_for("the guard in effect", lambda: refused_now(cp, who, ns, graph), timeout=60)
        kubectl("label", "namespace", ns, f"{OPT_OUT}=disabled")
        wait_for("the opt-out in effect", lambda: not refused_now(cp, who, ns, graph), timeout=60)
        forged_pod(cp, who, ns, "between", graph)
        doc_where(
            cp,
            ns,
            GRAPH_DOC,
            what="the forgery listed, unguarded",
            check=lambda cm: (
                props(cm).get("aibom.provenance.guarded") == "false"
                and listed(cm, "aibom.rollup.unproven.") == ["Pod/between"]
            ),
        )
        kubectl("label", "namespace", ns, f"{OPT_OUT}-")
        wait_for("the guard back", lambda: refused_now(cp, who, ns, graph), timeout=60)
        cm = doc_where(
            cp,
            ns,
            GRAPH_DOC,
            what="the namespace guarded again",
            check=lambda cm: props(cm).get("aibom.provenance.guarded") == "true",
        )
        support.settle(cp, kubectl, ns)
        cm = docs(cp, ns)[GRAPH_DOC]
        assert "evil.example" not in json.dumps(document(cm))
        assert listed(cm, "aibom.rollup.unproven.") == ["Pod/between"]


# -- what "guarded" means -----------------------------------------------------------------


def test_the_shipped_binding_does_not_guard_a_namespace_label_it_does_not_select(env: Env) -> None:
    """The annotator's opt-in label is `support.LABEL_KEY`, the shipped binding selects
    `aibom.dev/enabled`: the namespace is not guarded, and the document must not say
    it is. `aibom-rollup policy --namespace-label` generates the binding that does."""
    cp, kubectl, ns = env.cp, env.kubectl, env.ns
    kubectl("label", "namespace", ns, "aibom.dev/enabled-")
    annotator = env.annotator()
    support.apply(kubectl, dgd(ns, "graph"))
    shipped = [d for d in yaml.safe_load_all(POLICY_FILE.read_text()) if d]
    with guard_installed(kubectl, *shipped):
        # Positive witnesses: the annotator has judged the binding (it logs it when
        # it appears), then every document it queued for that (settle).
        wait_for(
            "the annotator to read the binding",
            lambda: any(
                r.get("msg", "").startswith("provenance guard binding found")
                for r in annotator.records()
            ),
        )
        support.settle(cp, kubectl, ns)
        cm = docs(cp, ns)[GRAPH_DOC]
        assert props(cm)["aibom.provenance.guarded"] == "false"
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "aibom_rollup",
                "policy",
                "--namespace-label",
                f"{LABEL_KEY}={ns}",
            ],
            cwd=REPO_ROOT,
            env=control_plane_env(),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        generated = [d for d in yaml.safe_load_all(out) if d]
        binding = next(d for d in generated if d["kind"] == "ValidatingAdmissionPolicyBinding")
        assert binding["spec"] == guard_binding(ns)["spec"]
        kubectl("apply", "--server-side", "-f", "-", input=out)
        doc_where(
            cp,
            ns,
            GRAPH_DOC,
            what="guarded by the generated binding",
            check=lambda cm: props(cm).get("aibom.provenance.guarded") == "true",
        )


@pytest.mark.parametrize("weakened", ["audit-only", "other-selector", "no-policy"])
def test_a_weakened_guard_is_not_called_a_guard(env: Env, weakened: str) -> None:
    """ "Guarded" is what the API server enforces: the policy exists and is ours, the
    binding denies, and selects the annotator's namespaces."""
    cp, kubectl, ns = env.cp, env.kubectl, env.ns
    env.annotator()
    support.apply(kubectl, dgd(ns, "graph"))
    with guard_installed(kubectl, shipped_policy(), guard_binding(ns)):
        doc_where(
            cp,
            ns,
            GRAPH_DOC,
            what="guarded",
            check=lambda cm: props(cm).get("aibom.provenance.guarded") == "true",
        )
        weakenings: dict[str, Obj] = {
            "audit-only": {"op": "replace", "path": "/spec/validationActions", "value": ["Audit"]},
            "other-selector": {
                "op": "replace",
                "path": "/spec/matchResources/namespaceSelector",
                "value": {"matchLabels": {"team": "other"}},
            },
        }
        weakening = weakenings.get(weakened)
        if weakening is not None:
            patch = json.dumps([weakening])
            kubectl("patch", "validatingadmissionpolicybinding", GUARD, "--type=json", "-p", patch)
        else:
            kubectl("delete", "validatingadmissionpolicy", GUARD)
        doc_where(
            cp,
            ns,
            GRAPH_DOC,
            what=f"not guarded once {weakened}",
            check=lambda cm: props(cm).get("aibom.provenance.guarded") == "false",
        )


# -- our ConfigMaps, and only ours ------------------------------------------------------------


def test_a_configmap_a_tenant_labels_as_ours_is_never_deleted(
    env: Env, control_plane: ControlPlane, kubectl: Kubectl
) -> None:
    """A tenant who may update ConfigMaps but not delete them labels someone else's as
    an AIBOM document (managed-by and root labels naming a Pod, a rolled-up
    workload, and a root under another name; and one in a namespace that is
    not opted in). The annotator may delete any such labelled ConfigMap: it
    must recognise them as not ours."""
    cp, ns = env.cp, env.ns
    first = env.annotator("--trust-owner-references")
    web = support.apply(kubectl, deployment(ns, "web"))
    (rs,) = wait_for("web's ReplicaSet", lambda: kubectl_get(kubectl, ns, "rs")["items"])
    (p,) = wait_for("web's Pod", lambda: kubectl_get(kubectl, ns, "pods")["items"])
    support.wait_doc(cp, ns, "aibom-deployment-web")
    outside = support.new_namespace(cp, "attacks-outside")
    cm_rules = {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "verbs": ["get", "list", "update", "patch"],
    }
    who = tenant(cp, kubectl, ns, "relabeller", [cm_rules])
    bind_rules(kubectl, "relabeller", "relabeller-rules", [cm_rules], namespace=outside)
    victims = {
        (ns, "app-settings"): p,  # a Pod: not a workload we document
        (ns, "app-flags"): rs,  # a ReplicaSet: rolled up
        (ns, "app-web"): web,  # the root, under a name that is not its document's
        (outside, "app-outside"): web,  # a namespace that is not opted in
    }
    try:
        for (where, name), root in victims.items():
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": where},
                "data": {"owner": "the app team"},
            }
            assert cp.request("POST", f"/api/v1/namespaces/{where}/configmaps", body).status == 201
            labels = {
                "app.kubernetes.io/managed-by": "aibom-rollup",
                "aibom.dev/root-kind": root["kind"],
                "aibom.dev/root-name": root["metadata"]["name"],
                "aibom.dev/root-uid": root["metadata"]["uid"],
            }
            path = f"/api/v1/namespaces/{where}/configmaps/{name}"
            relabel: Obj = {"metadata": {"labels": labels}}

            def relabelled(path: str = path, relabel: Obj = relabel) -> bool:
                return patch_as(cp, who, path, relabel)[0] == 200

            wait_for(f"the tenant's relabelling of {where}/{name}", relabelled)
        support.settle(cp, kubectl, ns)
        # A new leader sweeps every namespace with documents (a full resync): the
        # path that deletes a document whose root is not one.
        assert first.stop() == 0, first.tail()
        env.annotator("--trust-owner-references")
        support.settle(cp, kubectl, ns)
        for where, name in victims:
            kept = get(cp, f"/api/v1/namespaces/{where}/configmaps/{name}")
            assert kept is not None, f"{where}/{name} was deleted"
            assert kept["data"] == {"owner": "the app team"}, kept["data"]
        assert "aibom-deployment-web" in docs(cp, ns)
    finally:
        cp.request("DELETE", f"/api/v1/namespaces/{outside}")


# -- a document bomb ----------------------------------------------------------------------------


def zeros_gzip(size: int) -> bytes:
    """gzip of `size` zero bytes, made in 1 MiB steps (never holding them)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    step = b"\0" * (1 << 20)
    out = [packer.compress(step) for _ in range(size // len(step))]
    return b"".join(out) + packer.flush()


def test_kubectl_aibom_reads_a_gzip_bomb_in_bounded_memory(env: Env) -> None:
    """A tenant who may create ConfigMaps stores 1 MiB of gzip that expands to 1 GiB,
    labelled as an AIBOM document: `kubectl aibom get` leaves it out of the listing
    with a warning that says why, instead of taking the memory of whoever lists
    AIBOMs (it used to expand all of it: 2.1 GiB of peak RSS)."""
    cp, kubectl, ns = env.cp, env.kubectl, env.ns
    who = tenant(
        cp,
        kubectl,
        ns,
        "bomber",
        [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}],
    )
    bomb = zeros_gzip(1 << 30)
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "aibom-deployment-bomb",
            "namespace": ns,
            "labels": {"app.kubernetes.io/managed-by": "aibom-rollup"},
        },
        "binaryData": {"aibom.json.gz": base64.b64encode(bomb).decode()},
    }
    status, made = create_as(cp, who, body)
    assert status == 201, made.get("message")
    # The plugin's own peak resident set (VmHWM: ru_maxrss would include what a
    # forked parent had used).
    probe = (
        "import re, sys\n"
        "from aibom_rollup.kubectl_aibom import main\n"
        "code = main(sys.argv[1:])\n"
        "status = open('/proc/self/status').read()\n"
        "peak = re.search(r'VmHWM:\\s+(\\d+) kB', status).group(1)\n"
        "print(f'peak_kib={peak}', file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    env_ = control_plane_env()
    env_["KUBECONFIG"] = str(cp.kubeconfig)
    out = subprocess.run(
        [sys.executable, "-c", probe, "get", "-n", ns, "-o", "wide"],
        check=False,
        cwd=REPO_ROOT,
        env=env_,
        capture_output=True,
        text=True,
        timeout=120,
    )
    peak_kib = int(out.stderr.rsplit("peak_kib=", 1)[1].split()[0])
    assert peak_kib < 200 * 1024, f"peak RSS {peak_kib // 1024} MiB:\n{out.stderr[-2000:]}"
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    assert "aibom-deployment-bomb" in out.stderr and "more than" in out.stderr, out.stderr[-2000:]
