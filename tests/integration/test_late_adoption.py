"""Late adoption on the real control plane: the webhook and the annotator agree, no fight.

A Deployment whose ReplicaSet and Pods exist is adopted after the fact (it
gets a controller reference to a DynamoComponentDeployment), the adopter is
adopted in turn by a DynamoGraphDeployment, and the Deployment is released
again. Every time, the stamps of the Deployment (the webhook, on the UPDATE),
its ReplicaSet (the deployment controller's copy, mirrored) and its Pods (the
annotator's repair, which the webhook then admits) must reach the one right
answer within seconds, and stay there: no repair undone, none repeated (the
annotator's ledger counts an object repaired twice as contested and leaves
it wrong), no write loop.

Everything real: kube-controller-manager's deployment and replicaset
controllers; the webhook as shipped (owner index, 5 s owner cache, edge
proofs); the annotator under its shipped ClusterRole with the default
provenance rule and the webhook's key (the namespace is not guarded, so
the proofs are what makes an edge count).
"""

from __future__ import annotations

import json
import time

import pytest

from aibom_core.objects import Obj
from tests.controlplane import ControlPlane, Kubectl
from tests.integration.support import (
    LABEL_KEY,
    Annotator,
    StartWebhook,
    Webhook,
    dcd,
    deployment,
    dgd,
    docs,
    enabled_namespace,
    get,
    kubectl_apply,
    merge_patch,
    owner_ref,
    settle,
    stamp,
    wait_for,
    wait_registered,
)

# The annotator as test_provenance.py runs it: the shipped ClusterRole, the default
# provenance rule, the webhook's key (over this module's `ns` and `webhook`).
from tests.integration.test_provenance import UNGUARDED, annotator  # noqa: F401

pytestmark = pytest.mark.integration

CONTESTED = {"reason": "contested"}


# As shipped (the owner index, then the 5 s owner cache), and the owner cache alone
# (the configuration the fight was first reported with).
@pytest.fixture(scope="module", params=["index", "cache"])
def webhook(start_webhook: StartWebhook, request: pytest.FixtureRequest) -> Webhook:
    which = str(request.param)
    return start_webhook(
        user=f"aibom-webhook-adoption-{which}",
        name=f"aibom-rollup-adoption-{which}",
        selector={"aibom-test.dev/adoption": which},
        args=("--no-owner-watch",) if which == "cache" else (),
    )


@pytest.fixture
def ns(webhook: Webhook, kubectl: Kubectl, namespace: str) -> str:
    which = webhook.name.rsplit("-", 1)[1]
    enabled_namespace(
        kubectl,
        namespace,
        f"aibom-test.dev/adoption={which}",
        UNGUARDED,
        f"{LABEL_KEY}={namespace}",
    )
    wait_registered(kubectl, namespace)
    return namespace


def stamps(cp: ControlPlane, ns: str) -> dict[str, dict[str, str]]:
    """`Kind/name` -> stamp of the Deployments, ReplicaSets and Pods of the namespace."""
    out: dict[str, dict[str, str]] = {}
    for kind, path in (
        ("Deployment", f"/apis/apps/v1/namespaces/{ns}/deployments"),
        ("ReplicaSet", f"/apis/apps/v1/namespaces/{ns}/replicasets"),
        ("Pod", f"/api/v1/namespaces/{ns}/pods"),
    ):
        for obj in (get(cp, path) or {}).get("items", []):
            out[f"{kind}/{obj['metadata']['name']}"] = stamp(obj)
    return out


def covered_by(root: Obj, *, root_itself: str = "") -> dict[str, str]:
    """The stamp of an object that `root` covers (`root_itself`: that object's kind/name
    when it is the root)."""
    ref = f"{root['kind']}/{root['metadata']['name']}"
    return {
        "aibom.dev/root": ref,
        "aibom.dev/root-uid": root["metadata"]["uid"],
        "aibom.dev/rollup": "root" if root_itself == ref else "rolled-up",
    }


def converge(cp: ControlPlane, ns: str, root: Obj, what: str, *, n: int) -> float:
    """Seconds until the Deployment, its ReplicaSet and its `n` Pods all carry the stamp
    `root` gives them (the ReplicaSet mirrors the Deployment's `rollup`)."""
    began = time.monotonic()
    dep_is_root = root["kind"] == "Deployment"
    want_dep = covered_by(root, root_itself="Deployment/web" if dep_is_root else "")

    def agreed() -> dict[str, dict[str, str]] | None:
        now = stamps(cp, ns)
        objects = {k: v for k, v in now.items() if not k.startswith("Pod/probe-")}
        pods = [k for k in objects if k.startswith("Pod/")]
        rs = [k for k in objects if k.startswith("ReplicaSet/")]
        if len(pods) != n or len(rs) != 1:
            return None
        want = {k: covered_by(root) for k in pods}
        want["Deployment/web"] = want_dep
        want[rs[0]] = want_dep  # the mirror: the Deployment's own values
        return objects if objects == want else None

    try:
        wait_for(what, agreed, timeout=60)
    except BaseException:
        print("stamps now:", json.dumps(stamps(cp, ns), indent=1, sort_keys=True))
        raise
    return time.monotonic() - began


def steady(
    cp: ControlPlane, kubectl: Kubectl, ns: str, a: Annotator, root: Obj, *, since: int
) -> None:
    """Nothing moves once agreed: the deployment controller syncs the ReplicaSet again
    (it copies a new Deployment annotation onto it) and the annotator judges
    everything it saw (`settle`); every stamp is as it was, and no object was
    repaired twice since log record `since` (which the annotator's ledger calls
    contested), nor left alone as contested."""
    before = stamps(cp, ns)
    touch = f"aibom-test.dev/touch={time.monotonic_ns()}"
    kubectl("annotate", "-n", ns, "deployment/web", touch, "--overwrite")
    key, value = touch.split("=")

    def copied() -> bool:
        items = (get(cp, f"/apis/apps/v1/namespaces/{ns}/replicasets") or {}).get("items", [])
        return any((r["metadata"].get("annotations") or {}).get(key) == value for r in items)

    wait_for("the deployment controller to copy the touch onto the ReplicaSet", copied)
    marker = settle(cp, kubectl, ns)["metadata"]["name"]
    after = stamps(cp, ns)
    assert {k: v for k, v in after.items() if marker not in k} == before
    assert a.metric("aibom_annotator_stamp_checks_skipped_total", CONTESTED) == 0, a.tail()
    repaired = [
        str(r.get("object")) for r in a.records()[since:] if r.get("msg") == "stamp repaired"
    ]
    twice = sorted({o for o in repaired if repaired.count(o) > 1})
    assert not twice, f"repaired more than once: {twice}\n{a.tail()}"
    root_name = root["metadata"]["name"]
    assert f"aibom-{root['kind'].lower()}-{root_name}" in docs(cp, ns)


def test_a_deployment_adopted_after_its_pods_exist_converges_without_a_fight(
    control_plane: ControlPlane,
    kubectl: Kubectl,
    ns: str,
    annotator: Annotator,  # noqa: F811 - the fixture imported above
) -> None:
    cp = control_plane
    web = kubectl_apply(kubectl, deployment(ns, "web", replicas=2))
    took = converge(cp, ns, web, "the Deployment's own stamps", n=2)
    wait_for("its document", lambda: "aibom-deployment-web" in docs(cp, ns))
    print(f"created: {took:.1f} s")

    # Late adoption: the Deployment gets a controller reference to a component.
    comp = kubectl_apply(kubectl, dcd(ns, "comp"))
    since = len(annotator.records())
    merge_patch(kubectl, ns, "deployment/web", {"metadata": {"ownerReferences": [owner_ref(comp)]}})
    took = converge(cp, ns, comp, "every stamp moved to the component", n=2)
    print(f"adopted by the component: {took:.1f} s")
    steady(cp, kubectl, ns, annotator, comp, since=since)
    wait_for(
        "the Deployment's own document gone", lambda: "aibom-deployment-web" not in docs(cp, ns)
    )

    # The adopter is adopted in turn: two hops above the Deployment change at once.
    graph = kubectl_apply(kubectl, dgd(ns, "graph"))
    since = len(annotator.records())
    merge_patch(
        kubectl,
        ns,
        "dynamocomponentdeployment/comp",
        {"metadata": {"ownerReferences": [owner_ref(graph)]}},
    )
    took = converge(cp, ns, graph, "every stamp moved to the graph", n=2)
    print(f"adopted by the graph: {took:.1f} s")
    steady(cp, kubectl, ns, annotator, graph, since=since)

    # Released: the Deployment is its own root again.
    since = len(annotator.records())
    merge_patch(kubectl, ns, "deployment/web", {"metadata": {"ownerReferences": None}})
    fresh = get(cp, f"/apis/apps/v1/namespaces/{ns}/deployments/web")
    assert fresh is not None
    took = converge(
        cp, ns, {**fresh, "kind": "Deployment"}, "every stamp back to the Deployment", n=2
    )
    print(f"released: {took:.1f} s")
    steady(cp, kubectl, ns, annotator, {**fresh, "kind": "Deployment"}, since=since)
