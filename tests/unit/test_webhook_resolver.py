"""The async driver of the core walk: zero-cost ownerless, deadline, UID-keyed cache, sharing."""

from __future__ import annotations

import asyncio

from aibom_core.kinds import default_registry
from aibom_core.walk import Reason, Rollup
from tests.unit.kobj import chain, mk
from tests.unit.webhook_fakes import MemorySource
from webhook.resolver import OwnerCache, Resolver

REG = default_registry()
DEPTH4 = chain(
    "DynamoGraphDeployment/g",
    "DynamoComponentDeployment/g-w",
    "Deployment/g-w",
    "ReplicaSet/g-w-1",
    "Pod/g-w-1-a",
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_ownerless_objects_cost_zero_requests() -> None:
    source = MemorySource()
    res = await Resolver(source, registry=REG).resolve(mk("Deployment", "d"), namespace="ns")
    assert res.result.status is Rollup.ROOT and res.gets == 0 and res.owner is None
    assert source.gets.total() == 0


async def test_depth4_pod_then_cache_hits() -> None:
    source = MemorySource(DEPTH4[:-1])
    # A clock that stands still: the second walk is within the TTL however long
    # the machine takes between the two.
    resolver = Resolver(source, registry=REG, cache=OwnerCache(ttl=5, clock=Clock()))
    first = await resolver.resolve(DEPTH4[-1], namespace="ns")
    assert (
        first.result.root is not None and first.result.root.kind_name == "DynamoGraphDeployment/g"
    )
    assert (first.gets, first.cached) == (4, 0)
    assert first.owner == DEPTH4[-2]
    second = await resolver.resolve(DEPTH4[-1], namespace="ns")
    assert (second.gets, second.cached) == (0, 4)
    assert second.result == first.result


async def test_cache_expires_after_ttl_and_never_matches_a_new_uid() -> None:
    clock = Clock()
    old = mk("DynamoComponentDeployment", "c")
    source = MemorySource([old])
    resolver = Resolver(source, registry=REG, cache=OwnerCache(ttl=2, clock=clock))
    child = mk("Deployment", "d", old)
    assert (await resolver.resolve(child, namespace="ns")).result.status is Rollup.ROLLED_UP
    # Deleted and re-created under the same name: within the TTL the cached
    # old owner still answers for its own UID (bounded staleness)...
    source.add(mk("DynamoComponentDeployment", "c", gen=1))
    clock.now = 1.0
    assert (await resolver.resolve(child, namespace="ns")).cached == 1
    # ...a child of the new owner misses (new UID) and gets the new one...
    new_child = mk(
        "Deployment", "e", source.objs[("ns", "nvidia.com", "DynamoComponentDeployment", "c")]
    )
    res = await resolver.resolve(new_child, namespace="ns")
    assert res.gets == 1 and res.result.status is Rollup.ROLLED_UP
    # ...and after the TTL the stale child is refused by the UID check.
    clock.now = 2.5
    res = await resolver.resolve(child, namespace="ns")
    assert res.result.failure is not None and res.result.failure.reason is Reason.UID_MISMATCH


async def test_failures_are_not_cached() -> None:
    owner = mk("Deployment", "d")
    source = MemorySource([owner])
    source.fail["Deployment"] = Reason.FORBIDDEN
    resolver = Resolver(source, registry=REG, cache=OwnerCache(ttl=60))
    rs = mk("ReplicaSet", "d-1", owner)
    assert (await resolver.resolve(rs, namespace="ns")).result.status is Rollup.UNRESOLVED
    del source.fail["Deployment"]  # permission granted
    assert (await resolver.resolve(rs, namespace="ns")).result.status is Rollup.ROLLED_UP


async def test_cache_is_bounded() -> None:
    cache = OwnerCache(ttl=60, size=2)
    for name in "abc":
        cache.put(mk("Deployment", name))
    assert len(cache) == 2 and cache.get(mk("Deployment", "a")["metadata"]["uid"]) is None


async def test_deadline_gives_timeout_for_the_hop_still_waiting() -> None:
    source = MemorySource(DEPTH4[:-1])
    source.held.add("Deployment")  # hop 2 is never answered while the walk runs
    resolver = Resolver(source, registry=REG, deadline=0.3, cache=OwnerCache(ttl=0))
    try:
        # The walk returns although its GET never does: the deadline ended it (the
        # bound is the test's, for a failure; a loaded machine only makes it later).
        async with asyncio.timeout(30):
            res = await resolver.resolve(DEPTH4[-1], namespace="ns")
    finally:
        source.release.set()
    # Hop 1 (ReplicaSet) came back, hop 2 (the Deployment) did not: nothing
    # tracked reached, so the walk is unresolved with Timeout.
    assert res.result.status is Rollup.UNRESOLVED
    assert res.result.failure is not None
    assert str(res.result.failure) == "Timeout apps/Deployment/g-w"


async def test_concurrent_walks_share_one_get() -> None:
    source = MemorySource(DEPTH4[:-1], delay=0.05)
    resolver = Resolver(source, registry=REG, cache=OwnerCache(ttl=0))
    pods = [mk("Pod", f"p{i}", DEPTH4[-2]) for i in range(10)]
    results = await asyncio.gather(*(resolver.resolve(p, namespace="ns") for p in pods))
    assert {r.result.status for r in results} == {Rollup.ROLLED_UP}
    assert source.gets.total() == 4  # not 40
    assert sum(r.shared for r in results) == 36


async def test_an_exception_in_the_source_propagates_to_every_waiter() -> None:
    owner = mk("Deployment", "d")
    source = MemorySource([owner], delay=0.01)
    source.raise_for.add("Deployment")
    resolver = Resolver(source, registry=REG, cache=OwnerCache(ttl=0))
    rs = [mk("ReplicaSet", f"r{i}", owner) for i in range(3)]
    results = await asyncio.gather(
        *(resolver.resolve(r, namespace="ns") for r in rs), return_exceptions=True
    )
    assert all(isinstance(r, RuntimeError) for r in results)


async def test_a_cached_owner_answers_only_where_the_reference_points() -> None:
    # Namespace a's Deployment is cached by a walk in a. A Pod in namespace b
    # copies its UID into an ownerReference: a GET in b finds nothing, and the
    # cache must not answer either (else the Pod would escape `uncovered`).
    dep_a = mk("Deployment", "d", ns="a")
    source = MemorySource([dep_a])
    resolver = Resolver(source, registry=REG, cache=OwnerCache(ttl=60))
    own = await resolver.resolve(mk("ReplicaSet", "rs", dep_a, ns="a"), namespace="a")
    assert own.result.status is Rollup.ROLLED_UP
    forged = mk("Pod", "p", dep_a, ns="b")
    res = await resolver.resolve(forged, namespace="b")
    assert res.cached == 0 and res.gets == 1
    assert res.result.status is Rollup.UNRESOLVED
    assert res.result.failure is not None and res.result.failure.reason is Reason.NOT_FOUND
