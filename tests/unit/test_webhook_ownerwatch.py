"""The watch-backed owner index and the re-walk rule, without a server.

The index's list/watch lifecycle runs against the real API server in
tests/integration/test_webhook_ownerwatch.py; here: what an entry keeps, that
an answer from it never loosens the walk's UID check, when a kind may answer,
and the re-walk that keeps a cached walk from reverting newer truth (the
late-adoption stamp fight).
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any, cast

import pytest
from aiohttp.test_utils import TestClient

from aibom_core.kinds import POD, GroupKind, default_registry
from aibom_core.objects import Obj
from aibom_core.stamp import Keys
from aibom_core.walk import Reason, Rollup
from aibom_edge.kube import ApiResource
from tests.unit.kobj import mk
from tests.unit.webhook_fakes import MemorySource, apply_patch, body, review
from webhook.app import Admitter, Readiness, make_app
from webhook.metrics import Metrics
from webhook.ownerwatch import (
    KindWatch,
    OwnerStore,
    OwnerWatch,
    WatchState,
    expand,
    owner_kinds,
)
from webhook.resolver import OwnerCache, Resolver

REG = default_registry()
KEYS = Keys()
DCD = GroupKind("nvidia.com", "DynamoComponentDeployment")
DGD = GroupKind("nvidia.com", "DynamoGraphDeployment")


def resource(gk: GroupKind, version: str = "v1alpha1") -> ApiResource:
    return ApiResource(
        group=gk.group, version=version, kind=gk.kind, plural=gk.kind.lower() + "s", namespaced=True
    )


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def index(*objs: dict[str, Any], clock: Clock | None = None) -> OwnerWatch:
    """An index whose every kind has listed `objs` and is watching."""
    extra: dict[str, Any] = {"clock": clock} if clock is not None else {}
    watch = OwnerWatch(cast(Any, None), REG, KEYS, **extra)
    for kind_watch in watch.watches.values():
        kind_watch.synced.set()
        kind_watch._set(WatchState.WATCHING)
    for obj in objs:
        gk = GroupKind(obj["apiVersion"].rpartition("/")[0], obj["kind"])
        slim = watch.store.slim(resource(gk, obj["apiVersion"].rpartition("/")[2]), obj)
        assert slim is not None
        watch.store.upsert(gk, slim)
    return watch


def test_every_registry_kind_but_pods_is_indexed() -> None:
    kinds = set(owner_kinds(REG))
    assert POD not in kinds
    assert kinds == (REG.tracked | REG.walk_only) - {POD}
    assert {GroupKind("apps", "ReplicaSet"), GroupKind("batch", "Job"), DGD} <= kinds


def test_an_entry_keeps_only_what_the_walk_reads() -> None:
    store = OwnerStore(KEYS)
    owner = mk("Deployment", "d")
    raw = mk(
        "ReplicaSet",
        "d-1",
        owner,
        extra_owners=[mk("StatefulSet", "gc-only")],
        labels={"app": "x"},
        annotations={
            "aibom.dev/root": "Deployment/d",
            "aibom.dev/replicaset-edge-proof": "proof",
            "deployment.kubernetes.io/revision": "3",
            "kubectl.kubernetes.io/last-applied-configuration": "{" + "x" * 5000 + "}",
        },
        spec={"replicas": 3},
    )
    raw["metadata"]["managedFields"] = [{"manager": "kube-controller-manager"}]
    raw["metadata"]["resourceVersion"] = "42"
    # PartialObjectMetadata carries its own apiVersion/kind: the resource's are kept.
    raw["apiVersion"], raw["kind"] = "meta.k8s.io/v1", "PartialObjectMetadata"
    slim = store.slim(resource(GroupKind("apps", "ReplicaSet"), "v1"), raw)
    assert slim is not None
    assert expand(slim) == {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": "d-1",
            "namespace": "ns",
            "uid": raw["metadata"]["uid"],
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": "d",
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                }
            ],
            # Its edge's proof only: the copies of its Deployment's stamp and
            # edge-proof are never read of a ReplicaSet.
            "annotations": {"aibom.dev/replicaset-edge-proof": "proof"},
        },
    }
    # A Deployment keeps its stamp (its ReplicaSets mirror it) and its edge's proof.
    dep = mk(
        "Deployment",
        "d",
        mk("DynamoComponentDeployment", "c"),
        annotations={
            "aibom.dev/root": "DynamoComponentDeployment/c",
            "aibom.dev/rollup": "rolled-up",
            "aibom.dev/edge-proof": "p",
            "aibom.dev/replicaset-edge-proof": "not read",
            "other": "x",
        },
    )
    slim_dep = store.slim(resource(GroupKind("apps", "Deployment"), "v1"), dep)
    assert slim_dep is not None
    assert expand(slim_dep)["metadata"]["annotations"] == {
        "aibom.dev/root": "DynamoComponentDeployment/c",
        "aibom.dev/rollup": "rolled-up",
        "aibom.dev/edge-proof": "p",
    }
    # No controller: no proof is read, nothing kept.
    lone = store.slim(
        resource(DCD),
        mk("DynamoComponentDeployment", "x", annotations={"aibom.dev/edge-proof": "p"}),
    )
    assert lone is not None and "annotations" not in expand(lone)["metadata"]
    assert store.slim(resource(DCD), {"metadata": {"name": "no-uid"}}) is None
    assert store.slim(resource(DCD), "not an object") is None


def test_a_relist_drops_what_is_gone_and_only_of_its_kind() -> None:
    store = OwnerStore(KEYS)
    res_d, res_r = (
        resource(GroupKind("apps", "Deployment")),
        resource(GroupKind("apps", "ReplicaSet")),
    )
    d1, d2, r1 = (
        store.slim(res_d, mk("Deployment", "a")),
        store.slim(res_d, mk("Deployment", "b")),
        store.slim(res_r, mk("ReplicaSet", "r")),
    )
    assert d1 and d2 and r1
    store.upsert(GroupKind("apps", "Deployment"), d1)
    store.upsert(GroupKind("apps", "Deployment"), d2)
    store.upsert(GroupKind("apps", "ReplicaSet"), r1)
    store.replace(GroupKind("apps", "Deployment"), {d2[3]: d2})
    assert store.get(d1[3]) is None
    assert store.get(d2[3]) == expand(d2)
    assert store.get(r1[3]) == expand(r1)
    assert len(store) == 2 and store.count(GroupKind("apps", "Deployment")) == 1
    store.delete(GroupKind("apps", "ReplicaSet"), r1[3])
    assert store.get(r1[3]) is None


async def test_a_depth4_walk_from_the_index_costs_no_get() -> None:
    graph = mk("DynamoGraphDeployment", "g")
    comp = mk("DynamoComponentDeployment", "c", graph)
    dep = mk("Deployment", "d", comp)
    rs = mk("ReplicaSet", "d-1", dep)
    source = MemorySource([graph, comp, dep, rs])
    resolver = Resolver(
        source, registry=REG, cache=OwnerCache(ttl=0), index=index(graph, comp, dep, rs)
    )
    res = await resolver.resolve(mk("Pod", "p", rs), namespace="ns")
    assert res.result.status is Rollup.ROLLED_UP
    assert res.result.root is not None and res.result.root.name == "g"
    assert (res.gets, res.watched, res.cached) == (0, 4, 0)
    assert sum(source.gets.values()) == 0


async def test_an_owner_missing_from_the_index_is_fetched() -> None:
    """Created after the list, its ADDED event not read yet: a live GET resolves it."""
    dep = mk("Deployment", "d")
    rs = mk("ReplicaSet", "d-1", dep)
    source = MemorySource([dep, rs])
    resolver = Resolver(source, registry=REG, cache=OwnerCache(ttl=0), index=index(dep))
    res = await resolver.resolve(mk("Pod", "p", rs), namespace="ns")
    assert res.result.status is Rollup.ROLLED_UP
    assert (res.gets, res.watched) == (1, 1)
    assert source.gets["ReplicaSet"] == 1 and source.gets["Deployment"] == 0


async def test_a_recreated_owner_in_the_index_never_answers_for_the_old_uid() -> None:
    old = mk("Deployment", "d", gen=0)
    new = mk("Deployment", "d", gen=1)
    assert old["metadata"]["uid"] != new["metadata"]["uid"]
    source = MemorySource([new])  # the API server has only the new one
    resolver = Resolver(source, registry=REG, cache=OwnerCache(ttl=0), index=index(new))
    res = await resolver.resolve(mk("ReplicaSet", "d-1", old), namespace="ns")
    assert res.result.failure is not None
    assert res.result.failure.reason is Reason.UID_MISMATCH
    assert (res.gets, res.watched) == (1, 0)


async def test_an_indexed_uid_answers_only_where_the_reference_points() -> None:
    """A reference copying the UID of an object of another namespace (or name)."""
    theirs = mk("Deployment", "d", ns="other")
    forged = mk("ReplicaSet", "r", owner_uid=theirs["metadata"]["uid"], owner=mk("Deployment", "d"))
    source = MemorySource([theirs])
    resolver = Resolver(source, registry=REG, cache=OwnerCache(ttl=0), index=index(theirs))
    res = await resolver.resolve(forged, namespace="ns")
    assert res.watched == 0 and res.gets == 1
    assert res.result.failure is not None and res.result.failure.reason is Reason.NOT_FOUND


def test_a_kind_answers_only_while_its_watch_is_trusted() -> None:
    clock = Clock()
    dep = mk("Deployment", "d")
    watch = index(dep, clock=clock)
    uid, gk = dep["metadata"]["uid"], GroupKind("apps", "Deployment")
    assert watch.owner(uid, gk) is not None
    assert watch.owner(uid, GroupKind("", "Pod")) is None  # not an indexed kind
    kind_watch = watch.watches[gk]
    kind_watch._set(WatchState.BACKOFF, "connection refused")
    clock.now += kind_watch.grace - 0.1
    assert watch.owner(uid, gk) is not None  # a resumed watch: within the grace
    clock.now += 0.2
    assert watch.owner(uid, gk) is None  # down too long: GETs answer
    kind_watch._set(WatchState.WATCHING)
    assert watch.owner(uid, gk) is not None
    fresh = KindWatch(cast(Any, None), gk, watch.store, clock=clock)
    assert not fresh.trusted and not fresh.settled  # never synced: never answers
    clock.now += fresh.sync_timeout + 1
    assert fresh.settled and not fresh.trusted  # readiness stops waiting; still GETs


# -- the re-walk rule (the late-adoption stamp fight) -----------------------------------


def _patch(doc: dict[str, Any]) -> list[dict[str, Any]]:
    resp = doc["response"]
    ops: list[dict[str, Any]] = (
        json.loads(base64.b64decode(resp["patch"])) if "patch" in resp else []
    )
    return ops


async def _hook(aiohttp_client: Any, source: MemorySource, **kw: Any) -> tuple[Any, Metrics]:
    metrics = Metrics()
    resolver = Resolver(source, registry=REG, deadline=0.5, **kw)
    admitter = Admitter(resolver=resolver, registry=REG, keys=KEYS, metrics=metrics)
    app = make_app(admitter=admitter, metrics=metrics, readiness=Readiness(True, True))
    client: TestClient[Any, Any] = await aiohttp_client(app)
    return client, metrics


async def _post(client: Any, doc: Any) -> dict[str, Any]:
    resp = await client.post(
        "/mutate", data=body(doc), headers={"Content-Type": "application/json"}
    )
    assert resp.status == 200
    out: dict[str, Any] = await resp.json()
    return out


class Fight:
    """A webhook (TTL cache 600 s) that admitted Pod `p` under an ownerless
    component `c`, which is now cached."""

    def __init__(self, client: Any, metrics: Metrics, source: MemorySource, stamped: Obj) -> None:
        self.client, self.metrics, self.source, self.stamped = client, metrics, source, stamped

    def gets(self) -> int:
        return sum(self.source.gets.values())

    def refreshed(self) -> float | None:
        return self.metrics.registry.get_sample_value(
            "aibom_webhook_owner_lookups_total", {"source": "refreshed"}
        )

    async def update(self, **annotations: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """An UPDATE of the Pod carrying these stamp values: (patch, annotations after)."""
        new = json.loads(json.dumps(self.stamped))
        new["metadata"]["annotations"].update(
            {f"aibom.dev/{k.replace('_', '-')}": v for k, v in annotations.items()}
        )
        ops = _patch(await _post(self.client, review(new, operation="UPDATE", old=self.stamped)))
        return ops, apply_patch(new, ops)["metadata"]["annotations"]


@pytest.fixture
async def fight(aiohttp_client: Any) -> Fight:
    source = MemorySource([mk("DynamoComponentDeployment", "c")])
    client, metrics = await _hook(aiohttp_client, source, cache=OwnerCache(ttl=600))
    pod = mk("Pod", "p", mk("DynamoComponentDeployment", "c"))
    stamped = apply_patch(pod, _patch(await _post(client, review(pod))))
    assert stamped["metadata"]["annotations"]["aibom.dev/root"] == "DynamoComponentDeployment/c"
    return Fight(client, metrics, source, stamped)


async def test_late_adoption_repair_is_not_reverted_by_a_cached_owner(fight: Fight) -> None:
    """A DynamoComponentDeployment adopted late (its controller reference added on
    UPDATE) while the webhook still caches it ownerless: the annotator repairs the
    Pod's stamp to the new root, and the UPDATE carrying that repair must not be
    answered from the cached (older) owner, or the two fight until it expires."""
    graph = mk("DynamoGraphDeployment", "g")
    fight.source.add(graph)
    fight.source.add(mk("DynamoComponentDeployment", "c", graph))
    gets = fight.gets()
    repair = {
        "root": "DynamoGraphDeployment/g",
        "root_uid": graph["metadata"]["uid"],
        "rollup": "rolled-up",
    }
    ops, _ = await fight.update(**repair)
    assert ops == [], "the repair was reverted from the cached owner"
    assert fight.gets() == gets + 2  # walked again live: component, graph
    assert fight.refreshed() == 1
    # The live walk refreshed the cache: the next UPDATE agrees from memory.
    fight.stamped = apply_patch(fight.stamped, [])
    fight.stamped["metadata"]["annotations"].update(
        {f"aibom.dev/{k.replace('_', '-')}": v for k, v in repair.items()}
    )
    ops, _ = await fight.update()
    assert ops == [] and fight.gets() == gets + 2


async def test_a_forged_stamp_is_still_corrected_after_the_live_walk(fight: Fight) -> None:
    _, after = await fight.update(root="DynamoGraphDeployment/evil")
    assert after["aibom.dev/root"] == "DynamoComponentDeployment/c"
    assert fight.refreshed() == 1


async def test_a_live_walk_out_of_time_keeps_the_cached_answer(fight: Fight) -> None:
    """The re-walk is a second opinion: a Timeout never replaces a cached answer."""
    fight.source.delay = 5.0  # every GET now outlives the walk's deadline
    _, after = await fight.update(rollup="uncovered")
    assert after["aibom.dev/rollup"] == "rolled-up"
    assert "aibom.dev/rollup-reason" not in after


async def test_a_create_or_an_agreeing_update_is_never_walked_twice(fight: Fight) -> None:
    await _post(fight.client, review(mk("Pod", "p2", mk("DynamoComponentDeployment", "c"))))
    ops, _ = await fight.update()
    assert ops == []
    assert fight.source.gets["DynamoComponentDeployment"] == 1
    assert fight.refreshed() is None


def test_backoff_honours_retry_after_grows_with_jitter_and_is_capped() -> None:
    watch = KindWatch(cast(Any, None), DCD, OwnerStore(KEYS), rand=lambda: 0.5)
    assert watch.backoff_delay(7.0) == 7.0  # the server's Retry-After
    assert watch.backoff_delay(600.0) == watch.backoff_cap
    fresh = KindWatch(cast(Any, None), DCD, OwnerStore(KEYS), rand=lambda: 1.0)
    delays = [fresh.backoff_delay() for _ in range(12)]
    assert delays[0] == pytest.approx(0.24) and delays[1] == pytest.approx(0.48)
    assert delays == sorted(delays) and max(delays) == fresh.backoff_cap


async def test_readiness_stops_waiting_for_a_kind_that_never_lists() -> None:
    """`wait_settled` returns once every kind synced or its sync timeout passed."""
    now = [0.0]  # the watches' clock: only the test moves it, however slow the machine
    watch = OwnerWatch(
        cast(Any, None), REG, KEYS, kinds=[DCD, DGD], sync_timeout=0.2, clock=lambda: now[0]
    )
    synced = watch.watches[DCD]
    synced.synced.set()
    synced._set(WatchState.WATCHING)
    assert not watch.settled
    waiting = asyncio.create_task(watch.wait_settled())
    await asyncio.sleep(0)
    assert not waiting.done()  # DGD has neither listed nor timed out
    now[0] = 0.2 + 0.01
    await asyncio.wait_for(waiting, 5)
    assert watch.settled and not watch.watches[DGD].trusted
    assert "nvidia.com/DynamoComponentDeployment=synced" in watch.summary()
