"""Drive the pure core walk with live owner GETs: async, deadline-bounded, cached.

The walk itself (`aibom_core.walk.walk`) decides everything, the UID check at
every hop included; this module only answers its `OwnerRequest`s. An object
without a controller owner never gets here past the first `next()`: it costs
zero API requests.

The owner cache, and why it is safe
-----------------------------------
Entries are owner objects keyed by their UID, each kept at most `ttl`
seconds after the GET that returned it, and at most `size` of them (LRU).

- A hit needs the UID the child's ownerReference names. UIDs are never
  reused, so an object found under that UID *is* that owner: the walk's UID
  check means the same thing with or without the cache, and a child
  referencing an owner that was deleted and re-created under the same name
  (new UID) never matches the new object through the cache. It misses, the
  GET by name returns the new object, and the walk answers `UIDMismatch`.
- What can be stale is what happened to that owner after our GET, for at
  most `ttl`: it may have been deleted (a child still referencing it then
  resolves as if it were alive, the answer a walk `ttl` seconds earlier gave),
  or its own ownerReferences may have changed (adopted or orphaned), which
  changes the hops above it. Both are bounded by `ttl` (default a few
  seconds) and repaired by the annotator's level-based reconcile.
- A hit must also stand where the reference points: the child's namespace
  and the reference's name. A live GET by namespace and name could never
  return an object of another namespace; without this check a reference
  copying a foreign object's UID (readable by whoever can read that object)
  would be attributed to it while it is cached. The walk checks UID and kind.
- Failures (NotFound, Forbidden, NoMatch, Timeout) are never cached: a
  missing permission or CRD that gets fixed is seen on the next admission.
- `ttl=0` turns the cache off.
- A cached owner may speed up a walk, never overrule newer truth. The one
  place our answer copies an owner's fields is the ReplicaSet mirror (it
  carries its Deployment's stamp values, `aibom_core.stamp.mirror_deployment`),
  and there the admitted child itself can be newer than our cached owner: the
  deployment controller copies the Deployment's current annotations onto the
  ReplicaSet, from a resourceVersion later than the one we cached. The
  resourceVersion is opaque (equality is the only safe comparison; no
  ordering), so the rule is: when the child's copy of those values disagrees
  with the cached owner's (`mirror_agrees`), the first hop is not answered
  from the cache but by a fresh GET (which then refreshes the entry). Without
  it the webhook would revert the controller's copy, the controller would copy
  again, and the two would loop until the entry expired.

Concurrent walks asking for the same owner (a ReplicaSet creating 50 Pods)
share one GET in flight (keyed by namespace, apiVersion, kind and name; the
walk still checks the UID of what comes back).

The deadline: the whole walk gets `deadline` seconds (below the webhook
configuration's `timeoutSeconds`, or the API server gives up on us first
and the stamp is lost). A hop still waiting when it runs out is answered
`Timeout`, and the core concludes with that reason.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from aibom_core.kinds import KindRegistry
from aibom_core.objects import Obj, OwnerRef
from aibom_core.walk import (
    DEFAULT_MAX_DEPTH,
    EdgeTrust,
    Fetched,
    OwnerRequest,
    Reason,
    WalkResult,
    walk,
)

DEFAULT_DEADLINE = 1.5
DEFAULT_CACHE_TTL = 5.0
DEFAULT_CACHE_SIZE = 10_000


class OwnerSource(Protocol):
    """Where owners come from (`aibom_edge.kube.Kube` in production)."""

    async def get_owner(
        self, namespace: str, owner: OwnerRef, *, timeout: float | None = None
    ) -> Fetched: ...


@dataclass(frozen=True, slots=True)
class Resolution:
    """A walk result and what it cost."""

    result: WalkResult
    owner: Obj | None  # the controller owner as fetched for the first hop (None: no hop)
    gets: int  # API GETs this walk started
    cached: int  # hops answered from the owner cache
    shared: int  # hops that joined another walk's GET
    refreshed: int = 0  # cached first hops refused as possibly stale (then fetched)


def _at(obj: Obj, req: OwnerRequest) -> bool:
    """Whether a cached owner is the object a GET for `req` would have read."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return False
    return meta.get("namespace") == req.namespace and meta.get("name") == req.owner.name


class OwnerCache:
    """Owner objects by UID, each for at most `ttl` seconds; LRU-bounded (see module doc)."""

    def __init__(
        self,
        *,
        ttl: float = DEFAULT_CACHE_TTL,
        size: int = DEFAULT_CACHE_SIZE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.size = size
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, Obj]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, uid: str) -> Obj | None:
        if self.ttl <= 0 or not uid:
            return None
        entry = self._entries.get(uid)
        if entry is None:
            return None
        stored_at, obj = entry
        if self._clock() - stored_at >= self.ttl:
            del self._entries[uid]
            return None
        self._entries.move_to_end(uid)
        return obj

    def put(self, obj: Obj) -> None:
        if self.ttl <= 0:
            return
        meta = obj.get("metadata")
        uid = meta.get("uid") if isinstance(meta, dict) else None
        if not isinstance(uid, str) or not uid:
            return
        self._entries[uid] = (self._clock(), obj)
        self._entries.move_to_end(uid)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)


_FlightKey = tuple[str, str, str, str]


class Resolver:
    """`await resolver.resolve(obj, namespace=ns)`: the core walk over live GETs."""

    def __init__(
        self,
        source: OwnerSource,
        *,
        registry: KindRegistry,
        max_depth: int = DEFAULT_MAX_DEPTH,
        deadline: float = DEFAULT_DEADLINE,
        cache: OwnerCache | None = None,
    ) -> None:
        self._source = source
        self._registry = registry
        self._max_depth = max_depth
        self._deadline = deadline
        self.deadline = deadline
        self.cache = cache if cache is not None else OwnerCache()
        self._in_flight: dict[_FlightKey, asyncio.Future[Fetched]] = {}

    async def resolve(
        self,
        obj: Obj,
        *,
        namespace: str,
        cached_ok: Callable[[Obj], bool] | None = None,
        trust: EdgeTrust | None = None,
        deadline: float | None = None,
    ) -> Resolution:
        """The walk. `cached_ok(owner)` False refuses a cached first-hop owner (GET
        instead); `trust`: the walk's edge-trust input (provenance); `deadline`:
        seconds left (default: the resolver's whole deadline)."""
        gen = walk(
            obj,
            registry=self._registry,
            max_depth=self._max_depth,
            namespace=namespace,
            trust=trust,
        )
        gets = cached = shared = refreshed = 0
        first: Obj | None = None
        try:
            req = next(gen)
        except StopIteration as stop:  # no controller owner: zero requests
            return Resolution(result=stop.value, owner=None, gets=0, cached=0, shared=0)
        loop = asyncio.get_running_loop()
        until = loop.time() + (self._deadline if deadline is None else deadline)
        while True:
            hit = self.cache.get(req.owner.uid)
            if hit is not None and not _at(hit, req):
                hit = None  # the UID of an object elsewhere: only a GET may answer
            if hit is not None and first is None and cached_ok is not None and not cached_ok(hit):
                hit = None  # the child carries newer truth than the cache: ask the API
                refreshed += 1
            if hit is not None:
                cached += 1
                fetched = Fetched(obj=hit)
            else:
                fetched, started = await self._fetch(req, until - loop.time())
                gets += started
                shared += not started
            if first is None:
                first = fetched.obj
            try:
                req = gen.send(fetched)
            except StopIteration as stop:
                return Resolution(
                    result=stop.value,
                    owner=first,
                    gets=gets,
                    cached=cached,
                    shared=shared,
                    refreshed=refreshed,
                )

    async def _fetch(self, req: OwnerRequest, remaining: float) -> tuple[Fetched, bool]:
        """One owner, joining a GET in flight for the same name; (answer, whether we started it)."""
        if remaining <= 0:
            return Fetched(failure=Reason.TIMEOUT), False
        o = req.owner
        key = (req.namespace, o.api_version, o.kind, o.name)
        flight = self._in_flight.get(key)
        started = flight is None
        if flight is None:
            flight = asyncio.ensure_future(self._get(key, req, remaining))
            flight.add_done_callback(_retrieve)
            self._in_flight[key] = flight
        try:
            # shield: one walk running out of time must not cancel a GET other
            # walks are waiting on; the GET has its own timeout (`remaining`).
            return await asyncio.wait_for(asyncio.shield(flight), remaining), started
        except TimeoutError:
            return Fetched(failure=Reason.TIMEOUT), started

    async def _get(self, key: _FlightKey, req: OwnerRequest, timeout: float) -> Fetched:
        try:
            fetched = await self._source.get_owner(req.namespace, req.owner, timeout=timeout)
            if fetched.obj is not None:
                self.cache.put(fetched.obj)
            return fetched
        finally:
            self._in_flight.pop(key, None)


def _retrieve(flight: asyncio.Future[Fetched]) -> None:
    # A GET whose every waiter timed out still finishes; its exception (if
    # any) reached no one, so read it here instead of warning at exit.
    if not flight.cancelled():
        flight.exception()
