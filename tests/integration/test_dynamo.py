"""The real Dynamo operator in the loop, on both of its providers.

Nothing of Dynamo's chains is played: the operator (deploy/operator at
df888f68, built by tests/controlplane/components/dynamo.py and started by the
``components`` fixture as its ServiceAccount, with the ClusterRole of its
``config/rbac/role.yaml`` plus the rules that file lacks, its webhooks on
loopback) turns Dynamo's own sample graph (``vllm-v1alpha1-disagg.yaml``) into

- on the **Grove** provider (Grove runs, the graph does not opt out):
  DynamoGraphDeployment -> PodCliqueSet -> PodClique -> Pod, the last two made
  by the real Grove operator;
- on the **component** provider (``nvidia.com/enable-grove: "false"``):
  DynamoGraphDeployment -> DynamoComponentDeployment -> Deployment, then the
  real kube-controller-manager's ReplicaSet -> Pod;
- on the component provider with **multinode** workers (the same graph with
  ``multinode: {nodeCount: 2}`` on its two workers, as Dynamo's own
  ``disagg-multinode.yaml`` sample sets them; the v1alpha1 field is the same):
  DynamoGraphDeployment -> DynamoComponentDeployment -> LeaderWorkerSet (and a
  Volcano PodGroup beside it), then the real LWS controller's leader
  StatefulSet -> leader Pod -> worker StatefulSet -> worker Pod. The operator
  takes this path only when the LWS and Volcano APIs are served: the ``lws``
  component runs the real LWS controller, the ``volcano`` component serves
  Volcano's PodGroup CRD and binds the Pods that name the ``volcano`` scheduler
  (tests/controlplane/components/volcano.py says what of Volcano is not run).

Our webhook and annotator run as shipped; kube-scheduler binds the Pods to kwok's
fake Nodes and kwok's Stages write their statuses with digests
(tests/controlplane/components/kwok.py).
Roll-up and forgery run in a guarded and in an unguarded namespace
(test_grove.py says what each means).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from aibom_core.objects import Obj
from tests.controlplane import Component, ControlPlane, Kubectl
from tests.controlplane.components.dynamo import (
    APP_VERSION,
    CLUSTER_ROLE,
    MISSING_RULES,
    NAMESPACE,
    SERVICE_ACCOUNT,
    WEBHOOKS,
    built_source_facts,
    operator_configuration,
    release,
)
from tests.integration.operators import (
    Scene,
    apply_all,
    controller_of,
    edge,
    example,
    fixtures,
    forge_into,
    listed,
    runs_as,
    wait_documents,
    wait_pods,
)
from tests.integration.support import docs, get, items, owned, stamp

pytestmark = [pytest.mark.integration, pytest.mark.components("kwok", "lws", "volcano", "dynamo")]

SAMPLE = "dynamo/examples/vllm-v1alpha1-disagg.yaml"
SERVICES = ("Frontend", "VllmDecodeWorker", "VllmPrefillWorker")
WORKERS = ("VllmDecodeWorker", "VllmPrefillWorker")
GROVE_GRAPH, COMPONENT_GRAPH, MULTINODE_GRAPH = "vllm-disagg", "vllm-disagg-cd", "vllm-disagg-mn"
#: Pods: one per service on each single-node graph; on the multinode graph the
#: Frontend's one and a leader and a worker per multinode worker.
POD_COUNT = 2 * len(SERVICES) + 1 + 2 * len(WORKERS)


def graphs(ns: str) -> list[Obj]:
    """Dynamo's sample three times: as shipped (the Grove provider), renamed and
    opted out of Grove (the component provider), and that with its two workers on
    two nodes each (the component provider's multinode path). Its images say
    `${VERSION}`, a placeholder the user fills in: the operator's version here."""
    (grove,) = example(SAMPLE, ns)
    text = json.dumps(grove).replace("${VERSION}", APP_VERSION)
    grove = json.loads(text)
    component = json.loads(text)
    component["metadata"]["name"] = COMPONENT_GRAPH
    component["metadata"]["annotations"] = {"nvidia.com/enable-grove": "false"}
    multinode = json.loads(json.dumps(component))
    multinode["metadata"]["name"] = MULTINODE_GRAPH
    for worker in WORKERS:
        multinode["spec"]["services"][worker]["multinode"] = {"nodeCount": 2}
    return [grove, component, multinode]


def path(ns: str, resource: str, name: str = "") -> str:
    group = {"dynamographdeployments": "nvidia.com/v1alpha1",
             "dynamocomponentdeployments": "nvidia.com/v1alpha1",
             "podcliquesets": "grove.io/v1alpha1", "podcliques": "grove.io/v1alpha1",
             "leaderworkersets": "leaderworkerset.x-k8s.io/v1",
             "podgroups": "scheduling.volcano.sh/v1beta1", "statefulsets": "apps/v1",
             "deployments": "apps/v1", "replicasets": "apps/v1"}[resource]  # fmt: skip
    return f"/apis/{group}/namespaces/{ns}/{resource}" + (f"/{name}" if name else "")


def run_graphs(s: Scene) -> tuple[dict[str, Obj], list[Obj]]:
    """Apply the graphs as a user would; (graphs by name, all their Pods)."""
    roots = {g["metadata"]["name"]: g for g in apply_all(s.kubectl, graphs(s.ns))}
    pods = wait_pods(
        s.cp, s.ns, POD_COUNT, lambda p: not p["metadata"]["name"].startswith("forged")
    )
    return roots, pods


def documents_of(roots: dict[str, Obj], pods: list[Obj]) -> dict[str, set[str]]:
    """Each graph's document, and the Pods whose digests it must report."""
    return {
        f"aibom-dynamographdeployment-{g}": {
            p["metadata"]["name"] for p in pods if graph_of(p) == g
        }
        for g in roots
    }


def graph_of(pod: Obj) -> str:
    labels = pod["metadata"].get("labels") or {}
    name: str = labels["nvidia.com/dynamo-graph-deployment-name"]
    return name


# -- fixtures -----------------------------------------------------------------------------

operator, webhook, guard, s = fixtures("dynamo")


# -- the operator itself ------------------------------------------------------------------


def test_operator_runs_as_its_service_account_with_its_release_rbac(
    kubectl: Kubectl, operator: Component
) -> None:
    can = runs_as(
        kubectl, operator, namespace=NAMESPACE, service_account=SERVICE_ACCOUNT,
        binding="dynamo-kubernetes-operator-manager-rolebinding",
    )  # fmt: skip
    # The ClusterRole of config/rbac/role.yaml, plus exactly the rules it lacks.
    (shipped,) = [d for d in release() if d["kind"] == "ClusterRole"
                  and d["metadata"]["name"] == CLUSTER_ROLE]  # fmt: skip
    live = json.loads(kubectl("get", "clusterrole", CLUSTER_ROLE, "-o", "json").stdout)
    assert live["rules"] == [*shipped["rules"], *MISSING_RULES]
    for resource in ("dynamographdeployments", "dynamocomponentdeployments"):
        assert can("update", f"{resource}.nvidia.com", "--subresource=finalizers"), resource
    assert can("create", "podcliquesets.grove.io")
    assert not can("create", "pods")  # Dynamo makes none itself
    assert not can("create", "clusterrolebindings")
    assert not can("bind", "clusterroles.rbac.authorization.k8s.io/cluster-admin")
    assert not can("delete", "namespaces")


def test_what_is_spelled_out_from_the_chart_matches_the_operator_source() -> None:
    """The chart is not in the source tree, so its webhook configurations and its
    OperatorConfiguration are written out in components/dynamo.py: every webhook
    path must be one the operator registers, and every configuration key one its
    OperatorConfiguration type has (a drift of either fails here)."""
    facts = built_source_facts()
    assert sorted(path for _, _, path, *_ in WEBHOOKS) == facts["webhookPaths"]

    def keys(value: Any) -> set[str]:
        if not isinstance(value, dict):
            return set()
        return set(value) | set().union(*(keys(v) for v in value.values()))

    config = operator_configuration()
    assert keys(config) - {"apiVersion", "kind"} <= set(facts["configKeys"])


def test_graphs_make_the_real_shapes(
    control_plane: ControlPlane, kubectl: Kubectl, operator: Component, namespace: str
) -> None:
    """In a namespace we do not watch: what Dynamo (and Grove and LWS under it) make
    of the sample, each link a controller reference with blockOwnerDeletion
    (controller-runtime's SetControllerReference), names as the operators give them."""
    ns = namespace
    grove_graph, *component_graphs = apply_all(kubectl, graphs(ns))
    # Its defaulting webhook stamped the operator's version (served on loopback).
    annotations = grove_graph["metadata"]["annotations"]
    assert annotations["nvidia.com/dynamo-operator-origin-version"] == APP_VERSION
    pods = wait_pods(control_plane, ns, POD_COUNT, lambda p: True)

    def by_name(resource: str) -> dict[str, Obj]:
        return {o["metadata"]["name"]: o for o in items(control_plane, path(ns, resource))}

    # Grove provider: the PodCliqueSet is named after the graph, one PodClique per service.
    pcs = by_name("podcliquesets")
    assert {n: edge(p) for n, p in pcs.items()} == {
        GROVE_GRAPH: ("DynamoGraphDeployment", GROVE_GRAPH, True)
    }
    cliques = by_name("podcliques")
    assert {n: edge(c) for n, c in cliques.items()} == {
        f"{GROVE_GRAPH}-0-{svc.lower()}": ("PodCliqueSet", GROVE_GRAPH, True) for svc in SERVICES
    }
    # Component provider: one DynamoComponentDeployment per service of each graph,
    # workers with a hash of the worker spec.
    dcds = by_name("dynamocomponentdeployments")
    of_graph = {
        g: {n for n, d in dcds.items() if edge(d) == ("DynamoGraphDeployment", g, True)}
        for g in (COMPONENT_GRAPH, MULTINODE_GRAPH)
    }
    assert of_graph[COMPONENT_GRAPH] | of_graph[MULTINODE_GRAPH] == set(dcds)
    for graph, names in of_graph.items():
        labels = {n: dcds[n]["metadata"]["labels"] for n in names}
        assert {v["nvidia.com/dynamo-component"] for v in labels.values()} == set(SERVICES)
        for name, label in labels.items():
            worker = label.get("nvidia.com/dynamo-worker-hash")
            svc = label["nvidia.com/dynamo-component"].lower()
            assert name == f"{graph}-{svc}" + (f"-{worker}" if worker else ""), name
    multinode = {n for n in dcds if (dcds[n]["spec"].get("multinode") or {}).get("nodeCount")}
    assert {dcds[n]["metadata"]["labels"]["nvidia.com/dynamo-component"] for n in multinode} == (
        set(WORKERS)
    )
    assert multinode <= of_graph[MULTINODE_GRAPH]
    # A Deployment of the same name per single-node component; per multinode one, a
    # LeaderWorkerSet and a Volcano PodGroup named `<component>-<instance>`.
    deployments, lwss, groups = (
        by_name("deployments"), by_name("leaderworkersets"), by_name("podgroups")
    )  # fmt: skip
    assert {n: edge(d) for n, d in deployments.items()} == {
        n: ("DynamoComponentDeployment", n, True) for n in set(dcds) - multinode
    }
    for made in (lwss, groups):
        assert {n: edge(x) for n, x in made.items()} == {
            f"{n}-0": ("DynamoComponentDeployment", n, True) for n in multinode
        }
    # The real LWS controller: a leader StatefulSet per LeaderWorkerSet, its leader
    # Pod `<lws>-0`, and a worker StatefulSet of that name owned by the leader Pod.
    statefulsets = by_name("statefulsets")
    assert {n: edge(x) for n, x in statefulsets.items()} == {
        **{n: ("LeaderWorkerSet", n, True) for n in lwss},
        **{f"{n}-0": ("Pod", f"{n}-0", True) for n in lwss},
    }
    for pod in pods:
        ref = controller_of(pod)
        assert ref is not None and ref["blockOwnerDeletion"], pod["metadata"]
        if graph_of(pod) == GROVE_GRAPH:
            assert ref["uid"] == cliques[ref["name"]]["metadata"]["uid"]
        elif ref["kind"] == "StatefulSet":
            assert graph_of(pod) == MULTINODE_GRAPH, pod["metadata"]
            assert ref["uid"] == statefulsets[ref["name"]]["metadata"]["uid"]
            # Dynamo names Volcano's scheduler; the volcano component's bound it.
            assert pod["spec"]["schedulerName"] == "volcano", pod["metadata"]["name"]
            assert pod["spec"].get("nodeName"), pod["metadata"]["name"]
        else:
            assert ref["kind"] == "ReplicaSet"
            rs = get(control_plane, path(ns, "replicasets", ref["name"]))
            owner = edge(rs) if rs is not None else None
            assert owner is not None and owner[0] == "Deployment" and owner[1] in deployments
    assert {(controller_of(d) or {}).get("uid") for d in dcds.values()} == {
        g["metadata"]["uid"] for g in component_graphs
    }


# -- roll-up and provenance on the real chains ------------------------------------------------


def test_both_providers_roll_up_to_the_graph_with_every_pods_digest(s: Scene) -> None:
    """Every Pod stamped with its graph, proven, and one document per graph with every
    Pod's digest, listing what it absorbed: the PodCliqueSet; the component
    deployments and their Deployments; and on the multinode graph also the
    LeaderWorkerSets and their StatefulSets (the workers' under their leader Pods)."""
    roots, pods = run_graphs(s)
    for pod in pods:
        root = roots[graph_of(pod)]
        assert stamp(pod) == {
            "aibom.dev/rollup": "rolled-up",
            "aibom.dev/root": f"DynamoGraphDeployment/{root['metadata']['name']}",
            "aibom.dev/root-uid": root["metadata"]["uid"],
        }, pod["metadata"]
        assert "aibom.dev/edge-proof" in pod["metadata"]["annotations"], pod["metadata"]["name"]
    want = documents_of(roots, pods)
    found = wait_documents(s, want)
    assert owned(found[f"aibom-dynamographdeployment-{GROVE_GRAPH}"]) == [
        f"PodCliqueSet/{GROVE_GRAPH}"
    ]
    dcds = {
        d["metadata"]["name"]: (controller_of(d) or {}).get("name")
        for d in items(s.cp, path(s.ns, "dynamocomponentdeployments"))
    }
    deployments = {d["metadata"]["name"] for d in items(s.cp, path(s.ns, "deployments"))}
    lwss = sorted(x["metadata"]["name"] for x in items(s.cp, path(s.ns, "leaderworkersets")))
    sets = sorted(x["metadata"]["name"] for x in items(s.cp, path(s.ns, "statefulsets")))
    assert len(lwss) == len(WORKERS) and len(sets) == 2 * len(WORKERS)
    for graph, extra in ((COMPONENT_GRAPH, []), (MULTINODE_GRAPH, [
        *(f"LeaderWorkerSet/{n}" for n in lwss), *(f"StatefulSet/{n}" for n in sets)
    ])):  # fmt: skip
        mine = sorted(n for n, g in dcds.items() if g == graph)
        assert owned(found[f"aibom-dynamographdeployment-{graph}"]) == [
            *(f"Deployment/{n}" for n in mine if n in deployments),
            *(f"DynamoComponentDeployment/{n}" for n in mine),
            *extra,
        ], graph
    for name, doc in found.items():
        props = {p["name"]: p["value"] for p in doc["metadata"]["component"]["properties"]}
        assert props["aibom.provenance.guarded"] == str(s.guarded).lower(), name
    assert set(docs(s.cp, s.ns)) == set(want)  # nothing it absorbed kept a document


def test_a_pod_only_tenant_cannot_forge_into_dynamo_chains(s: Scene) -> None:
    """A tenant who may create Pods and read everything copies a controller reference
    to each kind of the three chains: refused by the guard, or `unproven` and
    absorbed nowhere without it."""
    roots, pods = run_graphs(s)

    def first(resource: str) -> Obj:
        found = listed(s.cp, path(s.ns, resource))
        assert found, resource
        return found[0]

    owners = [
        roots[GROVE_GRAPH], first("podcliquesets"), first("podcliques"),
        roots[COMPONENT_GRAPH], first("dynamocomponentdeployments"), first("deployments"),
        first("replicasets"), roots[MULTINODE_GRAPH], first("leaderworkersets"),
        first("statefulsets"),
    ]  # fmt: skip
    admitted = forge_into(s, owners)
    assert len(admitted) == (0 if s.guarded else len(owners))
    wait_documents(s, documents_of(roots, pods))
