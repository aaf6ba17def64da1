"""The upward walk (docs/architecture.md, The owner walk), as tables over in-memory graphs."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from aibom_core.graph import build_graph
from aibom_core.kinds import GroupKind, default_registry
from aibom_core.objects import Obj, ref_of
from aibom_core.stamp import stamp_of
from aibom_core.walk import Fetched, OwnerRequest, Reason, Rollup, resolve, walk
from tests.unit.kobj import chain, mk

REG = default_registry()

LWS_UNDER_DGD = chain(
    "DynamoGraphDeployment/g",
    "DynamoComponentDeployment/g-worker",
    "LeaderWorkerSet/g-worker",
    "StatefulSet/g-worker",
    "Pod/g-worker-0",
    "StatefulSet/g-worker-0",
    "Pod/g-worker-0-1",
)


def _recreated(objs: list[Obj], index: int) -> list[Obj]:
    """objs with objs[index] deleted and re-created under the same name (new UID)."""
    old = objs[index]
    new = mk(old["kind"], old["metadata"]["name"], gen=1)
    return [*objs[:index], new, *objs[index + 1 :]]


def _deep_rs(n: int) -> list[Obj]:
    return chain(*[f"ReplicaSet/rs{i}" for i in range(n)], "Pod/p")


def _cycle() -> list[Obj]:
    a = mk("Pod", "a", uid="uid-a")
    b = mk("ReplicaSet", "b", a, uid="uid-b")
    a = mk("Pod", "a", b, uid="uid-a")
    return [a, b]


def _two_owners() -> list[Obj]:
    gc_owner = mk("Deployment", "other")
    real = mk("Deployment", "real")
    rs = mk("ReplicaSet", "rs", real, extra_owners=[gc_owner])
    return [gc_owner, real, rs, mk("Pod", "p", rs)]


def _non_controller_only() -> list[Obj]:
    dep = mk("Deployment", "d")
    return [dep, mk("Pod", "p", dep, controller=False)]


def _version_skew() -> list[Obj]:
    dgd = mk("DynamoGraphDeployment", "g")
    # The operator wrote nvidia.com/v1alpha1 into the reference; the object is v1beta1.
    dcd = mk("DynamoComponentDeployment", "c", dgd, owner_api_version="nvidia.com/v1alpha1")
    return [dgd, dcd]


def _wrong_group() -> list[Obj]:
    dep = mk("Deployment", "d")
    return [dep, mk("ReplicaSet", "rs", dep, owner_api_version="example.com/v1")]


@dataclass(frozen=True)
class Case:
    name: str
    objs: list[Obj]
    subject: int  # index of the object to walk from
    status: Rollup
    root: str | None
    hops: int
    reason: str | None = None
    nearest: str | None = None
    unavailable: dict[GroupKind, Reason] = field(default_factory=dict)


CASES = [
    Case("bare pod", [mk("Pod", "p")], 0, Rollup.UNCOVERED, None, 0),
    Case("plain deployment", [mk("Deployment", "d")], 0, Rollup.ROOT, "Deployment/d", 0),
    Case(
        "deployment pod",
        chain("Deployment/d", "ReplicaSet/d-1", "Pod/d-1-a"),
        2,
        Rollup.ROLLED_UP,
        "Deployment/d",
        2,
        nearest="Deployment/d",
    ),
    Case(
        "LWS worker pod under a Dynamo graph: exactly 6 hops",
        LWS_UNDER_DGD,
        6,
        Rollup.ROLLED_UP,
        "DynamoGraphDeployment/g",
        6,
        nearest="StatefulSet/g-worker-0",
    ),
    Case(
        "worker StatefulSet is rolled up to the graph",
        LWS_UNDER_DGD,
        5,
        Rollup.ROLLED_UP,
        "DynamoGraphDeployment/g",
        5,
        nearest="StatefulSet/g-worker",
    ),
    Case(
        "7 untracked hops: DepthExceeded",
        _deep_rs(7),
        7,
        Rollup.UNRESOLVED,
        None,
        6,
        reason="DepthExceeded apps/ReplicaSet/rs0",
    ),
    Case("6 untracked hops reach the top", _deep_rs(6), 6, Rollup.UNCOVERED, None, 6),
    Case("cycle", _cycle(), 0, Rollup.UNRESOLVED, None, 1, reason="Cycle core/Pod/a"),
    Case(
        "two owners: only the controller counts",
        _two_owners(),
        3,
        Rollup.ROLLED_UP,
        "Deployment/real",
        2,
        nearest="Deployment/real",
    ),
    Case(
        "a non-controller owner is no owner",
        _non_controller_only(),
        1,
        Rollup.UNCOVERED,
        None,
        0,
    ),
    Case(
        "owner re-created with a new UID: UIDMismatch, not adopted",
        _recreated(chain("DynamoGraphDeployment/g", "Deployment/d"), 0),
        1,
        Rollup.UNRESOLVED,
        "Deployment/d",
        0,
        reason="UIDMismatch nvidia.com/DynamoGraphDeployment/g",
    ),
    Case(
        "untracked child of a re-created owner has no root",
        _recreated(chain("Deployment/d", "ReplicaSet/rs", "Pod/p"), 1),
        2,
        Rollup.UNRESOLVED,
        None,
        0,
        reason="UIDMismatch apps/ReplicaSet/rs",
    ),
    Case(
        "owner gone: NotFound",
        chain("Deployment/d", "ReplicaSet/rs", "Pod/p")[1:],
        1,
        Rollup.UNRESOLVED,
        None,
        1,
        reason="NotFound apps/Deployment/d",
    ),
    Case(
        "failure above a tracked ancestor: still covered by it",
        chain("DynamoComponentDeployment/c", "Deployment/d", "ReplicaSet/rs", "Pod/p")[1:],
        2,
        Rollup.ROLLED_UP,
        "Deployment/d",
        2,
        reason="NotFound nvidia.com/DynamoComponentDeployment/c",
        nearest="Deployment/d",
    ),
    Case(
        "the tracked ancestor itself is unresolved and its own root",
        chain("DynamoComponentDeployment/c", "Deployment/d")[1:],
        0,
        Rollup.UNRESOLVED,
        "Deployment/d",
        0,
        reason="NotFound nvidia.com/DynamoComponentDeployment/c",
    ),
    Case(
        "intermediate kind we may not read: Forbidden",
        chain("Deployment/d", "ReplicaSet/rs", "Pod/p"),
        2,
        Rollup.UNRESOLVED,
        None,
        0,
        reason="Forbidden apps/ReplicaSet/rs",
        unavailable={GroupKind("apps", "ReplicaSet"): Reason.FORBIDDEN},
    ),
    Case(
        "kind the server does not serve: NoMatch",
        chain("DynamoComponentDeployment/c", "Deployment/d"),
        1,
        Rollup.UNRESOLVED,
        "Deployment/d",
        0,
        reason="NoMatch nvidia.com/DynamoComponentDeployment/c",
        unavailable={GroupKind("nvidia.com", "DynamoComponentDeployment"): Reason.NO_MATCH},
    ),
    # Only registry kinds are edges (the provenance guard proves exactly
    # those): a chain through any other kind, forged or not, ends below it.
    Case(
        "owner of a kind the registry does not know: not an edge, a tracked child is a root",
        chain("DynamoGraphDeployment/g", "Widget/w", "Deployment/d"),
        2,
        Rollup.ROOT,
        "Deployment/d",
        0,
    ),
    Case(
        "owner of a kind the registry does not know: not an edge, a Pod is uncovered",
        chain("DynamoGraphDeployment/g", "Widget/w", "Pod/p"),
        2,
        Rollup.UNCOVERED,
        None,
        0,
    ),
    Case(
        "owner references say v1alpha1, object is v1beta1: matched by group+kind",
        _version_skew(),
        1,
        Rollup.ROLLED_UP,
        "DynamoGraphDeployment/g",
        1,
        nearest="DynamoGraphDeployment/g",
    ),
    Case(
        "same name, other group (not a registry kind): not our owner, not an edge",
        _wrong_group(),
        1,
        Rollup.UNCOVERED,
        None,
        0,
    ),
    Case(
        "Grove direct clique",
        chain("DynamoGraphDeployment/g", "PodCliqueSet/g", "PodClique/g-0-w", "Pod/g-0-w-x"),
        3,
        Rollup.ROLLED_UP,
        "DynamoGraphDeployment/g",
        3,
        nearest="PodCliqueSet/g",
    ),
    Case(
        "Grove scaling group",
        chain(
            "DynamoGraphDeployment/g",
            "PodCliqueSet/g",
            "PodCliqueScalingGroup/g-0-sg",
            "PodClique/g-0-sg-0-w",
            "Pod/g-0-sg-0-w-x",
        ),
        4,
        Rollup.ROLLED_UP,
        "DynamoGraphDeployment/g",
        4,
        nearest="PodCliqueSet/g",
    ),
    Case(
        "CronJob -> Job -> Pod",
        chain("CronJob/cj", "Job/cj-1", "Pod/cj-1-x"),
        2,
        Rollup.ROLLED_UP,
        "CronJob/cj",
        2,
        nearest="Job/cj-1",
    ),
    Case(
        "NIMService -> LeaderWorkerSet",
        chain("NIMService/n", "LeaderWorkerSet/n"),
        1,
        Rollup.ROLLED_UP,
        "NIMService/n",
        1,
        nearest="NIMService/n",
    ),
    Case(
        "DynamoGraphDeployment -> DisaggregatedSet -> LeaderWorkerSet",
        chain("DynamoGraphDeployment/g", "DisaggregatedSet/g", "LeaderWorkerSet/g-prefill"),
        2,
        Rollup.ROLLED_UP,
        "DynamoGraphDeployment/g",
        2,
        nearest="DynamoGraphDeployment/g",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_walk(case: Case) -> None:
    graph = build_graph(case.objs, REG, unavailable=case.unavailable)
    result = graph.resolve(case.objs[case.subject])
    assert result.status is case.status
    assert (result.root.kind_name if result.root else None) == case.root
    assert result.hops == case.hops
    assert (str(result.failure) if result.failure else None) == case.reason
    if case.nearest is not None:
        assert result.nearest_tracked is not None
        assert result.nearest_tracked.kind_name == case.nearest
    stamp = stamp_of(result)
    assert stamp.rollup == case.status.value
    assert stamp.root == case.root
    # rollup-reason appears exactly with `unresolved`, and says the failing hop.
    if case.status is Rollup.UNRESOLVED:
        assert stamp.reason == case.reason
    else:
        assert stamp.reason is None


def test_ownerless_objects_cost_no_lookup() -> None:
    gen = walk(mk("Pod", "p"), registry=REG)
    with pytest.raises(StopIteration) as stop:
        next(gen)
    assert stop.value.value.status is Rollup.UNCOVERED


def test_owner_of_an_unknown_kind_costs_no_lookup() -> None:
    """Not an edge: the live walk (the webhook's) does not even GET it."""
    _, pod = chain("Widget/w", "Pod/p")
    gen = walk(pod, registry=REG)
    with pytest.raises(StopIteration) as stop:
        next(gen)
    assert stop.value.value.status is Rollup.UNCOVERED


def test_one_lookup_per_hop_and_stop_at_first_failure() -> None:
    calls = []
    objs = {(o["kind"], o["metadata"]["name"]): o for o in LWS_UNDER_DGD}

    def lookup(req: OwnerRequest) -> Fetched:
        calls.append(req.owner.kind)
        return Fetched(obj=objs[(req.owner.kind, req.owner.name)])

    result = resolve(LWS_UNDER_DGD[6], registry=REG, lookup=lookup)
    assert result.status is Rollup.ROLLED_UP
    assert calls == [
        "StatefulSet",
        "Pod",
        "StatefulSet",
        "LeaderWorkerSet",
        "DynamoComponentDeployment",
        "DynamoGraphDeployment",
    ]


def test_depth_cap_is_configurable() -> None:
    graph = build_graph(LWS_UNDER_DGD, REG, max_depth=5)
    result = graph.resolve(LWS_UNDER_DGD[6])
    # 5 hops reach the DynamoComponentDeployment: covered by it, not by the graph.
    assert result.status is Rollup.ROLLED_UP
    assert result.root is not None and result.root.kind_name == "DynamoComponentDeployment/g-worker"
    assert result.failure is not None and result.failure.reason is Reason.DEPTH_EXCEEDED


def test_create_without_uid_and_generate_name() -> None:
    dep = mk("Deployment", "d")
    rs = mk("ReplicaSet", "ignored", dep, uid="")
    rs["metadata"].pop("name")
    rs["metadata"]["generateName"] = "d-"
    graph = build_graph([dep], REG)
    result = graph.resolve(rs)
    assert result.status is Rollup.ROLLED_UP
    assert ref_of(rs).name == "d-"
    stamp = stamp_of(result)
    assert (stamp.root, stamp.root_uid) == ("Deployment/d", dep["metadata"]["uid"])


def test_root_on_create_omits_root_uid() -> None:
    dep = mk("Deployment", "d", uid="")
    stamp = stamp_of(build_graph([], REG).resolve(dep))
    assert (stamp.root, stamp.root_uid, stamp.rollup) == ("Deployment/d", None, "root")
