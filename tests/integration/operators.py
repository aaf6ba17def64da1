"""What the tests of the real operators (Grove, Dynamo, ...) share: their upstream
samples in a namespace, the shapes they make, the guard, a Pod-only forger, and
the documents' Pod evidence.

The operators are components (tests/controlplane/components/), started by the
``components`` fixture; the webhook and the annotator are ours as shipped
(tests/integration/support.py); Pod statuses come from kwok, which each such
module runs (tests/controlplane/components/kwok.py).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from aibom_core.objects import Obj
from tests.controlplane import REPO_ROOT, Component, ControlPlane, Kubectl, bind_rules, shared_dir
from tests.integration.kubelet import require_kwok
from tests.integration.support import (
    LABEL_KEY,
    Annotator,
    StartWebhook,
    Webhook,
    docs,
    document,
    get,
    grant_annotator,
    grant_lease,
    items,
    reported_pods,
    stamp,
    unproven_members,
    wait_for,
    wait_registered,
)

GUARD = REPO_ROOT / "manifests" / "provenance"
OPT_OUT = "aibom.dev/provenance-guard=disabled"
#: A tenant who may create and read Pods, and read the operators' objects (so it
#: knows their names and UIDs): the forger the provenance rule keeps out.
FORGER_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get"]},
    {"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list"]},
]
FORGED_IMAGE = "evil.example/forged:1"


def example(relative: str, ns: str) -> list[Obj]:
    """An upstream sample (tests/upstream/...), every document moved to `ns`."""
    found = []
    for doc in yaml.safe_load_all((shared_dir() / relative).read_text()):
        if doc:
            doc["metadata"]["namespace"] = ns
            found.append(doc)
    return found


def apply_all(kubectl: Kubectl, objs: list[Obj]) -> list[Obj]:
    """Server-side apply as the admin (what a user applies); the objects as stored."""
    out = kubectl(
        "apply", "--server-side", "--field-manager=test", "-o", "json", "-f", "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}),
    )  # fmt: skip
    body = json.loads(out.stdout)
    result: list[Obj] = body["items"] if body.get("kind") == "List" else [body]
    return result


def controller_of(obj: Obj) -> Obj | None:
    """The object's controller ownerReference, if any."""
    refs = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")]
    return refs[0] if refs else None


def edge(obj: Obj) -> tuple[str, str, bool | None] | None:
    """(owner kind, owner name, blockOwnerDeletion) of the object's controller reference."""
    ref = controller_of(obj)
    return (ref["kind"], ref["name"], ref.get("blockOwnerDeletion")) if ref else None


def listed(cp: ControlPlane, path: str) -> list[Obj]:
    """The items of a list, each with the apiVersion and kind a list leaves out."""
    body = get(cp, path)
    assert body is not None, path
    kind = body["kind"].removesuffix("List")
    return [{"apiVersion": body["apiVersion"], "kind": kind, **item} for item in body["items"]]


def live_pods(cp: ControlPlane, ns: str) -> list[Obj]:
    pods = items(cp, f"/api/v1/namespaces/{ns}/pods")
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def wait_pods(
    cp: ControlPlane, ns: str, count: int, select: Callable[[Obj], bool], timeout: float = 120
) -> list[Obj]:
    """Until exactly `count` live Pods of `ns` satisfy `select`."""

    def probe() -> list[Obj] | None:
        found = [p for p in live_pods(cp, ns) if select(p)]
        return found if len(found) == count else None

    pods: list[Obj] = wait_for(f"{count} Pods in {ns}", probe, timeout, 0.5)
    return pods


def wait_document(
    cp: ControlPlane, ns: str, name: str, check: Callable[[Obj], bool], *, what: str
) -> Obj:
    """Until the ConfigMap `name` exists and its document satisfies `check`."""

    def probe() -> Obj | None:
        cm = docs(cp, ns).get(name)
        doc = document(cm) if cm is not None else None
        return doc if doc is not None and check(doc) else None

    found: Obj = wait_for(f"{name}: {what}", probe, 120, 0.5)
    return found


# -- namespaces: guarded and not ------------------------------------------------------------


@contextlib.contextmanager
def guard_installed(kubectl: Kubectl) -> Iterator[None]:
    """The shipped guard (`kubectl apply -k manifests/provenance`), removed after."""
    kubectl("apply", "--server-side", "-k", str(GUARD))
    try:
        yield
    finally:
        kubectl("delete", "-k", str(GUARD), "--ignore-not-found")


def guard_for_label(cp: ControlPlane, kubectl: Kubectl, ns: str, workdir: Path) -> None:
    """The guard's binding for the test annotator's opt-in label of `ns`, as
    `aibom-rollup policy --namespace-label` generates it (the policy is the shipped
    one; the Helm chart templates the label the same way): the annotator calls a
    namespace guarded only when the live binding selects its label. Waits until a
    Pod-only identity's forged reference is refused there (the API server's
    policy informers are asynchronous)."""
    generated = subprocess.run(
        [sys.executable, "-m", "aibom_rollup", "policy", f"--namespace-label={LABEL_KEY}={ns}"],
        capture_output=True, text=True, check=True, cwd=REPO_ROOT,
    ).stdout  # fmt: skip
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=generated)
    kubectl("create", "serviceaccount", "-n", ns, "guard-probe")
    user = f"system:serviceaccount:{ns}:guard-probe"
    bind_rules(kubectl, user, "guard-probe", FORGER_RULES, namespace=ns)
    probe = Forger(cp, kubectl, ns, cp.service_account_kubeconfig(
        ns, "guard-probe", workdir / f"{ns}-guard-probe", 3600))  # fmt: skip
    meta = {"name": "probe", "uid": "00000000-0000-0000-0000-000000000001"}
    fake = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": meta}

    def refused() -> bool:
        out = kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(
            probe.pod("guard-probe", fake)), kubeconfig=probe.kubeconfig, check=False)  # fmt: skip
        return out.returncode != 0 and "aibom-rollup-provenance" in out.stderr

    wait_for(f"the guard for {LABEL_KEY}={ns}", refused, 60, 0.5)


@dataclass
class Scene:
    """One namespace opted in for our webhook and annotator, guarded or not."""

    cp: ControlPlane
    kubectl: Kubectl
    ns: str
    guarded: bool
    workdir: Path


@contextlib.contextmanager
def scene(
    cp: ControlPlane, kubectl: Kubectl, ns: str, *, guarded: bool, webhook: Webhook,
    workdir: Path, user: str,
) -> Iterator[Scene]:  # fmt: skip
    """Opt `ns` in (the guard's label and the test annotator's), opted out of the
    guard unless `guarded`; once the webhook stamps there, run our annotator as
    `user` (the shipped ClusterRole) with the webhook's provenance key, as shipped.
    Pod statuses are kwok's: the module must run it."""
    require_kwok(cp)
    labels = ["aibom.dev/enabled=true", f"{LABEL_KEY}={ns}", *([] if guarded else [OPT_OUT])]
    kubectl("label", "namespace", ns, *labels, "--overwrite")
    wait_registered(kubectl, ns)
    if guarded:
        guard_for_label(cp, kubectl, ns, workdir)
    kubeconfig = grant_annotator(cp, kubectl, user)
    grant_lease(kubectl, ns, user, "aibom-test")
    key = ("--provenance-key", str(webhook.dir / "provenance.key"))
    annotator = Annotator(kubeconfig, workdir, ns, identity=user, args=key).start()
    try:
        annotator.wait_ready().wait_leading()
        yield Scene(cp, kubectl, ns, guarded, workdir)
    finally:
        if annotator.alive():
            assert annotator.stop() == 0, annotator.tail()


def runs_as(
    kubectl: Kubectl, operator: Component, *, namespace: str, service_account: str, binding: str
) -> Callable[..., bool]:
    """Check that `operator` runs as its ServiceAccount (its own token, not an admin),
    bound by the release's ClusterRoleBinding `binding`; return `can(verb, resource,
    *args)`: what `kubectl auth can-i` answers for it (in `default`)."""
    user = f"system:serviceaccount:{namespace}:{service_account}"
    assert operator.user == user
    out = kubectl("auth", "whoami", "-o", "json", kubeconfig=operator.kubeconfig).stdout
    info = json.loads(out)["status"]["userInfo"]
    assert info["username"] == user
    assert "system:masters" not in info.get("groups", [])
    bound = json.loads(kubectl("get", "clusterrolebinding", binding, "-o", "json").stdout)
    subject = {"kind": "ServiceAccount", "name": service_account, "namespace": namespace}
    assert subject in bound["subjects"]

    def can(verb: str, resource: str, *args: str) -> bool:
        out = kubectl("auth", "can-i", verb, resource, *args, "-n", "default",
                      kubeconfig=operator.kubeconfig, check=False)  # fmt: skip
        return out.stdout.strip() == "yes"

    return can


@dataclass
class Forger:
    """A Pod-only tenant: a ServiceAccount of `ns` bound to FORGER_RULES, with its
    own TokenRequest token, writing controller references it may not."""

    cp: ControlPlane
    kubectl: Kubectl
    ns: str
    kubeconfig: Path

    @classmethod
    def make(cls, cp: ControlPlane, kubectl: Kubectl, ns: str, workdir: Path) -> Forger:
        kubectl("create", "serviceaccount", "-n", ns, "forger")
        user = f"system:serviceaccount:{ns}:forger"
        bind_rules(kubectl, user, "forger", FORGER_RULES, namespace=ns)
        path = cp.service_account_kubeconfig(ns, "forger", workdir / f"{ns}-forger", 3600)
        forger = cls(cp, kubectl, ns, path)
        wait_for(f"{user}'s Role", lambda: forger.can("create", "pods"))
        return forger

    def can(self, verb: str, resource: str) -> bool:
        out = self.kubectl("auth", "can-i", verb, resource, "-n", self.ns,
                           kubeconfig=self.kubeconfig, check=False)  # fmt: skip
        return out.stdout.strip() == "yes"

    def pod(self, name: str, owner: Obj) -> Obj:
        """A Pod with a controller reference copied from `owner` (no blockOwnerDeletion:
        Kubernetes would check that one), running FORGED_IMAGE."""
        meta = owner["metadata"]
        ref = {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"],
               "uid": meta["uid"], "controller": True}  # fmt: skip
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": self.ns, "ownerReferences": [ref]},
            "spec": {"containers": [{"name": "main", "image": FORGED_IMAGE}]},
        }  # fmt: skip

    def create(self, obj: Obj) -> subprocess.CompletedProcess[str]:
        return self.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(obj),
                            kubeconfig=self.kubeconfig, check=False)  # fmt: skip


def hop(owner: Obj) -> str:
    """`<group>/<Kind>/<name>`, as a stamp's reason names an owner."""
    group = owner["apiVersion"].rpartition("/")[0]
    return f"{group or 'core'}/{owner['kind']}/{owner['metadata']['name']}"


def forge_into(s: Scene, owners: list[Obj]) -> set[str]:
    """The Pod-only forger copies a controller reference to each owner. Guarded:
    each refused by the guard, naming the forger and the owner. Unguarded: each
    admitted, stamped `unproven` naming the owner, without a proof. Returns the
    forged Pods admitted (`Pod/<name>`)."""
    forger = Forger.make(s.cp, s.kubectl, s.ns, s.workdir)
    admitted = set()
    for i, owner in enumerate(owners):
        result = forger.create(forger.pod(f"forged-{i}", owner))
        if s.guarded:
            assert result.returncode != 0, f"admitted: {result.stdout[:300]}"
            assert "ValidatingAdmissionPolicy 'aibom-rollup-provenance'" in result.stderr
            assert (f"system:serviceaccount:{s.ns}:forger may not set a controller "
                    f"ownerReference to {hop(owner)}") in result.stderr, result.stderr  # fmt: skip
            continue
        assert result.returncode == 0, result.stderr
        pod = json.loads(result.stdout)
        assert stamp(pod) == {"aibom.dev/rollup": "unproven",
                              "aibom.dev/rollup-reason": f"Unproven {hop(owner)}"}  # fmt: skip
        assert "aibom.dev/edge-proof" not in pod["metadata"]["annotations"]
        admitted.add(f"Pod/{pod['metadata']['name']}")
    return admitted


def forged_attached(s: Scene) -> set[str]:
    """Forged Pods still carrying their controller reference (an operator may release
    or delete a Pod it did not make)."""
    pods = live_pods(s.cp, s.ns)
    return {f"Pod/{p['metadata']['name']}" for p in pods
            if p["metadata"]["name"].startswith("forged-") and controller_of(p)}  # fmt: skip


def documents(s: Scene, pods: dict[str, set[str]]) -> dict[str, Obj] | None:
    """The documents named in `pods` once each reports exactly those Pods' digests and,
    together, lists as unproven exactly the forged Pods still attached; else None."""
    found = {name: document(cm) for name, cm in docs(s.cp, s.ns).items() if name in pods}
    if set(found) != set(pods) or any(reported_pods(d) != pods[n] for n, d in found.items()):
        return None
    listed = set().union(*(unproven_members(d) for d in found.values()))
    return found if listed == forged_attached(s) else None


def wait_documents(s: Scene, pods: dict[str, set[str]]) -> dict[str, Obj]:
    """`documents`, waited for; then no document names the forged image or Pods."""
    found: dict[str, Obj] = wait_for(
        f"documents {sorted(pods)} with every Pod's digest", lambda: documents(s, pods), 120, 0.5
    )
    for name, doc in found.items():
        assert FORGED_IMAGE.rsplit(":", 1)[0] not in json.dumps(doc), name
    return found


def fixtures(name: str) -> tuple[Any, Any, Any, Any]:
    """The fixtures of a real operator's test module, assigned there as
    ``operator, webhook, guard, s = fixtures("<component>")``: `operator` (the
    running component, module), `webhook` (ours as shipped, module), `guard` (the
    shipped guard, module) and `s` (a Scene per test, guarded, then unguarded)."""

    @pytest.fixture(scope="module")
    def operator(components: dict[str, Component]) -> Component:
        return components[name]

    @pytest.fixture(scope="module")
    def webhook(operator: Component, start_webhook: StartWebhook) -> Webhook:
        return start_webhook(user=f"aibom-webhook-{name}", name=f"aibom-rollup-{name}-test")

    @pytest.fixture(scope="module")
    def guard(kubectl: Kubectl) -> Iterator[None]:
        with guard_installed(kubectl):
            yield

    @pytest.fixture(params=["guarded", "unguarded"])
    def s(
        request: pytest.FixtureRequest, control_plane: ControlPlane, kubectl: Kubectl, *,
        webhook: Webhook, guard: None, namespace: str, tmp_path: Path,
    ) -> Iterator[Scene]:  # fmt: skip
        guarded = request.param == "guarded"
        with scene(control_plane, kubectl, namespace, guarded=guarded, webhook=webhook,
                   workdir=tmp_path, user=f"aibom-annotator-{name}") as made:  # fmt: skip
            yield made

    return operator, webhook, guard, s
