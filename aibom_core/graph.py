"""The in-memory ownership graph of a set of objects (design 005 §2). Pure.

One index serves the offline scan (built once from a dump) and the annotator
(kept current from watch events with `upsert` / `remove`):

- objects by key (their UID; a synthetic key for manifests that have none);
- objects by (namespace, group, kind, name), which is what a live GET reads,
  so the in-memory `lookup` behaves exactly like the webhook's API lookup and
  the walk's UID check decides, as it does live;
- controller claims by owner UID: "child C says owner U controls it". A claim
  is an edge only while an object with that UID exists *and* has the group,
  kind and name the reference names. An owner deleted and re-created under
  the same name gets a new UID, so the stale child's claim is no edge and it
  is never adopted.

Pods are nodes like any other: an LWS leader Pod controller-owns its worker
StatefulSet.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from aibom_core.kinds import GroupKind, KindRegistry
from aibom_core.objects import Obj, ObjRef, OwnerRef, controller_ref, ref_of
from aibom_core.walk import DEFAULT_MAX_DEPTH, Fetched, OwnerRequest, Reason, WalkResult, resolve

NameKey = tuple[str, str, str, str]  # namespace, group, kind, name


def key_of(ref: ObjRef) -> str:
    """The graph key of an object: its UID, or a synthetic key when it has none."""
    return ref.uid or f"\x00{ref.namespace}/{ref.hop}"


@dataclass(frozen=True, slots=True)
class _Node:
    obj: Obj
    ref: ObjRef
    owner: OwnerRef | None


class OwnershipGraph:
    """Objects indexed for the upward walk and the descendant closure.

    `unavailable` maps kinds the reader cannot see to the reason a live GET
    would fail with (`Forbidden` when RBAC denies them, `NoMatch` when the
    server does not serve them); a lookup of such a kind fails that way even
    when no object of it is known. Any other absent owner is `NotFound`.
    """

    def __init__(
        self,
        registry: KindRegistry,
        *,
        max_depth: int = DEFAULT_MAX_DEPTH,
        unavailable: Mapping[GroupKind, Reason] | None = None,
    ) -> None:
        self.registry = registry
        self.max_depth = max_depth
        self.unavailable: dict[GroupKind, Reason] = dict(unavailable or {})
        self._nodes: dict[str, _Node] = {}
        self._by_name: dict[NameKey, str] = {}
        self._claims: dict[str, set[str]] = {}

    # -- maintenance ---------------------------------------------------------

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, key: object) -> bool:
        return key in self._nodes

    def get(self, key: str) -> Obj | None:
        node = self._nodes.get(key)
        return node.obj if node else None

    def ref(self, key: str) -> ObjRef | None:
        node = self._nodes.get(key)
        return node.ref if node else None

    def objects(self) -> Iterator[Obj]:
        return (node.obj for node in self._nodes.values())

    def keys(self) -> Iterator[str]:
        return iter(self._nodes)

    def upsert(self, obj: Obj) -> str:
        """Add or replace an object; returns its key."""
        ref = ref_of(obj)
        key = key_of(ref)
        if key in self._nodes:
            self._unlink(key)
        owner = controller_ref(obj)
        self._nodes[key] = _Node(obj=obj, ref=ref, owner=owner)
        self._by_name[(ref.namespace, ref.group, ref.kind, ref.name)] = key
        if owner is not None and owner.uid:
            self._claims.setdefault(owner.uid, set()).add(key)
        return key

    def remove(self, key: str) -> Obj | None:
        """Forget an object; returns it if it was known."""
        node = self._nodes.get(key)
        if node is None:
            return None
        self._unlink(key)
        return node.obj

    def _unlink(self, key: str) -> None:
        node = self._nodes.pop(key)
        name_key = (node.ref.namespace, node.ref.group, node.ref.kind, node.ref.name)
        if self._by_name.get(name_key) == key:
            del self._by_name[name_key]
        if node.owner is not None and node.owner.uid:
            claims = self._claims.get(node.owner.uid)
            if claims is not None:
                claims.discard(key)
                if not claims:
                    del self._claims[node.owner.uid]

    # -- the walk ------------------------------------------------------------

    def lookup(self, req: OwnerRequest) -> Fetched:
        """What a live GET of the owner by namespace/kind/name would return."""
        gk = req.owner.group_kind
        reason = self.unavailable.get(gk)
        if reason is not None:
            return Fetched(failure=reason)
        key = self._by_name.get((req.namespace, gk.group, gk.kind, req.owner.name))
        if key is None:
            return Fetched(failure=Reason.NOT_FOUND)
        return Fetched(obj=self._nodes[key].obj)

    def resolve(self, obj: Obj) -> WalkResult:
        return resolve(obj, registry=self.registry, lookup=self.lookup, max_depth=self.max_depth)

    def resolve_key(self, key: str) -> WalkResult | None:
        node = self._nodes.get(key)
        return self.resolve(node.obj) if node else None

    # -- downward ------------------------------------------------------------

    def parent_of(self, key: str) -> str | None:
        """The key of the object's controller, if the reference is a valid edge."""
        node = self._nodes.get(key)
        if node is None or node.owner is None:
            return None
        owner = self._nodes.get(node.owner.uid)
        if owner is None or not _names(owner.ref, node.owner, node.ref.namespace):
            return None
        return node.owner.uid

    def children_of(self, key: str) -> list[str]:
        """Keys of the objects this one validly controls, in a stable order."""
        node = self._nodes.get(key)
        if node is None or not node.ref.uid:
            return []
        out = []
        for child_key in self._claims.get(node.ref.uid, ()):
            child = self._nodes[child_key]
            assert child.owner is not None
            if _names(node.ref, child.owner, child.ref.namespace):
                out.append(child_key)
        out.sort(key=lambda k: _order(self._nodes[k].ref))
        return out

    def descendants(self, key: str) -> list[str]:
        """Every object below `key` through valid edges, breadth first, bounded.

        Bounded by the walk's depth cap (nothing deeper can resolve up to
        `key`) and guarded against cycles by a visited set.
        """
        seen = {key}
        out: list[str] = []
        frontier = [key]
        for _ in range(self.max_depth):
            nxt: list[str] = []
            for k in frontier:
                for child in self.children_of(k):
                    if child not in seen:
                        seen.add(child)
                        nxt.append(child)
            out.extend(nxt)
            if not nxt:
                break
            frontier = nxt
        return out

    def members(self, root_key: str) -> tuple[list[str], list[str]]:
        """The tracked descendants and the Pods whose own walk ends at this root.

        Each descendant's membership is decided by its own upward walk (the
        same function that produced its stamp), so the document and the
        stamps never disagree, also at the depth cap.
        """
        root = self._nodes.get(root_key)
        if root is None or not root.ref.uid:
            return [], []
        owned: list[str] = []
        pods: list[str] = []
        for k in self.descendants(root_key):
            node = self._nodes[k]
            gk = node.ref.group_kind
            is_pod = gk == POD
            if not is_pod and not self.registry.is_tracked(gk):
                continue
            result = self.resolve(node.obj)
            if result.root is None or result.root.uid != root.ref.uid:
                continue
            (pods if is_pod else owned).append(k)
        owned.sort(key=lambda k: _order(self._nodes[k].ref))
        pods.sort(key=lambda k: _order(self._nodes[k].ref))
        return owned, pods

    def namespace_keys(self, namespace: str) -> list[str]:
        return [k for k, n in self._nodes.items() if n.ref.namespace == namespace]


POD = GroupKind("", "Pod")


def _names(owner: ObjRef, ref: OwnerRef, child_namespace: str) -> bool:
    return (
        owner.namespace == child_namespace
        and owner.group_kind == ref.group_kind
        and owner.name == ref.name
    )


def _order(ref: ObjRef) -> tuple[str, str, str, str]:
    return (ref.kind, ref.name, ref.group, ref.uid)


def build_graph(
    objects: Iterable[Obj],
    registry: KindRegistry,
    *,
    max_depth: int = DEFAULT_MAX_DEPTH,
    unavailable: Mapping[GroupKind, Reason] | None = None,
) -> OwnershipGraph:
    graph = OwnershipGraph(registry, max_depth=max_depth, unavailable=unavailable)
    for obj in objects:
        graph.upsert(obj)
    return graph
