"""Descendant closure and roots (docs/architecture.md), as tables over in-memory graphs."""

from __future__ import annotations

import base64
import gzip
import tracemalloc
from dataclasses import dataclass

import pytest

from aibom_core.document import (
    DATA_KEY_GZ,
    MAX_DOCUMENT_BYTES,
    MAX_NAME,
    PackedDocumentError,
    configmap_name,
    unpack,
)
from aibom_core.graph import build_graph
from aibom_core.kinds import GroupKind, default_registry
from aibom_core.objects import Obj
from aibom_core.rollup import inventory
from aibom_core.walk import Reason
from tests.unit.kobj import chain, dynamo_graph, mk

REG = default_registry()
GRAPH_LABEL = "nvidia.com/dynamo-graph-deployment-name"


def _dgd_dcd_deployment() -> list[Obj]:
    return dynamo_graph("g-decode", "7f")


def _tenant_pod() -> list[Obj]:
    objs = _dgd_dcd_deployment()
    tenant, tenant_rs = chain("Deployment/tenant", "ReplicaSet/tenant-1")
    # Carries the graph's label, but its chain goes elsewhere: labels are no authority.
    sneaky = mk("Pod", "tenant-1-x", tenant_rs, labels={GRAPH_LABEL: "g"})
    return [*objs, tenant, tenant_rs, sneaky]


def _stale_child() -> list[Obj]:
    old_dgd, dep = chain("DynamoGraphDeployment/g", "Deployment/g-frontend")
    new_dgd = mk("DynamoGraphDeployment", "g", gen=1)
    assert new_dgd["metadata"]["uid"] != old_dgd["metadata"]["uid"]
    return [new_dgd, dep]


def _lws() -> list[Obj]:
    lws, leader_sts, leader = chain("LeaderWorkerSet/l", "StatefulSet/l", "Pod/l-0")
    worker_sts = mk("StatefulSet", "l-0", leader)
    workers = [mk("Pod", f"l-0-{i}", worker_sts) for i in (1, 2)]
    return [lws, leader_sts, leader, worker_sts, *workers]


def _grove(scaling: bool) -> list[Obj]:
    if scaling:
        return chain(
            "DynamoGraphDeployment/g",
            "PodCliqueSet/g",
            "PodCliqueScalingGroup/g-0-sg",
            "PodClique/g-0-sg-0-w",
            "Pod/g-0-sg-0-w-abc",
        )
    return chain("DynamoGraphDeployment/g", "PodCliqueSet/g", "PodClique/g-0-w", "Pod/g-0-w-abc")


def _nim() -> list[Obj]:
    nim, dep, rs, pod = chain("NIMService/n", "Deployment/n", "ReplicaSet/n-1", "Pod/n-1-a")
    nim2, lws = chain("NIMService/m", "LeaderWorkerSet/m")
    return [nim, dep, rs, pod, nim2, lws]


def _cronjob() -> list[Obj]:
    cj, job, pod = chain("CronJob/nightly", "Job/nightly-29000", "Pod/nightly-29000-x")
    return [cj, job, pod]


def _unresolved_intermediate() -> list[Obj]:
    # A StatefulSet owned by a kind the reader cannot see: reported as its own root.
    return chain("LeaderWorkerSet/w", "StatefulSet/s", "Pod/s-0")[1:]


def _deep_lws_under_dcd() -> list[Obj]:
    return chain(
        "DynamoGraphDeployment/g",
        "DynamoComponentDeployment/g-w",
        "LeaderWorkerSet/g-w",
        "StatefulSet/g-w",
        "Pod/g-w-0",
        "StatefulSet/g-w-0",
        "Pod/g-w-0-1",
    )


@dataclass(frozen=True)
class Case:
    name: str
    objs: list[Obj]
    # root kind/name -> (rollup, owned kind/names in order, attributed pod names)
    roots: dict[str, tuple[str, list[str], list[str]]]
    unavailable: dict[GroupKind, Reason] | None = None


CASES = [
    Case(
        "DGD -> DCD -> Deployment: one root, two owned",
        _dgd_dcd_deployment(),
        {
            "DynamoGraphDeployment/g": (
                "root",
                ["Deployment/g-decode", "DynamoComponentDeployment/g-decode"],
                ["g-decode-7f-0", "g-decode-7f-1"],
            )
        },
    ),
    Case(
        "tenant pod with the graph label and a foreign chain is excluded",
        _tenant_pod(),
        {
            "DynamoGraphDeployment/g": (
                "root",
                ["Deployment/g-decode", "DynamoComponentDeployment/g-decode"],
                ["g-decode-7f-0", "g-decode-7f-1"],
            ),
            "Deployment/tenant": ("root", [], ["tenant-1-x"]),
        },
    ),
    Case(
        "owner re-created under the same name does not adopt the stale child",
        _stale_child(),
        {
            "DynamoGraphDeployment/g": ("root", [], []),
            "Deployment/g-frontend": ("unresolved", [], []),
        },
    ),
    Case(
        "LWS: StatefulSets owned, leader and worker pods attributed",
        _lws(),
        {
            "LeaderWorkerSet/l": (
                "root",
                ["StatefulSet/l", "StatefulSet/l-0"],
                ["l-0", "l-0-1", "l-0-2"],
            )
        },
    ),
    Case(
        "DGD -> DCD -> LWS: the worker pod 6 hops down is attributed",
        _deep_lws_under_dcd(),
        {
            "DynamoGraphDeployment/g": (
                "root",
                [
                    "DynamoComponentDeployment/g-w",
                    "LeaderWorkerSet/g-w",
                    "StatefulSet/g-w",
                    "StatefulSet/g-w-0",
                ],
                ["g-w-0", "g-w-0-1"],
            )
        },
    ),
    Case(
        "Grove direct clique: the PodCliqueSet listed, its PodCliques never",
        _grove(False),
        {"DynamoGraphDeployment/g": ("root", ["PodCliqueSet/g"], ["g-0-w-abc"])},
    ),
    Case(
        "Grove scaling group: nor its scaling groups",
        _grove(True),
        {"DynamoGraphDeployment/g": ("root", ["PodCliqueSet/g"], ["g-0-sg-0-w-abc"])},
    ),
    Case(
        "Grove alone: a PodCliqueSet a user applied is a root",
        chain(
            "PodCliqueSet/g",
            "PodCliqueScalingGroup/g-0-sg",
            "PodClique/g-0-sg-0-w",
            "Pod/g-0-sg-0-w-abc",
        ),
        {"PodCliqueSet/g": ("root", [], ["g-0-sg-0-w-abc"])},
    ),
    Case(
        "NIMService -> Deployment and -> LWS",
        _nim(),
        {
            "NIMService/m": ("root", ["LeaderWorkerSet/m"], []),
            "NIMService/n": ("root", ["Deployment/n"], ["n-1-a"]),
        },
    ),
    Case(
        "CronJob -> Job -> Pod",
        _cronjob(),
        {"CronJob/nightly": ("root", ["Job/nightly-29000"], ["nightly-29000-x"])},
    ),
    Case(
        "standalone DynamoComponentDeployment is its own root",
        [mk("DynamoComponentDeployment", "solo")],
        {"DynamoComponentDeployment/solo": ("root", [], [])},
    ),
    Case(
        "owner kind we cannot read: the child is reported as a root",
        _unresolved_intermediate(),
        {"StatefulSet/s": ("unresolved", [], ["s-0"])},
        unavailable={GroupKind("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): Reason.FORBIDDEN},
    ),
    Case(
        "owner of a kind the registry does not know: not an edge, the child is a root",
        chain("DynamoGraphDeployment/g", "Widget/w", "StatefulSet/s", "Pod/s-0"),
        {"DynamoGraphDeployment/g": ("root", [], []), "StatefulSet/s": ("root", [], ["s-0"])},
    ),
    Case("bare pod: no root", [mk("Pod", "debug")], {}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_inventory(case: Case) -> None:
    graph = build_graph(case.objs, REG, unavailable=case.unavailable)
    got = {
        e.ref.kind_name: (
            e.status.value,
            [f"{o['kind']}/{o['metadata']['name']}" for o in e.owned],
            [p["metadata"]["name"] for p in e.pods],
        )
        for e in inventory(graph)
    }
    assert got == case.roots


def test_every_object_belongs_to_at_most_one_root() -> None:
    objs = [*_tenant_pod(), *_lws(), *_cronjob(), *_nim()]
    counted: dict[str, int] = {}
    for entry in inventory(build_graph(objs, REG)):
        for o in (*entry.owned, *entry.pods):
            counted[o["metadata"]["uid"]] = counted.get(o["metadata"]["uid"], 0) + 1
    assert counted and set(counted.values()) == {1}


def test_members_agree_with_each_objects_own_walk() -> None:
    objs = [*_deep_lws_under_dcd(), *_tenant_pod()]
    graph = build_graph(objs, REG)
    for entry in inventory(graph):
        for o in (*entry.owned, *entry.pods):
            result = graph.resolve(o)
            assert result.root is not None and result.root.uid == entry.ref.uid


def test_upsert_and_remove_keep_edges_true() -> None:
    dep, rs, pod = chain("Deployment/d", "ReplicaSet/rs", "Pod/p")
    graph = build_graph([dep, rs, pod], REG)
    assert [e.ref.kind_name for e in inventory(graph)] == ["Deployment/d"]
    graph.remove(dep["metadata"]["uid"])
    assert inventory(graph) == []
    assert graph.parent_of(rs["metadata"]["uid"]) is None
    # Re-created with a new UID: the old ReplicaSet is not adopted.
    graph.upsert(mk("Deployment", "d", gen=1))
    (entry,) = inventory(graph)
    assert entry.pods == ()
    # The original comes back (same UID): the edge is valid again.
    graph.remove(mk("Deployment", "d", gen=1)["metadata"]["uid"])
    graph.upsert(dep)
    (entry,) = inventory(graph)
    assert [p["metadata"]["name"] for p in entry.pods] == ["p"]


def test_upsert_replaces_an_object_and_its_claims() -> None:
    a, b = mk("Deployment", "a"), mk("Deployment", "b")
    rs = mk("ReplicaSet", "rs", a)
    graph = build_graph([a, b, rs], REG)
    assert graph.children_of(a["metadata"]["uid"]) == [rs["metadata"]["uid"]]
    graph.upsert(mk("ReplicaSet", "rs", b))  # re-parented (orphaned and adopted)
    assert graph.children_of(a["metadata"]["uid"]) == []
    assert graph.children_of(b["metadata"]["uid"]) == [rs["metadata"]["uid"]]


def test_namespaces_never_cross() -> None:
    dep = mk("Deployment", "d", ns="a")
    rs = mk("ReplicaSet", "rs", dep, ns="b")  # a reference cannot cross namespaces
    graph = build_graph([dep, rs], REG)
    assert graph.parent_of(rs["metadata"]["uid"]) is None
    assert graph.resolve(rs).failure is not None


def test_inventory_filters_namespaces() -> None:
    objs = [mk("Deployment", "d", ns="a"), mk("Deployment", "d", ns="b")]
    entries = inventory(build_graph(objs, REG), namespaces=["b"])
    assert [(e.ref.namespace, e.ref.name) for e in entries] == [("b", "d")]


@pytest.mark.parametrize(
    ("kind", "name", "expected"),
    [
        ("DynamoGraphDeployment", "llama", "aibom-dynamographdeployment-llama"),
        ("Deployment", "web", "aibom-deployment-web"),
    ],
)
def test_configmap_name(kind: str, name: str, expected: str) -> None:
    assert configmap_name(kind, name) == expected


def test_configmap_name_is_shortened_with_a_hash() -> None:
    a = configmap_name("DynamoGraphDeployment", "x" * 250)
    b = configmap_name("DynamoGraphDeployment", "x" * 249 + "y")
    assert len(a) <= MAX_NAME and len(b) <= MAX_NAME and a != b
    assert a.startswith("aibom-dynamographdeployment-xxx")


def _all_case_graphs() -> list[tuple[list[Obj], dict[GroupKind, Reason] | None, int]]:
    from tests.unit.test_walk import CASES as WALK_CASES

    graphs = [(c.objs, c.unavailable, 6) for c in CASES]
    graphs += [(c.objs, c.unavailable, 6) for c in WALK_CASES]
    graphs += [(c.objs, c.unavailable, depth) for c in WALK_CASES for depth in (1, 2, 3, 5)]
    return graphs


@pytest.mark.parametrize("index", range(len(_all_case_graphs())))
def test_resolve_all_equals_resolving_each_object(index: int) -> None:
    objs, unavailable, depth = _all_case_graphs()[index]
    graph = build_graph(objs, REG, unavailable=unavailable, max_depth=depth)
    fast = graph.resolve_all()
    assert set(fast) == set(graph.keys())
    for key, result in fast.items():
        assert result == graph.resolve(graph.get(key) or {}), key


@pytest.mark.parametrize("index", range(len(_all_case_graphs())))
def test_inventory_equals_incremental_root_entries(index: int) -> None:
    from aibom_core.rollup import root_entry

    objs, unavailable, depth = _all_case_graphs()[index]
    graph = build_graph(objs, REG, unavailable=unavailable, max_depth=depth)
    incremental = [e for k in graph if (e := root_entry(graph, k)) is not None]
    incremental.sort(key=lambda e: (e.ref.namespace, e.ref.kind, e.ref.name, e.ref.uid))
    assert inventory(graph) == incremental


def _packed(data: bytes) -> dict[str, dict[str, str]]:
    return {"binaryData": {DATA_KEY_GZ: base64.b64encode(gzip.compress(data)).decode()}}


def test_unpack_expands_a_gzip_bomb_in_bounded_memory() -> None:
    """1 MiB of gzip can expand a thousandfold: the one reader of a document's payload
    (kubectl aibom, verify, the tests) stops at MAX_DOCUMENT_BYTES, with a reason."""
    bomb = _packed(b"\0" * (MAX_DOCUMENT_BYTES + (16 << 20)))
    tracemalloc.start()
    try:
        with pytest.raises(PackedDocumentError, match="decompresses to more than"):
            unpack(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= MAX_DOCUMENT_BYTES + (4 << 20), peak  # one step, and the payload itself
    assert unpack(_packed(b"{}")) == b"{}"


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ("not base64!", "is not base64"),
        (base64.b64encode(b"not gzip").decode(), "is not gzip"),
        (base64.b64encode(gzip.compress(b"{}" * 1000, mtime=0)[:-20]).decode(), "cut short"),
    ],
)
def test_unpack_says_what_is_wrong_with_a_payload(payload: str, message: str) -> None:
    with pytest.raises(PackedDocumentError, match=message):
        unpack({"binaryData": {DATA_KEY_GZ: payload}})
