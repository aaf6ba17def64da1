"""Real operators' chains under our webhook, annotator and provenance guard.

What the real-operator test modules (``test_kserve_operator.py``,
``test_nim_operator.py``, ``test_kuberay.py``) share. Each applies an operator's
own sample, lets the operator (as its own ServiceAccount, with its release's
ClusterRole) and Kubernetes' controllers make the chain, and shows with these
helpers that:

- the chain has the shape the operator's code gives it (:func:`controller_of`:
  kind, name, UID and ``blockOwnerDeletion`` of each controller reference);
- in a **guarded** namespace (opted in, the shipped ValidatingAdmissionPolicy
  ``aibom-rollup-provenance`` in force) and an **unguarded** one (opted in,
  ``aibom.dev/provenance-guard=disabled``: only the webhook's proofs count),
  every Pod and every tracked object below the root is stamped ``rolled-up`` to
  the root, and the root's one document lists exactly the tracked objects the
  operator made and a pod-status digest of every Pod (:func:`wait_rolled_up`);
- a **Pod-only tenant** (:class:`Tenant`: may create Pods in its namespace,
  nothing else) who copies a chain object's name and UID into a controller
  reference is refused by the guard, or stamped ``unproven`` and left out of the
  root's document, its digest with it (:func:`assert_forgery_fails`).

The pair of namespaces and one annotator for both (the shipped ClusterRole, the
webhook's provenance key) come from :func:`operator_namespaces`; the guard from
:func:`guard_applied`. Pod statuses come from kwok's Stages: every module of these
chains runs the ``kwok`` component (kube-scheduler binds the Pods to its fake
Nodes; ``kwok.pod_digests`` says what its Stages report).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

from aibom_core.kinds import BUILTIN_KINDS
from aibom_core.objects import Obj
from tests.controlplane import REPO_ROOT, Component, ControlPlane, Kubectl
from tests.controlplane.components.kwok import pod_digests
from tests.integration.kubelet import require_kwok
from tests.integration.support import (
    LABEL_KEY,
    MANIFESTS,
    Annotator,
    Webhook,
    docs,
    document,
    enabled_namespace,
    get,
    grant_annotator,
    grant_lease,
    new_namespace,
    owned,
    reported_pods,
    settle,
    stamp,
    token_kubeconfig,
    unproven_members,
    wait_for,
    wait_registered,
)

GUARD = MANIFESTS / "provenance"
POLICY = "aibom-rollup-provenance"
#: An operator's chain, its Pods and the documents: generous bounds, the machine is shared.
TIMEOUT = 180.0


@contextlib.contextmanager
def guard_applied(kubectl: Kubectl) -> Iterator[None]:
    """The shipped guard (``kubectl apply -k manifests/provenance``), removed after."""
    kubectl("apply", "--server-side", "-k", str(GUARD))
    try:
        yield
    finally:
        kubectl("delete", "-k", str(GUARD), "--ignore-not-found")


# -- the operator ----------------------------------------------------------------------------

C = TypeVar("C", bound=Component)


def running(components: dict[str, Component], cls: type[C]) -> C:
    """The module's running component of class ``cls`` (from the ``components`` fixture)."""
    found = components[cls.name]
    assert isinstance(found, cls)
    return found


def can_i(kubectl: Kubectl, component: Component, verb: str, resource: str, *args: str) -> bool:
    """``kubectl auth can-i`` as the component (in namespace default)."""
    out = kubectl("auth", "can-i", verb, resource, *args, "-n", "default",
                  kubeconfig=component.kubeconfig, check=False)  # fmt: skip
    return out.stdout.strip() == "yes"


def assert_may_control(kubectl: Kubectl, component: Component, *resources: str) -> None:
    """The component may ``update`` each owner resource (``kind.group``) and its
    ``finalizers``: what the provenance guard asks of the author of a controller
    reference to such an owner (the finalizers, as the rule stands; the owner
    itself is what real operators hold, Grove's without the finalizers)."""
    for resource in resources:
        assert can_i(kubectl, component, "update", resource, "--subresource=finalizers"), resource
        assert can_i(kubectl, component, "update", resource), resource


def assert_release_identity(
    kubectl: Kubectl, component: Component, *, service_account: str, binding: str, role: str
) -> None:
    """The component authenticates as ``service_account`` (``namespace/name``, a
    TokenRequest token), not as admin, and its release binds that account to
    ``role`` with the ClusterRoleBinding ``binding``."""
    namespace, _, name = service_account.partition("/")
    user = f"system:serviceaccount:{namespace}:{name}"
    assert component.user == user
    who = json.loads(kubectl("auth", "whoami", "-o", "json",
                             kubeconfig=component.kubeconfig).stdout)  # fmt: skip
    assert who["status"]["userInfo"]["username"] == user
    assert "system:masters" not in who["status"]["userInfo"].get("groups", [])
    bound = json.loads(kubectl("get", "clusterrolebinding", binding, "-o", "json").stdout)
    assert bound["roleRef"]["name"] == role
    assert {"kind": "ServiceAccount", "name": name, "namespace": namespace} in bound["subjects"]
    assert not can_i(kubectl, component, "create", "clusterrolebindings")


# -- the tenant ------------------------------------------------------------------------------


class Tenant:
    """A ServiceAccount ``tenant`` of namespace ``ns`` that may create (and get) Pods
    there and nothing else, calling with its own TokenRequest token."""

    def __init__(self, cp: ControlPlane, kubectl: Kubectl, workdir: Path, ns: str) -> None:
        self.kubectl, self.ns = kubectl, ns
        self.user = f"system:serviceaccount:{ns}:tenant"
        rbac = {"apiVersion": "rbac.authorization.k8s.io/v1"}
        docs_ = [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "tenant"}},
            {**rbac, "kind": "Role", "metadata": {"name": "tenant"},
             "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get"]}]},
            {**rbac, "kind": "RoleBinding", "metadata": {"name": "tenant"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                         "name": "tenant"},
             "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": ns}]},
        ]  # fmt: skip
        kubectl("apply", "-n", ns, "-f", "-",
                input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs_}))  # fmt: skip
        resp = cp.request(
            "POST", f"/api/v1/namespaces/{ns}/serviceaccounts/tenant/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": 3600}},
        )  # fmt: skip
        assert resp.status == 201, resp.body
        token = resp.json()["status"]["token"]
        self.kubeconfig = token_kubeconfig(cp, workdir / f"tenant-{ns}", self.user, token)

    def create_pod(
        self, name: str, owner: Obj | None, image: str, *, dry_run: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """Its Pod ``name``, with a controller reference to ``owner`` copied from what it
        can read (or none): what it would do to get counted as the owner's child."""
        metadata: Obj = {"name": name, "namespace": self.ns}
        if owner is not None:
            metadata["ownerReferences"] = [{
                "apiVersion": owner["apiVersion"], "kind": owner["kind"],
                "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                "controller": True,
            }]  # fmt: skip
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
               "spec": {"containers": [{"name": "main", "image": image}]}}  # fmt: skip
        args = ["create", "-f", "-", "-o", "json", *(["--dry-run=server"] if dry_run else [])]
        return self.kubectl(*args, kubeconfig=self.kubeconfig, input=json.dumps(pod), check=False)


# -- the pair of namespaces ------------------------------------------------------------------


@dataclass(frozen=True)
class Spaces:
    """Two opted-in namespaces, their tenants and the annotator."""

    cp: ControlPlane
    kubectl: Kubectl
    guarded: str
    unguarded: str
    tenants: dict[str, Tenant]
    annotator: Annotator

    def both(self) -> tuple[str, str]:
        return self.guarded, self.unguarded

    def is_guarded(self, ns: str) -> bool:
        return ns == self.guarded


def _fake_owner() -> Obj:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "probe", "uid": str(uuid.uuid4())}}  # fmt: skip


@contextlib.contextmanager
def operator_namespaces(
    cp: ControlPlane, kubectl: Kubectl, webhook: Webhook, workdir: Path, *, prefix: str
) -> Iterator[Spaces]:
    """A guarded and an unguarded namespace opted in for ``webhook`` (registered for
    every namespace labelled ``aibom.dev/enabled=true``), each with a :class:`Tenant`;
    one annotator for both (shipped ClusterRole, the webhook's provenance key),
    leading; kwok (which the module must run) reports their Pods.
    Returns once the webhook stamps in both and
    the guard refuses a forged reference in the guarded one (and not in the other).
    The guard itself must be applied (:func:`guard_applied`)."""
    require_kwok(cp)
    guarded, unguarded = new_namespace(cp, f"{prefix}-g"), new_namespace(cp, f"{prefix}-u")
    # One annotator selects both: they share the label value (the guarded one's name).
    enabled_namespace(kubectl, guarded, f"{LABEL_KEY}={guarded}")
    enabled_namespace(kubectl, unguarded, f"{LABEL_KEY}={guarded}",
                      "aibom.dev/provenance-guard=disabled")  # fmt: skip
    tenants = {ns: Tenant(cp, kubectl, workdir, ns) for ns in (guarded, unguarded)}
    for ns in (guarded, unguarded):
        wait_registered(kubectl, ns)
    # The binding for the annotator's label (`aibom-rollup policy --namespace-label`,
    # as the Helm chart templates it): the annotator calls a namespace guarded only
    # when the live binding selects its label. The policy is the shipped one.
    label = f"--namespace-label={LABEL_KEY}={guarded}"
    generated = subprocess.run(
        [sys.executable, "-m", "aibom_rollup", "policy", label],
        capture_output=True, text=True, check=True, cwd=REPO_ROOT,
    ).stdout  # fmt: skip
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=generated)
    # The policy, the namespace labels and the tenant's RBAC reach the API server
    # through informers: wait until the guard refuses, and the tenant may create.
    wait_for(
        f"the guard in {guarded}",
        lambda: POLICY in tenants[guarded].create_pod("probe", _fake_owner(), "x:1",
                                                      dry_run=True).stderr,
        TIMEOUT,
    )  # fmt: skip
    wait_for(
        f"the tenant's RBAC in {unguarded}",
        lambda: tenants[unguarded].create_pod("probe", None, "x:1", dry_run=True).returncode == 0,
        TIMEOUT,
    )
    user = f"aibom-annotator-{prefix}"
    identity = grant_annotator(cp, kubectl, user)
    grant_lease(kubectl, guarded, user, "aibom-test")
    annotator = Annotator(
        identity, workdir, guarded, identity=f"annotator-{prefix}",
        args=("--provenance-key", str(webhook.dir / "provenance.key")),
    ).start()  # fmt: skip
    try:
        annotator.wait_ready().wait_leading()
        yield Spaces(cp, kubectl, guarded, unguarded, tenants, annotator)
    finally:
        if annotator.alive():
            assert annotator.stop() == 0, annotator.tail()
        for ns in (guarded, unguarded):
            cp.request("DELETE", f"/api/v1/namespaces/{ns}")


# -- the chain -------------------------------------------------------------------------------


def controller_of(obj: Obj) -> tuple[str, str, str, bool]:
    """(kind, name, uid, blockOwnerDeletion) of the object's one controller reference."""
    (ref,) = [r for r in obj["metadata"].get("ownerReferences", []) if r.get("controller")]
    return ref["kind"], ref["name"], ref["uid"], bool(ref.get("blockOwnerDeletion"))


def live(objs: Iterable[Obj]) -> list[Obj]:
    return [o for o in objs if not o["metadata"].get("deletionTimestamp")]


def wait_items(
    cp: ControlPlane, path: str, ready: Callable[[list[Obj]], bool], what: str
) -> list[Obj]:
    """The live objects at ``path`` (a list URL), once ``ready(them)`` holds; each with
    its ``apiVersion`` and ``kind`` (a list's items have neither)."""

    def probe() -> list[Obj] | None:
        body = get(cp, path)
        assert body is not None, path
        kind = {"apiVersion": body["apiVersion"], "kind": body["kind"].removesuffix("List")}
        found = [{**kind, **o} for o in live(body["items"])]
        return found if ready(found) else None

    result: list[Obj] = wait_for(what, probe, TIMEOUT, 0.5)
    return result


def doc_name(root: Obj) -> str:
    return f"aibom-{root['kind'].lower()}-{root['metadata']['name']}"


def wait_document(
    cp: ControlPlane, ns: str, root: Obj, check: Callable[[Obj], bool], what: str
) -> Obj:
    """Until the root's document exists and ``check(document)`` holds."""
    last = ["no document"]

    def probe() -> Obj | None:
        cm = docs(cp, ns).get(doc_name(root))
        if cm is None:
            return None
        doc = document(cm)
        last[0] = (
            f"owned={owned(doc)} pods={sorted(reported_pods(doc))} unproven={unproven_members(doc)}"
        )
        return doc if check(doc) else None

    deadline = time.monotonic() + TIMEOUT
    while (found := probe()) is None:
        if time.monotonic() > deadline:
            pytest.fail(
                f"timed out after {TIMEOUT:.0f} s waiting for {ns}/{doc_name(root)}: {what}"
                f" (last: {last[0]}; documents: {sorted(docs(cp, ns))})"
            )
        time.sleep(0.5)
    return found


def wait_rolled_up(
    cp: ControlPlane,
    ns: str,
    root: Obj,
    *,
    tracked: Iterable[Obj],
    pods: list[Obj],
    guarded: bool,
) -> Obj:
    """Every Pod and every tracked object below ``root`` is stamped ``rolled-up`` to it;
    its document lists exactly ``tracked`` and a digest of every Pod's every container,
    and says whether the namespace is ``guarded`` (the live guard selects it); it is
    the namespace's only document. Returns the document."""
    below = list(tracked)
    want_owned = sorted(f"{o['kind']}/{o['metadata']['name']}" for o in below)
    want_pods = {p["metadata"]["name"] for p in pods}
    digests = set().union(*(pod_digests(p) for p in pods))

    def complete(doc: Obj) -> bool:
        text = json.dumps(doc)
        props = {p["name"]: p["value"] for p in doc["metadata"]["component"]["properties"]}
        return (sorted(owned(doc)) == want_owned and reported_pods(doc) == want_pods
                and all(d in text for d in digests)
                and props.get("aibom.provenance.guarded") == str(guarded).lower())  # fmt: skip

    doc = wait_document(
        cp, ns, root, complete, f"{want_owned} and every Pod of {sorted(want_pods)}"
    )
    want = {
        "aibom.dev/rollup": "rolled-up",
        "aibom.dev/root": f"{root['kind']}/{root['metadata']['name']}",
        "aibom.dev/root-uid": root["metadata"]["uid"],
    }
    for obj in [*below, *pods]:
        path = self_path(obj)

        def stamped(path: str = path) -> bool:
            return stamp(get(cp, path) or {}) == want

        wait_for(f"{obj['kind']}/{obj['metadata']['name']} stamped rolled-up", stamped, TIMEOUT)
    wait_for(f"only {doc_name(root)} in {ns}", lambda: set(docs(cp, ns)) == {doc_name(root)})
    return doc


def self_path(obj: Obj) -> str:
    """The API path of a namespaced object of a built-in kind (kubectl's table)."""
    group, _, _ = obj["apiVersion"].rpartition("/")
    (plural,) = [k.plural for k in BUILTIN_KINDS if (k.group, k.kind) == (group, obj["kind"])]
    base = "/api/v1" if not group else f"/apis/{obj['apiVersion']}"
    return f"{base}/namespaces/{obj['metadata']['namespace']}/{plural}/{obj['metadata']['name']}"


# -- forgery ---------------------------------------------------------------------------------


def assert_forgery_fails(spaces: Spaces, ns: str, owner: Obj, root: Obj) -> None:
    """The namespace's Pod-only tenant writes a controller reference to ``owner`` (an
    object of the real chain below or at ``root`` that manages no Pods by label: a
    ReplicaSet, StatefulSet or Job controller releases a Pod its selector does not
    match, which is Kubernetes' own answer, not ours). Guarded: the guard refuses it,
    naming the owner. Unguarded: admitted (nothing else stops it), but stamped
    ``unproven`` naming the owner, listed as unproven in the root's document, and
    its image digest, once kwok reported it, not in the document."""
    cp = spaces.cp
    name = f"forged-{owner['kind'].lower()}-{uuid.uuid4().hex[:5]}"
    image = f"registry.example/forger/{name}:1"
    result = spaces.tenants[ns].create_pod(name, owner, image)
    group = owner["apiVersion"].rpartition("/")[0]
    target = f"{group or 'core'}/{owner['kind']}/{owner['metadata']['name']}"
    if spaces.is_guarded(ns):
        assert result.returncode != 0, f"the guard admitted a forged Pod:\n{result.stdout[:500]}"
        assert f"ValidatingAdmissionPolicy '{POLICY}'" in result.stderr, result.stderr
        assert f"may not set a controller ownerReference to {target}" in result.stderr
        return
    assert result.returncode == 0, result.stderr
    pod = json.loads(result.stdout)
    assert stamp(pod).get("aibom.dev/rollup") == "unproven", stamp(pod)
    assert stamp(pod).get("aibom.dev/rollup-reason", "").endswith(target), stamp(pod)
    (sha,) = pod_digests(pod)
    path = self_path(pod)
    wait_for(f"the kubelet's report of {name}",
             lambda: sha in json.dumps((get(cp, path) or {}).get("status")), TIMEOUT)  # fmt: skip
    wait_document(cp, ns, root, lambda d: f"Pod/{name}" in unproven_members(d),
                  f"Pod/{name} listed as unproven")  # fmt: skip
    settle(cp, spaces.kubectl, ns)  # everything the annotator saw before now is judged
    doc = document(docs(cp, ns)[doc_name(root)])
    assert sha not in json.dumps(doc), "a forged Pod's digest entered the document"
    assert name not in reported_pods(doc)
    assert f"Pod/{name}" in unproven_members(doc)
