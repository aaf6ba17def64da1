"""The watch-backed owner index: owners answered from memory, not GETs.

With the TTL cache off or cold, every hop of a walk is a GET, in sequence (a
depth-4 Pod: four round trips, p99 20 ms at 200/s on the benchmark machine).
This index lists and watches the kinds that control other objects, so a walk
whose owners exist finds every hop in memory, from the first admission after
start.

What is kept, and so the memory bound
-------------------------------------
- Kinds: every kind of the registry except Pods: ReplicaSet, Deployment,
  StatefulSet, DaemonSet, Job, CronJob and the tracked or walked CRDs
  (`owner_kinds`). A Pod is an owner only under a LeaderWorkerSet (its leader
  Pod controls the worker StatefulSet); holding every Pod of the cluster to
  save that one hop is not worth it: a Pod owner is answered as before (TTL
  cache, else a GET).
- Fields: lists and watches ask for metadata only (PartialObjectMetadata:
  no spec, no status on the wire), and each object is slimmed to what the
  walk reads: name, namespace, UID, the controller reference, and of the
  annotations only the proof of that controller edge (`Keys.proof_key`) and,
  of a Deployment, our stamp keys (its ReplicaSets mirror them). The memory is
  then (objects of those kinds in the cluster) x (bytes per slim entry,
  measured in BENCHMARKS.md, "Webhook on a cold cache").

Why an answer from it keeps the UID check exact
-----------------------------------------------
Entries are keyed by UID and the walk asks by the UID its child's reference
names; the resolver also requires the entry to stand where the reference
points (namespace and name), and the walk checks UID and kind as for a GET.
A child whose owner was deleted and re-created under the same name names the
old UID: the new object is indexed under its new UID, so it can never answer
(the old one, once its DELETED event is read, is gone; until then it answers
as the deleted owner, the same bounded staleness as the TTL cache). A miss
(an owner created after the list whose ADDED event has not arrived, a kind
not served or not readable) falls through to the TTL cache and a live GET:
a just-created owner still resolves.

A kind answers only while its watch is trusted: synced once, and watching,
or down for less than `grace` seconds (a relist after `410 Gone`, a resumed
watch). A watch down for longer stops answering until it has listed again,
so a broken watch never serves old views for longer than the TTL cache would.

Lifecycle of one kind (`KindWatch`)
-----------------------------------
The list+watch is `aibom_edge.reflector.Reflector`, shared with the
annotator's informers: paged (and pipelined) list into the index, watch from
the list's resourceVersion with bookmarks and `timeoutSeconds`, resumed when
the server ends it; `410 Gone` (also on a paged list's continue token)
relists; a throttled page is asked for again; other errors and a stream
silent for `idle` seconds resume after an exponential backoff with jitter.
Decided by HTTP status, never by message text. What is the index's own: metadata
only (PartialObjectMetadata), entries of a list applied only once it is complete
(those of the kind the list no longer has are dropped), and `401/403` (not
allowed: RBAC not granted yet) and a kind not served (404 or absent from
discovery) retried every `retry` seconds, the kind answered by GETs meanwhile.

Readiness: `/readyz` waits for every kind to be settled (synced, known not
readable or not served, or failing for longer than `sync_timeout`): until
then the webhook is not ready, and whatever it answers uses GETs for what is
not indexed. Nothing here blocks the event loop: pages are parsed one at a
time, with a turn for the loop between them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Callable
from typing import Any

from aibom_core.kinds import DEPLOYMENT, POD, GroupKind, KindRegistry, group_of
from aibom_core.objects import Obj, metadata
from aibom_core.stamp import Keys
from aibom_edge.kube import ApiResource, Kube
from aibom_edge.reflector import Reflector, ReflectorState

log = logging.getLogger("webhook.ownerwatch")

DEFAULT_WATCH_TIMEOUT = 300
DEFAULT_SYNC_TIMEOUT = 30.0
DEFAULT_GRACE = 5.0


def owner_kinds(registry: KindRegistry) -> list[GroupKind]:
    """The kinds the index watches: every kind of the registry but Pods (module doc)."""
    kinds = (registry.tracked | registry.walk_only) - {POD}
    return sorted(kinds, key=lambda gk: (gk.group, gk.kind))


WatchState = ReflectorState


# One owner, compactly: ((apiVersion, kind), name, namespace, uid, the controller
# reference as (apiVersion, kind, name, uid) or None, the kept annotations as
# pairs, the creationTimestamp of an owner that has a controller reference ("":
# none; a proof written at its CREATE binds it: aibom_core.provenance)). Tuples
# of shared strings, not dicts: a third of the memory; `expand` rebuilds the
# object the walk reads (a few microseconds per hop).
Entry = tuple[
    tuple[str, str],
    str,
    str,
    str,
    tuple[str, str, str, str] | None,
    tuple[tuple[str, str], ...],
    str,
]


def expand(entry: Entry) -> Obj:
    """The object an entry stands for, as the walk reads it."""
    (api_version, kind), name, namespace, uid, ref, annotations, created = entry
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
    if created:
        meta["creationTimestamp"] = created
    if ref is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": ref[0],
                "kind": ref[1],
                "name": ref[2],
                "uid": ref[3],
                "controller": True,
            }
        ]
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}


class OwnerStore:
    """Slim owners by UID, and the UIDs of each kind (for relists)."""

    def __init__(self, keys: Keys) -> None:
        self._keys = keys
        self._by_uid: dict[str, Entry] = {}
        self._uids: dict[GroupKind, set[str]] = {}

    def wanted(self, subject: GroupKind, owner: GroupKind | None) -> frozenset[str]:
        """The annotations the walk reads of an owner of kind `subject` controlled by
        an `owner`: the proof of that edge (`Keys.proof_key`), and of a Deployment
        our stamp keys too (a ReplicaSet child mirrors them)."""
        keys = self._keys
        wanted = {keys.proof_key(subject, owner)} if owner is not None else set()
        if subject == DEPLOYMENT:
            wanted.update(keys.all())
        return frozenset(wanted)

    def __len__(self) -> int:
        return len(self._by_uid)

    def count(self, gk: GroupKind) -> int:
        return len(self._uids.get(gk, ()))

    def get(self, uid: str) -> Obj | None:
        entry = self._by_uid.get(uid)
        return expand(entry) if entry is not None else None

    def slim(self, res: ApiResource, raw: Any) -> Entry | None:
        """The entry for a listed or watched object (None: not an object we can key)."""
        meta = raw.get("metadata") if isinstance(raw, dict) else None
        if not isinstance(meta, dict):
            return None
        uid, name = meta.get("uid"), meta.get("name")
        if not isinstance(uid, str) or not uid or not isinstance(name, str):
            return None
        owner: GroupKind | None = None
        ref: tuple[str, str, str, str] | None = None
        refs = meta.get("ownerReferences")
        for item in refs if isinstance(refs, list) else ():
            if isinstance(item, dict) and item.get("controller") is True:
                api_version = sys.intern(str(item.get("apiVersion", "")))
                kind = sys.intern(str(item.get("kind", "")))
                owner = GroupKind(group_of(api_version), kind)
                ref = (api_version, kind, str(item.get("name", "")), str(item.get("uid", "")))
                break
        kept: tuple[tuple[str, str], ...] = ()
        ann = meta.get("annotations")
        if isinstance(ann, dict):
            wanted = self.wanted(GroupKind(res.group, res.kind), owner)
            kept = tuple(
                (sys.intern(k), v) for k, v in ann.items() if k in wanted and isinstance(v, str)
            )
        # The served apiVersion: the walk compares groups, never versions.
        what = (sys.intern(res.api_version), sys.intern(res.kind))
        created = meta.get("creationTimestamp") if ref is not None else None
        namespace = sys.intern(str(meta.get("namespace") or ""))
        return (what, name, namespace, uid, ref, kept, created if isinstance(created, str) else "")

    def upsert(self, gk: GroupKind, entry: Entry) -> None:
        uid = entry[3]
        self._by_uid[uid] = entry
        self._uids.setdefault(gk, set()).add(uid)

    def delete(self, gk: GroupKind, uid: str) -> None:
        self._by_uid.pop(uid, None)
        self._uids.get(gk, set()).discard(uid)

    def replace(self, gk: GroupKind, entries: dict[str, Entry]) -> None:
        """A completed list: the kind's entries are exactly these now."""
        for uid in self._uids.get(gk, set()) - entries.keys():
            self._by_uid.pop(uid, None)
        self._by_uid.update(entries)
        self._uids[gk] = set(entries)


class _Pass:
    """One list pass: the entries collected, the kind's replaced by them once complete
    (a partial list never half-replaces the index)."""

    def __init__(self, watch: KindWatch, res: ApiResource) -> None:
        self._watch, self._res = watch, res
        self.entries: dict[str, Entry] = {}

    def add(self, obj: Obj) -> None:
        entry = self._watch.store.slim(self._res, obj)
        if entry is not None:
            self.entries[entry[3]] = entry

    def done(self) -> None:
        self._watch.store.replace(self._watch.gk, self.entries)


class KindWatch(Reflector):
    """List and watch one kind into the store, until cancelled (module doc). `retry`:
    seconds between tries of a kind not allowed or not served; `grace`: how long a
    kind whose watch is down still answers; `options`: the reflector's
    (aibom_edge.reflector: `page_size`, `watch_timeout`, `idle_timeout`, backoff,
    `sync_timeout`, the injected clock, sleep and jitter source)."""

    def __init__(
        self,
        kube: Kube,
        gk: GroupKind,
        store: OwnerStore,
        *,
        retry: float = 30.0,
        grace: float = DEFAULT_GRACE,
        on_change: Callable[[KindWatch], None] = lambda w: None,
        **options: Any,
    ) -> None:
        options.setdefault("watch_timeout", DEFAULT_WATCH_TIMEOUT)
        options.setdefault("sync_timeout", DEFAULT_SYNC_TIMEOUT)
        super().__init__(
            kube,
            gk,
            resolve=self._resource,
            log=log,
            retry_message="owner watch failed; retrying (its kind is answered by GETs meanwhile)",
            metadata_only=True,
            list_timeout=60,
            forbidden_retry=retry,
            absent_retry=retry,  # a CRD installed later is picked up
            on_state=on_change,
            **options,
        )
        self.store = store
        self.grace = grace

    async def _resource(self) -> ApiResource | None:
        return await self.kube.discovery.resource(self.gk)

    @property
    def settled(self) -> bool:
        """Readiness need not wait for it: synced, known unreadable, or failing too long."""
        return (
            self.synced.is_set()
            or self.state in (WatchState.FORBIDDEN, WatchState.NO_MATCH)
            or self._clock() - self.started_at > self.sync_timeout
        )

    def settle_in(self) -> float:
        """Seconds until `settled` holds by the sync timeout alone."""
        return self.sync_timeout - (self._clock() - self.started_at)

    @property
    def trusted(self) -> bool:
        """Whether its entries may answer a walk now (module doc)."""
        if not self.synced.is_set():
            return False
        since = self.unhealthy_since
        return since is None or self._clock() - since < self.grace

    def begin_list(self, res: ApiResource) -> _Pass:
        return _Pass(self, res)

    def upsert(self, res: ApiResource, obj: Obj) -> None:
        entry = self.store.slim(res, obj)
        if entry is not None:
            self.store.upsert(self.gk, entry)

    def delete(self, res: ApiResource, obj: Obj) -> None:
        self.store.delete(self.gk, str(metadata(obj).get("uid") or ""))


class OwnerWatch:
    """The index the resolver asks (`OwnerIndex`): one `KindWatch` per owner kind."""

    def __init__(
        self,
        kube: Kube,
        registry: KindRegistry,
        keys: Keys,
        *,
        kinds: list[GroupKind] | None = None,
        on_restart: Callable[[GroupKind, str], None] = lambda gk, why: None,
        **options: Any,
    ) -> None:
        self.store = OwnerStore(keys)
        self.changed = asyncio.Event()
        self.watches = {
            gk: KindWatch(
                kube,
                gk,
                self.store,
                on_change=self._changed,
                on_restart=on_restart,
                **options,
            )
            for gk in (kinds if kinds is not None else owner_kinds(registry))
        }

    def _changed(self, watch: KindWatch) -> None:
        self.changed.set()
        log.log(
            logging.WARNING if watch.state is WatchState.FORBIDDEN else logging.DEBUG,
            "owner watch state",
            extra={"kind": str(watch.gk), "state": watch.state.value, "error": watch.last_error},
        )

    def owner(self, uid: str, gk: GroupKind) -> Obj | None:
        watch = self.watches.get(gk)
        if watch is None or not watch.trusted:
            return None
        return self.store.get(uid)

    @property
    def settled(self) -> bool:
        return all(w.settled for w in self.watches.values())

    def summary(self) -> str:
        """`kind=state` for each kind, for /readyz and the log."""
        return ", ".join(
            f"{gk}={'synced' if w.healthy else w.state.value}" for gk, w in self.watches.items()
        )

    async def run(self) -> None:
        """Every kind's watch, until cancelled."""
        async with asyncio.TaskGroup() as tg:
            for gk, watch in self.watches.items():
                tg.create_task(watch.run(), name=f"owner-watch {gk}")

    async def wait_settled(self) -> None:
        """Until every kind is settled (the sync timeout bounds it)."""
        while not self.settled:
            self.changed.clear()
            left = max((w.settle_in() for w in self.watches.values()), default=0.0)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(left, 0.0) + 0.05):
                    await self.changed.wait()
