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
  again, and the two would loop until the entry expired. (The
  refusal now re-walks every hop live: see "Re-walk" below.)

A second source of owners, before the TTL cache: the watch-backed index
(`webhook.ownerwatch`, `--owner-watch`), the controller-owning kinds listed and
watched (metadata only). Its hits obey the same rules (keyed by UID, standing
where the reference points, the walk checks UID and kind); a miss there (an
owner created after the list whose event we have not read yet, a kind not
watched, a watch not trusted right now) falls through to the TTL cache and
then to a live GET, so a just-created owner still resolves. What it can have
stale is what the TTL cache can: the owner's changes not yet delivered by its
watch (milliseconds while watching; a kind whose watch is down stops answering
after a short grace, see `ownerwatch`).

Re-walk without the caches (`cached_ok`): a walk that took any hop from the
TTL cache or the watch index is shown to `cached_ok(resolution)`; False means
the admitted object carries newer truth than the cached owners (the
ReplicaSet mirror above; an UPDATE whose carried stamp disagrees: the
annotator repaired it after a late adoption the cached owners predate), and
the whole walk is done again with live GETs only (each refreshing the TTL
cache). Its answer stands, unless it ran out of time (`Timeout`): then the
cached walk's answer is kept rather than stamping `unresolved`.

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
import dataclasses
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from aibom_core.kinds import POD, GroupKind, KindRegistry
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

if TYPE_CHECKING:
    from aibom_edge.kube import Kube

DEFAULT_DEADLINE = 1.5
DEFAULT_CACHE_TTL = 5.0
DEFAULT_CACHE_SIZE = 10_000


class OwnerSource(Protocol):
    """Where owners come from (`aibom_edge.kube.Kube` in production)."""

    async def get_owner(
        self, namespace: str, owner: OwnerRef, *, timeout: float | None = None
    ) -> Fetched: ...


class MetadataOwners:
    """An `OwnerSource` asking the API for owners' metadata only: the walk, the
    proofs and the ReplicaSet mirror read nothing else of an owner, but of a Pod
    (an LWS leader Pod owns its worker StatefulSet): its proof binds its
    containers (`aibom_core.provenance`), so a Pod owner is read whole."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube

    async def get_owner(
        self, namespace: str, owner: OwnerRef, *, timeout: float | None = None
    ) -> Fetched:
        whole = owner.group_kind == POD
        return await self._kube.get_owner(
            namespace, owner, timeout=timeout, metadata_only=not whole
        )


class OwnerIndex(Protocol):
    """Owners known without a request (`webhook.ownerwatch.OwnerWatch`)."""

    def owner(self, uid: str, gk: GroupKind) -> Obj | None:
        """The owner of this UID and kind, if indexed and trusted now; else None."""
        ...


@dataclass(frozen=True, slots=True)
class Resolution:
    """A walk result and what it cost."""

    result: WalkResult
    owner: Obj | None  # the controller owner as fetched for the first hop (None: no hop)
    gets: int  # API GETs this walk started
    cached: int  # hops answered from the owner cache
    shared: int  # hops that joined another walk's GET
    refreshed: int = 0  # walks done again live because `cached_ok` refused the cached one
    watched: int = 0  # hops answered from the watch-backed owner index

    @property
    def from_memory(self) -> int:
        """Hops answered without a request (TTL cache or watch index)."""
        return self.cached + self.watched


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
        index: OwnerIndex | None = None,
    ) -> None:
        self._source = source
        self.index = index
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
        cached_ok: Callable[[Resolution], bool] | None = None,
        trust: EdgeTrust | None = None,
        deadline: float | None = None,
    ) -> Resolution:
        """The walk. `cached_ok(resolution)` False, for a walk that took a hop from
        memory, walks again with live GETs only (module doc, "Re-walk"); `trust`:
        the walk's edge-trust input (provenance); `deadline`: seconds left
        (default: the resolver's whole deadline)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + (self._deadline if deadline is None else deadline)
        first = await self._walk(obj, namespace, trust, until, memory=True)
        if cached_ok is None or not first.from_memory or cached_ok(first):
            return first
        live = await self._walk(obj, namespace, trust, until, memory=False)
        failure = live.result.failure
        kept = failure is not None and failure.reason is Reason.TIMEOUT
        best = first if kept else live
        return dataclasses.replace(
            best,
            gets=first.gets + live.gets,
            shared=first.shared + live.shared,
            cached=first.cached,
            watched=first.watched,
            refreshed=1,
        )

    async def _walk(
        self, obj: Obj, namespace: str, trust: EdgeTrust | None, until: float, *, memory: bool
    ) -> Resolution:
        """One walk; `memory` False: every hop a live GET (or a share of one)."""
        gen = walk(
            obj,
            registry=self._registry,
            max_depth=self._max_depth,
            namespace=namespace,
            trust=trust,
        )
        gets = cached = shared = watched = 0
        first: Obj | None = None
        try:
            req = next(gen)
        except StopIteration as stop:  # no controller owner: zero requests
            return Resolution(result=stop.value, owner=None, gets=0, cached=0, shared=0)
        loop = asyncio.get_running_loop()
        while True:
            hit: Obj | None = None
            if memory:
                uid = req.owner.uid
                if self.index is not None:
                    hit = self.index.owner(uid, req.owner.group_kind)
                    if hit is not None and not _at(hit, req):
                        hit = None  # the UID of an object elsewhere: only a GET may answer
                    watched += hit is not None
                if hit is None:
                    hit = self.cache.get(uid)
                    if hit is not None and not _at(hit, req):
                        hit = None
                    cached += hit is not None
            if hit is not None:
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
                    watched=watched,
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
