"""The real LeaderWorkerSet controller in the loop.

Nothing of the LWS chain is played here: the LeaderWorkerSet controller
(sigs.k8s.io/lws v0.9.0, built by tests/controlplane/lws and started by the
``lws_controller`` fixture, as its own ServiceAccount with its release's
ClusterRole) creates the leader StatefulSet, the headless Service and, for
each leader Pod, the worker StatefulSet owned by that Pod; the real
kube-controller-manager creates the Pods and garbage-collects. Our webhook
(its shipped ClusterRole, its configuration) stamps them, and our annotator
(its shipped ClusterRole) writes the documents. Nothing is played: kube-scheduler
binds the Pods to kwok's fake Nodes and kwok (its own ServiceAccount, its
release's Stages; tests/controlplane/components/kwok.py) writes each Pod's status
(Running, Ready, and an imageID whose digest is derived from the image and the
Pod's name), as a kubelet does once the container runs. One digest per Pod and
image: a digest names at most 3 Pods in a document (MAX_POD_EVIDENCE), so with
one digest per image the document could not show that every Pod's report
reached it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from aibom_core.objects import Obj
from tests.controlplane import REPO_ROOT, Component, ControlPlane, Kubectl, bind_rules
from tests.controlplane.components.kwok import Kwok, digest_of
from tests.controlplane.components.lws import NAMESPACE as LWS_NAMESPACE
from tests.controlplane.components.lws import SERVICE_ACCOUNT as LWS_SERVICE_ACCOUNT
from tests.controlplane.components.lws import VERSION as LWS_VERSION
from tests.controlplane.components.lws import Lws
from tests.integration.support import (
    LABEL_KEY,
    Annotator,
    Recorder,
    StartWebhook,
    Webhook,
    docs,
    document,
    enabled_namespace,
    get,
    grant_annotator,
    grant_lease,
    items,
    owned,
    reported_pods,
    wait_for,
    wait_registered,
)

pytestmark = [pytest.mark.integration, pytest.mark.components("kwok", "lws")]

LWS_API = "/apis/leaderworkerset.x-k8s.io/v1"
LEADER_IMAGE = "registry.example/lws/leader"
WORKER_IMAGE = "registry.example/lws/worker"
# A group is a leader StatefulSet Pod plus the worker StatefulSet that Pod owns:
# generous bounds, the machine is shared.
TIMEOUT = 120.0


def pods(cp: ControlPlane, ns: str) -> list[Obj]:
    return items(cp, f"/api/v1/namespaces/{ns}/pods")


def leaderworkerset(ns: str, name: str, *, replicas: int, size: int, tag: str = "1") -> Obj:
    """What a user applies: the LWS alone (its children are the controller's)."""

    def template(image: str, role: str) -> Obj:
        return {
            "metadata": {"labels": {"role": role}},
            "spec": {"containers": [{"name": "main", "image": f"{image}:{tag}"}]},
        }

    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {
                "size": size,
                "leaderTemplate": template(LEADER_IMAGE, "leader"),
                "workerTemplate": template(WORKER_IMAGE, "worker"),
            },
        },
    }


def apply(kubectl: Kubectl, doc: Obj) -> Obj:
    out = kubectl(
        "apply", "--server-side", "--field-manager=test", "-f", "-", "-o", "json",
        input=json.dumps(doc),
    )  # fmt: skip
    result: Obj = json.loads(out.stdout)
    return result


def group_pods(name: str, replicas: int, size: int) -> set[str]:
    """The Pod names LWS gives a set: leader `<name>-<g>`, workers `<name>-<g>-<i>`."""
    names = set()
    for g in range(replicas):
        names.add(f"{name}-{g}")
        names |= {f"{name}-{g}-{i}" for i in range(1, size)}
    return names


def wait_pods(cp: ControlPlane, ns: str, want: set[str]) -> list[Obj]:
    """Until the live (not terminating) Pods are exactly `want`."""

    def probe() -> list[Obj] | None:
        live = [p for p in pods(cp, ns) if not p["metadata"].get("deletionTimestamp")]
        return live if {p["metadata"]["name"] for p in live} == want else None

    found: list[Obj] = wait_for(f"Pods {sorted(want)} in {ns}", probe, TIMEOUT, 0.5)
    return found


def expected_digests(name: str, pod_names: set[str], tag: str) -> set[str]:
    """What kwok's Stages report for these Pods of LWS `name` at image `tag`."""
    out = set()
    for pod in pod_names:
        leader = pod.removeprefix(f"{name}-").count("-") == 0  # <name>-<g>, not <name>-<g>-<i>
        out.add(digest_of(f"{LEADER_IMAGE if leader else WORKER_IMAGE}:{tag}", pod))
    return out


def doc_name(name: str) -> str:
    return f"aibom-leaderworkerset-{name}"


def wait_document(
    cp: ControlPlane, ns: str, name: str, check: Callable[[Obj, str], bool], what: str
) -> Obj:
    """Until the LWS's document exists and `check(document, its JSON text)` holds."""
    last: list[str] = ["no document"]

    def probe() -> Obj | None:
        cm = docs(cp, ns).get(doc_name(name))
        if cm is None:
            return None
        doc = document(cm)
        last[0] = f"owned={owned(doc)} pods={sorted(reported_pods(doc))}"
        return doc if check(doc, json.dumps(doc)) else None

    deadline = time.monotonic() + TIMEOUT
    while (found := probe()) is None:
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {TIMEOUT:.0f} s waiting for {doc_name(name)}: {what}"
                        f" (last: {last[0]}; documents: {sorted(docs(cp, ns))})")  # fmt: skip
        time.sleep(0.5)
    return found


def covers(pod_names: set[str], statefulsets: set[str]) -> Callable[[Obj, str], bool]:
    """The document lists exactly these StatefulSets and has a pod-status digest
    locator for every one of these Pods (and for no other Pod)."""

    def check(doc: Obj, text: str) -> bool:
        return owned(doc) == sorted(f"StatefulSet/{s}" for s in statefulsets) and (
            reported_pods(doc) == pod_names
        )

    return check


def assert_stamped(cp: ControlPlane, ns: str, name: str, pod_list: list[Obj]) -> None:
    lws = get(cp, f"{LWS_API}/namespaces/{ns}/leaderworkersets/{name}")
    assert lws is not None
    for pod in pod_list:
        ann = pod["metadata"].get("annotations", {})
        who = pod["metadata"]["name"]
        assert ann.get("aibom.dev/rollup") == "rolled-up", (who, ann)
        assert ann.get("aibom.dev/root") == f"LeaderWorkerSet/{name}", (who, ann)
        assert ann.get("aibom.dev/root-uid") == lws["metadata"]["uid"], (who, ann)


# -- fixtures ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lws_controller(components: dict[str, Component]) -> Lws:
    """The real LeaderWorkerSet controller, running for this module."""
    lws = components["lws"]
    assert isinstance(lws, Lws)
    return lws


@pytest.fixture(scope="module")
def webhook(lws_controller: Lws, start_webhook: StartWebhook) -> Webhook:
    """Our webhook as shipped (as test_webhook.py runs it), beside LWS's own (which
    starts before it and stops after it: the fixtures' order)."""
    return start_webhook(user="aibom-webhook-lws", name="aibom-rollup-lws-test")


@pytest.fixture(scope="module")
def annotator_identity(control_plane: ControlPlane, kubectl: Kubectl) -> Path:
    return grant_annotator(control_plane, kubectl, "aibom-annotator-lws")


@pytest.fixture
def ns(webhook: Webhook, kubectl: Kubectl, namespace: str) -> str:
    enabled_namespace(kubectl, namespace, f"{LABEL_KEY}={namespace}")
    wait_registered(kubectl, namespace)
    grant_lease(kubectl, namespace, "aibom-annotator-lws", "aibom-test")
    return namespace


@pytest.fixture
def annotator(
    tmp_path: Path, annotator_identity: Path, ns: str, webhook: Webhook
) -> Iterator[Annotator]:
    # As shipped: the annotator checks the webhook's edge proofs with the same key
    # (the namespace has no provenance guard, so proofs are the only evidence).
    a = Annotator(
        annotator_identity,
        tmp_path,
        ns,
        identity="annotator-lws",
        args=("--provenance-key", str(webhook.dir / "provenance.key")),
    ).start()
    try:
        a.wait_ready().wait_leading()
        yield a
    finally:
        if a.alive():
            assert a.stop() == 0, a.tail()


@pytest.fixture(scope="module")
def kwok(components: dict[str, Component]) -> Kwok:
    """kwok's fake Nodes (kube-scheduler binds the Pods to them), running for this module."""
    nodes = components["kwok"]
    assert isinstance(nodes, Kwok)
    return nodes


# -- the controller itself ---------------------------------------------------------------


def test_controller_runs_as_its_service_account_with_its_release_rbac(
    control_plane: ControlPlane, kubectl: Kubectl, lws_controller: Lws
) -> None:
    user = f"system:serviceaccount:{LWS_NAMESPACE}:{LWS_SERVICE_ACCOUNT}"
    assert lws_controller.user == user
    # Its kubeconfig authenticates as the ServiceAccount (a TokenRequest token)...
    who = json.loads(
        kubectl("auth", "whoami", "-o", "json", kubeconfig=lws_controller.kubeconfig).stdout
    )
    assert who["status"]["userInfo"]["username"] == user
    assert "system:masters" not in who["status"]["userInfo"].get("groups", [])
    # ...bound by the release's ClusterRole, not more:
    binding = json.loads(kubectl("get", "clusterrolebinding", "lws-manager-rolebinding",
                                 "-o", "json").stdout)  # fmt: skip
    assert binding["roleRef"]["name"] == "lws-manager-role"
    assert {"kind": "ServiceAccount", "name": LWS_SERVICE_ACCOUNT,
            "namespace": LWS_NAMESPACE} in binding["subjects"]  # fmt: skip

    def can(verb: str, resource: str, *args: str) -> bool:
        out = kubectl("auth", "can-i", verb, resource, *args, "-n", "default",
                      kubeconfig=lws_controller.kubeconfig, check=False)  # fmt: skip
        return out.stdout.strip() == "yes"

    # What the provenance rule asks of a controller reference's author
    # (update on the owner's finalizers), for each kind of owner it sets.
    # (`can-i update pods/finalizers` would ask about a Pod *named* finalizers.)
    for resource in ("leaderworkersets.leaderworkerset.x-k8s.io", "statefulsets.apps", "pods"):
        assert can("update", resource, "--subresource=finalizers"), resource
    assert not can("update", "deployments.apps", "--subresource=finalizers")
    assert not can("create", "clusterrolebindings")
    assert not can("delete", "namespaces")
    assert not can("get", "configmaps")
    version = (lws_controller.dist_dir / "release.yaml").read_text().splitlines()[0]
    assert f"sigs.k8s.io/lws@{LWS_VERSION}" in version


def test_real_controller_builds_the_lws_shape(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str
) -> None:
    """LWS -> leader StatefulSet -> leader Pod -> worker StatefulSet -> worker Pods,
    every link a controller reference set by the real controllers."""
    lws = apply(kubectl, leaderworkerset(ns, "shape", replicas=1, size=3))
    wait_pods(control_plane, ns, group_pods("shape", 1, 3))
    sts = {
        s["metadata"]["name"]: s
        for s in items(control_plane, f"/apis/apps/v1/namespaces/{ns}/statefulsets")
    }
    leader_pod = get(control_plane, f"/api/v1/namespaces/{ns}/pods/shape-0")
    assert leader_pod is not None

    def controller_of(obj: Obj) -> tuple[str, str, str]:
        (ref,) = [r for r in obj["metadata"]["ownerReferences"] if r.get("controller")]
        return ref["kind"], ref["name"], ref["uid"]

    assert controller_of(sts["shape"]) == ("LeaderWorkerSet", "shape", lws["metadata"]["uid"])
    assert controller_of(sts["shape-0"]) == ("Pod", "shape-0", leader_pod["metadata"]["uid"])
    assert sts["shape-0"]["spec"]["replicas"] == 2
    assert controller_of(leader_pod)[:2] == ("StatefulSet", "shape")
    for worker in ("shape-0-1", "shape-0-2"):
        pod = get(control_plane, f"/api/v1/namespaces/{ns}/pods/{worker}")
        assert pod is not None
        assert controller_of(pod)[:2] == ("StatefulSet", "shape-0")
        # LWS's own Pod webhook labelled it (it ran: the labels are not in our template).
        assert pod["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/name"] == "shape"
        assert pod["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] in {"1", "2"}


# -- roll-up on the real chain -------------------------------------------------------------


def test_size_4_replicas_2_every_pod_rolled_up_into_one_document(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator, kwok: Kwok
) -> None:
    apply(kubectl, leaderworkerset(ns, "llm", replicas=2, size=4))
    want = group_pods("llm", 2, 4)
    assert len(want) == 8
    live = wait_pods(control_plane, ns, want)
    assert_stamped(control_plane, ns, "llm", live)
    doc = wait_document(
        control_plane, ns, "llm", covers(want, {"llm", "llm-0", "llm-1"}), "all 8 Pods"
    )
    text = json.dumps(doc)
    for sha in expected_digests("llm", want, "1"):  # each Pod's own report
        assert sha in text
    # One document for the whole set: none for the StatefulSets it rolled up.
    wait_for("only the LWS's document", lambda: set(docs(control_plane, ns)) == {doc_name("llm")})


def test_scale_up_and_down_follows_the_groups(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator, kwok: Kwok
) -> None:
    apply(kubectl, leaderworkerset(ns, "s", replicas=1, size=2))
    wait_document(control_plane, ns, "s", covers(group_pods("s", 1, 2), {"s", "s-0"}), "1 group")

    kubectl("scale", "leaderworkerset/s", "--replicas=3", "-n", ns)
    live = wait_pods(control_plane, ns, group_pods("s", 3, 2))
    assert_stamped(control_plane, ns, "s", live)
    wait_document(
        control_plane, ns, "s", covers(group_pods("s", 3, 2), {"s", "s-0", "s-1", "s-2"}),
        "3 groups",
    )  # fmt: skip

    kubectl("scale", "leaderworkerset/s", "--replicas=1", "-n", ns)
    wait_pods(control_plane, ns, group_pods("s", 1, 2))
    wait_document(
        control_plane, ns, "s", covers(group_pods("s", 1, 2), {"s", "s-0"}), "1 group again"
    )
    wait_for("only the LWS's document", lambda: set(docs(control_plane, ns)) == {doc_name("s")})


@pytest.mark.usefixtures("annotator", "kwok")
@pytest.mark.parametrize("cascade", ["background", "foreground"])
def test_deleting_the_lws_removes_its_document_and_leaves_no_orphan(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, cascade: str
) -> None:
    """Background (kubectl's default): the LWS goes first and the garbage collector
    then takes its children down top-first; a child whose owner is already gone is,
    by the annotation contract, an `unresolved` root of its own for that moment, so
    documents may appear for the leader and worker StatefulSets on the way: every
    one of them must be gone again with its object. Foreground: the LWS stays
    (deletionTimestamp set) until its children are gone, so no other document may
    appear at all."""
    apply(kubectl, leaderworkerset(ns, "gone", replicas=2, size=3))
    wait_document(
        control_plane, ns, "gone", covers(group_pods("gone", 2, 3), {"gone", "gone-0", "gone-1"}),
        "2 groups",
    )  # fmt: skip
    with Recorder(control_plane, ns) as rec:
        kubectl("delete", "leaderworkerset/gone", "-n", ns, f"--cascade={cascade}", "--wait=false")
        wait_for("every Pod and StatefulSet gone", lambda: not pods(control_plane, ns)
                 and not items(control_plane, f"/apis/apps/v1/namespaces/{ns}/statefulsets"),
                 TIMEOUT, 0.5)  # fmt: skip
        wait_for("no document left", lambda: not docs(control_plane, ns), TIMEOUT, 0.5)
        rec.sync()  # the recorder has seen every event up to now
    written = {name for kind, name, _ in rec.events if kind != "DELETED"}
    deleted = {name for kind, name, _ in rec.events if kind == "DELETED"}
    assert doc_name("gone") in deleted, rec.events
    assert written <= deleted, f"documents left behind: {rec.events}"
    if cascade == "foreground":
        assert written <= {doc_name("gone")}, f"orphan documents were written: {rec.events}"


def test_rolling_update_moves_the_document_to_the_new_digests(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, annotator: Annotator, kwok: Kwok
) -> None:
    want = group_pods("roll", 2, 3)
    old, new = expected_digests("roll", want, "1"), expected_digests("roll", want, "2")
    apply(kubectl, leaderworkerset(ns, "roll", replicas=2, size=3, tag="1"))
    wait_document(control_plane, ns, "roll", lambda _doc, t: all(sha in t for sha in old), "tag 1")
    before = {p["metadata"]["uid"] for p in pods(control_plane, ns)}

    apply(kubectl, leaderworkerset(ns, "roll", replicas=2, size=3, tag="2"))

    def rolled() -> bool:
        live = [p for p in pods(control_plane, ns) if not p["metadata"].get("deletionTimestamp")]
        return {p["metadata"]["name"] for p in live} == want and all(
            c["image"].endswith(":2") for p in live for c in p["spec"]["containers"]
        )

    wait_for("every Pod recreated with tag 2 by the rolling update", rolled, TIMEOUT * 2, 0.5)
    live = pods(control_plane, ns)
    assert not before & {p["metadata"]["uid"] for p in live}, "some Pods were not replaced"
    assert_stamped(control_plane, ns, "roll", live)
    doc = wait_document(
        control_plane, ns, "roll",
        lambda doc, t: covers(want, {"roll", "roll-0", "roll-1"})(doc, t)
        and all(sha in t for sha in new) and not any(sha in t for sha in old),
        "only the tag-2 digests",
    )  # fmt: skip
    assert doc

    def updated() -> bool:
        cur = get(control_plane, f"{LWS_API}/namespaces/{ns}/leaderworkersets/roll") or {}
        st = cur.get("status", {})
        return bool(st.get("updatedReplicas") == 2 and st.get("readyReplicas") == 2)

    # The controller itself saw the update through (kwok's Pod statuses made it possible).
    wait_for("the LWS's status: 2 updated, 2 ready", updated, TIMEOUT, 0.5)


# -- under the provenance guard (docs/provenance-guard.md) ---------------------------------

GUARD = REPO_ROOT / "manifests" / "provenance"


@pytest.fixture
def guard(kubectl: Kubectl) -> Iterator[None]:
    """The provenance guard (ValidatingAdmissionPolicy + binding) applied as
    shipped; removed after the test, so that no other module runs under it."""
    if not (GUARD / "kustomization.yaml").is_file():
        pytest.skip("the provenance guard (manifests/provenance) is not in this tree")
    kubectl("apply", "-k", str(GUARD))
    try:
        yield
    finally:
        kubectl("delete", "-k", str(GUARD), "--ignore-not-found")


@pytest.mark.usefixtures("guard")
def test_the_real_controllers_edges_pass_the_provenance_guard(
    control_plane: ControlPlane, kubectl: Kubectl, ns: str, lws_controller: Lws
) -> None:
    """Every controller reference of the LWS chain is set by a real controller with
    its real RBAC (LWS's ServiceAccount: leader and worker StatefulSets; Kubernetes'
    StatefulSet controller: the Pods), and the guard lets each of them through; the
    same reference written by an identity without `update` on the owner's
    finalizers is refused, so the guard is really in force."""
    # A tenant who may create StatefulSets, but not update an LWS's finalizers.
    tenant = control_plane.issue_identity(f"tenant-{ns}")
    bind_rules(kubectl, tenant.user, f"tenant-{ns}",
               [{"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["create"]}],
               namespace=ns)  # fmt: skip
    forged = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "forged", "namespace": ns, "ownerReferences": [{
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "name": "proven", "uid": "00000000-0000-0000-0000-000000000000",
            "controller": True}]},
        "spec": {"serviceName": "forged", "selector": {"matchLabels": {"app": "forged"}},
                 "template": {"metadata": {"labels": {"app": "forged"}},
                              "spec": {"containers": [{"name": "main", "image": "x:1"}]}}},
    }  # fmt: skip

    def refused() -> str | None:
        out = kubectl("create", "--dry-run=server", "-f", "-", kubeconfig=tenant.kubeconfig,
                      input=json.dumps(forged), check=False)  # fmt: skip
        return out.stderr if out.returncode != 0 and "finalizers" in out.stderr else None

    # The policy and the tenant's RBAC take effect through informers: wait for both,
    # so that everything below happens with the guard in force.
    message = wait_for("the guard to refuse the tenant's forged reference", refused, TIMEOUT)
    assert "aibom-rollup-provenance" in message, message

    apply(kubectl, leaderworkerset(ns, "proven", replicas=2, size=3))
    wait_pods(control_plane, ns, group_pods("proven", 2, 3))
    text = lws_controller.log_path.read_text(errors="replace")
    assert "aibom-rollup-provenance" not in text, "the guard refused the LWS controller"


def _disaggregatedset_schema(cp: ControlPlane) -> str:
    crd = cp.request(
        "GET",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
        "disaggregatedsets.disaggregatedset.x-k8s.io",
    )
    assert crd.ok, crd.body[:500]
    return json.dumps(crd.json()["spec"]["versions"])


def test_stopping_it_puts_the_vendored_crds_back(
    control_plane: ControlPlane, lws_controller: Lws
) -> None:
    """Last in this module. While the controller runs, its release's CRDs stand;
    stopped, the vendored ones are back for the next module on this control plane
    (v0.9.0's DisaggregatedSet has no `spec.slices`: a later module's object lost
    it to pruning when they were not)."""
    assert '"slices"' not in _disaggregatedset_schema(control_plane)  # the release's
    control_plane.stop_component("lws")
    assert "lws" not in control_plane.running_components
    assert '"slices"' in _disaggregatedset_schema(control_plane)
