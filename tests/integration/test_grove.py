"""The real Grove operator in the loop, under the provenance guard and without it.

Nothing of Grove's chains is played: the operator (github.com/ai-dynamo/grove
at fcc3b3bb, built by tests/controlplane/components/grove.py and started by the
``components`` fixture as ``grove-system/grove-operator`` with its release's
ClusterRole, its webhooks on loopback) makes PodCliques, PodCliqueScalingGroups,
PodGangs and Pods from Grove's own samples. Our webhook and annotator run as
shipped; kube-scheduler binds the Pods (Grove's ``default-scheduler`` profile)
to kwok's fake Nodes once Grove lifts their scheduling gates, and kwok's Stages
write their statuses with digests (tests/controlplane/components/kwok.py).

The roll-up tests run twice: in a **guarded** namespace (the shipped
ValidatingAdmissionPolicy bound there) and an **unguarded** one (opted out of
the guard: the webhook's SubjectAccessReview and edge-proof are the only
proof). Grove's ClusterRole grants no ``*/finalizers``: under the provenance
rule that asked for the finalizers alone every PodClique it made was refused in the guarded
namespace and every Pod was ``unproven`` in the other.
"""

from __future__ import annotations

import json

import pytest

from aibom_core.objects import Obj
from tests.controlplane import Component, ControlPlane, Kubectl
from tests.controlplane.components.grove import (
    BUILD,
    CLUSTER_ROLE,
    COMMIT,
    NAMESPACE,
    SERVICE_ACCOUNT,
)
from tests.controlplane.components.kwok import pod_digests
from tests.controlplane.gobuild import ensure
from tests.integration.operators import (
    Scene,
    apply_all,
    controller_of,
    edge,
    example,
    fixtures,
    forge_into,
    live_pods,
    runs_as,
    wait_documents,
    wait_pods,
)
from tests.integration.support import docs, get, items, stamp

pytestmark = [pytest.mark.integration, pytest.mark.components("kwok", "grove")]

GROVE = "/apis/grove.io/v1alpha1"
#: Grove's samples (tests/upstream/grove/examples): one standalone PodClique, and
#: two PodCliqueScalingGroups of a leader and a worker PodClique each.
DIRECT = "grove/examples/single-node-aggregated.yaml"
SCALING = "grove/examples/multi-node-disaggregated.yaml"
#: The Pods Grove makes of them: 2 model workers; prefill 2 x (1 leader + 4
#: workers) and decode 1 x (1 + 2).
PODS = {"single-node-aggregated": 2, "multinode-disaggregated": 2 * 5 + 1 * 3}


def run_samples(s: Scene) -> tuple[dict[str, Obj], list[Obj]]:
    """Apply both samples as a user would; (PodCliqueSets by name, all their Pods)."""
    applied = apply_all(s.kubectl, [*example(DIRECT, s.ns), *example(SCALING, s.ns)])
    roots = {p["metadata"]["name"]: p for p in applied}
    assert set(roots) == set(PODS)
    total = sum(PODS.values())
    return roots, wait_pods(s.cp, s.ns, total, lambda p: not p["metadata"]["name"].startswith("f"))


def root_of(pod: Obj) -> str:
    """The sample a Pod of Grove's belongs to (its name starts with the PodCliqueSet's)."""
    (root,) = [r for r in PODS if pod["metadata"]["name"].startswith(r + "-")]
    return root


# -- fixtures -----------------------------------------------------------------------------

operator, webhook, guard, s = fixtures("grove")


# -- the operator itself ------------------------------------------------------------------


def test_operator_runs_as_its_service_account_with_its_release_rbac(
    kubectl: Kubectl, operator: Component
) -> None:
    can = runs_as(
        kubectl,
        operator,
        namespace=NAMESPACE,
        service_account=SERVICE_ACCOUNT,
        binding=CLUSTER_ROLE,
    )
    binding = json.loads(kubectl("get", "clusterrolebinding", CLUSTER_ROLE, "-o", "json").stdout)
    assert binding["roleRef"]["name"] == CLUSTER_ROLE
    # Why the provenance rule counts update on the owner: Grove holds it, and no finalizers.
    for resource in ("podcliquesets", "podcliquescalinggroups", "podcliques"):
        assert can("update", f"{resource}.grove.io"), resource
        assert not can("update", f"{resource}.grove.io", "--subresource=finalizers"), resource
    assert can("create", "pods")
    assert not can("create", "clusterrolebindings")
    assert not can("update", "deployments.apps")
    release = (ensure(BUILD) / "release.yaml").read_text()
    assert f"(commit {COMMIT})" in release.splitlines()[0]


def test_samples_make_grove_shapes(
    control_plane: ControlPlane, kubectl: Kubectl, operator: Component, namespace: str
) -> None:
    """Grove's own samples, in a namespace we do not watch: the shapes the operator
    makes, each link a controller reference with blockOwnerDeletion (controller-runtime's
    SetControllerReference), names as Grove gives them."""
    ns = namespace
    direct, _ = apply_all(kubectl, [*example(DIRECT, ns), *example(SCALING, ns)])
    # Its defaulting webhook ran (served on loopback, registered as released).
    assert direct["spec"]["template"]["terminationDelay"] == "4h0m0s"
    pods = wait_pods(control_plane, ns, sum(PODS.values()), lambda p: True)

    def by_name(resource: str) -> dict[str, Obj]:
        found = items(control_plane, f"{GROVE}/namespaces/{ns}/{resource}")
        return {o["metadata"]["name"]: o for o in found}

    cliques, groups = by_name("podcliques"), by_name("podcliquescalinggroups")
    pcs = "multinode-disaggregated"
    assert {n: edge(g) for n, g in groups.items()} == {
        f"{pcs}-0-{g}": ("PodCliqueSet", pcs, True) for g in ("prefill", "decode")
    }
    layout = {"prefill": (2, ("pleader", "pworker")), "decode": (1, ("dleader", "dworker"))}
    assert {n: edge(c) for n, c in cliques.items()} == {
        "single-node-aggregated-0-model-worker": ("PodCliqueSet", "single-node-aggregated", True),
        **{
            f"{pcs}-0-{g}-{i}-{c}": ("PodCliqueScalingGroup", f"{pcs}-0-{g}", True)
            for g, (replicas, names) in layout.items()
            for i in range(replicas)
            for c in names
        },
    }
    for pod in pods:
        ref = controller_of(pod)
        assert ref is not None and (ref["kind"], ref["blockOwnerDeletion"]) == ("PodClique", True)
        assert ref["uid"] == cliques[ref["name"]]["metadata"]["uid"]
        assert pod["metadata"]["name"].startswith(ref["name"] + "-")


# -- roll-up and provenance on the real chains ------------------------------------------------


def test_both_shapes_roll_up_to_their_podcliqueset_with_every_pods_digest(s: Scene) -> None:
    """PodCliqueSet -> PodClique -> Pod and PodCliqueSet -> PodCliqueScalingGroup ->
    PodClique -> Pod: every Pod stamped with its PodCliqueSet (a root: what a user
    applies), proven, and one document per PodCliqueSet with every Pod's digest."""
    roots, pods = run_samples(s)
    for pod in pods:
        root = roots[root_of(pod)]
        assert stamp(pod) == {
            "aibom.dev/rollup": "rolled-up",
            "aibom.dev/root": f"PodCliqueSet/{root['metadata']['name']}",
            "aibom.dev/root-uid": root["metadata"]["uid"],
        }, pod["metadata"]
        # The webhook's SubjectAccessReview proved it (Grove may update the PodClique).
        assert "aibom.dev/edge-proof" in pod["metadata"]["annotations"], pod["metadata"]["name"]
    want = {
        f"aibom-podcliqueset-{n}": {p["metadata"]["name"] for p in pods if root_of(p) == n}
        for n in PODS
    }
    found = wait_documents(s, want)
    for name, doc in found.items():
        text = json.dumps(doc)
        of_root = [p for p in pods if p["metadata"]["name"] in want[name]]
        assert all(d in text for p in of_root for d in pod_digests(p)), name
        props = {p["name"]: p["value"] for p in doc["metadata"]["component"]["properties"]}
        assert props["aibom.provenance.guarded"] == str(s.guarded).lower(), name
    assert set(docs(s.cp, s.ns)) == set(want)  # nothing else got a document


def test_a_pod_only_tenant_cannot_forge_into_grove_chains(s: Scene) -> None:
    """A tenant who may create Pods and read everything copies a controller reference
    to each kind of Grove's chains: refused by the guard, or `unproven` and absorbed
    nowhere without it."""
    roots, pods = run_samples(s)

    def obj(resource: str, name: str) -> Obj:
        found = get(s.cp, f"{GROVE}/namespaces/{s.ns}/{resource}/{name}")
        assert found is not None, name
        return found

    owners = [
        roots["single-node-aggregated"],
        obj("podcliques", "single-node-aggregated-0-model-worker"),
        obj("podcliquescalinggroups", "multinode-disaggregated-0-prefill"),
        obj("podcliques", "multinode-disaggregated-0-decode-0-dworker"),
    ]
    admitted = forge_into(s, owners)
    if s.guarded:
        assert not admitted
        assert not [p for p in live_pods(s.cp, s.ns) if p["metadata"]["name"].startswith("forged")]
    else:
        assert len(admitted) == len(owners)
    want = {
        f"aibom-podcliqueset-{n}": {p["metadata"]["name"] for p in pods if root_of(p) == n}
        for n in PODS
    }
    wait_documents(s, want)  # every real Pod's digest, the forged ones listed, none absorbed
