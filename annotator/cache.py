"""The annotator's view of the cluster, kept current from watch events. Pure.

It holds the ownership graph (tracked kinds, walk-only intermediates,
ReplicaSets, Pods), the namespaces' labels (opt-in) and the metadata of our
own ConfigMaps, and answers one question per event: which keys did this
change make dirty?

- The documents affected are those of the roots the changed objects resolve
  to, before and after the change, found with the same UID-checked walk
  that makes the stamps (`OwnershipGraph.resolve`). A Pod event therefore
  dirties exactly the root whose document covers it, and never the
  ReplicaSet or Deployment in between: children do not re-trigger each
  other, the root is enqueued directly.
- Only an ownership change (a new or deleted object, a changed controller
  reference) can move the objects below it to another root; then the whole
  subtree is re-resolved. Any other update dirties one root.
- While the first lists load (`bulk`), nothing is analysed: the controller
  does one full resync when every informer has synced.
- Our documents are judged by content, not by who wrote them. The cache
  keeps no data, so it remembers, per document, the resourceVersion whose
  content we know: the one our last apply returned, or the one a reconcile
  last found current (`vouch`). A document at any other resourceVersion was
  written since by someone, whatever field manager they named, and
  `configmap()` hands it out marked stale (`FOREIGN_DATA`, as slim marks a
  document whose managedFields show another writer's data): the next apply
  (force) makes the content ours again, and is a no-op on the server if it
  already was.

No I/O and no clock: the controller feeds it and drains the dirty keys.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from aibom_core.document import DocLabels, configmap_name, is_document
from aibom_core.graph import OwnershipGraph, key_of, refused_here
from aibom_core.kinds import CONFIGMAP, NAMESPACE, GroupKind, KindRegistry
from aibom_core.objects import Obj, controller_ref, metadata, ref_of
from aibom_core.opt_in import DEFAULT_OPT_IN, guard_opted_out, opted_in
from aibom_core.provenance import ProofTrust
from aibom_core.stamp import Keys
from aibom_core.walk import DEFAULT_MAX_DEPTH, Reason, Rollup, WalkResult
from annotator.configmap import FOREIGN_DATA
from annotator.keys import RootKey, SweepKey

CmName = tuple[str, str]  # namespace, name


@dataclass
class Dirty:
    """Keys a change made dirty; `full` asks for a resync of everything."""

    roots: set[RootKey] = field(default_factory=set)
    stamps: set[str] = field(default_factory=set)
    sweeps: set[SweepKey] = field(default_factory=set)
    full: bool = False

    def update(self, other: Dirty) -> None:
        self.roots |= other.roots
        self.stamps |= other.stamps
        self.sweeps |= other.sweeps
        self.full = self.full or other.full

    def __bool__(self) -> bool:
        return bool(self.roots or self.stamps or self.sweeps or self.full)


class ClusterState:
    """See the module docstring."""

    def __init__(
        self,
        registry: KindRegistry,
        *,
        max_depth: int = DEFAULT_MAX_DEPTH,
        opt_in_label: tuple[str, str] = DEFAULT_OPT_IN,
        labels: DocLabels | None = None,
        provenance_key: bytes | None = None,
        keys: Keys | None = None,
        trust_all: bool = False,
    ) -> None:
        self.labels = labels or DocLabels()
        # Provenance: an edge counts when the webhook's edge-proof verifies
        # (`trust_all`: every edge counts). Whether the namespace is guarded is
        # reported in each document; it proves no edge (aibom_core.provenance).
        self.binding_exists = False  # the guard is in force (`aibom_core.guard.in_force`)
        self.trust_all = trust_all
        self.trust = ProofTrust(key=provenance_key, keys=keys or Keys())
        self.graph = OwnershipGraph(
            registry, max_depth=max_depth, trust=None if trust_all else self.trust
        )
        self.registry = registry
        self.opt_in_label = opt_in_label
        self.namespaces: dict[str, Mapping[str, str]] = {}
        self.configmaps: dict[CmName, Obj] = {}
        self._cm_by_uid: dict[str, set[CmName]] = {}
        # The resourceVersion of each document whose content we know (module doc).
        self._vouched: dict[CmName, str] = {}
        self.kind_counts: Counter[GroupKind] = Counter()
        self._opted: set[str] = set()
        self._opted_frozen: frozenset[str] = frozenset()
        self.bulk = True

    # -- reading -------------------------------------------------------------

    def opted_in(self, namespace: str) -> bool:
        return namespace in self._opted

    def guard_disabled(self, namespace: str) -> bool:
        """Opted in, but labelled out of the provenance guard."""
        return guard_opted_out(self.namespaces.get(namespace))

    def guarded(self, namespace: str) -> bool:
        """The contract's guarded namespace: opted in, no opt-out label, binding exists."""
        return (
            self.binding_exists and namespace in self._opted and not self.guard_disabled(namespace)
        )

    def set_binding(self, exists: bool) -> Dirty:
        """The guard came into force or went out of it (its binding appeared, went away,
        or changed): every document says whether its namespace is guarded."""
        if exists == self.binding_exists:
            return Dirty()
        self.binding_exists = exists
        return Dirty(full=not self.bulk)

    def unproven_edges(self) -> tuple[Counter[str], Counter[str]]:
        """Per opted-in namespace, controller edges (to a known owner) not followed:
        (not proven, adopted by an owner whose Pod template the child does not run)."""
        unproven: Counter[str] = Counter()
        mismatched: Counter[str] = Counter()
        graph = self.graph
        if graph.trust is None:
            return unproven, mismatched
        for key in list(graph.keys()):
            ref = graph.ref(key)
            if ref is None or ref.namespace not in self._opted or graph.parent_of(key) is None:
                continue
            obj = graph.get(key)
            owner = controller_ref(obj) if obj is not None else None
            why = graph.trust(obj, ref, owner) if obj is not None and owner is not None else None
            if why is Reason.ADOPTED_MISMATCH:
                mismatched[ref.namespace] += 1
            elif why is not None:
                unproven[ref.namespace] += 1
        return unproven, mismatched

    def _labelled(self, labels: Mapping[str, str]) -> bool:
        return opted_in(labels, self.opt_in_label)

    def resolve(self, key: str) -> WalkResult | None:
        return self.graph.resolve_key(key)

    def root_key_of(self, key: str) -> RootKey | None:
        """The root whose document covers the object `key` (None: no document does)."""
        result = self.graph.resolve_key(key)
        if result is None or result.root is None or not result.root.uid:
            return None
        return RootKey.of(result.root)

    def listing_root_of(self, key: str) -> RootKey | None:
        """The root whose document lists the object as unproven (its own edge is
        refused): the root covering its owner. None otherwise."""
        result = self.graph.resolve_key(key)
        if result is None or not refused_here(result):
            return None
        parent = self.graph.parent_of(key)
        return self.root_key_of(parent) if parent is not None else None

    def _roots_of(self, key: str) -> set[RootKey]:
        """The documents an object's change can alter: its root's, or the one listing it."""
        out = set()
        root = self.root_key_of(key)
        if root is not None:
            out.add(root)
        listing = self.listing_root_of(key)
        if listing is not None:
            out.add(listing)
        return out

    def roots(self, namespaces: Iterable[str] | None = None) -> list[RootKey]:
        """Every root now (tracked objects whose walk says root or unresolved), sorted."""
        wanted = set(namespaces) if namespaces is not None else None
        out = []
        for key in list(self.graph.keys()):
            ref = self.graph.ref(key)
            if ref is None or not self.registry.is_tracked(ref.group_kind):
                continue
            if wanted is not None and ref.namespace not in wanted:
                continue
            result = self.graph.resolve_key(key)
            if result is not None and result.status in (
                Rollup.ROOT,
                Rollup.UNRESOLVED,
                Rollup.UNPROVEN,
            ):
                out.append(RootKey.of(ref))
        out.sort()
        return out

    def opted_in_namespaces(self) -> list[str]:
        return sorted(self._opted)

    @property
    def opted_in_set(self) -> frozenset[str]:
        """The opted-in namespaces (kept current from Namespace events; do not mutate)."""
        return self._opted_frozen

    def ours(self, cm: Obj) -> bool:
        """Whether a ConfigMap labelled as an AIBOM document is one of ours: its name is
        the one the contract gives the document of the object its root-UID label
        names (`aibom_core.document.configmap_name`: a workload, or one of a kind no
        longer tracked), in that object's namespace.

        The labels prove nothing: anyone who may update a ConfigMap can label it
        as ours, and the annotator may delete any ConfigMap so labelled. Its
        name cannot be changed by an update, and only a workload's own
        document is named after it. A labelled ConfigMap whose workload we do
        not know is left alone (the garbage collector removes a document of
        ours with its root, through its ownerReference)."""
        meta = metadata(cm)
        ref = self.graph.ref(self.labels.root_uid_of(cm))
        return (
            ref is not None
            and ref.namespace == meta.get("namespace")
            and meta.get("name") == configmap_name(ref.kind, ref.name)
        )

    def docs_of(self, uid: str) -> list[Obj]:
        """Our ConfigMaps (`ours`) that are the document of the object with this UID."""
        names = sorted(self._cm_by_uid.get(uid, ()))
        return [cm for cm in (self.configmaps[n] for n in names) if self.ours(cm)]

    def docs_in(self, namespace: str) -> list[Obj]:
        """Our ConfigMaps (`ours`) in a namespace."""
        return [
            cm
            for (ns, _), cm in sorted(self.configmaps.items())
            if ns == namespace and self.ours(cm)
        ]

    def doc_namespaces(self) -> list[str]:
        return sorted({ns for ns, _ in self.configmaps})

    def configmap(self, namespace: str, name: str) -> Obj | None:
        """Our cached document, marked stale (`FOREIGN_DATA`) when it changed since the
        resourceVersion whose content we know (module doc)."""
        cm = self.configmaps.get((namespace, name))
        if cm is None or cm.get(FOREIGN_DATA):
            return cm
        known = self._vouched.get((namespace, name))
        if known is not None and known != metadata(cm).get("resourceVersion"):
            return {**cm, FOREIGN_DATA: True}
        return cm

    def vouch(self, namespace: str, name: str) -> None:
        """A reconcile found the cached document current: its content is ours at this
        resourceVersion (the first judgement after a start knows no better)."""
        cm = self.configmaps.get((namespace, name))
        rv = metadata(cm).get("resourceVersion") if cm is not None else None
        if isinstance(rv, str) and rv and not (cm or {}).get(FOREIGN_DATA):
            self._vouched[(namespace, name)] = rv

    # -- keys for the informers' relist bookkeeping ----------------------------

    @staticmethod
    def key(gk: GroupKind, obj: Obj) -> str:
        meta = metadata(obj)
        if gk == NAMESPACE:
            return f"ns\x00{meta.get('name', '')}"
        if gk == CONFIGMAP:
            return f"cm\x00{meta.get('namespace', '')}\x00{meta.get('name', '')}"
        uid = meta.get("uid")
        # key_of(ref_of(obj)) without building the ref: its UID when it has one
        # (every listed object; this runs once per object of every list).
        return uid if isinstance(uid, str) and uid else key_of(ref_of(obj))

    def get(self, gk: GroupKind, key: str) -> Obj | None:
        if gk == NAMESPACE:
            labels = self.namespaces.get(key.split("\x00", 1)[1])
            return None if labels is None else _namespace_obj(key.split("\x00", 1)[1], labels)
        if gk == CONFIGMAP:
            _, ns, name = key.split("\x00", 2)
            return self.configmaps.get((ns, name))
        return self.graph.get(key)

    def keys_of_kind(self, gk: GroupKind) -> Iterator[str]:
        if gk == NAMESPACE:
            return (f"ns\x00{n}" for n in list(self.namespaces))
        if gk == CONFIGMAP:
            return (f"cm\x00{ns}\x00{n}" for ns, n in list(self.configmaps))
        return (
            k
            for k in list(self.graph.keys())
            if (r := self.graph.ref(k)) is not None and r.group_kind == gk
        )

    # -- events ----------------------------------------------------------------

    def upsert(self, gk: GroupKind, obj: Obj) -> Dirty:
        """An object was added or modified (or listed)."""
        if gk == NAMESPACE:
            return self._namespace(obj, deleted=False)
        if gk == CONFIGMAP:
            return self._configmap(obj, deleted=False)
        return self._graph_upsert(obj)

    def delete(self, gk: GroupKind, obj: Obj) -> Dirty:
        """An object was deleted (or is missing from a relist)."""
        if gk == NAMESPACE:
            return self._namespace(obj, deleted=True)
        if gk == CONFIGMAP:
            return self._configmap(obj, deleted=True)
        return self._graph_delete(key_of(ref_of(obj)))

    def delete_key(self, gk: GroupKind, key: str) -> Dirty:
        obj = self.get(gk, key)
        return self.delete(gk, obj) if obj is not None else Dirty()

    def set_unavailable(self, gk: GroupKind, reason: Reason | None) -> Dirty:
        """A kind became unreadable (Forbidden, NoMatch) or readable again."""
        current = self.graph.unavailable.get(gk)
        if current == reason:
            return Dirty()
        if reason is None:
            del self.graph.unavailable[gk]
        else:
            self.graph.unavailable[gk] = reason
        # Every walk through that kind changes: resync (rare: RBAC or CRD changes).
        return Dirty(full=not self.bulk)

    def drop_kind(self, gk: GroupKind) -> Dirty:
        """Forget every cached object of a kind (its CRD went away)."""
        dirty = Dirty()
        for key in list(self.keys_of_kind(gk)):
            dirty.update(self.delete_key(gk, key))
        return dirty

    def note_configmap(self, obj: Obj) -> None:
        """Record a ConfigMap we just wrote (the watch event that follows is then a no-op)
        and vouch for its content."""
        self._configmap(obj, deleted=False)
        meta = metadata(obj)
        name = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        rv = meta.get("resourceVersion")
        if name in self.configmaps and isinstance(rv, str) and rv:
            self._vouched[name] = rv

    def forget_configmap(self, namespace: str, name: str) -> None:
        self._unindex_cm((namespace, name))
        self._vouched.pop((namespace, name), None)

    # -- graph objects -----------------------------------------------------------

    def _graph_upsert(self, obj: Obj) -> Dirty:
        ref = ref_of(obj)
        key = key_of(ref)
        old = self.graph.get(key)
        if old is not None and _same_version(old, obj):
            return Dirty()
        if old is None:
            self.kind_counts[ref.group_kind] += 1
        if self.bulk:
            self.graph.upsert(obj, ref)
            return Dirty()
        if old is not None and controller_ref(old) == controller_ref(obj):
            self.graph.upsert(obj, ref)
            dirty = Dirty(stamps={key})
            dirty.roots |= self._roots_of(key)
            return dirty
        if old is None:
            # New: objects that already claimed this UID (children created
            # first) attach now. Their roots before are read with the object
            # briefly absent again, which is exactly the state before.
            self.graph.upsert(obj, ref)
            below = self.graph.descendants(key)
            self.graph.remove(key)
            dirty = Dirty()
            for child in below:
                dirty.update(self._subtree(child, descendants=False))
            self.graph.upsert(obj, ref)
        else:
            dirty = self._subtree(key)
            self.graph.upsert(obj, ref)
        dirty.update(self._subtree(key))
        return dirty

    def _graph_delete(self, key: str) -> Dirty:
        ref = self.graph.ref(key)
        if ref is None:
            return Dirty()
        self.kind_counts[ref.group_kind] -= 1
        if self.bulk:
            self.graph.remove(key)
            return Dirty()
        dirty = self._subtree(key)
        children = self.graph.descendants(key)
        self.graph.remove(key)
        dirty.stamps.discard(key)
        for child in children:
            dirty.update(self._subtree(child, descendants=False))
        return dirty

    def _subtree(self, key: str, *, descendants: bool = True) -> Dirty:
        """The object and (optionally) its descendants: their roots and stamps."""
        dirty = Dirty()
        if key not in self.graph:
            return dirty
        keys = [key, *self.graph.descendants(key)] if descendants else [key]
        for k in keys:
            dirty.stamps.add(k)
            dirty.roots |= self._roots_of(k)
        return dirty

    # -- namespaces ----------------------------------------------------------------

    def _namespace(self, obj: Obj, *, deleted: bool) -> Dirty:
        meta = metadata(obj)
        name = str(meta.get("name", ""))
        was = self.opted_in(name)
        if deleted:
            self.namespaces.pop(name, None)
            self._opted.discard(name)
            self._opted_frozen = frozenset(self._opted)
            return Dirty()
        labels = meta.get("labels")
        was_guarded = self.guarded(name)
        roots_before = set(self.roots([name])) if not self.bulk and was else set()
        self.namespaces[name] = dict(labels) if isinstance(labels, dict) else {}
        now = self._labelled(self.namespaces[name])
        if now != was:
            (self._opted.add if now else self._opted.discard)(name)
            self._opted_frozen = frozenset(self._opted)
        if not self.bulk and was and now and self.guarded(name) != was_guarded:
            # Guarded or not any more (opt-out label): every document of the
            # namespace says so (no edge, and so no stamp, changes with it).
            return Dirty(roots=roots_before | set(self.roots([name])))
        if self.bulk or was == now:
            return Dirty()
        if now:
            # Opted in: every root of the namespace gets its document, and
            # stamps are checked if repairs are limited to opted-in namespaces.
            dirty = Dirty(roots=set(self.roots([name])))
            dirty.stamps = set(self.graph.namespace_keys(name))
            return dirty
        return Dirty(sweeps={SweepKey(name)})

    # -- our ConfigMaps --------------------------------------------------------------

    def _configmap(self, obj: Obj, *, deleted: bool) -> Dirty:
        meta = metadata(obj)
        name = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        old = self.configmaps.get(name)
        if deleted:
            self._vouched.pop(name, None)
            if old is None:
                return Dirty()  # we deleted it ourselves and already forgot it
            self._unindex_cm(name)
            return Dirty() if self.bulk else self._doc_dirty(old, deleted=True)
        if old is not None and _same_version(old, obj):
            return Dirty()
        self._unindex_cm(name)
        if not is_document(obj):
            return Dirty()
        self.configmaps[name] = obj
        uid = self.labels.root_uid_of(obj)
        if uid:
            self._cm_by_uid.setdefault(uid, set()).add(name)
        return Dirty() if self.bulk else self._doc_dirty(obj, deleted=False)

    def _unindex_cm(self, name: CmName) -> None:
        old = self.configmaps.pop(name, None)
        if old is None:
            return
        uid = self.labels.root_uid_of(old)
        names = self._cm_by_uid.get(uid)
        if names is not None:
            names.discard(name)
            if not names:
                del self._cm_by_uid[uid]

    def _doc_dirty(self, cm: Obj, *, deleted: bool) -> Dirty:
        """Someone else changed one of our documents: which key makes it true again."""
        ns = str(metadata(cm).get("namespace", ""))
        if not self.opted_in(ns):
            return Dirty() if deleted else Dirty(sweeps={SweepKey(ns)})
        uid = self.labels.root_uid_of(cm)
        if uid not in self.graph:
            return Dirty()  # its root is gone: the garbage collector removes it
        root = self.root_key_of(uid)
        if root is None:
            return Dirty(sweeps={SweepKey(ns)})
        return Dirty(roots={root})


def _same_version(old: Obj, new: Obj) -> bool:
    rv = metadata(new).get("resourceVersion")
    return bool(rv) and metadata(old).get("resourceVersion") == rv


def _namespace_obj(name: str, labels: Mapping[str, str]) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
